package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// Policies (api.Policy) hold tenants back. Several may hold the same tenant
// at once (a proven bus-lock polluter can also be over its pollution
// permit): each states its own claim, and the tenant gets the tightest of
// them on each lever — so no policy's release can undo another's throttle,
// and a tenant is fully restored only when nobody holds it any more.
//
// claim is one policy's hold on one tenant through one lever.
type claim struct {
	lever judge.Lever
	// quota for judge.LeverCPUQuota.
	quota cgroup.Quota
	// step of steps on cpus for the per-CPU levers (clock modulation,
	// cpufreq): step == steps is full speed.
	step, steps int
	cpus        cpuset.Set
	reason      string
	since       time.Time
}

func (c claim) duty() float64 {
	if c.lever == judge.LeverCPUQuota {
		return -1 // depends on the tenant's CPUs: see tenantHolds.duty
	}
	if c.steps <= 0 {
		return 1
	}
	return float64(c.step) / float64(c.steps)
}

// tenantHolds is everything held on one tenant: the claims, and what the
// arbiter has written for them.
type tenantHolds struct {
	tenant sense.Tenant
	claims map[api.Policy]claim // by policy
	// What is written now: the CPU quota (zero Period = nothing), and the
	// step of each CPU on each per-CPU lever.
	quota   cgroup.Quota
	perCPU  map[judge.Lever]map[int]int
	created time.Time
}

// CPULever is a per-CPU actuator (act.ClockModulation, act.CPUFreq): it
// sets CPUs to step/Steps for a tenant (step == Steps restores them).
type CPULever interface {
	Apply(ctx context.Context, tenant string, cpus cpuset.Set, step int) error
	Restore(ctx context.Context, cpus cpuset.Set) error
	Steps() int
}

// hold states a claim; a policy has one claim per tenant, so a claim
// through another lever replaces its previous one (the lever chooser
// moved the tenant to another lever: its CPUs changed).
func (ar *arbiter) hold(ctx context.Context, t sense.Tenant, policy api.Policy, c claim) error {
	h := ar.holds[t.ID]
	if h == nil {
		h = &tenantHolds{tenant: t, claims: map[api.Policy]claim{}, perCPU: map[judge.Lever]map[int]int{}, created: c.since}
		ar.holds[t.ID] = h
	}
	h.tenant = t
	old, had := h.claims[policy]
	if had && !old.since.IsZero() && old.lever == c.lever {
		c.since = old.since
	}
	h.claims[policy] = c
	if err := ar.enforce(ctx, h); err != nil {
		// What failed to be written is not held: take the claim back, so
		// a tenant is never counted as held (and skipped) by a throttle
		// that is not there. A later claim or release writes again.
		if had {
			h.claims[policy] = old
		} else {
			delete(h.claims, policy)
		}
		if len(h.claims) == 0 && h.quota.Period == 0 && len(h.perCPU) == 0 {
			delete(ar.holds, t.ID)
		}
		return err
	}
	return nil
}

// releaseHold drops policy's claim on tenant id; the tenant keeps
// the other policies' claims, or is restored when none is left.
func (ar *arbiter) releaseHold(ctx context.Context, id string, policy api.Policy) error {
	h := ar.holds[id]
	if h == nil {
		return nil
	}
	if _, ok := h.claims[policy]; !ok {
		return nil
	}
	delete(h.claims, policy)
	err := ar.enforce(ctx, h)
	if len(h.claims) == 0 && h.quota.Period == 0 && len(h.perCPU) == 0 {
		delete(ar.holds, id)
	}
	return err
}

// forgetHolds drops a vanished tenant's holds: its cgroup is gone,
// but CPUs it was modulated on must get their clock back.
func (ar *arbiter) forgetHolds(ctx context.Context, id string) {
	h := ar.holds[id]
	if h == nil {
		return
	}
	h.claims = map[api.Policy]claim{}
	if err := ar.enforce(ctx, h); err != nil {
		ar.log.Warn("restoring a vanished tenant's levers", "tenant", id, "err", err)
	}
	delete(ar.holds, id)
}

// held reports whether policy holds tenant id (any policy when
// policy is "").
func (ar *arbiter) held(id string, policy api.Policy) bool {
	h := ar.holds[id]
	if h == nil {
		return false
	}
	if policy == "" {
		return len(h.claims) > 0
	}
	_, ok := h.claims[policy]
	return ok
}

