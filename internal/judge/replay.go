package judge

import (
	"math"
	"time"
)

// Replayed is what a proof's recorded trials give when scored again.
type Replayed struct {
	// Verdict is the verdict the trials reach ("" where they reach none:
	// the proof was stopped before, by the agent stopping, the suspect
	// vanishing or its budget of cap time).
	Verdict string
	// Trials is how many trials the verdict took; fewer than recorded
	// means the recorded proof ran on past the point its readings decide.
	Trials int
	// Evidence is the evidence after those trials; Carry the evidence the
	// proof began with (continued from a previous proof of the suspect).
	Evidence, Carry float64
	// Diverged is the first trial whose outcome, drop, score or evidence differs
	// from the record (0-based; -1 where every trial scored agrees).
	Diverged int
}

// Reproduces says whether the replay gives what the record says: the
// verdict (or none, for a proof stopped before its readings decided), after
// every recorded trial, each scored as recorded.
func (r Replayed) Reproduces(verdict string, trials int) bool {
	if r.Diverged >= 0 || r.Trials != trials {
		return false
	}
	return r.Verdict == verdict || r.Verdict == "" && verdict == ProofInconclusive
}

// Replay scores a proof's recorded trials again under cfg against
// contention at before: a proof's verdict depends on nothing but its
// readings and its settings (the coin only chose which slot came first),
// so anyone holding the journal can check a conviction without trusting
// the agent that gave it. The evidence the proof began
// with (a chain continued from a previous proof) is taken from the first
// trial's record.
//
// A journal from before proofs recorded the evidence they began with has
// only the first trial's record to take it from, and so cannot check that
// trial's bet; ReplayFrom, given the recorded start, checks every trial.
func Replay(cfg ProofConfig, before float64, trials []Trial) Replayed {
	carry := 1.0
	if len(trials) > 0 {
		first := replay(cfg, before, 1, trials[:1])
		if first.Evidence > 0 && trials[0].Evidence > 0 {
			carry = trials[0].Evidence / first.Evidence
		}
	}
	return ReplayFrom(cfg, before, carry, trials)
}

// ReplayFrom is Replay from the evidence the proof began with, as its
// record says (1 for a proof that continued none).
func ReplayFrom(cfg ProofConfig, before, carry float64, trials []Trial) Replayed {
	if len(trials) == 0 {
		return Replayed{Evidence: carry, Carry: carry, Diverged: -1}
	}
	return replay(cfg, before, carry, trials)
}

func replay(cfg ProofConfig, before, carry float64, trials []Trial) Replayed {
	p := NewProofCarry(cfg, before, time.Time{}, 0, carry)
	out := Replayed{Carry: p.evidence, Diverged: -1}
	for i, rec := range trials {
		t := &p.trials[len(p.trials)-1]
		*t = Trial{CappedFirst: rec.CappedFirst, Capped: rec.Capped, Freed: rec.Freed}
		p.score(t)
		out.Trials = i + 1
		if out.Diverged < 0 && !sameTrial(*t, rec) {
			out.Diverged = i
		}
		if p.decide() {
			break
		}
		p.trials = append(p.trials, Trial{})
	}
	out.Verdict, out.Evidence = p.verdict, p.evidence
	return out
}

// sameTrial compares a replayed trial's scoring with its record, to a
// relative 1e-9 (the journal's JSON keeps float64s exactly; the tolerance
// is for a record written by another build's arithmetic).
func sameTrial(got, rec Trial) bool {
	return got.Outcome == rec.Outcome && got.FreedHits == rec.FreedHits && got.CappedHits == rec.CappedHits &&
		near(got.Drop, rec.Drop) && near(got.Score, rec.Score) && near(got.Evidence, rec.Evidence)
}

func near(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*max(1, math.Abs(a), math.Abs(b))
}
