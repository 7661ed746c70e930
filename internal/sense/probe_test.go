package sense

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
	p.read = func(kind string, chunks int) []float64 {
		calls = append(calls, fmt.Sprintf("%s/%d", kind, chunks))
		v := script[kind]
		if len(v) == 0 {
			t.Fatalf("no reading of %s left", kind)
		}
		script[kind] = v[1:]
		return []float64{v[0]} // one chunk: the reading is its value
	}
	p.sleep = func(d time.Duration) { calls = append(calls, "gap "+d.String()) }
	return p, &calls
}

func TestProbeSpreadOfDRAMReadings(t *testing.T) {
	dram := []float64{330, 2500, 340, 335, 332, 338, 331, 336}
	tests := []struct {
		name    string
		spread  int
		proofCh int // ProofChunks
		reads   int // ProofReads
		measure func(p *Probe) ([]ProbeReading, error)
		want    map[string][2]float64 // Ns, Peak
		calls   []string
	}{
		{"interval reading: eight DRAM readings in pairs, their median and their worst; one of each other kind", 0, 0, 0,
			func(p *Probe) ([]ProbeReading, error) { return p.MeasureCPU(0, 0) },
			map[string][2]float64{ProbeLock: {5, 0}, ProbeLLC: {12, 0}, ProbeDRAM: {335.5, 2500}},
			[]string{"lock/7", "llc/7", "dram/7", "dram/7", "gap 1µs", "dram/7", "dram/7", "gap 1µs", "dram/7", "dram/7", "gap 1µs", "dram/7", "dram/7"}},
		{"watch reading: the same spread of whole readings", 0, 0, 0,
			func(p *Probe) ([]ProbeReading, error) { return p.MeasureQuick(0, 0, ProbeDRAM) },
			map[string][2]float64{ProbeDRAM: {335.5, 2500}},
			[]string{"dram/7", "dram/7", "gap 1µs", "dram/7", "dram/7", "gap 1µs", "dram/7", "dram/7", "gap 1µs", "dram/7", "dram/7"}},
		{"an odd spread: the last pair is one reading", 3, 0, 0,
			func(p *Probe) ([]ProbeReading, error) { return p.MeasureCPU(0, 0, ProbeDRAM) },
			map[string][2]float64{ProbeDRAM: {340, 2500}},
			[]string{"dram/7", "dram/7", "gap 1µs", "dram/7"}},
		{"watch reading of another kind: two chunks, once", 0, 0, 0,
			func(p *Probe) ([]ProbeReading, error) { return p.MeasureQuick(0, 0, ProbeLLC) },
			map[string][2]float64{ProbeLLC: {12, 0}},
			[]string{"llc/2"}},
		{"watch reading without a spread: two chunks", 1, 0, 0,
			func(p *Probe) ([]ProbeReading, error) { return p.MeasureQuick(0, 0, ProbeDRAM) },
			map[string][2]float64{ProbeDRAM: {330, 0}},
			[]string{"dram/2"}},
		{"proof reading: two DRAM readings of three chunks back to back, at their worst; one of each other kind", 0, 0, 0,
			func(p *Probe) ([]ProbeReading, error) { return p.MeasureOnce(0, 0, ProbeDRAM, ProbeLLC) },
			map[string][2]float64{ProbeDRAM: {2500, 0}, ProbeLLC: {12, 0}},
			[]string{"dram/3", "dram/3", "llc/7"}},
		{"proof reading with proof_chunks 5", 0, 5, 0,
			func(p *Probe) ([]ProbeReading, error) { return p.MeasureOnce(0, 0, ProbeDRAM, ProbeLLC) },
			map[string][2]float64{ProbeDRAM: {2500, 0}, ProbeLLC: {12, 0}},
			[]string{"dram/5", "dram/5", "llc/7"}},
		{"proof reading with proof_reads 1: one DRAM reading", 0, 0, 1,
			func(p *Probe) ([]ProbeReading, error) { return p.MeasureOnce(0, 0, ProbeDRAM, ProbeLLC) },
			map[string][2]float64{ProbeDRAM: {330, 0}, ProbeLLC: {12, 0}},
			[]string{"dram/3", "llc/7"}},
		{"proof reading with proof_reads 3", 0, 0, 3,
			func(p *Probe) ([]ProbeReading, error) { return p.MeasureOnce(0, 0, ProbeDRAM) },
			map[string][2]float64{ProbeDRAM: {2500, 0}},
			[]string{"dram/3", "dram/3", "dram/3"}},
		{"spread 1: one reading", 1, 0, 0,
			func(p *Probe) ([]ProbeReading, error) { return p.MeasureCPU(0, 0, ProbeDRAM) },
			map[string][2]float64{ProbeDRAM: {330, 0}},
			[]string{"dram/7"}},
		{"spread 2: the mean of two and the worst", 2, 0, 0,
			func(p *Probe) ([]ProbeReading, error) { return p.MeasureCPU(0, 0, ProbeDRAM) },
			map[string][2]float64{ProbeDRAM: {1415, 2500}},
			[]string{"dram/7", "dram/7"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, calls := scriptedProbe(t, ProbeConfig{Spread: tc.spread, ProofChunks: tc.proofCh, ProofReads: tc.reads, SpreadGap: time.Microsecond},
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
	if c.Spread != 8 || c.SpreadGap != 400*time.Microsecond || c.Chunks != 7 || c.ProofChunks != 3 || c.LLCBytes != 1088<<10 {
		t.Errorf("defaults = %+v", c)
	}
	c = ProbeConfig{Spread: 1, Chunks: 2}
	c.fill(1 << 20)
	if c.Spread != 1 {
		t.Errorf("an explicit spread of 1 became %d", c.Spread)
	}
	if c.ProofChunks != 2 {
		t.Errorf("with 2 chunks a proof's reading takes %d, want no more than the interval's", c.ProofChunks)
	}
}

func TestLLCWarmupFollowsTheCycle(t *testing.T) {
	topo := &topology.Topology{Online: cpuset.MustParse("0")}
	p, err := NewProbe(topo, cpuset.MustParse("0"), ProbeConfig{LLCBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	n := len(p.llc) / 8
	if len(p.llcOrder) != n || n != 1024 {
		t.Fatalf("%d slots in the order, %d in the buffer, want 1024", len(p.llcOrder), n)
	}
	// The warm-up must leave the cache in the order the timed walk
	// visits it: the cycle's order from slot 0, every slot once.
	seen := make([]bool, n)
	for i, s := range p.llcOrder {
		if seen[s] {
			t.Fatalf("slot %d warmed twice", s)
		}
		seen[s] = true
		if i == 0 {
			continue
		}
		if want := p.llc[uint64(p.llcOrder[i-1])*8]; uint64(s) != want {
			t.Fatalf("warm-up load %d is slot %d, the cycle goes to %d", i, s, want)
		}
	}
	if p.llcOrder[0] != 0 || p.llc[uint64(p.llcOrder[n-1])*8] != 0 {
		t.Errorf("the warm-up does not start where the timed walk does (slot 0) and close the cycle")
	}
	if ns := Median(p.measureChunks(ProbeLLC, 7)); !(ns > 0) {
		t.Errorf("an LLC reading of %v ns", ns)
	}
}

// evictCaches walks a buffer far beyond any L3, as the tenants do between
// two of the probe's readings.
func evictCaches(buf []uint64) uint64 {
	var s uint64
	for i := 0; i < len(buf); i += 8 {
		buf[i]++
		s += buf[i]
	}
	return s
}

// BenchmarkProbeLLCReading measures what one LLC reading costs the CPU it
// runs on, from a buffer evicted since the last reading: the warm-up that
// loads the cycle's slots independently (MLP) and the timed walk of 7/16 of
// it, against the dependent warm-up walk and whole timed walk it replaced
// (the reference below), in one run.
func BenchmarkProbeLLCReading(b *testing.B) {
	topo := &topology.Topology{Online: cpuset.MustParse("0")}
	p, err := NewProbe(topo, cpuset.MustParse("0"), ProbeConfig{LLCBytes: 1088 << 10})
	if err != nil {
		b.Fatal(err)
	}
	big := make([]uint64, 64<<20/8)
	var sink uint64
	dependent := func() float64 {
		slots := uint64(len(p.llc) / 8)
		pos := uint64(0)
		for range slots {
			pos = p.llc[pos*8]
		}
		ns := make([]float64, 0, 7)
		for range 7 {
			ops := int(slots) / 7
			t0 := time.Now()
			for range ops {
				pos = p.llc[pos*8]
			}
			ns = append(ns, float64(time.Since(t0).Nanoseconds())/float64(ops))
		}
		sink += pos
		return Median(ns)
	}
	for _, c := range []struct {
		name string
		read func() float64
	}{
		{"independent-warmup", func() float64 { return Median(p.measureChunks(ProbeLLC, 7)) }},
		{"dependent-warmup-reference", dependent},
	} {
		b.Run(c.name, func(b *testing.B) {
			var lat float64
			for b.Loop() {
				b.StopTimer()
				sink += evictCaches(big)
				b.StartTimer()
				lat += c.read()
			}
			b.ReportMetric(lat/float64(b.N), "ns/load")
		})
	}
	p.sink.Add(sink)
}

func TestProbeBooksItsCPUTimeByReading(t *testing.T) {
	topo := &topology.Topology{Online: cpuset.MustParse("0")}
	p, err := NewProbe(topo, cpuset.MustParse("0"), ProbeConfig{SpreadGap: time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	kind := ProbeLLC
	if p.dram != nil {
		kind = ProbeDRAM
	}
	if _, err := p.MeasureOnce(0, 0, kind); err != nil {
		t.Skipf("cannot pin to CPU 0 here: %v", err)
	}
	if _, err := p.MeasureQuick(0, 0, kind); err != nil {
		t.Fatal(err)
	}
	got := p.Spent()
	for _, k := range []ProbeSpent{{0, ReadingProof}, {0, ReadingWatch}} {
		if got[k] <= 0 {
			t.Errorf("%+v spent %v, want the reading's CPU time (all: %v)", k, got[k], got)
		}
	}
	if d, ok := got[ProbeSpent{0, ReadingInterval}]; ok {
		t.Errorf("no interval reading was taken, but %v was booked to one", d)
	}
	before := got[ProbeSpent{0, ReadingProof}]
	if _, err := p.MeasureOnce(0, 0, kind); err != nil {
		t.Fatal(err)
	}
	if after := p.Spent()[ProbeSpent{0, ReadingProof}]; after <= before {
		t.Errorf("a second proof reading left the proofs' time at %v (was %v): it must add up", after, before)
	}
}

func TestProbeConfigChunkCounts(t *testing.T) {
	for _, c := range []struct {
		cfg           ProbeConfig
		chunks, proof int
	}{
		{ProbeConfig{}, 7, 3},
		{ProbeConfig{Chunks: 2}, 2, 2},
		{ProbeConfig{Chunks: 9, ProofChunks: 5}, 9, 5},
		{ProbeConfig{ProofChunks: 8}, 7, 8},
	} {
		if chunks, proof := c.cfg.ChunkCounts(); chunks != c.chunks || proof != c.proof {
			t.Errorf("%+v: %d and %d chunks, want %d and %d", c.cfg, chunks, proof, c.chunks, c.proof)
		}
	}
}

// The probe's pinned thread measures at the lowest real-time priority and
// is put back as it was; without the privilege it stays as it is.
func TestProbeRealtimeIsUndone(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		t.Skipf("sched_getattr: %v", err)
	}
	undo, rtErr := realtime()
	during, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	undo()
	after, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if after.Policy != before.Policy || after.Priority != before.Priority || after.Nice != before.Nice {
		t.Errorf("after: policy %d priority %d nice %d, want %d %d %d as before", after.Policy, after.Priority, after.Nice, before.Policy, before.Priority, before.Nice)
	}
	switch {
	case rtErr != nil:
		if during.Policy != before.Policy {
			t.Errorf("refused (%v): policy %d during, want it left at %d", rtErr, during.Policy, before.Policy)
		}
		if os.Geteuid() == 0 {
			t.Logf("root, but no real-time priority here: %v", rtErr)
		}
	case during.Policy != unix.SCHED_FIFO || during.Priority != 1:
		t.Errorf("policy %d priority %d during, want SCHED_FIFO (%d) at 1", during.Policy, during.Priority, unix.SCHED_FIFO)
	}
}

// A storm in bursts shorter than a reading slows a few adjacent chunks of a
// reading and no reading's median: the spread's Burst reads it at the level
// two adjacent chunks both reach, its Peak (the worst reading) does not.
// Slow chunks that are not side by side (an interrupt, the host preempting
// the vCPU, each slowing one chunk) do not count, however many readings
// have one.
func TestProbeSpreadReadsBurstsShorterThanAReading(t *testing.T) {
	quiet := []float64{350, 352, 348, 351, 349, 353, 350}
	burst := func(slow ...int) []float64 {
		c := slices.Clone(quiet)
		for _, i := range slow {
			c[i] = 2450
		}
		return c
	}
	for _, c := range []struct {
		name     string
		readings [][]float64 // the spread's eight readings' chunks
		level    float64     // the worse of Peak and Burst; 0: no slower than a quiet chunk (353)
		burst    bool        // the level is the Burst's, the Peak quiet
	}{
		{"quiet", [][]float64{quiet, quiet, quiet, quiet, quiet, quiet, quiet, quiet}, 0, false},
		{"a burst over two adjacent chunks of one reading", [][]float64{quiet, quiet, quiet, burst(3, 4), quiet, quiet, quiet, quiet}, 2450, true},
		{"a burst at a reading's end", [][]float64{quiet, burst(5, 6), quiet, quiet, quiet, quiet, quiet, quiet}, 2450, true},
		{"the pair's faster chunk is the level", [][]float64{quiet, quiet, {350, 352, 1400, 2450, 349, 353, 350}, quiet, quiet, quiet, quiet, quiet}, 1400, true},
		{"slow chunks apart in one reading", [][]float64{quiet, burst(0, 2, 4), quiet, quiet, quiet, quiet, quiet, burst(1, 6)}, 0, false},
		{"one slow chunk in each reading", [][]float64{burst(6), burst(0), burst(2), burst(3), burst(1), burst(5), burst(4), burst(6)}, 0, false},
		{"the last chunk of one reading and the first of the next", [][]float64{burst(6), burst(0), quiet, quiet, quiet, quiet, quiet, quiet}, 0, false},
		{"a storm through one reading: its median", [][]float64{quiet, quiet, burst(0, 1, 2, 3, 4, 5, 6), quiet, quiet, quiet, quiet, quiet}, 2450, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			topo := &topology.Topology{Online: cpuset.MustParse("0")}
			p, err := NewProbe(topo, cpuset.MustParse("0"), ProbeConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if p.dram == nil {
				t.Skip("no DRAM probe in this build")
			}
			i := 0
			p.read = func(kind string, chunks int) []float64 {
				if kind != ProbeDRAM {
					return []float64{1}
				}
				r := c.readings[i]
				i++
				return r
			}
			p.sleep = func(time.Duration) {}
			rs, err := p.MeasureQuick(0, 0, ProbeDRAM)
			if err != nil {
				t.Skipf("cannot pin to CPU 0 here: %v", err)
			}
			got := rs[0]
			if got.Ns > 353 {
				t.Errorf("Ns %.0f, want quiet (353 or less)", got.Ns)
			}
			level := max(got.Peak, got.Burst)
			if c.level == 0 && level > 353 {
				t.Errorf("Peak %.0f, Burst %.0f, want both quiet (353 or less)", got.Peak, got.Burst)
			}
			if c.level != 0 && level != c.level {
				t.Errorf("Peak %.0f, Burst %.0f, want the worse %.0f", got.Peak, got.Burst, c.level)
			}
			if c.burst && got.Peak > 353 {
				t.Errorf("Peak %.0f, want quiet: no reading's median is slow, the burst is the Burst's", got.Peak)
			}
		})
	}
}
