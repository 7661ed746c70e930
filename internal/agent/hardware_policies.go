package agent

import (
	"errors"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// claimFor turns a policy's step on a lever into the claim the holds enforce.
func (a *Agent) claimFor(t sense.Tenant, lever judge.Lever, step, steps int, cpus cpuset.Set, reason string, now time.Time) claim {
	c := claim{lever: lever, step: step, steps: steps, cpus: cpus, reason: reason, since: now}
	if lever == judge.LeverCPUQuota {
		q := a.sp.Quota(step, t.CPUs.Len())
		if steps > 0 && steps != a.sp.Steps {
			q = cgroup.Quota{Quota: max(cgroup.MinQuota, time.Duration(float64(a.sp.Period)*float64(max(1, t.CPUs.Len()))*float64(step)/float64(steps))), Period: a.sp.Period}
		}
		c.quota = q
	}
	return c
}

func actionKind(held bool, oldDuty, newDuty float64) api.ActionKind {
	switch {
	case !held:
		return api.KindThrottle
	case newDuty < oldDuty:
		return api.KindTighten
	case newDuty > oldDuty:
		return api.KindRelax
	}
	return api.KindThrottle
}

// busLocksLocked runs Alita's bus-lock budget.
func (hw *Hardware) busLocksLocked(a *Agent, o *hwObservation, levers map[string]judge.LeverChoice) {
	in := judge.BusLockSample{At: o.now, Duration: o.dt}
	for _, s := range o.samples {
		rate, measured := s.counters[sense.EventBusLocks]
		l := levers[s.t.ID]
		in.Tenants = append(in.Tenants, judge.BusLockTenant{ID: s.t.ID, Name: s.t.Name, Rate: rate, Measured: measured,
			Cores: hw.cores(s.t.CPUs), Protected: o.protects[s.t.ID], Lever: l.Lever, Steps: l.Steps})
	}
	for _, d := range hw.busLocks.Observe(in) {
		s, ok := o.byID[d.Tenant]
		if !ok { // gone
			a.releaseHoldLocked(d.Tenant, api.PolicyBusLocks)
			continue
		}
		hw.applyStep(a, o.now, s.t, api.PolicyBusLocks, d.Lever, d.Action == judge.BusLockRelease, d.Step, d.Steps, levers[d.Tenant].CPUs, d.Reason)
	}
	st := hw.busLocks.Status()
	hw.status.BusLocks = &st
}

// applyStep applies one policy decision (a step on a lever, or a release)
// through the holds and records it.
func (hw *Hardware) applyStep(a *Agent, now time.Time, t sense.Tenant, policy api.Policy, lever judge.Lever, release bool, step, steps int, cpus cpuset.Set, reason string) {
	held := a.heldLocked(t.ID, policy)
	var oldDuty float64 = 1
	var oldLever judge.Lever
	if h := a.holds[t.ID]; h != nil {
		if c, ok := h.claims[policy]; ok {
			oldDuty, oldLever = claimDuty(c, t), c.lever
		}
	}
	if release || (steps > 0 && step >= steps) {
		if !held {
			return
		}
		if err := a.releaseHoldLocked(t.ID, policy); err != nil {
			a.log.Error("release", "policy", policy, "tenant", t.ID, "err", err)
			a.journal(act.Event{Kind: "error", Policy: string(policy), Tenant: t.ID, Name: t.Name, Detail: "release failed: " + err.Error()})
		}
		a.recordPolicyLocked(now, t, policy, api.KindRelease, api.Lever(lever), 1, reason)
		return
	}
	if lever == "" {
		hw.warnOnce("nolever:"+t.ID, "no lever can throttle "+t.ID, errors.New(reason))
		return
	}
	c := a.claimFor(t, lever, step, steps, cpus, reason, now)
	if err := a.holdLocked(t, policy, c); err != nil {
		a.handleWriteErr(t, err)
		return
	}
	d := claimDuty(c, t)
	if held && d == oldDuty && c.lever == oldLever {
		// Nothing changed (a power decision on one socket while another
		// sets the tenant's quota): no action to record, whose reason
		// would speak of a change that did not happen.
		a.log.Debug("claim unchanged", "policy", policy, "tenant", t.ID, "duty", d, "reason", reason)
		return
	}
	a.recordPolicyLocked(now, t, policy, actionKind(held, oldDuty, d), api.Lever(lever), d, reason)
}

func claimDuty(c claim, t sense.Tenant) float64 {
	if c.lever == judge.LeverCPUQuota {
		return min(1, c.quota.CPUs()/float64(max(1, t.CPUs.Len())))
	}
	return c.duty()
}

// permitsLocked runs Kyoto's pollution permits.
func (hw *Hardware) permitsLocked(a *Agent, o *hwObservation) {
	in := judge.PermitSample{At: o.now, Duration: o.dt}
	for _, s := range o.samples {
		act, ok := sense.TenantPollution(s.counters, hw.nominalKHz)
		in.Tenants = append(in.Tenants, judge.PermitTenant{ID: s.t.ID, Name: s.t.Name, Kind: s.t.Kind, LLCCapAct: act, Measured: ok,
			Usage: s.usage, CPUs: max(1, s.t.CPUs.Len()), Protected: o.protects[s.t.ID]})
	}
	for _, d := range hw.permits.Observe(in) {
		s, ok := o.byID[d.Tenant]
		if !ok {
			a.releaseHoldLocked(d.Tenant, api.PolicyPermits)
			continue
		}
		t := s.t
		if d.State != judge.PermitOver {
			if a.heldLocked(t.ID, api.PolicyPermits) {
				if err := a.releaseHoldLocked(t.ID, api.PolicyPermits); err != nil {
					a.log.Error("release", "policy", api.PolicyPermits, "tenant", t.ID, "err", err)
				}
				a.recordPolicyLocked(o.now, t, api.PolicyPermits, api.KindRelease, api.LeverCPUQuota, 1, "UNDER: "+d.Reason)
			}
			continue
		}
		q := cgroup.Quota{Quota: max(cgroup.MinQuota, time.Duration(d.CapCores*float64(a.sp.Period))), Period: a.sp.Period}
		held := a.heldLocked(t.ID, api.PolicyPermits)
		oldDuty := 1.0
		if h := a.holds[t.ID]; held && h != nil {
			oldDuty = claimDuty(h.claims[api.PolicyPermits], t)
		}
		if err := a.holdQuotaLocked(t, api.PolicyPermits, q, "OVER: "+d.Reason, o.now); err != nil {
			a.handleWriteErr(t, err)
			continue
		}
		kind := actionKind(held, oldDuty, claimDuty(claim{lever: judge.LeverCPUQuota, quota: q}, t))
		a.recordPolicyLocked(o.now, t, api.PolicyPermits, kind, api.LeverCPUQuota, d.Duty, "OVER: "+d.Reason)
	}
	hw.status.Permits = hw.permits.Status()
}

// powerLocked runs Alita's socket power budget.
func (hw *Hardware) powerLocked(a *Agent, o *hwObservation, levers map[string]judge.LeverChoice) {
	r := o.power
	in := judge.PowerSample{At: o.now, Duration: o.dt, CPUBusy: r.CPUBusy}
	for _, p := range r.Packages {
		in.Sockets = append(in.Sockets, judge.PowerSocket{ID: p.Package, Watts: p.Watts, CPUs: p.CPUs,
			AvgTemp: p.AvgTemp, HasTemp: p.HasTemp, PerCoreTemps: p.PerCoreTemps})
	}
	watts := map[string]float64{}
	for _, tp := range r.Tenants {
		s, ok := o.byID[tp.ID]
		if !ok {
			continue
		}
		watts[tp.ID] += tp.Watts
		l := levers[tp.ID]
		in.Tenants = append(in.Tenants, judge.PowerTenant{ID: tp.ID, Name: s.t.Name, Socket: tp.Package, CPUs: tp.CPUs,
			Watts: tp.Watts, Temp: tp.Temp, HasTemp: tp.HasTemp, Protected: o.protects[tp.ID], Lever: l.Lever, Steps: l.Steps})
	}
	hw.status.TenantWatts = watts
	hw.status.Packages = r.Packages
	for _, d := range hw.powerBudget.Observe(in) {
		s, ok := o.byID[d.Tenant]
		if !ok {
			a.releaseHoldLocked(d.Tenant, api.PolicyPower)
			a.releaseHoldLocked(d.Tenant, api.PowerSocketPolicy(d.Socket))
			continue
		}
		release := d.Action == judge.PowerRelease
		if d.Lever == judge.LeverCPUQuota {
			// Quota cannot act per socket: the tenant's lowest step on any
			// socket applies to all of it.
			step, steps, ok := hw.powerBudget.TenantStep(d.Tenant)
			hw.applyStep(a, o.now, s.t, api.PolicyPower, d.Lever, release && !ok, step, steps, s.t.CPUs, d.Reason)
			continue
		}
		hw.applyStep(a, o.now, s.t, api.PowerSocketPolicy(d.Socket), d.Lever, release, d.Step, d.Steps, d.CPUs, d.Reason)
	}
	hw.status.Power = hw.powerBudget.Sockets()
}
