package agent

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// pacedProbe records which of its readings the agent asks for.
type pacedProbe struct {
	nopProbe
	calls *[]string
}

func (p pacedProbe) MeasureCPU(domain, cpu int, kinds ...string) ([]sense.ProbeReading, error) {
	*p.calls = append(*p.calls, "spread")
	return []sense.ProbeReading{{Domain: domain, CPU: cpu, Kind: sense.ProbeDRAM, Ns: 300}}, nil
}

func (p pacedProbe) MeasureOnce(domain, cpu int, kinds ...string) ([]sense.ProbeReading, error) {
	*p.calls = append(*p.calls, "once")
	return []sense.ProbeReading{{Domain: domain, CPU: cpu, Kind: sense.ProbeDRAM, Ns: 300}}, nil
}

// The interval reads the probe's spread; a proof reads one reading at a
// time (its slots weigh each reading); a probe that cannot read once is
// read whole by both.
func TestProofReadsOnceAndTheIntervalASpread(t *testing.T) {
	var calls []string
	ps := &probeSensor{probe: pacedProbe{calls: &calls}, pending: map[int]*probeRun{}}
	var pr cpuProbe = ps // what the prover reads through
	if _, err := ps.measureCPU(0, 1, sense.ProbeDRAM); err != nil {
		t.Fatal(err)
	}
	if _, err := pr.measureOnce(0, 1, sense.ProbeDRAM); err != nil {
		t.Fatal(err)
	}
	if want := []string{"spread", "once"}; !slices.Equal(calls, want) {
		t.Errorf("readings %v, want %v", calls, want)
	}

	calls = nil
	whole := &probeSensor{probe: wholeProbe{calls: &calls}, pending: map[int]*probeRun{}}
	if _, err := whole.measureOnce(0, 1, sense.ProbeDRAM); err != nil {
		t.Fatal(err)
	}
	if want := []string{"whole"}; !slices.Equal(calls, want) {
		t.Errorf("a probe without MeasureOnce: readings %v, want %v", calls, want)
	}
}

// wholeProbe has no reading at a proof's pace (the simulator's).
type wholeProbe struct {
	nopProbe
	calls *[]string
}

func (p wholeProbe) MeasureCPU(domain, cpu int, kinds ...string) ([]sense.ProbeReading, error) {
	*p.calls = append(*p.calls, "whole")
	return nil, nil
}

// surveyFakes caps and frees for a survey and records nothing else.
type surveyFakes struct{ capped []string }

func (f *surveyFakes) intend([]sense.Tenant, []cgroup.Quota) {}
func (f *surveyFakes) apply(_ context.Context, t sense.Tenant, _ cgroup.Quota, _ string, _ time.Time) error {
	f.capped = append(f.capped, t.Name)
	return nil
}
func (f *surveyFakes) held(string, api.Policy) bool                                        { return false }
func (f *surveyFakes) dropProbeHold(context.Context, sense.Tenant)                         {}
func (f *surveyFakes) recordSlot(time.Time, sense.Tenant, api.ActionKind, float64, string) {}
func (f *surveyFakes) handleWriteErr(context.Context, sense.Tenant, error)                 {}

// The start-up survey reads one reading of each kind while every busy
// tenant is capped: the interval's DRAM spread, pauses and all, would
// keep them capped longer.
func TestSurveyReadsOnce(t *testing.T) {
	var calls []string
	probe := surveyProbe{pacedProbe{calls: &calls}}
	ps := &probeSensor{probe: probe, cont: judge.NewContention(judge.Thresholds{}), pending: map[int]*probeRun{},
		survey: surveyRounds, ledger: newProofLedger(ProofConfig{}), now: time.Now, sleep: func(time.Duration) {}, log: slog.New(slog.DiscardHandler)}
	busy := sample{t: sense.Tenant{ID: "a", Name: "a"}, usage: 1, fresh: true}
	f := &surveyFakes{}
	ps.surveyQuiet(t.Context(), time.Now(), []sample{busy}, testConfig(t.TempDir()), f, f, f)
	if len(f.capped) != 1 {
		t.Fatalf("capped %v, want the busy tenant", f.capped)
	}
	if want := []string{"once", "once"}; !slices.Equal(calls, want) {
		t.Errorf("readings %v, want %v (two rounds of one target)", calls, want)
	}
}

// surveyProbe is pacedProbe with one target.
type surveyProbe struct{ pacedProbe }

func (surveyProbe) Targets() []sense.Target {
	return []sense.Target{{Domain: 0, CPU: 1, Kinds: []string{sense.ProbeDRAM}}}
}
