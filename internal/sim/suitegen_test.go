package sim

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/lab"
)

func TestGenerateSuiteCaseDeterministic(t *testing.T) {
	for _, seed := range []int64{1, 2, 77, 1 << 40} {
		a, err := GenerateSuiteCase(seed)
		if err != nil {
			t.Fatal(err)
		}
		b, err := GenerateSuiteCase(seed)
		if err != nil {
			t.Fatal(err)
		}
		if a.Describe() != b.Describe() {
			t.Errorf("seed %d drew %q, then %q", seed, a.Describe(), b.Describe())
		}
		if !reflect.DeepEqual(a.Scenario.Tenants, b.Scenario.Tenants) || !reflect.DeepEqual(a.Scenario.Machine, b.Scenario.Machine) ||
			!reflect.DeepEqual(a.Events, b.Events) {
			t.Errorf("seed %d drew two different scenarios", seed)
		}
	}
	// Runs of a suite are drawn from their own seeds: the second run of a
	// suite from seed 1 is the first of a suite from seed 2.
	cases, err := SuiteCases(1, 3)
	if err != nil {
		t.Fatal(err)
	}
	alone, err := GenerateSuiteCase(2)
	if err != nil {
		t.Fatal(err)
	}
	if cases[1].Describe() != alone.Describe() {
		t.Errorf("run 2 of seed 1 is %q, seed 2 alone %q", cases[1].Describe(), alone.Describe())
	}
	if cases[0].Describe() == cases[1].Describe() {
		t.Errorf("seeds 1 and 2 drew the same case %q", cases[0].Describe())
	}
}

// TestGenerateSuiteCaseCoverage draws 200 seeds: every polluter kind,
// timing, placement, victim and bystander shape appears, PMU on and off,
// control runs about one in five, and each case keeps to what was drawn.
func TestGenerateSuiteCaseCoverage(t *testing.T) {
	seen := map[string]int{}
	controls, pmu := 0, 0
	const n = 200
	for seed := int64(1); seed <= n; seed++ {
		c, err := GenerateSuiteCase(seed)
		if err != nil {
			t.Fatal(err)
		}
		seen["victim "+c.Victim]++
		for _, b := range c.Bystanders {
			seen["bystander "+b]++
		}
		if c.PMU {
			pmu++
		}
		checkSuiteCase(t, c)
		if c.Class == lab.ClassControl {
			controls++
			continue
		}
		seen["polluter "+c.Polluter]++
		seen["timing "+c.Timing]++
		seen["placement "+c.Placement]++
	}
	for _, want := range [][]string{prefixed("polluter ", SuitePolluters), prefixed("timing ", SuiteTimings),
		prefixed("placement ", SuitePlacements), prefixed("victim ", SuiteVictims), prefixed("bystander ", SuiteBystanders)} {
		for _, k := range want {
			if seen[k] == 0 {
				t.Errorf("no %s in %d seeds (seen %v)", k, n, seen)
			}
		}
	}
	if controls < n/10 || controls > 3*n/10 {
		t.Errorf("%d control runs of %d, want about one in five", controls, n)
	}
	if pmu < n/8 || pmu > n/2 {
		t.Errorf("%d runs with a PMU of %d, want about a quarter", pmu, n)
	}
}

func prefixed(p string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = p + n
	}
	return out
}

