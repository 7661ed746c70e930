package sense

import (
	"math"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

func TestPollutionRate(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		misses, cycles, freqKH float64
		want                   float64
		ok                     bool
	}{
		// Kyoto's machine, a 2.8 GHz E5-1603 v3: one busy second is 2.8e9
		// cycles, so 1e6 misses in it are 1000 misses per millisecond.
		{"kyoto machine, 1 s busy", 1e6, 2.8e9, 2.8e6, 1000, true},
		// Half the time on the CPU, same misses per busy cycle: same rate.
		{"half busy, same aggressiveness", 0.5e6, 1.4e9, 2.8e6, 1000, true},
		// The same misses in fewer cycles is more aggressive.
		{"twice the miss density", 1e6, 1.4e9, 2.8e6, 2000, true},
		{"did not run", 0, 0, 2.8e6, 0, false},
		{"no frequency", 1e6, 2.8e9, 0, 0, false},
		{"negative", -1, 2.8e9, 2.8e6, 0, false},
		{"NaN", math.NaN(), 2.8e9, 2.8e6, 0, false},
		{"Inf", 1, math.Inf(1), 2.8e6, 0, false},
	} {
		got, ok := PollutionRate(tc.misses, tc.cycles, tc.freqKH)
		if ok != tc.ok || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: %v %v, want %v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	// From perf rates (per second): the seconds cancel.
	if r, ok := TenantPollution(map[string]float64{EventLLCMisses: 2e6, EventCycles: 2.8e9}, 2.8e6); !ok || math.Abs(r-2000) > 1e-9 {
		t.Errorf("TenantPollution = %v %v", r, ok)
	}
	if _, ok := TenantPollution(map[string]float64{EventCycles: 2.8e9}, 2.8e6); ok {
		t.Error("no llc_misses (Zen 1) gave a rate")
	}
}

func TestNominalFreqTrees(t *testing.T) {
	for _, tc := range []struct {
		tree   string
		khz    int64
		source string
	}{
		// intel_pstate without base_frequency: cpuinfo_max_freq is the 3.0 GHz
		// turbo, the model name has the 1.8 GHz nominal.
		{"intel-skx-2s", 1800000, FreqFromModelName},
		// acpi-cpufreq: P0, the EPYC 7313's 3.0 GHz base.
		{"amd-milan-1s", 3000000, FreqFromACPIMax},
		// No cpufreq in the VM: the current speed, said so.
		{"dev-epyc-vm", 2445400, FreqFromCPUMHz},
	} {
		khz, src, err := NominalFreq(openTree(t, tc.tree))
		if err != nil || khz != tc.khz || src != tc.source {
			t.Errorf("%s: %d %q %v, want %d %q", tc.tree, khz, src, err, tc.khz, tc.source)
		}
	}
}

func TestNominalFreqSources(t *testing.T) {
	root := t.TempDir()
	write := func(p, s string) { t.Helper(); writeTestFile(t, root, p, s) }
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, _, err := NominalFreq(h); err == nil {
		t.Error("empty tree gave a frequency")
	}
	write("proc/cpuinfo", "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8163 CPU @ 2.50GHz\ncpu MHz\t\t: 3100.000\n")
	if khz, src, _ := NominalFreq(h); khz != 2500000 || src != FreqFromModelName {
		t.Errorf("model name: %d %s", khz, src)
	}
	write("sys/devices/system/cpu/cpufreq/policy0/amd_pstate_nominal_freq", "2450000\n")
	if khz, src, _ := NominalFreq(h); khz != 2450000 || src != FreqFromAMDPstate {
		t.Errorf("amd-pstate: %d %s", khz, src)
	}
	write("sys/devices/system/cpu/cpufreq/policy0/base_frequency", "2100000\n")
	if khz, src, _ := NominalFreq(h); khz != 2100000 || src != FreqFromBaseFrequency {
		t.Errorf("base_frequency: %d %s", khz, src)
	}
}
