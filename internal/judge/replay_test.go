package judge

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// A proof's recorded trials, scored again, give its verdict and evidence:
// for polluters and innocents, with the host's noise and its storms in
// bursts, for a proof continuing a chain's evidence, and for one stopped
// before its readings decided. Any change to a reading, or other proof
// settings, shows at the trial it first changes.
func TestReplayReproducesProofs(t *testing.T) {
	cfg := ProofConfig{}
	cfg.Fill()
	t0 := time.Unix(1000, 0)
	hosts := map[string]func(seed uint64) world{
		"polluter": func(seed uint64) world {
			n := &noise{rng: rand.New(rand.NewPCG(seed, 1)), sigma: 0.1, burst: 2, on: 0.1}
			return capLowers(func(at time.Duration) float64 { return 4 * n.at(at) }, 1/4.0)
		},
		"innocent": func(seed uint64) world {
			n := &noise{rng: rand.New(rand.NewPCG(seed, 2)), sigma: 0.15, burst: 3, on: 0.2}
			return capLowers(func(at time.Duration) float64 { return 4 * n.at(at) }, 1)
		},
		"bursts": func(seed uint64) world {
			rng := rand.New(rand.NewPCG(seed, 3))
			return func(at time.Duration, capped bool) float64 {
				if !capped && (at/(300*time.Millisecond))%2 == 0 && rng.Float64() < 0.5 {
					return 6
				}
				return 1 + 0.05*rng.Float64()
			}
		},
	}
	verdicts := map[string]int{}
	for name, makeWorld := range hosts {
		for seed := range uint64(30) {
			for _, carry := range []float64{1, 3, 0.4} {
				p := driveToVerdict(t, NewProofCarry(cfg, 5, t0, seed, carry), t0, makeWorld(seed))
				v := verdictOf(p)
				verdicts[v]++
				r := Replay(cfg, p.Before(), p.Trials())
				if !r.Reproduces(v, len(p.Trials())) || r.Verdict != v || !near(r.Evidence, p.Carry()) || !near(r.Carry, carry) {
					t.Fatalf("%s seed %d carry %g: recorded %s after %d trials, evidence %g; replayed %+v", name, seed, carry, v, len(p.Trials()), p.Carry(), r)
				}
				if p.Carried() != carry {
					t.Fatalf("a proof begun at %g says it began at %g", carry, p.Carried())
				}
				if r2 := ReplayFrom(cfg, p.Before(), p.Carried(), p.Trials()); r2.Verdict != r.Verdict || r2.Trials != r.Trials || r2.Diverged != -1 || !near(r2.Evidence, r.Evidence) || !near(r2.Carry, r.Carry) {
					t.Fatalf("%s seed %d carry %g: from the recorded start %+v, inferred %+v", name, seed, carry, r2, r)
				}
			}
		}
	}
	// The worlds reach every verdict, so each is replayed.
	for _, v := range []string{ProofGuilty, ProofInnocent, ProofInconclusive} {
		if verdicts[v] == 0 {
			t.Errorf("no proof ended %s: %v", v, verdicts)
		}
	}

	p := driveToVerdict(t, NewProof(cfg, 5, t0, 7), t0, hosts["polluter"](7))
	if verdictOf(p) != ProofGuilty || len(p.Trials()) < 3 {
		t.Fatalf("want a conviction after a few trials, got %s after %d", verdictOf(p), len(p.Trials()))
	}
	trials := p.Trials()

	t.Run("a reading changed", func(t *testing.T) {
		changed := slices.Clone(trials)
		changed[1].Freed = slices.Clone(changed[1].Freed)
		for i := range changed[1].Freed {
			changed[1].Freed[i] = 1 // the storm, freed, read as quiet
		}
		r := Replay(cfg, p.Before(), changed)
		if r.Reproduces(ProofGuilty, len(trials)) || r.Diverged != 1 {
			t.Errorf("replayed %+v, want trial 2 (index 1) to diverge", r)
		}
	})
	t.Run("other settings", func(t *testing.T) {
		other := cfg
		other.Bet = 0.5
		if r := Replay(other, p.Before(), trials); r.Reproduces(ProofGuilty, len(trials)) || r.Diverged != 1 {
			// The first trial's evidence sets the carry, so the second is
			// the first a different bet shows in.
			t.Errorf("replayed with bet 0.5: %+v, want trial 2 to diverge", r)
		}
		// From the recorded start the first trial's bet is checked too: a
		// proof of one trial (an acquittal on the first) no longer
		// reproduces under any bet.
		if r := ReplayFrom(other, p.Before(), 1, trials); r.Reproduces(ProofGuilty, len(trials)) || r.Diverged != 0 {
			t.Errorf("replayed from 1 with bet 0.5: %+v, want trial 1 to diverge", r)
		}
		if r := ReplayFrom(other, p.Before(), 1, trials[:1]); r.Diverged != 0 {
			t.Errorf("one trial replayed from 1 with bet 0.5: %+v, want it to diverge", r)
		}
	})
	t.Run("stopped before a verdict", func(t *testing.T) {
		q := NewProof(cfg, 5, t0, 11)
		w := hosts["innocent"](11)
		for len(q.Trials()) < 1 {
			plan := q.Plan()
			q.Observe(plan.SampleAt, w(plan.SampleAt.Sub(t0), plan.Capped), true)
		}
		q.Abort("agent stopping")
		r := Replay(cfg, q.Before(), q.Trials())
		if !r.Reproduces(ProofInconclusive, 1) || r.Verdict != "" {
			t.Errorf("a proof stopped after one trial replays as %+v", r)
		}
		if r.Reproduces(ProofGuilty, 1) {
			t.Error("a proof stopped before a verdict reproduces a conviction")
		}
	})
	t.Run("recorded past its verdict", func(t *testing.T) {
		extra := append(slices.Clone(trials), trials[len(trials)-1])
		if r := Replay(cfg, p.Before(), extra); r.Reproduces(ProofGuilty, len(extra)) || r.Trials != len(trials) {
			t.Errorf("a record with a trial after its verdict replays as %+v", r)
		}
	})
	if r := Replay(cfg, 5, nil); r.Verdict != "" || r.Evidence != 1 || r.Diverged != -1 {
		t.Errorf("no trials: %+v", r)
	}
}
