package agent

import (
	"strings"
	"time"
)

// proofLedger is what the proofs remember of each suspect between them,
// for both the probe policy and CPU wait: its backoffs (per backoff key:
// an acquittal, a useless throttle, an actuator that cannot act), the
// evidence an inconclusive proof left for the next to continue, and the
// time it spent capped for proofs, against the budget.
type proofLedger struct {
	cfg     ProofConfig
	backoff map[string]backoff
	// carry is the evidence an inconclusive proof left, per backoff key.
	carry map[string]carried
	// acquitted is the evidence an acquittal left, per backoff key, until
	// its suspect is proved again early (see recheckable) or
	// recheckWindow passes.
	acquitted map[string]acquittal
	// capTime is each tenant's proof cap time in the last minute.
	capTime map[string][]capSlot
}

func newProofLedger(cfg ProofConfig) *proofLedger {
	return &proofLedger{cfg: cfg, backoff: map[string]backoff{}, carry: map[string]carried{}, acquitted: map[string]acquittal{}, capTime: map[string][]capSlot{}}
}

// backedOff reports whether key is backed off at now.
func (l *proofLedger) backedOff(key string, now time.Time) bool {
	return now.Before(l.backoff[key].until)
}

// backOff backs key off from now, for twice as long as the last time,
// within the configured bounds.
func (l *proofLedger) backOff(key string, now time.Time) {
	b := l.backoff[key]
	if b.next == 0 {
		b.next = l.cfg.Backoff
	}
	b.until, b.since = now.Add(b.next), now
	b.next = min(2*b.next, l.cfg.MaxBackoff)
	l.backoff[key] = b
}

// holdOff backs key off from now until until at least, keeping a longer
// backoff and the doubling it had.
func (l *proofLedger) holdOff(key string, now, until time.Time) {
	b := l.backoff[key]
	if b.until.Before(until) {
		b.until = until
	}
	b.since = now
	l.backoff[key] = b
}

// tried says when key was last backed off, and whether it has been: a
// proof of it ended without a conviction (acquitted, or inconclusive), its
// throttle did not help, or its actuator failed. Kept while the tenant is
// present; a conviction forgives it.
func (l *proofLedger) tried(key string) (time.Time, bool) {
	b, ok := l.backoff[key]
	return b.since, ok
}

// forgive forgets key's backoff.
func (l *proofLedger) forgive(key string) { delete(l.backoff, key) }

// prune forgets the backoffs of tenants no longer present.
func (l *proofLedger) prune(present func(id string) bool) {
	for k := range l.backoff {
		if !present(keyID(k)) {
			delete(l.backoff, k)
		}
	}
	for k := range l.acquitted {
		if !present(keyID(k)) {
			delete(l.acquitted, k)
		}
	}
}

// keyID is the tenant ID of a backoff key.
func keyID(key string) string {
	for _, sig := range victimSignals {
		key = strings.TrimPrefix(key, sig+":")
	}
	return key
}

// leaning is the evidence an inconclusive proof left on key within
// carryWindow when it leans to guilt (at least leanEvidence), else 0.
func (l *proofLedger) leaning(key string, now time.Time) float64 {
	if e, ok := l.carriedEvidence(key, now); ok && e >= leanEvidence {
		return e
	}
	return 0
}

// carriedEvidence is the evidence an inconclusive proof of key left within
// carryWindow, if one did.
func (l *proofLedger) carriedEvidence(key string, now time.Time) (float64, bool) {
	c, ok := l.carry[key]
	if !ok || now.Sub(c.at) > carryWindow {
		return 0, false
	}
	return c.evidence, true
}

// takeCarry hands the next proof of key the evidence the last left within
// carryWindow (1, a new chain, when none), and forgets it.
func (l *proofLedger) takeCarry(key string, now time.Time) float64 {
	carry := 1.0
	if e, ok := l.carriedEvidence(key, now); ok {
		carry = e
	}
	delete(l.carry, key)
	return carry
}

// keepCarry keeps the evidence an inconclusive proof of key ended with,
// and forgets what is older than carryWindow.
func (l *proofLedger) keepCarry(key string, evidence float64, now time.Time) {
	for k, c := range l.carry {
		if now.Sub(c.at) > carryWindow {
			delete(l.carry, k)
		}
	}
	l.carry[key] = carried{evidence: evidence, at: now}
}

