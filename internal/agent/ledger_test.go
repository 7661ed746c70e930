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
	l.holdOff("/t", now.Add(time.Second))
	if !l.backedOff("/t", now.Add(24*time.Second)) {
		t.Error("a shorter hold-off cut the backoff short")
	}
	l.holdOff("/t", now.Add(time.Minute))
	if !l.backedOff("/t", now.Add(59*time.Second)) || l.backedOff("/t", now.Add(time.Minute)) {
		t.Error("a longer hold-off did not extend the backoff to its end")
	}
	// Resting per signal: the probe's backoff does not rest CPU wait.
	if !l.resting(signalProbe, "/t", now) || l.resting(signalWait, "/t", now) {
		t.Error("backoffs are not kept per signal")
	}
	// Pruning keeps the present tenant's backoffs, of every signal.
	l.holdOff(backoffKey(signalWait, "/t"), now.Add(time.Second))
	l.holdOff(backoffKey(signalCPI, "/t"), now.Add(time.Second))
	l.holdOff("/gone", now.Add(time.Second))
	l.holdOff(backoffKey(signalWait, "/gone"), now.Add(time.Second))
	l.holdOff(backoffKey(signalCPI, "/gone"), now.Add(time.Second))
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
	if !l.overBudget("/t", now.Add(40*time.Second)) {
		t.Error("2.5 s capped in the last minute is within a 2 s budget")
	}
	if !l.resting(signalWait, "/t", now.Add(40*time.Second)) {
		t.Error("a tenant over its budget does not rest")
	}
	if l.overBudget("/t", now.Add(61*time.Second)) {
		t.Error("cap time over a minute old still counts")
	}
}
