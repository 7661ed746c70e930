package agent

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// fakeProbeProofs is fakeProofs with the probe policy's question of the
// throttles on the contended domains.
type fakeProbeProofs struct {
	fakeProofs
	tightOn bool
	// unreadable: the contention does not show at a proof's pace.
	unreadable bool
	// held: when a throttle on each probe kind began (heldSince).
	held map[string]time.Time
}

func (f *fakeProbeProofs) tighteningOn([]int) bool { return f.tightOn }
func (f *fakeProbeProofs) heldSince(_ []int, kind string) time.Time {
	return f.held[kind]
}
func (f *fakeProbeProofs) readable(*proof, float64) bool { return !f.unreadable }

// The probe policy proves the top suspect that has a CPU away from it
// reading the contention, read there, unless a proof may not start or a
// throttle on the contended domains can still tighten.
func TestProbePolicyProvesTheTopSuspect(t *testing.T) {
	now := time.Unix(1000, 0)
	hog := sense.Tenant{ID: "/lab/hog", Name: "hog", CPUs: cpuset.Of(0)}
	v := judge.Verdict{Contended: true, Persistent: true, Domains: []int{0}, Ratio: 6, Reason: "LLC probe 6×", Readings: []judge.RatedReading{
		rated(0, sense.ProbeLLC, 1.0), rated(1, sense.ProbeLLC, 6)}}
	ranked := []judge.Suspect{{ID: hog.ID, Name: hog.Name, Score: 3}}
	present := map[string]sample{hog.ID: {t: hog, usage: 1, fresh: true}}
	for _, tc := range []struct {
		name string
		f    *fakeProbeProofs
		want bool
	}{
		{"free to prove", &fakeProbeProofs{}, true},
		{"no room for another proof", &fakeProbeProofs{fakeProofs: fakeProofs{blocked: true}}, false},
		{"a throttle on the domain can still tighten", &fakeProbeProofs{tightOn: true}, false},
		{"the contention does not show at a proof's pace", &fakeProbeProofs{unreadable: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{}
			cfg.fill()
			p := newProbePolicy(cfg, judge.NewContention(cfg.Thresholds()), map[int]cpuset.Set{0: cpuset.MustParse("0-1")}, nil, nil, newProofLedger(cfg.Proof), tc.f, slog.New(slog.DiscardHandler))
			p.maybeProve(context.Background(), now, v, ranked, nil, present)
			if got := len(tc.f.started) > 0; got != tc.want {
				t.Fatalf("proof started = %v, want %v", got, tc.want)
			}
			if !tc.want {
				if len(tc.f.journaled) > 0 {
					t.Errorf("journal %+v, want nothing: no proof started", tc.f.journaled)
				}
				return
			}
			pr := tc.f.started[0]
			if pr.tenant.ID != hog.ID || pr.signal != signalProbe || pr.cpu.CPU != 1 || pr.kind != sense.ProbeLLC {
				t.Errorf("proof on %s (signal %q) read on CPU %d %s, want the hog read by the LLC probe on CPU 1", pr.tenant.ID, pr.signal, pr.cpu.CPU, pr.kind)
			}
			if len(tc.f.journaled) != 1 || tc.f.journaled[0].Kind != "detection" {
				t.Errorf("journal %+v, want one detection", tc.f.journaled)
			}
		})
	}
}

