package lab

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/agent"
)

// scoreScenario is an 8 s phase with a victim, a polluter and a bystander;
// extra is YAML appended to the polluter's line (start, stop, pause…).
func scoreScenario(t *testing.T, top, polluter string) *Scenario {
	t.Helper()
	y := "name: s\nphase: 8s\n" + top + "tenants:\n" +
		"  - {name: v, role: victim, load: chase, cpus: \"1\"}\n"
	if polluter != "-" {
		y += "  - {name: p, role: polluter, load: splitlock, cpus: \"0\"" + polluter + "}\n"
	}
	y += "  - {name: b, role: bystander, load: cpu, cpus: \"0\"}\n"
	s, err := Parse([]byte(y), "score")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ev(tm float64, tenant, kind string) TenantEvent {
	return TenantEvent{T: tm, Tenant: tenant, Kind: kind}
}

func act(tm float64, tenant, kind string, quota float64) Action {
	return Action{T: tm, Tenant: tenant, Kind: kind, Quota: quota}
}

// survey is a cap of the agent's start-up survey.
func survey(tm float64, tenant string, quota float64) Action {
	return Action{T: tm, Tenant: tenant, Kind: "proof", Detail: agent.SurveyCapReason, Quota: quota}
}

func fp(v float64) *float64 { return &v }

func TestScoreRun(t *testing.T) {
	pollStart := []TenantEvent{ev(0, "v", "start"), ev(0, "b", "start"), ev(1, "p", "start"), ev(8, "p", "stop")}
	tests := []struct {
		name        string
		top, pol    string
		policyStart float64
		events      []TenantEvent
		actions     []Action
		want        RunScore
		verdict     string
	}{
		{name: "convicted", pol: ", start: 1s", events: pollStart,
			actions: []Action{act(2, "p", "proof", 0.5), act(2.5, "p", "throttle", 0.1), act(4, "p", "relax", 0.2)},
			want:    RunScore{Class: ClassPolluter, Convicted: true, FirstCapSeconds: fp(1), ConvictionSeconds: fp(1.5)}, verdict: "caught"},
		{name: "acquitted", pol: ", start: 1s", events: pollStart,
			actions: []Action{act(2, "p", "proof", 0.5), act(2.3, "p", "release", 0)},
			want:    RunScore{Class: ClassPolluter, FirstCapSeconds: fp(1)}, verdict: "missed"},
		{name: "innocent convicted", pol: ", start: 1s", events: pollStart,
			actions: []Action{act(3, "b", "throttle", 0.1), act(5, "b", "release", 0), act(6, "p", "throttle", 0.1)},
			want: RunScore{Class: ClassPolluter, Convicted: true, FirstCapSeconds: fp(5), ConvictionSeconds: fp(5),
				InnocentsConvicted: 1, InnocentConvictedSeconds: 2}, verdict: "caught+false"},
		{name: "proof caps until release or phase end", pol: ", start: 1s", events: pollStart,
			actions: []Action{act(1, "v", "proof", 0.5), act(1.25, "v", "release", 0), act(2, "b", "proof", 0.5)},
			want:    RunScore{Class: ClassPolluter, InnocentsProofCapped: 2, InnocentProofCapSeconds: 6.25}, verdict: "missed"},
		{name: "innocent proved then convicted", pol: ", start: 1s", events: pollStart,
			actions: []Action{act(1, "v", "proof", 0.5), act(1.5, "v", "throttle", 0.1), act(2, "v", "release", 0)},
			want: RunScore{Class: ClassPolluter, InnocentsProofCapped: 1, InnocentProofCapSeconds: 0.5,
				InnocentsConvicted: 1, InnocentConvictedSeconds: 0.5}, verdict: "missed"},
		{name: "already running", top: "policy_start: 2s\n", pol: "", policyStart: 2,
			events:  []TenantEvent{ev(0, "v", "start"), ev(0, "p", "start"), ev(8, "p", "stop")},
			actions: []Action{act(2.5, "p", "proof", 0.5), act(3, "p", "throttle", 0.1)},
			want:    RunScore{Class: ClassPolluter, AlreadyRunning: true, Convicted: true, FirstCapSeconds: fp(0.5), ConvictionSeconds: fp(1)}, verdict: "caught"},
		// The start-up survey caps every busy tenant at once: no reaction
		// to the polluter, but a cost to each innocent.
		{name: "the start-up survey is no action against the polluter", top: "policy_start: 2s\n", pol: "", policyStart: 2,
			events:  []TenantEvent{ev(0, "v", "start"), ev(0, "b", "start"), ev(0, "p", "start"), ev(8, "p", "stop")},
			actions: []Action{survey(2.1, "p", 0.002), survey(2.1, "v", 0.002), act(2.11, "p", "proof-free", 0), act(2.11, "v", "proof-free", 0)},
			want:    RunScore{Class: ClassPolluter, AlreadyRunning: true, InnocentsProofCapped: 1, InnocentProofCapSeconds: 0.01}, verdict: "missed"},
		{name: "a proof after the start-up survey is the first cap", top: "policy_start: 2s\n", pol: "", policyStart: 2,
			events:  []TenantEvent{ev(0, "v", "start"), ev(0, "b", "start"), ev(0, "p", "start"), ev(8, "p", "stop")},
			actions: []Action{survey(2.1, "p", 0.002), act(2.11, "p", "proof-free", 0), act(3, "p", "proof", 0.002), act(3.4, "p", "throttle", 0.1)},
			want:    RunScore{Class: ClassPolluter, AlreadyRunning: true, Convicted: true, FirstCapSeconds: fp(1), ConvictionSeconds: fp(1.4)}, verdict: "caught"},
		{name: "released after an early stop", pol: ", start: 1s, stop: 5s",
			events:  []TenantEvent{ev(1, "p", "start"), ev(5, "p", "stop")},
			actions: []Action{act(2, "p", "throttle", 0.1), act(5.4, "p", "release", 0)},
			want:    RunScore{Class: ClassPolluter, Convicted: true, FirstCapSeconds: fp(1), ConvictionSeconds: fp(1), ReleaseSeconds: fp(0.4)}, verdict: "caught"},
		{name: "throttled just after a pause counts, release from the pause", pol: ", pause: 3s, resume: 5s",
			events:  []TenantEvent{ev(0, "p", "start"), ev(3, "p", "pause"), ev(5, "p", "resume"), ev(8, "p", "stop")},
			actions: []Action{act(3.25, "p", "throttle", 0.1), act(3.75, "p", "release", 0)},
			want:    RunScore{Class: ClassPolluter, Convicted: true, FirstCapSeconds: fp(3.25), ConvictionSeconds: fp(3.25), ReleaseSeconds: fp(0.75)}, verdict: "caught"},
		{name: "throttled while paused is no conviction", pol: ", pause: 3s, resume: 6s",
			events:  []TenantEvent{ev(0, "p", "start"), ev(3, "p", "pause"), ev(6, "p", "resume"), ev(8, "p", "stop")},
			actions: []Action{act(4.5, "p", "throttle", 0.1)},
			want:    RunScore{Class: ClassPolluter, FirstCapSeconds: fp(4.5)}, verdict: "missed"},
		// A process on a busy CPU begins its work tenths of a second after
		// it starts: the reaction counts from when it said it began.
		{name: "counted from its onset", pol: ", start: 1s",
			events:  []TenantEvent{ev(1, "p", "start"), ev(1.3, "p", "onset"), ev(8, "p", "stop")},
			actions: []Action{act(1.5, "p", "proof", 0.5), act(2, "p", "throttle", 0.1)},
			want:    RunScore{Class: ClassPolluter, Convicted: true, FirstCapSeconds: fp(0.2), FirstCapFromProcessSeconds: fp(0.5), ConvictionSeconds: fp(0.7)}, verdict: "caught"},
		{name: "a process started before the agent whose work began after it", top: "policy_start: 2s\n", pol: "", policyStart: 2,
			events:  []TenantEvent{ev(0, "p", "start"), ev(2.5, "p", "onset"), ev(8, "p", "stop")},
			actions: []Action{act(2.7, "p", "proof", 0.5), act(3, "p", "throttle", 0.1)},
			want:    RunScore{Class: ClassPolluter, Convicted: true, FirstCapSeconds: fp(0.2), FirstCapFromProcessSeconds: fp(0.7), ConvictionSeconds: fp(0.5)}, verdict: "caught"},
		{name: "control run clean", pol: "-", events: []TenantEvent{ev(0, "v", "start")},
			actions: []Action{act(2, "b", "proof", 0.5), act(2.5, "b", "release", 0)},
			want:    RunScore{Class: ClassControl, InnocentsProofCapped: 1, InnocentProofCapSeconds: 0.5}, verdict: "clean"},
		{name: "control run with a false conviction", pol: "-", events: []TenantEvent{ev(0, "v", "start")},
			actions: []Action{act(2, "b", "throttle", 0.1)},
			want:    RunScore{Class: ClassControl, InnocentsConvicted: 1, InnocentConvictedSeconds: 6}, verdict: "false-conviction"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := scoreScenario(t, tc.top, tc.pol)
			res := &Result{Victim: "v", Solo: map[string]Solo{"v": {Value: fp(10), Direction: "lower"}},
				Results: []PolicyResult{{Policy: "crosstalk", Actions: tc.actions, PolicyStartSeconds: tc.policyStart,
					Timeline: Timeline{Events: tc.events}}}}
			got := ScoreRun(s, res)
			check := func(what string, g, w any) {
				t.Helper()
				if gp, ok := g.(*float64); ok {
					wp := w.(*float64)
					if (gp == nil) != (wp == nil) || gp != nil && math.Abs(*gp-*wp) > 1e-9 {
						t.Errorf("%s = %v, want %v", what, deref(gp), deref(wp))
					}
					return
				}
				if gf, ok := g.(float64); ok {
					if math.Abs(gf-w.(float64)) > 1e-9 {
						t.Errorf("%s = %v, want %v", what, g, w)
					}
					return
				}
				if g != w {
					t.Errorf("%s = %v, want %v", what, g, w)
				}
			}
			w := tc.want
			check("class", got.Class, w.Class)
			check("error", got.Error, "")
			check("convicted", got.Convicted, w.Convicted)
			check("already running", got.AlreadyRunning, w.AlreadyRunning)
			check("first cap", got.FirstCapSeconds, w.FirstCapSeconds)
			fromProcess := w.FirstCapFromProcessSeconds
			if fromProcess == nil {
				fromProcess = w.FirstCapSeconds // no onset line: the same
			}
			check("first cap from the process start", got.FirstCapFromProcessSeconds, fromProcess)
			check("conviction", got.ConvictionSeconds, w.ConvictionSeconds)
			check("release", got.ReleaseSeconds, w.ReleaseSeconds)
			check("innocents proof capped", got.InnocentsProofCapped, w.InnocentsProofCapped)
			check("innocent proof cap seconds", got.InnocentProofCapSeconds, w.InnocentProofCapSeconds)
			check("innocents convicted", got.InnocentsConvicted, w.InnocentsConvicted)
			check("innocent convicted seconds", got.InnocentConvictedSeconds, w.InnocentConvictedSeconds)
			check("verdict", got.Verdict(), tc.verdict)
		})
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// The victim's slowdown after the agent's first action against the
// polluter is read from each policy's timeline from that moment on.
// In a scenario with several polluters every one of them is guilty: the run
// counts as caught only when each that ran was convicted, its reaction
// times are the slowest polluter's, and the victim's slowdown after the
// first action counts from the first action against any of them.
func TestScoreRunWithSeveralPolluters(t *testing.T) {
	s, err := Parse([]byte("name: two\nphase: 8s\ntenants:\n"+
		"  - {name: v, role: victim, load: chase, cpus: \"1\"}\n"+
		"  - {name: p, role: polluter, load: splitlock, cpus: \"0\", start: 1s}\n"+
		"  - {name: q, role: polluter, load: splitlock, cpus: \"1\", start: 3s, stop: 6s}\n"+
		"  - {name: b, role: bystander, load: cpu, cpus: \"0\"}\n"), "two")
	if err != nil {
		t.Fatal(err)
	}
	events := []TenantEvent{ev(0, "v", "start"), ev(0, "b", "start"), ev(1, "p", "start"), ev(8, "p", "stop"),
		ev(3, "q", "start"), ev(6, "q", "stop")}
	tests := []struct {
		name                  string
		actions               []Action
		convicted             bool
		caught                int
		firstCap, convict, rl *float64
		after                 float64 // phase time the slowdown after the first action counts from
		line                  string
	}{
		{name: "both convicted",
			actions: []Action{act(1.2, "p", "proof", 0.5), act(1.6, "p", "throttle", 0.1),
				act(3.5, "q", "proof", 0.5), act(4.5, "q", "throttle", 0.1), act(6.25, "q", "release", 0)},
			convicted: true, caught: 2, firstCap: fp(0.5), convict: fp(1.5), rl: fp(0.25), after: 1.2,
			line: "caught           2 of 2 polluters convicted, cap 0.50s convict 1.50s release 0.25s"},
		{name: "one missed",
			actions:   []Action{act(1.2, "p", "proof", 0.5), act(1.6, "p", "throttle", 0.1), act(3.5, "q", "proof", 0.5), act(3.8, "q", "release", 0)},
			convicted: false, caught: 1, firstCap: fp(0.5), after: 1.2,
			line: "missed           1 of 2 polluters convicted, cap 0.50s convict – release –"},
		{name: "one never acted on",
			actions:   []Action{act(3.2, "q", "throttle", 0.1)},
			convicted: false, caught: 1, after: 3.2,
			line: "missed           1 of 2 polluters convicted, cap – convict – release –"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var samples []Sample // every half second, slower and slower
			for i := range 8 {
				samples = append(samples, Sample{T: 0.5 * float64(i+1), Value: 10 + 5*float64(i)})
			}
			res := &Result{Victim: "v", Solo: map[string]Solo{"v": {Value: fp(10), Direction: "lower"}},
				Results: []PolicyResult{{Policy: "crosstalk", Actions: tc.actions,
					Timeline: Timeline{Events: events, Victim: samples}}}}
			got := ScoreRun(s, res)
			got.Repetition = 1
			SuiteCase{Scenario: s}.describe(&got)
			if got.Convicted != tc.convicted || got.Polluters != 2 || got.PollutersConvicted != tc.caught {
				t.Errorf("convicted %v, %d of %d polluters, want %v, %d of 2", got.Convicted, got.PollutersConvicted, got.Polluters, tc.convicted, tc.caught)
			}
			for _, c := range []struct {
				what      string
				got, want *float64
			}{{"first cap", got.FirstCapSeconds, tc.firstCap}, {"conviction", got.ConvictionSeconds, tc.convict}, {"release", got.ReleaseSeconds, tc.rl}} {
				if (c.got == nil) != (c.want == nil) || c.got != nil && math.Abs(*c.got-*c.want) > 1e-9 {
					t.Errorf("%s = %v, want %v", c.what, deref(c.got), deref(c.want))
				}
			}
			var want float64 // the mean slowdown of the windows that begin at tc.after or later
			var n int
			for _, x := range samples {
				if begin := x.T - 0.5; begin >= tc.after {
					want += x.Value / 10
					n++
				}
			}
			if a := got.VictimSlowdownAfter["crosstalk"]; a == nil || math.Abs(*a-want/float64(n)) > 1e-9 {
				t.Errorf("slowdown after the first action = %v, want %v", deref(a), want/float64(n))
			}
			if line := suiteRunLine(got); !strings.HasPrefix(line, "two        splitlock+splitlock vs chase ") || !strings.Contains(line, tc.line) {
				t.Errorf("line %q, want it to name both polluters and hold %q", line, tc.line)
			}
		})
	}
}

func TestScoreVictimSlowdownAfterFirstAction(t *testing.T) {
	s := scoreScenario(t, "", ", start: 1s")
	timeline := func(before, after float64) []Sample {
		var out []Sample
		for i := range 8 {
			v := before
			if i >= 3 {
				v = after
			}
			out = append(out, Sample{T: float64(i), Value: v})
		}
		return out
	}
	events := []TenantEvent{ev(1, "p", "start"), ev(8, "p", "stop")}
	res := &Result{Victim: "v", Solo: map[string]Solo{"v": {Value: fp(10), Direction: "lower"}},
		Results: []PolicyResult{
			{Policy: "none", VictimSlowdown: fp(5), Timeline: Timeline{Victim: timeline(50, 50), Events: events}},
			{Policy: "crosstalk", VictimSlowdown: fp(2.5), Actions: []Action{act(3, "p", "proof", 0.5)},
				Timeline: Timeline{Victim: timeline(50, 12), Events: events}},
		}}
	got := ScoreRun(s, res)
	want := map[string][2]float64{"none": {5, 5}, "crosstalk": {2.5, 1.2}}
	for p, w := range want {
		if v := got.VictimSlowdown[p]; v == nil || *v != w[0] {
			t.Errorf("%s whole-phase slowdown = %v, want %v", p, deref(v), w[0])
		}
		if v := got.VictimSlowdownAfter[p]; v == nil || math.Abs(*v-w[1]) > 1e-9 {
			t.Errorf("%s slowdown after first action = %v, want %v", p, deref(v), w[1])
		}
	}
	// The harm: the none policy's slowdown over the one without the
	// polluter.
	if got.Harm != nil || got.Harmful {
		t.Errorf("harm %v without a phase without the polluter", deref(got.Harm))
	}
	for _, c := range []struct {
		without float64
		harmful bool
	}{{2, true}, {4.5, false}} {
		res.VictimSlowdownWithoutPolluter = fp(c.without)
		got = ScoreRun(s, res)
		if got.Harm == nil || math.Abs(*got.Harm-5/c.without) > 1e-9 || got.Harmful != c.harmful {
			t.Errorf("without the polluter %v: harm %v harmful %v, want %v %v", c.without, deref(got.Harm), got.Harmful, 5/c.without, c.harmful)
		}
	}
	// Where the polluter shares the victim's CPUs, a cpu load in its place
	// decides: harm beyond its CPU use, whatever the harm.
	res.VictimSlowdownWithoutPolluter = fp(2)
	for _, c := range []struct {
		standIn float64
		harmful bool
	}{{4.5, false}, {2, true}} {
		res.VictimSlowdownCPUStandIn = fp(c.standIn)
		got = ScoreRun(s, res)
		if got.HarmBeyondCPU == nil || math.Abs(*got.HarmBeyondCPU-5/c.standIn) > 1e-9 || got.Harmful != c.harmful ||
			got.Harm == nil || math.Abs(*got.Harm-2.5) > 1e-9 {
			t.Errorf("cpu load in its place %v: harm %v beyond CPU %v harmful %v, want 2.5 %v %v",
				c.standIn, deref(got.Harm), deref(got.HarmBeyondCPU), got.Harmful, 5/c.standIn, c.harmful)
		}
	}
	if got.VictimSlowdownWithoutPolluter == nil || *got.VictimSlowdownWithoutPolluter != 2 {
		t.Errorf("victim without the polluter %v, want 2", deref(got.VictimSlowdownWithoutPolluter))
	}
	res.VictimSlowdownCPUStandIn = nil
	// Without a policy "crosstalk" there is nothing to score.
	res.Results = res.Results[:1]
	if sc := ScoreRun(s, res); sc.Error == "" {
		t.Error("scored a run without the crosstalk policy")
	}
}

// After the first action, a victim whose metric is a time per operation
// (chase) is measured as its whole phase is: the samples weighted by the
// operations each did, so a slow window of few operations counts for
// them, not for a quarter of the total. Another metric (server's p99), or
// samples without operations (a program's metric), take the plain mean.
func TestScoreVictimSlowdownAfterWeighsPerOpMetrics(t *testing.T) {
	// Windows of 0.25 s: one at 40 ns an access, three at 10 ns.
	window := func(ns float64, ops bool) Sample {
		s := Sample{Value: ns}
		if ops {
			s.Ops = uint64(0.25e9 / ns)
		}
		return s
	}
	for _, tc := range []struct {
		name, victim string
		ops          bool
		want         float64
	}{
		// 1 s of busy time over 6.25M + 3×25M accesses: 12.31 ns.
		{"chase, weighted", "chase", true, 1e9 / (6.25e6 + 75e6) / 10},
		{"chase, no operations known", "chase", false, 1.75},
		{"server, plain mean", "server", true, 1.75},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := scoreScenario(t, "", ", start: 1s")
			s.Tenants[0].Load = tc.victim
			var tl []Sample
			for i, ns := range []float64{50, 50, 40, 10, 10, 10} {
				w := window(ns, tc.ops)
				w.T = 1 + 0.25*float64(i)
				tl = append(tl, w)
			}
			events := []TenantEvent{ev(1, "p", "start"), ev(8, "p", "stop")}
			res := &Result{Victim: "v", Solo: map[string]Solo{"v": {Value: fp(10), Direction: "lower"}},
				Results: []PolicyResult{{Policy: "crosstalk", VictimSlowdown: fp(2), Actions: []Action{act(1.25, "p", "proof", 0.5)},
					Timeline: Timeline{Victim: tl, Events: events}}}}
			got := ScoreRun(s, res).VictimSlowdownAfter["crosstalk"]
			if got == nil || math.Abs(*got-tc.want) > 1e-9 {
				t.Errorf("slowdown after first action = %v, want %.4f", deref(got), tc.want)
			}
		})
	}
}

