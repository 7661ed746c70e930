package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// recSink records what the arbiter reports.
type recSink struct {
	records   []api.ActionRecord
	events    []act.Event
	writeErrs []error
}

func (s *recSink) recordAction(r api.ActionRecord) { s.records = append(s.records, r) }
func (s *recSink) journal(e act.Event)             { s.events = append(s.events, e) }
func (s *recSink) handleWriteErr(_ context.Context, _ sense.Tenant, err error) {
	s.writeErrs = append(s.writeErrs, err)
}

func (s *recSink) kinds() string {
	var out []string
	for _, r := range s.records {
		out = append(out, fmt.Sprintf("%s %s/%s %s", r.Kind, r.Policy, r.Lever, r.Tenant))
	}
	return strings.Join(out, "; ")
}

func testArbiter(t *testing.T, dryRun bool) (*arbiter, *recSink, *recQuota, *recLever) {
	t.Helper()
	sink := &recSink{}
	q := &recQuota{now: map[string]cgroup.Quota{}}
	cm := &recLever{steps: 16, cpu: map[int]int{}}
	cfg := testConfig(t.TempDir())
	cfg.DryRun = dryRun
	ar := newArbiter(cfg, Deps{Quota: q, Hardware: &Hardware{levers: map[judge.Lever]CPULever{judge.LeverClockModulation: cm}}},
		slog.New(slog.DiscardHandler), sink, sink)
	return ar, sink, q, cm
}

// observed is an observation of these tenants at t0.
func observed(now time.Time, ts ...sense.Tenant) *hwObservation {
	o := &hwObservation{now: now, byID: map[string]sample{}}
	for _, t := range ts {
		s := sample{t: t}
		o.samples = append(o.samples, s)
		o.byID[t.ID] = s
	}
	return o
}

// A release that cannot be written is logged and journalled the same way
// whatever the lever, and still recorded as a release (the claim is gone).
func TestArbiterReleaseFailureJournalledForEveryLever(t *testing.T) {
	tn := sense.Tenant{ID: "/vm", Name: "vm", Cgroup: "/vm", CPUs: cpuset.Range(0, 3)}
	t0 := time.Unix(100, 0)
	for _, tc := range []struct {
		lever api.Lever
		claim decision
		fail  func(*recQuota, *recLever)
	}{
		{api.LeverCPUQuota, decision{policy: api.PolicyPermits, tenant: tn.ID, lever: api.LeverCPUQuota, cpuCap: 1, reason: "OVER"},
			func(q *recQuota, _ *recLever) { q.failRestore = errors.New("EBUSY") }},
		{api.LeverClockModulation, decision{policy: api.PolicyBusLocks, tenant: tn.ID, lever: api.LeverClockModulation, step: 2, steps: 16, cpus: tn.CPUs, reason: "over budget"},
			func(_ *recQuota, cm *recLever) { cm.failRestore = errors.New("EBUSY") }},
	} {
		t.Run(string(tc.lever), func(t *testing.T) {
			ar, sink, q, cm := testArbiter(t, false)
			o := observed(t0, tn)
			ar.apply(t.Context(), o, []decision{tc.claim})
			if !ar.held(tn.ID, tc.claim.policy) {
				t.Fatalf("claim not held: %s", sink.kinds())
			}
			tc.fail(q, cm)
			rel := tc.claim
			rel.release, rel.reason = true, "under again"
			ar.apply(t.Context(), o, []decision{rel})
			if len(sink.events) != 1 {
				t.Fatalf("journal %+v, want one error", sink.events)
			}
			e := sink.events[0]
			if e.Kind != "error" || e.Policy != string(tc.claim.policy) || e.Lever != string(tc.lever) || e.Tenant != tn.ID ||
				!strings.HasPrefix(e.Detail, "release failed: ") || !strings.Contains(e.Detail, "EBUSY") {
				t.Errorf("journalled %+v", e)
			}
			want := fmt.Sprintf("throttle %s/%s /vm; release %s/%s /vm", tc.claim.policy, tc.lever, tc.claim.policy, tc.lever)
			if got := sink.kinds(); got != want {
				t.Errorf("records %q, want %q", got, want)
			}
		})
	}
}

