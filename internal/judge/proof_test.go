package judge

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// world is a synthetic host for proofs: the probe's contention ratio at a
// time, given whether the suspect is capped.
type world func(t time.Duration, capped bool) float64

// runProof drives one proof on virtual time against w and returns its
// verdict and how long the suspect was capped.
func runProof(t *testing.T, cfg ProofConfig, before float64, seed uint64, w world) (string, time.Duration) {
	t.Helper()
	t0 := time.Unix(1000, 0)
	p := NewProof(cfg, before, t0, seed)
	var cappedFor time.Duration
	last, lastCapped := t0, false
	for range 10000 {
		plan := p.Plan()
		if lastCapped {
			cappedFor += plan.SampleAt.Sub(last)
		}
		last, lastCapped = plan.SampleAt, plan.Capped
		if p.Observe(plan.SampleAt, w(plan.SampleAt.Sub(t0), plan.Capped), true) {
			v, why := p.Verdict()
			if why == "" {
				t.Fatalf("verdict %s without a reason", v)
			}
			return v, cappedFor
		}
	}
	t.Fatal("proof never ended")
	return "", 0
}

// convictions runs proofs against the world makeWorld builds for each
// seed and counts the convictions.
func convictions(t *testing.T, cfg ProofConfig, runs int, before float64, makeWorld func(seed uint64) world) (int, float64) {
	t.Helper()
	convicted := 0
	for seed := range uint64(runs) {
		if v, _ := runProof(t, cfg, before, seed*31+1, makeWorld(seed)); v == ProofGuilty {
			convicted++
		}
	}
	return convicted, float64(convicted) / float64(runs)
}

// capLowers is a world where the probe reads base, lowered by the factor
// while the suspect is capped.
func capLowers(base func(time.Duration) float64, factor float64) world {
	return func(at time.Duration, capped bool) float64 {
		x := base(at)
		if capped {
			x *= factor
		}
		return x
	}
}

// noise is an autocorrelated lognormal scatter with bursts of a contention
// nobody in the proof causes (another polluter, or the host), on a random
// on/off schedule: the noise the proof must not take for evidence.
type noise struct {
	rng   *rand.Rand
	sigma float64 // log-scale scatter of one reading
	burst float64 // ratio of a burst
	on    float64 // chance a 20 ms stretch is bursting
	state float64
	cur   time.Duration
	hot   bool
}

func (n *noise) at(t time.Duration) float64 {
	for n.cur < t {
		n.cur += 20 * time.Millisecond
		n.hot = n.rng.Float64() < n.on
		n.state = 0.7*n.state + 0.3*n.rng.NormFloat64()
	}
	x := math.Exp(n.sigma*(n.state+n.rng.NormFloat64()) + 0)
	if n.hot {
		x *= n.burst
	}
	return x
}

func TestProofFalseConvictionBound(t *testing.T) {
	cfg := ProofConfig{}
	cfg.Fill()
	alpha := cfg.FalseConviction()
	if alpha != 0.01 {
		t.Fatalf("default bound %.4f: want 1%%", alpha)
	}
	// Positive control: a polluter whose cap takes the contention from 4×
	// to about 1.1× is convicted, under the same noise.
	const runs = 3000
	cases := []struct {
		name   string
		before float64
		// effect is how much capping the suspect lowers the probe (log).
		effect       func(before float64) float64
		sigma, burst float64
		on           float64
	}{
		// The suspect does nothing: the contention is someone else's,
		// bursty and steady.
		{"null, bursty contention", 4, func(float64) float64 { return 0 }, 0.3, 4, 0.5},
		{"null, steady contention", 4, func(float64) float64 { return 0 }, 0.4, 4, 1},
		{"null, heavy scatter", 2, func(float64) float64 { return 0 }, 0.8, 2, 0.3},
		// Quiet but for the noise: trials are mostly quiet and say nothing.
		{"null, no contention left", 4, func(float64) float64 { return 0 }, 0.2, 1, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			shift := tc.effect(tc.before)
			convicted, rate := convictions(t, cfg, runs, tc.before, func(seed uint64) world {
				n := &noise{rng: rand.New(rand.NewPCG(seed, 7)), sigma: tc.sigma, burst: tc.burst, on: tc.on}
				return capLowers(n.at, math.Exp(-shift))
			})
			// The bound plus four standard errors of the estimate.
			if limit := alpha + 4*math.Sqrt(alpha*(1-alpha)/runs); rate > limit {
				t.Errorf("false convictions %d of %d (%.4f), bound %.4f", convicted, runs, rate, alpha)
			}
			t.Logf("false convictions %d of %d (%.4f; bound %.4f)", convicted, runs, rate, alpha)
		})
	}
}

