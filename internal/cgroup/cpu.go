package cgroup

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
)

// Quota is a CFS bandwidth limit: the group may run Quota of CPU time per
// Period, across all its CPUs. Quota <= 0 means unlimited.
type Quota struct {
	Quota  time.Duration `json:"quota"`
	Period time.Duration `json:"period"`
}

// Unlimited reports whether the quota places no limit.
func (q Quota) Unlimited() bool { return q.Quota <= 0 }

// CPUs is the quota as a number of CPUs (0.5 = half a CPU); 0 when unlimited.
func (q Quota) CPUs() float64 {
	if q.Unlimited() || q.Period <= 0 {
		return 0
	}
	return float64(q.Quota) / float64(q.Period)
}

func (q Quota) String() string {
	if q.Unlimited() {
		return fmt.Sprintf("max/%s", q.Period)
	}
	return fmt.Sprintf("%s/%s (%.2f CPU)", q.Quota, q.Period, q.CPUs())
}

// Kernel bounds for CFS bandwidth (kernel/sched/core.c): period 1 ms – 1 s,
// quota at least 1 ms.
const (
	MinPeriod = time.Millisecond
	MaxPeriod = time.Second
	MinQuota  = time.Millisecond
)

// Validate checks a quota against the kernel's bounds before any write.
func (q Quota) Validate() error {
	if q.Period < MinPeriod || q.Period > MaxPeriod {
		return fmt.Errorf("cpu period %s outside %s–%s", q.Period, MinPeriod, MaxPeriod)
	}
	if !q.Unlimited() && q.Quota < MinQuota {
		return fmt.Errorf("cpu quota %s below the kernel's minimum %s", q.Quota, MinQuota)
	}
	return nil
}

func (g *Group) cpuDir() (dir, version string, err error) {
	switch g.l.CPUControl() {
	case "v2":
		return path.Join(g.l.V2, g.Name), "v2", nil
	case "v1":
		return path.Join(g.l.V1["cpu"], g.Name), "v1", nil
	}
	return "", "", fmt.Errorf("cgroup %s: no cpu controller on this host", g.Name)
}

// CPUQuota reads the group's current CFS bandwidth limit.
func (g *Group) CPUQuota() (Quota, error) {
	dir, v, err := g.cpuDir()
	if err != nil {
		return Quota{}, err
	}
	if v == "v2" {
		s, err := g.h.ReadString(path.Join(dir, "cpu.max"))
		if err != nil {
			return Quota{}, err
		}
		return ParseCPUMax(s)
	}
	p, err := g.h.ReadInt(path.Join(dir, "cpu.cfs_period_us"))
	if err != nil {
		return Quota{}, err
	}
	q, err := g.h.ReadInt(path.Join(dir, "cpu.cfs_quota_us"))
	if err != nil {
		return Quota{}, err
	}
	return Quota{Quota: usec(q), Period: usec(p)}, nil
}

// SetCPUQuota writes the group's CFS bandwidth limit.
func (g *Group) SetCPUQuota(q Quota) error {
	if err := q.Validate(); err != nil {
		return fmt.Errorf("cgroup %s: %w", g.Name, err)
	}
	dir, v, err := g.cpuDir()
	if err != nil {
		return err
	}
	if v == "v2" {
		return g.h.WriteFile(path.Join(dir, "cpu.max"), []byte(FormatCPUMax(q)))
	}
	quota := "-1"
	if !q.Unlimited() {
		quota = strconv.FormatInt(q.Quota.Microseconds(), 10)
	}
	period := strconv.FormatInt(q.Period.Microseconds(), 10)
	// Lift the limit before changing the period so no intermediate state is
	// stricter than either end; set the period before a new finite quota.
	if q.Unlimited() {
		if err := g.h.WriteFile(path.Join(dir, "cpu.cfs_quota_us"), []byte(quota)); err != nil {
			return err
		}
		return g.h.WriteFile(path.Join(dir, "cpu.cfs_period_us"), []byte(period))
	}
	if err := g.h.WriteFile(path.Join(dir, "cpu.cfs_period_us"), []byte(period)); err != nil {
		return err
	}
	return g.h.WriteFile(path.Join(dir, "cpu.cfs_quota_us"), []byte(quota))
}

