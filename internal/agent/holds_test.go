package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// recQuota records what the holds write through the quota actuator.
type recQuota struct {
	now         map[string]cgroup.Quota // cgroup → quota written (absent: original)
	log         []string
	fail        error // Apply fails with it when set
	failRestore error // Restore fails with it when set
}

func (r *recQuota) Apply(_ context.Context, cg, _ string, q cgroup.Quota) error {
	if r.fail != nil {
		return r.fail
	}
	r.now[cg] = q
	r.log = append(r.log, fmt.Sprintf("apply %s %.3f", cg, q.CPUs()))
	return nil
}
func (r *recQuota) Restore(_ context.Context, cg string) error {
	if r.failRestore != nil {
		return r.failRestore
	}
	delete(r.now, cg)
	r.log = append(r.log, "restore "+cg)
	return nil
}
func (r *recQuota) RestoreAll(context.Context) (int, error) { return 0, nil }

// recLever records a per-CPU lever's writes.
type recLever struct {
	steps       int
	cpu         map[int]int // step written per CPU (absent: full speed)
	calls       []string
	failRestore error // Restore fails with it when set
}

func (l *recLever) Apply(_ context.Context, tenant string, cpus cpuset.Set, step int) error {
	l.calls = append(l.calls, fmt.Sprintf("%s %s %d", tenant, cpus, step))
	for _, c := range cpus.List() {
		if step == l.steps {
			delete(l.cpu, c)
		} else {
			l.cpu[c] = step
		}
	}
	return nil
}
func (l *recLever) Restore(_ context.Context, cpus cpuset.Set) error {
	if l.failRestore != nil {
		return l.failRestore
	}
	l.calls = append(l.calls, "restore "+cpus.String())
	for _, c := range cpus.List() {
		delete(l.cpu, c)
	}
	return nil
}
func (l *recLever) Steps() int { return l.steps }

type nopDiscoverer struct{}

func (nopDiscoverer) Discover(context.Context) ([]sense.Tenant, error) { return nil, nil }

type nopStats struct{}

func (nopStats) Read(context.Context, sense.Tenant, *sense.TenantStats) (sense.TenantStats, error) {
	return sense.TenantStats{}, nil
}

type nopProbe struct{}

func (nopProbe) Measure() ([]sense.ProbeReading, error)                       { return nil, nil }
func (nopProbe) MeasureCPU(int, int, ...string) ([]sense.ProbeReading, error) { return nil, nil }
func (nopProbe) Targets() []sense.Target                                      { return nil }
func (nopProbe) Domains() []sense.ProbeDomain {
	return []sense.ProbeDomain{{ID: 0, CPUs: cpuset.Range(0, 7)}, {ID: 1, CPUs: cpuset.Range(8, 15)}}
}

func holdsAgent(t *testing.T, dryRun bool) (*Agent, *recQuota, *recLever) {
	t.Helper()
	q := &recQuota{now: map[string]cgroup.Quota{}}
	cm := &recLever{steps: 16, cpu: map[int]int{}}
	cfg := testConfig(t.TempDir())
	cfg.DryRun = dryRun
	a, err := New(cfg, Deps{Discoverer: nopDiscoverer{}, Stats: nopStats{}, Probe: nopProbe{}, Quota: q,
		Hardware: &Hardware{levers: map[judge.Lever]CPULever{judge.LeverClockModulation: cm}, warn: newTenantWarnings(slog.New(slog.DiscardHandler))}})
	if err != nil {
		t.Fatal(err)
	}
	return a, q, cm
}

func quotaOf(cpus float64) cgroup.Quota {
	return cgroup.Quota{Quota: time.Duration(cpus * float64(16*time.Millisecond)), Period: 16 * time.Millisecond}
}

