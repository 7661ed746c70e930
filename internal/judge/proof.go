package judge

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Proof verdicts.
const (
	ProofGuilty       = "polluter"
	ProofInnocent     = "innocent"
	ProofInconclusive = "inconclusive"
)

// ProofConfig shapes the perturbation proof: a run of randomized trials,
// each a capped slot and a freed slot in an order drawn by a fair coin,
// weighed as a bet against "capping the suspect does nothing".
type ProofConfig struct {
	// Slot is how long the suspect stays capped, or free, in one half of a
	// trial (default 50ms). A CFS cap bites within a period, and a bus-lock
	// or cache polluter's effect on the probe comes and goes within a few
	// milliseconds of it running or not.
	Slot time.Duration `yaml:"slot" json:"slot"`
	// Samples is how many probe readings each slot takes (default 12,
	// about 3 ms apart); the slot's value is the second worst of them
	// (one stray reading neither makes nor undoes a slot). A
	// split-lock polluter in a VM pollutes in bursts: measured on the dev
	// VM with its neighbours running, a freed polluter showed in one DRAM
	// reading of three to five, and a freed slot of 50 ms now and then in
	// none of twelve; a capped one read 1.0-1.1× but in the first ~10 ms
	// after the cap was set. The readings start 30% into a slot. The same
	// statistic on both slots keeps the proof's guarantee.
	Samples int `yaml:"samples" json:"samples"`
	// Trials is the most trials a proof runs (default 16).
	Trials int `yaml:"trials" json:"trials"`
	// Alpha is the false-conviction bound (default 0.01): a tenant whose
	// cap does not move the probe is convicted with at most this
	// probability, however long the proof runs and whenever it stops.
	Alpha float64 `yaml:"alpha" json:"alpha"`
	// Effect is the part of the contention, in log-ratio, that a trial
	// must see the cap remove to count in full (default 0.4: with
	// contention at 4×, the freed slot reading 1.74× the capped one). A
	// trial that sees less counts in proportion, so a co-runner whose own
	// cache footprint costs the probe a little is not convicted within
	// Trials for a contention it does not cause.
	Effect float64 `yaml:"effect" json:"effect"`
	// Bet is the stake of each trial (default 0.8): a full trial
	// multiplies the evidence by 1+Bet, one that reads the other way by
	// 1-Bet. With the defaults, 8 full trials convict.
	Bet float64 `yaml:"bet" json:"bet"`
}

// Fill sets defaults.
func (c *ProofConfig) Fill() {
	if c.Slot == 0 {
		c.Slot = 50 * time.Millisecond
	}
	if c.Samples == 0 {
		c.Samples = 12
	}
	if c.Trials == 0 {
		c.Trials = 16
	}
	if c.Alpha == 0 {
		c.Alpha = 0.01
	}
	if c.Effect == 0 {
		c.Effect = 0.4
	}
	if c.Bet == 0 {
		c.Bet = 0.8
	}
}

// Validate checks a filled configuration.
func (c ProofConfig) Validate() error {
	switch {
	case c.Slot < 5*time.Millisecond || c.Slot > 2*time.Second:
		return fmt.Errorf("proof.slot %s: want 5ms to 2s", c.Slot)
	case c.Samples < 1 || c.Samples > 64:
		return fmt.Errorf("proof.samples %d: want 1 to 64", c.Samples)
	case c.Trials < 1 || c.Trials > 64:
		return fmt.Errorf("proof.trials %d: want 1 to 64", c.Trials)
	case !(c.Alpha >= 1e-6 && c.Alpha <= 0.2):
		return fmt.Errorf("proof.alpha %v: want 0.000001 to 0.2", c.Alpha)
	case !(c.Effect > 0 && c.Effect <= 1):
		return fmt.Errorf("proof.effect %v: want more than 0, at most 1", c.Effect)
	case !(c.Bet > 0 && c.Bet < 1):
		return fmt.Errorf("proof.bet %v: want more than 0, less than 1", c.Bet)
	}
	return nil
}

