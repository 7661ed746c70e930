package judge

import (
	"strings"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
)

// skxLevers is the Skylake-SP tree's shape: CPU n and n+16 are SMT
// siblings, one cpufreq policy per CPU.
func skxLevers() LeverHost {
	h := LeverHost{Siblings: map[int]cpuset.Set{}, ClockModulation: true, CPUFreq: true, ClockModSteps: 16, CPUFreqSteps: 16, QuotaSteps: 16}
	for c := 0; c < 16; c++ {
		h.Siblings[c] = cpuset.Of(c, c+16)
		h.Siblings[c+16] = cpuset.Of(c, c+16)
	}
	for c := 0; c < 32; c++ {
		h.FreqDomains = append(h.FreqDomains, cpuset.Of(c))
	}
	return h
}

func TestChooseLevers(t *testing.T) {
	all := []Lever{LeverClockModulation, LeverCPUFreq, LeverCPUQuota}
	tenants := []LeverTenant{
		{ID: "vm-a", CPUs: cpuset.MustParse("0-3,16-19")}, // whole cores, alone
		{ID: "vm-b", CPUs: cpuset.MustParse("4-5")},       // half cores
		{ID: "pod-c", CPUs: cpuset.MustParse("6-7,22-23")},
		{ID: "pod-d", CPUs: cpuset.MustParse("7,23")}, // overlaps pod-c
		{ID: "vm-e", CPUs: cpuset.MustParse("8-9,24-25")},
		{ID: "vm-f"}, // cpus unknown
	}
	for _, c := range []struct {
		name    string
		host    func(LeverHost) LeverHost
		prefer  []Lever
		tenants []LeverTenant
		want    map[string]Lever
		why     map[string]string
	}{
		{"Intel", nil, all, tenants,
			map[string]Lever{"vm-a": LeverClockModulation, "vm-b": LeverCPUQuota, "pod-c": LeverCPUQuota, "pod-d": LeverCPUQuota, "vm-e": LeverClockModulation, "vm-f": LeverCPUQuota},
			map[string]string{"vm-b": "cpu 4 shares its core with cpu 20", "pod-c": "cpus 7,23 are shared with other tenants", "vm-f": "its CPUs are unknown"}},
		{"AMD: no clock modulation", func(h LeverHost) LeverHost {
			h.ClockModulation, h.ClockModulationWhy = false, "AMD CPUs have no IA32_CLOCK_MODULATION"
			return h
		}, all, tenants,
			map[string]Lever{"vm-a": LeverCPUFreq, "vm-b": LeverCPUQuota, "vm-e": LeverCPUFreq},
			map[string]string{"vm-a": "no clock modulation: AMD CPUs have no IA32_CLOCK_MODULATION"}},
		{"a policy spanning other tenants' CPUs", func(h LeverHost) LeverHost {
			h.ClockModulation, h.ClockModulationWhy = false, "off"
			h.FreqDomains = []cpuset.Set{cpuset.MustParse("0-7,16-23"), cpuset.MustParse("8-15,24-31")}
			return h
		}, all, []LeverTenant{{ID: "vm-a", CPUs: cpuset.MustParse("0-3,16-19")}},
			map[string]Lever{"vm-a": LeverCPUQuota},
			map[string]string{"vm-a": "a cpufreq policy scales cpus 0-7,16-23 together, and 4-7,20-23 are not the tenant's"}},
		{"unconfined tenant shares everything", nil, all, []LeverTenant{{ID: "vm-a", CPUs: cpuset.MustParse("0-3,16-19")}, {ID: "ctr", CPUs: cpuset.Range(0, 31)}},
			map[string]Lever{"vm-a": LeverCPUQuota, "ctr": LeverCPUQuota}, nil},
		{"no fallback configured", nil, []Lever{LeverClockModulation}, []LeverTenant{{ID: "vm-b", CPUs: cpuset.MustParse("4-5")}},
			map[string]Lever{"vm-b": ""}, map[string]string{"vm-b": "no usable lever"}},
	} {
		h := skxLevers()
		if c.host != nil {
			h = c.host(h)
		}
		got := ChooseLevers(c.tenants, h, c.prefer)
		if len(got) != len(c.tenants) {
			t.Fatalf("%s: %d choices for %d tenants", c.name, len(got), len(c.tenants))
		}
		for _, ch := range got {
			if want, ok := c.want[ch.Tenant]; ok && ch.Lever != want {
				t.Errorf("%s: %s got %q (%s), want %q", c.name, ch.Tenant, ch.Lever, ch.Reason, want)
			}
			if why, ok := c.why[ch.Tenant]; ok && !strings.Contains(ch.Reason, why) {
				t.Errorf("%s: %s reason %q lacks %q", c.name, ch.Tenant, ch.Reason, why)
			}
			if ch.Lever != "" && (ch.Steps != 16 || !ch.CPUs.Equal(tenantCPUs(c.tenants, ch.Tenant))) {
				t.Errorf("%s: %s steps %d cpus %s", c.name, ch.Tenant, ch.Steps, ch.CPUs)
			}
		}
	}
}

func tenantCPUs(ts []LeverTenant, id string) cpuset.Set {
	for _, t := range ts {
		if t.ID == id {
			return t.CPUs
		}
	}
	return cpuset.Set{}
}

func TestParseLevers(t *testing.T) {
	if l, err := ParseLevers("x", []string{"cpufreq", "cpu_quota"}); err != nil || len(l) != 2 || l[0] != LeverCPUFreq {
		t.Errorf("%v %v", l, err)
	}
	for _, bad := range [][]string{nil, {"rapl"}, {"cpu_quota", "cpu_quota"}} {
		if _, err := ParseLevers("x", bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
