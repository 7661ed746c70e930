package act

import (
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
)

// Sparsify holds the settings of bus-lock sparsification: a proven polluter
// may run only Step/Steps of each short Period on its CPUs (Alita duty-cycles
// polluting cores in 16 steps of 6.25%). The relief is strongly non-linear in
// the duty (a split-lock loop held to 10% of a CPU left its neighbour at 1.0×
// on the dev machines), so the controller starts tight and relaxes carefully.
type Sparsify struct {
	Period    time.Duration // default 16 ms: 1/16 of it is 1 ms, the kernel's minimum quota
	Steps     int           // default 16
	StartStep int           // default 1
	FloorStep int           // default 1
	// TightenAbove and RelaxBelow are contention ratios (probe latency over
	// its quiet baseline): a hysteresis band between them holds the duty.
	TightenAbove float64 // default 1.3
	RelaxBelow   float64 // default 1.15
	// Hold is how long the signal must stay quiet before relaxing one step;
	// it doubles after a relax that brought the contention back, up to MaxHold.
	Hold, MaxHold time.Duration // default 2 s, 30 s
	// IdleFraction: a throttled tenant using less than this fraction of what
	// its duty allows for two intervals has stopped (or exited): release it.
	IdleFraction float64 // default 0.3
	// Ineffective: a tenant held at the floor while the contention stays
	// above TightenAbove for this long is not what causes it (the proof was
	// fooled, or another polluter took over): release it (default 3 s).
	Ineffective time.Duration
	// Verify is how many intervals after a conviction count as a second
	// proof: the throttle is itself a cap, so if the contention stays at
	// half its excess before the conviction (or more) in two of them, it was
	// not this tenant (default 4).
	Verify int
}

// Fill sets defaults.
func (s *Sparsify) Fill() {
	if s.Period == 0 {
		s.Period = 16 * time.Millisecond
	}
	if s.Steps == 0 {
		s.Steps = 16
	}
	if s.StartStep == 0 {
		s.StartStep = 1
	}
	if s.FloorStep == 0 {
		s.FloorStep = 1
	}
	if s.TightenAbove == 0 {
		s.TightenAbove = 1.3
	}
	if s.RelaxBelow == 0 {
		s.RelaxBelow = 1.15
	}
	if s.Hold == 0 {
		s.Hold = 2 * time.Second
	}
	if s.MaxHold == 0 {
		s.MaxHold = 30 * time.Second
	}
	if s.IdleFraction == 0 {
		s.IdleFraction = 0.3
	}
	if s.Ineffective == 0 {
		s.Ineffective = 3 * time.Second
	}
	if s.Verify == 0 {
		s.Verify = 4
	}
}

// Quota is the CFS limit for a duty step on ncpus CPUs.
func (s Sparsify) Quota(step, ncpus int) cgroup.Quota {
	q := time.Duration(int64(s.Period) * int64(step) * int64(max(ncpus, 1)) / int64(s.Steps))
	return cgroup.Quota{Quota: max(q, cgroup.MinQuota), Period: s.Period}
}

// Duty returns a step as a fraction (1 = unthrottled).
func (s Sparsify) Duty(step int) float64 { return float64(step) / float64(s.Steps) }

// Decision is what the controller wants done to a throttled tenant.
type Decision string

// Controller decisions.
const (
	Keep    Decision = "keep"
	Tighten Decision = "tighten"
	Relax   Decision = "relax"
	Release Decision = "release"
	// Useless: throttling it at the floor does not reduce the contention.
	Useless Decision = "useless"
)

// Throttle is the duty-cycle state of one proven polluter.
type Throttle struct {
	Step      int
	changed   time.Time // last step change
	hold      time.Duration
	relaxed   bool // the last change was a relax (a test)
	idleCount int
	// floorHot is when contention was first seen above TightenAbove while at
	// the floor (zero: not now).
	floorHot time.Time
	// decisions counts Next calls; hotEarly counts those among the first
	// Verify whose contention stayed near the level before the conviction.
	decisions, hotEarly int
	before              float64
}

// NewThrottle starts a polluter at the configured start step; before is the
// contention ratio that convicted it.
func (s Sparsify) NewThrottle(now time.Time, before float64) *Throttle {
	return &Throttle{Step: s.StartStep, changed: now, hold: s.Hold, before: before}
}

// Next decides, from this interval's contention ratio and the tenant's CPU
// use (cores), what to do; it updates the step accordingly.
func (s Sparsify) Next(t *Throttle, now time.Time, ratio, usage float64, ncpus int) Decision {
	allowed := s.Duty(t.Step) * float64(max(ncpus, 1))
	if usage < s.IdleFraction*allowed {
		t.idleCount++
		if t.idleCount >= 2 {
			return Release
		}
	} else {
		t.idleCount = 0
	}
	t.decisions++
	if t.decisions <= s.Verify && ratio > max(s.TightenAbove, 1+0.5*(t.before-1)) {
		t.hotEarly++
		if t.hotEarly >= 2 {
			return Useless
		}
	}
	if ratio > s.TightenAbove && t.Step <= s.FloorStep {
		if t.floorHot.IsZero() {
			t.floorHot = now
		} else if now.Sub(t.floorHot) >= s.Ineffective {
			return Useless
		}
	} else {
		t.floorHot = time.Time{}
	}
	switch {
	case ratio > s.TightenAbove:
		if t.relaxed {
			t.hold = min(2*t.hold, s.MaxHold) // the test failed: wait longer next time
		}
		t.relaxed = false
		t.changed = now
		if t.Step > s.FloorStep {
			t.Step--
			return Tighten
		}
		return Keep
	case ratio < s.RelaxBelow && now.Sub(t.changed) >= t.hold:
		t.changed = now
		if t.Step+1 >= s.Steps {
			return Release
		}
		t.Step++
		t.relaxed = true
		return Relax
	}
	return Keep
}
