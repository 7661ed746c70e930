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
// each a capped slot and a freed slot in random order.
type ProofConfig struct {
	// Slot is how long the suspect stays capped, or free, in one half of a
	// trial (default 50ms). A CFS cap bites within a period, and a bus-lock
	// or cache polluter's effect on the probe comes and goes within a few
	// milliseconds of it running or not.
	Slot time.Duration `yaml:"slot" json:"slot"`
	// Samples is how many probe readings each slot takes (default 12,
	// about 3 ms apart); the slot's value is the worst of them. A
	// split-lock polluter in a VM pollutes in bursts: measured on the dev
	// VM with its neighbours running, a freed polluter showed in one DRAM
	// reading of three to five, and a freed slot of 40 ms now and then in
	// none of six; a capped one read 1.0-1.1× but in the first ~10 ms after
	// the cap was set. The readings start 30% into a slot. The same
	// statistic on both slots keeps the proof's guarantee.
	Samples int `yaml:"samples" json:"samples"`
	// Trials is the most trials a proof runs, Need how many of them must
	// show the cap's effect for a conviction (defaults 14 and 12: at most
	// 0.65% false convictions, and a polluter whose contention pauses in one
	// trial of fourteen is still convicted). A proof stops as soon as the
	// verdict is sure: at Need passes, at Trials-Need+1 failures, or — an
	// acquittal, which can never raise the false convictions — once at
	// least two trials failed and more failed than passed.
	Trials int `yaml:"trials" json:"trials"`
	Need   int `yaml:"need" json:"need"`
	// Effect is the part of the contention, in log-ratio, that capping the
	// suspect must remove in a trial for the trial to pass (default 0.4:
	// with contention at 4×, the freed slot must read at least 1.74× the
	// capped one). A co-runner whose own cache footprint costs the probe a
	// little is not the cause of a 4× contention.
	Effect float64 `yaml:"effect" json:"effect"`
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
		c.Trials = 14
	}
	if c.Need == 0 {
		c.Need = min(12, c.Trials)
	}
	if c.Effect == 0 {
		c.Effect = 0.4
	}
}

// Validate checks a filled configuration.
func (c ProofConfig) Validate() error {
	switch {
	case c.Slot < 5*time.Millisecond || c.Slot > 2*time.Second:
		return fmt.Errorf("proof.slot %s: want 5ms to 2s", c.Slot)
	case c.Samples < 1 || c.Samples > 16:
		return fmt.Errorf("proof.samples %d: want 1 to 16", c.Samples)
	case c.Trials < 1 || c.Trials > 64:
		return fmt.Errorf("proof.trials %d: want 1 to 64", c.Trials)
	case c.Need < 1 || c.Need > c.Trials:
		return fmt.Errorf("proof.need %d: want 1 to proof.trials (%d)", c.Need, c.Trials)
	case !(c.Effect > 0 && c.Effect <= 1):
		return fmt.Errorf("proof.effect %v: want more than 0, at most 1", c.Effect)
	}
	return nil
}

// FalseConviction is the most a proof can convict a tenant whose cap does
// not move the probe by Effect of the contention: the chance that at least
// Need of Trials fair coins come up heads, P(Binomial(Trials, ½) ≥ Need).
//
// Why it holds whatever the noise does (bursts, drifts, a neighbour's
// phases): each trial's order, capped first or freed first, is drawn by a
// fair coin the noise cannot see. If capping the suspect does nothing to the
// probe, the two slots' readings are what they would have been either way,
// and the trial passes only if the coin happened to put the capped slot on
// the quieter one by more than the margin: probability at most ½, and
// independent across trials. (If capping has an effect smaller than the
// margin, the same holds for the readings shifted by that effect.) Stopping
// early at a sure verdict changes no conviction.
func (c ProofConfig) FalseConviction() float64 {
	n, k := c.Trials, c.Need
	p := 0.0
	for i := k; i <= n; i++ {
		p += binomial(n, i)
	}
	return p / math.Pow(2, float64(n))
}

func binomial(n, k int) float64 {
	r := 1.0
	for i := 1; i <= k; i++ {
		r = r * float64(n-k+i) / float64(i)
	}
	return r
}