// The window a first action falls in began before it: left out, whichever
// part of it came after. The victim's first window begins at its start.
func TestScoreVictimSlowdownAfterLeavesOutTheWindowOfTheAction(t *testing.T) {
	// The victim starts at 0.5 s; windows end every 0.25 s from 0.75 s.
	var tl []Sample
	for i, ns := range []float64{50, 50, 50, 10, 10, 10} {
		tl = append(tl, Sample{T: 0.75 + 0.25*float64(i), Value: ns})
	}
	for _, tc := range []struct {
		name   string
		action float64
		want   float64
	}{
		{"at the victim's start", 0.5, (3*50 + 3*10) / 6.0 / 10},
		{"in the first window", 0.6, (2*50 + 3*10) / 5.0 / 10},
		{"at a window's end", 1.25, 1},
		{"just after a window's end", 1.26, 1},
		{"in the last window", 1.9, math.NaN()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := scoreScenario(t, "", ", start: 1s")
			events := []TenantEvent{ev(0.5, "v", "start"), ev(0.5, "p", "start"), ev(8, "p", "stop")}
			res := &Result{Victim: "v", Solo: map[string]Solo{"v": {Value: fp(10), Direction: "lower"}},
				Results: []PolicyResult{{Policy: "crosstalk", VictimSlowdown: fp(2), Actions: []Action{act(tc.action, "p", "proof", 0.1)},
					Timeline: Timeline{Victim: tl, Events: events}}}}
			got := ScoreRun(s, res).VictimSlowdownAfter["crosstalk"]
			if math.IsNaN(tc.want) {
				if got != nil {
					t.Errorf("slowdown after first action = %v, want none (no window begins after it)", *got)
				}
				return
			}
			if got == nil || math.Abs(*got-tc.want) > 1e-9 {
				t.Errorf("slowdown after first action = %v, want %.4f", deref(got), tc.want)
			}
		})
	}
}

