package judge

import (
	"math"
	"testing"
)

func TestStretch(t *testing.T) {
	for _, tc := range []struct {
		usage, delay, want float64
		ok                 bool
	}{
		{1, 0, 1, true},
		{0.5, 0.5, 2, true},
		{0.25, 0.75, 4, true},
		{0.01, 0.5, 0, false}, // too little CPU to tell
		{0.5, -1, 0, false},
	} {
		got, ok := Stretch(tc.usage, tc.delay)
		if ok != tc.ok || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Stretch(%v, %v) = %v, %v; want %v, %v", tc.usage, tc.delay, got, ok, tc.want, tc.ok)
		}
	}
}

// A victim alone learns its quiet stretch; a neighbour that halves its CPU
// makes it contended on the second interval, persistently; the baseline
// does not learn the contended level; when the neighbour is capped it is
// quiet again.
func TestCPUWaitDetectsAVictimWaiting(t *testing.T) {
	c := NewCPUWait(Thresholds{})
	quiet := []WaitSample{{ID: "victim", Usage: 0.95, Delay: 0.05}, {ID: "idle", Usage: 0.01, Delay: 0.5}}
	for i := range 8 {
		v := c.Update(quiet)
		if v.Contended || v.Persistent {
			t.Fatalf("quiet interval %d judged contended: %+v", i, v)
		}
	}
	base := c.Baselines()["victim"].Level
	if math.Abs(base-1.0/0.95) > 0.01 {
		t.Errorf("quiet stretch %v, want %v", base, 1/0.95)
	}
	if _, judged := c.Baselines()["idle"]; judged {
		t.Error("a tenant using 1% of a CPU got a baseline")
	}
	busy := []WaitSample{{ID: "victim", Usage: 0.5, Delay: 0.55}, {ID: "hog", Usage: 0.5, Delay: 0.5}}
	v1 := c.Update(busy)
	if v1.Contended {
		t.Errorf("contended after one moderate interval: %+v", v1)
	}
	v2 := c.Update(busy)
	if !v2.Contended || !v2.Persistent || len(v2.Victims) != 1 || v2.Victims[0].ID != "victim" {
		t.Fatalf("second interval: %+v", v2)
	}
	if r := v2.Victims[0].Ratio; math.Abs(r-2.1*0.95) > 0.05 {
		t.Errorf("victim ratio %v, want about 2.0", r)
	}
	if v2.Reason == "" || v2.Ratio != v2.Victims[0].Ratio {
		t.Errorf("reason %q, ratio %v", v2.Reason, v2.Ratio)
	}
	// The hog is new: warming up, never a victim.
	for _, r := range v2.Ratings {
		if r.ID == "hog" {
			t.Error("a tenant without a warmed-up baseline was rated")
		}
	}
	for range 10 {
		c.Update(busy)
	}
	if got := c.Baselines()["victim"].Level; got > base*1.01 {
		t.Errorf("baseline learned the contended level: %v (quiet %v)", got, base)
	}
	// Capped neighbour: quiet, and Ratio rates a window without learning.
	if r := c.Ratio("victim", 0.95, 0.06); r > 1.05 {
		t.Errorf("Ratio of a quiet window %v", r)
	}
	if r := c.Ratio("victim", 0.02, 0.9); r != 1 {
		t.Errorf("Ratio with too little CPU use = %v, want 1 (cannot tell)", r)
	}
	if v := c.Update([]WaitSample{{ID: "victim", Usage: 0.95, Delay: 0.05}, {ID: "hog", Usage: 0.06, Delay: 0.9, Exclude: true}}); v.Contended {
		t.Errorf("after the neighbour was capped: %+v", v)
	}
}