// checkSuiteCase checks that a case's scenario is what its draw says.
func checkSuiteCase(t *testing.T, c *SuiteCase) {
	t.Helper()
	sc := c.Scenario
	m := sc.Machine
	if m.Sockets != 1 || m.CoresPerSocket < 4 || m.CoresPerSocket > 16 {
		t.Errorf("seed %d: machine %d×%d, want one socket of 4-16 cores", c.Seed, m.Sockets, m.CoresPerSocket)
	}
	if on(m.Features.PMU) != c.PMU || on(m.Features.CAT) || on(m.Features.MSR) || on(m.Features.CPUFreq) {
		t.Errorf("seed %d: features %+v, want PMU %v and no other lever than the quota", c.Seed, m.Features, c.PMU)
	}
	if sc.Duration < 20*time.Second || sc.Duration > 40*time.Second {
		t.Errorf("seed %d: duration %s outside 20-40 s", c.Seed, sc.Duration)
	}
	if c.Noise < 0.01 || c.Noise > 0.08 || sc.Noise != c.Noise {
		t.Errorf("seed %d: noise %g (scenario %g), want 0.01-0.08", c.Seed, c.Noise, sc.Noise)
	}
	var victim, polluter *Tenant
	var bystanders []*Tenant
	for _, tn := range sc.Resolved() {
		switch tn.Role {
		case RoleVictim:
			victim = tn
		case RolePolluter:
			polluter = tn
		default:
			bystanders = append(bystanders, tn)
		}
	}
	if victim == nil || len(bystanders) != len(c.Bystanders) || len(bystanders) > 4 {
		t.Errorf("seed %d: victim %v, %d bystanders for %d drawn (at most 4)", c.Seed, victim != nil, len(bystanders), len(c.Bystanders))
		return
	}
	if c.Class == lab.ClassControl {
		if polluter != nil || c.Without != nil || len(c.Events) > 0 {
			t.Errorf("seed %d: a control run with a polluter", c.Seed)
		}
		return
	}
	if polluter == nil {
		t.Errorf("seed %d: no polluter in a %s run", c.Seed, c.Class)
		return
	}
	switch c.Placement {
	case PlaceAlone:
		for _, o := range append([]*Tenant{victim}, bystanders...) {
			if !o.CPUSet.Intersect(polluter.CPUSet).IsEmpty() {
				t.Errorf("seed %d: polluter alone on %s, but %s is on %s", c.Seed, polluter.CPUSet, o.Name, o.CPUSet)
			}
		}
	case PlaceWithVictim:
		if polluter.CPUSet.Intersect(victim.CPUSet).IsEmpty() {
			t.Errorf("seed %d: polluter with the victim on %s, victim on %s", c.Seed, polluter.CPUSet, victim.CPUSet)
		}
	case PlaceWithBystander:
		if !slices.ContainsFunc(bystanders, func(b *Tenant) bool { return !b.CPUSet.Intersect(polluter.CPUSet).IsEmpty() }) ||
			!polluter.CPUSet.Intersect(victim.CPUSet).IsEmpty() {
			t.Errorf("seed %d: polluter with a bystander on %s shares with none, or with the victim", c.Seed, polluter.CPUSet)
		}
	}
	pollutes := func(b Behaviour) bool {
		return b.BusLocks > 0 || b.WorkingSet > float64(sc.Machine.L3Size) || b.LLCRefs >= 1e7
	}
	if !pollutes(polluter.Phases[0]) {
		t.Errorf("seed %d: the %s polluter's first phase pollutes nothing: %+v", c.Seed, c.Polluter, polluter.Phases[0])
	}
	switch c.Timing {
	case TimingLate:
		if polluter.Start < 3*time.Second || polluter.Start > sc.Duration/2 {
			t.Errorf("seed %d: late start %s", c.Seed, polluter.Start)
		}
	case TimingEarlyStop:
		if polluter.Stop < sc.Duration/2 || polluter.Stop > sc.Duration-5*time.Second {
			t.Errorf("seed %d: early stop %s of %s", c.Seed, polluter.Stop, sc.Duration)
		}
	case TimingPause:
		if len(polluter.Phases) != 3 || polluter.Phases[1].CPU != 0 || polluter.Phases[2].CPU != 1 || len(c.Events) != 3 {
			t.Errorf("seed %d: a pause is busy, idle, busy with pause and resume events: %+v %+v", c.Seed, polluter.Phases, c.Events)
		}
	case TimingBursty:
		if c.Period < 5*time.Millisecond || c.Period > 200*time.Millisecond || c.Duty < 0.1 || c.Duty > 0.6 {
			t.Errorf("seed %d: bursty period %s duty %g outside 5-200 ms, 10-60%%", c.Seed, c.Period, c.Duty)
		}
		// On and off in turn, each period long, on for its duty.
		ph := polluter.Phases
		for k := 0; k+2 < len(ph); k += 2 {
			if ph[k].CPU != 1 || ph[k+1].CPU != 0 || ph[k+2].From-ph[k].From != c.Period ||
				!pollutes(ph[k]) || ph[k+1].From-ph[k].From != time.Duration(float64(c.Period)*c.Duty) {
				t.Fatalf("seed %d: bursty phases %d-%d: %+v %+v %+v", c.Seed, k, k+2, ph[k], ph[k+1], ph[k+2])
			}
		}
		if last := ph[len(ph)-1].From; last < sc.Duration-c.Period {
			t.Errorf("seed %d: bursts end at %s of %s", c.Seed, last, sc.Duration)
		}
	}
	if got := c.Events[0]; got.Kind != "start" || got.T != polluter.Start.Seconds() {
		t.Errorf("seed %d: first event %+v, want the polluter's start at %s", c.Seed, got, polluter.Start)
	}
	// Without it: the same tenants, the polluter's CPU use and nothing else.
	w := c.Without.Resolved()
	if len(w) != len(sc.Resolved()) {
		t.Fatalf("seed %d: %d tenants without the pollution, %d with", c.Seed, len(w), len(sc.Resolved()))
	}
	for i, wt := range w {
		if wt.Role != RolePolluter {
			if !reflect.DeepEqual(wt.Phases, sc.Resolved()[i].Phases) {
				t.Errorf("seed %d: %s changed without the pollution", c.Seed, wt.Name)
			}
			continue
		}
		if len(wt.Phases) != len(polluter.Phases) || wt.Start != polluter.Start || wt.Stop != polluter.Stop {
			t.Errorf("seed %d: the CPU-only polluter lives otherwise than the polluter", c.Seed)
		}
		for k, p := range wt.Phases {
			if p.CPU != polluter.Phases[k].CPU || pollutes(p) {
				t.Fatalf("seed %d: CPU-only phase %d %+v against %+v", c.Seed, k, p, polluter.Phases[k])
			}
		}
	}
}
