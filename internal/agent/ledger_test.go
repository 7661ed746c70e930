package agent

import (
	"testing"
	"time"
)

func TestProofLedgerBackoffs(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newProofLedger(ProofConfig{Backoff: 10 * time.Second, MaxBackoff: 25 * time.Second, Budget: time.Second})
	// Each backoff doubles the next, up to the bound.
	for i, want := range []time.Duration{10 * time.Second, 20 * time.Second, 25 * time.Second, 25 * time.Second} {
		l.backOff("/t", now)
		if got := l.backoff["/t"].until.Sub(now); got != want {
			t.Errorf("backoff %d: %s, want %s", i, got, want)
		}
	}
	// A shorter hold-off leaves a longer backoff standing; a longer one extends it.
	l.holdOff("/t", now, now.Add(time.Second))
	if !l.backedOff("/t", now.Add(24*time.Second)) {
		t.Error("a shorter hold-off cut the backoff short")
	}
	l.holdOff("/t", now, now.Add(time.Minute))
	if !l.backedOff("/t", now.Add(59*time.Second)) || l.backedOff("/t", now.Add(time.Minute)) {
		t.Error("a longer hold-off did not extend the backoff to its end")
	}
	// Tried: since the last hold-off or backoff; never, for a key with none.
	if at, ok := l.tried("/t"); !ok || !at.Equal(now) {
		t.Errorf("tried /t = %v, %v; want %v", at, ok, now)
	}
	if _, ok := l.tried("/never"); ok {
		t.Error("a key never backed off reads tried")
	}
	// Resting per signal: the probe's backoff does not rest CPU wait.
	if !l.resting(signalProbe, "/t", now) || l.resting(signalWait, "/t", now) {
		t.Error("backoffs are not kept per signal")
	}
	// Pruning keeps the present tenant's backoffs, of every signal.
	l.holdOff(backoffKey(signalWait, "/t"), now, now.Add(time.Second))
	l.holdOff(backoffKey(signalCPI, "/t"), now, now.Add(time.Second))
	l.holdOff("/gone", now, now.Add(time.Second))
	l.holdOff(backoffKey(signalWait, "/gone"), now, now.Add(time.Second))
	l.holdOff(backoffKey(signalCPI, "/gone"), now, now.Add(time.Second))
	l.prune(func(id string) bool { return id == "/t" })
	if len(l.backoff) != 3 || !l.resting(signalWait, "/t", now) || !l.resting(signalCPI, "/t", now) {
		t.Errorf("after prune %v, want /t's three backoffs", l.backoff)
	}
	l.forgive("/t")
	if l.resting(signalProbe, "/t", now) {
		t.Error("a forgiven tenant still rests")
	}
}

func TestProofLedgerCarryAndBudget(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newProofLedger(ProofConfig{Budget: 2 * time.Second})
	l.keepCarry("/lean", 14, now)
	l.keepCarry("/weak", 0.5, now)
	if got := l.leaning("/lean", now.Add(time.Second)); got != 14 {
		t.Errorf("leaning evidence %v, want 14", got)
	}
	if got := l.leaning("/weak", now.Add(time.Second)); got != 0 {
		t.Errorf("evidence against guilt leans %v, want 0", got)
	}
	if got := l.takeCarry("/lean", now.Add(time.Second)); got != 14 {
		t.Errorf("carried %v, want 14", got)
	}
	if got := l.takeCarry("/lean", now.Add(time.Second)); got != 1 {
		t.Errorf("carried twice: %v, want a new chain at 1", got)
	}
	if got := l.takeCarry("/weak", now.Add(carryWindow+time.Second)); got != 1 {
		t.Errorf("stale carry %v, want a new chain at 1", got)
	}
	// The budget counts the last minute's cap time only.
	l.capSpent("/t", now, 1500*time.Millisecond)
	l.capSpent("/t", now.Add(30*time.Second), time.Second)
	if !l.overBudget(backoffKey(signalWait, "/t"), "/t", now.Add(40*time.Second)) {
		t.Error("2.5 s capped in the last minute is within a 2 s budget")
	}
	if !l.resting(signalWait, "/t", now.Add(40*time.Second)) {
		t.Error("a tenant over its budget does not rest")
	}
	if l.overBudget(backoffKey(signalWait, "/t"), "/t", now.Add(61*time.Second)) {
		t.Error("cap time over a minute old still counts")
	}
}

// A suspect whose last proof left evidence leaning to guilt may spend
// that many times the budget, up to budgetBoost times; one whose evidence
// does not lean, the budget.
func TestProofBudgetGrowsWithTheEvidence(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		evidence float64 // 0: no carry
		spent    time.Duration
		rests    bool
	}{
		{0, 1900 * time.Millisecond, false},
		{0, 2 * time.Second, true},
		{0.5, 2 * time.Second, true},
		{1.2, 2 * time.Second, true}, // under leanEvidence
		{3, 5900 * time.Millisecond, false},
		{3, 6 * time.Second, true},
		{70, 7900 * time.Millisecond, false},
		{70, 8 * time.Second, true}, // budgetBoost
	} {
		l := newProofLedger(ProofConfig{Budget: 2 * time.Second})
		key := backoffKey(signalProbe, "/t")
		if tc.evidence > 0 {
			l.keepCarry(key, tc.evidence, now)
		}
		l.capSpent("/t", now, tc.spent)
		if got := l.resting(signalProbe, "/t", now.Add(time.Second)); got != tc.rests {
			t.Errorf("evidence %v, %s spent: rests %v, want %v", tc.evidence, tc.spent, got, tc.rests)
		}
		// Another signal's evidence does not raise this one's allowance.
		if tc.evidence > 0 && tc.spent >= 2*time.Second && !l.resting(signalWait, "/t", now.Add(time.Second)) {
			t.Errorf("evidence %v on the probe raised CPU wait's allowance", tc.evidence)
		}
	}
}
