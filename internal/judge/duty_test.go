package judge

import (
	"testing"
	"time"
)

func TestDutyControllerFill(t *testing.T) {
	var c DutyController
	c.Fill()
	want := DutyController{Steps: 16, StartStep: 1, FloorStep: 1, TightenAbove: 1.3, RelaxBelow: 1.15,
		Hold: 2 * time.Second, MaxHold: 30 * time.Second, MaxHarm: 1.05, IdleFraction: 0.3, Ineffective: 3 * time.Second, Verify: 4}
	if c != want {
		t.Errorf("defaults %+v, want %+v", c, want)
	}
	set := DutyController{Steps: 10, StartStep: 3, FloorStep: 2, TightenAbove: 2, RelaxBelow: 1.5,
		Hold: time.Second, MaxHold: time.Minute, MaxHarm: -1, IdleFraction: 0.1, Ineffective: time.Second, Verify: -1}
	got := set
	got.Fill()
	if got != set {
		t.Errorf("Fill changed set values: %+v, want %+v", got, set)
	}
}

// dutyInterval is one interval of a throttle's life on virtual time.
type dutyInterval struct {
	after time.Duration // since the previous interval (the first: since the conviction)
	ratio float64       // the contention ratio read
	usage float64       // the tenant's CPU use, cores
	want  DutyDecision
	step  int  // the step after the decision
	deep  bool // on the deep floor after it
}

// noCeiling turns the relaxing's ceiling off, for the cases about the
// hold itself.
func noCeiling(c *DutyController) { c.MaxHarm = -1 }

