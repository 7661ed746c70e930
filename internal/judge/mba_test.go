package judge

import (
	"math"
	"testing"
	"time"
)

const gbs = 1e9

// Alita's numbers on an Intel socket with 10% MBA steps: 48 CPUs, a
// 4-vCPU streaming VM moving 40 GB/s and eleven 4-vCPU VMs 1.5 GB/s each;
// threshold 50 GB/s, guard 5, floor 20%.
func TestMemBWThrottleAlita(t *testing.T) {
	m := NewMemBWThrottle(AlitaMBA())
	t0 := time.Unix(0, 0)
	dom := func(streamer float64) MBADomain {
		d := MBADomain{ID: 0, CPUs: 48, Tenants: []MBATenant{{ID: "stream", CPUs: 4, BytesPerSec: streamer}}}
		for i := 0; i < 11; i++ {
			d.Tenants = append(d.Tenants, MBATenant{ID: string(rune('a' + i)), CPUs: 4, BytesPerSec: 1.5 * gbs})
		}
		return d
	}
	var rates []float64
	for i := 0; i < 6; i++ {
		// The streamer keeps the domain over 50 GB/s (say others fill in).
		d := dom(40 * gbs)
		d.TotalBytesPerSec = 60 * gbs
		for _, a := range m.Step(MBAInput{Now: t0.Add(time.Duration(i) * 5 * time.Second), Domains: []MBADomain{d}}) {
			if a.Tenant != "stream" {
				t.Fatalf("under-share tenant throttled: %+v", a)
			}
			if a.ReferenceBytesPerSec != 40*gbs {
				t.Errorf("reference %v", a.ReferenceBytesPerSec)
			}
			rates = append(rates, a.Fraction)
		}
	}
	// 100% → 50 → 25, which the hardware applies as 30 → 15 → 20 (floor).
	want := []float64{0.5, 0.3, 0.2}
	if len(rates) != len(want) {
		t.Fatalf("rates %v, want %v", rates, want)
	}
	for i := range want {
		if math.Abs(rates[i]-want[i]) > 1e-9 {
			t.Fatalf("rates %v, want %v", rates, want)
		}
	}
	// Between threshold-guard and threshold: hold.
	d := dom(10 * gbs)
	d.TotalBytesPerSec = 47 * gbs
	if acts := m.Step(MBAInput{Now: t0.Add(time.Minute), Domains: []MBADomain{d}}); len(acts) != 0 {
		t.Fatalf("in the guard band: %+v", acts)
	}
	// Pressure gone: doubling back, then released.
	var back []float64
	released := false
	for i := 0; i < 6; i++ {
		d := dom(10 * gbs)
		for _, a := range m.Step(MBAInput{Now: t0.Add(2*time.Minute + time.Duration(i)*5*time.Second), Domains: []MBADomain{d}}) {
			back = append(back, a.Fraction)
			released = released || a.Release
		}
	}
	if len(back) != 3 || math.Abs(back[0]-0.4) > 1e-9 || math.Abs(back[1]-0.8) > 1e-9 || back[2] != 1 || !released || len(m.Throttled()) != 0 {
		t.Errorf("relax %v released %v throttled %+v", back, released, m.Throttled())
	}
}

// AMD: no steps, absolute limits from the reference; a floor from config;
// a throttled tenant that stops is released.
func TestMemBWThrottleAMDAndStop(t *testing.T) {
	m := NewMemBWThrottle(MBAConfig{ThresholdBytesPerSec: 20 * gbs, RelaxGuardBytesPerSec: 2 * gbs, Floor: 0.2})
	t0 := time.Unix(0, 0)
	d := MBADomain{ID: 3, CPUs: 8, Tenants: []MBATenant{{ID: "s", CPUs: 2, BytesPerSec: 18 * gbs}, {ID: "v", CPUs: 6, BytesPerSec: 3 * gbs}}}
	var fr []float64
	for i := 0; i < 5; i++ {
		for _, a := range m.Step(MBAInput{Now: t0.Add(time.Duration(i) * time.Second), Domains: []MBADomain{d}}) {
			fr = append(fr, a.Fraction)
		}
	}
	if len(fr) != 3 || fr[0] != 0.5 || fr[1] != 0.25 || fr[2] != 0.2 {
		t.Fatalf("AMD rates %v", fr)
	}
	d.Tenants = d.Tenants[1:]
	d.TotalBytesPerSec = 25 * gbs // still busy, but s is gone
	acts := m.Step(MBAInput{Now: t0.Add(time.Minute), Domains: []MBADomain{d}})
	if len(acts) != 1 || !acts[0].Release || acts[0].Tenant != "s" {
		t.Errorf("stop: %+v", acts)
	}
	// Zero traffic never counts as over-share.
	m = NewMemBWThrottle(MBAConfig{ThresholdBytesPerSec: 1})
	idle := MBADomain{ID: 0, CPUs: 4, Tenants: []MBATenant{{ID: "x", CPUs: 4}}, TotalBytesPerSec: 5}
	if acts := m.Step(MBAInput{Now: t0, Domains: []MBADomain{idle}}); len(acts) != 0 {
		t.Errorf("idle tenant throttled: %+v", acts)
	}
}
