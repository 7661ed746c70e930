package agent

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// fakeActs is the agent's side of a proof: it keeps the suspect's cap
// state, and its probe reads the contention the suspect makes unless
// capped (or always, when guilty is false: the contention is someone
// else's).
type fakeActs struct {
	guilty   bool
	capped   bool
	records  []api.ActionKind
	convicts []string
}

func (f *fakeActs) apply(_ context.Context, _ sense.Tenant, _ cgroup.Quota, _ string, _ time.Time) error {
	f.capped = true
	return nil
}
func (f *fakeActs) handleWriteErr(context.Context, sense.Tenant, error) {}
func (f *fakeActs) dropProbeHold(context.Context, sense.Tenant)         { f.capped = false }
func (f *fakeActs) record(_ time.Time, _ sense.Tenant, kind api.ActionKind, _, _ float64, _ string) {
	f.records = append(f.records, kind)
}
func (f *fakeActs) recordSlot(_ time.Time, _ sense.Tenant, kind api.ActionKind, _ float64, _ string) {
	f.records = append(f.records, kind)
}
func (f *fakeActs) journal(act.Event)           {}
func (f *fakeActs) noteAction(api.ActionRecord) {}
func (f *fakeActs) convicted(_ context.Context, _ time.Time, p *proof, _ string) {
	f.convicts = append(f.convicts, p.tenant.ID)
}
func (f *fakeActs) measureOnce(domain, cpu int, _ ...string) ([]sense.ProbeReading, error) {
	ns := 600.0
	if f.guilty && f.capped {
		ns = 100
	}
	return []sense.ProbeReading{{Domain: domain, CPU: cpu, Kind: sense.ProbeDRAM, Ns: ns}}, nil
}

func TestProverRunsAProof(t *testing.T) {
	suspect := sense.Tenant{ID: "/lab/suspect", Name: "suspect", CPUs: cpuset.Of(0)}
	for _, tc := range []struct {
		name        string
		dryRun      bool
		guilty      bool
		recheck     bool // the proof proves an acquitted suspect again early
		wantVerdict string
	}{
		{"its cap lifts the contention", false, true, false, judge.ProofGuilty},
		{"its cap changes nothing", false, false, false, ""},
		{"its cap changes nothing, proved again early", false, false, true, ""},
		{"dry run", true, true, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{DryRun: tc.dryRun}
			cfg.fill()
			cont := judge.NewContention(cfg.Thresholds())
			cont.Calibrate([]sense.ProbeReading{{Domain: 0, CPU: 1, Kind: sense.ProbeDRAM, Ns: 100}})
			acts := &fakeActs{guilty: tc.guilty}
			ledger := newProofLedger(cfg.Proof)
			pr := newProver(cfg, ledger, cont, nil, nil, acts, acts, acts, acts, slog.New(slog.DiscardHandler))
			pr.convict = acts.convicted
			now := time.Unix(1000, 0)
			pr.start(context.Background(), now, &proof{tenant: suspect, cpu: CPUDomain{0, 1}, kind: sense.ProbeDRAM, signal: signalProbe, recheck: tc.recheck}, 6)
			for i := 0; i < 1000 && pr.proof != nil; i++ {
				now = pr.proof.next
				pr.sample(context.Background(), now)
			}
			if pr.proof != nil {
				t.Fatal("the proof never ended")
			}
			if acts.capped {
				t.Error("the suspect was left capped")
			}
			if tc.dryRun {
				if len(acts.records) != 1 || acts.records[0] != api.KindProof || len(pr.verdicts) != 0 {
					t.Errorf("dry run recorded %v with verdicts %v, want one proof record and no proof", acts.records, pr.verdicts)
				}
				if !ledger.resting(signalProbe, suspect.ID, now) {
					t.Error("a dry-run proof did not back the suspect off")
				}
				return
			}
			if tc.wantVerdict == judge.ProofGuilty {
				if pr.verdicts[judge.ProofGuilty] != 1 || len(acts.convicts) != 1 {
					t.Fatalf("verdicts %v, convicted %v: want the suspect convicted", pr.verdicts, acts.convicts)
				}
				return
			}
			if pr.verdicts[judge.ProofGuilty] != 0 || len(acts.convicts) != 0 {
				t.Fatalf("verdicts %v, convicted %v: an innocent convicted", pr.verdicts, acts.convicts)
			}
			if !ledger.resting(signalProbe, suspect.ID, now) {
				t.Error("an acquitted suspect is not backed off")
			}
			// An acquittal may be proved again early once, not after
			// that proof's own acquittal.
			if got := ledger.recheckable(backoffKey(signalProbe, suspect.ID), suspect.ID, now); got == tc.recheck {
				t.Errorf("recheckable after the acquittal = %v, want %v", got, !tc.recheck)
			}
		})
	}
}

// readingsProbe reads the same latency on every CPU, whatever is capped:
// first a cold reading, then ns in turn (the last one repeats).
type readingsProbe struct {
	cold  float64
	ns    []float64
	reads int
}