func TestDutyControllerNext(t *testing.T) {
	const busy1, busy2 = 1.0 / 16, 2.0 / 16 // using all that steps 1 and 2 allow on one CPU
	for _, tc := range []struct {
		name      string
		tune      func(*DutyController) // after Fill; nil: the defaults
		before    float64               // the convicting contention
		ncpus     int
		intervals []dutyInterval
	}{
		{
			name: "relaxes after the hold; a relax that brings the contention back doubles it", before: 6, ncpus: 1,
			tune: noCeiling,
			intervals: []dutyInterval{
				{500 * time.Millisecond, 1.0, busy1, DutyKeep, 1, false},
				{2 * time.Second, 1.0, busy1, DutyRelax, 2, false},
				{500 * time.Millisecond, 2.0, busy2, DutyTighten, 1, false},
				{2*time.Second + time.Millisecond, 1.0, busy1, DutyKeep, 1, false},
				{2 * time.Second, 1.0, busy1, DutyRelax, 2, false},
				{0, 2.0, busy2, DutyTighten, 1, false},
				{4 * time.Second, 1.0, busy1, DutyKeep, 1, false},
				{4 * time.Second, 1.0, busy1, DutyRelax, 2, false},
			},
		},
		{
			name: "the hold doubles no further than MaxHold", before: 6, ncpus: 1,
			tune: func(c *DutyController) { c.MaxHold = 3 * time.Second; c.MaxHarm = -1 },
			intervals: []dutyInterval{
				{2 * time.Second, 1.0, busy1, DutyRelax, 2, false},
				{0, 2.0, busy2, DutyTighten, 1, false},
				{2999 * time.Millisecond, 1.0, busy1, DutyKeep, 1, false},
				{time.Millisecond, 1.0, busy1, DutyRelax, 2, false},
				{0, 2.0, busy2, DutyTighten, 1, false},
				{3 * time.Second, 1.0, busy1, DutyRelax, 2, false},
			},
		},
		{
			name: "a tighten that follows no relax keeps the hold", before: 6, ncpus: 1,
			tune: func(c *DutyController) { c.StartStep = 4; c.MaxHarm = -1 },
			intervals: []dutyInterval{
				{0, 2.0, 4.0 / 16, DutyTighten, 3, false},
				{2 * time.Second, 1.0, 3.0 / 16, DutyRelax, 4, false},
			},
		},
		{
			name: "tightens a step an interval down to the floor, then keeps", before: 6, ncpus: 1,
			tune: func(c *DutyController) { c.StartStep = 3 },
			intervals: []dutyInterval{
				{250 * time.Millisecond, 2.0, 3.0 / 16, DutyTighten, 2, false},
				{250 * time.Millisecond, 2.0, busy2, DutyTighten, 1, false},
				{250 * time.Millisecond, 2.0, busy1, DutyTighten, 1, true}, // onto the deep floor
				{250 * time.Millisecond, 2.0, busy1 / 2, DutyKeep, 1, true},
			},
		},
		{
			// A 1.6× storm adds at most 1.04× at 1/16: a hotter reading
			// there is another tenant's, and does not take it deeper; a
			// reading that shows a storm the floor does not hold does.
			name: "onto the deep floor only for a storm the floor does not hold", before: 1.6, ncpus: 1,
			tune: func(c *DutyController) { c.Verify = -1 },
			intervals: []dutyInterval{
				{250 * time.Millisecond, 1.4, busy1, DutyKeep, 1, false},
				{250 * time.Millisecond, 1.6, busy1, DutyKeep, 1, false},
				{250 * time.Millisecond, 5.0, busy1, DutyTighten, 1, true},
			},
		},
		{
			// A 2× storm at the floor: contention over TightenAbove but
			// under half its excess (1.5×) is not held against it; near
			// its conviction for Ineffective, it is useless.
			name: "for a storm the floor holds, only contention near its conviction is ineffective", before: 2, ncpus: 1,
			tune: func(c *DutyController) { c.Verify = -1 },
			intervals: []dutyInterval{
				{time.Second, 1.4, busy1, DutyKeep, 1, false},
				{time.Second, 1.4, busy1, DutyKeep, 1, false},
				{time.Second, 1.4, busy1, DutyKeep, 1, false},
				{time.Second, 1.4, busy1, DutyKeep, 1, false},
				{time.Second, 1.6, busy1, DutyKeep, 1, false},
				{time.Second, 1.6, busy1, DutyKeep, 1, false},
				{time.Second, 1.6, busy1, DutyKeep, 1, false},
				{time.Second, 1.6, busy1, DutyUseless, 1, false},
			},
		},
		{
			// Its 6× storm predicts 1.06× at 1/16, held on the deep floor
			// (1/128): off it only after MaxHold of quiet intervals.
			name: "past the ceiling only after MaxHold read quiet", before: 6, ncpus: 1,
			intervals: []dutyInterval{
				{2 * time.Second, 1.0, busy1, DutyKeep, 1, true},
				{10 * time.Second, 1.2, busy1, DutyKeep, 1, true},
				{20 * time.Second, 1.0, busy1, DutyKeep, 1, true},
				{9900 * time.Millisecond, 1.0, busy1, DutyKeep, 1, true},
				{100 * time.Millisecond, 1.0, busy1, DutyRelax, 1, false},
				{2 * time.Second, 1.0, busy1, DutyRelax, 2, false},
			},
		},
		{
			// 1.5× predicts 1.04× at 2/16 and 1.07× at 3/16.
			name: "a weak storm relaxes on quiet intervals up to its ceiling", before: 1.5, ncpus: 1,
			intervals: []dutyInterval{
				{2 * time.Second, 1.0, busy1, DutyRelax, 2, false},
				{2 * time.Second, 1.0, busy2, DutyKeep, 2, false},
				{28 * time.Second, 1.0, busy2, DutyRelax, 3, false},
			},
		},
		{
			// The tighten read 3×, which predicts 1.10× at 2/16.
			name: "a hotter interval raises the storm's strength", before: 1.5, ncpus: 1,
			tune: func(c *DutyController) { c.StartStep = 2 },
			intervals: []dutyInterval{
				{0, 3.0, busy2, DutyTighten, 1, false},
				{2 * time.Second, 1.0, busy1, DutyKeep, 1, false},
				{28 * time.Second, 1.0, busy1, DutyRelax, 2, false},
			},
		},
		{
			name: "a negative MaxHarm relaxes on the interval's reading alone", before: 6, ncpus: 1,
			tune: noCeiling,
			intervals: []dutyInterval{
				{2 * time.Second, 1.0, busy1, DutyRelax, 2, false},
			},
		},
		{
			name: "between RelaxBelow and TightenAbove the duty holds", before: 6, ncpus: 1,
			intervals: []dutyInterval{
				{5 * time.Second, 1.2, busy1, DutyKeep, 1, true},
				{5 * time.Second, 1.2, busy1, DutyKeep, 1, true},
			},
		},
		{
			name: "contention at the floor for Ineffective: useless", before: 6, ncpus: 1,
			intervals: []dutyInterval{
				{0, 3.0, busy1, DutyKeep, 1, true},
				{2999 * time.Millisecond, 3.0, busy1, DutyKeep, 1, true},
				{time.Millisecond, 3.0, busy1, DutyUseless, 1, true},
			},
		},
		{
			name: "an interval under TightenAbove restarts the floor's clock", before: 6, ncpus: 1,
			intervals: []dutyInterval{
				{0, 3.0, busy1, DutyKeep, 1, true},
				{2 * time.Second, 1.2, busy1, DutyKeep, 1, true},
				{time.Second, 3.0, busy1, DutyKeep, 1, true},
				{2900 * time.Millisecond, 3.0, busy1, DutyKeep, 1, true},
				{100 * time.Millisecond, 3.0, busy1, DutyUseless, 1, true},
			},
		},
		{
			name: "idle for two intervals: released", before: 6, ncpus: 1,
			intervals: []dutyInterval{
				{500 * time.Millisecond, 1.0, 0, DutyKeep, 1, true},
				{500 * time.Millisecond, 1.0, 0, DutyRelease, 1, true},
			},
		},
		{
			name: "a busy interval between idle ones restarts the count", before: 6, ncpus: 1,
			intervals: []dutyInterval{
				{500 * time.Millisecond, 1.0, 0, DutyKeep, 1, true},
				{500 * time.Millisecond, 1.0, busy1, DutyKeep, 1, true},
				{500 * time.Millisecond, 1.0, 0, DutyKeep, 1, true},
				{500 * time.Millisecond, 1.0, 0, DutyRelease, 1, true},
			},
		},
		{
			name: "idle is a fraction of what the duty allows on all its CPUs", before: 6, ncpus: 4,
			intervals: []dutyInterval{
				{500 * time.Millisecond, 1.0, 0.01, DutyKeep, 1, true}, // 0.3 × 4/128 = 0.009375
				{500 * time.Millisecond, 1.0, 0.009, DutyKeep, 1, true},
				{500 * time.Millisecond, 1.0, 0.009, DutyRelease, 1, true},
			},
		},
		{
			name: "a tenant with no CPUs known counts as one", before: 6, ncpus: 0,
			intervals: []dutyInterval{
				{500 * time.Millisecond, 1.0, 0.0023, DutyKeep, 1, true}, // 0.3 × 1/128 ≈ 0.00234
				{500 * time.Millisecond, 1.0, 0.0023, DutyRelease, 1, true},
			},
		},
		{
			name: "relaxing past the last step releases", before: 6, ncpus: 1,
			tune: func(c *DutyController) { c.StartStep = 14; c.MaxHarm = -1 },
			intervals: []dutyInterval{
				{2 * time.Second, 1.0, 14.0 / 16, DutyRelax, 15, false},
				{2 * time.Second, 1.0, 15.0 / 16, DutyRelease, 15, false},
			},
		},
		{
			// Past the ceiling, quiet for MaxHold a step, to the end.
			name: "past the ceiling, relaxing on to the release", before: 6, ncpus: 1,
			tune: func(c *DutyController) { c.StartStep = 15 },
			intervals: []dutyInterval{
				{29 * time.Second, 1.0, 15.0 / 16, DutyKeep, 15, false},
				{time.Second, 1.0, 15.0 / 16, DutyRelease, 15, false},
			},
		},
		{
			// After MaxHold of quiet past the ceiling, the hold paces the
			// relaxing; a relax that brings the storm back restores the
			// ceiling (and doubles the hold).
			name: "once past the ceiling, the hold paces the relaxing until the storm returns", before: 6, ncpus: 1,
			intervals: []dutyInterval{
				{30 * time.Second, 1.0, busy1 / 2, DutyRelax, 1, false},
				{2 * time.Second, 1.0, busy1, DutyRelax, 2, false},
				{2 * time.Second, 1.0, busy2, DutyRelax, 3, false},
				{2 * time.Second, 1.0, 3.0 / 16, DutyRelax, 4, false},
				{250 * time.Millisecond, 5.0, 4.0 / 16, DutyTighten, 3, false},
				{250 * time.Millisecond, 5.0, 3.0 / 16, DutyTighten, 2, false},
				{250 * time.Millisecond, 5.0, busy2, DutyTighten, 1, false},
				{250 * time.Millisecond, 5.0, busy1, DutyTighten, 1, true},
				{4 * time.Second, 1.0, busy1 / 2, DutyKeep, 1, true},
				{26 * time.Second, 1.0, busy1 / 2, DutyRelax, 1, false},
			},
		},
		{
			// Right after a conviction the throttle is a second proof.
			name: "contention near the convicting level in two of the first intervals: useless", before: 6, ncpus: 1,
			intervals: []dutyInterval{
				{250 * time.Millisecond, 5.0, busy1, DutyKeep, 1, true},
				{250 * time.Millisecond, 1.0, busy1, DutyKeep, 1, true},
				{250 * time.Millisecond, 5.0, busy1, DutyUseless, 1, true},
			},
		},
		{
			// Residual contention well under the convicting level is the
			// controller's business, not a failed verification.
			name: "residual 1.4× after a 6× conviction verifies", before: 6, ncpus: 1,
			intervals: []dutyInterval{
				{250 * time.Millisecond, 1.4, busy1, DutyKeep, 1, true},
				{250 * time.Millisecond, 1.4, busy1, DutyKeep, 1, true},
				{250 * time.Millisecond, 1.4, busy1, DutyKeep, 1, true},
				{250 * time.Millisecond, 1.4, busy1, DutyKeep, 1, true},
			},
		},
		{
			// A real polluter: quiet after the throttle; a later contended
			// interval (a relax test) is the controller's.
			name: "contention after the verification window is no failed verification", before: 6, ncpus: 1,
			intervals: []dutyInterval{
				{250 * time.Millisecond, 1.0, busy1, DutyKeep, 1, true},
				{250 * time.Millisecond, 1.0, busy1, DutyKeep, 1, true},
				{250 * time.Millisecond, 1.0, busy1, DutyKeep, 1, true},
				{250 * time.Millisecond, 1.0, busy1, DutyKeep, 1, true},
				{1500 * time.Millisecond, 5.0, busy1, DutyKeep, 1, true},
				{250 * time.Millisecond, 5.0, busy1, DutyKeep, 1, true},
			},
		},
		{
			name: "after a weak conviction the verification's bar is TightenAbove", before: 1.4, ncpus: 1,
			intervals: []dutyInterval{
				{250 * time.Millisecond, 1.35, busy1, DutyKeep, 1, false}, // the floor holds a 1.4× storm
				{250 * time.Millisecond, 1.35, busy1, DutyUseless, 1, false},
			},
		},
		{
			name: "a negative Verify verifies nothing", before: 6, ncpus: 1,
			tune: func(c *DutyController) { c.Verify = -1 },
			intervals: []dutyInterval{
				{250 * time.Millisecond, 5.0, busy1, DutyKeep, 1, true},
				{250 * time.Millisecond, 5.0, busy1, DutyKeep, 1, true},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c DutyController
			c.Fill()
			if tc.tune != nil {
				tc.tune(&c)
			}
			now := time.Unix(1_700_000_000, 0)
			thr := c.Start(now, tc.before)
			if thr.Step != c.StartStep {
				t.Fatalf("started at step %d, want %d", thr.Step, c.StartStep)
			}
			for i, iv := range tc.intervals {
				now = now.Add(iv.after)
				d := c.Next(thr, now, iv.ratio, iv.usage, tc.ncpus)
				if d != iv.want || thr.Step != iv.step || thr.Deep != iv.deep {
					t.Fatalf("interval %d (+%s, %.2f×, %.3f CPU): %s at step %d deep %v, want %s at step %d deep %v",
						i+1, iv.after, iv.ratio, iv.usage, d, thr.Step, thr.Deep, iv.want, iv.step, iv.deep)
				}
			}
		})
	}
}

