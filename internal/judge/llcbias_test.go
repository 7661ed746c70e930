package judge

import (
	"math"
	"testing"
	"time"
)

const mb = 1 << 20

func TestBhattacharyya(t *testing.T) {
	for _, tc := range []struct {
		p, q []float64
		want float64
	}{
		{[]float64{1, 1, 1}, []float64{10, 10, 10}, 1},
		{[]float64{1, 0}, []float64{0, 1}, 0},
		{[]float64{1, 1}, []float64{0, 0}, 1}, // nothing cached: nothing unfair
		// Alita's LLC experiment: three 4-vCPU VMs on one socket, two
		// attackers holding 20 and 8 MB, the victim 2 MB.
		{[]float64{4, 4, 4}, []float64{20, 8, 2}, math.Sqrt(1.0/3) * (math.Sqrt(20.0/30) + math.Sqrt(8.0/30) + math.Sqrt(2.0/30))},
	} {
		if got := BhattacharyyaCoefficient(tc.p, tc.q); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("BC(%v, %v) = %v, want %v", tc.p, tc.q, got, tc.want)
		}
	}
	if bc := BhattacharyyaCoefficient([]float64{4, 4, 4}, []float64{20, 8, 2}); bc > 0.95 || bc < 0.91 {
		t.Errorf("Alita's scenario BC %.4f should be below the 0.95 threshold (0.9186)", bc)
	}
}

func TestIsolationWaysAndShares(t *testing.T) {
	for _, tc := range []struct {
		ways      int
		cpus, dom float64
		want      int
	}{
		{11, 4, 48, 2},  // Xeon Platinum 8163: 24 cores × 2 threads, 11 ways
		{11, 24, 48, 7}, // half the socket: ceil(5.5)+1
		{11, 48, 48, 12},
		{16, 8, 8, 17},
		{16, 2, 8, 5}, // a Milan CCD: 8 CPUs, 16 ways
	} {
		if got := IsolationWays(tc.ways, tc.cpus, tc.dom); got != tc.want {
			t.Errorf("IsolationWays(%d, %v, %v) = %d, want %d", tc.ways, tc.cpus, tc.dom, got, tc.want)
		}
	}
	d := BiasDomain{SizeBytes: 33 * mb, CPUs: 48, Tenants: []BiasTenant{{CPUs: 4}, {CPUs: 8}}}
	if s := d.Shares(); s[0] != 33*mb*4/48 || s[1] != 33*mb*8/48 {
		t.Errorf("pinned shares %v", s)
	}
	// Unpinned tenants all see every CPU: shares still add up to the LLC.
	d = BiasDomain{SizeBytes: 32 * mb, CPUs: 8, Tenants: []BiasTenant{{CPUs: 8}, {CPUs: 8}}}
	if s := d.Shares(); s[0] != 16*mb || s[1] != 16*mb {
		t.Errorf("overlapping shares %v", s)
	}
}

// alitaSocket is the SC20 LLC experiment on one Xeon Platinum 8163 socket:
// 33 MB, 11 ways, 48 CPUs; two 4-vCPU attackers and a 4-vCPU victim.
func alitaSocket(att1, att2, victim uint64) BiasDomain {
	return BiasDomain{ID: 0, SizeBytes: 33 * mb, Ways: 11, CPUs: 48, Tenants: []BiasTenant{
		{ID: "attacker1", CPUs: 4, OccupancyBytes: att1},
		{ID: "attacker2", CPUs: 4, OccupancyBytes: att2},
		{ID: "victim", CPUs: 4, OccupancyBytes: victim},
	}}
}

