package judge

import (
	"math"
	"testing"
)

// cpiSample is a tenant running at cpi cycles an instruction on usage
// CPUs of 3 GHz.
func cpiSample(id string, cpi, usage float64) CPISample {
	cycles := 3e9 * usage
	return CPISample{ID: id, Cycles: cycles, Instructions: cycles / cpi, Usage: usage}
}

func TestCPIOfAndWindowCPI(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		cycles, instr, usage, got float64
		ok                        bool
	}{
		{"busy", 3e9, 2e9, 1, 1.5, true},
		{"nearly idle", 3e7, 2e7, 0.01, 0, false},
		{"no instructions counted", 3e9, 0, 1, 0, false},
		{"too few instructions", 3e6, 5e5, 0.5, 0, false},
	} {
		got, ok := CPIOf(tc.cycles, tc.instr, tc.usage)
		if ok != tc.ok || math.Abs(got-tc.got) > 1e-9 {
			t.Errorf("%s: CPIOf = %v, %v; want %v, %v", tc.name, got, ok, tc.got, tc.ok)
		}
	}
	// A 25 ms window: 75M cycles, 50M instructions.
	if got, ok := WindowCPI(75e6, 50e6, 0.025); !ok || math.Abs(got-1.5) > 1e-9 {
		t.Errorf("WindowCPI = %v, %v; want 1.5, true", got, ok)
	}
	// A victim that hardly ran in the window says nothing.
	if _, ok := WindowCPI(1e4, 1e4, 0.025); ok {
		t.Error("WindowCPI judged a window of 10k instructions")
	}
	if _, ok := WindowCPI(75e6, 50e6, 0); ok {
		t.Error("WindowCPI judged an empty window")
	}
}

// A victim learns its usual CPI; a neighbour that takes its cache makes
// its CPI 1.6× on two intervals in a row: contended on the second,
// persistently, with the contended level never learned; a busy but
// cache-friendly tenant beside it is never a victim.
func TestCPIDetectsAVictimSlowedPerInstruction(t *testing.T) {
	c := NewCPI(Thresholds{Ratio: 1.3, Strong: 2})
	quiet := []CPISample{cpiSample("victim", 0.8, 1), cpiSample("steady", 0.5, 1), cpiSample("idle", 5, 0.01)}
	for i := range 8 {
		if v := c.Update(quiet); v.Contended || v.Persistent || v.Ratio > 1.0001 {
			t.Fatalf("quiet interval %d: %+v", i, v)
		}
	}
	if b := c.Baselines()["victim"]; math.Abs(b.Level-0.8) > 1e-6 {
		t.Errorf("victim's usual CPI %v, want 0.8", b.Level)
	}
	if _, ok := c.Baselines()["idle"]; ok {
		t.Error("a tenant using 1% of a CPU got a baseline")
	}
	slowed := []CPISample{cpiSample("victim", 1.28, 1), cpiSample("steady", 0.5, 1)}
	if v := c.Update(slowed); v.Contended {
		t.Errorf("contended after one moderate interval: %+v", v)
	}
	v := c.Update(slowed)
	if !v.Contended || !v.Persistent || len(v.Victims) != 1 || v.Victims[0].ID != "victim" {
		t.Fatalf("second slowed interval: %+v", v)
	}
	if r := v.Victims[0].Ratio; math.Abs(r-1.6) > 1e-6 || v.Ratio != r || v.Reason == "" {
		t.Errorf("victim ratio %v (verdict %v, reason %q), want 1.6", r, v.Ratio, v.Reason)
	}
	for range 10 {
		c.Update(slowed)
	}
	if b := c.Baselines()["victim"]; math.Abs(b.Level-0.8) > 1e-6 {
		t.Errorf("the contended CPI was learned: baseline %v", b.Level)
	}
	if r := c.Ratio("victim", 0.8); math.Abs(r-1) > 1e-9 {
		t.Errorf("Ratio at the usual CPI = %v, want 1", r)
	}
}

func TestCPIStrongCountsAtOnceAndModerateIsLearned(t *testing.T) {
	c := NewCPI(Thresholds{Ratio: 1.3, Strong: 2})
	for range 6 {
		c.Update([]CPISample{cpiSample("v", 1, 1)})
	}
	if v := c.Update([]CPISample{cpiSample("v", 2.5, 1)}); !v.Contended || v.Persistent {
		t.Errorf("a 2.5× CPI at once: %+v; want contended, not yet persistent", v)
	}
	c = NewCPI(Thresholds{Ratio: 1.3, Strong: 2})
	for range 6 {
		c.Update([]CPISample{cpiSample("v", 1, 1)})
	}
	for i := range 5 {
		if v := c.Update([]CPISample{cpiSample("v", 1.15, 1)}); v.Contended {
			t.Fatalf("a 1.15× CPI (under the ratio) judged contended at %d: %+v", i, v)
		}
	}
	if b := c.Baselines()["v"]; b.Level <= 1 {
		t.Errorf("a moderate rise was not learned at all: %v", b.Level)
	}
}