func TestDutyControllerCeiling(t *testing.T) {
	for _, tc := range []struct {
		tune     func(*DutyController)
		strength float64
		want     int
		deep     bool
	}{
		{nil, 7.7, 1, true},    // a split-lock storm: 1/16 already predicts 1.06×, 1/128 1.01×
		{nil, 5.5, 1, true},    // 1.05× at 1/16
		{nil, 4.0, 1, false},   // 1.049× at 1/16, just within
		{nil, 1.5, 2, false},   // 1.04× at 2/16, 1.07× at 3/16
		{nil, 1.2, 4, false},   // 1.04× at 4/16, 1.05× at 5/16
		{nil, 1.04, 16, false}, // never harms more than MaxHarm
		{nil, 1, 16, false},
		{nil, 0.9, 16, false},
		{func(c *DutyController) { c.FloorStep = 2 }, 7.7, 2, true},
		{func(c *DutyController) { c.FloorStep = 2 }, 1.6, 2, false}, // 1.049× at 2/16
		{func(c *DutyController) { c.MaxHarm = -1 }, 7.7, 16, false},
		{func(c *DutyController) { c.MaxHarm = 1.2 }, 2, 5, false}, // 1.19× at 5/16, 1.23× at 6/16
	} {
		var c DutyController
		if tc.tune != nil {
			tc.tune(&c)
		}
		c.Fill()
		if got := c.Ceiling(tc.strength); got != tc.want {
			t.Errorf("Ceiling(%g) with MaxHarm %g, floor %d = %d, want %d", tc.strength, c.MaxHarm, c.FloorStep, got, tc.want)
		}
		if got := c.DeepFloor(tc.strength); got != tc.deep {
			t.Errorf("DeepFloor(%g) with MaxHarm %g, floor %d = %v, want %v", tc.strength, c.MaxHarm, c.FloorStep, got, tc.deep)
		}
		if thr := c.Start(time.Unix(0, 0), tc.strength); thr.Deep != (tc.deep && c.StartStep <= c.FloorStep) {
			t.Errorf("Start(%g) with floor %d, start %d: deep %v", tc.strength, c.FloorStep, c.StartStep, thr.Deep)
		}
	}
	// The ceiling is the last step whose predicted harm stays within
	// MaxHarm, for any strength.
	var c DutyController
	c.Fill()
	harm := func(step int, h float64) float64 { d := c.Duty(step); return 1 / ((1 - d) + d/h) }
	for h := 1.06; h < 50; h *= 1.07 {
		s := c.Ceiling(h)
		if s > c.FloorStep && harm(s, h) > c.MaxHarm+1e-9 {
			t.Errorf("strength %.2f: ceiling %d predicts %.3f×, over %g", h, s, harm(s, h), c.MaxHarm)
		}
		if s < c.Steps && harm(s+1, h) <= c.MaxHarm {
			t.Errorf("strength %.2f: ceiling %d, but %d predicts %.3f×, within %g", h, s, s+1, harm(s+1, h), c.MaxHarm)
		}
	}
}

