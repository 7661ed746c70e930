package agent

import (
	"context"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
)

// What the policies and the prover ask of the agent about the proofs and
// throttles they share.

// capped reports whether crosstalk is capping a tenant now: throttled,
// under proof, or held by a policy.
func (a *Agent) capped(id string) bool {
	if _, ok := a.throttles.throttled[id]; ok {
		return true
	}
	return a.prover.proving(id) || a.arb.held(id, "")
}

// resting reports whether a tenant may not be proved for signal now: it
// was acquitted of it lately, or is over its proof budget.
func (a *Agent) resting(signal, id string, now time.Time) bool {
	return a.ledger.resting(signal, id, now)
}

// mayProve reports whether a new proof may start: there is room for
// another throttle, and the last change has had a couple of intervals to
// settle.
func (a *Agent) mayProve(now time.Time) bool {
	return len(a.throttles.throttled) < a.cfg.MaxThrottled && now.Sub(a.rec.lastChange) >= 2*a.cfg.Interval
}

// startProof starts a proof for a policy (see prover.start).
func (a *Agent) startProof(ctx context.Context, now time.Time, p *proof, before float64) {
	a.prover.start(ctx, now, p, before)
}

// readable is the prover's (which see), for the probe policy.
func (a *Agent) readable(p *proof, before float64) bool { return a.prover.readable(p, before) }

// tightening and tighteningOn are the throttles' (which see), for the
// policies.
func (a *Agent) tightening(signal string, cpus cpuset.Set) bool {
	return a.throttles.tightening(signal, cpus)
}
func (a *Agent) tighteningOn(domains []int) bool { return a.throttles.tighteningOn(domains) }
func (a *Agent) heldSince(domains []int, kind string) time.Time {
	return a.throttles.heldSince(domains, kind)
}
