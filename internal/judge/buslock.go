package judge

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// BusLockBudgetConfig is Alita's bus-lock sparsification against a host
// budget, driven by per-tenant bus-lock rates from the PMU (YAML section
// `buslocks:`). Defaults are Alita's constants (split_lock_iso.h:
// SplitLockIso(true, 0.1, 70000), DIRTY_THRESHOLD 125, FIXLEN 15, period
// 0.5 s, burst = 3 × threshold, 0.9/1.05 start adaptation).
type BusLockBudgetConfig struct {
	// Enabled turns the budget on where the PMU counts bus locks (default
	// true; doctor's bus_lock_event says whether this host's does).
	Enabled *bool `yaml:"enabled"`
	// BudgetPerSec is the host-wide bus locks per second (default 70000).
	BudgetPerSec float64 `yaml:"budget_per_sec"`
	// SharedFraction of the budget is shared among the dirty tenants
	// (default 0.8).
	SharedFraction float64 `yaml:"shared_fraction"`
	// BurstFactor: a tenant over this many times its share is held at the
	// start duty until it has been under it for BurstHold (default 3).
	BurstFactor float64 `yaml:"burst_factor"`
	// RelaxBelow: a tenant under this fraction of its share relaxes one
	// step per interval (default 0.8; between it and 1 it holds).
	RelaxBelow float64 `yaml:"relax_below"`
	// DirtyPerSec: a tenant whose mean rate over Window exceeds this is
	// dirty (default 125).
	DirtyPerSec float64 `yaml:"dirty_per_sec"`
	// Window of history for the dirty test and the start adaptation
	// (default 15s).
	Window time.Duration `yaml:"window"`
	// BurstHold (default 500ms).
	BurstHold time.Duration `yaml:"burst_hold"`
	// Share is how the shared budget is split: "tenant" (equally among
	// dirty tenants) or "cores" (in proportion to the physical cores each
	// dirty tenant's cpuset covers: Alita's per-core share, for VMs pinned
	// one vCPU per core with every vCPU dirty) (default tenant).
	Share string `yaml:"share"`
	// Levers, in order of preference (default clock_modulation, cpu_quota;
	// a lower frequency hardly slows a split-lock loop, whose cost is in
	// the uncore).
	Levers []string `yaml:"levers"`
}

// Alita's start-duty adaptation band and its reference grid: the start duty
// moves within 1 .. busLockRefSteps/2 - 1 sixteenths (max_duty/2 with
// ECMD), so between 6.25% and 43.75%.
const (
	busLockAdaptHigh = 1.05
	busLockAdaptLow  = 0.9
	busLockRefSteps  = 16
	busLockMaxStart  = (busLockRefSteps - 1) / 2
	// busLockDecay is Alita's smoothing of a falling rate, 0.75 old + 0.25
	// new per 100 ms sample, scaled to the interval.
	busLockDecay       = 0.75
	busLockDecayPeriod = 100 * time.Millisecond
)

// Fill sets defaults.
func (c *BusLockBudgetConfig) Fill() {
	if c.Enabled == nil {
		t := true
		c.Enabled = &t
	}
	if c.BudgetPerSec == 0 {
		c.BudgetPerSec = 70000
	}
	if c.SharedFraction == 0 {
		c.SharedFraction = 0.8
	}
	if c.BurstFactor == 0 {
		c.BurstFactor = 3
	}
	if c.RelaxBelow == 0 {
		c.RelaxBelow = 0.8
	}
	if c.DirtyPerSec == 0 {
		c.DirtyPerSec = 125
	}
	if c.Window == 0 {
		c.Window = 15 * time.Second
	}
	if c.BurstHold == 0 {
		c.BurstHold = 500 * time.Millisecond
	}
	if c.Share == "" {
		c.Share = "tenant"
	}
	if len(c.Levers) == 0 {
		c.Levers = []string{string(LeverClockModulation), string(LeverCPUQuota)}
	}
}

