// Package judge is the second stage of the pipeline: it turns what the
// sensors read into verdicts — is the host contended, who is suffering, who
// is suspected, and did a perturbation prove a suspect guilty. It never
// reads the host and never writes; it is pure logic over samples, so every
// decision is testable with made-up numbers.
package judge

import "math"

// Baseline tracks the quiet level of a latency signal. Contention only ever
// adds latency, so the baseline follows quieter readings quickly and louder
// ones slowly, and not at all while the signal is judged contended: a polluter
// that runs for an hour must not become the new normal. Dev tracks how much
// quiet readings scatter around the level, for the noise threshold.
type Baseline struct {
	Level float64 `json:"level"`
	Dev   float64 `json:"dev"`
	N     int     `json:"n"`
}

// Smoothing of the baseline: down quickly, up slowly.
const (
	baselineDown = 0.5
	baselineUp   = 0.05
	devAlpha     = 0.1
)

// Observe feeds one reading. contended says the judge considers this reading
// part of an episode of contention; such readings never raise the level.
func (b *Baseline) Observe(x float64, contended bool) {
	if x <= 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return
	}
	if b.N == 0 {
		b.Level, b.Dev, b.N = x, 0, 1
		return
	}
	b.N++
	switch {
	case x < b.Level:
		b.Level += baselineDown * (x - b.Level)
	case !contended:
		b.Level += baselineUp * (x - b.Level)
	}
	if !contended {
		// Learn the scatter quickly from the first readings, then slowly.
		alpha := max(devAlpha, 1/float64(b.N))
		b.Dev += alpha * (math.Abs(x-b.Level) - b.Dev)
	}
}

// Ratio is x over the quiet level (1 = quiet); 1 when there is no baseline yet.
func (b *Baseline) Ratio(x float64) float64 {
	if b.N == 0 || b.Level <= 0 {
		return 1
	}
	return x / b.Level
}

// Above reports whether x is beyond both a relative threshold and the
// baseline's own noise (k deviations).
func (b *Baseline) Above(x, minRatio, k float64) bool {
	if b.N == 0 {
		return false
	}
	return x > b.Level*minRatio && x > b.Level+k*b.Dev
}