// A strong jump counts at once; an excluded tenant (one crosstalk caps) is
// never judged and keeps its baseline; a tenant that leaves is forgotten.
func TestCPUWaitStrongExcludeForget(t *testing.T) {
	c := NewCPUWait(Thresholds{})
	for range 6 {
		c.Update([]WaitSample{{ID: "a", Usage: 1, Delay: 0}, {ID: "b", Usage: 1, Delay: 0.02}})
	}
	v := c.Update([]WaitSample{{ID: "a", Usage: 0.1, Delay: 0.9}, {ID: "b", Usage: 0.1, Delay: 0.9, Exclude: true}})
	if !v.Contended || len(v.Victims) != 1 || v.Victims[0].ID != "a" || v.Persistent {
		t.Fatalf("strong jump: %+v", v)
	}
	if c.Baselines()["b"].N != 6 {
		t.Error("an excluded tenant's baseline learned")
	}
	c.Update([]WaitSample{{ID: "b", Usage: 1, Delay: 0}})
	if _, ok := c.Baselines()["a"]; ok {
		t.Error("a tenant that left is still remembered")
	}
	if r := c.Ratio("a", 0.5, 0.5); r != 1 {
		t.Errorf("Ratio of a forgotten tenant %v", r)
	}
}

// Noise within the learned band is not contention.
func TestCPUWaitNoise(t *testing.T) {
	c := NewCPUWait(Thresholds{})
	delays := []float64{0.05, 0.3, 0.1, 0.4, 0.05, 0.35, 0.2, 0.1, 0.4, 0.3, 0.05, 0.25}
	for round := range 3 {
		for i, d := range delays {
			v := c.Update([]WaitSample{{ID: "v", Usage: 0.8, Delay: d}})
			if round > 0 && v.Contended {
				t.Fatalf("round %d interval %d: noise judged contended: %+v", round, i, v)
			}
		}
	}
}

// Gain says who took CPU since the waits began: the newcomer did, the
// victim lost some; usage is remembered from before the episode and learned
// again once it is over.
func TestCPUWaitGain(t *testing.T) {
	c := NewCPUWait(Thresholds{})
	for range 8 {
		c.Update([]WaitSample{{ID: "victim", Usage: 0.95, Delay: 0.05}, {ID: "old", Usage: 0.3, Delay: 0.01}})
	}
	busy := []WaitSample{{ID: "victim", Usage: 0.5, Delay: 0.55}, {ID: "hog", Usage: 0.5, Delay: 0.5}, {ID: "old", Usage: 0.3, Delay: 0.01}}
	for range 6 {
		c.Update(busy)
	}
	if g := c.Gain("victim", 0.5); math.Abs(g+0.45) > 0.02 {
		t.Errorf("victim gain %v, want -0.45 (it lost CPU)", g)
	}
	if g := c.Gain("hog", 0.5); g != 0.5 {
		t.Errorf("newcomer gain %v, want all of its 0.5", g)
	}
	if g := c.Gain("old", 0.3); math.Abs(g) > 0.01 {
		t.Errorf("a steady neighbour's gain %v, want 0", g)
	}
	// Over: the usual levels are learned again.
	for range 20 {
		c.Update([]WaitSample{{ID: "victim", Usage: 0.5, Delay: 0.02}, {ID: "hog", Usage: 0.5, Delay: 0.02}})
	}
	if g := c.Gain("hog", 0.5); g > 0.05 {
		t.Errorf("after the episode the hog's usage is still not its usual: gain %v", g)
	}
}

