package judge

import (
	"math"
	"strings"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

func TestBaselineResistsContention(t *testing.T) {
	var b Baseline
	for _, x := range []float64{100, 104, 98, 101, 99} {
		b.Observe(x, false)
	}
	if b.Level < 97 || b.Level > 103 {
		t.Fatalf("quiet level = %v", b.Level)
	}
	// An hour of contention must not become the normal.
	for range 7200 {
		b.Observe(800, true)
	}
	if b.Level > 103 {
		t.Errorf("level crept to %v under contention", b.Level)
	}
	// A quieter reading is taken quickly; louder quiet readings slowly.
	b.Observe(60, false)
	if b.Level > 85 {
		t.Errorf("level %v did not follow a quieter reading", b.Level)
	}
	lvl := b.Level
	b.Observe(200, false)
	if b.Level-lvl > 0.06*(200-lvl)+1e-9 {
		t.Errorf("level jumped from %v to %v on one louder reading", lvl, b.Level)
	}
	if !b.Above(b.Level*3, 1.5, 4) || b.Above(b.Level*1.1, 1.5, 4) {
		t.Error("Above thresholds")
	}
	var empty Baseline
	if empty.Ratio(5) != 1 || empty.Above(1e9, 1.5, 4) {
		t.Error("empty baseline must be neutral")
	}
	b.Observe(math.NaN(), false)
	b.Observe(-1, false)
	if math.IsNaN(b.Level) || b.Level <= 0 {
		t.Error("bad readings corrupted the baseline")
	}
}

func readings(domain int, cpuNs map[int][2]float64) []sense.ProbeReading {
	var out []sense.ProbeReading
	for cpu, ns := range cpuNs {
		out = append(out, sense.ProbeReading{Domain: domain, CPU: cpu, Kind: sense.ProbeLLC, Ns: ns[0]},
			sense.ProbeReading{Domain: domain, CPU: cpu, Kind: sense.ProbeDRAM, Ns: ns[1]})
	}
	return out
}

func TestContentionVerdict(t *testing.T) {
	c := NewContention(Thresholds{})
	quiet := map[int][2]float64{0: {75, 350}, 1: {78, 360}}
	for range 3 {
		c.Calibrate(readings(0, quiet))
	}
	if v := c.Update(readings(0, quiet)); v.Contended || v.Ratio > 1.1 {
		t.Fatalf("quiet judged contended: %+v", v)
	}
	// A moderate rise of the DRAM probe (2×) needs two readings in a row.
	mod := map[int][2]float64{0: {78, 360}, 1: {78, 720}}
	if v := c.Update(readings(0, mod)); v.Contended {
		t.Error("one moderate reading judged contended")
	}
	if v := c.Update(readings(0, mod)); !v.Contended || v.Domains[0] != 0 || !v.Persistent {
		t.Errorf("two moderate readings not contended: %+v", v)
	}
	c.Update(readings(0, quiet))
	// The LLC probe shares the LLC with tenants: 2.5× from an LLC-heavy
	// neighbour is not contention, and its ratio is scaled down.
	llcBusy := map[int][2]float64{0: {78, 360}, 1: {190, 360}}
	for range 3 {
		if v := c.Update(readings(0, llcBusy)); v.Contended || v.Ratio >= 1.5 {
			t.Fatalf("LLC-heavy neighbour judged contended: %+v", v)
		}
	}
	c.Update(readings(0, quiet))
	// A split-lock storm (8×) counts at once, and the CPU ratios say where.
	storm := map[int][2]float64{0: {80, 360}, 1: {600, 2100}}
	v := c.Update(readings(0, storm))
	if !v.Contended || v.Ratio < 5 || v.Reason == "" || v.Persistent {
		t.Fatalf("storm: %+v", v)
	}
	if len(v.CPUs) != 2 || v.CPUs[0].Ratio > 1.2 || v.CPUs[1].Ratio < 5 {
		t.Errorf("per-CPU ratios %+v", v.CPUs)
	}
	// The storm did not teach the baseline.
	for range 50 {
		c.Update(readings(0, storm))
	}
	if b := c.Baselines()["0/llc"]; b.Level > 90 {
		t.Errorf("llc baseline learned the storm: %v", b.Level)
	}
	saved := c.Baselines()
	c2 := NewContention(Thresholds{})
	c2.Restore(saved)
	if v := c2.Update(readings(0, storm)); !v.Contended {
		t.Error("restored baselines lost")
	}
}

// A DRAM spread's peak (its worst reading) or burst level (two adjacent
// chunks of one reading) counts only where it is strong: a storm that comes
// and goes shows in them and counts at once, in an interval and in a watch,
// and the reason says which counted; a moderate peak from a neighbour's
// memory traffic counts for nothing, the median decides; and a reading
// whose peak counted does not teach the baseline.
func TestContentionCountsAStrongPeak(t *testing.T) {
	quiet := []sense.ProbeReading{{Domain: 0, CPU: 1, Kind: sense.ProbeDRAM, Ns: 300}}
	spread := func(ns, peak, burst float64) []sense.ProbeReading {
		return []sense.ProbeReading{{Domain: 0, CPU: 1, Kind: sense.ProbeDRAM, Ns: ns, Peak: peak, Burst: burst}}
	}
	fresh := func() *Contention {
		c := NewContention(Thresholds{})
		for _, ns := range []float64{300, 304, 297, 301} {
			c.Calibrate([]sense.ProbeReading{{Domain: 0, CPU: 1, Kind: sense.ProbeDRAM, Ns: ns}})
		}
		c.Update(quiet)
		return c
	}
	tests := []struct {
		name            string
		ns, peak, burst float64
		contended       bool
		ratioFrom       float64 // the verdict's ratio at least, and under ratioTo
		ratioTo         float64
		counted         string // the reason names the latency that counted so, where contended
	}{
		{"a storm in one reading of four: counts at once", 305, 2400, 330, true, 7.5, 8.5, "at 2400 ns (the worst reading of its spread), "},
		{"a storm in bursts shorter than a reading: counts at once", 305, 320, 2400, true, 7.5, 8.5, "at 2400 ns (in bursts: two adjacent chunks of one reading), "},
		{"a moderate peak: the median decides, quiet", 305, 700, 0, false, 0.9, 1.1, ""},
		{"a peak at 3.5×, under strong: quiet", 305, 1050, 0, false, 0.9, 1.1, ""},
		{"a burst level at 3.5×, under strong: quiet", 305, 320, 1050, false, 0.9, 1.1, ""},
		{"no spread (a single reading at 8×): counts at once", 2400, 0, 0, true, 7.5, 8.5, "at 2400 ns, "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := fresh()
			v := c.Update(spread(tc.ns, tc.peak, tc.burst))
			if v.Contended != tc.contended || v.Ratio < tc.ratioFrom || v.Ratio >= tc.ratioTo {
				t.Errorf("verdict contended %v ratio %.2f, want %v in [%.1f, %.1f): %s", v.Contended, v.Ratio, tc.contended, tc.ratioFrom, tc.ratioTo, v.Reason)
			}
			if tc.contended && !strings.Contains(v.Reason, tc.counted) {
				t.Errorf("reason %q does not name the latency that counted and what it is (%q)", v.Reason, tc.counted)
			}
			if len(v.Readings) != 1 || (tc.contended && v.Readings[0].Latency != 2400) || (!tc.contended && v.Readings[0].Latency != tc.ns) {
				t.Errorf("rated readings %+v", v.Readings)
			}
			for range 30 {
				c.Update(spread(tc.ns, tc.peak, tc.burst))
			}
			// A contended reading teaches nothing; a quiet one teaches its
			// median (305 ns), never its peak.
			level := c.Baselines()["0/dram"].Level
			if tc.contended && level >= 300 || !tc.contended && (level <= 300 || level > tc.ns) {
				t.Errorf("baseline level %.1f after 30 such readings (quiet level about 299)", level)
			}
			w := fresh()
			if got := w.Mark(spread(tc.ns, tc.peak, tc.burst)); got != tc.contended {
				t.Errorf("watch marked %v, want %v", got, tc.contended)
			}
		})
	}
}

