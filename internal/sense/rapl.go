package sense

import (
	"path"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

const powercap = "/sys/class/powercap"

// RAPLZone is one powercap RAPL zone (package-0, dram, core, psys, …).
type RAPLZone struct {
	Path           string `json:"path"`
	Name           string `json:"name"`
	EnergyReadable bool   `json:"energy_readable"`
	MaxEnergyUJ    uint64 `json:"max_energy_range_uj,omitempty"`
}

// RAPLZones lists the RAPL zones under /sys/class/powercap. Since Linux 5.10
// energy_uj is readable by root only (the PLATYPUS side channel), so
// EnergyReadable also tells whether crosstalk's privileges are enough.
func RAPLZones(h *host.Host) ([]RAPLZone, error) {
	ents, err := h.ReadDir(powercap)
	if err != nil {
		return nil, err
	}
	zones := []RAPLZone{}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "intel-rapl:") {
			continue // "intel-rapl" itself is the control type, not a zone
		}
		dir := path.Join(powercap, e.Name())
		name, err := h.ReadString(dir + "/name")
		if err != nil {
			continue
		}
		z := RAPLZone{Path: dir, Name: name}
		_, err = h.ReadUint(dir + "/energy_uj")
		z.EnergyReadable = err == nil
		z.MaxEnergyUJ, _ = h.ReadUint(dir + "/max_energy_range_uj")
		zones = append(zones, z)
	}
	return zones, nil
}
