package sense

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

// scriptedProbe is a probe whose readings come from a script per kind, in
// order, recording the chunks each reading asked for.
func scriptedProbe(t *testing.T, cfg ProbeConfig, script map[string][]float64) (*Probe, *[]string) {
	t.Helper()
	topo := &topology.Topology{Online: cpuset.MustParse("0")}
	p, err := NewProbe(topo, cpuset.MustParse("0"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var calls []string
	p.read = func(kind string, chunks int) float64 {
		calls = append(calls, fmt.Sprintf("%s/%d", kind, chunks))
		v := script[kind]
		if len(v) == 0 {
			t.Fatalf("no reading of %s left", kind)
		}
		script[kind] = v[1:]
		return v[0]
	}
	return p, &calls
}

func TestProbeSpreadOfDRAMReadings(t *testing.T) {
	dram := []float64{330, 2500, 340, 335}
	tests := []struct {
		name    string
		spread  int
		measure func(p *Probe) ([]ProbeReading, error)
		want    map[string][2]float64 // Ns, Peak
		calls   []string
	}{
		{"interval reading: four DRAM readings, their median and their worst; one of each other kind", 0,
			func(p *Probe) ([]ProbeReading, error) { return p.MeasureCPU(0, 0) },
			map[string][2]float64{ProbeLock: {5, 0}, ProbeLLC: {12, 0}, ProbeDRAM: {337.5, 2500}},
			[]string{"lock/7", "llc/7", "dram/7", "dram/7", "dram/7", "dram/7"}},
		{"watch reading: the same spread of whole readings", 0,
			func(p *Probe) ([]ProbeReading, error) { return p.MeasureQuick(0, 0, ProbeDRAM) },
			map[string][2]float64{ProbeDRAM: {337.5, 2500}},
			[]string{"dram/7", "dram/7", "dram/7", "dram/7"}},
		{"watch reading of another kind: two chunks, once", 0,
			func(p *Probe) ([]ProbeReading, error) { return p.MeasureQuick(0, 0, ProbeLLC) },
			map[string][2]float64{ProbeLLC: {12, 0}},
			[]string{"llc/2"}},
		{"watch reading without a spread: two chunks", 1,
			func(p *Probe) ([]ProbeReading, error) { return p.MeasureQuick(0, 0, ProbeDRAM) },
			map[string][2]float64{ProbeDRAM: {330, 0}},
			[]string{"dram/2"}},
		{"proof reading: one of each kind", 0,
			func(p *Probe) ([]ProbeReading, error) { return p.MeasureOnce(0, 0, ProbeDRAM, ProbeLLC) },
			map[string][2]float64{ProbeDRAM: {330, 0}, ProbeLLC: {12, 0}},
			[]string{"dram/7", "llc/7"}},
		{"spread 1: one reading", 1,
			func(p *Probe) ([]ProbeReading, error) { return p.MeasureCPU(0, 0, ProbeDRAM) },
			map[string][2]float64{ProbeDRAM: {330, 0}},
			[]string{"dram/7"}},
		{"spread 2: the mean of two and the worst", 2,
			func(p *Probe) ([]ProbeReading, error) { return p.MeasureCPU(0, 0, ProbeDRAM) },
			map[string][2]float64{ProbeDRAM: {1415, 2500}},
			[]string{"dram/7", "dram/7"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, calls := scriptedProbe(t, ProbeConfig{Spread: tc.spread, SpreadGap: time.Microsecond},
				map[string][]float64{ProbeLock: {5}, ProbeLLC: {12}, ProbeDRAM: slices.Clone(dram)})
			if p.dram == nil {
				t.Skip("no flush chase on this architecture: no DRAM probe")
			}
			rs, err := tc.measure(p)
			if err != nil {
				t.Skipf("cannot pin to CPU 0 here: %v", err)
			}
			got := map[string][2]float64{}
			for _, r := range rs {
				got[r.Kind] = [2]float64{r.Ns, r.Peak}
			}
			for k, w := range tc.want {
				if got[k] != w {
					t.Errorf("%s (ns, peak) = %v, want %v (all: %v)", k, got[k], w, got)
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("kinds read %v, want %v", got, tc.want)
			}
			if !slices.Equal(*calls, tc.calls) {
				t.Errorf("readings taken %v, want %v", *calls, tc.calls)
			}
		})
	}
}

func TestProbeConfigDefaults(t *testing.T) {
	var c ProbeConfig
	c.fill(1 << 20)
	if c.Spread != 4 || c.SpreadGap != 400*time.Microsecond || c.Chunks != 7 || c.LLCBytes != 1088<<10 {
		t.Errorf("defaults = %+v", c)
	}
	c = ProbeConfig{Spread: 1}
	c.fill(1 << 20)
	if c.Spread != 1 {
		t.Errorf("an explicit spread of 1 became %d", c.Spread)
	}
}
