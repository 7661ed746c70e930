package sense

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

// freqPolicyFiles is a complete acpi-cpufreq policy directory below
// sys/devices/system/cpu/cpufreq/<name>.
func freqPolicyFiles(name string) map[string]string {
	d := "sys/devices/system/cpu/cpufreq/" + name + "/"
	return map[string]string{
		d + "related_cpus":                  "2 18\n",
		d + "affected_cpus":                 "2\n",
		d + "cpuinfo_min_freq":              "1500000\n",
		d + "cpuinfo_max_freq":              "3000000\n",
		d + "scaling_min_freq":              "1500000\n",
		d + "scaling_max_freq":              "2200000\n",
		d + "scaling_driver":                "acpi-cpufreq\n",
		d + "scaling_governor":              "schedutil\n",
		d + "scaling_available_governors":   "performance schedutil\n",
		d + "scaling_available_frequencies": "3000000 1500000 2200000 2200000\n",
	}
}

func openFreqTree(t *testing.T, files map[string]string) *host.Host {
	t.Helper()
	h, err := host.Open(cgTree(t, files))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func TestFreqPolicies(t *testing.T) {
	const p2 = "sys/devices/system/cpu/cpufreq/policy2/"
	with := func(edit func(map[string]string)) map[string]string {
		files := freqPolicyFiles("policy2")
		edit(files)
		return files
	}
	tests := []struct {
		name    string
		files   map[string]string
		cpus    string // want.CPUs as a list
		want    FreqPolicy
		wantErr string // substring; "" for success
	}{
		{
			name:  "full policy",
			files: freqPolicyFiles("policy2"),
			cpus:  "2,18",
			want: FreqPolicy{Name: "policy2", Driver: "acpi-cpufreq", Governor: "schedutil",
				Governors: []string{"performance", "schedutil"},
				HWMinKHz:  1500000, HWMaxKHz: 3000000, ScaleMinKHz: 1500000, ScaleMaxKHz: 2200000,
				AvailableKHz: []int64{1500000, 2200000, 3000000}},
		},
		{
			name:  "affected_cpus when related_cpus is absent",
			files: with(func(m map[string]string) { delete(m, p2+"related_cpus") }),
			cpus:  "2",
			want: FreqPolicy{Name: "policy2", Driver: "acpi-cpufreq", Governor: "schedutil",
				Governors: []string{"performance", "schedutil"},
				HWMinKHz:  1500000, HWMaxKHz: 3000000, ScaleMinKHz: 1500000, ScaleMaxKHz: 2200000,
				AvailableKHz: []int64{1500000, 2200000, 3000000}},
		},
		{
			name: "no frequency table, driver or governor",
			files: with(func(m map[string]string) {
				for _, f := range []string{"scaling_available_frequencies", "scaling_driver", "scaling_governor", "scaling_available_governors"} {
					delete(m, p2+f)
				}
			}),
			cpus: "2,18",
			want: FreqPolicy{Name: "policy2", HWMinKHz: 1500000, HWMaxKHz: 3000000, ScaleMinKHz: 1500000, ScaleMaxKHz: 2200000},
		},
		{
			name:    "no CPUs at all",
			files:   with(func(m map[string]string) { delete(m, p2+"related_cpus"); delete(m, p2+"affected_cpus") }),
			wantErr: "no related_cpus nor affected_cpus",
		},
		{
			name:    "CPU list in the wrong format",
			files:   with(func(m map[string]string) { m[p2+"related_cpus"] = "2-3\n" }),
			wantErr: `bad CPU "2-3"`,
		},
		{
			name:    "missing hardware maximum",
			files:   with(func(m map[string]string) { delete(m, p2+"cpuinfo_max_freq") }),
			wantErr: "cpuinfo_max_freq",
		},
		{
			name:    "hardware limits upside down",
			files:   with(func(m map[string]string) { m[p2+"cpuinfo_max_freq"] = "1000000\n" }),
			wantErr: "make no sense",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pols, err := FreqPolicies(openFreqTree(t, tt.files))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one saying %q (policies %+v)", err, tt.wantErr, pols)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(pols) != 1 {
				t.Fatalf("%d policies, want 1: %+v", len(pols), pols)
			}
			got := pols[0]
			if got.CPUs.String() != tt.cpus {
				t.Errorf("CPUs = %s, want %s", got.CPUs, tt.cpus)
			}
			if got.Name != tt.want.Name || got.Driver != tt.want.Driver || got.Governor != tt.want.Governor ||
				!slices.Equal(got.Governors, tt.want.Governors) || !slices.Equal(got.AvailableKHz, tt.want.AvailableKHz) ||
				got.HWMinKHz != tt.want.HWMinKHz || got.HWMaxKHz != tt.want.HWMaxKHz ||
				got.ScaleMinKHz != tt.want.ScaleMinKHz || got.ScaleMaxKHz != tt.want.ScaleMaxKHz {
				t.Errorf("policy = %+v\nwant     %+v", got, tt.want)
			}
			if got.Dir() != "/sys/devices/system/cpu/cpufreq/policy2" {
				t.Errorf("Dir() = %s", got.Dir())
			}
		})
	}
}

func TestFreqPoliciesOrderAndAbsence(t *testing.T) {
	files := map[string]string{}
	for _, n := range []string{"policy10", "policy2", "policy0"} {
		maps.Copy(files, freqPolicyFiles(n))
	}
	pols, err := FreqPolicies(openFreqTree(t, files))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pols {
		names = append(names, p.Name)
	}
	if want := []string{"policy0", "policy2", "policy10"}; !slices.Equal(names, want) {
		t.Errorf("order %v, want %v (by policy number, not by name)", names, want)
	}

	pols, err = FreqPolicies(openFreqTree(t, map[string]string{"sys/devices/system/cpu/": ""}))
	if err != nil || len(pols) != 0 {
		t.Errorf("no cpufreq directory: %v, %v; want no policies and no error", pols, err)
	}
}

func TestFreqPoliciesCapturedTrees(t *testing.T) {
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