func TestBiasIsolationAlitaScenario(t *testing.T) {
	b := NewBiasIsolation(AlitaBias())
	t0 := time.Unix(0, 0)
	step := func(i int, d BiasDomain) BiasResult {
		return b.Step(BiasInput{Now: t0.Add(time.Duration(i) * 5 * time.Second), Domains: []BiasDomain{d}})
	}
	// Unfair from the start: the smoothed BC crosses 0.95 only at the third
	// interval (the window starts at 1.0: 0.976, 0.959, 0.943).
	for i := 0; i < 2; i++ {
		if r := step(i, alitaSocket(20*mb, 8*mb, 2*mb)); len(r.Actions) != 0 || r.Verdicts[0].Smoothed <= 0.95 {
			t.Fatalf("interval %d: %+v", i, r)
		}
	}
	r := step(2, alitaSocket(20*mb, 8*mb, 2*mb))
	if v := r.Verdicts[0]; !v.Busy || v.Smoothed > 0.95 || v.Abuser != "attacker1" || math.Abs(v.Smoothed-0.9430) > 1e-3 {
		t.Fatalf("interval 2 verdict %+v", v)
	}
	if len(r.Actions) != 1 || r.Actions[0] != (CacheAction{Tenant: "attacker1", Domain: 0, Ways: 2, Slot: 0, Reason: r.Actions[0].Reason}) {
		t.Fatalf("interval 2: %+v, want attacker1 alone to 2 ways in slot 0", r.Actions)
	}
	// Confined to 2 of 11 ways, attacker1 holds 6 MB; attacker2 is now the
	// one furthest above its 2.75 MB share and gets the other end.
	var got []CacheAction
	for i := 3; i < 9; i++ {
		got = append(got, step(i, alitaSocket(6*mb, 14*mb, 2*mb)).Actions...)
	}
	if len(got) != 1 || got[0].Tenant != "attacker2" || got[0].Ways != 2 || got[0].Slot != 1 {
		t.Fatalf("second abuser: %+v", got)
	}
	if iso := b.Isolated(); len(iso) != 2 || iso[0].Tenant != "attacker1" || iso[1].Tenant != "attacker2" {
		t.Fatalf("isolated %+v", iso)
	}
	// Fair again: one way more per 30 s relax period, whole cache at 11.
	fair := alitaSocket(3*mb, 3*mb, 3*mb)
	ways := map[string][]int{}
	var released []string
	for i := 9; i < 80; i++ {
		for _, a := range step(i, fair).Actions {
			if a.Release {
				released = append(released, a.Tenant)
			} else {
				ways[a.Tenant] = append(ways[a.Tenant], a.Ways)
			}
		}
	}
	for _, tn := range []string{"attacker1", "attacker2"} {
		w := ways[tn]
		if len(w) != 8 || w[0] != 3 || w[7] != 10 {
			t.Errorf("%s relaxed %v, want 3..10 one way at a time", tn, w)
		}
	}
	if len(released) != 2 || len(b.Isolated()) != 0 {
		t.Errorf("released %v, isolated %+v", released, b.Isolated())
	}
}

func TestBiasIsolationQuietAndStops(t *testing.T) {
	b := NewBiasIsolation(BiasConfig{})
	t0 := time.Unix(0, 0)
	// Biased but not busy (under 10% of the LLC in use): nothing.
	for i := 0; i < 10; i++ {
		r := b.Step(BiasInput{Now: t0.Add(time.Duration(i) * 5 * time.Second), Domains: []BiasDomain{alitaSocket(2*mb, 0, 0)}})
		if len(r.Actions) != 0 || r.Verdicts[0].Busy {
			t.Fatalf("idle cache: %+v", r)
		}
	}
	for i := 10; i < 14; i++ {
		b.Step(BiasInput{Now: t0.Add(time.Duration(i) * 5 * time.Second), Domains: []BiasDomain{alitaSocket(25*mb, 1*mb, 1*mb)}})
	}
	if iso := b.Isolated(); len(iso) != 1 || iso[0].Tenant != "attacker1" {
		t.Fatalf("isolated %+v", iso)
	}
	// The abuser stops: released at once, even though fairness is not back.
	d := alitaSocket(0, 1*mb, 1*mb)
	d.Tenants = d.Tenants[1:]
	r := b.Step(BiasInput{Now: t0.Add(70 * time.Second), Domains: []BiasDomain{d}})
	if len(r.Actions) != 1 || !r.Actions[0].Release || r.Actions[0].Tenant != "attacker1" {
		t.Fatalf("stop: %+v", r.Actions)
	}
	// An abuser whose formula gives the whole cache is not isolated.
	b = NewBiasIsolation(BiasConfig{})
	big := BiasDomain{ID: 1, SizeBytes: 32 * mb, Ways: 16, CPUs: 8, Tenants: []BiasTenant{{ID: "all", CPUs: 8, OccupancyBytes: 30 * mb}, {ID: "x", CPUs: 0, OccupancyBytes: 1}}}
	for i := 0; i < 10; i++ {
		if r := b.Step(BiasInput{Now: t0.Add(time.Duration(i) * time.Second), Domains: []BiasDomain{big}}); len(r.Actions) != 0 {
			t.Fatalf("whole-cache abuser isolated: %+v", r.Actions)
		}
	}
	// A domain that leaves the input releases its holders.
	b = NewBiasIsolation(BiasConfig{})
	for i := 0; i < 4; i++ {
		b.Step(BiasInput{Now: t0.Add(time.Duration(i) * 5 * time.Second), Domains: []BiasDomain{alitaSocket(25*mb, 1*mb, 1*mb)}})
	}
	if r := b.Step(BiasInput{Now: t0.Add(time.Minute)}); len(r.Actions) != 1 || !r.Actions[0].Release {
		t.Errorf("domain gone: %+v", r.Actions)
	}
}

