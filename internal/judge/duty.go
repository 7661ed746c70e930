package judge

import (
	"math"
	"time"
)

// DefaultDutySteps is the default duty grid: a proven polluter runs a whole
// number of sixteenths of each period (Alita duty-cycles polluting cores in
// 16 steps of 6.25%). The actuator that turns a step into a CPU quota
// shares it.
const DefaultDutySteps = 16

// DutyController decides how hard a proven polluter is duty-cycled: it may
// run only Step/Steps of each short period on its CPUs. The relief is
// strongly non-linear in the duty (a split-lock loop held to 10% of a CPU
// left its neighbour at 1.0× on the dev machines), so the controller starts
// tight and relaxes carefully. It holds only settings; the state of each
// throttled tenant is a DutyThrottle, so new settings (a reloaded
// configuration) apply to the throttles already on.
type DutyController struct {
	Steps     int // default DefaultDutySteps
	StartStep int // default 1
	FloorStep int // default 1
	// TightenAbove and RelaxBelow are contention ratios (probe latency over
	// its quiet baseline): a hysteresis band between them holds the duty.
	TightenAbove float64 // default 1.3
	RelaxBelow   float64 // default 1.15
	// Hold is how long the signal must stay quiet before relaxing one step;
	// it doubles after a relax that brought the contention back, up to MaxHold.
	Hold, MaxHold time.Duration // default 2 s, 30 s
	// MaxHarm caps the relaxing by what it predicts: a polluter whose storm
	// reads H× while it runs slows a neighbour 1/((1−d)+d/H) at duty d, so
	// it is relaxed past the step whose prediction exceeds MaxHarm
	// (Ceiling) only after MaxHold of intervals that all read under
	// RelaxBelow: its storm may have stopped, and it relaxes on the hold
	// from there until a relax brings contention back. An interval's reading says
	// little of the harm at a low duty: on the dev VM, a split-lock loop
	// held to 1/16 or 2/16 read 1.0–1.1× interval after interval (a
	// reading is a few hundred microseconds, its slices 1–2 ms of each
	// 16) while its neighbour ran 1.05–1.15× slower, and relaxing on the
	// quiet readings of a 2 s hold cost that neighbour 10–15% again.
	// Default 1.05; negative: no ceiling.
	MaxHarm float64
	// IdleFraction: a throttled tenant using less than this fraction of what
	// its duty allows for two intervals has stopped (or exited): release it.
	IdleFraction float64 // default 0.3
	// Ineffective: a tenant held at the floor while the contention stays
	// above TightenAbove for this long is not what causes it (the proof was
	// fooled, or another polluter took over): release it (default 3 s). For
	// a storm the floor step holds (not DeepFloor) the contention must stay
	// at half its excess (or more) too, as for Verify: such a storm adds a
	// sixteenth of its own at the floor, so what reads over TightenAbove
	// there may be another tenant's while the hold still does its part.
	Ineffective time.Duration
	// Verify is how many intervals after a conviction count as a second
	// proof: the throttle is itself a cap, so if the contention stays at
	// half its excess before the conviction (or more) in two of them, it was
	// not this tenant (default 4; negative: no verification).
	Verify int
}

// Fill sets defaults.
func (c *DutyController) Fill() {
	if c.Steps == 0 {
		c.Steps = DefaultDutySteps
	}
	if c.StartStep == 0 {
		c.StartStep = 1
	}
	if c.FloorStep == 0 {
		c.FloorStep = 1
	}
	if c.TightenAbove == 0 {
		c.TightenAbove = 1.3
	}
	if c.RelaxBelow == 0 {
		c.RelaxBelow = 1.15
	}
	if c.Hold == 0 {
		c.Hold = 2 * time.Second
	}
	if c.MaxHold == 0 {
		c.MaxHold = 30 * time.Second
	}
	if c.IdleFraction == 0 {
		c.IdleFraction = 0.3
	}
	if c.MaxHarm == 0 {
		c.MaxHarm = 1.05
	}
	if c.Ineffective == 0 {
		c.Ineffective = 3 * time.Second
	}
	if c.Verify == 0 {
		c.Verify = 4
	}
}

// nearLevel is the contention that stays near a storm that read level×:
// at half its excess or more, and over TightenAbove (Verify, Ineffective).
func (c DutyController) nearLevel(level float64) float64 {
	return max(c.TightenAbove, 1+0.5*(level-1))
}