// A tenant whose run delay was not read this interval (turns) keeps its
// state: its last rating stands in the verdict, it is not forgotten, and a
// stale interval neither raises nor clears its persistence.
func TestCPUWaitStaleCarriesTheLastRating(t *testing.T) {
	c := NewCPUWait(Thresholds{})
	for range 8 {
		c.Update([]WaitSample{{ID: "victim", Usage: 0.95, Delay: 0.05}})
	}
	busy := WaitSample{ID: "victim", Usage: 0.5, Delay: 0.55}
	c.Update([]WaitSample{busy})
	v := c.Update([]WaitSample{busy})
	if !v.Contended || !v.Persistent {
		t.Fatalf("not contended after two busy readings: %+v", v)
	}
	for i := range 5 {
		s := c.Update([]WaitSample{{ID: "victim", Usage: 0.9, Stale: true}})
		if !s.Contended || !s.Persistent || s.Ratio != v.Ratio || len(s.Victims) != 1 {
			t.Fatalf("stale interval %d lost the verdict: %+v", i, s)
		}
	}
	if _, ok := c.Baselines()["victim"]; !ok {
		t.Fatal("a stale tenant was forgotten")
	}
	// The next reading decides again: back to quiet.
	if q := c.Update([]WaitSample{{ID: "victim", Usage: 0.95, Delay: 0.05}}); q.Contended {
		t.Errorf("quiet reading after stale ones still contended: %+v", q)
	}
	if s := c.Update([]WaitSample{{ID: "victim", Usage: 0.9, Stale: true}}); s.Contended {
		t.Errorf("stale after quiet carried an old contention: %+v", s)
	}
}

// A tenant that waits but gets at least its fair share of the CPUs it
// shares pays the price of sharing and is no victim; the same waits with
// less than its share make it one.
// A tenant that waits longer but still does as much work as before is no
// victim; one that lost CPU is.
func TestCPUWaitNeedsLostWork(t *testing.T) {
	for _, tc := range []struct {
		name   string
		usage  float64
		victim bool
	}{
		{"lost half its CPU", 0.45, true},
		{"same CPU, longer waits", 0.9, false},
	} {
		c := NewCPUWait(Thresholds{})
		for range 8 {
			c.Update([]WaitSample{{ID: "t", Usage: 0.9, Delay: 0.05}})
		}
		var v WaitVerdict
		for range 2 {
			v = c.Update([]WaitSample{{ID: "t", Usage: tc.usage, Delay: 3 * tc.usage}})
		}
		if got := len(v.Victims) == 1; got != tc.victim {
			t.Errorf("%s: victim %v, want %v (%+v)", tc.name, got, tc.victim, v)
		}
	}
}

func TestCPUWaitFairShare(t *testing.T) {
	for _, tc := range []struct {
		name   string
		usage  float64
		fair   float64
		victim bool
		// before is its CPU use before the waits (default 0.95).
		before float64
	}{
		{"below its share", 0.3, 0.5, true, 0},
		{"at its share", 0.5, 0.5, false, 0},
		// Three tenants that want a whole CPU each, read over a window:
		// a third of it each, give or take the scheduler's periods.
		{"a shade under its share", 0.3215, 1.0 / 3, false, 0},
		{"a tenth under its share", 0.29, 1.0 / 3, true, 0},
		{"above its share", 0.8, 0.5, false, 0},
		{"share unknown", 0.8, 0, true, 0},
		// A light service that used 0.15 of a CPU and now gets 0.12,
		// waiting twice that: it asked for 0.36 of a CPU whose fair
		// share is a half. Its waits are wake-up latency behind a busy
		// neighbour, and it would get all it asks for with nobody
		// crowding it out.
		{"asked for less than its share", 0.12, 0.5, false, 0.15},
		{"asked for its share and got less", 0.2, 0.5, true, 0.3},
	} {
		c := NewCPUWait(Thresholds{})
		before := tc.before
		if before == 0 {
			before = 0.95
		}
		for range 8 {
			c.Update([]WaitSample{{ID: "t", Usage: before, Delay: 0.05 * before, Fair: tc.fair}})
		}
		var v WaitVerdict
		for range 2 {
			v = c.Update([]WaitSample{{ID: "t", Usage: tc.usage, Delay: 2 * tc.usage, Fair: tc.fair}})
		}
		if got := len(v.Victims) == 1; got != tc.victim {
			t.Errorf("%s: victim %v, want %v (%+v)", tc.name, got, tc.victim, v)
		}
	}
}