// A tenant crosstalk caps is neither judged nor learned from: its CPI is
// crosstalk's doing. One that leaves is forgotten.
func TestCPIExcludesCappedAndForgetsGone(t *testing.T) {
	c := NewCPI(Thresholds{Ratio: 1.3, Strong: 2})
	for range 6 {
		c.Update([]CPISample{cpiSample("v", 1, 1), cpiSample("w", 1, 1)})
	}
	capped := cpiSample("v", 3, 0.1)
	capped.Exclude = true
	for range 3 {
		if v := c.Update([]CPISample{capped, cpiSample("w", 1, 1)}); v.Contended {
			t.Fatalf("a capped tenant judged: %+v", v)
		}
	}
	if b := c.Baselines()["v"]; b.Level != 1 {
		t.Errorf("a capped tenant's CPI was learned: %v", b.Level)
	}
	c.Update([]CPISample{cpiSample("w", 1, 1)})
	if _, ok := c.Baselines()["v"]; ok {
		t.Error("a tenant that left is still remembered")
	}
	if r := c.Ratio("v", 2); r != 1 {
		t.Errorf("Ratio of a forgotten tenant = %v, want 1", r)
	}
}

// A tenant's LLC misses are remembered while no CPI is over the threshold
// and held through an episode: one missing as much as before did not
// change with it, one missing twice as much did, and one new since did.
func TestCPIOnset(t *testing.T) {
	c := NewCPI(Thresholds{Ratio: 1.3, Strong: 2})
	heavy := func(cpi float64) []CPISample {
		v := cpiSample("victim", cpi, 1)
		h := cpiSample("heavy", 4, 1)
		h.LLCMisses, h.MissesCounted = 9e7, true
		return []CPISample{v, h}
	}
	for range 8 {
		c.Update(heavy(0.8))
	}
	if !c.Onset("new", 5e7) || c.Onset("heavy", 9e7) || !c.Onset("heavy", 1.8e8) {
		t.Errorf("onset: new %v, heavy as before %v, heavy doubled %v; want true, false, true",
			c.Onset("new", 5e7), c.Onset("heavy", 9e7), c.Onset("heavy", 1.8e8))
	}
	// During an episode what is missed is not learned.
	for range 5 {
		s := heavy(1.6)
		s[1].LLCMisses = 3e8
		c.Update(s)
	}
	if !c.Onset("heavy", 3e8) {
		t.Error("misses during the episode were learned as usual")
	}
}

// A seeded baseline is judged from the next interval: a victim whose usual
// was learned under a polluter already running reads contended once seeded
// with its CPI without it. A warmed-up baseline under the seed stays; one
// over it is replaced. The misses learned before the seed were under the
// contention it reveals, so every heavy misser has changed with it.
func TestCPISeed(t *testing.T) {
	c := NewCPI(Thresholds{Ratio: 1.3, Strong: 2})
	polluted := []CPISample{cpiSample("victim", 1.6, 1), cpiSample("streamer", 2.5, 1)}
	polluted[1].LLCMisses, polluted[1].MissesCounted = 2e8, true
	for i := range 6 {
		if v := c.Update(polluted); v.Contended {
			t.Fatalf("interval %d under the polluter from the start: %+v (its usual is that)", i, v)
		}
	}
	if c.Onset("streamer", 2e8) {
		t.Fatal("the streamer changed with an episode before any: the test is wrong")
	}
	c.Seed("victim", 0.8)
	if !c.Onset("streamer", 2e8) {
		t.Error("after the seed, the streamer's misses still count as from before the episode")
	}
	var v CPIVerdict
	for range 2 {
		v = c.Update(polluted)
	}
	if !v.Contended || !v.Persistent || len(v.Victims) != 1 || v.Victims[0].ID != "victim" || math.Abs(v.Ratio-2) > 1e-6 {
		t.Errorf("seeded at 0.8 and running at 1.6: %+v, want the victim contended at 2×", v)
	}
	// Seeding higher than a warmed-up baseline keeps it; lower replaces it.
	c.Seed("victim", 1.2)
	if b := c.Baselines()["victim"]; math.Abs(b.Level-0.8) > 1e-6 {
		t.Errorf("a seed over the baseline moved it to %v", b.Level)
	}
	c.Seed("victim", 0.7)
	if b := c.Baselines()["victim"]; math.Abs(b.Level-0.7) > 1e-6 || b.N < cpiWarmup {
		t.Errorf("a seed under the baseline left %+v, want 0.7 warmed up", b)
	}
	c.Seed("nobody", 0)
	if _, ok := c.Baselines()["nobody"]; ok {
		t.Error("a seed of 0 made a baseline")
	}
}
