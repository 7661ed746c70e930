package agent

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// noSnapshots counts nothing at a proof's pace (the policy only needs
// snapshots once a proof runs).
type noSnapshots struct{}

func (noSnapshots) Snapshot(string, ...string) (sense.PerfSnapshot, bool) {
	return sense.PerfSnapshot{}, false
}

// driveCPI runs the policy through quiet intervals (the victim at 0.8
// cycles an instruction) and then polluted ones (1.28, while the streamer
// misses the LLC 80 million times a second); a light cache user beside them
// misses 2 million times a second throughout, and a memory-bound tenant 90
// million times a second, from the start. It returns the last ranking.
func driveCPI(t *testing.T, f *fakeProofs, pmu bool) []judge.Suspect {
	t.Helper()
	cfg := Config{}
	cfg.fill()
	c := newCPIPolicy(cfg, pmu, noSnapshots{}, map[int]cpuset.Set{0: cpuset.Of(0, 1, 2, 3)}, f)
	victim := sense.Tenant{ID: "/lab/victim", Name: "victim", CPUs: cpuset.Of(2, 3)}
	streamer := sense.Tenant{ID: "/lab/streamer", Name: "streamer", CPUs: cpuset.Of(0)}
	light := sense.Tenant{ID: "/lab/light", Name: "light", CPUs: cpuset.Of(1)}
	heavy := sense.Tenant{ID: "/lab/heavy", Name: "heavy", CPUs: cpuset.Of(1)}
	counters := func(cpi, usage, misses float64) map[string]float64 {
		cyc := 3e9 * usage
		return map[string]float64{sense.EventCycles: cyc, sense.EventInstructions: cyc / cpi, sense.EventLLCMisses: misses}
	}
	now := time.Unix(0, 0)
	var ranked []judge.Suspect
	for i := range 30 {
		vs := sample{t: victim, usage: 2, fresh: true, counters: counters(0.8, 2, 1e5)}
		ss := sample{t: streamer, usage: 0, fresh: true}
		ls := sample{t: light, usage: 0.8, fresh: true, counters: counters(0.6, 0.8, 2e6)}
		hs := sample{t: heavy, usage: 1, fresh: true, counters: counters(4, 1, 9e7)}
		if i >= 10 {
			vs.counters = counters(1.28, 2, 3e7)
			ss.usage, ss.counters = 1, counters(3, 1, 8e7)
		}
		samples := []sample{vs, ss, ls, hs}
		var views []judge.TenantView
		for _, s := range samples {
			views = append(views, judge.TenantView{ID: s.t.ID, Name: s.t.Name, CPUs: s.t.CPUs, Usage: s.usage, Counters: s.counters})
		}
		c.observe(samples, views)
		ranked = c.maybeProve(context.Background(), now, views, presentOf(samples))
		if len(f.started) > 0 {
			break
		}
		now = now.Add(time.Second)
	}
	return ranked
}

func TestCPIPolicyProvesTheStreamer(t *testing.T) {
	ranks := func(r []judge.Suspect, id string) bool {
		return slices.ContainsFunc(r, func(s judge.Suspect) bool { return s.ID == id })
	}
	for _, tc := range []struct {
		name      string
		f         *fakeProofs
		pmu       bool
		wantRank  bool
		wantProof bool
	}{
		{"free to prove", &fakeProofs{}, true, true, true},
		{"no PMU: nothing judged", &fakeProofs{}, false, false, false},
		{"the streamer is capped already", &fakeProofs{cappedIDs: map[string]bool{"/lab/streamer": true}}, true, false, false},
		{"the streamer was acquitted lately", &fakeProofs{restingIDs: map[string]bool{"/lab/streamer": true}}, true, false, false},
		{"no room for another proof", &fakeProofs{blocked: true}, true, true, false},
		{"a throttle on the L3 can still tighten", &fakeProofs{tight: true}, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ranked := driveCPI(t, tc.f, tc.pmu)
			if got := ranks(ranked, "/lab/streamer"); got != tc.wantRank {
				t.Errorf("streamer ranked = %v, want %v (ranking %+v)", got, tc.wantRank, ranked)
			}
			// The victim's misses are its loss; the light user misses too
			// little to take anyone's cache; the memory-bound tenant missed
			// as much before the victim's CPI rose: not who changed.
			if ranks(ranked, "/lab/victim") || ranks(ranked, "/lab/light") || ranks(ranked, "/lab/heavy") {
				t.Errorf("the victim, the light cache user or the memory-bound tenant is ranked a suspect: %+v", ranked)
			}
			if got := len(tc.f.started) > 0; got != tc.wantProof {
				t.Fatalf("proof started = %v, want %v", got, tc.wantProof)
			}
			if !tc.wantProof {
				return
			}
			p := tc.f.started[0]
			if p.tenant.ID != "/lab/streamer" || p.signal != signalCPI || len(p.victims) != 1 || p.victims[0].ID != "/lab/victim" || p.cpiFrom == nil {
				t.Errorf("proof on %s (signal %q) for victims %v, want the streamer for the victim's CPI", p.tenant.ID, p.signal, p.victims)
			}
			if len(tc.f.journaled) != 1 || tc.f.journaled[0].Kind != "detection" {
				t.Fatalf("journal %+v, want one detection", tc.f.journaled)
			}
			ev, ok := tc.f.journaled[0].Evidence.(DetectionEvidence)
			if !ok || len(ev.CPIVictims) != 1 || ev.CPIVictims[0].ID != "/lab/victim" || ev.CPIRatio < 1.5 {
				t.Errorf("detection evidence %+v, want the victim at 1.6×", tc.f.journaled[0].Evidence)
			}
		})
	}
}