func TestDistAndSummarize(t *testing.T) {
	var twenty []float64
	for i := 20; i >= 1; i-- {
		twenty = append(twenty, float64(i))
	}
	dists := []struct {
		vals        []float64
		median, p95 float64
	}{
		{[]float64{3}, 3, 3},
		{[]float64{4, 1, 3, 2}, 2.5, 4},
		{twenty, 10.5, 19},
	}
	for _, d := range dists {
		got := distOf(d.vals)
		if got.N != len(d.vals) || *got.Median != d.median || *got.P95 != d.p95 {
			t.Errorf("distOf(%v) = n %d median %v p95 %v, want %v %v", d.vals, got.N, *got.Median, *got.P95, d.median, d.p95)
		}
	}
	if d := distOf(nil); d.Median != nil || d.P95 != nil || d.N != 0 {
		t.Errorf("empty dist = %+v", d)
	}

	runs := []RunScore{
		{Class: ClassPolluter, Harmful: true, Convicted: true, FirstCapSeconds: fp(1), ConvictionSeconds: fp(2), ReleaseSeconds: fp(0.5), InnocentProofCapSeconds: 0.2,
			VictimSlowdown: map[string]*float64{"none": fp(4), "crosstalk": fp(2)}, VictimSlowdownAfter: map[string]*float64{"none": fp(5), "crosstalk": fp(1)}},
		{Class: ClassPolluter, Convicted: true, FirstCapSeconds: fp(3), ConvictionSeconds: fp(4), InnocentProofCapSeconds: 0.4, InnocentsConvicted: 1,
			VictimSlowdown: map[string]*float64{"none": fp(6), "crosstalk": fp(3)}, VictimSlowdownAfter: map[string]*float64{"none": fp(7), "crosstalk": fp(2)}},
		{Class: ClassPolluter, Harmful: true, FirstCapSeconds: fp(2), InnocentProofCapSeconds: 0,
			VictimSlowdown: map[string]*float64{"none": fp(8), "crosstalk": nil}},
		{Class: ClassControl, InnocentProofCapSeconds: 1,
			VictimSlowdown: map[string]*float64{"none": fp(1), "crosstalk": fp(1.1)}},
		{Class: ClassControl, Error: "tenant failed"},
	}
	a := Summarize(runs)
	if a.Runs != 4 || a.Errors != 1 || a.PolluterRuns != 3 || a.ControlRuns != 1 {
		t.Errorf("counts = %+v", a)
	}
	if *a.Recall != 2.0/3 || *a.FalseConvictionRate != 0.25 {
		t.Errorf("recall %v, false-conviction rate %v; want 2/3 and 1/4", *a.Recall, *a.FalseConvictionRate)
	}
	for _, d := range []struct {
		name        string
		got         Dist
		n           int
		median, p95 float64
	}{
		{"innocent proof cap", a.InnocentProofCapSeconds, 4, 0.30000000000000004, 1},
		{"first cap", a.FirstCap, 3, 2, 3},
		{"conviction", a.Conviction, 2, 3, 4},
		{"release", a.Release, 1, 0.5, 0.5},
		{"slowdown none", a.VictimSlowdown["none"], 4, 5, 8},
		{"slowdown crosstalk", a.VictimSlowdown["crosstalk"], 3, 2, 3},
		{"after none", a.VictimSlowdownAfter["none"], 2, 6, 7},
	} {
		if d.got.N != d.n || d.got.Median == nil || math.Abs(*d.got.Median-d.median) > 1e-9 || *d.got.P95 != d.p95 {
			t.Errorf("%s = n %d median %v p95 %v, want %d %v %v", d.name, d.got.N, deref(d.got.Median), deref(d.got.P95), d.n, d.median, d.p95)
		}
	}
	sr := &SuiteResult{Policies: []string{"none", "crosstalk"}, Runs: runs}
	sr.Summarize()
	if p := sr.ByClass[ClassPolluter]; p.Runs != 3 || *p.Recall != 2.0/3 || *p.FalseConvictionRate != 1.0/3 {
		t.Errorf("polluter class = %+v", p)
	}
	if h := sr.ByClass[ClassHarmful]; h.Runs != 2 || *h.Recall != 0.5 {
		t.Errorf("harmful class = %+v", h)
	}
	if c := sr.ByClass[ClassControl]; c.Runs != 1 || c.Errors != 1 || c.Recall != nil || *c.FalseConvictionRate != 0 {
		t.Errorf("control class = %+v", c)
	}
}

