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

func TestFreqPolicies(t *testing.T) {
	pols, err := FreqPolicies(openTree(t, "intel-skx-2s"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pols) != 32 || pols[10].Name != "policy10" || pols[10].CPUs.String() != "10" ||
		pols[0].Driver != "intel_pstate" || pols[0].Governor != "powersave" || pols[0].HWMaxKHz != 3000000 {
		t.Errorf("policies: %d, first %+v, 11th %+v", len(pols), pols[0], pols[10])
	}
	pols, err = FreqPolicies(openTree(t, "dev-epyc-vm"))
	if err != nil || len(pols) != 0 {
		t.Errorf("dev machine policies = %v, %v; want none", pols, err)
	}
}