// FalseConviction is the most a proof can convict a tenant whose cap does
// not move the probe: Alpha.
//
// Why it holds whatever the noise does (bursts, drifts, a neighbour's
// phases): each trial's order, capped first or freed first, is drawn by a
// fair coin the noise cannot see. If capping the suspect does nothing to the
// probe, the two slots read what they would have read either way, and the
// coin alone decides whether the trial's drop (freed over capped) comes out
// positive or negative: given its size, each sign has probability ½. Each
// trial multiplies the evidence by 1 + Bet·x, x the drop over the full
// effect clipped to [-1, 1], whose expectation is then 1: the evidence is a
// nonnegative martingale starting at 1, and by Ville's inequality it ever
// reaches 1/Alpha with probability at most Alpha — at any trial, however
// the proof stops.
func (c ProofConfig) FalseConviction() float64 { return c.Alpha }

// Trial is one capped slot and one freed slot of a proof.
type Trial struct {
	CappedFirst bool      `json:"capped_first"`
	Capped      []float64 `json:"capped"` // contention ratios read while capped
	Freed       []float64 `json:"freed"`  // and while free
	// Drop is log(freed) − log(capped) of the slots' values (their second
	// worst readings): how much of the contention the cap removed, in
	// log-ratio.
	Drop float64 `json:"drop"`
	// Outcome: "pass" (the cap removed the full effect), "fail" (the
	// contention was there and the cap did not remove it), "quiet" (no
	// contention in either slot: the trial says nothing) or "void" (a slot
	// got no reading).
	Outcome string `json:"outcome"`
	// Evidence is the proof's evidence after this trial.
	Evidence float64 `json:"evidence"`
}

// Trial outcomes.
const (
	TrialPass  = "pass"
	TrialFail  = "fail"
	TrialQuiet = "quiet"
	TrialVoid  = "void"
)

// Proof is a perturbation proof in progress on a suspect (or a group of
// suspects capped together). It is pure: the caller applies the cap state
// Plan asks for, takes a reading at Plan's time and hands it to Observe,
// until Done. Time is the caller's, so it runs on virtual time as well.
type Proof struct {
	cfg    ProofConfig
	rng    *rand.Rand
	before float64
	margin float64 // the drop, in log-ratio, that counts in full
	quiet  float64 // a slot reading under this has no contention
	start  time.Time
	// evidence is the running product of the trials' bets: a martingale
	// with expectation 1 while the cap does nothing.
	evidence float64

	trials []Trial
	half   int       // 0 or 1: which slot of the current trial
	from   time.Time // when the current slot began
	got    []float64 // readings of the current slot
	misses int       // missing readings in the current slot

	verdict, why string
}

// NewProof starts a proof against contention at ratio before (> 1) at now.
// seed draws the trials' orders: anything the noise cannot predict (the
// agent uses the clock).
func NewProof(cfg ProofConfig, before float64, now time.Time, seed uint64) *Proof {
	cfg.Fill()
	before = max(before, 1.01)
	p := &Proof{cfg: cfg, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), before: before,
		margin: cfg.Effect * math.Log(before), quiet: min(1+(before-1)/3, quietRatio), start: now, from: now, evidence: 1}
	p.trials = append(p.trials, Trial{CappedFirst: p.rng.IntN(2) == 0})
	return p
}

// ProofPlan is what the caller must do now.
type ProofPlan struct {
	// Capped says whether the suspects must be capped (true) or free now.
	Capped bool
	// SampleAt is when to take the next reading.
	SampleAt time.Time
}

// Plan returns the cap state wanted now and when to read next.
func (p *Proof) Plan() ProofPlan {
	t := p.trials[len(p.trials)-1]
	capped := t.CappedFirst == (p.half == 0)
	n := p.cfg.Samples
	// Readings spread over the slot's last 70%: the first part lets the
	// cap bite (or the freed suspect get going again).
	settle := p.cfg.Slot * 3 / 10
	step := (p.cfg.Slot - settle) / time.Duration(n)
	i := len(p.got) + p.misses
	return ProofPlan{Capped: capped, SampleAt: p.from.Add(settle + time.Duration(i)*step)}
}

