package nodesignal

import (
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/api"
)

var t0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

// interval builds the State of second i: contended or not, with the given
// throttled tenants (name -> duty).
func interval(i int, contended bool, throttled map[string]float64) api.State {
	s := api.State{Time: t0.Add(time.Duration(i) * time.Second), Interval: 1, Contention: contended, ContentionRatio: 1}
	if contended {
		s.ContentionRatio = 2.5
	}
	s.Tenants = append(s.Tenants, api.TenantState{ID: "/victim", Name: "victim", Duty: 1})
	for name, duty := range throttled {
		s.Tenants = append(s.Tenants, api.TenantState{ID: "/" + name, Name: name, Throttled: true, Duty: duty})
	}
	return s
}

func TestTracker(t *testing.T) {
	floor := map[string]float64{"polluter": 1.0 / 16}
	tightenable := map[string]float64{"polluter": 4.0 / 16}
	type step struct {
		from, to  int // seconds, inclusive-exclusive
		contended func(i int) bool
		throttled map[string]float64
	}
	always := func(int) bool { return true }
	never := func(int) bool { return false }
	for _, tc := range []struct {
		name      string
		steps     []step
		wantAt    int    // second at which it must be flagged (-1: never)
		reason    string // reason when flagged
		clearedAt int    // second at which it must be cleared again (-1: not checked)
	}{
		{"polluter held at the floor, contention persists",
			[]step{{0, 90, always, floor}}, 60, ReasonPolluterAtFloor, -1},
		{"contention persists, nobody convicted",
			[]step{{0, 90, always, nil}}, 60, ReasonNoConviction, -1},
		{"a polluter still being tightened is being contained",
			[]step{{0, 120, always, tightenable}}, -1, "", -1},
		{"short contention is not persistent",
			[]step{{0, 40, always, floor}, {40, 120, never, nil}}, -1, "", -1},
		{"half the intervals contended is below the 80% bar",
			[]step{{0, 120, func(i int) bool { return i%2 == 0 }, floor}}, -1, "", -1},
		{"flickering but mostly contended (9 of 10) is uncontained",
			[]step{{0, 90, func(i int) bool { return i%10 != 0 }, floor}}, 60, ReasonPolluterAtFloor, -1},
		// Resolved at 70 s: cleared once at most 20% of the last 20 s were
		// uncontained, 16 s later.
		{"flagged, then resolved: cleared within the clear window",
			[]step{{0, 70, always, floor}, {70, 130, never, nil}}, 60, ReasonPolluterAtFloor, 86},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(Settings{After: time.Minute, ClearAfter: 20 * time.Second})
			flagged, cleared := -1, -1
			var flaggedStatus Status
			for _, st := range tc.steps {
				for i := st.from; i < st.to; i++ {
					s, changed := tr.Observe(interval(i, st.contended(i), st.throttled))
					if changed && s.Uncontained && flagged < 0 {
						flagged, flaggedStatus = i, s
					}
					if changed && !s.Uncontained && flagged >= 0 && cleared < 0 {
						cleared = i
						if s.Reason != ReasonContained {
							t.Errorf("cleared with reason %q", s.Reason)
						}
					}
				}
			}
			if tc.wantAt < 0 {
				if flagged >= 0 {
					t.Fatalf("flagged at %ds: %+v", flagged, flaggedStatus)
				}
				return
			}
			// Flagged once the window is covered (within two intervals of it).
			if flagged < tc.wantAt-2 || flagged > tc.wantAt+1 {
				t.Fatalf("flagged at %ds, want about %ds", flagged, tc.wantAt)
			}
			if flaggedStatus.Reason != tc.reason || !flaggedStatus.Since.Equal(t0.Add(time.Duration(flagged)*time.Second)) {
				t.Errorf("status %+v, want reason %s since the flag", flaggedStatus, tc.reason)
			}
			if tc.reason == ReasonPolluterAtFloor && !strings.Contains(flaggedStatus.Message, "held polluter at its floor") {
				t.Errorf("message does not name the polluter: %q", flaggedStatus.Message)
			}
			if tc.clearedAt >= 0 && (cleared < tc.clearedAt-2 || cleared > tc.clearedAt+1) {
				t.Errorf("cleared at %ds, want about %ds", cleared, tc.clearedAt)
			}
		})
	}
}

func TestTrackerIgnoresRepeatedStates(t *testing.T) {
	tr := NewTracker(Settings{After: 10 * time.Second, ClearAfter: 10 * time.Second})
	s := interval(0, true, nil)
	// The same State observed a hundred times is one interval, not a hundred.
	for range 100 {
		if st, changed := tr.Observe(s); changed || st.Uncontained {
			t.Fatalf("flagged from one repeated State: %+v", st)
		}
	}
	if _, changed := tr.Observe(api.State{}); changed {
		t.Error("an empty State changed the status")
	}
}