// A tenant whose cap does move the probe, but by no more than an
// innocent's share of the contention (a quarter of it, log-ratio, at most
// 15%), is covered by the bound too: its own footprint where the probe
// reads, or a memory-bound victim's share of the traffic, is not what
// causes the contention. Its cap's effect is the same in every trial
// here, the worst case for the proof (a consistent effect adds up).
// The control: the same worlds with a cap that removes half of the
// contention convict in most single proofs (91% under the bursty noise,
// whose bursts come and go at the slots' own time scale).
func TestProofSmallEffect(t *testing.T) {
	cfg := ProofConfig{}
	cfg.Fill()
	alpha := cfg.FalseConviction()
	const runs = 2000
	cases := []struct {
		name   string
		before float64
		share  float64 // of the contention's log-ratio the cap removes
		noise  func(seed uint64) func(time.Duration) float64
	}{
		// Its own footprint, a tenth of a bursty 4× contention.
		{"footprint, bursty 4×", 4, 0.1, func(seed uint64) func(time.Duration) float64 {
			n := &noise{rng: rand.New(rand.NewPCG(seed, 9)), sigma: 0.2, burst: 4, on: 0.9}
			return n.at
		}},
		// A memory-bound victim under a weak LLC contention, as the
		// simulator showed one: its cap lowered the probe by 8-11% of a
		// 1.58× contention in every trial, and 24 trials of that
		// convicted it when the bet counted any consistent effect.
		{"memory-bound victim, steady 1.58×", 1.58, 0.2, func(seed uint64) func(time.Duration) float64 {
			rng := rand.New(rand.NewPCG(seed, 17))
			return func(time.Duration) float64 { return 1.58 * math.Exp(0.02*rng.NormFloat64()) }
		}},
		// The whole share at 2×: a quarter of the log-ratio would be a
		// 19% drop, over the 15% the share is clamped to (maxShare). A
		// cap that removes more than the share moves the evidence up by a
		// little each trial, and a long enough proof, or a chain of them,
		// convicts it.
		{"an innocent's whole share, steady 2×", 2, maxShare / math.Ln2, func(seed uint64) func(time.Duration) float64 {
			rng := rand.New(rand.NewPCG(seed, 19))
			return func(time.Duration) float64 { return 2 * math.Exp(0.05*rng.NormFloat64()) }
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, share := range []float64{tc.share, 0.5} {
				shift := share * math.Log(tc.before)
				convicted, rate := convictions(t, cfg, runs, tc.before, func(seed uint64) world {
					return capLowers(tc.noise(seed), math.Exp(-shift))
				})
				if share == 0.5 {
					if rate < 0.8 {
						t.Errorf("control: a cap that removes half the contention convicted %d of %d (%.3f)", convicted, runs, rate)
					}
					t.Logf("control: a cap removing half of the contention convicted %d of %d", convicted, runs)
					continue
				}
				if limit := alpha + 4*math.Sqrt(alpha*(1-alpha)/runs); rate > limit {
					t.Errorf("a cap removing %.0f%% of the contention convicted %d of %d (%.4f), bound %.4f", 100*share, convicted, runs, rate, alpha)
				}
				t.Logf("a cap removing %.0f%% of the contention convicted %d of %d", 100*share, convicted, runs)
			}
		})
	}
}

func TestProofConvictsAFootprintOnItsOwnCPU(t *testing.T) {
	cfg := ProofConfig{}
	cfg.Fill()
	const runs = 500
	_, rate := convictions(t, cfg, runs, 1.59, func(seed uint64) world {
		rng := rand.New(rand.NewPCG(seed, 13))
		return capLowers(func(time.Duration) float64 { return 1.5 * math.Exp(0.05*rng.NormFloat64()) }, 0.8)
	})
	if rate < 0.9 {
		t.Errorf("a cap that lowers the probe by a fifth, every trial, convicted in %.3f of proofs: the proof misses clear effects", rate)
	}
}

// A polluter is convicted under the noise seen on the dev VM with a
// split-lock polluter sharing its CPU with a bystander, and the DRAM probe
// on the victim's CPU: freed slots read it at 3-7× in about half of their
// readings and quiet in the rest (the host stalls the polluter's vCPU in
// bursts); capped slots read 1.0-1.1× (36 readings of 36), but a reading
// may now and then fall in the 1 ms a CFS period the capped polluter runs.
func TestProofConvictsPolluters(t *testing.T) {
	cfg := ProofConfig{}
	cfg.Fill()
	const runs = 1000
	cases := []struct {
		name     string
		before   float64
		capped   float64 // ratio while capped
		sigma    float64
		quietOff float64 // chance a freed reading is quiet anyway (a bursty polluter)
		leak     float64 // chance a capped reading catches the polluter's 1 ms
		minRate  float64
	}{
		{"split-lock storm", 7, 1.05, 0.1, 0, 0, 0.999},
		{"as measured on the dev VM", 7, 1.05, 0.3, 0.5, 0.005, 0.95},
		// Quiet in seven readings of ten: each slot's level moves by a
		// third of the contention, a trial counts in part, and the proof
		// takes longer but still convicts.
		{"burstier still", 5, 1.1, 0.3, 0.7, 0.005, 0.95},
		{"moderate contention", 2, 1.05, 0.1, 0.05, 0.005, 0.95},
		// A 7× storm showing in one reading of six (a split-lock polluter
		// sharing its CPU with a busy service, as the host stalls its
		// vCPU): most proofs convict, the rest end inconclusive and the
		// agent proves it again from their evidence.
		{"sparse storm", 7, 1.05, 0.2, 5.0 / 6, 0.005, 0.5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			guilty, rate := convictions(t, cfg, runs, tc.before, func(seed uint64) world {
				rng := rand.New(rand.NewPCG(seed, 11))
				return func(_ time.Duration, capped bool) float64 {
					x := math.Exp(tc.sigma * rng.NormFloat64())
					hot := !capped && rng.Float64() >= tc.quietOff || capped && rng.Float64() < tc.leak
					if hot {
						return tc.before * x
					}
					return tc.capped * x
				}
			})
			if rate < tc.minRate {
				t.Errorf("convicted %d of %d (%.3f), want at least %.3f", guilty, runs, rate, tc.minRate)
			}
			t.Logf("convicted %d of %d", guilty, runs)
		})
	}
}