// The tenant gets the tightest claim; a policy's release leaves the
// others' claims in force, and only the last one restores the original.
func TestHoldsTightestClaimWins(t *testing.T) {
	a, q, _ := holdsAgent(t, false)
	tn := sense.Tenant{ID: "/vm", Name: "vm", Cgroup: "/vm", CPUs: cpuset.Range(0, 3)}
	now := time.Unix(0, 0)
	if err := a.arb.hold(t.Context(), tn, api.PolicyPermits, claim{lever: judge.LeverCPUQuota, quota: quotaOf(0.25), reason: "OVER", since: now}); err != nil {
		t.Fatal(err)
	}
	if err := a.arb.hold(t.Context(), tn, api.PolicyProbe, claim{lever: judge.LeverCPUQuota, quota: quotaOf(1), reason: "duty", since: now}); err != nil {
		t.Fatal(err)
	}
	if got := q.now["/vm"].CPUs(); got != 0.25 {
		t.Fatalf("quota %.3f, want the permits' 0.25 (tightest)", got)
	}
	if err := a.arb.releaseHold(t.Context(), tn.ID, api.PolicyPermits); err != nil {
		t.Fatal(err)
	}
	if got := q.now["/vm"].CPUs(); got != 1 {
		t.Errorf("after the permits' release: quota %.3f, want the probe's 1 CPU", got)
	}
	if !a.arb.held(tn.ID, api.PolicyProbe) || a.arb.held(tn.ID, api.PolicyPermits) {
		t.Error("held-by bookkeeping wrong")
	}
	if err := a.arb.releaseHold(t.Context(), tn.ID, api.PolicyProbe); err != nil {
		t.Fatal(err)
	}
	if _, held := q.now["/vm"]; held || a.arb.holds[tn.ID] != nil {
		t.Errorf("after the last release: still held (%v) or not forgotten", q.now)
	}
	// Re-stating the same claim writes nothing.
	a.arb.hold(t.Context(), tn, api.PolicyProbe, claim{lever: judge.LeverCPUQuota, quota: quotaOf(0.5), reason: "duty", since: now})
	n := len(q.log)
	a.arb.hold(t.Context(), tn, api.PolicyProbe, claim{lever: judge.LeverCPUQuota, quota: quotaOf(0.5), reason: "duty", since: now})
	if len(q.log) != n {
		t.Errorf("an unchanged claim wrote again: %v", q.log[n:])
	}
}

// A claim whose write failed is not held: the tenant is not skipped as
// held, and nothing is left to undo.
func TestHoldsFailedWriteIsNotHeld(t *testing.T) {
	a, q, _ := holdsAgent(t, false)
	tn := sense.Tenant{ID: "/c", Name: "c", Cgroup: "/c", CPUs: cpuset.Range(0, 1)}
	q.fail = errors.New("EACCES")
	if err := a.arb.hold(t.Context(), tn, api.PolicyBusLocks, claim{lever: judge.LeverCPUQuota, quota: quotaOf(0.1), reason: "over budget", since: time.Unix(0, 0)}); err == nil {
		t.Fatal("no error from a failed write")
	}
	if a.arb.held(tn.ID, "") || a.arb.holds[tn.ID] != nil {
		t.Error("a claim that was never written is counted as held")
	}
	// A tighten that fails keeps the claim that was written before.
	q.fail = nil
	a.arb.hold(t.Context(), tn, api.PolicyBusLocks, claim{lever: judge.LeverCPUQuota, quota: quotaOf(0.5), reason: "", since: time.Unix(0, 0)})
	q.fail = errors.New("EIO")
	a.arb.hold(t.Context(), tn, api.PolicyBusLocks, claim{lever: judge.LeverCPUQuota, quota: quotaOf(0.1), reason: "", since: time.Unix(1, 0)})
	if c := a.arb.holds[tn.ID].claims[api.PolicyBusLocks]; c.quota.CPUs() != 0.5 {
		t.Errorf("failed tighten replaced the claim: %.3f CPUs", c.quota.CPUs())
	}
}

// Per-CPU levers: each CPU gets the lowest step any claim puts on it, CPUs
// no claim covers any more are restored, and a vanished tenant's CPUs get
// their clock back.
func TestHoldsPerCPULevers(t *testing.T) {
	a, _, cm := holdsAgent(t, false)
	tn := sense.Tenant{ID: "/vm", Name: "vm", Cgroup: "/vm", CPUs: cpuset.Range(0, 3)}
	now := time.Unix(0, 0)
	// The bus-lock budget holds all four CPUs at 2/16; the power budget
	// holds socket 0's two of them at 8/16.
	must(t, a.arb.hold(t.Context(), tn, api.PolicyBusLocks, claim{lever: judge.LeverClockModulation, step: 2, steps: 16, cpus: cpuset.Range(0, 3), since: now}))
	must(t, a.arb.hold(t.Context(), tn, api.PowerSocketPolicy(0), claim{lever: judge.LeverClockModulation, step: 8, steps: 16, cpus: cpuset.Range(0, 1), since: now}))
	if fmt.Sprint(cm.cpu) != "map[0:2 1:2 2:2 3:2]" {
		t.Fatalf("steps %v, want 2/16 everywhere (the tightest)", cm.cpu)
	}
	must(t, a.arb.releaseHold(t.Context(), tn.ID, api.PolicyBusLocks))
	if fmt.Sprint(cm.cpu) != "map[0:8 1:8]" {
		t.Fatalf("after the bus-lock release: %v, want CPUs 0-1 at 8/16 and 2-3 restored", cm.cpu)
	}
	if !strings.Contains(strings.Join(cm.calls, ";"), "restore 2-3") {
		t.Errorf("CPUs 2-3 not restored: %v", cm.calls)
	}
	a.arb.forgetHolds(t.Context(), tn.ID)
	if len(cm.cpu) != 0 || a.arb.holds[tn.ID] != nil {
		t.Errorf("vanished tenant: CPUs %v still modulated", cm.cpu)
	}
	// A claim on a lever that is off fails and is not held.
	if err := a.arb.hold(t.Context(), tn, api.PolicyPower, claim{lever: judge.LeverCPUFreq, step: 4, steps: 16, cpus: cpuset.Range(0, 3), since: now}); err == nil || a.arb.held(tn.ID, "") {
		t.Errorf("claim on an absent lever: err %v, held %v", err, a.arb.held(tn.ID, ""))
	}
}