// What a tenant's counters say of it as a CPI suspect, for a tenant new to
// the policy (so it changed with any episode).
func TestCPISuspectByCounters(t *testing.T) {
	cfg := Config{}
	cfg.fill()
	c := newCPIPolicy(cfg, true, noSnapshots{}, map[int]cpuset.Set{}, &fakeProofs{})
	for _, tc := range []struct {
		name string
		v    judge.TenantView
		want bool
	}{
		{"a streamer", judge.TenantView{Counters: map[string]float64{sense.EventLLCMisses: 8e7}}, true},
		{"a light cache user", judge.TenantView{Counters: map[string]float64{sense.EventLLCMisses: 2e6}}, false},
		{"bus locks, few misses", judge.TenantView{Counters: map[string]float64{sense.EventLLCMisses: 10, sense.EventBusLocks: 5e4}}, true},
		{"named by the kernel", judge.TenantView{KernelBusLocks: 3, Counters: map[string]float64{sense.EventLLCMisses: 10}}, true},
		{"no miss counter (Zen 1)", judge.TenantView{Counters: map[string]float64{sense.EventCycles: 3e9}}, true},
	} {
		if got := c.suspect(tc.v); got != tc.want {
			t.Errorf("%s: suspect = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// An agent restarted while the streamer runs restores the victim's CPI
// baseline from before: the victim is judged against it from the first
// interval with counters, and the streamer, busy since the start, is
// proved. A fresh agent learns the polluted CPI as usual and proves no one.
func TestCPIPolicyRestoredBaselineCatchesAPolluterRunningAtStart(t *testing.T) {
	cfg := Config{}
	cfg.fill()
	domain := map[int]cpuset.Set{0: cpuset.Of(0, 1, 2, 3)}
	victim := sense.Tenant{ID: "/lab/victim", Name: "victim", CPUs: cpuset.Of(2, 3)}
	streamer := sense.Tenant{ID: "/lab/streamer", Name: "streamer", CPUs: cpuset.Of(0)}
	counters := func(cpi, usage, misses float64) map[string]float64 {
		cyc := 3e9 * usage
		return map[string]float64{sense.EventCycles: cyc, sense.EventInstructions: cyc / cpi, sense.EventLLCMisses: misses}
	}
	run := func(saved map[string]judge.Baseline) *fakeProofs {
		f := &fakeProofs{}
		c := newCPIPolicy(cfg, true, noSnapshots{}, domain, f)
		c.restore(saved)
		now := time.Unix(0, 0)
		for i := range 20 {
			// No rates at the first interval (they take two readings).
			vs := sample{t: victim, usage: 2, fresh: i > 0}
			ss := sample{t: streamer, usage: 1, fresh: i > 0}
			if i > 0 {
				vs.counters, ss.counters = counters(1.28, 2, 3e7), counters(3, 1, 8e7)
			}
			samples := []sample{vs, ss}
			var views []judge.TenantView
			for _, s := range samples {
				views = append(views, judge.TenantView{ID: s.t.ID, Name: s.t.Name, CPUs: s.t.CPUs, Usage: s.usage, Counters: s.counters})
			}
			c.observe(samples, views)
			c.maybeProve(context.Background(), now, views, presentOf(samples))
			if len(f.started) > 0 {
				break
			}
			now = now.Add(time.Second)
		}
		return f
	}
	// What an earlier agent saved, beside a probe baseline.
	earlier := newCPIPolicy(cfg, true, noSnapshots{}, domain, &fakeProofs{})
	for range 6 {
		s := sample{t: victim, usage: 2, fresh: true, counters: counters(0.8, 2, 1e5)}
		earlier.observe([]sample{s}, []judge.TenantView{{ID: victim.ID, CPUs: victim.CPUs, Usage: 2, Counters: s.counters}})
	}
	saved := earlier.baselines()
	saved["0/dram"] = judge.Baseline{Level: 90, N: 10}
	if b, ok := saved["cpi:/lab/victim"]; !ok || b.Level != 0.8 {
		t.Fatalf("saved baselines %v, want the victim's CPI of 0.8 under cpi:/lab/victim", saved)
	}

	f := run(saved)
	if len(f.started) != 1 || f.started[0].tenant.ID != streamer.ID || f.started[0].signal != signalCPI {
		t.Errorf("restored: proofs %v, want the streamer's on CPI", f.started)
	}
	if f := run(nil); len(f.started) != 0 {
		t.Errorf("fresh: a proof of %s, want none (the polluted CPI is learned as usual)", f.started[0].tenant.ID)
	}
}

// The agent saves its tenants' CPI baselines beside the probes' (what
// STATE_DIR/baselines.json holds) and a restarted agent takes both back.
func TestBaselinesCarryTheCPIBesideTheProbes(t *testing.T) {
	w := newWorld(t)
	w.counters = true
	a := newHarness(t, w, testConfig(t.TempDir()), nil).agent
	a.cpi.cpi.Restore(map[string]judge.Baseline{"/lab/victim": {Level: 0.8, Dev: 0.01, N: 6}})
	saved := a.Baselines()
	if saved["cpi:/lab/victim"].Level != 0.8 || saved["0/dram"].N == 0 {
		t.Fatalf("saved %v, want the victim's CPI and the DRAM probe's baseline", saved)
	}
	w2 := newWorld(t)
	w2.counters = true
	b := newHarness(t, w2, testConfig(t.TempDir()), nil).agent
	b.RestoreBaselines(map[string]judge.Baseline{"cpi:/lab/victim": saved["cpi:/lab/victim"], "1/llc": {Level: 14, N: 9}})
	if got := b.cpi.cpi.Baselines()["/lab/victim"]; got.Level != 0.8 || got.N != 6 {
		t.Errorf("restored CPI baseline %+v, want level 0.8 over 6 readings", got)
	}
	if got := b.cont.Baselines()["1/llc"]; got.Level != 14 {
		t.Errorf("restored probe baseline %+v, want 14", got)
	}
	if _, ok := b.cont.Baselines()["cpi:/lab/victim"]; ok {
		t.Error("a CPI baseline taken for a probe's")
	}
}

// The state and the metrics carry each judged tenant's CPI ratio.
func TestStateCarriesTheCPIRatio(t *testing.T) {
	w := newWorld(t)
	w.counters = true
	a := newHarness(t, w, testConfig(t.TempDir()), nil).agent
	victim := sense.Tenant{ID: "/lab/victim", Name: "victim", CPUs: cpuset.Of(1)}
	idle := sense.Tenant{ID: "/lab/bystander", Name: "bystander", CPUs: cpuset.Of(0)}
	var samples []sample
	for i := range 8 {
		cpi := 0.8
		if i == 7 {
			cpi = 1.2
		}
		cyc := 3e9
		samples = []sample{
			{t: victim, usage: 1, fresh: true, counters: map[string]float64{sense.EventCycles: cyc, sense.EventInstructions: cyc / cpi}},
			{t: idle, usage: 0.01, fresh: true},
		}
		a.cpi.observe(samples, nil)
	}
	a.publish(time.Unix(100, 0), judge.Verdict{Ratio: 1}, samples, nil, nil, 0)
	st, ok := a.Latest()
	if !ok {
		t.Fatal("no state published")
	}
	got := map[string]float64{}
	for _, ts := range st.Tenants {
		got[ts.ID] = ts.CPIRatio
	}
	if r := got[victim.ID]; r < 1.49 || r > 1.51 || got[idle.ID] != 0 {
		t.Errorf("CPI ratios %v, want the victim at 1.5 and the idle tenant unjudged (0)", got)
	}
	if st.CPIRatio < 1.49 {
		t.Errorf("state CPI ratio %v, want 1.5", st.CPIRatio)
	}
}