// An innocent pays little: a proof of a tenant whose cap does nothing stops
// for futility, most often within two to four trials.
func TestProofInnocentCost(t *testing.T) {
	cfg := ProofConfig{}
	cfg.Fill()
	const runs = 2000
	var total time.Duration
	var all []time.Duration
	for seed := range uint64(runs) {
		n := &noise{rng: rand.New(rand.NewPCG(seed, 3)), sigma: 0.3, burst: 4, on: 0.5}
		v, capped := runProof(t, cfg, 4, seed, func(at time.Duration, _ bool) float64 { return n.at(at) })
		if v == ProofGuilty {
			continue
		}
		total += capped
		all = append(all, capped)
	}
	slices.Sort(all)
	mean, p95, worst := total/runs, all[len(all)*95/100], all[len(all)-1]
	// Each trial caps for one slot; under this noise (bursts of 4× on
	// half of the 20 ms stretches, the slot's own time scale, so that a
	// whole slot often bursts) a trial passes by chance now and then, each
	// pass asks two more trials of an acquittal (minAcquitTrials), and the
	// futility stop comes after five to six trials on average.
	if limit := 6 * cfg.Slot; mean > limit {
		t.Errorf("mean cap time of an innocent %s, want at most %s", mean, limit)
	}
	// The tail: a proof that draws a run of bursts in its freed slots
	// goes on for a dozen trials or more before futility stops it. With
	// the default slot that stays within half a second at p95 even
	// under this noise, which bursts far more than a host's.
	if limit := 500 * time.Millisecond; p95 > limit {
		t.Errorf("cap time of an innocent %s at p95, want at most %s", p95, limit)
	}
	if limit := time.Duration(cfg.Trials) * cfg.Slot * 3 / 2; worst > limit {
		t.Errorf("worst cap time %s beyond %s", worst, limit)
	}
	t.Logf("innocent capped %s on average, %s at p95, %s at worst", mean, p95, worst)
}

// A chain of proofs of one suspect, each continuing the evidence the one
// before left (NewProofCarry), is one martingale: the whole chain convicts
// a tenant whose cap does nothing with probability at most Alpha, however
// many proofs it runs.
func TestProofChainFalseConviction(t *testing.T) {
	cfg := ProofConfig{}
	cfg.Fill()
	const chains, proofs = 1000, 8
	convicted := 0
	for seed := range uint64(chains) {
		n := &noise{rng: rand.New(rand.NewPCG(seed, 21)), sigma: 0.3, burst: 4, on: 0.5}
		carry := 1.0
		t0 := time.Unix(1000, 0)
		for k := range proofs {
			p := NewProofCarry(cfg, 4, t0, seed*131+uint64(k), carry)
			for {
				plan := p.Plan()
				if p.Observe(plan.SampleAt, n.at(plan.SampleAt.Sub(time.Unix(1000, 0))), true) {
					t0 = plan.SampleAt
					break
				}
			}
			if v, _ := p.Verdict(); v == ProofGuilty {
				convicted++
				break
			}
			carry = p.Carry()
		}
	}
	if rate := float64(convicted) / chains; rate > cfg.Alpha+4*math.Sqrt(cfg.Alpha/chains) {
		t.Errorf("chains of %d proofs convicted %d of %d innocents", proofs, convicted, chains)
	}
	t.Logf("chains of %d proofs convicted %d of %d innocents", proofs, convicted, chains)
	// Positive control: the carried evidence is the last proof's, and a
	// proof continuing a high one needs fewer trials.
	p := NewProofCarry(cfg, 5, time.Unix(0, 0), 1, 50)
	driveClean(p)
	if v, _ := p.Verdict(); v != ProofGuilty || len(p.Trials()) != 2 || p.Carry() < 100 {
		t.Errorf("continuing evidence 50: %s after %d trials (evidence %.1f), want guilty after 2", v, len(p.Trials()), p.Carry())
	}
}

// driveClean runs a proof against a clean polluter: the probe reads 5×
// while it is free and 1× while it is capped.
func driveClean(p *Proof) {
	for range 10000 {
		plan := p.Plan()
		r := 5.0
		if plan.Capped {
			r = 1
		}
		if p.Observe(plan.SampleAt, r, true) {
			return
		}
	}
}

func TestProofMissingReadings(t *testing.T) {
	cfg := ProofConfig{}
	cfg.Fill()
	t0 := time.Unix(0, 0)
	p := NewProof(cfg, 5, t0, 1)
	for range 1000 {
		plan := p.Plan()
		if p.Observe(plan.SampleAt, 0, false) {
			break
		}
	}
	v, why := p.Verdict()
	if v != ProofInconclusive || why == "" {
		t.Fatalf("a proof that never read: %s (%s), want inconclusive", v, why)
	}
	// Positive control: the same proof with readings convicts.
	p = NewProof(cfg, 5, t0, 1)
	driveClean(p)
	if v, _ := p.Verdict(); v != ProofGuilty {
		t.Fatalf("clean polluter: %s", v)
	}
	// 1.8^8 ≥ 100: eight full trials, and not one more.
	if got := len(p.Trials()); got != 8 {
		t.Errorf("a clean polluter took %d trials, want 8 (stop at the sure verdict)", got)
	}
}

