package sense

import (
	"path/filepath"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

func openTree(t *testing.T, name string) *host.Host {
	t.Helper()
	h, err := host.Open(filepath.Join("..", "..", "testdata", "hosts", name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func TestRAPLZones(t *testing.T) {
	zones, err := RAPLZones(openTree(t, "intel-skx-2s"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, z := range zones {
		names = append(names, z.Name)
		if !z.EnergyReadable || z.MaxEnergyUJ == 0 {
			t.Errorf("zone %+v", z)
		}
	}
	if len(names) != 4 || names[0] != "package-0" || names[1] != "dram" || zones[1].Path != "/sys/class/powercap/intel-rapl:0:0" {
		t.Errorf("zones = %v (%+v)", names, zones)
	}
	if _, err := RAPLZones(openTree(t, "amd-milan-1s")); err == nil {
		t.Error("AMD tree has no powercap; want an error")
	}
}
