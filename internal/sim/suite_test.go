package sim

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/lab"
)

// scoreCase is a 10 s run with a victim, a polluter from 2 s to 8 s and a
// bystander; control leaves the polluter out.
func scoreCase(t *testing.T, control bool) *SuiteCase {
	t.Helper()
	y := "name: s\nduration: 10s\nmachine: {cpu: skylakex, sockets: 1, cores_per_socket: 4}\ntenants:\n" +
		"  - {name: v, role: victim, cpus: \"3\"}\n" +
		"  - {name: b, role: bystander, cpus: \"1\"}\n"
	if !control {
		y += "  - {name: p, role: polluter, cpus: \"0\", start: 2s, stop: 8s}\n"
	}
	sc, err := Parse([]byte(y), "score")
	if err != nil {
		t.Fatal(err)
	}
	c := &SuiteCase{Seed: 5, Class: lab.ClassControl, Victim: VictimCache, Scenario: sc, Bystanders: []string{BystanderSteady}}
	if !control {
		c.Class, c.Polluter, c.Timing, c.Placement = lab.ClassPolluter, PolluterBusLocks, TimingEarlyStop, PlaceAlone
		c.Events = []lab.TenantEvent{{T: 2, Tenant: "p", Kind: "start"}, {T: 8, Tenant: "p", Kind: "stop"}}
		c.Without = sc // only its result is read
	}
	return c
}

func action(at float64, tenant, kind string, quota float64) Action {
	return Action{T: at, Tenant: tenant, Kind: kind, Quota: quota}
}

func fp(v float64) *float64 { return &v }

func suiteResults(victimNone, victimCT float64, actions ...Action) *Result {
	return &Result{Results: []PolicyResult{
		{Policy: PolicyNone, VictimSlowdown: fp(victimNone), Actions: []Action{}},
		{Policy: PolicyCrosstalk, VictimSlowdown: fp(victimCT), Actions: actions},
	}}
}

