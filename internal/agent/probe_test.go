package agent

import (
	"slices"
	"testing"

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