func TestSuiteTextAndJSON(t *testing.T) {
	seed := int64(7)
	sr := &SuiteResult{Seed: 7, Policies: []string{"none", "crosstalk"}, Runs: []RunScore{
		{Name: "gen-7", Repetition: 1, Seed: &seed, Class: ClassPolluter, Victim: "chase-4MiB", Polluter: "splitlock", Timing: TimingBeforeAgent, Placement: PlaceAlone,
			AlreadyRunning: true, Convicted: true, FirstCapSeconds: fp(0.8), ConvictionSeconds: fp(1.2), InnocentsProofCapped: 1, InnocentProofCapSeconds: 0.25,
			Harm: fp(3), HarmBeyondCPU: fp(1.5), Harmful: true, VictimSlowdownWithoutPolluter: fp(1.06),
			VictimSlowdown: map[string]*float64{"none": fp(6), "crosstalk": fp(1.5)}, VictimSlowdownAfter: map[string]*float64{"none": fp(7), "crosstalk": fp(1.1)}},
		{Name: "gen-8", Repetition: 1, Class: ClassControl, Timing: TimingWhole, Victim: "server", InnocentsConvicted: 1, InnocentConvictedSeconds: 3,
			VictimSlowdown: map[string]*float64{"none": fp(1), "crosstalk": fp(1.2)}},
		{Name: "gen-9", Repetition: 2, Class: ClassPolluter, Error: "phase r1-none: tenant victim failed\n  details"},
	}}
	sr.Summarize()
	var b bytes.Buffer
	if err := WriteSuiteText(&b, sr); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"gen-7      splitlock before-agent alone vs chase-4MiB",
		"caught", "cap 0.80s convict 1.20s release – (already running) | harm 3.00× (beyond its CPU use 1.50×)",
		"innocents proof 1 (0.25s) convicted 0 (0.00s)",
		"victim crosstalk 1.50× (after 1.10×), none 6.00× (after 7.00×)",
		"gen-8      control whole vs server", "false-conviction",
		"gen-9#2", "error: phase r1-none: tenant victim failed",
		"all                  2 (+1 errors)  100% of 1", "50% of 2",
		"polluter             1 (+1 errors)", "polluter splitlock   1              100% of 1",
		"polluter         crosstalk  1.50× / 1.50×  1.10× / 1.10×",
		"VICTIM RESTORED  NONE ≥ 1.50×  ACTED ON  ≤ 1.05× OF SOLO  ≤ 1.05× WITHOUT POLLUTER",
		"polluter         1             1         0 of 1           1 of 1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "details") {
		t.Errorf("text shows more than an error's first line:\n%s", out)
	}

	j, err := json.Marshal(sr)
	if err != nil {
		t.Fatal(err)
	}
	var back SuiteResult
	if err := json.Unmarshal(j, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Runs) != 3 || *back.Runs[0].Seed != 7 || !back.Runs[0].AlreadyRunning || *back.Total.Recall != 1 || back.ByClass[ClassControl].Runs != 1 {
		t.Errorf("JSON round trip lost something: %s", j)
	}
	for _, key := range []string{`"recall":1`, `"restore":{"runs":1,"acted":1,"within_solo":0,"measured":1,"within_without_polluter":1}`, `"false_conviction_rate":0.5`, `"first_cap_seconds":{"n":1,"median":0.8,"p95":0.8}`, `"victim_slowdown_after_first_action"`, `"by_class"`} {
		if !strings.Contains(string(j), key) {
			t.Errorf("JSON lacks %s: %s", key, j)
		}
	}
}

