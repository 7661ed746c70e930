package agent

import (
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// BusLockReports are the kernel's reports of bus-locking threads
// (sense.KernelBusLocks): who took split or bus locks, on a host whose
// PMU cannot count them.
type BusLockReports interface {
	Read() ([]sense.BusLockReport, error)
	Close() error
}

// kernelReportWindow is how long a report counts as evidence against its
// tenant. The kernel logs #DB reports at most ten per five seconds for the
// whole host, and #AC once per thread, so a tenant still locking is named
// again within a window unless others fill the rate limit.
const kernelReportWindow = 10 * time.Second

// kernelBusLocks attributes the kernel's reports to tenants.
type kernelBusLocks struct {
	src BusLockReports
	// cgroupsOf reads a thread's cgroup paths (sense.ThreadCgroups), for a
	// thread the tenants' thread lists do not hold yet.
	cgroupsOf func(tid int) ([]string, error)
	log       *slog.Logger
	recent    map[string][]time.Time // tenant ID → its reports' times within the window
	totals    map[string]float64     // tenant ID → its reports since first seen
}

func newKernelBusLocks(src BusLockReports, cgroupsOf func(int) ([]string, error), log *slog.Logger) *kernelBusLocks {
	return &kernelBusLocks{src: src, cgroupsOf: cgroupsOf, log: log,
		recent: map[string][]time.Time{}, totals: map[string]float64{}}
}

// observe reads the new reports, attributes them, and sets each sample's
// count of reports in the window.
func (k *kernelBusLocks) observe(now time.Time, samples []sample) error {
	reports, err := k.src.Read()
	// A thread is looked up once a read: the ring read at start can name
	// the same threads thousands of times, most of them long gone.
	found := map[int]int{}
	for _, r := range reports {
		i, ok := found[r.TID]
		if !ok {
			i = k.tenantOf(r.TID, samples)
			found[r.TID] = i
		}
		if i < 0 {
			continue // a thread of no tenant (the host's own), or gone
		}
		id := samples[i].t.ID
		k.recent[id] = append(k.recent[id], now)
		k.totals[id]++
		if k.totals[id] == 1 { // its first report
			k.log.Info("the kernel reports bus locks by a tenant's thread", "tenant", id, "name", samples[i].t.Name,
				"thread", r.TID, "comm", r.Comm, "trap", r.Trap)
		}
	}
	present := make(map[string]bool, len(samples))
	for i := range samples {
		id := samples[i].t.ID
		present[id] = true
		times := slices.DeleteFunc(k.recent[id], func(t time.Time) bool { return now.Sub(t) > kernelReportWindow })
		if len(times) == 0 {
			delete(k.recent, id)
		} else {
			k.recent[id] = times
		}
		samples[i].kernelBusLocks = len(times)
		samples[i].kernelBusLocksTotal = k.totals[id]
	}
	for id := range k.totals {
		if !present[id] {
			delete(k.totals, id)
			delete(k.recent, id)
		}
	}
	return err
}

// tenantOf finds the sample whose tenant holds thread tid: in the thread
// lists discovery read, else by the thread's cgroup (the deepest tenant
// cgroup that holds it); -1 for none.
func (k *kernelBusLocks) tenantOf(tid int, samples []sample) int {
	for i := range samples {
		if slices.Contains(samples[i].t.Threads, tid) {
			return i
		}
	}
	if k.cgroupsOf == nil {
		return -1
	}
	paths, err := k.cgroupsOf(tid)
	if err != nil {
		return -1
	}
	best, bestLen := -1, -1
	for i := range samples {
		cg := strings.TrimSuffix(samples[i].t.Cgroup, "/")
		if cg == "" || len(cg) <= bestLen {
			continue
		}
		for _, p := range paths {
			if p == cg || strings.HasPrefix(p, cg+"/") {
				best, bestLen = i, len(cg)
				break
			}
		}
	}
	return best
}