// In dry run every lever's decision is recorded and kept in the state,
// and nothing is written: the check is the arbiter's alone.
func TestArbiterDryRunWritesNothing(t *testing.T) {
	ar, sink, q, cm := testArbiter(t, true)
	tn := sense.Tenant{ID: "/vm", Name: "vm", Cgroup: "/vm", CPUs: cpuset.Range(0, 3)}
	o := observed(time.Unix(100, 0), tn)
	ar.apply(t.Context(), o, []decision{
		{policy: api.PolicyPermits, tenant: tn.ID, lever: api.LeverCPUQuota, cpuCap: 0.5, reason: "OVER"},
		{policy: api.PolicyBusLocks, tenant: tn.ID, lever: api.LeverClockModulation, step: 4, steps: 16, cpus: tn.CPUs, reason: "over budget"},
		{policy: api.PolicyLLC, tenant: tn.ID, lever: api.LeverCAT, domain: 0, ways: 2, fraction: 2.0 / 11, reason: "abuser"},
		{policy: api.PolicyMBA, tenant: tn.ID, lever: api.LeverMBA, domain: 0, fraction: 0.5, reason: "over share"},
	})
	if len(q.log) != 0 || len(cm.calls) != 0 {
		t.Errorf("dry run wrote: quota %v, clock %v", q.log, cm.calls)
	}
	want := "throttle permits/cpu_quota /vm; throttle buslocks/clock_modulation /vm; isolate llc/cat /vm; throttle mba/mba /vm"
	if got := sink.kinds(); got != want {
		t.Errorf("records %q, want %q", got, want)
	}
	if d := ar.holds[tn.ID].duty(); d != 0.125 {
		t.Errorf("held duty %v, want the clock's 4/16 over the quota's 0.5 of 4 CPUs", d)
	}
	if got := fmt.Sprint(ar.tenantClasses(tn.ID)); !strings.Contains(got, "llc cat 0.18") || !strings.Contains(got, "mba mba 0.5") {
		t.Errorf("classes %s", got)
	}
}

// A decision on a tenant that is gone: its hold is dropped without a
// record (its cgroup went with it), its resctrl class is released and
// recorded (the class outlives the cgroup), and a class it asks for is
// not made.
func TestArbiterVanishedTenant(t *testing.T) {
	ar, sink, q, _ := testArbiter(t, true)
	tn := sense.Tenant{ID: "/vm", Name: "vm", Cgroup: "/vm", CPUs: cpuset.Range(0, 3)}
	ar.apply(t.Context(), observed(time.Unix(100, 0), tn), []decision{
		{policy: api.PolicyPermits, tenant: tn.ID, lever: api.LeverCPUQuota, cpuCap: 0.5, reason: "OVER"},
		{policy: api.PolicyLLC, tenant: tn.ID, lever: api.LeverCAT, domain: 0, ways: 2, fraction: 0.2, reason: "abuser"},
	})
	sink.records = nil
	gone := observed(time.Unix(101, 0))
	ar.apply(t.Context(), gone, []decision{
		{policy: api.PolicyPermits, tenant: tn.ID, lever: api.LeverCPUQuota, release: true, reason: "gone"},
		{policy: api.PolicyLLC, tenant: tn.ID, lever: api.LeverCAT, domain: 0, release: true, reason: "gone"},
		{policy: api.PolicyMBA, tenant: tn.ID, lever: api.LeverMBA, domain: 1, fraction: 0.5, reason: "over share"},
	})
	if ar.held(tn.ID, "") || len(ar.tenantClasses(tn.ID)) != 0 {
		t.Errorf("still held: holds %v, classes %v", ar.holds[tn.ID], ar.tenantClasses(tn.ID))
	}
	if got := sink.kinds(); got != "release llc/cat /vm" {
		t.Errorf("records %q, want only the class's release", got)
	}
	if len(q.log) != 0 {
		t.Errorf("dry run wrote %v", q.log)
	}
}