// The polluter runs are broken down by polluter, timing and placement, a
// row for each value drawn: where the agent sees a kind of polluter and
// where it does not shows there, not only in the overall recall. Control
// runs and runs of scenario files (nothing drawn) have no rows.
func TestSuiteBreakdowns(t *testing.T) {
	run := func(name, polluter, timing, placement string, convicted bool) RunScore {
		return RunScore{Name: name, Repetition: 1, Class: ClassPolluter, Victim: "chase-1MiB", Polluter: polluter, Timing: timing, Placement: placement, Convicted: convicted,
			VictimSlowdown: map[string]*float64{"none": fp(2), "crosstalk": fp(1.2)}}
	}
	sr := &SuiteResult{Seed: 1, Policies: []string{"none", "crosstalk"}, Runs: []RunScore{
		run("gen-1", "splitlock", TimingWhole, PlaceAlone, true),
		run("gen-2", "stream", TimingWhole, PlaceWithVictim, false),
		run("gen-3", "splitlock", TimingLate, PlaceWithVictim, true),
		run("gen-4", "stream", TimingPause, PlaceAlone, false),
		{Name: "gen-5", Repetition: 1, Class: ClassControl, Timing: TimingWhole, Victim: "server", InnocentsConvicted: 1},
		{Name: "buslock", Repetition: 1, Class: ClassPolluter, Convicted: true},
	}}
	sr.Summarize()
	check := func(name, key string, runs int, recall float64) {
		t.Helper()
		a, ok := sr.Breakdowns[name][key]
		if !ok || a.Runs != runs || a.Recall == nil || *a.Recall != recall || a.ControlRuns != 0 {
			t.Errorf("%s %s: %+v, want %d runs, recall %v", name, key, a, runs, recall)
		}
	}
	check(ByPolluter, "splitlock", 2, 1)
	check(ByPolluter, "stream", 2, 0)
	check(ByTiming, TimingWhole, 2, 0.5)
	check(ByTiming, TimingPause, 1, 0)
	check(ByPlacement, PlaceWithVictim, 2, 0.5)
	if n := len(sr.Breakdowns[ByPolluter]); n != 2 {
		t.Errorf("polluter rows %v, want splitlock and stream only", sr.Breakdowns[ByPolluter])
	}
	var b bytes.Buffer
	if err := WriteSuiteText(&b, sr); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(b.String()), " ")
	wantAll(t, text, "polluter splitlock 2 100% of 2", "polluter stream 2 0% of 2",
		"timing late 1 100% of 1", "placement with-victim 2 50% of 2", "rows count polluter runs only")
	b.Reset()
	if err := WriteSuiteReport(&b, sr); err != nil {
		t.Fatal(err)
	}
	wantAll(t, b.String(), "<td>polluter stream</td>", "<td>placement alone</td>")
	j, err := json.Marshal(sr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(j), `"breakdowns":{"placement":{"alone":{"runs":2`) {
		t.Errorf("JSON lacks the breakdowns: %s", j)
	}
}