// Observe hands the proof a reading taken at now; ok false says the probe
// could not read (its CPU was busy). It returns true once the proof has a
// verdict.
func (p *Proof) Observe(now time.Time, ratio float64, ok bool) bool {
	if p.verdict != "" {
		return true
	}
	if ok && ratio > 0 && !math.IsNaN(ratio) && !math.IsInf(ratio, 0) {
		p.got = append(p.got, ratio)
	} else {
		p.misses++
	}
	if len(p.got)+p.misses < p.cfg.Samples {
		return false
	}
	// The slot is complete.
	t := &p.trials[len(p.trials)-1]
	capped := t.CappedFirst == (p.half == 0)
	if capped {
		t.Capped = p.got
	} else {
		t.Freed = p.got
	}
	p.got, p.misses, p.from = nil, 0, now
	if p.half == 0 {
		p.half = 1
		return false
	}
	p.score(t)
	p.half = 0
	if p.decide() {
		return true
	}
	p.trials = append(p.trials, Trial{CappedFirst: p.rng.IntN(2) == 0})
	return false
}

func (p *Proof) score(t *Trial) {
	defer func() { t.Evidence = p.evidence }()
	if len(t.Capped) == 0 || len(t.Freed) == 0 {
		t.Outcome = TrialVoid
		return
	}
	worstCapped, worstFreed := slotValue(t.Capped), slotValue(t.Freed)
	t.Drop = math.Log(worstFreed) - math.Log(worstCapped)
	// The bet: the drop against the full effect, and the part of the
	// contention before the proof that the cap took away (a polluter's cap
	// takes most of it; a co-runner whose footprint costs the probe a
	// little takes a little, however clearly), the smaller of the two,
	// clipped to 1. Both change sign when the slots are swapped, so the
	// bet is fair while the cap does nothing.
	removed := (worstFreed - worstCapped) / (p.before - 1) / fullRemoval
	x := math.Copysign(min(math.Abs(t.Drop/p.margin), math.Abs(removed), 1), t.Drop)
	p.evidence *= 1 + p.cfg.Bet*x
	switch {
	case t.Drop > p.margin && removed >= 1:
		t.Outcome = TrialPass
	case max(worstCapped, worstFreed) < p.quiet:
		t.Outcome = TrialQuiet
	default:
		t.Outcome = TrialFail
	}
}

func (p *Proof) decide() bool {
	var pass, fail, quiet, void int
	for _, t := range p.trials {
		switch t.Outcome {
		case TrialPass:
			pass++
		case TrialFail:
			fail++
		case TrialQuiet:
			quiet++
		case TrialVoid:
			void++
		}
	}
	n := pass + fail + quiet + void
	switch {
	case p.evidence >= 1/p.cfg.Alpha:
		p.verdict = ProofGuilty
		p.why = fmt.Sprintf("capping it removed at least %.0f%% of the %.2f× contention in %d of %d randomized trials (median freed/capped %.2f×; evidence %.0f, the chance of reaching %.0f for a tenant the cap does not affect ≤ %.2g)",
			100*p.cfg.Effect, p.before, pass, n, math.Exp(p.medianDrop()), p.evidence, 1/p.cfg.Alpha, p.cfg.Alpha)
		return true
	case void > n/2 && void >= 2:
		p.verdict = ProofInconclusive
		p.why = fmt.Sprintf("the probe could not read in %d of %d trials", void, n)
		return true
	case p.quietRun() >= 3:
		// The contention went away, whoever caused it: capping the
		// suspect longer would cost it for nothing.
		p.verdict = ProofInconclusive
		p.why = fmt.Sprintf("the %.2f× contention went quiet (%d of %d trials, the last 3 in a row); %d passed, %d failed",
			p.before, quiet, n, pass, fail)
		return true
	case fail >= 2 && fail > pass, n >= p.cfg.Trials:
		// Acquittals never raise the false convictions: stop at the
		// first sign that the cap does not remove the contention.
	default:
		return false
	}
	// As many passes as failures is no acquittal: the contention came and
	// went with the cap often, but not often enough to convict (a polluter
	// that paused by itself for a few trials). Neither is a proof whose
	// contention went quiet. The agent proves such a suspect again soon.
	p.verdict = ProofInnocent
	if pass >= fail || quiet+void > pass+fail {
		p.verdict = ProofInconclusive
	}
	p.why = fmt.Sprintf("capping it did not remove %.0f%% of the %.2f× contention in %d of %d randomized trials, %d quiet (median freed/capped %.2f×, evidence %.2f)",
		100*p.cfg.Effect, p.before, fail, n, quiet, math.Exp(p.medianDrop()), p.evidence)
	return true
}