// prune forgets the tenants discovery no longer finds: their holds (their
// CPUs get their clock back), classes (released, on record) and warnings.
func TestArbiterPruneForgetsVanishedTenants(t *testing.T) {
	ar, sink, _, cm := testArbiter(t, false)
	gone := sense.Tenant{ID: "/gone", Name: "gone", Cgroup: "/gone", CPUs: cpuset.Range(0, 1)}
	stays := sense.Tenant{ID: "/stays", Name: "stays", Cgroup: "/stays", CPUs: cpuset.Range(2, 3)}
	o := observed(time.Unix(100, 0), gone, stays)
	ar.apply(t.Context(), o, []decision{
		{policy: api.PolicyBusLocks, tenant: gone.ID, lever: api.LeverClockModulation, step: 2, steps: 16, cpus: gone.CPUs, reason: "over budget"},
		{policy: api.PolicyBusLocks, tenant: stays.ID, lever: api.LeverClockModulation, step: 2, steps: 16, cpus: stays.CPUs, reason: "over budget"},
		{policy: api.PolicyBusLocks, tenant: gone.ID, reason: "no lever"}, // warned about
	})
	// This host has no resctrl to write: the class is bookkeeping alone.
	ar.class(api.PolicyMBA, gone.ID, 0, 0.5)
	sink.records = nil
	ar.prune(t.Context(), time.Unix(101, 0), func(id string) bool { return id == stays.ID })
	if ar.holds[gone.ID] != nil || !ar.held(stays.ID, api.PolicyBusLocks) {
		t.Errorf("holds after prune: %v", ar.holds)
	}
	if fmt.Sprint(cm.cpu) != "map[2:2 3:2]" {
		t.Errorf("clock after prune %v, want only the present tenant's CPUs modulated", cm.cpu)
	}
	if got := sink.kinds(); got != "release mba/mba /gone" {
		t.Errorf("records %q, want the class's release", got)
	}
	if len(ar.classed[api.PolicyMBA]) != 0 {
		t.Errorf("classes after prune %v", ar.classed)
	}
	if len(ar.warn.warned) != 0 {
		t.Errorf("warnings after prune %v", ar.warn.warned)
	}
}

// The agent forgets the backoffs of tenants discovery no longer finds, and
// nothing when discovery failed (every tenant would look gone).
func TestAgentPrunesBackoffOfVanishedTenants(t *testing.T) {
	a, _, _ := holdsAgent(t, false)
	until := backoff{until: time.Unix(1000, 0)}
	fill := func() {
		for _, k := range []string{"/gone", backoffKey(signalWait, "/gone"), "/stays", backoffKey(signalWait, "/stays")} {
			a.ledger.backoff[k] = until
		}
	}
	fill()
	stays := []sense.Tenant{{ID: "/stays"}}
	a.hardware(t.Context(), time.Unix(100, 0), nil, stays, false)
	if len(a.ledger.backoff) != 4 {
		t.Errorf("a failed discovery pruned backoffs: %v", a.ledger.backoff)
	}
	a.hardware(t.Context(), time.Unix(100, 0), nil, stays, true)
	if _, ok := a.ledger.backoff["/stays"]; !ok || len(a.ledger.backoff) != 2 {
		t.Errorf("backoffs after prune %v, want the present tenant's two", a.ledger.backoff)
	}
	if _, ok := a.ledger.backoff[backoffKey(signalWait, "/stays")]; !ok {
		t.Errorf("the present tenant's CPU-wait backoff was pruned")
	}
}