// Where every suspect on the contended domain rests after an acquittal and
// the contention stays, the probe policy proves one of them again, early,
// once an acquittal, the ranking's first first, continuing the evidence
// its acquittal left; not one over its proof allowance, and not at all
// while a polluter proven on the probe is held on the domain, or a suspect
// there rests for another reason than an acquittal in the last
// recheckWindow (a throttle that did not help, an older acquittal) or
// waits after an inconclusive proof.
func TestProbePolicyRechecksAnAcquittalWhereNobodyElseCanBeProved(t *testing.T) {
	now := time.Unix(1000, 0)
	hog := sense.Tenant{ID: "/lab/hog", Name: "hog", CPUs: cpuset.Of(0)}
	calm := sense.Tenant{ID: "/lab/calm", Name: "calm", CPUs: cpuset.Of(0)}
	v := judge.Verdict{Contended: true, Persistent: true, Domains: []int{0}, Ratio: 6, Reason: "DRAM probe 6×", Readings: []judge.RatedReading{
		rated(0, sense.ProbeDRAM, 1.0), rated(1, sense.ProbeDRAM, 6)}}
	views := []judge.TenantView{
		{ID: hog.ID, Name: hog.Name, CPUs: hog.CPUs, Usage: 0.6},
		{ID: calm.ID, Name: calm.Name, CPUs: calm.CPUs, Usage: 0.3},
	}
	present := map[string]sample{hog.ID: {t: hog, usage: 0.6, fresh: true}, calm.ID: {t: calm, usage: 0.3, fresh: true}}
	for _, tc := range []struct {
		name string
		// acquitted: how long ago each tenant was acquitted (absent: not).
		acquitted map[string]time.Duration
		// backedOff: tenants resting for another reason (a throttle
		// that did not help), a second ago.
		backedOff []string
		// capped: proof cap time each tenant spent a moment ago.
		capped map[string]time.Duration
		// held: when a throttle of a polluter proven on each probe kind
		// began on the domain.
		held map[string]time.Time
		want []string // the tenants proved, one an interval
	}{
		{"both acquitted: each proved again once, the ranking's first first", map[string]time.Duration{hog.ID: time.Second, calm.ID: time.Second}, nil, nil, nil, []string{hog.ID, calm.ID}},
		{"one acquitted longer ago, resting since", map[string]time.Duration{hog.ID: recheckWindow + time.Second, calm.ID: time.Second}, []string{hog.ID}, nil, nil, nil},
		{"one rests after a throttle that did not help", map[string]time.Duration{calm.ID: time.Second}, []string{hog.ID}, nil, nil, nil},
		{"one over its allowance", map[string]time.Duration{hog.ID: time.Second, calm.ID: time.Second}, nil, map[string]time.Duration{hog.ID: time.Hour}, nil, []string{calm.ID}},
		{"resting, but not acquitted", nil, []string{hog.ID, calm.ID}, nil, nil, nil},
		{"one waits to be proved again after an inconclusive proof", map[string]time.Duration{hog.ID: time.Second}, []string{calm.ID}, nil, nil, nil},
		{"a polluter proven on the probe held on the domain", map[string]time.Duration{hog.ID: time.Second, calm.ID: time.Second}, nil, nil, map[string]time.Time{sense.ProbeDRAM: now.Add(-3 * time.Second)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{}
			cfg.fill()
			ledger := newProofLedger(cfg.Proof)
			for id, ago := range tc.acquitted {
				key := backoffKey(signalProbe, id)
				ledger.backOff(key, now.Add(-ago))
				ledger.noteAcquittal(key, 0.1, now.Add(-ago))
			}
			for _, id := range tc.backedOff {
				ledger.backOff(backoffKey(signalProbe, id), now.Add(-time.Second))
			}
			if strings.Contains(tc.name, "inconclusive") {
				// As prover.endProof leaves an inconclusive proof.
				ledger.keepCarry(backoffKey(signalProbe, calm.ID), 0.5, now.Add(-time.Second))
				ledger.holdOff(backoffKey(signalProbe, calm.ID), now.Add(-time.Second), now.Add(time.Second))
			}
			for id, d := range tc.capped {
				ledger.capSpent(id, now.Add(-time.Millisecond), d)
			}
			f := &fakeProbeProofs{fakeProofs: fakeProofs{restingIDs: map[string]bool{}}, held: tc.held}
			for _, id := range []string{hog.ID, calm.ID} {
				f.restingIDs[id] = ledger.resting(signalProbe, id, now)
			}
			p := newProbePolicy(cfg, judge.NewContention(cfg.Thresholds()), map[int]cpuset.Set{0: cpuset.MustParse("0-1")}, nil, nil, ledger, f, slog.New(slog.DiscardHandler))
			var got []string
			for range 3 {
				f.started = nil
				ranked := p.rank(now, v, views)
				p.maybeProve(context.Background(), now, v, ranked, views, present)
				for _, pr := range f.started {
					got = append(got, pr.tenant.ID)
					if carry := ledger.takeCarry(backoffKey(signalProbe, pr.tenant.ID), now); carry != 0.1 {
						t.Errorf("%s proved again from evidence %v, want the acquittal's 0.1", pr.tenant.ID, carry)
					}
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("proved %v, want %v", got, tc.want)
			}
		})
	}
}

// The watch reads two CPUs of a domain a look, in turn, so that a look
// is never blind for reading only the polluter's own CPU (where the probe
// preempts it and reads quiet); a look that reads contention on either
// brings the interval forward. Where the domain has idle CPUs it reads
// those only: none of them is a polluter's own.
func TestProbePolicyWatchReadsTwoCPUsALook(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cpus   string
		idle   string
		hotCPU int
		// looks is what each look reads, in order.
		looks [][]int
	}{
		{"two CPUs", "0-1", "", 0, [][]int{{0, 1}, {0, 1}}},
		{"four CPUs", "0-3", "", 3, [][]int{{2, 3}, {0, 1}, {2, 3}}},
		{"one CPU", "0", "", 0, [][]int{{0}, {0}}},
		{"four CPUs, two of them idle", "0-3", "1-2", 1, [][]int{{1, 2}, {1, 2}}},
		{"four CPUs, three of them idle", "0-3", "0-2", 0, [][]int{{2, 0}, {1, 2}, {0, 1}}},
		{"two CPUs, one idle", "0-1", "0", 0, [][]int{{0}, {0}}},
		{"idle CPUs of no domain", "0-1", "5", 0, [][]int{{0, 1}, {0, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{}
			cfg.fill()
			cont := judge.NewContention(cfg.Thresholds())
			set := cpuset.MustParse(tc.cpus)
			for range 3 {
				var quiet []sense.ProbeReading
				for _, c := range set.List() {
					quiet = append(quiet, sense.ProbeReading{Domain: 0, CPU: c, Kind: sense.ProbeDRAM, Ns: 100})
				}
				cont.Calibrate(quiet)
			}
			var read []int
			quick := func(domain, cpu int, kind string) ([]sense.ProbeReading, error) {
				read = append(read, cpu)
				ns := 100.0
				if cpu == tc.hotCPU {
					ns = 800
				}
				return []sense.ProbeReading{{Domain: domain, CPU: cpu, Kind: kind, Ns: ns}}, nil
			}
			p := newProbePolicy(cfg, cont, map[int]cpuset.Set{0: set}, nil, quick, newProofLedger(cfg.Proof), &fakeProbeProofs{}, slog.New(slog.DiscardHandler))
			p.domains = func() []sense.ProbeDomain { return []sense.ProbeDomain{{ID: 0, CPUs: set}} }
			p.watchKind, p.anyBusy = sense.ProbeDRAM, true
			p.idle = cpuset.MustParse(tc.idle)
			for i, want := range tc.looks {
				read = nil
				due := p.watch(false)
				if !slices.Equal(read, want) {
					t.Errorf("look %d read CPUs %v, want %v", i, read, want)
				}
				if hot := slices.Contains(want, tc.hotCPU); due != hot {
					t.Errorf("look %d: due = %v, want %v (CPU %d reads contention)", i, due, hot, tc.hotCPU)
				}
			}
		})
	}
}
