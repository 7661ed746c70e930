package agent

import (
	"fmt"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

type throttled struct {
	tenant sense.Tenant
	thr    *act.Throttle
	signal string // what convicted it: signalProbe or signalWait
}

type backoff struct {
	until time.Time
	next  time.Duration
}

// controlLocked runs the duty controller of every throttled tenant; with
// probed false (no probe readings this interval) only those convicted for
// CPU wait, whose signal does not come from the probes.
//
// It returns true when a throttled tenant used less than its idle share:
// it has likely stopped, and the next interval should come soon to
// release it.
func (a *Agent) controlLocked(now time.Time, v judge.Verdict, present map[string]sample, probed bool) (idle bool) {
	for id, t := range a.throttled {
		if !probed && t.signal != signalWait {
			if _, ok := present[id]; ok {
				continue
			}
		}
		s, ok := present[id]
		if !ok {
			// The tenant vanished: nothing to restore, forget it.
			a.forgetHoldsLocked(id)
			delete(a.throttled, id)
			a.recordLocked(now, t.tenant, "release", 0, 1, "tenant vanished")
			continue
		}
		ratio := a.cont.Worst(v.Readings, a.domainsOf(t.tenant.CPUs))
		if t.signal == signalWait {
			// Convicted for its neighbours' CPU wait: held to that. (The
			// probes' noise must not make it look useless.)
			ratio = a.waitRatioLocked(t.tenant)
		}
		if ratio == 0 {
			ratio = 1
		}
		ncpus := t.tenant.CPUs.Len()
		// A tenant its quota held back in the window wanted more than it
		// got: not idle, whatever it used (right after a conviction it may
		// still be waiting out the proof's long cap period).
		used := s.usage
		if s.thrRatio > 0 {
			used = max(used, a.sp.Duty(t.thr.Step)*float64(ncpus))
		}
		d := a.sp.Next(t.thr, now, ratio, used, ncpus)
		if d != act.Release && d != act.Useless && used < a.sp.IdleFraction*a.sp.Duty(t.thr.Step)*float64(ncpus) {
			idle = true
		}
		switch d {
		case act.Useless:
			// Held at the floor and the contention stays: it is not the
			// cause. Free it, and do not suspect it again for a while.
			a.releaseLocked(t.tenant, fmt.Sprintf("throttling it does not help: contention stayed at %.2f× while it was held down", ratio))
			delete(a.throttled, id)
			key := backoffKey(t.signal, id)
			a.backoff[key] = a.nextBackoff(key, now)
		case act.Release:
			why := fmt.Sprintf("contention %.2f× stayed under %.2f× at full relaxation", ratio, a.sp.RelaxBelow)
			if used < a.sp.IdleFraction*a.sp.Duty(t.thr.Step)*float64(ncpus) {
				why = fmt.Sprintf("it stopped: %.2f CPU used of %.2f allowed, never held back by it", s.usage, a.sp.Duty(t.thr.Step)*float64(ncpus))
			}
			a.releaseLocked(t.tenant, why)
			delete(a.throttled, id)
		case act.Tighten, act.Relax:
			q := a.sp.Quota(t.thr.Step, ncpus)
			if err := a.apply(t.tenant, q, fmt.Sprintf("duty %d/%d", t.thr.Step, a.sp.Steps), now); err != nil {
				a.handleWriteErr(t.tenant, err)
				continue
			}
			a.recordLocked(now, t.tenant, string(d), q.CPUs(), a.sp.Duty(t.thr.Step), fmt.Sprintf("contention %.2f×", ratio))
		}
	}
	return idle
}