// ParseCPUMax parses v2 cpu.max ("max 100000" or "50000 100000").
func ParseCPUMax(s string) (Quota, error) {
	f := strings.Fields(s)
	if len(f) == 0 || len(f) > 2 {
		return Quota{}, fmt.Errorf("cpu.max %q: want QUOTA [PERIOD]", s)
	}
	q := Quota{Period: 100 * time.Millisecond}
	if len(f) == 2 {
		p, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || p <= 0 {
			return Quota{}, fmt.Errorf("cpu.max %q: bad period", s)
		}
		q.Period = usec(p)
	}
	if f[0] != "max" {
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || n <= 0 {
			return Quota{}, fmt.Errorf("cpu.max %q: bad quota", s)
		}
		q.Quota = usec(n)
	}
	return q, nil
}

// FormatCPUMax renders a quota for v2 cpu.max.
func FormatCPUMax(q Quota) string {
	if q.Unlimited() {
		return fmt.Sprintf("max %d", q.Period.Microseconds())
	}
	return fmt.Sprintf("%d %d", q.Quota.Microseconds(), q.Period.Microseconds())
}

func usec(n int64) time.Duration {
	if n < 0 {
		return -1
	}
	return time.Duration(n) * time.Microsecond
}

// CPUStat is a group's cumulative CPU accounting.
type CPUStat struct {
	Usage       time.Duration // CPU time consumed
	Throttled   time.Duration // time the group spent throttled by its quota
	NrPeriods   uint64
	NrThrottled uint64
}

// StringReader reads a host file as trimmed text: *host.Host, or a
// *host.Rereader that keeps hot files open between intervals.
type StringReader interface {
	ReadString(p string) (string, error)
}

// CPUStat reads usage and throttling. Usage comes from the cgroup2 cpu.stat
// (present even without controllers on hybrid hosts) or v1 cpuacct.usage;
// throttling from the hierarchy that holds the cpu controller.
func (g *Group) CPUStat() (CPUStat, error) { return g.CPUStatFrom(g.h) }

// UsageFrom reads the CPU time consumed, from the one file that has it:
// cgroup2 cpu.stat (present even without controllers on hybrid hosts), else
// v1 cpuacct.usage. On pure v2 that file also holds the throttling counters,
// which it fills in too; ThrottlingFrom completes the rest on v1.
func (g *Group) UsageFrom(r StringReader) (CPUStat, error) {
	var st CPUStat
	var firstErr error
	if g.l.V2 != "" {
		s, err := r.ReadString(path.Join(g.l.V2, g.Name, "cpu.stat"))
		if err == nil {
			kv := ParseKV(s)
			if n, ok := kv["usage_usec"]; ok {
				st.Usage = time.Duration(n) * time.Microsecond
				if g.l.CPUControl() == "v2" {
					st.Throttled = time.Duration(kv["throttled_usec"]) * time.Microsecond
					st.NrPeriods, st.NrThrottled = uint64(kv["nr_periods"]), uint64(kv["nr_throttled"])
				}
				return st, nil
			}
		}
		firstErr = err
	}
	// v1 only, or a group that exists in v1 but not in cgroup2.
	if m := g.l.V1["cpuacct"]; m != "" {
		s, err := r.ReadString(path.Join(m, g.Name, "cpuacct.usage"))
		if err == nil {
			n, err := strconv.ParseInt(s, 10, 64)
			if err == nil {
				st.Usage = time.Duration(n)
				return st, nil
			}
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if firstErr == nil {
		firstErr = fmt.Errorf("cgroup %s: no CPU usage accounting found", g.Name)
	}
	return st, firstErr
}

// ThrottlingFrom completes st (from UsageFrom) with the v1 cpu controller's
// throttling counters; on v2 UsageFrom already read them.
func (g *Group) ThrottlingFrom(r StringReader, st *CPUStat) error {
	if g.l.CPUControl() != "v1" {
		return nil
	}
	s, err := r.ReadString(path.Join(g.l.V1["cpu"], g.Name, "cpu.stat"))
	if err != nil {
		return err
	}
	kv := ParseKV(s)
	st.Throttled = time.Duration(kv["throttled_time"])
	st.NrPeriods, st.NrThrottled = uint64(kv["nr_periods"]), uint64(kv["nr_throttled"])
	return nil
}

// CPUStatFrom is CPUStat reading through r.
func (g *Group) CPUStatFrom(r StringReader) (CPUStat, error) {
	st, err := g.UsageFrom(r)
	if err != nil {
		return st, err
	}
	return st, g.ThrottlingFrom(r, &st)
}

// ParseKV parses "key value" lines, skipping malformed ones.
func ParseKV(s string) map[string]int64 {
	out := map[string]int64{}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			out[f[0]] = n
		}
	}
	return out
}