func (r *readingsProbe) measureOnce(domain, cpu int, kinds ...string) ([]sense.ProbeReading, error) {
	ns := r.cold
	if r.reads > 0 {
		ns = r.ns[min(r.reads-1, len(r.ns)-1)]
	}
	r.reads++
	return []sense.ProbeReading{{Domain: domain, CPU: cpu, Kind: kinds[0], Ns: ns}}, nil
}

// Before a probe proof caps anyone, a few readings at the proof's pace
// must show the contention: an LLC walk that read 8× its quiet level once
// in an interval (and again in the first reading after it, its buffer
// still cold) reads 1.0× when read back to back, and a proof there would
// cap its suspect for three quiet trials and nothing else.
func TestProverReadableAtTheProofsPace(t *testing.T) {
	llc := sense.ProbeLLC
	for _, tc := range []struct {
		name string
		kind string
		ns   []float64 // LLC walk latencies, quiet at 100 ns
		want bool
	}{
		{"quiet at the proof's pace", llc, []float64{100, 102, 98}, false},
		{"contended", llc, []float64{600}, true},
		// A slot is quiet under a third of the way from 1× to the
		// contention before, and under 1.3× whatever it was, on the
		// common scale (where the LLC walk's 3× is the DRAM probe's
		// 1.5×); its level is the mean of its readings' log-ratios.
		{"under the quiet level of a 4× contention", llc, []float64{200}, false},
		{"over it", llc, []float64{240}, true},
		{"one stray reading of four", llc, []float64{100, 100, 500, 100}, false},
		{"a burst in one reading of four", llc, []float64{100, 100, 1500, 100}, true},
		// The DRAM chase reads the same at any pace, and a split-lock
		// storm's bursts can miss a few milliseconds of readings: no check.
		{"a DRAM proof", sense.ProbeDRAM, []float64{100}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{}
			cfg.fill()
			cont := judge.NewContention(cfg.Thresholds())
			cont.Calibrate([]sense.ProbeReading{{Domain: 0, CPU: 1, Kind: tc.kind, Ns: 100}})
			// The first reading is cold, the buffer evicted since the
			// interval's: 9× whatever comes next, and it must not count.
			probe := &readingsProbe{cold: 900, ns: tc.ns}
			acts := &fakeActs{}
			pr := newProver(cfg, newProofLedger(cfg.Proof), cont, nil, nil, acts, acts, acts, probe, slog.New(slog.DiscardHandler))
			p := &proof{tenant: sense.Tenant{ID: "/lab/suspect"}, cpu: CPUDomain{0, 1}, kind: tc.kind, signal: signalProbe}
			if got := pr.readable(p, 4); got != tc.want {
				t.Errorf("readable = %v, want %v", got, tc.want)
			}
			want := precheckReadings + 1
			if tc.kind != llc {
				want = 0
			}
			if probe.reads != want {
				t.Errorf("%d readings, want %d", probe.reads, want)
			}
			if len(acts.records) > 0 || acts.capped {
				t.Errorf("the check capped or recorded: %v", acts.records)
			}
		})
	}
}

// slowCaps is fakeActs whose cap and release take a while on the clock (a
// state save on a busy disk); it notes, at each reading, how long the
// suspect's cap state had been in force.
type slowCaps struct {
	fakeActs
	clock   *clock
	write   time.Duration
	changed time.Time
	freed   bool            // the last change freed the suspect
	since   []time.Duration // at each reading: time since the cap state changed
	free    []bool          // and whether the suspect was free
}

func (s *slowCaps) apply(ctx context.Context, t sense.Tenant, q cgroup.Quota, r string, now time.Time) error {
	s.clock.Sleep(s.write)
	s.changed, s.freed = s.clock.Now(), false
	return s.fakeActs.apply(ctx, t, q, r, now)
}

func (s *slowCaps) dropProbeHold(ctx context.Context, t sense.Tenant) {
	s.clock.Sleep(s.write)
	s.changed, s.freed = s.clock.Now(), true
	s.fakeActs.dropProbeHold(ctx, t)
}

func (s *slowCaps) measureOnce(domain, cpu int, kinds ...string) ([]sense.ProbeReading, error) {
	s.since = append(s.since, s.clock.Now().Sub(s.changed))
	s.free = append(s.free, s.freed)
	return s.fakeActs.measureOnce(domain, cpu, kinds...)
}