// Trial is one capped slot and one freed slot of a proof.
type Trial struct {
	CappedFirst bool      `json:"capped_first"`
	Capped      []float64 `json:"capped"` // contention ratios read while capped
	Freed       []float64 `json:"freed"`  // and while free
	// Drop is log(freed) − log(capped) of the slots' worst readings: how
	// much of the contention the cap removed, in log-ratio.
	Drop float64 `json:"drop"`
	Pass bool    `json:"pass"`
	// Void says a slot got no reading (the probe could not run): the trial
	// counts as failed.
	Void bool `json:"void,omitempty"`
}

// Proof is a perturbation proof in progress on a suspect (or a group of
// suspects capped together). It is pure: the caller applies the cap state
// Plan asks for, takes a reading at Plan's time and hands it to Observe,
// until Done. Time is the caller's, so it runs on virtual time as well.
type Proof struct {
	cfg    ProofConfig
	rng    *rand.Rand
	before float64
	margin float64 // the least drop, in log-ratio, a trial must show
	start  time.Time

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
		margin: cfg.Effect * math.Log(before), start: now, from: now}
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
	if len(t.Capped) == 0 || len(t.Freed) == 0 {
		t.Void = true
		return
	}
	t.Drop = math.Log(slices.Max(t.Freed)) - math.Log(slices.Max(t.Capped))
	t.Pass = t.Drop > p.margin
}

func (p *Proof) decide() bool {
	pass, fail := p.counts()
	switch {
	case pass >= p.cfg.Need:
		p.verdict = ProofGuilty
		p.why = fmt.Sprintf("capping it removed at least %.0f%% of the %.2f× contention in %d of %d randomized trials (median freed/capped %.2f×; chance of that for a tenant the cap does not affect ≤ %.2g)",
			100*p.cfg.Effect, p.before, pass, pass+fail, math.Exp(p.medianDrop()), p.cfg.FalseConviction())
	case fail > p.cfg.Trials-p.cfg.Need, fail >= 2 && fail > pass:
		voids := 0
		for _, t := range p.trials {
			if t.Void {
				voids++
			}
		}
		if voids > pass+fail-voids {
			p.verdict = ProofInconclusive
			p.why = fmt.Sprintf("the probe could not read in %d of %d trials", voids, pass+fail)
			return true
		}
		// As many passes as failures is no acquittal: the contention came
		// and went with the cap often, but not often enough to convict (a
		// polluter that paused by itself for a few trials). The agent proves
		// such a suspect again soon.
		p.verdict = ProofInnocent
		if pass >= fail {
			p.verdict = ProofInconclusive
		}
		p.why = fmt.Sprintf("capping it did not remove %.0f%% of the %.2f× contention in %d of %d randomized trials (median freed/capped %.2f×)",
			100*p.cfg.Effect, p.before, fail, pass+fail, math.Exp(p.medianDrop()))
	default:
		return false
	}
	return true
}

func (p *Proof) counts() (pass, fail int) {
	for _, t := range p.trials {
		if t.Capped == nil && t.Freed == nil && !t.Void {
			continue // not yet run
		}
		if t.Pass {
			pass++
		} else {
			fail++
		}
	}
	return pass, fail
}

func (p *Proof) medianDrop() float64 {
	var d []float64
	for _, t := range p.trials {
		if !t.Void && (t.Capped != nil || t.Freed != nil) {
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
	if n := len(out); n > 0 && out[n-1].Capped == nil && out[n-1].Freed == nil && !out[n-1].Void {
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
// "+2.31" (passed) or "-1.05" (failed), "v" for a void one.
func (p *Proof) Summary() string {
	var b strings.Builder
	for i, t := range p.Trials() {
		if i > 0 {
			b.WriteByte(' ')
		}
		switch {
		case t.Void:
			b.WriteString("v")
		case t.Pass:
			fmt.Fprintf(&b, "+%.2f", math.Exp(t.Drop))
		default:
			fmt.Fprintf(&b, "-%.2f", math.Exp(t.Drop))
		}
	}
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
