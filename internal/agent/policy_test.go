package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// The permits policy decides from the observation alone — a CPU-quota
// claim of its floor while OVER, a release once UNDER — and the arbiter
// turns those into the tenant's hold and its records.
func TestPermitsPolicyClaimsAndReleases(t *testing.T) {
	p := &permitsPolicy{permits: judge.NewPermits(judge.PermitsConfig{Default: 1000, FloorDuty: 0.25}), nominalKHz: 2e6}
	ar, sink, q, _ := testArbiter(t, false)
	tn := sense.Tenant{ID: "/vm", Name: "vm", Kind: "vm", Cgroup: "/vm", CPUs: cpuset.Range(0, 1)}
	now := time.Unix(100, 0)
	step := func(misses float64) []decision {
		now = now.Add(time.Second)
		s := sample{t: tn, usage: 1, counters: map[string]float64{sense.EventLLCMisses: misses, sense.EventCycles: 2e9}}
		o := &hwObservation{now: now, dt: time.Second, samples: []sample{s}, byID: map[string]sample{tn.ID: s}}
		var st api.HardwareState
		ds := p.observe(o, &st)
		if len(st.Permits) != 1 {
			t.Fatalf("status %+v, want the tenant's permit", st.Permits)
		}
		ar.apply(t.Context(), o, ds)
		return ds
	}
	// Polluting at 10,000 against a booking of 1,000: OVER within seconds.
	var over []decision
	for i := 0; i < 10 && len(over) == 0; i++ {
		over = step(1e7)
	}
	if len(over) != 1 || over[0].release || over[0].lever != api.LeverCPUQuota || over[0].cpuCap != 0.5 || !strings.HasPrefix(over[0].reason, "OVER: ") {
		t.Fatalf("OVER decisions %+v, want one CPU-quota claim of 0.25 × 2 CPUs", over)
	}
	if got := q.now["/vm"].CPUs(); got != 0.5 {
		t.Errorf("quota written %.3f CPUs, want 0.5", got)
	}
	// Quiet: the credit comes back and the claim goes.
	var under []decision
	for i := 0; i < 100 && len(under) == 0; i++ {
		under = step(0)
	}
	if len(under) != 1 || !under[0].release || !strings.HasPrefix(under[0].reason, "UNDER: ") {
		t.Fatalf("UNDER decisions %+v, want one release", under)
	}
	if _, held := q.now["/vm"]; held || ar.held(tn.ID, "") {
		t.Errorf("still held after UNDER: quota %v", q.now)
	}
	if got := sink.kinds(); got != "throttle permits/cpu_quota /vm; release permits/cpu_quota /vm" {
		t.Errorf("records %q", got)
	}
}

// The power budget's decisions on a tenant that is gone release both its
// whole-tenant claim and its socket's.
func TestPowerPolicyReleasesAVanishedTenant(t *testing.T) {
	ar, sink, _, cm := testArbiter(t, false)
	tn := sense.Tenant{ID: "/vm", Name: "vm", Cgroup: "/vm", CPUs: cpuset.Range(0, 3)}
	o := observed(time.Unix(100, 0), tn)
	ar.apply(t.Context(), o, []decision{
		{policy: api.PowerSocketPolicy(0), tenant: tn.ID, lever: api.LeverClockModulation, step: 8, steps: 16, cpus: tn.CPUs, reason: "socket 0 over budget"},
	})
	sink.records = nil
	ds := (&powerPolicy{}).decisionsFor(observed(time.Unix(101, 0)), judge.PowerDecision{Tenant: tn.ID, Socket: 0, Lever: judge.LeverClockModulation, Action: judge.PowerTighten, Step: 4, Steps: 16})
	ar.apply(t.Context(), observed(time.Unix(101, 0)), ds)
	if ar.held(tn.ID, "") || len(cm.cpu) != 0 {
		t.Errorf("vanished tenant still held: %v, clock %v", ar.holds[tn.ID], cm.cpu)
	}
	if len(sink.records) != 0 {
		t.Errorf("records %q, want none for a vanished tenant's holds", sink.kinds())
	}
}
