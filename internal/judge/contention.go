package judge

import (
	"fmt"
	"maps"
	"math/bits"
	"slices"

	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// Thresholds of the contention verdict.
type Thresholds struct {
	// Ratio is how far above its quiet baseline a probe must be, twice in a
	// row, to count as contention (default 1.5).
	Ratio float64
	// Strong is a ratio that counts at once, without waiting for a second
	// reading, when it is also far outside the probe's noise (default 4: a
	// bus-lock storm moves the probes 5-15×).
	Strong float64
	// Noise is how many deviations of quiet scatter a reading must exceed too.
	Noise float64
	// Tolerance is "back to normal": the ratio under which a proof counts as
	// recovered and a throttled tenant may be relaxed (default 1.25).
	Tolerance float64
	// LLCRatio and LLCStrong replace Ratio and Strong for the LLC probe. It
	// shares the LLC with the tenants by design, so an LLC-heavy but harmless
	// tenant now and then moves it 2-3× on the dev machines (the DRAM probe
	// stays within 1.2×), while a bus-lock storm moves it 5-15× (defaults 3
	// and 6).
	LLCRatio, LLCStrong float64
}

// Fill sets defaults.
func (t *Thresholds) Fill() {
	if t.Ratio == 0 {
		t.Ratio = 1.5
	}
	if t.Strong == 0 {
		t.Strong = 4
	}
	if t.Noise == 0 {
		t.Noise = 4
	}
	if t.Tolerance == 0 {
		t.Tolerance = 1.25
	}
	if t.LLCRatio == 0 {
		t.LLCRatio = 3
	}
	if t.LLCStrong == 0 {
		t.LLCStrong = 6
	}
}

// For returns the ratio and strong thresholds of one probe kind.
func (t Thresholds) For(kind string) (ratio, strong float64) {
	if kind == sense.ProbeLLC {
		return t.LLCRatio, t.LLCStrong
	}
	return t.Ratio, t.Strong
}

// Contention keeps a baseline per (L3 domain, probe kind) and decides, each
// interval, whether the host is contended and where.
type Contention struct {
	th        Thresholds
	baselines map[probeKey]*Baseline
	above     map[probeKey]int // consecutive readings above Ratio
	hot       map[int]int      // per domain: the last 3 intervals, a bit each, set when a reading was above Ratio
	episode   bool
	held      map[int]bool // domains whose baselines may not rise (see Hold)
}

type probeKey struct {
	domain int
	kind   string
}

// NewContention returns a detector with the given thresholds.
func NewContention(th Thresholds) *Contention {
	th.Fill()
	return &Contention{th: th, baselines: map[probeKey]*Baseline{}, above: map[probeKey]int{}, hot: map[int]int{}}
}

// Thresholds returns the thresholds in use.
func (c *Contention) Thresholds() Thresholds { return c.th }

// Hold sets the L3 domains where crosstalk is holding a tenant down now
// (replacing the previous set). Their readings may lower the quiet
// baseline but never raise it: while a polluter is duty-cycled, what the
// probes read there is the polluter's remainder, under the contention
// threshold but above quiet, and learning it as the new normal would make
// the duty controller see no contention and relax the polluter back to
// full speed step by step (the simulator showed a held split-lock
// polluter climbing back to 11/16 of its CPU within a minute).
func (c *Contention) Hold(domains []int) {
	clear(c.held)
	for _, d := range domains {
		if c.held == nil {
			c.held = map[int]bool{}
		}
		c.held[d] = true
	}
}

// Calibrate feeds readings known to be quiet (taken before tenants start, or
// persisted from a previous run) straight into the baselines.
func (c *Contention) Calibrate(rs []sense.ProbeReading) {
	for _, r := range rs {
		c.baseline(r.Domain, r.Kind).Observe(r.Ns, false)
	}
}

// Lower feeds readings that may only lower the baselines (taken with the
// tenants held down, at start): a reading under a baseline pulls it down as
// a quiet one would; a louder one teaches nothing. A baseline not yet
// learned starts from the reading.
func (c *Contention) Lower(rs []sense.ProbeReading) {
	for _, r := range rs {
		c.baseline(r.Domain, r.Kind).Observe(r.Ns, true)
	}
}

func (c *Contention) baseline(domain int, kind string) *Baseline {
	k := probeKey{domain, kind}
	b := c.baselines[k]
	if b == nil {
		b = &Baseline{}
		c.baselines[k] = b
	}
	return b
}

// Baselines exports the learned baselines (for persistence and the state API).
func (c *Contention) Baselines() map[string]Baseline {
	out := map[string]Baseline{}
	for k, b := range c.baselines {
		out[fmt.Sprintf("%d/%s", k.domain, k.kind)] = *b
	}
	return out
}

// Restore imports baselines saved by Baselines.
func (c *Contention) Restore(saved map[string]Baseline) {
	for key, b := range saved {
		var k probeKey
		if _, err := fmt.Sscanf(key, "%d/%s", &k.domain, &k.kind); err == nil && b.N > 0 {
			bb := b
			c.baselines[k] = &bb
		}
	}
}

// CPURatio is the worst probe ratio seen on one CPU this interval.
type CPURatio struct {
	Domain int
	CPU    int
	Ratio  float64
	Kind   string // the kind with the worst ratio
}

// Verdict is the judge's view of one interval.
type Verdict struct {
	Contended bool
	// Persistent says a contended domain had a reading over the threshold in
	// at least 2 of the last 3 intervals: the agent only disturbs a tenant (a
	// proof) on persistent contention, so one noisy interval never costs
	// anyone anything.
	Persistent bool
	// Ratio is the worst probe ratio over all domains and kinds (1 = quiet),
	// with the LLC probe's scaled to the common thresholds.
	Ratio float64
	// Domains lists the contended L3 domains.
	Domains []int
	// CPUs has the worst ratio per probed CPU, for the relief evidence.
	CPUs []CPURatio
	// Readings are this interval's probe readings with their ratios.
	Readings []RatedReading
	Reason   string
}

// RatedReading is a probe reading against its baseline.
type RatedReading struct {
	sense.ProbeReading
	// Latency is what the reading counts at: its Ns, or its Peak or Burst
	// where that is strong (see Contention.latency); Counted says which, in
	// words ("" for its Ns).
	Latency  float64
	Counted  string
	Baseline float64
	Ratio    float64
}

// latency is what a reading counts at, and which of its values that is:
// its Ns (a spread's median), or the worse of its Peak (a spread's worst)
// and its Burst (the level of a storm in bursts shorter than a reading)
// where that is over the kind's strong ratio and far outside the
// baseline's noise, as a reading that counts at once must be. A split-lock
// storm that comes and goes shows in the peak of most spreads and moves
// the probe 5-15×; busy neighbours' memory traffic now and then lifts one
// reading of four moderately, and counting every peak would make that
// contention four times as often.
func (c *Contention) latency(r sense.ProbeReading, b *Baseline) (float64, string) {
	worst, counted := r.Peak, "the worst reading of its spread"
	if r.Burst > worst {
		worst, counted = r.Burst, "in bursts: two adjacent chunks of one reading"
	}
	if worst > r.Ns {
		_, strong := c.th.For(r.Kind)
		if b.Above(worst, strong, 2*c.th.Noise) {
			return worst, counted
		}
	}
	return r.Ns, ""
}

// Rate compares readings with their baselines without learning from them.
func (c *Contention) Rate(rs []sense.ProbeReading) []RatedReading {
	out := make([]RatedReading, 0, len(rs))
	for _, r := range rs {
		b := c.baseline(r.Domain, r.Kind)
		l, counted := c.latency(r, b)
		out = append(out, RatedReading{ProbeReading: r, Latency: l, Counted: counted, Baseline: b.Level, Ratio: b.Ratio(l)})
	}
	return out
}

// Above reports whether a rated reading is over its kind's contention
// ratio and outside its baseline's noise, as Update counts it.
func (c *Contention) Above(r RatedReading) bool {
	ratio, _ := c.th.For(r.Kind)
	return c.baseline(r.Domain, r.Kind).Above(r.Latency, ratio, c.th.Noise)
}

// Mark counts readings taken between intervals (the agent's watch) as an
// interval of their own for persistence, without learning from them, and
// reports whether one was contended: a watch that reads contended and the
// interval it brings forward that confirms it are two readings of the
// same contention, persistent at once instead of an interval later.
func (c *Contention) Mark(rs []sense.ProbeReading) bool {
	hot := map[int]bool{}
	for _, r := range c.Rate(rs) {
		if c.Above(r) {
			hot[r.Domain] = true
			c.above[probeKey{r.Domain, r.Kind}]++
		}
	}
	for d := range hot {
		c.hot[d] = (c.hot[d]<<1 | 1) & 0b111
	}
	return len(hot) > 0
}

// Update judges one interval's readings and then learns from them.
func (c *Contention) Update(rs []sense.ProbeReading) Verdict {
	v := Verdict{Ratio: 1, Readings: c.Rate(rs)}
	perCPU := map[[2]int]*CPURatio{}
	// Per (domain, kind), the worst reading of this interval decides.
	worst := map[probeKey]RatedReading{}
	for _, r := range v.Readings {
		k := probeKey{r.Domain, r.Kind}
		if w, ok := worst[k]; !ok || r.Ratio > w.Ratio {
			worst[k] = r
		}
		ck := [2]int{r.Domain, r.CPU}
		if cr := perCPU[ck]; cr == nil || c.scaled(r) > cr.Ratio {
			perCPU[ck] = &CPURatio{Domain: r.Domain, CPU: r.CPU, Ratio: c.scaled(r), Kind: r.Kind}
		}
	}
	contendedDomains := map[int]bool{}
	aboveDomains := map[int]bool{}
	for k, r := range worst {
		b := c.baseline(k.domain, k.kind)
		v.Ratio = max(v.Ratio, c.scaled(r))
		ratio, strong := c.th.For(k.kind)
		if !b.Above(r.Latency, ratio, c.th.Noise) {
			c.above[k] = 0
			continue
		}
		c.above[k]++
		aboveDomains[k.domain] = true
		if b.Above(r.Latency, strong, 2*c.th.Noise) || c.above[k] >= 2 {
			contendedDomains[k.domain] = true
			if v.Reason == "" || r.Ratio >= c.th.Strong {
				at := fmt.Sprintf("%.0f ns", r.Latency)
				if r.Counted != "" {
					at += " (" + r.Counted + ")"
				}
				v.Reason = fmt.Sprintf("%s probe on CPU %d at %s, %.1f× its quiet %.0f ns", k.kind, r.CPU, at, r.Ratio, b.Level)
			}
		}
	}
	v.Domains = slices.Sorted(maps.Keys(contendedDomains))
	v.Contended = len(v.Domains) > 0
	// hot[d] keeps the last intervals of domain d as bits (1 = a reading
	// over the threshold). Contention that shows in 2 of the last 3 intervals
	// is persistent: bus-lock storms in VMs come in bursts.
	for d := range c.hot {
		if !aboveDomains[d] {
			c.hot[d] = c.hot[d] << 1 & 0b111
			if c.hot[d] == 0 {
				delete(c.hot, d)
			}
		}
	}
	for d := range aboveDomains {
		c.hot[d] = (c.hot[d]<<1 | 1) & 0b111
		if bits.OnesCount(uint(c.hot[d])) >= 2 && contendedDomains[d] {
			v.Persistent = true
		}
	}
	// An episode lasts until every probe is back under the tolerance, so the
	// tail of an episode does not teach the baseline.
	if v.Contended {
		c.episode = true
	} else if v.Ratio < c.th.Tolerance {
		c.episode = false
	}
	// Readings above the contention threshold (or during an episode) do not
	// teach the baseline; everything else does, including moderate spikes,
	// so the noise band is learned as it really is.
	for _, r := range v.Readings {
		c.baseline(r.Domain, r.Kind).Observe(r.Ns, c.episode || c.held[r.Domain] || c.Above(r))
	}
	for _, cr := range perCPU {
		v.CPUs = append(v.CPUs, *cr)
	}
	slices.SortFunc(v.CPUs, func(a, b CPURatio) int { return a.CPU - b.CPU })
	return v
}

// Worst returns the worst ratio among readings of the given domains (all
// domains when none are given), for judging a proof or a throttle. The LLC
// probe's ratio is scaled to the others' thresholds (so that its LLCRatio
// counts as Ratio), keeping one scale for every decision.
func (c *Contention) Worst(rs []RatedReading, domains []int) float64 {
	w := 0.0
	for _, r := range rs {
		if len(domains) == 0 || slices.Contains(domains, r.Domain) {
			w = max(w, c.scaled(r))
		}
	}
	return w
}

// scaled maps a reading's ratio onto the common scale: 1 stays 1, the kind's
// own threshold becomes Ratio.
func (c *Contention) scaled(r RatedReading) float64 {
	ratio, _ := c.th.For(r.Kind)
	if ratio == c.th.Ratio || r.Ratio <= 1 {
		return r.Ratio
	}
	return 1 + (r.Ratio-1)*(c.th.Ratio-1)/(ratio-1)
}

// SetThresholds replaces the thresholds (a configuration reload); the
// baselines and the state of the current episode carry on.
func (c *Contention) SetThresholds(th Thresholds) {
	th.Fill()
	c.th = th
}
