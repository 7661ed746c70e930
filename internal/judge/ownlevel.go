package judge

import (
	"cmp"
	"math/bits"
	"slices"
)

// ownLevels judges a signal each tenant has of its own — CPU wait's
// stretch, CPI — against that tenant's quiet level: a Baseline per tenant,
// learned as the probes' are (quieter readings quickly, louder ones slowly,
// never one over the threshold), and which intervals were over the
// threshold, for persistence.
type ownLevels struct {
	warmup int
	base   map[string]*Baseline
	hot    map[string]int // per tenant: the last 3 intervals, a bit each, set when over the threshold
	runs   map[string]int // consecutive intervals over the threshold
}

// ownRating is one interval of a tenant against its quiet level.
type ownRating struct {
	level, ratio float64
	// above: over the threshold and outside the baseline's noise; counts:
	// above twice in a row, or strongly once; recurring: above in 2 of
	// the last 3 intervals.
	above, counts, recurring bool
}

func newOwnLevels(warmup int) ownLevels {
	return ownLevels{warmup: warmup, base: map[string]*Baseline{}, hot: map[string]int{}, runs: map[string]int{}}
}

// rate rates x, one interval of tenant id, and learns from it; ok is false
// while the tenant's baseline warms up (the reading is only learned).
func (l *ownLevels) rate(id string, x float64, th Thresholds) (ownRating, bool) {
	b := l.base[id]
	if b == nil {
		b = &Baseline{}
		l.base[id] = b
	}
	if b.N < l.warmup {
		b.Observe(x, false)
		return ownRating{}, false
	}
	r := ownRating{level: b.Level, ratio: b.Ratio(x), above: b.Above(x, th.Ratio, th.Noise)}
	if r.above {
		l.runs[id]++
		l.hot[id] = (l.hot[id]<<1 | 1) & 0b111
	} else {
		l.runs[id] = 0
		l.hot[id] = l.hot[id] << 1 & 0b111
	}
	r.counts = r.above && (l.runs[id] >= 2 || b.Above(x, th.Strong, 2*th.Noise))
	r.recurring = l.recurring(id)
	// Readings over the threshold never teach the baseline; moderate ones
	// do, so the noise band is learned as it really is.
	b.Observe(x, r.above)
	return r, true
}

// recurring reports whether a tenant was over the threshold in 2 of its
// last 3 rated intervals.
func (l *ownLevels) recurring(id string) bool { return bits.OnesCount(uint(l.hot[id])) >= 2 }

// skip breaks a tenant's run of intervals over the threshold: it was not
// judged this interval.
func (l *ownLevels) skip(id string) { l.runs[id] = 0 }

// ratio rates x against a tenant's warmed-up baseline without learning
// from it; 1 when there is none.
func (l *ownLevels) ratio(id string, x float64) float64 {
	b := l.base[id]
	if b == nil || b.N < l.warmup {
		return 1
	}
	return b.Ratio(x)
}

// forget drops the tenants not seen.
func (l *ownLevels) forget(seen map[string]bool) {
	for id := range l.base {
		if !seen[id] {
			delete(l.base, id)
			delete(l.hot, id)
			delete(l.runs, id)
		}
	}
}

// baselines returns a copy of each tenant's baseline.
func (l *ownLevels) baselines() map[string]Baseline {
	out := make(map[string]Baseline, len(l.base))
	for id, b := range l.base {
		out[id] = *b
	}
	return out
}

// beforeEpisode remembers a quantity of each tenant (its CPU use, its LLC
// misses) while no episode of contention is on, smoothed, so that during
// one it says what each tenant did before the episode began: contention
// between two tenants is often symmetric, and who changed breaks the tie.
type beforeEpisode map[string]float64

// episodeAlpha smooths what is remembered outside episodes.
const episodeAlpha = 0.3

// learn takes one interval of a tenant's quantity (outside an episode).
func (b beforeEpisode) learn(id string, x float64) {
	if old, ok := b[id]; ok {
		b[id] = old + episodeAlpha*(x-old)
	} else {
		b[id] = x
	}
}

// forget drops the tenants not seen.
func (b beforeEpisode) forget(seen map[string]bool) {
	for id := range b {
		if !seen[id] {
			delete(b, id)
		}
	}
}

// worstFirst sorts ratings by ratio, highest first, keeping ties in order.
func worstFirst[T any](rs []T, ratio func(T) float64) {
	slices.SortStableFunc(rs, func(a, b T) int { return cmp.Compare(ratio(b), ratio(a)) })
}