// fullRemoval is the part of the contention before the proof that a trial's
// cap must take away to count in full.
const fullRemoval = 0.8

// quietRatio is the contention ratio under which a slot counts as quiet
// whatever the contention was before: a freed slot at 2× a capped one at
// 1× says something even when the contention had been at 8×.
const quietRatio = 1.3

// slotValue is a slot's contention: its second worst reading (its only one
// when it has one).
func slotValue(rs []float64) float64 {
	s := slices.Clone(rs)
	slices.Sort(s)
	return s[max(0, len(s)-2)]
}

// quietRun counts the quiet trials at the end of the proof.
func (p *Proof) quietRun() int {
	n := 0
	for i := len(p.trials) - 1; i >= 0 && p.trials[i].Outcome == TrialQuiet; i-- {
		n++
	}
	return n
}

func (p *Proof) medianDrop() float64 {
	var d []float64
	for _, t := range p.trials {
		if t.Outcome == TrialPass || t.Outcome == TrialFail {
			d = append(d, t.Drop)
		}
	}
	if len(d) == 0 {
		return 0
	}
	return median(d)
}

// Done reports whether the proof has a verdict.
func (p *Proof) Done() bool { return p.verdict != "" }

// Verdict returns the verdict and why ("" while running).
func (p *Proof) Verdict() (verdict, why string) { return p.verdict, p.why }

// Before is the contention ratio the proof answers to.
func (p *Proof) Before() float64 { return p.before }

// Started is when the proof began.
func (p *Proof) Started() time.Time { return p.start }

// Trials returns the trials run so far (the journal's evidence).
func (p *Proof) Trials() []Trial {
	out := slices.Clone(p.trials)
	if n := len(out); n > 0 && out[n-1].Outcome == "" {
		out = out[:n-1]
	}
	return out
}

// Abort ends the proof without a verdict of guilt (the suspect vanished,
// the agent stops, a write failed).
func (p *Proof) Abort(why string) {
	if p.verdict == "" {
		p.verdict, p.why = ProofInconclusive, why
	}
}

// Summary is the trials in a line for logs: each trial's freed/capped as
// "+2.31" (passed), "-1.05" (failed) or "~1.01" (quiet), "v" for a void
// one, and the evidence at the end.
func (p *Proof) Summary() string {
	var b strings.Builder
	for _, t := range p.Trials() {
		switch t.Outcome {
		case TrialVoid:
			b.WriteString("v")
		case TrialPass:
			fmt.Fprintf(&b, "+%.2f", math.Exp(t.Drop))
		case TrialQuiet:
			fmt.Fprintf(&b, "~%.2f", math.Exp(t.Drop))
		default:
			fmt.Fprintf(&b, "-%.2f", math.Exp(t.Drop))
		}
		b.WriteByte(' ')
	}
	fmt.Fprintf(&b, "(evidence %.2g)", p.evidence)
	return b.String()
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