// In dry-run the holds are kept (the state shows what would be done) but
// nothing is written.
func TestHoldsDryRun(t *testing.T) {
	a, q, cm := holdsAgent(t, true)
	tn := sense.Tenant{ID: "/vm", Name: "vm", Cgroup: "/vm", CPUs: cpuset.Range(0, 3)}
	must(t, a.arb.hold(t.Context(), tn, api.PolicyPermits, claim{lever: judge.LeverCPUQuota, quota: quotaOf(0.25), reason: "OVER", since: time.Unix(0, 0)}))
	must(t, a.arb.hold(t.Context(), tn, api.PolicyBusLocks, claim{lever: judge.LeverClockModulation, step: 2, steps: 16, cpus: cpuset.Range(0, 3)}))
	if len(q.log) != 0 || len(cm.calls) != 0 {
		t.Errorf("dry run wrote: %v %v", q.log, cm.calls)
	}
	if !a.arb.held(tn.ID, api.PolicyPermits) || a.arb.holds[tn.ID].duty() != 0.0625 {
		t.Errorf("dry run holds not kept: %+v", a.arb.holds[tn.ID])
	}
	a.shutdown(t.Context())
	if len(q.log) != 0 || len(cm.calls) != 0 || len(a.arb.holds) != 0 {
		t.Errorf("dry-run shutdown wrote or kept holds: %v %v %v", q.log, cm.calls, a.arb.holds)
	}
}

// Shutdown releases every policy's holds and records each release.
func TestHoldsShutdownReleasesAll(t *testing.T) {
	a, q, cm := holdsAgent(t, false)
	var releases []string
	a.rec.onAction = func(r api.ActionRecord) {
		if r.Kind == "release" {
			releases = append(releases, string(r.Policy)+"/"+string(r.Lever))
		}
	}
	tn := sense.Tenant{ID: "/vm", Name: "vm", Cgroup: "/vm", CPUs: cpuset.Range(0, 3)}
	must(t, a.arb.hold(t.Context(), tn, api.PolicyPermits, claim{lever: judge.LeverCPUQuota, quota: quotaOf(0.25), reason: "OVER", since: time.Unix(0, 0)}))
	must(t, a.arb.hold(t.Context(), tn, api.PolicyBusLocks, claim{lever: judge.LeverClockModulation, step: 2, steps: 16, cpus: cpuset.Range(0, 3)}))
	a.shutdown(t.Context())
	if len(q.now) != 0 || len(cm.cpu) != 0 {
		t.Errorf("left held after shutdown: quota %v, clock %v", q.now, cm.cpu)
	}
	if strings.Join(releases, ",") != "buslocks/clock_modulation,permits/cpu_quota" {
		t.Errorf("releases recorded %v", releases)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Every action's kind agrees with what it did: a lower duty is a tighten,
// a higher one a relax, and a decision that changes nothing (a power
// decision on one socket while another sets the tenant's quota) records no
// action, rather than a "throttle" whose reason speaks of a change.
func TestPolicyActionKindFollowsTheDuty(t *testing.T) {
	a, _, _ := holdsAgent(t, false)
	tn := sense.Tenant{ID: "/vm", Name: "vm", Cgroup: "/vm", CPUs: cpuset.Range(0, 3)}
	now := time.Unix(0, 0)
	steps := []struct {
		step   int
		reason string
		want   api.ActionKind // kind recorded, "" for none
	}{
		{8, "socket 0 at 250.0 W >= budget 200 W", "throttle"},
		{8, "socket 1 at 150.0 W <= 180 W (budget 200 W - guard 20 W)", ""},
		{4, "socket 0 at 260.0 W >= budget 200 W", "tighten"},
		{4, "socket 1 at 255.0 W >= budget 200 W", ""},
		{12, "socket 0 at 150.0 W <= 180 W (budget 200 W - guard 20 W)", "relax"},
	}
	for _, s := range steps {
		n := len(a.rec.actions)
		a.arb.applyHold(t.Context(), now, tn, decision{policy: api.PolicyPower, tenant: tn.ID, lever: api.LeverClockModulation, step: s.step, steps: 16, cpus: tn.CPUs, reason: s.reason})
		var got api.ActionKind
		if len(a.rec.actions) > n {
			got = a.rec.actions[len(a.rec.actions)-1].Kind
		}
		if len(a.rec.actions) > n+1 || got != s.want {
			t.Errorf("step %d/16 (%s): recorded %q, want %q", s.step, s.reason, got, s.want)
		}
		now = now.Add(time.Second)
	}
}
