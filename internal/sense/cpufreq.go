package sense

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

// CPUFreqDir holds the cpufreq policies, one policyN directory each.
const CPUFreqDir = "/sys/devices/system/cpu/cpufreq"

// FreqPolicy is one cpufreq policy (a group of CPUs scaled together), as
// both the doctor and the cpufreq actuator read it.
type FreqPolicy struct {
	Name string `json:"name"` // policy0
	// CPUs are related_cpus: every CPU the policy scales, online or not
	// (affected_cpus, the online ones, where related_cpus is absent). A
	// limit written to the policy slows all of them.
	CPUs        cpuset.Set `json:"cpus"`
	Driver      string     `json:"driver"`
	Governor    string     `json:"governor"`
	Governors   []string   `json:"available_governors,omitempty"`
	HWMinKHz    int64      `json:"cpuinfo_min_khz"`
	HWMaxKHz    int64      `json:"cpuinfo_max_khz"`
	ScaleMinKHz int64      `json:"scaling_min_khz"`
	ScaleMaxKHz int64      `json:"scaling_max_khz"`
	// AvailableKHz is scaling_available_frequencies, ascending and without
	// repeats; nil when the driver lists none (intel_pstate, amd-pstate).
	AvailableKHz []int64 `json:"available_khz,omitempty"`
}

// Dir is the policy's sysfs directory.
func (p FreqPolicy) Dir() string { return CPUFreqDir + "/" + p.Name }

// FreqPolicies reads every cpufreq policy, sorted by policy number. An
// empty result without error means the kernel has no cpufreq driver
// (typical inside VMs). A policy whose CPUs or frequency limits cannot be
// read, or whose hardware limits make no sense, is an error: the actuator
// must not guess which CPUs a limit slows, and the doctor reports the
// error rather than a half-read policy.
func FreqPolicies(h *host.Host) ([]FreqPolicy, error) {
	dirs, err := h.Glob(CPUFreqDir + "/policy[0-9]*")
	if err != nil {
		return nil, fmt.Errorf("cpufreq policies: %w", err)
	}
	out := make([]FreqPolicy, 0, len(dirs))
	for _, d := range dirs {
		p, err := readFreqPolicy(h, d)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b FreqPolicy) int {
		ai, _ := strconv.Atoi(strings.TrimPrefix(a.Name, "policy"))
		bi, _ := strconv.Atoi(strings.TrimPrefix(b.Name, "policy"))
		return cmp.Compare(ai, bi)
	})
	return out, nil
}

func readFreqPolicy(h *host.Host, dir string) (FreqPolicy, error) {
	p := FreqPolicy{Name: path.Base(dir)}
	s, err := h.ReadString(dir + "/related_cpus")
	if err != nil {
		s, err = h.ReadString(dir + "/affected_cpus")
	}
	if err != nil {
		return p, fmt.Errorf("cpufreq %s: no related_cpus nor affected_cpus: %w", p.Name, err)
	}
	if p.CPUs, err = spacedCPUs(s); err != nil {
		return p, fmt.Errorf("cpufreq %s: %w", p.Name, err)
	}
	for _, f := range []struct {
		file string
		v    *int64
	}{{"cpuinfo_min_freq", &p.HWMinKHz}, {"cpuinfo_max_freq", &p.HWMaxKHz}, {"scaling_min_freq", &p.ScaleMinKHz}, {"scaling_max_freq", &p.ScaleMaxKHz}} {
		if *f.v, err = h.ReadInt(dir + "/" + f.file); err != nil {
			return p, fmt.Errorf("cpufreq %s: %w", p.Name, err)
		}
	}
	if p.HWMinKHz <= 0 || p.HWMaxKHz < p.HWMinKHz {
		return p, fmt.Errorf("cpufreq %s: cpuinfo limits %d-%d kHz make no sense", p.Name, p.HWMinKHz, p.HWMaxKHz)
	}
	// Driver and governors are descriptive (the doctor shows them); a
	// driver without them still scales.
	p.Driver, _ = h.ReadString(dir + "/scaling_driver")
	p.Governor, _ = h.ReadString(dir + "/scaling_governor")
	if s, err := h.ReadString(dir + "/scaling_available_governors"); err == nil {
		p.Governors = strings.Fields(s)
	}
	if s, err := h.ReadString(dir + "/scaling_available_frequencies"); err == nil {
		for _, f := range strings.Fields(s) {
			if n, err := strconv.ParseInt(f, 10, 64); err == nil && n > 0 {
				p.AvailableKHz = append(p.AvailableKHz, n)
			}
		}
		slices.Sort(p.AvailableKHz)
		p.AvailableKHz = slices.Compact(p.AvailableKHz)
	}
	return p, nil
}

// spacedCPUs parses related_cpus/affected_cpus: space separated ("0 16"),
// unlike the kernel's cpu lists.
func spacedCPUs(s string) (cpuset.Set, error) {
	var ids []int
	for _, f := range strings.Fields(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || n > cpuset.MaxCPU {
			return cpuset.Set{}, fmt.Errorf("bad CPU %q in %q", f, s)
		}
		ids = append(ids, n)
	}
	if len(ids) == 0 {
		return cpuset.Set{}, fmt.Errorf("no CPUs in %q", s)
	}
	return cpuset.Of(ids...), nil
}