// A slot is planned from when its cap state is in force, not from the time
// the proof was asked for: a proof starts at its interval's time, after
// that interval's readings, and its first cap waits on a saved intent.
// Every reading of a capped slot comes at least the slot's settling time
// after the cap landed, and every reading of a freed slot at least the
// free lead after the release landed: a freed slot keeps the cap through
// its settle, and a slow release moves its readings, not the lead.
func TestProverPlansSlotsFromTheWrite(t *testing.T) {
	suspect := sense.Tenant{ID: "/lab/suspect", Name: "suspect", CPUs: cpuset.Of(0)}
	cfg := Config{}
	cfg.fill()
	cont := judge.NewContention(cfg.Thresholds())
	cont.Calibrate([]sense.ProbeReading{{Domain: 0, CPU: 1, Kind: sense.ProbeDRAM, Ns: 100}})
	c := newClock()
	acts := &slowCaps{fakeActs: fakeActs{guilty: true}, clock: c, write: 4 * time.Millisecond}
	pr := newProver(cfg, newProofLedger(cfg.Proof), cont, nil, nil, acts, acts, acts, acts, slog.New(slog.DiscardHandler))
	pr.convict = acts.convicted
	pr.clock = c.Now
	// The interval that chose the suspect began 30 ms ago.
	asked := c.Now()
	c.Sleep(30 * time.Millisecond)
	pr.start(context.Background(), asked, &proof{tenant: suspect, cpu: CPUDomain{0, 1}, kind: sense.ProbeDRAM, signal: signalProbe}, 6)
	for i := 0; i < 1000 && pr.proof != nil; i++ {
		c.set(pr.proof.next)
		pr.sample(context.Background(), c.Now())
	}
	if len(acts.convicts) != 1 {
		t.Fatalf("not convicted: %v", pr.verdicts)
	}
	settle, lead := cfg.Proof.Slot/2, cfg.Proof.FreeLead
	freed := 0
	for i, d := range acts.since {
		want := settle
		if acts.free[i] {
			want, freed = lead, freed+1
		}
		if d < want {
			t.Fatalf("reading %d (free %v) came %s after the cap state changed, before %s; all: %v", i, acts.free[i], d, want, acts.since)
		}
	}
	if freed == 0 || freed == len(acts.since) {
		t.Fatalf("%d of %d readings free: want some of each", freed, len(acts.since))
	}
}

// capClock is fakeActs that books, on the clock, how long the suspect was
// capped and free between its first cap and the verdict.
type capClock struct {
	fakeActs
	clock         *clock
	last          time.Time
	capped, freed time.Duration
}

func (c *capClock) book() {
	now := c.clock.Now()
	if !c.last.IsZero() {
		if c.fakeActs.capped {
			c.capped += now.Sub(c.last)
		} else {
			c.freed += now.Sub(c.last)
		}
	}
	c.last = now
}

func (c *capClock) apply(ctx context.Context, t sense.Tenant, q cgroup.Quota, r string, now time.Time) error {
	c.book()
	return c.fakeActs.apply(ctx, t, q, r, now)
}

func (c *capClock) dropProbeHold(ctx context.Context, t sense.Tenant) {
	c.book()
	c.fakeActs.dropProbeHold(ctx, t)
}

// A probe proof holds the cap through each freed slot's settle once the
// cap has lowered the contention, so a polluter runs free for about a
// third of its proof, not half; with the lead at the settle or more,
// half. It convicts all the same. An innocent, whose trials fail, is
// capped half its proof, as without the hold.
func TestProverHoldsTheCapThroughFreedSlotsSettle(t *testing.T) {
	suspect := sense.Tenant{ID: "/lab/suspect", Name: "suspect", CPUs: cpuset.Of(0)}
	for _, tc := range []struct {
		lead     time.Duration
		guilty   bool
		min, max float64 // the share of the proof it ran free
	}{
		{0, true, 0.30, 0.38}, // the default, 3 ms
		{time.Second, true, 0.45, 0.55},
		{0, false, 0.45, 0.55},
	} {
		cfg := Config{}
		cfg.Proof.FreeLead = tc.lead
		cfg.fill()
		cont := judge.NewContention(cfg.Thresholds())
		cont.Calibrate([]sense.ProbeReading{{Domain: 0, CPU: 1, Kind: sense.ProbeDRAM, Ns: 100}})
		c := newClock()
		acts := &capClock{fakeActs: fakeActs{guilty: tc.guilty}, clock: c}
		pr := newProver(cfg, newProofLedger(cfg.Proof), cont, nil, nil, acts, acts, acts, acts, slog.New(slog.DiscardHandler))
		pr.convict = func(ctx context.Context, now time.Time, p *proof, why string) {
			acts.book()
			acts.convicted(ctx, now, p, why)
		}
		pr.clock = c.Now
		pr.start(context.Background(), c.Now(), &proof{tenant: suspect, cpu: CPUDomain{0, 1}, kind: sense.ProbeDRAM, signal: signalProbe}, 6)
		for i := 0; i < 1000 && pr.proof != nil; i++ {
			c.set(pr.proof.next)
			pr.sample(context.Background(), c.Now())
		}
		acts.book()
		if got := len(acts.convicts) == 1; got != tc.guilty {
			t.Fatalf("lead %s, guilty %v: convicted %v: %v", tc.lead, tc.guilty, got, pr.verdicts)
		}
		free := float64(acts.freed) / float64(acts.freed+acts.capped)
		if free < tc.min || free > tc.max {
			t.Errorf("lead %s, guilty %v: free %.2f of the proof (%s free, %s capped), want %.2f to %.2f", tc.lead, tc.guilty, free, acts.freed, acts.capped, tc.min, tc.max)
		}
	}
}
