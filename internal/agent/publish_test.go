package agent

import (
	"slices"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// Perf event totals add each interval's rate over the time it covers, stand
// still while the tenant goes uncounted, leave task_clock out, and are
// handed out as copies the next interval cannot change.
func TestCountPerfEvents(t *testing.T) {
	a := &Agent{}
	x := sense.Tenant{ID: "vm:x"}
	if got := a.countPerfEvents(sample{t: x, dt: 0.5}); got != nil {
		t.Fatalf("never counted: %v, want nil", got)
	}
	first := a.countPerfEvents(sample{t: x, dt: 0.5, counters: map[string]float64{sense.EventBusLocks: 1000, sense.EventTaskClock: 1}})
	if first[sense.EventBusLocks] != 500 || len(first) != 1 {
		t.Fatalf("after one interval: %v, want bus_locks 500 only", first)
	}
	uncounted := a.countPerfEvents(sample{t: x, dt: 0.5})
	second := a.countPerfEvents(sample{t: x, dt: 2, counters: map[string]float64{sense.EventBusLocks: 250, sense.EventLLCMisses: 10}})
	for _, c := range []struct {
		name string
		got  map[string]float64
		want map[string]float64
	}{
		{"first, after later intervals", first, map[string]float64{sense.EventBusLocks: 500}},
		{"uncounted interval", uncounted, map[string]float64{sense.EventBusLocks: 500}},
		{"second", second, map[string]float64{sense.EventBusLocks: 1000, sense.EventLLCMisses: 20}},
	} {
		if len(c.got) != len(c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
		for ev, v := range c.want {
			if c.got[ev] != v {
				t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
			}
		}
	}
}

// The published state carries each tenant's cumulative CPU time and perf
// counts; they only grow while the tenant stays, and a tenant that leaves
// takes its perf totals with it.
func TestStateCumulativeCounters(t *testing.T) {
	w := newWorld(t)
	w.counters = true
	hs := newVirtualHarness(t, w, testConfig(t.TempDir()), nil)
	defer hs.stop(t)
	victim := func() api.TenantState {
		st, _ := hs.agent.Latest()
		for _, ts := range st.Tenants {
			if ts.Name == "victim" {
				return ts
			}
		}
		return api.TenantState{}
	}
	hs.until(t, "CPU time and bus locks of the victim", 3*time.Second, func() bool {
		v := victim()
		return v.CPUSeconds > 0 && v.PerfEvents[sense.EventBusLocks] > 0
	})
	before := victim()
	hs.until(t, "growth of the counters", 3*time.Second, func() bool {
		v := victim()
		return v.CPUSeconds > before.CPUSeconds && v.PerfEvents[sense.EventBusLocks] > before.PerfEvents[sense.EventBusLocks]
	})
	if _, ok := hs.agent.perfTotals["/lab/victim"]; !ok {
		t.Fatal("no perf totals kept for /lab/victim")
	}
	w.mu.Lock()
	w.gone["/lab/victim"] = true
	w.mu.Unlock()
	hs.until(t, "drop of the victim's perf totals", 3*time.Second, func() bool {
		_, ok := hs.agent.perfTotals["/lab/victim"]
		return !ok && victim().Name == ""
	})
}

// spendingProbe is a probe that books its CPU time.
type spendingProbe struct {
	nopProbe
	spent map[sense.ProbeSpent]time.Duration
}

func (p spendingProbe) Spent() map[sense.ProbeSpent]time.Duration { return p.spent }

func TestStateProbeCPUByCPUAndReading(t *testing.T) {
	p := spendingProbe{spent: map[sense.ProbeSpent]time.Duration{
		{CPU: 3, Reading: sense.ReadingProof}:    40 * time.Millisecond,
		{CPU: 1, Reading: sense.ReadingWatch}:    2 * time.Millisecond,
		{CPU: 1, Reading: sense.ReadingInterval}: 250 * time.Millisecond,
	}}
	got := probeCPU(p)
	want := []api.ProbeCPUState{
		{CPU: 1, Reading: "interval", Seconds: 0.25},
		{CPU: 1, Reading: "watch", Seconds: 0.002},
		{CPU: 3, Reading: "proof", Seconds: 0.04},
	}
	if !slices.Equal(got, want) {
		t.Errorf("probe CPU = %+v, want %+v", got, want)
	}
	if got := probeCPU(nopProbe{}); got != nil {
		t.Errorf("a probe that books nothing gave %+v, want none", got)
	}
}