// Validate names the offending field.
func (c *BusLockBudgetConfig) Validate() error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("buslocks.%s: %s", field, fmt.Sprintf(format, a...)))
	}
	if c.BudgetPerSec <= 0 {
		bad("budget_per_sec", "must be > 0")
	}
	if c.SharedFraction <= 0 || c.SharedFraction > 1 {
		bad("shared_fraction", "%g outside (0, 1]", c.SharedFraction)
	}
	if c.BurstFactor < 1 {
		bad("burst_factor", "%g below 1", c.BurstFactor)
	}
	if c.RelaxBelow <= 0 || c.RelaxBelow > 1 {
		bad("relax_below", "%g outside (0, 1]", c.RelaxBelow)
	}
	if c.DirtyPerSec < 0 {
		bad("dirty_per_sec", "must be >= 0")
	}
	if c.Window < time.Second || c.Window > 10*time.Minute {
		bad("window", "%s outside 1s-10m", c.Window)
	}
	if c.BurstHold < 0 || c.BurstHold > c.Window {
		bad("burst_hold", "%s outside 0-window", c.BurstHold)
	}
	if c.Share != "tenant" && c.Share != "cores" {
		bad("share", "%q is not tenant or cores", c.Share)
	}
	if _, err := ParseLevers("buslocks.levers", c.Levers); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// BusLockTenant is one tenant's bus locks over an interval.
type BusLockTenant struct {
	ID, Name string
	// Rate is its bus locks per second (the perf "bus_locks" rate);
	// Measured is false when it was not counted this interval (the perf
	// watchlist rotates): its state is then held.
	Rate     float64
	Measured bool
	// Cores is the physical cores its cpuset covers (for share: cores).
	Cores     int
	Protected bool
	// Lever and Steps from ChooseLevers.
	Lever Lever
	Steps int
}

// BusLockSample is one interval. Tenants lists every current tenant; a
// throttled tenant missing from it is gone and released.
type BusLockSample struct {
	At       time.Time
	Duration time.Duration
	// HostRate is the host-wide bus locks per second when counted
	// system-wide (HostMeasured); otherwise the measured tenants' sum.
	HostRate     float64
	HostMeasured bool
	Tenants      []BusLockTenant
}

// BusLockAction is what a bus-lock decision does.
type BusLockAction string

// Bus-lock actions.
const (
	BusLockClamp   BusLockAction = "clamp"   // set to the start duty
	BusLockRelax   BusLockAction = "relax"   // one step up
	BusLockRelease BusLockAction = "release" // full speed: restore
)

// BusLockDecision is one change to one tenant.
type BusLockDecision struct {
	Tenant, Name string
	Lever        Lever
	Action       BusLockAction
	Step, Steps  int
	Duty         float64
	Rate, Share  float64 // smoothed rate and its share, per second
	Reason       string
}

// BusLockStatus is the budget's state after the last interval, for metrics.
type BusLockStatus struct {
	HostRate  float64 `json:"host_rate"`
	Dirty     int     `json:"dirty"`
	Share     float64 `json:"share"` // per dirty tenant, or per core with share: cores
	Burst     float64 `json:"burst"`
	StartStep int     `json:"start_step"` // sixteenths
	// TopThird is the mean of the top third of the host totals in the
	// window (0 until the window is full).
	TopThird float64 `json:"top_third"`
}

// BusLockThrottle is a tenant held below full speed.
type BusLockThrottle struct {
	Tenant, Name string
	Lever        Lever
	Step, Steps  int
	Rate         float64 // smoothed
	Triggered    bool    // over BurstFactor × share recently
}

type rateAt struct {
	at   time.Time
	rate float64
	dt   float64 // seconds
}

type busLockTenantState struct {
	name      string
	lever     Lever
	rate      float64 // smoothed
	seen      bool
	hist      []rateAt
	triggered bool
	calm      time.Duration
	step      int // 0: full speed
	steps     int
}

// BusLockBudget is Alita's split-lock module with the tenant as its unit.
//
// Alita counts bus locks per core (its VMs are pinned one vCPU per core)
// and duty-cycles cores; crosstalk counts them per tenant (the perf events
// are opened in cgroup mode) and throttles tenants, because that is what
// it can attribute on a host with shared cpusets and what its levers act
// on. Every interval:
//
//   - a tenant is dirty when its mean rate over Window exceeds DirtyPerSec;
//   - SharedFraction (80%) of the budget is shared among the dirty tenants,
//     equally (share: tenant), or per physical core (share: cores, which
//     is Alita's per-core share when each vCPU is a dirty core); with no
//     dirty tenant a tenant's share is the whole budget;
//   - a tenant's rate is smoothed on the way down (Alita keeps 0.75 of the
//     old rate per 100 ms), so a throttled polluter does not relax at once;
//   - a tenant over its share, or within BurstHold of having been over
//     BurstFactor × its share, is clamped to the start duty (one held
//     below it already stays where it is); one under
//     RelaxBelow × its share relaxes one step; in between it holds;
//   - once Window of host totals exists, the start duty tightens by one
//     step when the mean of the top third of them is over 1.05 × the
//     budget and loosens by one when under 0.9 ×, between 1/16 and 7/16.
//
// Deterministic: the same samples give the same decisions.
type BusLockBudget struct {
	cfg     BusLockBudgetConfig
	start   int // in sixteenths
	since   time.Time
	host    []rateAt
	tenants map[string]*busLockTenantState
	status  BusLockStatus
}