// A tenant convicted on its neighbours' CPU wait, read over the whole
// interval, relaxes on the hold with no ceiling.
func TestDutyControllerContinuousHasNoCeiling(t *testing.T) {
	var c DutyController
	c.Fill()
	now := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		thr  *DutyThrottle
		want DutyDecision
	}{
		{c.Start(now, 6), DutyKeep},
		{c.StartContinuous(now, 6), DutyRelax},
	} {
		if d := c.Next(tc.thr, now.Add(c.Hold), 1.0, 1.0/16, 1); d != tc.want {
			t.Errorf("continuous %v: %s after a quiet hold, want %s", tc.thr.continuous, d, tc.want)
		}
	}
}

func TestDutyControllerIdle(t *testing.T) {
	var c DutyController
	c.Fill()
	for _, tc := range []struct {
		step, ncpus int
		deep        bool
		usage       float64
		want        bool
	}{
		{1, 1, false, 0, true},
		{1, 1, false, 0.018, true},  // under 0.3 × 1/16
		{1, 1, false, 0.019, false}, // over it
		{8, 2, false, 0.29, true},   // under 0.3 × 8/16 × 2
		{8, 2, false, 0.31, false},
		{1, 0, false, 0.018, true},  // no CPUs known: one
		{1, 1, true, 0.0023, true},  // under 0.3 × 1/128
		{1, 1, true, 0.0024, false}, // over it
	} {
		thr := &DutyThrottle{Step: tc.step, Deep: tc.deep}
		if got := c.Idle(thr, tc.usage, tc.ncpus); got != tc.want {
			t.Errorf("Idle(step %d deep %v, %.3f CPU, %d CPUs) = %v, want %v", tc.step, tc.deep, tc.usage, tc.ncpus, got, tc.want)
		}
	}
	if a := c.AllowedTo(&DutyThrottle{Step: 4}, 2); a != 0.5 {
		t.Errorf("AllowedTo(step 4, 2) = %v, want 0.5", a)
	}
	if d := c.Duty(4); d != 0.25 {
		t.Errorf("Duty(4) = %v", d)
	}
	if d := c.Fraction(&DutyThrottle{Step: 1, Deep: true}); d != 1.0/128 {
		t.Errorf("Fraction(deep floor) = %v, want 1/128", d)
	}
}
