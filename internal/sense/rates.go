package sense

import "time"

// TenantRates are a tenant's rates between two samples of its cgroup
// counters.
type TenantRates struct {
	Span      float64 // seconds between the two samples
	Usage     float64 // CPU seconds used per second (cores)
	Throttled float64 // seconds its CFS quota held it back, per second
	// HeldBack is whether its CFS quota held it back between the samples:
	// throttled time grew, or a period counted it throttled (one paying
	// off an overrun may show only that, see TenantStats.NrThrottled).
	HeldBack bool
	// PSI is the seconds at least one of its tasks waited for a CPU, per
	// second; 0 unless both samples had PSI.
	PSI float64
	// RunDelay is its run delay per second (TenantStats.RunDelayRate): a
	// rate over the run delay's own window, not over Span, since run delay
	// is read in turns.
	RunDelay float64
}

// Rates turns two successive samples into rates; false when cur is not
// later than prev (nothing to divide by). A counter that went back (a
// cgroup recreated under the same tenant) rates 0, not negative.
func Rates(prev, cur TenantStats) (TenantRates, bool) {
	dt := cur.At.Sub(prev.At).Seconds()
	if dt <= 0 {
		return TenantRates{}, false
	}
	r := TenantRates{
		Span:      dt,
		Usage:     max(0, (cur.Usage-prev.Usage).Seconds()/dt),
		Throttled: max(0, (cur.Throttled-prev.Throttled).Seconds()/dt),
		RunDelay:  cur.RunDelayRate,
	}
	r.HeldBack = r.Throttled > 0 || cur.NrThrottled > prev.NrThrottled
	if cur.HasPSI && prev.HasPSI {
		r.PSI = max(0, (cur.PSISome-prev.PSISome).Seconds()/dt)
	}
	return r, true
}

// DelayMark is a tenant's CPU time when its run delay was last read: where
// its CPU-wait window starts.
type DelayMark struct {
	At    time.Time
	Usage time.Duration
}

// EndsWaitWindow reports whether the run delay was read (or brought up to
// date) at this sample: a CPU-wait window ends here and the next begins
// (Mark).
func (s TenantStats) EndsWaitWindow() bool {
	return !s.RunDelayAt.IsZero() && s.RunDelayAt.Equal(s.At)
}

// Mark is where a CPU-wait window starting at this sample begins.
func (s TenantStats) Mark() DelayMark { return DelayMark{At: s.At, Usage: s.Usage} }

// WaitWindow is a tenant's CPU use and run delay over one CPU-wait window
// (between two reads of its run delay: an interval, or a turn of several on
// a busy host). CPU use over the run delay's own window keeps the CPU-wait
// judge's stretch consistent.
type WaitWindow struct {
	Usage float64 // CPU seconds per second over the window
	Delay float64 // run delay per second over the window
}

// WaitSince is the CPU-wait window from mark to cur, a sample that ends one
// (EndsWaitWindow); false when no time passed since the mark.
func WaitSince(mark DelayMark, cur TenantStats) (WaitWindow, bool) {
	dt := cur.At.Sub(mark.At).Seconds()
	if dt <= 0 {
		return WaitWindow{}, false
	}
	return WaitWindow{Usage: max(0, (cur.Usage-mark.Usage).Seconds()/dt), Delay: cur.RunDelayRate}, true
}