// The order of capped and freed slots is random and balanced: a fixed
// order would let a periodic noise line up with it.
func TestProofOrderIsRandomized(t *testing.T) {
	cfg := ProofConfig{}
	cfg.Fill()
	first, n := 0, 0
	for seed := range uint64(100) {
		p := NewProof(cfg, 5, time.Unix(0, 0), seed)
		driveClean(p)
		for _, tr := range p.Trials() {
			n++
			if tr.CappedFirst {
				first++
			}
		}
	}
	// 800 fair coins: 400 ± 14 (one standard deviation).
	if n != 800 || first < 340 || first > 460 {
		t.Errorf("%d of %d trials capped first; want a fair coin's share", first, n)
	}
}

// A proof whose contention goes away stops after three quiet trials in a
// row: capping the suspect longer would cost it for nothing.
func TestProofStopsWhenQuiet(t *testing.T) {
	cfg := ProofConfig{}
	cfg.Fill()
	t0 := time.Unix(0, 0)
	p := driveToVerdict(t, NewProof(cfg, 5, t0, 1), t0, func(time.Duration, bool) float64 { return 1 })
	if v, why := p.Verdict(); v != ProofInconclusive || len(p.Trials()) != 3 {
		t.Errorf("quiet proof: %s after %d trials (%s), want inconclusive after 3", v, len(p.Trials()), why)
	}
}

// A slot's readings start after its settle (half the slot unless set)
// and spread evenly over the rest, in capped and freed slots alike.
func TestProofSettle(t *testing.T) {
	for _, tc := range []struct {
		settle, first, step time.Duration
	}{
		{0, 10 * time.Millisecond, 2500 * time.Microsecond},
		{6 * time.Millisecond, 6 * time.Millisecond, 3500 * time.Microsecond},
	} {
		cfg := ProofConfig{Slot: 20 * time.Millisecond, Samples: 4, Settle: tc.settle}
		t0 := time.Unix(0, 0)
		p := NewProof(cfg, 5, t0, 1)
		for slot := range 4 {
			from := t0.Add(time.Duration(slot) * cfg.Slot)
			for i := range cfg.Samples {
				plan := p.Plan()
				if want := from.Add(tc.first + time.Duration(i)*tc.step); !plan.SampleAt.Equal(want) {
					t.Fatalf("settle %s: slot %d reading %d at %s, want %s", tc.settle, slot, i, plan.SampleAt.Sub(t0), want.Sub(t0))
				}
				p.Observe(from.Add(time.Duration(i+1)*cfg.Slot/time.Duration(cfg.Samples)), 1, true)
			}
		}
	}
}