func TestSuiteReportHTML(t *testing.T) {
	seed := int64(3)
	sr := &SuiteResult{Seed: 3, Host: "<host>", Policies: []string{"none", "crosstalk"}, Runs: []RunScore{
		{Name: "gen-3", Repetition: 1, Seed: &seed, Class: ClassPolluter, Victim: "chase-1MiB", Polluter: "stream", Timing: TimingPause, Placement: PlaceWithVictim,
			Bystanders: []string{"steady", "redis"}, Convicted: true, FirstCapSeconds: fp(0.5), ConvictionSeconds: fp(0.9), ReleaseSeconds: fp(0.3), AlreadyRunning: true,
			Harm: fp(2.4), HarmBeyondCPU: fp(1.3), Harmful: true,
			VictimSlowdown: map[string]*float64{"none": fp(2), "crosstalk": fp(1.25)}, VictimSlowdownAfter: map[string]*float64{"none": fp(2.5), "crosstalk": fp(1.05)}},
		{Name: "my-<file>", Repetition: 2, Class: ClassControl, Error: "tenant <x> failed"},
		{Name: "two", Repetition: 1, Class: ClassPolluter, Victim: "chase", Polluter: "splitlock+stress-ng", Polluters: 2, PollutersConvicted: 1,
			VictimSlowdown: map[string]*float64{"none": fp(3), "crosstalk": fp(2)}, VictimSlowdownAfter: map[string]*float64{"none": nil, "crosstalk": nil}},
	}}
	sr.Summarize()
	var b bytes.Buffer
	if err := WriteSuiteReport(&b, sr); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	wantAll(t, page, "<title>crosstalk lab suite</title>", "host <b>&lt;host&gt;</b>", "3 run(s)",
		"50% of 2", ">splitlock&#43;stress-ng<", `class="verdict-missed">missed (1 of 2)<`, "0.90s / 0.90s", "0.30s / 0.30s",
		">chase-1MiB<", ">stream<", ">pause<", ">with-victim<", "steady, redis", `class="verdict-caught">caught<`, "0.50s ⁱ",
		"2.00× / 2.50×", "1.25× / 1.05×", "2.40× / 1.30× ʰ", "my-&lt;file&gt; #2", "error: tenant &lt;x&gt; failed",
		"<h3>Victim restored</h3>", "no policy ≥ 1.5×", "≤ 1.05× of solo",
		`<td>polluter</td><td class="num">2</td><td class="num">1</td><td class="num">1 of 1</td><td class="num">–</td>`)
	if strings.Contains(page, "<host>") || strings.Contains(page, "<x>") {
		t.Error("names from the result are not escaped")
	}
	if err := WriteSuiteReport(&b, nil); err == nil {
		t.Error("no error for a nil result")
	}
}

