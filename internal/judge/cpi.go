package judge

import (
	"fmt"
)

// CPI judges cache and memory contention from the victims' side, where a
// PMU counts each tenant's cycles and instructions: a tenant whose cycles
// per instruction rise far above its own usual level is losing its cache
// or its memory bandwidth to someone (CPI², Zhang et al., EuroSys 2013).
// It sees what the canary probes may not: a probe reads the cache it
// walks, at its own footprint and pace, while a victim's CPI is its own
// work slowed, whatever its footprint. Measured in the simulator, a
// memory-bandwidth polluter that left the DRAM probe within 1.2× of quiet
// raised a cache-sensitive victim's CPI 1.5×.
//
// A tenant's CPI is learned as the probes' baselines are (Baseline:
// quieter readings quickly, louder ones slowly, never while over the
// threshold), so its ratio reads on the probes' scale. A tenant's own
// phases move its CPI too; who causes a rise is left to the suspects'
// ranking (tenants on the same L3, by LLC misses, activity and
// correlation) and to the randomized proof (Proof), read on the victims'
// CPI, which convicts a tenant whose cap does not move it with
// probability at most its Alpha.
type CPI struct {
	th     Thresholds
	levels ownLevels
	// misses is each tenant's LLC misses a second while no tenant's CPI
	// was over the threshold; during such an episode it holds what each
	// missed before it began (see Onset).
	misses  beforeEpisode
	episode bool
}

// CPISample is one tenant's interval: its counters' rates per second and
// its CPU use.
type CPISample struct {
	ID                   string
	Cycles, Instructions float64
	Usage                float64
	// LLCMisses is its LLC misses a second, where MissesCounted.
	LLCMisses     float64
	MissesCounted bool
	// Exclude keeps the tenant out of the judgement and its baseline:
	// one crosstalk is capping, whose CPI is crosstalk's doing.
	Exclude bool
}

// CPIRating is one tenant's CPI this interval against its baseline.
type CPIRating struct {
	ID       string  `json:"id"`
	CPI      float64 `json:"cpi"`
	Baseline float64 `json:"baseline"`
	Ratio    float64 `json:"ratio"`
	// Contended: over the threshold twice in a row, or strongly once.
	Contended bool `json:"contended"`
}

// CPIVerdict is the CPI judgement of one interval.
type CPIVerdict struct {
	Contended bool
	// Persistent: a contended tenant was over the threshold in 2 of the
	// last 3 intervals (the agent only disturbs anyone on persistent
	// contention).
	Persistent bool
	// Ratio is the worst ratio of any judged tenant (1 = quiet).
	Ratio float64
	// Victims are the contended tenants, worst first.
	Victims []CPIRating
	// Ratings are every judged tenant's (warmed-up baseline, enough work).
	Ratings []CPIRating
	Reason  string
}

// cpiWarmup is how many intervals a tenant's CPI baseline needs before it
// is judged.
const cpiWarmup = 4

// minCPIUsage and minInstructions are the CPU use and the instructions
// per second below which a tenant's CPI is not judged: a nearly idle
// tenant's CPI is that of its wake-ups, cold caches and all.
const (
	minCPIUsage     = 0.05
	minInstructions = 1e6
)

// NewCPI returns a CPI judge with the given thresholds.
func NewCPI(th Thresholds) *CPI {
	th.Fill()
	return &CPI{th: th, levels: newOwnLevels(cpiWarmup), misses: beforeEpisode{}}
}

// Thresholds returns the thresholds in use.
func (c *CPI) Thresholds() Thresholds { return c.th }

// onsetGain is how many times its usual LLC misses a tenant must miss
// during an episode to have changed with it (see Onset).
const onsetGain = 2

// Onset reports whether a tenant missing misses LLC lines a second now
// changed with the current CPI episode: at least onsetGain times what it
// missed before the episode began (a tenant new since then missed nothing
// before). Two tenants that take each other's cache are symmetric —
// capping either relieves the other — and what breaks the tie is who
// changed, as with CPU wait (Gain). In the simulator, a memory-bound victim
// missing 70-120 million times a second from the start was proven to raise
// a light cache user's CPI 1.3× once a polluter's start lifted that user's
// CPI over the threshold; its own misses had barely moved.
func (c *CPI) Onset(id string, misses float64) bool {
	return misses >= onsetGain*c.misses[id]
}