// noteAcquittal keeps the evidence the acquittal of key ended with, for
// one early proof of it (see recheckable), and forgets what is older than
// recheckWindow.
func (l *proofLedger) noteAcquittal(key string, evidence float64, now time.Time) {
	for k, a := range l.acquitted {
		if now.Sub(a.at) > recheckWindow {
			delete(l.acquitted, k)
		}
	}
	l.acquitted[key] = acquittal{evidence: evidence, at: now}
}

// acquittedLately reports whether key was acquitted within recheckWindow,
// proved again early since or not.
func (l *proofLedger) acquittedLately(key string, now time.Time) bool {
	a, ok := l.acquitted[key]
	return ok && now.Sub(a.at) <= recheckWindow
}

// recheckable reports whether key was acquitted within recheckWindow and
// has not been proved again early since, and is within its proof
// allowance.
func (l *proofLedger) recheckable(key, id string, now time.Time) bool {
	a, ok := l.acquitted[key]
	return ok && !a.rechecked && now.Sub(a.at) <= recheckWindow && !l.overBudget(key, id, now)
}

// takeRecheck starts the early proof of an acquitted key: the acquittal's
// evidence becomes the carry the proof continues (takeCarry), and the
// acquittal is marked, so that it is proved early once. The backoff
// stands for the other ways to a proof.
func (l *proofLedger) takeRecheck(key string, now time.Time) {
	if a, ok := l.acquitted[key]; ok && !a.rechecked {
		a.rechecked = true
		l.acquitted[key] = a
		l.carry[key] = carried{evidence: a.evidence, at: now}
	}
}

// acquittal is what an acquittal left: its evidence, when, and whether
// its suspect has been proved again early since.
type acquittal struct {
	evidence  float64
	at        time.Time
	rechecked bool
}

// pending reports whether key's last proof ended inconclusive within
// carryWindow and the next has not started: it will be proved again soon.
func (l *proofLedger) pending(key string, now time.Time) bool {
	_, ok := l.carriedEvidence(key, now)
	return ok
}

// recheckWindow is how long after an acquittal its suspect may be proved
// again early, when the contention stays and nobody else can be proved.
const recheckWindow = 10 * time.Second

// capSpent books d of proof cap time on a tenant (at now) and forgets
// what is older than a minute; it returns what the tenant was capped in
// the last minute.
func (l *proofLedger) capSpent(id string, now time.Time, d time.Duration) time.Duration {
	spent := l.capTime[id]
	keep := spent[:0]
	for _, s := range spent {
		if now.Sub(s.at) < time.Minute {
			keep = append(keep, s)
		}
	}
	if d > 0 {
		keep = append(keep, capSlot{at: now, d: d})
	}
	var total time.Duration
	for _, s := range keep {
		total += s.d
	}
	if len(keep) == 0 {
		delete(l.capTime, id)
	} else {
		l.capTime[id] = keep
	}
	return total
}

// budgetBoost is the most a suspect's evidence multiplies its proof
// budget by (see allowance).
const budgetBoost = 4

// allowance is the proof cap time a tenant may have spent in the last
// minute and still be proved for the signal of key: the budget, times the
// evidence its last proof left leaning to guilt, up to budgetBoost times.
// A polluter in bursts is proved burst after burst, each proof continuing
// the last one's evidence (on the dev VM a stress-ng --lockbus in 0.3 s
// bursts ran out of a 1 s budget at evidence 70, 86 and 99.6, one burst
// short of its conviction). For a tenant whose cap moves nothing the
// evidence is a nonnegative supermartingale from 1, so it reaches k with
// probability at most 1/k: an innocent gets k times the budget or more
// with at most that probability, and never more than budgetBoost times.
func (l *proofLedger) allowance(key string, now time.Time) time.Duration {
	boost := min(budgetBoost, max(1, l.leaning(key, now)))
	return time.Duration(float64(l.cfg.Budget) * boost)
}

// overBudget says a tenant was capped for proofs in the last minute as
// much as its allowance for the signal of key: it is not proved for it
// again until that passes.
func (l *proofLedger) overBudget(key, id string, now time.Time) bool {
	return l.capSpent(id, now, 0) >= l.allowance(key, now)
}

// resting reports whether a tenant may not be proved for signal now: it
// was acquitted of it lately, or is over its proof allowance.
func (l *proofLedger) resting(signal, id string, now time.Time) bool {
	key := backoffKey(signal, id)
	return l.backedOff(key, now) || l.overBudget(key, id, now)
}

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

// capSlot is a stretch of proof cap time on a tenant.
type capSlot struct {
	at time.Time
	d  time.Duration
}