func TestWilson(t *testing.T) {
	tests := []struct {
		k, n     int
		low, hi  float64
		wantNone bool
	}{
		// Reference values worked out by hand from Wilson's formula (z = 1.96).
		{k: 0, n: 0, wantNone: true},
		{k: 0, n: 10, low: 0, hi: 0.2775},
		{k: 10, n: 10, low: 0.7225, hi: 1},
		{k: 5, n: 10, low: 0.2366, hi: 0.7634},
		{k: 4, n: 22, low: 0.0731, hi: 0.3851},
		{k: 160, n: 200, low: 0.7391, hi: 0.8495},
	}
	for _, tt := range tests {
		got := Wilson(tt.k, tt.n)
		if tt.wantNone {
			if got != nil {
				t.Errorf("Wilson(%d, %d) = %+v, want nil", tt.k, tt.n, *got)
			}
			continue
		}
		if got == nil || math.Abs(got.Low-tt.low) > 5e-4 || math.Abs(got.High-tt.hi) > 5e-4 ||
			tt.k == 0 && got.Low != 0 || tt.k == tt.n && got.High != 1 {
			t.Errorf("Wilson(%d, %d) = %+v, want [%.4f, %.4f]", tt.k, tt.n, got, tt.low, tt.hi)
		}
	}
}