func TestScoreSuiteRun(t *testing.T) {
	without := &Result{Results: []PolicyResult{{Policy: PolicyNone, VictimSlowdown: fp(1.25)}}}
	tests := []struct {
		name    string
		control bool
		actions []Action
		want    lab.RunScore
		verdict string
	}{
		{name: "convicted and released after its stop",
			actions: []Action{action(3, "p", "proof", 0), action(3.1, "p", "proof", 0.5), action(3.5, "p", "throttle", 0.1), action(5, "p", "relax", 0.2), action(8.3, "p", "release", 0)},
			want:    lab.RunScore{Convicted: true, FirstCapSeconds: fp(1.1), ConvictionSeconds: fp(1.5), ReleaseSeconds: fp(0.3)}, verdict: "caught"},
		{name: "proved and acquitted",
			actions: []Action{action(3, "p", "proof", 0.5), action(3.2, "p", "proof-free", 0), action(3.4, "p", "release", 0)},
			want:    lab.RunScore{FirstCapSeconds: fp(1)}, verdict: "missed"},
		{name: "throttled after it stopped is no conviction",
			actions: []Action{action(9, "p", "throttle", 0.1)},
			want:    lab.RunScore{FirstCapSeconds: fp(7)}, verdict: "missed"},
		{name: "innocents proved and convicted",
			actions: []Action{action(4, "b", "proof", 0.5), action(4.2, "b", "proof-free", 0), action(5, "v", "throttle", 0.2), action(6, "v", "release", 0), action(6.5, "p", "throttle", 0.1)},
			want: lab.RunScore{Convicted: true, FirstCapSeconds: fp(4.5), ConvictionSeconds: fp(4.5),
				InnocentsProofCapped: 1, InnocentProofCapSeconds: 0.2, InnocentsConvicted: 1, InnocentConvictedSeconds: 1}, verdict: "caught+false"},
		{name: "control run clean", control: true, actions: []Action{action(4, "b", "proof", 0.5), action(4.5, "b", "release", 0)},
			want: lab.RunScore{InnocentsProofCapped: 1, InnocentProofCapSeconds: 0.5}, verdict: "clean"},
		{name: "control run convicting the bystander to the end", control: true, actions: []Action{action(4, "b", "throttle", 0.5)},
			want: lab.RunScore{InnocentsConvicted: 1, InnocentConvictedSeconds: 6}, verdict: "false-conviction"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := scoreCase(t, tt.control)
			w := without
			if tt.control {
				w = nil
			}
			got := ScoreSuiteRun(c, suiteResults(2, 1.1, tt.actions...), w)
			if got.Error != "" {
				t.Fatal(got.Error)
			}
			if v := got.Verdict(); v != tt.verdict {
				t.Errorf("verdict %s, want %s", v, tt.verdict)
			}
			wantClass := lab.ClassPolluter
			if tt.control {
				wantClass = lab.ClassControl
			}
			if got.Class != wantClass || got.Convicted != tt.want.Convicted || !eqOpt(got.FirstCapSeconds, tt.want.FirstCapSeconds) ||
				!eqOpt(got.ConvictionSeconds, tt.want.ConvictionSeconds) || !eqOpt(got.ReleaseSeconds, tt.want.ReleaseSeconds) {
				t.Errorf("class %s convicted %v cap %v convict %v release %v, want %s %v %v %v %v", got.Class, got.Convicted,
					show(got.FirstCapSeconds), show(got.ConvictionSeconds), show(got.ReleaseSeconds), wantClass, tt.want.Convicted,
					show(tt.want.FirstCapSeconds), show(tt.want.ConvictionSeconds), show(tt.want.ReleaseSeconds))
			}
			if got.InnocentsProofCapped != tt.want.InnocentsProofCapped || !near(got.InnocentProofCapSeconds, tt.want.InnocentProofCapSeconds) ||
				got.InnocentsConvicted != tt.want.InnocentsConvicted || !near(got.InnocentConvictedSeconds, tt.want.InnocentConvictedSeconds) {
				t.Errorf("innocents proved %d (%gs) convicted %d (%gs), want %d (%gs) %d (%gs)", got.InnocentsProofCapped, got.InnocentProofCapSeconds,
					got.InnocentsConvicted, got.InnocentConvictedSeconds, tt.want.InnocentsProofCapped, tt.want.InnocentProofCapSeconds,
					tt.want.InnocentsConvicted, tt.want.InnocentConvictedSeconds)
			}
			if !eqOpt(got.VictimSlowdown[PolicyNone], fp(2)) || !eqOpt(got.VictimSlowdown[PolicyCrosstalk], fp(1.1)) {
				t.Errorf("victim slowdown %v", got.VictimSlowdown)
			}
			// Harm: 2× under none against 1.25× with a CPU-only polluter.
			if tt.control {
				if got.Harm != nil || got.Harmful {
					t.Errorf("a control run with harm %v", show(got.Harm))
				}
			} else if !eqOpt(got.Harm, fp(1.6)) || !got.Harmful {
				t.Errorf("harm %v harmful %v, want 1.6 and harmful", show(got.Harm), got.Harmful)
			}
		})
	}

	c := scoreCase(t, false)
	noCT := &Result{Results: []PolicyResult{{Policy: PolicyNone, VictimSlowdown: fp(2)}}}
	if got := ScoreSuiteRun(c, noCT, without); got.Error == "" || got.Verdict() != "error" {
		t.Errorf("a result without the crosstalk policy scored %+v", got)
	}
}