// A contended watch reading between intervals counts for persistence: the
// interval it brings forward, contended too, is persistent at once. A quiet
// one does not count, and a watch never teaches the baseline.
func TestContentionMarkCountsTheWatch(t *testing.T) {
	quiet := map[int][2]float64{0: {75, 350}, 1: {78, 360}}
	storm := map[int][2]float64{0: {80, 360}, 1: {600, 2100}}
	fresh := func() *Contention {
		c := NewContention(Thresholds{})
		for range 3 {
			c.Calibrate(readings(0, quiet))
		}
		c.Update(readings(0, quiet))
		return c
	}
	c := fresh()
	if c.Mark(readings(0, quiet)) {
		t.Error("a quiet watch marked contended")
	}
	if v := c.Update(readings(0, storm)); v.Persistent {
		t.Error("one storm interval after a quiet watch is persistent")
	}
	c = fresh()
	if !c.Mark(readings(0, storm)) {
		t.Fatal("a storm watch not marked")
	}
	if v := c.Update(readings(0, storm)); !v.Contended || !v.Persistent {
		t.Errorf("a storm interval after a storm watch: %+v, want persistent", v)
	}
	c = fresh()
	for range 50 {
		c.Mark(readings(0, storm))
	}
	if b := c.Baselines()["0/dram"]; b.Level > 400 {
		t.Errorf("the watch taught the baseline: %v", b.Level)
	}
}