// A scenario given by name or file is described by its programs: the
// victim's and the polluters', built-in loads or commands. Its runs
// then count in the breakdown by polluter, and its line says what ran.
func TestSuiteDescribesGivenScenarios(t *testing.T) {
	buslock, err := Load("buslock")
	if err != nil {
		t.Fatal(err)
	}
	file := &Scenario{Name: "mine", Tenants: []Tenant{
		{Name: "db", Role: RoleVictim, Command: []string{"/usr/bin/redis-benchmark", "-q"}},
		{Name: "noisy", Role: RolePolluter, Command: []string{"stress-ng", "--lockbus", "1"}},
		{Name: "other", Role: RolePolluter, Load: "stream"},
	}}
	control := &Scenario{Name: "quiet", Tenants: []Tenant{{Name: "v", Role: RoleVictim, Load: "chase"}}}
	for _, c := range []struct {
		sc                     *Scenario
		victim, polluter, line string
	}{
		{buslock, "chase", "splitlock", "buslock    splitlock vs chase "},
		{file, "redis-benchmark", "stress-ng+stream", "mine       stress-ng+stream vs redis-benchmark "},
		{control, "chase", "", "quiet      control vs chase "},
	} {
		sc := RunScore{Name: c.sc.Name, Repetition: 1, Class: ClassControl}
		if c.polluter != "" {
			sc.Class = ClassPolluter
		}
		SuiteCase{Scenario: c.sc}.describe(&sc)
		if sc.Victim != c.victim || sc.Polluter != c.polluter || sc.Timing != "" || sc.Seed != nil {
			t.Errorf("%s: victim %q polluter %q timing %q, want %q and %q", c.sc.Name, sc.Victim, sc.Polluter, sc.Timing, c.victim, c.polluter)
		}
		if line := suiteRunLine(sc); !strings.HasPrefix(line, c.line) {
			t.Errorf("%s: line %q, want it to begin %q", c.sc.Name, line, c.line)
		}
	}
}

// A victim is restored when, in a polluter run where no policy slowed it
// 1.5× or more, it runs within 1.05× after the first action: of its solo
// level, and of its level with the polluter left out. Runs below the bar,
// control runs and errors are not counted; a run the agent never acted
// in counts against it.
func TestRestoreCountsVictimsBackWithinTheBar(t *testing.T) {
	run := func(class string, none, after, without *float64) RunScore {
		return RunScore{Name: "r", Class: class, VictimSlowdownWithoutPolluter: without,
			VictimSlowdown:      map[string]*float64{"none": none, AttributionPolicy: fp(1)},
			VictimSlowdownAfter: map[string]*float64{"none": none, AttributionPolicy: after}}
	}
	cases := []struct {
		name string
		run  RunScore
		want Restore
	}{
		{"control run", run(ClassControl, fp(3), fp(1), fp(1)), Restore{}},
		{"below the bar", run(ClassPolluter, fp(1.49), fp(1), fp(1)), Restore{}},
		{"no none policy", run(ClassPolluter, nil, fp(1), fp(1)), Restore{}},
		{"never acted on", run(ClassPolluter, fp(1.5), nil, fp(1)), Restore{Runs: 1}},
		{"within solo and without", run(ClassPolluter, fp(4), fp(1.05), fp(1)), Restore{Runs: 1, Acted: 1, WithinSolo: 1, Measured: 1, WithinWithout: 1}},
		{"within without only", run(ClassPolluter, fp(4), fp(2.1), fp(2)), Restore{Runs: 1, Acted: 1, Measured: 1, WithinWithout: 1}},
		{"neither", run(ClassPolluter, fp(4), fp(2.2), fp(2)), Restore{Runs: 1, Acted: 1, Measured: 1}},
		{"without not measured", run(ClassPolluter, fp(4), fp(1.01), nil), Restore{Runs: 1, Acted: 1, WithinSolo: 1}},
		{"after the first action not measured", RunScore{Class: ClassPolluter, VictimSlowdown: map[string]*float64{"none": fp(4)},
			VictimSlowdownAfter: map[string]*float64{}}, Restore{}},
		{"an error", RunScore{Class: ClassPolluter, Error: "boom", VictimSlowdown: map[string]*float64{"none": fp(4)},
			VictimSlowdownAfter: map[string]*float64{AttributionPolicy: fp(1)}}, Restore{}},
	}
	var all []RunScore
	var sum Restore
	for _, c := range cases {
		if got := Summarize([]RunScore{c.run}).Restore; got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
		all = append(all, c.run)
		sum.Runs, sum.Acted, sum.WithinSolo = sum.Runs+c.want.Runs, sum.Acted+c.want.Acted, sum.WithinSolo+c.want.WithinSolo
		sum.Measured, sum.WithinWithout = sum.Measured+c.want.Measured, sum.WithinWithout+c.want.WithinWithout
	}
	if got := Summarize(all).Restore; got != sum {
		t.Errorf("all runs: %+v, want %+v", got, sum)
	}
}
