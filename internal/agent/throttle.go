package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

type throttled struct {
	tenant sense.Tenant
	thr    *judge.DutyThrottle
	signal string // what convicted it: signalProbe or signalWait
	// kind is the probe kind its proof read (signalProbe): its duty
	// controller answers to that kind alone. Another kind's reading says
	// nothing of what holding it down did (the LLC walk reads what the
	// physical host's other tenants do to the cache as well), and read
	// as the contention it would have it released as useless.
	kind   string
	reason string // the conviction, for a re-throttle on its record
	since  time.Time
}

// idleGrace is how long after a throttle begins its tenant is not taken
// for idle: the first windows span the proof's cap (1 ms a 1 s period,
// which may leave it waiting out the period) and the switch to the duty
// cycle, and read almost no CPU from a polluter that never stopped.
func (a *Agent) idleGrace() time.Duration { return proofPeriod + 2*a.cfg.Interval }

// convict is a polluter released because it stopped: should it come back
// while the contention does, it is throttled again at once, on this
// record, without a new proof (a proof then would cost its victims the
// proof's time again, and a polluter that pauses and resumes would run
// free at every resumption).
type convict struct {
	at     time.Time // released
	reason string
	kind   string // the probe kind its proof read
}

// recidivWindow is how long a released polluter's conviction stands.
const recidivWindow = 5 * time.Minute

// rethrottle throttles again, at the start step, a polluter released
// within recidivWindow because it stopped, now busy again on a domain the
// probes read contended. Its duty
// controller then verifies it as after a proof: if the contention stays,
// it is released as useless and its record dropped.
func (a *Agent) rethrottle(ctx context.Context, now time.Time, v judge.Verdict, present map[string]sample) {
	for id, c := range a.convicts {
		if now.Sub(c.at) > recidivWindow {
			delete(a.convicts, id)
			continue
		}
		s, ok := present[id]
		if !ok || s.usage < minBusy || len(a.throttled) >= a.cfg.MaxThrottled || a.held(id, "") || a.protected(s.t) {
			continue
		}
		if a.prover.proof != nil && a.prover.proof.tenant.ID == id {
			continue
		}
		hot := false
		for _, d := range a.domainsOf(s.t.CPUs) {
			hot = hot || slices.Contains(v.Domains, d)
		}
		if !hot {
			continue
		}
		thr := a.duty.Start(now, v.Ratio)
		q := a.sp.Quota(thr.Step, s.t.CPUs.Len())
		if err := a.apply(ctx, s.t, q, "convicted polluter busy again", now); err != nil {
			a.handleWriteErr(ctx, s.t, err)
			continue
		}
		delete(a.convicts, id)
		a.throttled[id] = &throttled{tenant: s.t, thr: thr, signal: signalProbe, kind: c.kind, reason: c.reason, since: now}
		a.record(now, s.t, api.KindThrottle, q.CPUs(), a.sp.Duty(thr.Step),
			fmt.Sprintf("convicted before and released %.1fs ago when it stopped; busy again (%.2f CPU) as the %.2f× contention returns: %s", now.Sub(c.at).Seconds(), s.usage, v.Ratio, c.reason))
	}
}

type backoff struct {
	until time.Time
	next  time.Duration
}

// control runs the duty controller of every throttled tenant; with
// probed false (no probe readings this interval) only those convicted for
// CPU wait, whose signal does not come from the probes.
//
// It returns true when a throttled tenant used less than its idle share:
// it has likely stopped, and the next interval should come soon to
// release it.
func (a *Agent) control(ctx context.Context, now time.Time, v judge.Verdict, present map[string]sample, probed bool) (idle bool) {
	for id, t := range a.throttled {
		if !probed && t.signal != signalWait {
			if _, ok := present[id]; ok {
				continue
			}
		}
		s, ok := present[id]
		if !ok {
			// The tenant vanished: nothing to restore, forget it.
			a.forgetHolds(ctx, id)
			delete(a.throttled, id)
			a.record(now, t.tenant, api.KindRelease, 0, 1, "tenant vanished")
			continue
		}
		ratio := a.cont.Worst(t.readings(v.Readings), a.domainsOf(t.tenant.CPUs))
		if t.signal == signalWait {
			// Convicted for its neighbours' CPU wait: held to that. (The
			// probes' noise must not make it look useless.)
			ratio = a.wait.ratio(t.tenant)
		}
		if ratio == 0 {
			ratio = 1
		}
		ncpus := t.tenant.CPUs.Len()
		// A tenant its quota held back in the window wanted more than it
		// got: not idle, whatever it used; nor is one just throttled
		// (idleGrace).
		used := s.usage
		if s.thrRatio > 0 || now.Sub(t.since) < a.idleGrace() {
			used = max(used, a.sp.Duty(t.thr.Step)*float64(ncpus))
		}
		d := a.duty.Next(t.thr, now, ratio, used, ncpus)
		if d != judge.DutyRelease && d != judge.DutyUseless && used < a.duty.IdleFraction*a.sp.Duty(t.thr.Step)*float64(ncpus) {
			idle = true
		}
		switch d {
		case judge.DutyUseless:
			// Held at the floor and the contention stays: it is not the
			// cause. Free it, and do not suspect it again for a while (nor
			// throttle it again on its record).
			delete(a.convicts, id)
			a.release(ctx, t.tenant, fmt.Sprintf("throttling it does not help: contention stayed at %.2f× while it was held down", ratio))
			delete(a.throttled, id)
			a.ledger.backOff(backoffKey(t.signal, id), now)
		case judge.DutyRelease:
			why := fmt.Sprintf("contention %.2f× stayed under %.2f× at full relaxation", ratio, a.duty.RelaxBelow)
			if used < a.duty.IdleFraction*a.sp.Duty(t.thr.Step)*float64(ncpus) {
				why = fmt.Sprintf("it stopped: %.2f CPU used of %.2f allowed, never held back by it", s.usage, a.sp.Duty(t.thr.Step)*float64(ncpus))
			}
			a.release(ctx, t.tenant, why)
			delete(a.throttled, id)
			if t.signal == signalProbe {
				a.convicts[id] = convict{at: now, reason: t.reason, kind: t.kind}
			}
		case judge.DutyTighten, judge.DutyRelax:
			q := a.sp.Quota(t.thr.Step, ncpus)
			if err := a.apply(ctx, t.tenant, q, fmt.Sprintf("duty %d/%d", t.thr.Step, a.sp.Steps), now); err != nil {
				a.handleWriteErr(ctx, t.tenant, err)
				continue
			}
			a.record(now, t.tenant, api.ActionKind(d), q.CPUs(), a.sp.Duty(t.thr.Step), fmt.Sprintf("contention %.2f×", ratio))
		}
	}
	return idle
}

