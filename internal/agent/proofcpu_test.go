package agent

import (
	"slices"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

func rated(cpu int, kind string, ratio float64) judge.RatedReading {
	return judge.RatedReading{ProbeReading: sense.ProbeReading{Domain: 0, CPU: cpu, Kind: kind, Ns: 10 * ratio}, Baseline: 10, Ratio: ratio}
}

// On a two-CPU host the LLC walk reads one CPU an interval: the interval
// that confirms contention may have read it only on the suspect's CPU.
// The CPU away from it that read the contention an interval before is
// where the proof reads; with no such reading lately, the suspect is not
// provable now.
func TestProofCPUUsesTheRecentReadingAwayFromTheSuspect(t *testing.T) {
	now := time.Unix(1000, 0)
	suspect := cpuset.MustParse("0")
	v := judge.Verdict{Contended: true, Domains: []int{0}, Ratio: 6.7, Readings: []judge.RatedReading{
		rated(0, sense.ProbeLLC, 6.7), rated(0, sense.ProbeDRAM, 1.0), rated(1, sense.ProbeDRAM, 1.0)}}
	newPolicy := func() *probePolicy {
		return newProbePolicy(Config{Interval: 250 * time.Millisecond}, judge.NewContention(judge.Thresholds{}),
			map[int]cpuset.Set{0: cpuset.MustParse("0-1")}, nil, nil, nil, &fakeProbeProofs{}, nil)
	}

	a := newPolicy()
	if _, _, _, ok := a.proofCPU(now, v, suspect); ok {
		t.Fatal("provable with no reading away from the suspect")
	}

	a.hotCPU[cpuKind{1, sense.ProbeLLC}] = hotReading{at: now.Add(-250 * time.Millisecond), domain: 0, ratio: 4.8}
	got, kind, before, ok := a.proofCPU(now, v, suspect)
	if !ok || got.CPU != 1 || kind != sense.ProbeLLC {
		t.Fatalf("proof reads %+v %s (ok %v), want the LLC probe on CPU 1", got, kind, ok)
	}
	if want := a.cont.Worst(v.Readings[:1], nil); before != want {
		t.Errorf("before %.2f, want the contention now (%.2f on the common scale)", before, want)
	}

	// Too old to stand for the contention now.
	a.hotCPU[cpuKind{1, sense.ProbeLLC}] = hotReading{at: now.Add(-hotWindow*250*time.Millisecond - time.Millisecond), domain: 0, ratio: 4.8}
	if got, _, _, ok := a.proofCPU(now, v, suspect); ok {
		t.Fatalf("provable on %+v from a stale reading", got)
	}

	// Never on the suspect's own CPU, however recent.
	b := newPolicy()
	b.hotCPU[cpuKind{0, sense.ProbeLLC}] = hotReading{at: now, domain: 0, ratio: 9}
	if got, _, _, ok := b.proofCPU(now, v, suspect); ok {
		t.Fatalf("provable on its own CPU %+v", got)
	}
}

// The contended readings taken before a polluter proven on their kind was
// held were that polluter's: with it held, a busy neighbour whose own cache
// footprint the LLC walk of its CPU reads is not proved on the DRAM probe
// the polluter's storm had heated, nor on a CPU that read the storm.
func TestProofCPUIgnoresTheHeldPollutersReadings(t *testing.T) {
	now := time.Unix(1000, 0)
	neighbour := cpuset.MustParse("0")
	// This interval: the LLC walk of the neighbour's CPU reads its
	// footprint; the DRAM probe reads quiet.
	v := judge.Verdict{Contended: true, Domains: []int{0}, Ratio: 5.4, Readings: []judge.RatedReading{
		rated(0, sense.ProbeLLC, 5.4), rated(0, sense.ProbeDRAM, 1.0), rated(1, sense.ProbeDRAM, 1.0)}}
	stormAt := now.Add(-1200 * time.Millisecond)
	for _, tc := range []struct {
		name     string
		heldFrom time.Time // when the DRAM-proven polluter's throttle began (zero: none held)
		wantOK   bool
		wantKind string
		wantCPU  int
	}{
		{"the storm's polluter still free", time.Time{}, true, sense.ProbeDRAM, 1},
		{"held after the storm's readings", stormAt.Add(100 * time.Millisecond), false, "", 0},
		{"held, and the storm read again since", stormAt.Add(-time.Second), true, sense.ProbeDRAM, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			held := map[string]time.Time{}
			if !tc.heldFrom.IsZero() {
				held[sense.ProbeDRAM] = tc.heldFrom
			}
			p := newProbePolicy(Config{Interval: 500 * time.Millisecond}, judge.NewContention(judge.Thresholds{}),
				map[int]cpuset.Set{0: cpuset.MustParse("0-1")}, nil, nil, nil, &fakeProbeProofs{held: held}, nil)
			p.hotKind[sense.ProbeDRAM] = stormAt
			p.hotCPU[cpuKind{1, sense.ProbeDRAM}] = hotReading{at: stormAt, domain: 0, ratio: 7.2}
			got, kind, _, ok := p.proofCPU(now, v, neighbour)
			if ok != tc.wantOK || ok && (kind != tc.wantKind || got.CPU != tc.wantCPU) {
				t.Errorf("proof reads %s on CPU %d (ok %v), want ok %v, %s on CPU %d", kind, got.CPU, ok, tc.wantOK, tc.wantKind, tc.wantCPU)
			}
		})
	}
}

