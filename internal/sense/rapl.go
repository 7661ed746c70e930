package sense

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

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

// PackagePower is one package's power over the last interval, from RAPL.
type PackagePower struct {
	Package int     `json:"package"`
	Watts   float64 `json:"watts"`
	// DRAMWatts is the package's DRAM zone (server parts), when it has one.
	DRAMWatts float64 `json:"dram_watts,omitempty"`
	HasDRAM   bool    `json:"has_dram"`
}

// raplCounter is one energy counter the meter follows.
type raplCounter struct {
	path    string // the zone directory
	pkg     int
	dram    bool
	maxUJ   uint64
	prev    uint64
	primed  bool
	lastErr error
}

// RAPLMeter turns the RAPL energy counters of the powercap framework
// (/sys/class/powercap/intel-rapl:N/energy_uj, microjoules) into watts per
// package, and per package DRAM where the platform has a DRAM zone. The
// counters wrap at max_energy_range_uj (2^32 energy units: 262 kJ on a
// Skylake-SP package, about 29 minutes at 150 W): a reading below the
// previous one has wrapped once, and the meter must be read more often
// than a wrap takes.
//
// Zones: a top-level "package-N" (or "package-N-die-M", summed into its
// package) is the package; its "dram" subzone the DRAM. "psys" (platform)
// and "core"/"uncore" subzones are not used: core and uncore are inside the
// package figure.
type RAPLMeter struct {
	h        *host.Host
	counters []*raplCounter
	prevAt   time.Time
}

// NewRAPLMeter finds the package and DRAM zones. The error says, as doctor
// does, why there is no RAPL here.
func NewRAPLMeter(h *host.Host) (*RAPLMeter, error) {
	zones, err := RAPLZones(h)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, errors.New("no RAPL: no /sys/class/powercap (kernel without powercap, or a VM)")
	case err != nil:
		return nil, fmt.Errorf("no RAPL: %w", err)
	}
	m := &RAPLMeter{h: h}
	pkgOf := map[string]int{}
	for _, z := range zones {
		if pkg, ok := raplPackage(z.Name); ok && strings.Count(path.Base(z.Path), ":") == 1 {
			pkgOf[path.Base(z.Path)] = pkg
		}
	}
	for _, z := range zones {
		base := path.Base(z.Path)
		c := &raplCounter{path: z.Path, maxUJ: z.MaxEnergyUJ}
		switch parts := strings.Split(base, ":"); {
		case len(parts) == 2:
			pkg, ok := pkgOf[base]
			if !ok {
				continue // psys and other platform zones
			}
			c.pkg = pkg
		case len(parts) == 3 && z.Name == "dram":
			pkg, ok := pkgOf[parts[0]+":"+parts[1]]
			if !ok {
				continue
			}
			c.pkg, c.dram = pkg, true
		default:
			continue
		}
		if !z.EnergyReadable {
			return nil, fmt.Errorf("no RAPL: %s/energy_uj is not readable by this user (root only since Linux 5.10)", h.Path(z.Path))
		}
		if z.MaxEnergyUJ == 0 {
			return nil, fmt.Errorf("no RAPL: %s/max_energy_range_uj is missing, so counter wraps cannot be told from resets", h.Path(z.Path))
		}
		m.counters = append(m.counters, c)
	}
	if len(pkgOf) == 0 {
		return nil, errors.New("no RAPL: powercap present but no intel-rapl package zones (modprobe intel_rapl_msr; AMD needs Linux 5.8+)")
	}
	return m, nil
}

// raplPackage parses "package-0" and "package-1-die-0".
func raplPackage(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "package-")
	if !ok {
		return 0, false
	}
	rest, _, _ = strings.Cut(rest, "-die-")
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0
}

// RAPLDelta is the energy between two readings of a counter that wraps to
// zero after maxUJ.
func RAPLDelta(prev, cur, maxUJ uint64) uint64 {
	if cur >= prev {
		return cur - prev
	}
	return maxUJ - prev + cur
}

// Read samples every counter at now and returns the power of each package
// since the previous Read, sorted by package; the first Read only primes
// the counters and returns nil. A counter that cannot be read is left out
// (its package too, when it is the package counter) and re-primed; the
// errors are returned joined.
func (m *RAPLMeter) Read(now time.Time) ([]PackagePower, error) {
	dt := now.Sub(m.prevAt).Seconds()
	first := m.prevAt.IsZero()
	m.prevAt = now
	byPkg := map[int]*PackagePower{}
	measured := map[int]bool{} // the package counter itself was read
	var errs []error
	for _, c := range m.counters {
		cur, err := m.h.ReadUint(c.path + "/energy_uj")
		if err != nil {
			errs = append(errs, fmt.Errorf("RAPL: %w", err))
			c.primed = false
			continue
		}
		if cur > c.maxUJ {
			errs = append(errs, fmt.Errorf("RAPL: %s/energy_uj %d above max_energy_range_uj %d", m.h.Path(c.path), cur, c.maxUJ))
			c.primed = false
			continue
		}
		prev, primed := c.prev, c.primed
		c.prev, c.primed = cur, true
		if first || !primed || dt <= 0 {
			continue
		}
		w := float64(RAPLDelta(prev, cur, c.maxUJ)) / 1e6 / dt
		p := byPkg[c.pkg]
		if p == nil {
			p = &PackagePower{Package: c.pkg}
			byPkg[c.pkg] = p
		}
		if c.dram {
			p.DRAMWatts += w
			p.HasDRAM = true
		} else {
			p.Watts += w
			measured[c.pkg] = true
		}
	}
	var out []PackagePower
	for _, p := range byPkg {
		if measured[p.Package] {
			out = append(out, *p)
		}
	}
	slices.SortFunc(out, func(a, b PackagePower) int { return a.Package - b.Package })
	return out, errors.Join(errs...)
}