// floorHotAbove is the contention over which an interval at the floor
// counts against t (Ineffective).
func (c DutyController) floorHotAbove(t *DutyThrottle) float64 {
	if c.DeepFloor(t.strength) {
		return c.TightenAbove
	}
	return c.nearLevel(t.strength)
}

// Duty returns a step as a fraction (1 = unthrottled).
func (c DutyController) Duty(step int) float64 { return float64(step) / float64(c.Steps) }

// DeepPeriods is how many throttle periods the deep floor spreads the
// floor step's quota over: below the floor step, the ladder's last rung
// runs the floor's quota once every DeepPeriods periods (1 ms in 128 ms
// with the defaults), since the kernel's minimum quota (1 ms) makes 1/16
// of a 16 ms period the shortest run. A throughput victim is whole well
// above it: held by hand on the dev VM, a split-lock loop left a
// cache-resident chase on the other CPU 0.93–0.99× at 1 ms in 16, 32, 64
// or 128 ms. A latency victim is not: each run of the storm stalls the
// requests it meets, and a p99 sees them once more than one request in a
// hundred does. The p99 of the lab's server (2000 requests/s) on the other
// CPU read 2.5–3.2 ms with the loop held to 1 ms in 32 ms, 0.40–0.90 ms in
// 128 ms and 0.36–0.80 ms with no loop (three runs each, alternated).
const DeepPeriods = 8

// Fraction is the duty t runs at: its step's, or the floor's over
// DeepPeriods on the deep floor.
func (c DutyController) Fraction(t *DutyThrottle) float64 {
	if t.Deep {
		return c.Duty(t.Step) / DeepPeriods
	}
	return c.Duty(t.Step)
}

// harmDuty is the highest duty whose predicted harm stays within MaxHarm
// for a storm of strength× (1 where none could exceed it).
func (c DutyController) harmDuty(strength float64) float64 {
	if c.MaxHarm < 0 || strength <= 1 {
		return 1
	}
	return (1 - 1/c.MaxHarm) / (1 - 1/strength)
}

// DeepFloor reports whether a storm of strength× is to be held on the deep
// floor: even the floor step predicts more harm than MaxHarm.
func (c DutyController) DeepFloor(strength float64) bool {
	return c.harmDuty(strength) < c.Duty(c.FloorStep)-1e-9
}

// Ceiling is the highest step whose predicted harm to a neighbour stays
// within MaxHarm, for a polluter whose contention reads strength× while it
// runs; never under FloorStep. From 1/((1−d)+d/H) ≤ MaxHarm:
// d ≤ (1−1/MaxHarm) / (1−1/H).
// A storm whose ceiling is under the floor step is held on the deep floor
// (DeepFloor).
func (c DutyController) Ceiling(strength float64) int {
	d := c.harmDuty(strength)
	if d >= 1 {
		return c.Steps
	}
	step := int(math.Floor(d*float64(c.Steps) + 1e-9))
	return min(max(step, c.FloorStep), c.Steps)
}

// CanTighten reports whether t can be held tighter: it is above the floor
// step, or not yet on the deep floor. A storm the floor step holds goes
// there only if a hotter reading shows it stronger (Next), but it counts
// as able to: while it is held at the floor, contention on its domains is
// its controller's, and its neighbours are not proved on it.
func (c DutyController) CanTighten(t *DutyThrottle) bool {
	return t.Step > c.FloorStep || !t.Deep
}

// AllowedTo is the CPU (cores) throttle t lets its tenant on ncpus CPUs use.
func (c DutyController) AllowedTo(t *DutyThrottle, ncpus int) float64 {
	return c.Fraction(t) * float64(max(ncpus, 1))
}

// Idle reports whether a tenant using usage cores under throttle t uses
// less than the idle fraction of what its duty allows: it has likely
// stopped.
func (c DutyController) Idle(t *DutyThrottle, usage float64, ncpus int) bool {
	return usage < c.IdleFraction*c.AllowedTo(t, ncpus)
}

// DutyDecision is what the controller wants done to a throttled tenant. Its
// values are the action kinds the agent records for them.
type DutyDecision string

// Duty controller decisions.
const (
	DutyKeep    DutyDecision = "keep"
	DutyTighten DutyDecision = "tighten"
	DutyRelax   DutyDecision = "relax"
	DutyRelease DutyDecision = "release"
	// DutyUseless: throttling it at the floor does not reduce the contention.
	DutyUseless DutyDecision = "useless"
)