// A proof never reads the locked add: contention only it reads proves
// nobody, and beside a contended DRAM probe the proof reads that.
func TestProofCPUNeverReadsTheLockProbe(t *testing.T) {
	now := time.Unix(1000, 0)
	suspect := cpuset.MustParse("1")
	p := newProbePolicy(Config{Interval: 500 * time.Millisecond}, judge.NewContention(judge.Thresholds{}),
		map[int]cpuset.Set{0: cpuset.MustParse("0-1")}, nil, nil, nil, &fakeProbeProofs{}, nil)
	lockOnly := judge.Verdict{Contended: true, Domains: []int{0}, Ratio: 2.7, Readings: []judge.RatedReading{
		rated(0, sense.ProbeLock, 2.7), rated(0, sense.ProbeDRAM, 1.0), rated(1, sense.ProbeDRAM, 1.0), rated(1, sense.ProbeLLC, 1.1)}}
	if got, kind, _, ok := p.proofCPU(now, lockOnly, suspect); ok {
		t.Errorf("provable on %s on CPU %d with only the lock probe contended", kind, got.CPU)
	}
	p.hotCPU[cpuKind{0, sense.ProbeLock}] = hotReading{at: now, domain: 0, ratio: 9}
	if got, kind, _, ok := p.proofCPU(now, lockOnly, suspect); ok {
		t.Errorf("provable on %s on CPU %d from a recent lock reading", kind, got.CPU)
	}
	both := judge.Verdict{Contended: true, Domains: []int{0}, Ratio: 9, Readings: []judge.RatedReading{
		rated(0, sense.ProbeLock, 9), rated(0, sense.ProbeDRAM, 2.5), rated(1, sense.ProbeDRAM, 2.0)}}
	if got, kind, _, ok := p.proofCPU(now, both, suspect); !ok || kind != sense.ProbeDRAM || got.CPU != 0 {
		t.Errorf("proof reads %s on CPU %d (ok %v), want the DRAM probe on CPU 0", kind, got.CPU, ok)
	}
}

func TestRetryAfterAnInconclusiveProof(t *testing.T) {
	a := &prover{cfg: Config{Interval: 250 * time.Millisecond}}
	for _, tc := range []struct {
		evidence float64
		want     time.Duration
	}{
		{0.4, inconclusiveRetry},
		{1, inconclusiveRetry},
		{1.49, inconclusiveRetry},
		{1.64, quickInterval},
		{28, quickInterval},
	} {
		if got := a.retryAfter(tc.evidence); got != tc.want {
			t.Errorf("evidence %.2f: retry after %s, want %s", tc.evidence, got, tc.want)
		}
	}
	if got := (&prover{cfg: Config{Interval: time.Second}}).retryAfter(3); got != 250*time.Millisecond {
		t.Errorf("1 s interval: retry after %s, want a watch (250ms)", got)
	}
	slow := &prover{cfg: Config{Interval: 5 * time.Second}}
	if got := slow.retryAfter(3); got != inconclusiveRetry {
		t.Errorf("5 s interval: retry after %s, want %s at most", got, inconclusiveRetry)
	}
}

func TestProofOrder(t *testing.T) {
	now := time.Unix(1000, 0)
	a := &probePolicy{ledger: &proofLedger{carry: map[string]carried{
		"/polluter": {evidence: 14, at: now.Add(-time.Second)},
		"/doubtful": {evidence: 0.6, at: now.Add(-time.Second)},
		"/stale":    {evidence: 50, at: now.Add(-carryWindow - time.Second)},
		"/weak":     {evidence: 2, at: now.Add(-time.Second)},
		"/barely":   {evidence: 1.2, at: now.Add(-time.Second)},
	}, backoff: map[string]backoff{
		// Acquitted a while ago, their backoffs over: proved before.
		"/cleared": {until: now.Add(-time.Second), next: 20 * time.Second, since: now.Add(-11 * time.Second)},
		"/tracks":  {until: now.Add(-time.Second), next: 20 * time.Second, since: now.Add(-30 * time.Second)},
		// An inconclusive proof's hold, longer ago: tried too.
		"/doubtful": {until: now.Add(-time.Second), since: now.Add(-20 * time.Second)},
	}}}
	ranked := []judge.Suspect{{ID: "/cleared"}, {ID: "/bystander"}, {ID: "/tracks", Evidence: true}, {ID: "/barely"}, {ID: "/doubtful"}, {ID: "/stale"}, {ID: "/weak"}, {ID: "/polluter"}, {ID: "/quiet"}}
	var got []string
	for _, s := range a.proofOrder(now, ranked) {
		got = append(got, s.ID)
	}
	// Leaning to guilt first, most evidence first; then by rank, but those
	// proved before with nothing beyond their CPU use against them last,
	// the longest ago first.
	want := []string{"/polluter", "/weak", "/bystander", "/tracks", "/barely", "/stale", "/quiet", "/doubtful", "/cleared"}
	if !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}
