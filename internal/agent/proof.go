package agent

import (
	"time"

	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// proof is a perturbation proof in progress (judge.Proof) and what the
// agent needs to run it: whom it caps, where it reads, and the cap state
// it applied last.
type proof struct {
	tenant sense.Tenant
	p      *judge.Proof
	cpu    CPUDomain // where the probe reads
	kind   string    // the probe kind that showed the contention ("" = all)
	reason string
	capped bool // the cap is applied now
	// switched says the cap state changed since the last reading: a
	// CPU-wait reading's window then spans both states.
	switched bool
	since    time.Time // when the cap was last applied
	next     time.Time // the next reading
	// signal is the contention being proven: signalProbe (the canary
	// probes on cpu) or signalWait (the victims' CPU wait, waitFrom their
	// counters at the previous reading).
	signal   string
	victims  []sense.Tenant
	waitFrom map[string]sense.TenantStats
}

// proofPeriod is the CFS period of a proof's hard cap: the longest the
// kernel takes, so that the 1 ms a period the capped suspect may still run
// (right when the cap is set, before a slot's first reading) is refilled in
// a slot once in twenty at most.
const proofPeriod = time.Second

// CPUDomain is a CPU and its L3 domain.
type CPUDomain struct{ Domain, CPU int }

// inconclusiveRetry is how soon a suspect whose proof was inconclusive
// may be proved again, when its evidence so far is against it.
const inconclusiveRetry = time.Second

// carried is the evidence an inconclusive proof ended with.
type carried struct {
	evidence float64
	at       time.Time
}

// carryWindow is how long an inconclusive proof's evidence waits for the
// next proof of its suspect: a proof started later begins a new chain at 1
// (each chain convicts a tenant whose cap does nothing with probability at
// most Alpha; a chain is one martingale whichever way its proofs ended).
const carryWindow = 30 * time.Second

// resting reports whether a tenant may not be proved for signal now: it
// was acquitted of it lately, or is over its proof budget.
func (a *Agent) resting(signal, id string, now time.Time) bool {
	return a.ledger.resting(signal, id, now)
}

// capSlot is a stretch of proof cap time on a tenant.
type capSlot struct {
	at time.Time
	d  time.Duration
}