// readings are the readings its controller answers to: those of the kind
// its proof read, where this interval has some; all of them otherwise.
func (t *throttled) readings(rs []judge.RatedReading) []judge.RatedReading {
	if t.kind == "" {
		return rs
	}
	var out []judge.RatedReading
	for _, r := range rs {
		if r.Kind == t.kind {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return rs
	}
	return out
}

// unavailable handles an actuator that cannot act now (libvirtd
// restarting, a domain libvirt is still starting): the tenant is left alone
// for a few intervals, for every signal, and the journal says why.
func (a *Agent) unavailable(t sense.Tenant, err error) {
	a.log.Warn("cannot act on tenant now; retrying shortly", "tenant", t.Name, "err", err)
	a.journal(act.Event{Kind: "error", Tenant: t.ID, Name: t.Name, Detail: err.Error()})
	until := a.d.Now().Add(max(time.Second, 4*a.cfg.Interval))
	for _, k := range []string{backoffKey(signalProbe, t.ID), backoffKey(signalWait, t.ID)} {
		a.ledger.holdOff(k, until)
	}
}

// capped reports whether crosstalk is capping a tenant now: throttled,
// under proof, or held by a policy.
func (a *Agent) capped(id string) bool {
	if _, ok := a.throttled[id]; ok {
		return true
	}
	return a.prover.proving(id) || a.held(id, "")
}

// mayProve reports whether a new proof may start: there is room for
// another throttle, and the last change has had a couple of intervals to
// settle.
func (a *Agent) mayProve(now time.Time) bool {
	return len(a.throttled) < a.cfg.MaxThrottled && now.Sub(a.lastChange) >= 2*a.cfg.Interval
}

// tightening reports whether a tenant throttled for signal on cpus can
// still be held tighter.
func (a *Agent) tightening(signal string, cpus cpuset.Set) bool {
	for _, t := range a.throttled {
		if t.signal == signal && !t.tenant.CPUs.Intersect(cpus).IsEmpty() && t.thr.Step > a.duty.FloorStep {
			return true
		}
	}
	return false
}

// tighteningOn reports whether a throttled tenant on one of domains can
// still be held tighter.
func (a *Agent) tighteningOn(domains []int) bool {
	for _, t := range a.throttled {
		for _, d := range a.domainsOf(t.tenant.CPUs) {
			if slices.Contains(domains, d) && t.thr.Step > a.duty.FloorStep {
				return true
			}
		}
	}
	return false
}

// convicted throttles a tenant its proof found guilty (why) at the
// duty controller's start step.
func (a *Agent) convicted(ctx context.Context, now time.Time, p *proof, why string) {
	key := backoffKey(p.signal, p.tenant.ID)
	thr := a.duty.Start(now, p.p.Before())
	q := a.sp.Quota(thr.Step, p.tenant.CPUs.Len())
	if err := a.apply(ctx, p.tenant, q, "proven polluter", now); err != nil {
		a.handleWriteErr(ctx, p.tenant, err)
		// Its proof's cap, if on, would stay held with no proof and no
		// throttle to end it: lift it (a VM's through its cgroup files
		// while libvirt does not answer, whatever that call left). The
		// conviction stands: busy again while the contention is, it is
		// throttled on this record once the actuator answers, with no new
		// proof (rethrottle).
		if p.capped {
			a.dropProbeHold(ctx, p.tenant)
			p.capped = false
			a.recordSlot(now, p.tenant, api.KindProofFree, 0, "proven, but its throttle could not be set: "+err.Error())
		}
		if !errors.Is(err, act.ErrGone) && p.signal == signalProbe {
			a.convicts[p.tenant.ID] = convict{at: now, reason: "proven polluter: " + why, kind: p.kind}
		}
		return
	}
	a.throttled[p.tenant.ID] = &throttled{tenant: p.tenant, thr: thr, signal: p.signal, kind: p.kind, reason: "proven polluter: " + why, since: now}
	a.ledger.forgive(key)
	a.record(now, p.tenant, api.KindThrottle, q.CPUs(), a.sp.Duty(thr.Step), "proven polluter: "+why+"; "+p.reason)
}

// startProof starts a proof for a policy (see prover.start).
func (a *Agent) startProof(ctx context.Context, now time.Time, p *proof, before float64) {
	a.prover.start(ctx, now, p, before)
}