// enforce writes what the claims of h add up to on every lever: the
// tightest CPU quota (restored when no claim is left), and per CPU the
// lowest step of each per-CPU lever (restored where no claim covers it).
// In dry run the arbiter's actuators write nothing (dryrun.go). Errors
// are joined; what could be written is.
func (ar *arbiter) enforce(ctx context.Context, h *tenantHolds) error {
	var errs []error
	// CPU quota: the fewest CPUs wins; ties keep the earlier policy's
	// (sorted by name) so the choice is stable.
	var want cgroup.Quota
	policies := make([]api.Policy, 0, len(h.claims))
	for p := range h.claims {
		policies = append(policies, p)
	}
	slices.Sort(policies)
	for _, p := range policies {
		c := h.claims[p]
		if c.lever == judge.LeverCPUQuota && (want.Period == 0 || c.quota.CPUs() < want.CPUs()) {
			want = c.quota
		}
	}
	switch {
	case want == h.quota:
	case want.Period == 0:
		if err := ar.quota.Restore(ctx, h.tenant.Cgroup); err != nil {
			errs = append(errs, fmt.Errorf("restore quota of %s: %w", h.tenant.ID, err))
		} else {
			h.quota = cgroup.Quota{}
		}
	default:
		if err := ar.quota.Apply(ctx, h.tenant.Cgroup, h.tenant.Name, want); err != nil {
			errs = append(errs, err)
		} else {
			h.quota = want
		}
	}
	for _, lever := range []judge.Lever{judge.LeverClockModulation, judge.LeverCPUFreq} {
		if err := ar.enforceCPULever(ctx, h, lever, policies); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (ar *arbiter) enforceCPULever(ctx context.Context, h *tenantHolds, lever judge.Lever, policies []api.Policy) error {
	act := ar.levers[lever]
	want := map[int]int{}
	for _, p := range policies {
		c := h.claims[p]
		if c.lever != lever {
			continue
		}
		for _, cpu := range c.cpus.List() {
			if s, ok := want[cpu]; !ok || c.step < s {
				want[cpu] = c.step
			}
		}
	}
	have := h.perCPU[lever]
	if act == nil {
		if len(want) > 0 {
			return fmt.Errorf("%s asked for on %s, but the lever is off here", lever, h.tenant.ID)
		}
		return nil
	}
	steps := act.Steps()
	// Group the changes by target step: one actuator call per step, each
	// on whole cores (claims come in whole cores, and every CPU of a core
	// gets the same claims).
	byStep := map[int][]int{}
	for cpu, s := range want {
		if have[cpu] != s {
			byStep[s] = append(byStep[s], cpu)
		}
	}
	var freed []int
	for cpu := range have {
		if _, ok := want[cpu]; !ok {
			freed = append(freed, cpu)
		}
	}
	var errs []error
	if len(freed) > 0 {
		if err := act.Restore(ctx, cpuset.Of(freed...)); err != nil {
			errs = append(errs, fmt.Errorf("restore %s of %s: %w", lever, h.tenant.ID, err))
		} else {
			for _, cpu := range freed {
				delete(have, cpu)
			}
		}
	}
	order := make([]int, 0, len(byStep))
	for s := range byStep {
		order = append(order, s)
	}
	slices.Sort(order)
	for _, s := range order {
		cpus := cpuset.Of(byStep[s]...)
		if err := act.Apply(ctx, h.tenant.Name, cpus, min(s, steps)); err != nil {
			errs = append(errs, fmt.Errorf("%s of %s: %w", lever, h.tenant.ID, err))
			continue
		}
		if have == nil {
			have = map[int]int{}
		}
		for _, cpu := range cpus.List() {
			have[cpu] = s
		}
	}
	if len(have) == 0 {
		delete(h.perCPU, lever)
	} else {
		h.perCPU[lever] = have
	}
	return errors.Join(errs...)
}

// duty is the lowest fraction of its CPU time or clock any claim leaves
// the tenant (1 = not held).
func (h *tenantHolds) duty() float64 {
	d := 1.0
	n := float64(max(1, h.tenant.CPUs.Len()))
	for _, c := range h.claims {
		x := c.duty()
		if c.lever == judge.LeverCPUQuota {
			x = min(1, c.quota.CPUs()/n)
		}
		d = min(d, x)
	}
	return d
}

// describe lists the claims for the state, sorted by policy.
func (h *tenantHolds) describe() []api.HoldState {
	out := make([]api.HoldState, 0, len(h.claims))
	n := float64(max(1, h.tenant.CPUs.Len()))
	for p, c := range h.claims {
		hs := api.HoldState{Policy: p, Lever: api.Lever(c.lever), Reason: c.reason, Since: c.since}
		switch c.lever {
		case judge.LeverCPUQuota:
			hs.Duty = min(1, c.quota.CPUs()/n)
			hs.Quota = c.quota.CPUs()
		default:
			hs.Duty = c.duty()
			hs.Step, hs.Steps, hs.CPUs = c.step, c.steps, c.cpus.String()
		}
		out = append(out, hs)
	}
	slices.SortFunc(out, func(a, b api.HoldState) int { return cmp.Compare(a.Policy, b.Policy) })
	return out
}

// heldDomains are the L3 domains where crosstalk holds a tenant down
// now (any policy, any lever, resctrl classes included): their probe
// baselines must not learn the held state as quiet.
func (a *Agent) heldDomains() []int {
	set := map[int]bool{}
	for _, h := range a.arb.holds {
		if len(h.claims) == 0 {
			continue
		}
		for _, d := range a.domainsOf(h.tenant.CPUs) {
			set[d] = true
		}
	}
	for _, d := range a.arb.classedDomains() {
		set[d] = true
	}
	out := make([]int, 0, len(set))
	for d := range set {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}