func eqOpt(a, b *float64) bool {
	if a == nil || b == nil {
		return a == b
	}
	return near(*a, *b)
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func show(v *float64) any {
	if v == nil {
		return "nil"
	}
	return *v
}

func TestSuiteSummarizeBreakdowns(t *testing.T) {
	score := func(class, polluter, timing string, pmu, convicted, falseConv bool) SuiteScore {
		s := SuiteScore{RunScore: lab.RunScore{Class: class, Polluter: polluter, Timing: timing, Convicted: convicted}, PMU: pmu}
		if class == lab.ClassPolluter {
			s.Placement = PlaceAlone
		}
		if falseConv {
			s.InnocentsConvicted = 1
		}
		return s
	}
	r := &SuiteResult{Runs: []SuiteScore{
		score(lab.ClassPolluter, PolluterBusLocks, TimingWhole, true, true, false),
		score(lab.ClassPolluter, PolluterBusLocks, TimingBursty, false, false, false),
		score(lab.ClassPolluter, PolluterMemBW, TimingWhole, false, true, true),
		score(lab.ClassControl, "", "", true, false, true),
		score(lab.ClassControl, "", "", false, false, false),
	}}
	r.Summarize()
	check := func(what string, a lab.Aggregate, runs int, recall, falseRate *float64) {
		t.Helper()
		if a.Runs != runs || !eqOpt(a.Recall, recall) || !eqOpt(a.FalseConvictionRate, falseRate) {
			t.Errorf("%s: %d runs recall %v false %v, want %d %v %v", what, a.Runs, show(a.Recall), show(a.FalseConvictionRate), runs, show(recall), show(falseRate))
		}
		if recall != nil && (a.RecallInterval == nil || a.RecallInterval.Low > *recall || a.RecallInterval.High < *recall) {
			t.Errorf("%s: recall %v outside its interval %+v", what, *recall, a.RecallInterval)
		}
	}
	check("total", r.Total, 5, fp(2.0/3), fp(2.0/5))
	check("control", r.ByClass[lab.ClassControl], 2, nil, fp(0.5))
	check("buslocks", r.Breakdowns[ByPolluter][PolluterBusLocks], 2, fp(0.5), fp(0))
	check("membw", r.Breakdowns[ByPolluter][PolluterMemBW], 1, fp(1), fp(1))
	check("whole", r.Breakdowns[ByTiming][TimingWhole], 2, fp(1), fp(0.5))
	check("alone", r.Breakdowns[ByPlacement][PlaceAlone], 3, fp(2.0/3), fp(1.0/3))
	// The PMU rows count control runs too: a false conviction is one there.
	check("pmu on", r.Breakdowns[ByPMU]["on"], 2, fp(1), fp(0.5))
	check("pmu off", r.Breakdowns[ByPMU]["off"], 3, fp(0.5), fp(1.0/3))
	if _, ok := r.Breakdowns[ByPolluter][PolluterLLC]; ok {
		t.Error("a breakdown row for a polluter kind no run drew")
	}
}

// TestRunSuiteShort runs a few generated scenarios for real: a strong
// split-lock storm alone on its CPU with a PMU-less VM's probes (seed 79),
// a control run (seed 1) and a late LLC thrasher (seed 10).
func TestRunSuiteShort(t *testing.T) {
	var cases []*SuiteCase
	for _, seed := range []int64{79, 1, 10} {
		c, err := GenerateSuiteCase(seed)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, c)
	}
	if cases[0].Polluter != PolluterBusLocks || cases[0].Placement != PlaceAlone || cases[0].PMU || cases[1].Class != lab.ClassControl {
		t.Fatalf("the seeds no longer draw what this test is about: %s; %s", cases[0].Describe(), cases[1].Describe())
	}
	var reported []string
	res, err := RunSuite(context.Background(), cases, SuiteOptions{Report: func(s SuiteScore) { reported = append(reported, s.Name) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 3 || strings.Join(reported, ",") != "gen-79,gen-1,gen-10" || res.Seed != 79 {
		t.Fatalf("%d runs, reported %v, seed %d", len(res.Runs), reported, res.Seed)
	}
	for _, s := range res.Runs {
		if s.Error != "" {
			t.Errorf("%s: %s", s.Name, s.Error)
		}
		if s.VictimSlowdown[PolicyNone] == nil || s.VictimSlowdown[PolicyCrosstalk] == nil {
			t.Errorf("%s: victim slowdown %v", s.Name, s.VictimSlowdown)
		}
	}
	storm := res.Runs[0]
	if !storm.Convicted || storm.InnocentsConvicted > 0 || storm.Harm == nil || !storm.Harmful {
		t.Errorf("the storm run: %s, harm %v", SuiteRunLine(storm), show(storm.Harm))
	} else if *storm.ConvictionSeconds < *storm.FirstCapSeconds || *storm.VictimSlowdown[PolicyCrosstalk] >= *storm.VictimSlowdown[PolicyNone] {
		t.Errorf("the storm run: convicted before its first cap, or the victim no better off: %s", SuiteRunLine(storm))
	}
	if ctl := res.Runs[1]; ctl.Class != lab.ClassControl || ctl.Harm != nil || ctl.InnocentsConvicted > 0 {
		t.Errorf("the control run: %s", SuiteRunLine(ctl))
	}
	if res.Total.Runs != 3 || res.Total.PolluterRuns != 2 || res.ByClass[lab.ClassControl].Runs != 1 {
		t.Errorf("totals %+v", res.Total)
	}
	wantSim := 0.0
	for _, c := range cases {
		wantSim += c.Scenario.Duration.Seconds()
	}
	if res.SimulatedSeconds != wantSim {
		t.Errorf("simulated %gs, want %gs", res.SimulatedSeconds, wantSim)
	}

	var b strings.Builder
	if err := WriteSuiteText(&b, res, true); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"gen-79    caught", "gen-1     clean", "3 simulated runs from seed 79", "RECALL (95%)",
		"polluter buslocks", "pmu off", "VICTIM SLOWDOWN", "simulated: the production agent"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
}
