package agent

import (
	"context"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// fakeProofs stands in for the proofs and throttles the CPU-wait policy
// shares with the probe policy: it says who is capped or resting, and
// records the proofs the policy starts.
type fakeProofs struct {
	cappedIDs  map[string]bool
	restingIDs map[string]bool
	blocked    bool // no new proof may start
	tight      bool // a throttle on the CPUs can still tighten
	started    []*proof
	journaled  []act.Event
}

func (f *fakeProofs) capped(id string) bool                  { return f.cappedIDs[id] }
func (f *fakeProofs) resting(_, id string, _ time.Time) bool { return f.restingIDs[id] }
func (f *fakeProofs) mayProve(time.Time) bool                { return !f.blocked }
func (f *fakeProofs) tightening(string, cpuset.Set) bool     { return f.tight }
func (f *fakeProofs) journal(e act.Event)                    { f.journaled = append(f.journaled, e) }
func (f *fakeProofs) startProof(_ context.Context, _ time.Time, p *proof, _ float64) {
	f.started = append(f.started, p)
}

// zeroStats reads zero counters for every tenant.
type zeroStats struct{}

func (zeroStats) Read(_ context.Context, t sense.Tenant, _ *sense.TenantStats) (sense.TenantStats, error) {
	return sense.TenantStats{}, nil
}

// driveWait runs the policy through a quiet minute (the victim alone
// busy on CPU 1) and then a crowded one (the hog takes four fifths of CPU
// 1, over half again its fair half; the victim waits), and returns the
// last ranking.
func driveWait(t *testing.T, f *fakeProofs) []judge.Suspect {
	t.Helper()
	cfg := Config{}
	cfg.CPUWait.Prove = ptrTo(true)
	cfg.fill()
	w := newCPUWaitPolicy(cfg, zeroStats{}, f)
	victim := sense.Tenant{ID: "/lab/victim", Name: "victim", CPUs: cpuset.Of(1)}
	hog := sense.Tenant{ID: "/lab/hog", Name: "hog", CPUs: cpuset.Of(1)}
	now := time.Unix(0, 0)
	var ranked []judge.Suspect
	for i := range 40 {
		vs := sample{t: victim, usage: 1, fresh: true, waitUsage: 1, waitDelay: 0.01, waitFresh: true}
		hs := sample{t: hog, usage: 0, fresh: true, waitFresh: true}
		if i >= 20 {
			vs.usage, vs.waitUsage, vs.waitDelay = 0.2, 0.2, 0.8
			hs.usage, hs.waitUsage, hs.waitDelay = 0.8, 0.8, 0.1
		}
		samples := []sample{vs, hs}
		views := []judge.TenantView{{ID: victim.ID, Name: victim.Name, CPUs: victim.CPUs, Usage: vs.usage}, {ID: hog.ID, Name: hog.Name, CPUs: hog.CPUs, Usage: hs.usage}}
		w.observe(samples, views)
		ranked = w.maybeProve(context.Background(), now, views, presentOf(samples))
		if len(f.started) > 0 {
			break
		}
		now = now.Add(time.Second)
	}
	return ranked
}

func TestCPUWaitPolicyProvesTheHog(t *testing.T) {
	ranks := func(r []judge.Suspect, id string) bool {
		for _, s := range r {
			if s.ID == id {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct {
		name      string
		f         *fakeProofs
		wantRank  bool
		wantProof bool
	}{
		{"free to prove", &fakeProofs{}, true, true},
		{"the hog is capped already", &fakeProofs{cappedIDs: map[string]bool{"/lab/hog": true}}, false, false},
		{"the hog was acquitted lately", &fakeProofs{restingIDs: map[string]bool{"/lab/hog": true}}, false, false},
		{"no room for another proof", &fakeProofs{blocked: true}, true, false},
		{"a throttle there can still tighten", &fakeProofs{tight: true}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ranked := driveWait(t, tc.f)
			if got := ranks(ranked, "/lab/hog"); got != tc.wantRank {
				t.Errorf("hog ranked = %v, want %v (ranking %+v)", got, tc.wantRank, ranked)
			}
			if ranks(ranked, "/lab/victim") {
				t.Errorf("the victim is ranked a suspect: %+v", ranked)
			}
			if got := len(tc.f.started) > 0; got != tc.wantProof {
				t.Fatalf("proof started = %v, want %v", got, tc.wantProof)
			}
			if !tc.wantProof {
				return
			}
			p := tc.f.started[0]
			if p.tenant.ID != "/lab/hog" || p.signal != signalWait || len(p.victims) != 1 || p.victims[0].ID != "/lab/victim" {
				t.Errorf("proof on %s (signal %q) for victims %v, want the hog for the victim's CPU wait", p.tenant.ID, p.signal, p.victims)
			}
			if len(tc.f.journaled) != 1 || tc.f.journaled[0].Kind != "detection" {
				t.Errorf("journal %+v, want one detection", tc.f.journaled)
			}
		})
	}
}