// With both ends taken, a third abuser waits until a holder has been
// isolated for the replace period, then takes that holder's end.
func TestBiasIsolationReplace(t *testing.T) {
	b := NewBiasIsolation(BiasConfig{})
	t0 := time.Unix(0, 0)
	dom := func(a, c, e uint64) BiasDomain {
		return BiasDomain{ID: 0, SizeBytes: 33 * mb, Ways: 11, CPUs: 48, Tenants: []BiasTenant{
			{ID: "a", CPUs: 4, OccupancyBytes: a}, {ID: "c", CPUs: 4, OccupancyBytes: c}, {ID: "e", CPUs: 4, OccupancyBytes: e}, {ID: "v", CPUs: 4, OccupancyBytes: mb}}}
	}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for s := 0; s <= 20; s += 5 {
		b.Step(BiasInput{Now: at(s), Domains: []BiasDomain{dom(20*mb, 4*mb, 4*mb)}})
	}
	for s := 25; s <= 50; s += 5 {
		b.Step(BiasInput{Now: at(s), Domains: []BiasDomain{dom(6*mb, 20*mb, 4*mb)}})
	}
	if iso := b.Isolated(); len(iso) != 2 {
		t.Fatalf("isolated %+v", iso)
	}
	var acts []CacheAction
	for s := 55; s <= 120; s += 5 {
		acts = append(acts, b.Step(BiasInput{Now: at(s), Domains: []BiasDomain{dom(6*mb, 6*mb, 20*mb)}}).Actions...)
	}
	if len(acts) < 2 || !acts[0].Release || acts[0].Tenant != "a" || acts[1].Tenant != "e" || acts[1].Slot != acts[0].Slot {
		t.Fatalf("replace: %+v", acts)
	}
}

// With misses measured, the two ways Alita's occupancy rule isolated the
// victim in the simulator do not happen: a tenant using spare cache that
// nobody below its share misses is left alone, and while a streamer ramps
// up the victim that held the cache first is not taken for the abuser.
func TestBiasIsolationWithMisses(t *testing.T) {
	t0 := time.Unix(0, 0)
	dom := func(victimOcc, streamOcc uint64, victimMiss, streamMiss, bystanderMiss float64) BiasDomain {
		return BiasDomain{ID: 0, SizeBytes: 32 * mb, Ways: 16, CPUs: 12, Tenants: []BiasTenant{
			{ID: "victim", CPUs: 4, OccupancyBytes: victimOcc, MissBytesPerSec: victimMiss, HasMisses: true},
			{ID: "streamer", CPUs: 4, OccupancyBytes: streamOcc, MissBytesPerSec: streamMiss, HasMisses: true},
			{ID: "bystander", CPUs: 4, OccupancyBytes: 1 * mb, MissBytesPerSec: bystanderMiss, HasMisses: true},
		}}
	}
	// A DRAM-bound victim alone fills the cache, far above its share; the
	// bystander below its share hardly misses: nobody is deprived.
	b := NewBiasIsolation(BiasConfig{BusyFraction: 0.9})
	for i := range 10 {
		r := b.Step(BiasInput{Now: t0.Add(time.Duration(i) * time.Second), Domains: []BiasDomain{dom(30*mb, 0, 4e9, 0, 1e6)}})
		if len(r.Actions) != 0 {
			t.Fatalf("spare cache in use: isolated %+v", r.Actions)
		}
	}
	// Without miss data the same domain isolates the victim (Alita's rule):
	// the refinement is what changes it.
	a := NewBiasIsolation(BiasConfig{BusyFraction: 0.9})
	var got []CacheAction
	for i := range 10 {
		d := dom(30*mb, 0, 0, 0, 0)
		for j := range d.Tenants {
			d.Tenants[j].HasMisses = false
		}
		got = append(got, a.Step(BiasInput{Now: t0.Add(time.Duration(i) * time.Second), Domains: []BiasDomain{d}}).Actions...)
	}
	if len(got) == 0 || got[0].Tenant != "victim" {
		t.Fatalf("without misses Alita's rule should pick the victim here: %+v", got)
	}
	// A streamer arrives: the victim, cache-resident until now, held the
	// cache and its smoothed occupancy lags; it is the streamer that misses
	// most, and the victim, squeezed to 5 MiB of its 10.7 MiB share and
	// missing, is deprived. While the streamer ramps up (under its share,
	// missing the most) it is not taken for a deprived tenant.
	b = NewBiasIsolation(BiasConfig{BusyFraction: 0.9})
	for i := range 6 {
		b.Step(BiasInput{Now: t0.Add(time.Duration(i) * time.Second), Domains: []BiasDomain{dom(10*mb, 0, 1e6, 0, 1e6)}})
	}
	var acts []CacheAction
	for i := 6; i < 12; i++ {
		acts = append(acts, b.Step(BiasInput{Now: t0.Add(time.Duration(i) * time.Second), Domains: []BiasDomain{dom(5*mb, 25*mb, 900e6, 6e9, 1e6)}}).Actions...)
	}
	if len(acts) == 0 || acts[0].Tenant != "streamer" {
		t.Fatalf("want the streamer isolated first, got %+v", acts)
	}
	for _, x := range acts {
		if x.Tenant != "streamer" {
			t.Errorf("innocent isolated: %+v", x)
		}
	}
	// A streamer that has just started: under its share and missing the
	// most, but no victim is short of cache: nothing.
	b = NewBiasIsolation(BiasConfig{BusyFraction: 0.9})
	for i := range 8 {
		if r := b.Step(BiasInput{Now: t0.Add(time.Duration(i) * time.Second), Domains: []BiasDomain{dom(28*mb, 2*mb, 4e9, 9e9, 1e6)}}); len(r.Actions) != 0 {
			t.Fatalf("a ramping streamer counted as deprived: %+v", r.Actions)
		}
	}
}