// The lab's buslock-burst layout: victim and a light bystander run from the
// start, the polluter starts later. Its CPU use is the one that tracks the
// contention.
func TestRankCorrelation(t *testing.T) {
	s := NewSuspects(16)
	domains := map[int]cpuset.Set{0: cpuset.Of(0, 1)}
	views := func(polluter float64) []TenantView {
		return []TenantView{
			{ID: "victim", CPUs: cpuset.Of(1), Usage: 1.0},
			{ID: "polluter", CPUs: cpuset.Of(0), Usage: polluter},
			{ID: "bystander", CPUs: cpuset.Of(0), Usage: 0.15},
			{ID: "idle", CPUs: cpuset.Of(0, 1), Usage: 0.01},
			{ID: "vip", CPUs: cpuset.Of(0), Usage: 0.9, Protected: true},
		}
	}
	for range 4 {
		s.Observe(Verdict{Ratio: 1}, views(0))
	}
	storm := Verdict{Contended: true, Ratio: 8, Domains: []int{0}}
	s.Observe(storm, views(0.85))
	got := s.Rank(storm, views(0.85), domains, nil)
	if len(got) != 3 || got[0].ID != "polluter" {
		t.Fatalf("ranking %+v", got)
	}
	if got[0].Score <= got[1].Score {
		t.Errorf("polluter %v not above %v", got[0].Score, got[1].Score)
	}
	// Only the polluter has more than CPU use against it.
	for _, s := range got {
		if s.Evidence != (s.ID == "polluter") {
			t.Errorf("%s: evidence %v", s.ID, s.Evidence)
		}
	}
	skipped := s.Rank(storm, views(0.85), domains, func(id string) bool { return id == "polluter" })
	if skipped[0].ID == "polluter" {
		t.Error("skip ignored")
	}
	// A tenant off the contended domain is never a suspect.
	other := Verdict{Contended: true, Ratio: 8, Domains: []int{1}}
	if got := s.Rank(other, views(0.85), map[int]cpuset.Set{0: cpuset.Of(0, 1), 1: cpuset.Of(2, 3)}, nil); len(got) != 0 {
		t.Errorf("suspects off the contended L3: %+v", got)
	}
}

func TestRankCounters(t *testing.T) {
	s := NewSuspects(16)
	domains := map[int]cpuset.Set{0: cpuset.Of(0, 1, 2, 3)}
	all := cpuset.Of(0, 1, 2, 3)
	tenants := []TenantView{
		{ID: "busy", CPUs: all, Usage: 3, Counters: map[string]float64{"bus_locks": 100}},
		{ID: "locker", CPUs: all, Usage: 0.5, Counters: map[string]float64{"bus_locks": 700000}},
	}
	v := Verdict{Contended: true, Ratio: 6, Domains: []int{0}}
	s.Observe(v, tenants)
	got := s.Rank(v, tenants, domains, nil)
	if got[0].ID != "locker" || !got[0].Evidence || got[1].Evidence {
		t.Errorf("bus-lock evidence ignored: %+v", got)
	}
}

