package sense

import (
	"cmp"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

const cpufreqDir = "/sys/devices/system/cpu/cpufreq"

// FreqPolicy is one cpufreq policy (a group of CPUs scaled together).
type FreqPolicy struct {
	Name        string     `json:"name"` // policy0
	CPUs        cpuset.Set `json:"cpus"`
	Driver      string     `json:"driver"`
	Governor    string     `json:"governor"`
	Governors   []string   `json:"available_governors,omitempty"`
	HWMinKHz    int64      `json:"cpuinfo_min_khz"`
	HWMaxKHz    int64      `json:"cpuinfo_max_khz"`
	ScaleMinKHz int64      `json:"scaling_min_khz"`
	ScaleMaxKHz int64      `json:"scaling_max_khz"`
}

// FreqPolicies reads every cpufreq policy. An empty result without error
// means the kernel has no cpufreq driver (typical inside VMs).
func FreqPolicies(h *host.Host) ([]FreqPolicy, error) {
	dirs, err := h.Glob(cpufreqDir + "/policy[0-9]*")
	if err != nil {
		return nil, err
	}
	out := []FreqPolicy{}
	for _, d := range dirs {
		p := FreqPolicy{Name: path.Base(d)}
		p.Driver, _ = h.ReadString(d + "/scaling_driver")
		p.Governor, _ = h.ReadString(d + "/scaling_governor")
		if s, err := h.ReadString(d + "/scaling_available_governors"); err == nil {
			p.Governors = strings.Fields(s)
		}
		if s, err := h.ReadString(d + "/affected_cpus"); err == nil {
			// affected_cpus is space separated ("0 1"), unlike cpu lists.
			var ids []int
			for _, f := range strings.Fields(s) {
				if n, err := strconv.Atoi(f); err == nil && n >= 0 && n <= cpuset.MaxCPU {
					ids = append(ids, n)
				}
			}
			p.CPUs = cpuset.Of(ids...)
		}
		p.HWMinKHz, _ = h.ReadInt(d + "/cpuinfo_min_freq")
		p.HWMaxKHz, _ = h.ReadInt(d + "/cpuinfo_max_freq")
		p.ScaleMinKHz, _ = h.ReadInt(d + "/scaling_min_freq")
		p.ScaleMaxKHz, _ = h.ReadInt(d + "/scaling_max_freq")
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b FreqPolicy) int {
		ai, _ := strconv.Atoi(strings.TrimPrefix(a.Name, "policy"))
		bi, _ := strconv.Atoi(strings.TrimPrefix(b.Name, "policy"))
		return cmp.Compare(ai, bi)
	})
	return out, nil
}
