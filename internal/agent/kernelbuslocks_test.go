package agent

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// fakeReports hands out queued reports, one batch a Read.
type fakeReports struct {
	batches [][]sense.BusLockReport
	err     error
}

func (f *fakeReports) Read() ([]sense.BusLockReport, error) {
	if len(f.batches) == 0 {
		return nil, f.err
	}
	b := f.batches[0]
	f.batches = f.batches[1:]
	return b, f.err
}
func (f *fakeReports) Close() error { return nil }

func TestKernelBusLocksAttribution(t *testing.T) {
	samples := func() []sample {
		return []sample{
			{t: sense.Tenant{ID: "/vm1", Cgroup: "/machine.slice/vm1", Threads: []int{10, 11}}},
			{t: sense.Tenant{ID: "/pod", Cgroup: "/kubepods/pod1", Threads: []int{20}}},
			{t: sense.Tenant{ID: "/pod-c", Cgroup: "/kubepods/pod1/c2", Threads: []int{21}}},
		}
	}
	cgroups := map[int][]string{
		// A thread born after discovery read the lists: found by its cgroup,
		// in the deepest tenant that holds it.
		30: {"/kubepods/pod1/c2/inner"},
		// A thread of a sibling whose name shares a prefix: no tenant.
		31: {"/kubepods/pod10"},
	}
	src := &fakeReports{batches: [][]sense.BusLockReport{
		{{TID: 11, Comm: "CPU 1/KVM", Trap: "split_lock"}, {TID: 30, Comm: "x", Trap: "bus_lock"}, {TID: 31, Comm: "y", Trap: "bus_lock"},
			{TID: 99, Comm: "host", Trap: "bus_lock"}, {TID: 99, Comm: "host", Trap: "bus_lock"}, {TID: 99, Comm: "host", Trap: "bus_lock"}},
		{{TID: 11, Comm: "CPU 1/KVM", Trap: "split_lock"}},
	}}
	lookups := map[int]int{}
	k := newKernelBusLocks(src, func(tid int) ([]string, error) {
		lookups[tid]++
		if p, ok := cgroups[tid]; ok {
			return p, nil
		}
		return nil, errors.New("gone")
	}, slog.New(slog.DiscardHandler))

	t0 := time.Unix(1000, 0)
	s := samples()
	if err := k.observe(t0, s); err != nil {
		t.Fatal(err)
	}
	if s[0].kernelBusLocks != 1 || s[1].kernelBusLocks != 0 || s[2].kernelBusLocks != 1 {
		t.Errorf("after the first batch: vm1 %d, pod %d, pod-c %d; want 1, 0, 1", s[0].kernelBusLocks, s[1].kernelBusLocks, s[2].kernelBusLocks)
	}
	if lookups[99] != 1 || lookups[11] != 0 {
		t.Errorf("cgroup lookups %v: want one for thread 99 (named three times), none for 11 (in a thread list)", lookups)
	}
	s = samples()
	k.observe(t0.Add(5*time.Second), s)
	if s[0].kernelBusLocks != 2 || s[0].kernelBusLocksTotal != 2 {
		t.Errorf("vm1 within the window: %d (total %v), want 2 (2)", s[0].kernelBusLocks, s[0].kernelBusLocksTotal)
	}
	// Past the window, the first reports no longer count; the totals stay.
	s = samples()
	k.observe(t0.Add(kernelReportWindow+2*time.Second), s)
	if s[0].kernelBusLocks != 1 || s[2].kernelBusLocks != 0 || s[0].kernelBusLocksTotal != 2 || s[2].kernelBusLocksTotal != 1 {
		t.Errorf("past the window: vm1 %d (total %v), pod-c %d (total %v); want 1 (2), 0 (1)",
			s[0].kernelBusLocks, s[0].kernelBusLocksTotal, s[2].kernelBusLocks, s[2].kernelBusLocksTotal)
	}
	// A tenant that is gone is forgotten.
	k.observe(t0.Add(13*time.Second), samples()[1:])
	if _, ok := k.totals["/vm1"]; ok {
		t.Error("totals kept for a tenant that is gone")
	}
	src.err = errors.New("read /dev/kmsg: boom")
	if err := k.observe(t0.Add(14*time.Second), samples()); err == nil {
		t.Error("a read error is not passed on to the sensor's health")
	}
}

// pollutionReports names the polluter's thread while it pollutes, as the
// kernel does with bus_lock_detect.
type pollutionReports struct{ w *world }

func (r pollutionReports) Read() ([]sense.BusLockReport, error) {
	if r.w.polluting() {
		return []sense.BusLockReport{{TID: 4242, Comm: "splitlock", Trap: "bus_lock"}}, nil
	}
	return nil, nil
}
func (pollutionReports) Close() error { return nil }

// Without a PMU, the busiest tenant (the victim) is proved first; where the
// kernel names the polluter's thread, the polluter goes first and no
// innocent is capped. The state and the metrics count the reports.
func TestAgentKernelReportsProveThePolluterFirst(t *testing.T) {
	for _, reports := range []bool{false, true} {
		t.Run(map[bool]string{false: "no reports", true: "reports"}[reports], func(t *testing.T) {
			w := newWorld(t)
			w.tenants[1].Threads = []int{4241, 4242}
			c := newClock()
			w.now = c.Now
			hs := newHarness(t, w, testConfig(t.TempDir()), nil, func(d *Deps) {
				d.Now, d.Sleep = c.Now, c.Sleep
				if reports {
					d.BusLocks = pollutionReports{w}
				}
			})
			hs.vloop = startLoop(t, hs.agent, c, &hs.actionLog)
			hs.until(t, "throttle", 5*time.Second, func() bool { return hs.has("throttle", "polluter") })
			innocent := hs.has("proof", "victim") || hs.has("proof", "bystander")
			if !reports {
				if !innocent {
					t.Fatal("premise: without reports an innocent (the victim, busiest) is proved before the polluter")
				}
				hs.stop(t)
				return
			}
			if innocent {
				t.Errorf("an innocent was capped for a proof though the kernel named the polluter; actions: %+v", hs.actions)
			}
			st, _ := hs.agent.Latest()
			var pol api.TenantState
			for _, ts := range st.Tenants {
				if ts.Name == "polluter" {
					pol = ts
				}
			}
			if pol.KernelBusLockReports < 1 {
				t.Errorf("polluter's kernel_bus_lock_reports_total = %v, want ≥ 1", pol.KernelBusLockReports)
			}
			for _, ts := range st.Tenants {
				if ts.Name != "polluter" && ts.KernelBusLockReports != 0 {
					t.Errorf("%s has %v kernel bus-lock reports, want 0", ts.Name, ts.KernelBusLockReports)
				}
			}
			hs.stop(t)
		})
	}
}
