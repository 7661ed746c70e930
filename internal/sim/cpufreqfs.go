package sim

import (
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

// cpufreqFS is the cpufreq core's side of the policy files, as Linux 6.8
// (the tree's kernel; frequency QoS since 5.3) handles them: a write to
// scaling_max_freq or scaling_min_freq is a request, parsed with
// sscanf("%u") (EINVAL when it is not a number); the policy's limits are
// then resolved as cpufreq_set_policy does — the driver's verify clamps
// max to [cpuinfo_min_freq, cpuinfo_max_freq] and min to
// [cpuinfo_min_freq, max] (a max below the min request wins), and
// __resolve_freq snaps them to the driver's frequency table where it has
// one (acpi-cpufreq's P-states: max to the highest at or below it, min to
// the lowest at or above it); the files show the resolved limits.
// Attributes without a store method (cpuinfo_*, scaling_cur_freq,
// related_cpus, …) refuse writes with EACCES, as kernfs does;
// scaling_governor is written as a plain file.
type cpufreqFS struct {
	mu  sync.Mutex
	req map[string][2]int64 // policy dir → min and max request (kHz)
}

func newCpufreqFS() *cpufreqFS { return &cpufreqFS{req: map[string][2]int64{}} }

// Owns reports whether p is in a cpufreq policy directory.
func (c *cpufreqFS) Owns(p string) bool { return strings.HasPrefix(p, cpufreqRoot+"/policy") }

// The QoS defaults: no minimum, no maximum (FREQ_QOS_MIN/MAX_DEFAULT_VALUE).
const (
	freqQoSMinDefault = 0
	freqQoSMaxDefault = math.MaxInt32
)

func (c *cpufreqFS) Mkdir(h *host.Host, p string) error {
	os.Remove(h.Path(p))
	return &fs.PathError{Op: "mkdir", Path: h.Path(p), Err: syscall.EPERM}
}

func (c *cpufreqFS) Remove(h *host.Host, p string) (bool, error) {
	return true, &fs.PathError{Op: "remove", Path: h.Path(p), Err: syscall.EPERM}
}

func (c *cpufreqFS) Write(h *host.Host, p string, data []byte) (bool, error) {
	dir, file := path.Split(p)
	dir = strings.TrimSuffix(dir, "/")
	if _, err := os.Stat(h.Path(p)); err != nil {
		return true, &fs.PathError{Op: "open", Path: h.Path(p), Err: syscall.ENOENT}
	}
	switch file {
	case "scaling_max_freq", "scaling_min_freq":
	case "scaling_governor", "scaling_setspeed", "energy_performance_preference":
		return false, nil
	default:
		return true, &fs.PathError{Op: "open", Path: h.Path(p), Err: syscall.EACCES}
	}
	v, ok := scanUint(string(data))
	if !ok || v > math.MaxInt32 {
		return true, &fs.PathError{Op: "write", Path: h.Path(p), Err: syscall.EINVAL}
	}
	hwMin, err1 := h.ReadInt(dir + "/cpuinfo_min_freq")
	hwMax, err2 := h.ReadInt(dir + "/cpuinfo_max_freq")
	if err1 != nil || err2 != nil {
		return true, fmt.Errorf("cpufreq emulation: %s: cpuinfo limits unreadable", dir)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, known := c.req[dir]
	if !known {
		r = [2]int64{freqQoSMinDefault, freqQoSMaxDefault}
	}
	if file == "scaling_min_freq" {
		r[0] = int64(v)
	} else {
		r[1] = int64(v)
	}
	c.req[dir] = r
	maxF := min(max(r[1], hwMin), hwMax)
	minF := min(max(r[0], hwMin), maxF)
	if table := freqTable(h, dir); len(table) > 0 {
		maxF = resolveFreq(table, maxF, false)
		minF = min(resolveFreq(table, minF, true), maxF)
	}
	for name, val := range map[string]int64{"scaling_max_freq": maxF, "scaling_min_freq": minF} {
		if err := os.WriteFile(h.Path(dir+"/"+name), []byte(strconv.FormatInt(val, 10)+"\n"), 0o644); err != nil {
			return true, err
		}
	}
	return true, nil
}

// scanUint is sscanf's "%u": optional leading white space, then digits;
// what follows them is ignored.
func scanUint(s string) (uint64, bool) {
	s = strings.TrimLeft(s, " \t\n")
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	if n == 0 {
		return 0, false
	}
	v, err := strconv.ParseUint(s[:n], 10, 64)
	return v, err == nil
}

// freqTable is the driver's frequency table as scaling_available_frequencies
// lists it (none under intel_pstate).
func freqTable(h *host.Host, dir string) []int64 {
	str, err := h.ReadString(dir + "/scaling_available_frequencies")
	if err != nil {
		return nil
	}
	var out []int64
	for _, f := range strings.Fields(str) {
		if v, err := strconv.ParseInt(f, 10, 64); err == nil {
			out = append(out, v)
		}
	}
	return out
}

// resolveFreq is cpufreq_frequency_table_target: with low the lowest table
// frequency at or above target (CPUFREQ_RELATION_L), else the highest at
// or below it (CPUFREQ_RELATION_H); when there is none on that side, the
// nearest on the other.
func resolveFreq(table []int64, target int64, low bool) int64 {
	best, found := int64(0), false
	for _, f := range table {
		if (low && f >= target && (!found || f < best)) || (!low && f <= target && (!found || f > best)) {
			best, found = f, true
		}
	}
	if found {
		return best
	}
	for _, f := range table {
		if !found || (low && f > best) || (!low && f < best) {
			best, found = f, true
		}
	}
	return best
}