// Without a PMU, the kernel naming a tenant's thread for bus locks puts it
// above a busier tenant; a report for a tenant off the contended CPUs, or
// one idle, puts it nowhere.
func TestRankKernelReports(t *testing.T) {
	s := NewSuspects(16)
	domains := map[int]cpuset.Set{0: cpuset.Of(0, 1, 2, 3), 1: cpuset.Of(4, 5, 6, 7)}
	tenants := []TenantView{
		{ID: "busy", CPUs: cpuset.Of(0, 1, 2, 3), Usage: 3},
		{ID: "locker", CPUs: cpuset.Of(2), Usage: 0.5, KernelBusLocks: 4},
		{ID: "elsewhere", CPUs: cpuset.Of(5), Usage: 1, KernelBusLocks: 10},
		{ID: "idle", CPUs: cpuset.Of(1), Usage: 0.01, KernelBusLocks: 10},
	}
	v := Verdict{Contended: true, Ratio: 6, Domains: []int{0}}
	s.Observe(v, tenants)
	got := s.Rank(v, tenants, domains, nil)
	if len(got) != 2 || got[0].ID != "locker" || got[1].ID != "busy" || !got[0].Evidence || got[1].Evidence {
		t.Fatalf("ranking = %+v, want locker (with evidence) then busy", got)
	}
	if !strings.Contains(strings.Join(got[0].Reasons, "; "), "the kernel reported 4 bus lock(s)") {
		t.Errorf("locker's reasons do not say why: %q", got[0].Reasons)
	}
	tenants[1].KernelBusLocks = 0
	if got := s.Rank(v, tenants, domains, nil); got[0].ID != "busy" {
		t.Errorf("without the reports the busier tenant should lead: %+v", got)
	}
}

func TestCorrelation(t *testing.T) {
	if c := correlation([]float64{0, 1, 0, 1}, []float64{1, 8, 1, 8}); math.Abs(c-1) > 1e-9 {
		t.Errorf("perfect correlation = %v", c)
	}
	if c := correlation([]float64{1, 1, 1}, []float64{1, 8, 1}); c != 0 {
		t.Errorf("flat series = %v", c)
	}
	if c := correlation([]float64{1, 0, 1, 0}, []float64{1, 8, 1, 8}); c > -0.99 {
		t.Errorf("anti-correlation = %v", c)
	}
}

// While a polluter is held down, the probes on its domain read its
// remainder: under the contention threshold, above quiet. Without Hold the
// baseline learns it and the remainder vanishes from the ratio (which made
// the duty controller relax held polluters back to full speed); with Hold
// the baseline keeps the quiet level, and quieter readings still lower it.
func TestHoldKeepsBaselineFromRising(t *testing.T) {
	quiet := map[int][2]float64{0: {75, 350}}
	remainder := map[int][2]float64{0: {75, 420}} // 1.2×: under the 1.5× threshold
	run := func(hold bool) (float64, float64) {
		c := NewContention(Thresholds{})
		for range 4 {
			c.Calibrate(readings(0, quiet))
		}
		if hold {
			c.Hold([]int{0})
		}
		var v Verdict
		for range 100 {
			v = c.Update(readings(0, remainder))
		}
		return c.Baselines()["0/dram"].Level, v.Ratio
	}
	if level, ratio := run(false); level < 400 || ratio > 1.05 {
		t.Fatalf("without a hold the baseline should learn the remainder (the defect): level %.0f, ratio %.2f", level, ratio)
	}
	level, ratio := run(true)
	if level > 351 || ratio < 1.19 {
		t.Errorf("held domain: baseline rose to %.0f ns, ratio %.2f; want 350 ns and 1.2×", level, ratio)
	}
	// Quieter readings still teach a held domain, and releasing the hold
	// lets it learn upwards again.
	c := NewContention(Thresholds{})
	c.Calibrate(readings(0, quiet))
	c.Hold([]int{0})
	c.Update(readings(0, map[int][2]float64{0: {70, 300}}))
	if l := c.Baselines()["0/dram"].Level; l >= 350 {
		t.Errorf("a quieter reading did not lower a held baseline: %.0f", l)
	}
	c.Hold(nil)
	before := c.Baselines()["0/dram"].Level
	c.Update(readings(0, remainder))
	if c.Baselines()["0/dram"].Level <= before {
		t.Error("after the hold was lifted the baseline no longer learns")
	}
}
