// Package nodesignal turns what the agent sees on one host into a signal
// about the whole node that a cluster scheduler can act on: "this node has
// an uncontained polluter" — contention that crosstalk's throttling does not
// resolve. It publishes it as a node condition, a node label and optionally
// a taint, through a small hand-written Kubernetes API client (no client-go
// in the static binary), and as a Prometheus gauge.
//
// Uncontained, precisely: over the last Settings.After (5 minutes by
// default), in at least Settings.Fraction (80%) of the agent's intervals, the
// judge found contention while no throttled tenant could be held any tighter
// — either a convicted polluter was held at the floor duty (reason
// PolluterAtFloor: CPU throttling cannot contain it, e.g. a VM whose few
// remaining cycles still take bus locks) or no tenant was throttled at all
// (reason NoConviction: the polluter could not be proven — protected,
// max_throttled reached, repeatedly acquitted, or outside crosstalk's view
// such as the host itself or a neighbour VM on the same physical machine).
// The signal clears when, over the last Settings.ClearAfter (2 minutes),
// at most 1-Fraction (20%) of the intervals were like that.
package nodesignal

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/api"
)

// Reasons, as they appear in the node condition.
const (
	ReasonPolluterAtFloor = "PolluterAtFloor"
	ReasonNoConviction    = "NoConviction"
	ReasonContained       = "Contained"
	ReasonAgentStopped    = "AgentStopped"
)

// Settings shape the decision.
type Settings struct {
	// After is how long contention must persist, uncontained, before the
	// node is flagged (default 5m).
	After time.Duration
	// ClearAfter is how long it must stay away before the flag is lifted
	// (default 2m).
	ClearAfter time.Duration
	// Fraction of the intervals in a window that must be uncontained to
	// raise the flag; at most 1-Fraction may be to clear it (default 0.8).
	Fraction float64
	// FloorDuty is the duty of the throttle's floor step (1/16 by default):
	// a throttled tenant at or under it cannot be held tighter.
	FloorDuty float64
}

func (s *Settings) fill() {
	if s.After <= 0 {
		s.After = 5 * time.Minute
	}
	if s.ClearAfter <= 0 {
		s.ClearAfter = 2 * time.Minute
	}
	if s.Fraction <= 0 || s.Fraction > 1 {
		s.Fraction = 0.8
	}
	if s.FloorDuty <= 0 {
		s.FloorDuty = 1.0 / 16
	}
}

// Status is the node's state as far as crosstalk can tell.
type Status struct {
	Uncontained bool
	// Reason is one of the Reason constants.
	Reason  string
	Message string
	// Since is when Uncontained last changed (the condition's
	// lastTransitionTime).
	Since time.Time
}

// sample is one agent interval.
type sample struct {
	at       time.Time
	bad      bool     // contended, and nothing could be held tighter
	atFloor  []string // names of throttled tenants held at the floor
	ratio    float64
	interval time.Duration
}

// Tracker decides, State by State, whether the node has an uncontained
// polluter. It is safe for concurrent use.
type Tracker struct {
	set Settings

	mu      sync.Mutex
	samples []sample
	last    time.Time
	status  Status
}

// NewTracker returns a tracker; the node starts contained.
func NewTracker(s Settings) *Tracker {
	s.fill()
	return &Tracker{set: s, status: Status{Reason: ReasonContained, Message: "no persistent uncontained contention seen"}}
}

// Settings returns the settings in use (defaults filled).
func (t *Tracker) Settings() Settings { return t.set }

// Status is the current decision.
func (t *Tracker) Status() Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.status
}

// Observe takes one published State (a State already seen is ignored) and
// returns the status and whether it changed.
func (t *Tracker) Observe(s api.State) (Status, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.Time.IsZero() || !s.Time.After(t.last) {
		return t.status, false
	}
	t.last = s.Time
	smp := sample{at: s.Time, ratio: s.ContentionRatio, interval: time.Duration(s.Interval * float64(time.Second))}
	tighter := false
	for _, ten := range s.Tenants {
		if !ten.Throttled {
			continue
		}
		if ten.Duty <= t.set.FloorDuty+1e-9 {
			smp.atFloor = append(smp.atFloor, ten.Name)
		} else {
			tighter = true // its controller can still tighten it
		}
	}
	smp.bad = s.Contention && !tighter
	t.samples = append(t.samples, smp)
	keep := max(t.set.After, t.set.ClearAfter)
	i := 0
	for i < len(t.samples) && s.Time.Sub(t.samples[i].at) > keep {
		i++
	}
	t.samples = t.samples[i:]

	prev := t.status.Uncontained
	if !prev {
		if frac, ok := t.fraction(s.Time, t.set.After); ok && frac >= t.set.Fraction {
			t.status = t.raised(s.Time, frac)
		}
	} else {
		if frac, ok := t.fraction(s.Time, t.set.ClearAfter); ok && frac <= 1-t.set.Fraction {
			t.status = Status{Reason: ReasonContained, Since: s.Time,
				Message: fmt.Sprintf("contention resolved: uncontained in %.0f%% of the intervals of the last %s", 100*frac, t.set.ClearAfter)}
		} else {
			// Still raised: refresh the message (who is at the floor now).
			fa, _ := t.fraction(s.Time, t.set.After)
			st := t.raised(s.Time, fa)
			st.Since = t.status.Since
			t.status = st
			return t.status, false
		}
	}
	return t.status, t.status.Uncontained != prev
}

// fraction of bad samples within window before now; ok is false until the
// samples cover the window (the agent has watched long enough to say).
func (t *Tracker) fraction(now time.Time, window time.Duration) (float64, bool) {
	n, bad := 0, 0
	var oldest time.Time
	for _, s := range t.samples {
		if now.Sub(s.at) > window {
			continue
		}
		if oldest.IsZero() {
			oldest = s.at
		}
		n++
		if s.bad {
			bad++
		}
	}
	if n == 0 {
		return 0, false
	}
	// Covered when the oldest sample is within two intervals of the window's start.
	slack := 2 * t.samples[len(t.samples)-1].interval
	if now.Sub(oldest)+slack < window {
		return float64(bad) / float64(n), false
	}
	return float64(bad) / float64(n), true
}

// raised builds the status for a flagged node from the window's samples.
func (t *Tracker) raised(now time.Time, frac float64) Status {
	floor := map[string]bool{}
	worst := 0.0
	for _, s := range t.samples {
		if now.Sub(s.at) > t.set.After || !s.bad {
			continue
		}
		worst = max(worst, s.ratio)
		for _, n := range s.atFloor {
			floor[n] = true
		}
	}
	st := Status{Uncontained: true, Since: now}
	if len(floor) > 0 {
		names := slices.Sorted(maps.Keys(floor))
		st.Reason = ReasonPolluterAtFloor
		st.Message = fmt.Sprintf("contention (worst %.2fx the quiet baseline) in %.0f%% of the last %s while crosstalk held %s at its floor duty (%.3g of its CPUs): CPU throttling cannot contain it",
			worst, 100*frac, t.set.After, strings.Join(names, ", "), t.set.FloorDuty)
	} else {
		st.Reason = ReasonNoConviction
		st.Message = fmt.Sprintf("contention (worst %.2fx the quiet baseline) in %.0f%% of the last %s with no tenant throttled: the polluter could not be proven (protected, max_throttled reached, acquitted, or outside crosstalk's view)",
			worst, 100*frac, t.set.After)
	}
	return st
}