// Baselines returns a copy of each tenant's CPI baseline.
func (c *CPI) Baselines() map[string]Baseline { return c.levels.baselines() }

// Restore imports baselines saved by Baselines: a tenant's is judged at
// once, and one not present at the next Update is forgotten.
func (c *CPI) Restore(saved map[string]Baseline) {
	for id, b := range saved {
		if b.N > 0 && b.Level > 0 {
			bb := b
			c.levels.base[id] = &bb
		}
	}
}

// Seed starts a tenant's CPI baseline at cpi, warmed up, so that it is
// judged from its next interval: the CPI it ran at with a suspect capped
// at start, where its usual would otherwise be learned under that
// suspect. A baseline already warmed up (restored, or learned) is kept,
// unless cpi is lower; the seeded level then learns as any other.
func (c *CPI) Seed(id string, cpi float64) {
	if !(cpi > 0) {
		return
	}
	if b := c.levels.base[id]; b != nil && b.N >= cpiWarmup && b.Level <= cpi {
		return
	}
	c.levels.base[id] = &Baseline{Level: cpi, N: cpiWarmup}
	// What every tenant missed so far was missed under the contention the
	// seed reveals: none of it is from before the episode (see Onset).
	clear(c.misses)
}

// SetThresholds replaces the thresholds (a configuration reload); the
// baselines carry on.
func (c *CPI) SetThresholds(th Thresholds) {
	th.Fill()
	c.th = th
}

// CPIOf is cycles over instructions; ok is false when the tenant did too
// little to tell (the counts as rates per second, usage in CPUs, over the
// same window).
func CPIOf(cycles, instructions, usage float64) (float64, bool) {
	if usage < minCPIUsage || cycles <= 0 || instructions < minInstructions {
		return 0, false
	}
	return cycles / instructions, true
}

// WindowCPI is the CPI of a window of seconds in which a tenant counted
// cycles and instructions; ok is false when it did too little to tell.
func WindowCPI(cycles, instructions, seconds float64) (float64, bool) {
	if seconds <= 0 || cycles <= 0 || instructions < minInstructions*seconds {
		return 0, false
	}
	return cycles / instructions, true
}

// Ratio rates one window's CPI of a tenant against its baseline without
// learning from it (for proofs and for controlling a throttle); 1 when the
// tenant has no warmed-up baseline.
func (c *CPI) Ratio(id string, cpi float64) float64 {
	if cpi <= 0 {
		return 1
	}
	return c.levels.ratio(id, cpi)
}

// Update judges an interval and learns from its quiet readings. Tenants
// absent from samples are forgotten.
func (c *CPI) Update(samples []CPISample) CPIVerdict {
	v := CPIVerdict{Ratio: 1}
	seen := map[string]bool{}
	for _, s := range samples {
		seen[s.ID] = true
		if s.Exclude {
			c.levels.skip(s.ID)
			continue
		}
		cpi, ok := CPIOf(s.Cycles, s.Instructions, s.Usage)
		if !ok {
			continue
		}
		o, ok := c.levels.rate(s.ID, cpi, c.th)
		if !ok {
			continue
		}
		r := CPIRating{ID: s.ID, CPI: cpi, Baseline: o.level, Ratio: o.ratio, Contended: o.counts}
		v.Ratio = max(v.Ratio, r.Ratio)
		v.Ratings = append(v.Ratings, r)
		if r.Contended {
			v.Victims = append(v.Victims, r)
			v.Persistent = v.Persistent || o.recurring
		}
	}
	c.levels.forget(seen)
	c.misses.forget(seen)
	// An episode begins with the first rating over the threshold and lasts
	// until every rating is back under the tolerance; the misses are
	// learned only outside episodes.
	switch {
	case v.Ratio > c.th.Ratio:
		c.episode = true
	case v.Ratio < c.th.Tolerance:
		c.episode = false
	}
	if !c.episode {
		for _, s := range samples {
			if s.MissesCounted && !s.Exclude {
				c.misses.learn(s.ID, s.LLCMisses)
			}
		}
	}
	worstFirst(v.Victims, func(r CPIRating) float64 { return r.Ratio })
	v.Contended = len(v.Victims) > 0
	if v.Contended {
		w := v.Victims[0]
		v.Reason = fmt.Sprintf("CPI: %s runs at %.2f cycles an instruction, %.1f× its usual %.2f", w.ID, w.CPI, w.Ratio, w.Baseline)
	}
	return v
}