func TestProofConfigValidate(t *testing.T) {
	good := ProofConfig{}
	good.Fill()
	if err := good.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, bad := range []ProofConfig{
		{Slot: time.Millisecond, Samples: 2, Trials: 10, Alpha: 0.01, Effect: 0.5, Bet: 0.8},
		{Slot: 40 * time.Millisecond, Samples: 2, Trials: 10, Alpha: 0.5, Effect: 0.5, Bet: 0.8},
		{Slot: 40 * time.Millisecond, Samples: 2, Trials: 10, Alpha: 0.01, Effect: math.NaN(), Bet: 0.8},
		{Slot: 40 * time.Millisecond, Samples: 0, Trials: 10, Alpha: 0.01, Effect: 0.5, Bet: 0.8},
		{Slot: 40 * time.Millisecond, Samples: 2, Trials: 10, Alpha: 0.01, Effect: 0.5, Bet: 1},
		{Slot: 40 * time.Millisecond, Settle: 40 * time.Millisecond, Samples: 2, Trials: 10, Alpha: 0.01, Effect: 0.5, Bet: 0.8},
		{Slot: 40 * time.Millisecond, Settle: -time.Millisecond, Samples: 2, Trials: 10, Alpha: 0.01, Effect: 0.5, Bet: 0.8},
	} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// A storm in bursts: the suspect's contention shows for a few trials,
// vanishes for three or four (the host's split-lock mitigation holding
// it), and comes back. Once its evidence leans to guilt, quiet trials no
// longer end the proof: it goes on and convicts. The control: a proof
// whose evidence does not lean (a suspect that never moved the probe)
// still ends after three quiet trials.
func TestProofGoesOnThroughTheQuietOfABurstyPolluter(t *testing.T) {
	cfg := ProofConfig{}
	cfg.Fill()
	slot := cfg.Slot
	// On for 3 trials (6 slots), off for 4, and so on.
	bursty := func(at time.Duration, capped bool) float64 {
		if capped || (at/(2*slot))%7 >= 3 {
			return 1
		}
		return 6
	}
	convicted := 0
	for seed := range uint64(50) {
		if v, _ := runProof(t, cfg, 6, seed*7+3, bursty); v == ProofGuilty {
			convicted++
		}
	}
	if convicted < 45 {
		t.Errorf("bursty polluter convicted in %d of 50 proofs, want nearly all", convicted)
	}
	quiet := func(time.Duration, bool) float64 { return 1 }
	if v, _ := runProof(t, cfg, 6, 1, quiet); v != ProofInconclusive {
		t.Errorf("quiet suspect: %s, want inconclusive", v)
	}
}

// driveToVerdict runs p, begun at t0, on virtual time against w until it
// reaches a verdict, and returns it.
func driveToVerdict(t *testing.T, p *Proof, t0 time.Time, w world) *Proof {
	t.Helper()
	for range 10000 {
		plan := p.Plan()
		if p.Observe(plan.SampleAt, w(plan.SampleAt.Sub(t0), plan.Capped), true) {
			return p
		}
	}
	t.Fatal("proof never ended")
	return nil
}

// verdictOf is a finished proof's verdict.
func verdictOf(p *Proof) string { v, _ := p.Verdict(); return v }

// A proof continuing a chain that leaned to guilt is not acquitted on
// trials that barely fail — a burst's tail, the gap before the next
// burst — while its evidence stands above where the chain began: the
// polluter's next burst convicts it. From 1, the same trials acquit.
func TestProofDoesNotAcquitAChainThatLeansToGuilt(t *testing.T) {
	cfg := ProofConfig{}
	cfg.Fill()
	slot := cfg.Slot
	weak := func(time.Duration, bool) float64 { return 1.4 } // over quiet, no effect
	run := func(carry float64, w world) *Proof {
		t.Helper()
		t0 := time.Unix(1000, 0)
		return driveToVerdict(t, NewProofCarry(cfg, 7.65, t0, 5, carry), t0, w)
	}
	if p := run(1, weak); len(p.Trials()) != 2 {
		v, why := p.Verdict()
		t.Fatalf("from 1, weak failing trials: %s after %d trials (%s), want innocent after 2: this would test nothing", v, len(p.Trials()), why)
	}
	p := run(2.8, weak)
	if v, _ := p.Verdict(); v != ProofInnocent || len(p.Trials()) <= 2 || p.Carry() >= 1 {
		t.Errorf("from 2.8, weak failing trials: %s after %d trials (evidence %.2f), want innocent only once the evidence is under 1", v, len(p.Trials()), p.Carry())
	}
	// The gap lasts three trials, then the storm is back.
	gapThenBurst := func(at time.Duration, capped bool) float64 {
		switch {
		case at < 6*slot:
			return 1.4
		case capped:
			return 1
		}
		return 6
	}
	if p := run(2.8, gapThenBurst); verdictOf(p) != ProofGuilty {
		v, why := p.Verdict()
		t.Errorf("a gap, then the burst: %s (%s), want guilty", v, why)
	}
}

// A leaky cap (the first slot after a quota is written lets the polluter
// run again) fails a polluter's trial now and then, and the trials after
// it convict: a proof whose first trial passed is not acquitted on its
// second failing, nor one with two passes on its fifth. A proof whose
// first two trials fail is acquitted there; one whose trials show nothing
// after a pass, once it has four and its evidence is back under 1.
func TestProofNeedsTwoMoreTrialsToAcquitForEachPass(t *testing.T) {
	cfg := ProofConfig{}
	cfg.Fill()
	slot := cfg.Slot
	run := func(w world) *Proof {
		t.Helper()
		t0 := time.Unix(1000, 0)
		return driveToVerdict(t, NewProof(cfg, 7, t0, 3), t0, w)
	}
	polluter := func(capped bool) float64 {
		if capped {
			return 1.05
		}
		return 7
	}
	// The second trial's capped slot reads as freed (the cap leaked),
	// and its freed slot catches a lull.
	leakySecond := func(at time.Duration, capped bool) float64 {
		if at >= 2*slot && at < 4*slot {
			if capped {
				return 7
			}
			return 1.4
		}
		return polluter(capped)
	}
	p := run(leakySecond)
	if ts := p.Trials(); len(ts) < 2 || ts[0].Outcome != TrialPass || ts[1].Outcome != TrialFail {
		t.Fatalf("trials %+v: want a pass, then a fail, or this tests nothing", ts)
	}
	if v, why := p.Verdict(); v != ProofGuilty {
		t.Errorf("a pass, a leaky fail, then the storm: %s after %d trials (%s), want guilty", v, len(p.Trials()), why)
	}
	nothing := func(time.Duration, bool) float64 { return 1.4 }
	if p := run(nothing); len(p.Trials()) != 2 || verdictOf(p) != ProofInnocent {
		v, why := p.Verdict()
		t.Errorf("no effect from the first trial: %s after %d trials (%s), want innocent after 2", v, len(p.Trials()), why)
	}
	passThenNothing := func(at time.Duration, capped bool) float64 {
		if at < 2*slot {
			return polluter(capped)
		}
		return 1.4
	}
	if p := run(passThenNothing); len(p.Trials()) < 4 || verdictOf(p) != ProofInnocent {
		v, why := p.Verdict()
		t.Errorf("a pass, then no effect: %s after %d trials (%s), want innocent after 4 or more", v, len(p.Trials()), why)
	}
	// Two passes, then trials that read the storm only while it is capped
	// (as the paced split-lock loop's did on the dev VM): six trials
	// before an acquittal, by when the storm shows again and convicts.
	twoPassesThenLeaks := func(at time.Duration, capped bool) float64 {
		switch {
		case at < 4*slot:
			return polluter(capped)
		case at < 10*slot:
			if capped {
				return 7
			}
			return 1.0
		}
		return polluter(capped)
	}
	if p := run(twoPassesThenLeaks); verdictOf(p) != ProofGuilty {
		v, why := p.Verdict()
		t.Errorf("two passes, three leaky fails, then the storm: %s after %d trials (%s), want guilty", v, len(p.Trials()), why)
	}
}

// Began moves a slot's plan to when its cap state took effect: later only,
// and only before the slot's first reading.
func TestProofBegan(t *testing.T) {
	cfg := ProofConfig{}
	cfg.Fill()
	t0 := time.Unix(100, 0)
	p := NewProof(cfg, 4, t0, 1)
	settle := cfg.Slot / 2
	if got := p.Plan().SampleAt; !got.Equal(t0.Add(settle)) {
		t.Fatalf("first reading at %s, want %s", got.Sub(t0), settle)
	}
	p.Began(t0.Add(-time.Second))
	if got := p.Plan().SampleAt; !got.Equal(t0.Add(settle)) {
		t.Errorf("an earlier Began moved the plan to %s", got.Sub(t0))
	}
	landed := t0.Add(6 * time.Millisecond)
	p.Began(landed)
	first := p.Plan().SampleAt
	if !first.Equal(landed.Add(settle)) {
		t.Errorf("after Began: first reading at %s, want %s", first.Sub(t0), landed.Add(settle).Sub(t0))
	}
	p.Observe(first, 2, true)
	second := p.Plan().SampleAt
	p.Began(landed.Add(time.Second))
	if got := p.Plan().SampleAt; !got.Equal(second) {
		t.Errorf("Began after a reading moved the plan from %s to %s", second.Sub(t0), got.Sub(t0))
	}
}

// A freed slot of a suspect whose evidence leans to guilt keeps it capped
// until FreeLead before its first reading, a capped slot has no hold, and
// readings come at the same times into either; a late release moves the
// freed slot's readings, keeping the lead. At FreeLead of the settle or
// more, or at evidence 1 (a new chain's first trial), the freed slot is
// free from its start.
func TestProofHoldsThroughAFreedSlotsSettle(t *testing.T) {
	t0 := time.Unix(100, 0)
	for _, tc := range []struct {
		lead, wantHold time.Duration // wantHold 0: none
	}{
		{0, 7 * time.Millisecond}, // the default, 3 ms
		{time.Millisecond, 9 * time.Millisecond},
		{10 * time.Millisecond, 0},
		{time.Second, 0},
	} {
		cfg := ProofConfig{FreeLead: tc.lead}
		cfg.Fill()
		settle := cfg.SettleTime()
		sawFreed, sawCapped := false, false
		for seed := uint64(1); seed < 40 && !(sawFreed && sawCapped); seed++ {
			if fresh := NewProof(cfg, 4, t0, seed).Plan(); !fresh.Capped && !fresh.HoldUntil.IsZero() {
				t.Errorf("lead %s: a new chain's first freed slot is held", tc.lead)
			}
			p := NewProofCarry(cfg, 4, t0, seed, 3)
			plan := p.Plan()
			if !plan.SampleAt.Equal(t0.Add(settle)) {
				t.Fatalf("lead %s: first reading at %s, want %s", tc.lead, plan.SampleAt.Sub(t0), settle)
			}
			if plan.Capped {
				sawCapped = true
				if !plan.HoldUntil.IsZero() {
					t.Errorf("lead %s: a capped slot holds until %s", tc.lead, plan.HoldUntil.Sub(t0))
				}
				continue
			}
			sawFreed = true
			if tc.wantHold == 0 {
				if !plan.HoldUntil.IsZero() {
					t.Errorf("lead %s: held until %s, want free throughout", tc.lead, plan.HoldUntil.Sub(t0))
				}
				continue
			}
			if got := plan.HoldUntil.Sub(t0); got != tc.wantHold {
				t.Errorf("lead %s: held until %s, want %s", tc.lead, got, tc.wantHold)
			}
			// The release lands 2 ms late: the readings follow it.
			landed := plan.HoldUntil.Add(2 * time.Millisecond)
			p.Freed(landed)
			if got := p.Plan().SampleAt; !got.Equal(landed.Add(cfg.FreeLead)) {
				t.Errorf("lead %s: after a late release, first reading %s after it, want %s", tc.lead, got.Sub(landed), cfg.FreeLead)
			}
			p.Observe(p.Plan().SampleAt, 2, true)
			if h := p.Plan().HoldUntil; !h.IsZero() {
				t.Errorf("lead %s: held again after the slot's first reading, until %s", tc.lead, h.Sub(t0))
			}
		}
		if !sawFreed || !sawCapped {
			t.Fatalf("lead %s: the coin gave freed %v, capped %v", tc.lead, sawFreed, sawCapped)
		}
	}
}

// The first trial of a new chain, a chain whose evidence is under 1 and a
// trial after one that read no contention in
// either slot (a polluter that went quiet pollutes nothing free, and the
// hold would spend the proof budget) have their freed slot free from its
// start; after a passing trial, the hold is back.
func TestProofHoldsNotAfterAQuietTrial(t *testing.T) {
	cfg := ProofConfig{}
	cfg.Fill()
	t0 := time.Unix(100, 0)
	p := NewProof(cfg, 4, t0, 7)
	// runTrial feeds one whole trial: ratio while free, quiet while
	// capped, and reports whether its freed slot was held before its
	// first reading.
	runTrial := func(ratio float64) (held bool) {
		for range 2 {
			for i := range cfg.Samples {
				plan := p.Plan()
				r := ratio
				if plan.Capped {
					r = 1
				} else if i == 0 {
					held = !plan.HoldUntil.IsZero()
				}
				if p.Observe(plan.SampleAt, r, true) {
					t.Fatalf("the proof ended: %v", p.Trials())
				}
			}
		}
		return held
	}
	if runTrial(4) {
		t.Errorf("the first trial's freed slot was held")
	}
	if !runTrial(1) {
		t.Errorf("the freed slot after a contended trial was not held")
	}
	if got := p.Trials()[1].Outcome; got != TrialQuiet {
		t.Fatalf("trial 2: %s, want quiet", got)
	}
	if runTrial(1) {
		t.Errorf("the freed slot after a quiet trial was held")
	}
	if runTrial(4) {
		t.Errorf("the freed slot after a quiet trial was held")
	}
	if !runTrial(4) {
		t.Errorf("the freed slot after a contended trial was not held")
	}
	// A chain whose evidence leans against guilt holds nothing.
	for seed := uint64(1); seed < 40; seed++ {
		q := NewProofCarry(cfg, 4, t0, seed, 0.5)
		if plan := q.Plan(); !plan.Capped {
			if !plan.HoldUntil.IsZero() {
				t.Errorf("held at evidence 0.5")
			}
			break
		}
	}
}

// A split-lock storm the host breaks into bursts (measured on the dev VM:
// a stress-ng --lockbus beside a bystander, 7.5× before its proof) shows
// in one or two of a freed slot's twelve readings and in none of a capped
// one's. Counting the readings that show it convicts such a polluter in
// most single proofs, where the slots' mean log-ratio alone, moved by
// less than an innocent's share, left most trials quiet. The same spikes
// when the suspect does nothing, and a cap that lowers readings sitting
// at the hit threshold by the whole innocent's share, stay within the
// bound.
func TestProofSparseStorm(t *testing.T) {
	cfg := ProofConfig{}
	cfg.Fill()
	const before, runs = 7.5, 2000
	alpha := cfg.FalseConviction()
	spikes := func(seed uint64, p float64, onlyFree bool) world {
		rng := rand.New(rand.NewPCG(seed, 11))
		return func(_ time.Duration, capped bool) float64 {
			x := math.Exp(0.03 * rng.NormFloat64())
			if (!capped || !onlyFree) && rng.Float64() < p {
				x = before * math.Exp(0.05*rng.NormFloat64())
			}
			return x
		}
	}
	t.Run("polluter", func(t *testing.T) {
		convicted, rate := convictions(t, cfg, runs, before, func(seed uint64) world { return spikes(seed, 0.12, true) })
		if rate < 0.9 {
			t.Errorf("convicted %d of %d single proofs, want 90%% or more", convicted, runs)
		}
		t.Logf("convicted %d of %d", convicted, runs)
	})
	for _, tc := range []struct {
		name string
		w    func(seed uint64) world
	}{
		{"spikes the cap does not move", func(seed uint64) world { return spikes(seed, 0.12, false) }},
		{"a share's cap at the hit threshold", func(seed uint64) world {
			rng := rand.New(rand.NewPCG(seed, 13))
			return capLowers(func(time.Duration) float64 { return math.Sqrt(before) * math.Exp(0.1*rng.NormFloat64()) }, 1/1.15)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			convicted, rate := convictions(t, cfg, runs, before, tc.w)
			if limit := alpha + 4*math.Sqrt(alpha*(1-alpha)/runs); rate > limit {
				t.Errorf("false convictions %d of %d (%.4f), bound %.4f", convicted, runs, rate, alpha)
			}
			t.Logf("false convictions %d of %d", convicted, runs)
		})
	}
}

// A contention that comes and goes, whose trials that see it lean against
// the suspect, pauses the proof at the third quiet trial, not only at three
// in a row; a chain whose evidence stands at 1 or more goes on through the
// same quiet.
func TestProofPausesWhenContentionComesAndGoes(t *testing.T) {
	cfg := ProofConfig{}
	cfg.Fill()
	t0 := time.Unix(1000, 0)
	// trials is a world that reads each trial as its outcome says: quiet,
	// "pass" (1.5× freed, 1× capped) or "fail" (the other way round).
	trials := func(outcomes ...string) world {
		reads := 0
		return func(_ time.Duration, capped bool) float64 {
			k := min(reads/(2*cfg.Samples), len(outcomes)-1)
			reads++
			switch {
			case outcomes[k] == "pass" && !capped, outcomes[k] == "fail" && capped:
				return 1.5
			}
			return 1
		}
	}
	p := driveToVerdict(t, NewProof(cfg, 1.5, t0, 5), t0, trials("quiet", "pass", "quiet", "fail", "quiet", "fail", "pass", "pass"))
	v, why := p.Verdict()
	if v != ProofInconclusive || len(p.Trials()) != 5 || p.Carry() >= 1 || !strings.Contains(why, "came and went") {
		t.Errorf("%s after %d trials, evidence %.2f (%s); want inconclusive at the fifth, the third quiet, under 1", v, len(p.Trials()), p.Carry(), why)
	}
	// Leaning to guilt, the same quiet trials do not pause it.
	p = driveToVerdict(t, NewProof(cfg, 1.5, t0, 5), t0, trials("quiet", "pass", "quiet", "pass", "quiet", "pass", "pass", "pass", "pass", "pass", "pass", "pass"))
	if v, why := p.Verdict(); v != ProofGuilty {
		t.Errorf("passes between quiet trials: %s after %d trials (%s), want guilty", v, len(p.Trials()), why)
	}
}

// Capping a tenant that shares its CPU with a split-lock loop hands the
// loop its CPU time: the capped slot reads the storm at full strength and
// the freed one less. Such a trial acquits at once; the storm leaking into
// a capped slot's first readings, a polluter's trial, does not, nor does a
// capped slot that reads the storm while the freed one does too.
func TestProofAcquitsATenantWhoseCapFeedsTheContention(t *testing.T) {
	cfg := ProofConfig{}
	cfg.Fill()
	t0 := time.Unix(1000, 0)
	slotted := func(capped, freed func(i int) float64) world {
		n := 0
		return func(_ time.Duration, isCapped bool) float64 {
			i := n % cfg.Samples
			n++
			if isCapped {
				return capped(i)
			}
			return freed(i)
		}
	}
	const before = 5.0
	p := driveToVerdict(t, NewProof(cfg, before, t0, 7), t0, slotted(
		func(int) float64 { return 6 }, func(int) float64 { return 1.5 }))
	v, why := p.Verdict()
	if v != ProofInnocent || len(p.Trials()) != 1 || !strings.Contains(why, "went to whoever causes it") {
		t.Fatalf("a cap that feeds the storm: %s after %d trials (%s), want innocent after one", v, len(p.Trials()), why)
	}
	// A storm that leaks into the capped slot's first three readings, and
	// shows in every freed one: a polluter, convicted.
	p = driveToVerdict(t, NewProof(cfg, before, t0, 7), t0, slotted(
		func(i int) float64 {
			if i < 3 {
				return 6
			}
			return 1
		}, func(int) float64 { return 5.5 }))
	if v, why := p.Verdict(); v != ProofGuilty {
		t.Errorf("a polluter whose cap leaks: %s after %d trials (%s), want guilty", v, len(p.Trials()), why)
	}
	// The storm in both slots alike: not this rule's (the ordinary
	// futility acquits it after two trials).
	p = driveToVerdict(t, NewProof(cfg, before, t0, 7), t0, slotted(
		func(int) float64 { return 5 }, func(int) float64 { return 5 }))
	if v, _ := p.Verdict(); v != ProofInnocent || len(p.Trials()) != 2 {
		t.Errorf("a storm that capping changes nothing of: %s after %d trials, want innocent after two", v, len(p.Trials()))
	}
	// Under a weak contention, where a reading's scatter reaches √before,
	// one trial does not acquit.
	p = driveToVerdict(t, NewProof(cfg, 1.5, t0, 7), t0, slotted(
		func(int) float64 { return 1.5 }, func(int) float64 { return 1.1 }))
	if len(p.Trials()) < 2 {
		v, why := p.Verdict()
		t.Errorf("weak contention: %s after %d trial (%s), want more than one", v, len(p.Trials()), why)
	}
}

// A proof whose budget is spent runs on while its evidence stands within a
// tenth of the bar, up to twice the budget, and only then: a weak polluter
// (its cap removes a quarter of a scattered 3× contention's log-ratio) is
// convicted in one proof more often so, and no proof runs on from further
// away.
func TestProofRunsOnNearConviction(t *testing.T) {
	cfg := ProofConfig{}
	cfg.Fill()
	t0 := time.Unix(1000, 0)
	ranOn, ranOnConvicted := 0, 0
	for seed := range uint64(400) {
		rng := rand.New(rand.NewPCG(seed, 23))
		w := capLowers(func(time.Duration) float64 { return 3 * math.Exp(0.35*rng.NormFloat64()) }, math.Exp(-math.Log(3)/4))
		p := driveToVerdict(t, NewProof(cfg, 3, t0, seed*7+3), t0, w)
		trials := p.Trials()
		evidence := 1.0
		for i, tr := range trials {
			if i == cfg.Trials {
				if evidence < nearConviction/cfg.Alpha {
					t.Fatalf("seed %d ran past trial %d from evidence %.2f, under a tenth of the bar", seed, cfg.Trials, evidence)
				}
			}
			evidence *= 1 + cfg.Bet*tr.Score
		}
		if math.Abs(evidence-p.Carry()) > 1e-9*evidence {
			t.Fatalf("seed %d: the trials' bets make %.4f, the proof says %.4f", seed, evidence, p.Carry())
		}
		switch n := len(trials); {
		case n > cfg.MostTrials():
			t.Fatalf("seed %d ran %d trials, past twice the budget", seed, n)
		case n > cfg.Trials:
			ranOn++
			if verdictOf(p) == ProofGuilty {
				ranOnConvicted++
			}
		case n == cfg.Trials && verdictOf(p) == ProofInconclusive && evidence >= nearConviction/cfg.Alpha:
			t.Fatalf("seed %d stopped at its budget with evidence %.1f, within a tenth of the bar", seed, evidence)
		}
	}
	if ranOn == 0 || ranOnConvicted == 0 {
		t.Errorf("%d proofs ran on, %d of them convicted: want some of each", ranOn, ranOnConvicted)
	}
	t.Logf("%d of 400 proofs ran on past %d trials, %d of them to a conviction", ranOn, cfg.Trials, ranOnConvicted)
}