// DutyThrottle is the duty-cycle state of one proven polluter.
type DutyThrottle struct {
	Step int
	// Deep: held on the deep floor, the floor step's quota once every
	// DeepPeriods periods (Step is then FloorStep).
	Deep      bool
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
	// strength is the contention its storm reads while it runs: the
	// convicting level, raised by any hotter interval since.
	strength float64
	// loud is when an interval last read at or over RelaxBelow, for the
	// ceiling's rule.
	loud time.Time
	// continuous: its signal is read over the whole interval, not sampled
	// (StartContinuous), so the relaxing has no ceiling.
	continuous bool
}

// quietSince reports whether every interval since MaxHold ago (the
// current one included), and since the last change of step, read under
// RelaxBelow.
func (t *DutyThrottle) quietSince(c DutyController, now time.Time) bool {
	return now.Sub(t.changed) >= c.MaxHold && now.Sub(t.loud) >= c.MaxHold
}

// Start throttles a polluter at the start step, on the deep floor where
// that is the floor and the storm's strength asks for it (DeepFloor);
// before is the contention ratio that convicted it.
func (c DutyController) Start(now time.Time, before float64) *DutyThrottle {
	deep := c.StartStep <= c.FloorStep && c.DeepFloor(before)
	return &DutyThrottle{Step: c.StartStep, Deep: deep, changed: now, hold: c.Hold, before: before, strength: before}
}

// StartContinuous is Start for a tenant convicted on a signal read over
// the whole interval rather than sampled (its neighbours' CPU wait): that
// signal shows the harm at any duty, so the relaxing follows it with no
// ceiling (MaxHarm's rule is for the probes, whose readings miss a storm
// held to a low duty).
func (c DutyController) StartContinuous(now time.Time, before float64) *DutyThrottle {
	t := c.Start(now, before)
	t.continuous, t.Deep = true, false
	return t
}

// Next decides, from this interval's contention ratio and the tenant's CPU
// use (cores), what to do; it updates the step accordingly.
func (c DutyController) Next(t *DutyThrottle, now time.Time, ratio, usage float64, ncpus int) DutyDecision {
	if c.Idle(t, usage, ncpus) {
		t.idleCount++
		if t.idleCount >= 2 {
			return DutyRelease
		}
	} else {
		t.idleCount = 0
	}
	t.decisions++
	if t.decisions <= c.Verify && ratio > c.nearLevel(t.before) {
		t.hotEarly++
		if t.hotEarly >= 2 {
			return DutyUseless
		}
	}
	if ratio > c.floorHotAbove(t) && t.Step <= c.FloorStep {
		if t.floorHot.IsZero() {
			t.floorHot = now
		} else if now.Sub(t.floorHot) >= c.Ineffective {
			return DutyUseless
		}
	} else {
		t.floorHot = time.Time{}
	}
	if ratio >= c.RelaxBelow {
		t.loud = now
	}
	switch {
	case ratio > c.TightenAbove:
		t.strength = max(t.strength, ratio)
		if t.relaxed {
			t.hold = min(2*t.hold, c.MaxHold) // the test failed: wait longer next time
		}
		t.relaxed = false
		t.changed = now
		if t.Step > c.FloorStep {
			t.Step--
			return DutyTighten
		}
		// Onto the deep floor only for a storm the floor step does not
		// hold (DeepFloor), this reading included: a weaker one adds at
		// most a sixteenth of its own contention at the floor, so a hotter
		// reading there is someone else's, and holding it deeper would
		// cut what it runs eightfold for nothing (the simulator saw a
		// memory-bound victim, convicted on its own traffic beside a
		// streamer, taken down to the deep floor by the streamer's).
		if !t.Deep && c.DeepFloor(t.strength) {
			t.Deep = true
			return DutyTighten
		}
		return DutyKeep
	case ratio < c.RelaxBelow && now.Sub(t.changed) >= t.hold:
		// The next rung up: off the deep floor, or one step.
		over := t.Step+1 > c.Ceiling(t.strength)
		if t.Deep {
			over = c.DeepFloor(t.strength)
		}
		if !t.continuous && over {
			if !t.quietSince(c, now) {
				return DutyKeep
			}
			// Its storm has not shown for MaxHold: it may have stopped
			// (or the conviction was wrong). Relax on the hold from here;
			// a relax that brings contention back sets the strength again.
			t.strength = 1
		}
		t.changed = now
		t.relaxed = true
		if t.Deep {
			t.Deep = false
			return DutyRelax
		}
		if t.Step+1 >= c.Steps {
			return DutyRelease
		}
		t.Step++
		return DutyRelax
	}
	return DutyKeep
}