// NewBusLockBudget returns the judge; cfg is filled with defaults.
func NewBusLockBudget(cfg BusLockBudgetConfig) *BusLockBudget {
	cfg.Fill()
	return &BusLockBudget{cfg: cfg, start: 1, tenants: map[string]*busLockTenantState{}}
}

// startStep maps the start duty onto a lever with steps steps.
func (b *BusLockBudget) startStep(steps int) int {
	return max(1, b.start*steps/busLockRefSteps)
}

// Observe judges one interval and returns the changes, sorted by tenant.
func (b *BusLockBudget) Observe(s BusLockSample) []BusLockDecision {
	dt := s.Duration
	if dt <= 0 {
		dt = time.Second
	}
	if b.since.IsZero() {
		b.since = s.At.Add(-dt)
	}
	cutoff := s.At.Add(-b.cfg.Window)
	var out []BusLockDecision

	present := map[string]bool{}
	hostRate := s.HostRate
	for _, t := range s.Tenants {
		present[t.ID] = true
		if !s.HostMeasured && t.Measured {
			hostRate += t.Rate
		}
	}
	b.host = appendRate(b.host, rateAt{s.At, hostRate, dt.Seconds()}, cutoff)

	// Gone tenants are released.
	for id, st := range b.tenants {
		if present[id] {
			continue
		}
		if st.step > 0 {
			out = append(out, BusLockDecision{Tenant: id, Name: st.name, Lever: st.lever, Action: BusLockRelease, Step: st.steps, Steps: st.steps, Duty: 1, Reason: "tenant gone"})
		}
		delete(b.tenants, id)
	}

	// Smoothed rates and dirty tenants.
	decay := math.Pow(busLockDecay, dt.Seconds()/busLockDecayPeriod.Seconds())
	dirty, dirtyCores := 0, 0
	for _, t := range s.Tenants {
		st := b.tenants[t.ID]
		if st == nil {
			st = &busLockTenantState{}
			b.tenants[t.ID] = st
		}
		st.name = t.Name
		if t.Measured {
			r := t.Rate
			if st.seen && r < st.rate {
				r = st.rate*decay + r*(1-decay)
			}
			st.rate, st.seen = r, true
			st.hist = appendRate(st.hist, rateAt{s.At, t.Rate, dt.Seconds()}, cutoff)
		} else {
			st.hist = appendRate(st.hist, rateAt{}, cutoff) // only trims
		}
		if meanRate(st.hist) > b.cfg.DirtyPerSec {
			dirty++
			dirtyCores += max(t.Cores, 1)
		}
	}
	shared := b.cfg.SharedFraction * b.cfg.BudgetPerSec
	share := func(t BusLockTenant) float64 {
		switch {
		case b.cfg.Share == "cores" && dirty > 0:
			return shared * float64(max(t.Cores, 1)) / float64(dirtyCores)
		case b.cfg.Share == "cores":
			return b.cfg.BudgetPerSec * float64(max(t.Cores, 1))
		case dirty > 0:
			return shared / float64(dirty)
		}
		return b.cfg.BudgetPerSec
	}
	b.status = BusLockStatus{HostRate: hostRate, Dirty: dirty, StartStep: b.start}
	if b.cfg.Share == "cores" && dirty > 0 {
		b.status.Share = shared / float64(dirtyCores)
	} else if dirty > 0 {
		b.status.Share = shared / float64(dirty)
	} else {
		b.status.Share = b.cfg.BudgetPerSec
	}
	b.status.Burst = b.cfg.BurstFactor * b.status.Share

	for _, t := range s.Tenants {
		st := b.tenants[t.ID]
		if t.Steps >= 2 && t.Steps != st.steps {
			if st.step > 0 && st.steps > 0 { // the lever changed: keep the duty
				st.step = max(1, min(t.Steps-1, (st.step*t.Steps+st.steps/2)/st.steps))
			}
			st.steps = t.Steps
		}
		if t.Lever != "" {
			st.lever = t.Lever
		}
		if t.Protected || st.steps < 2 || st.lever == "" {
			if st.step > 0 {
				out = append(out, BusLockDecision{Tenant: t.ID, Name: t.Name, Lever: st.lever, Action: BusLockRelease, Step: st.steps, Steps: st.steps, Duty: 1, Rate: st.rate, Reason: "tenant is protected"})
				st.step = 0
			}
			continue
		}
		if !t.Measured {
			continue
		}
		sh := share(t)
		burst := b.cfg.BurstFactor * sh
		if st.rate > burst {
			st.triggered, st.calm = true, 0
		} else {
			st.calm += dt
			if st.triggered && st.calm > b.cfg.BurstHold {
				st.triggered = false
			}
		}
		d := BusLockDecision{Tenant: t.ID, Name: t.Name, Lever: st.lever, Steps: st.steps, Rate: st.rate, Share: sh}
		switch {
		case st.rate <= sh && !st.triggered:
			if st.step == 0 || st.rate > b.cfg.RelaxBelow*sh {
				continue // at full speed, or inside the hold band
			}
			st.step++
			d.Action, d.Step = BusLockRelax, st.step
			d.Reason = fmt.Sprintf("%.0f/s under %.0f%% of its share %.0f/s", st.rate, 100*b.cfg.RelaxBelow, sh)
			if st.step >= st.steps {
				st.step = 0
				d.Action, d.Step = BusLockRelease, st.steps
			}
		default:
			target := b.startStep(st.steps)
			if st.step == target || st.step > 0 && st.step < target {
				// At the start duty, or held below it (clamped while the
				// start was tighter): a tenant over its share is never
				// given more.
				continue
			}
			st.step = target
			d.Action, d.Step = BusLockClamp, target
			if st.rate > sh {
				d.Reason = fmt.Sprintf("%.0f/s over its share %.0f/s (%d dirty tenants, budget %.0f/s)", st.rate, sh, dirty, b.cfg.BudgetPerSec)
			} else {
				d.Reason = fmt.Sprintf("%.0f/s, within %s of a burst over %.0f/s (%g × its share)", st.rate, b.cfg.BurstHold, burst, b.cfg.BurstFactor)
			}
		}
		d.Duty = float64(d.Step) / float64(d.Steps)
		out = append(out, d)
	}

	// Adapt the start duty to the recent host totals.
	if s.At.Sub(b.since) >= b.cfg.Window && len(b.host) >= 3 {
		rates := make([]float64, len(b.host))
		for i, h := range b.host {
			rates[i] = h.rate
		}
		slices.SortFunc(rates, func(a, b float64) int { return -cmpFloat(a, b) })
		top := rates[:len(rates)/3]
		var sum float64
		for _, r := range top {
			sum += r
		}
		avg := sum / float64(len(top))
		b.status.TopThird = avg
		switch {
		case avg > busLockAdaptHigh*b.cfg.BudgetPerSec && b.start > 1:
			b.start--
		case avg < busLockAdaptLow*b.cfg.BudgetPerSec && b.start < busLockMaxStart:
			b.start++
		}
	}
	slices.SortStableFunc(out, func(a, b BusLockDecision) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// appendRate adds r (unless zero) and drops entries at or before cutoff.
func appendRate(h []rateAt, r rateAt, cutoff time.Time) []rateAt {
	i := 0
	for i < len(h) && !h[i].at.After(cutoff) {
		i++
	}
	h = append(h[:0], h[i:]...)
	if !r.at.IsZero() {
		h = append(h, r)
	}
	return h
}

func meanRate(h []rateAt) float64 {
	var sum, t float64
	for _, r := range h {
		sum += r.rate * r.dt
		t += r.dt
	}
	if t == 0 {
		return 0
	}
	return sum / t
}

// Status is the budget's state after the last interval.
func (b *BusLockBudget) Status() BusLockStatus { return b.status }

// Throttled lists the tenants held below full speed, sorted.
func (b *BusLockBudget) Throttled() []BusLockThrottle {
	var out []BusLockThrottle
	for id, st := range b.tenants {
		if st.step > 0 {
			out = append(out, BusLockThrottle{Tenant: id, Name: st.name, Lever: st.lever, Step: st.step, Steps: st.steps, Rate: st.rate, Triggered: st.triggered})
		}
	}
	slices.SortFunc(out, func(a, b BusLockThrottle) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out
}
