package judge

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

const pmInterval = 500 * time.Millisecond

// TestPermitsKyoto replays Kyoto's effectiveness experiment (§4.3): gcc
// (v_sen1) and lbm (v_dis1), one vCPU each, both booked 250k. The paper
// gives the bookings; the measured llc_cap_act values here (gcc 120k, lbm
// 400k) are assumptions in the order of its Fig. 4 (lbm the most
// aggressive, gcc in the middle). lbm runs flat out while UNDER and at the
// floor duty while OVER: the zigzag of Kyoto's Fig. 5.
func TestPermitsKyoto(t *testing.T) {
	p := NewPermits(PermitsConfig{Tenants: map[string]float64{"gcc": 250000, "lbm": 250000}})
	at := time.Unix(0, 0)
	lbmUse := 1.0
	var changes []string
	var polluted, elapsed float64
	for i := 0; i < 400; i++ { // 200 s
		at = at.Add(pmInterval)
		d := p.Observe(PermitSample{At: at, Duration: pmInterval, Tenants: []PermitTenant{
			{ID: "/vm/gcc", Name: "gcc", Kind: "vm", LLCCapAct: 120000, Measured: true, Usage: 1, CPUs: 1},
			{ID: "/vm/lbm", Name: "lbm", Kind: "vm", LLCCapAct: 400000, Measured: true, Usage: lbmUse, CPUs: 1},
		}})
		polluted += 400000 * lbmUse * pmInterval.Seconds()
		elapsed += pmInterval.Seconds()
		for _, x := range d {
			if x.Tenant != "/vm/lbm" {
				t.Fatalf("%.1fs: %s changed state: %+v", at.Sub(time.Unix(0, 0)).Seconds(), x.Tenant, x)
			}
			if x.State == PermitOver {
				lbmUse = x.CapCores
			} else {
				lbmUse = 1
			}
			if len(changes) < 4 {
				changes = append(changes, fmt.Sprintf("%.1fs %s %.0f", at.Sub(time.Unix(0, 0)).Seconds(), x.State, x.Credit))
			}
		}
		if i == 6 {
			// Credit starts at 2 s of booking (500k) and loses 125k - 200k
			// = 75k per interval: -25k after 7 intervals.
			if len(d) != 1 || d[0].CapCores != 0.0625 || d[0].Duty != 0.0625 ||
				d[0].Reason != "credit -25000 below 0: polluting at 400000 (llc_cap_act) on 1.00 CPUs against a booked llc_cap of 250000 (tenant)" {
				t.Errorf("first OVER: %+v", d)
			}
		}
	}
	// At the floor it earns 125k and pays 12.5k: UNDER after one interval;
	// then two intervals flat out take it below zero again.
	if got := strings.Join(changes, ", "); got != "3.5s OVER -25000, 4.0s UNDER 87500, 5.0s OVER -62500, 5.5s UNDER 50000" {
		t.Errorf("state changes: %s", got)
	}
	// Kyoto's promise: over time lbm pollutes at its booking.
	if rate := polluted / elapsed; math.Abs(rate-250000)/250000 > 0.03 {
		t.Errorf("lbm polluted at %.0f on average, booked 250000", rate)
	}
	st := p.Status()
	if len(st) != 2 || st[0].Tenant != "/vm/gcc" || st[0].Credit != 500000 || st[0].Limit != 500000 || st[0].State != PermitUnder || st[0].Act != 120000 || st[0].BookedBy != "tenant" {
		t.Errorf("gcc status %+v", st)
	}
}

func TestPermitsBooking(t *testing.T) {
	c := PermitsConfig{
		Default: 1000,
		Classes: []PermitClass{
			{Name: "hpc", Kind: "vm", Match: "hpc-*", LLCCap: 50000},
			{Name: "pods", Kind: "pod", LLCCap: 20000},
			{Name: "batch", Match: "batch-*", LLCCap: 0}, // exempt
		},
		Tenants: map[string]float64{"/machine/special": 9, "named": 7},
	}
	for _, x := range []struct {
		id, name, kind string
		want           float64
		by             string
	}{
		{"/machine/special", "hpc-1", "vm", 9, "tenant"}, // by ID before any class
		{"/x", "named", "vm", 7, "tenant"},               // by name
		{"/y", "hpc-2", "vm", 50000, "class hpc"},
		{"/y", "hpc-2", "container", 1000, "default"}, // class needs kind vm
		{"/z", "web", "pod", 20000, "class pods"},
		{"/b", "batch-7", "container", 0, "class batch"},
		{"/q", "other", "cgroup", 1000, "default"},
	} {
		got, by := c.Booking(x.id, x.name, x.kind)
		if got != x.want || by != x.by {
			t.Errorf("%s %s %s: %g (%s), want %g (%s)", x.id, x.name, x.kind, got, by, x.want, x.by)
		}
	}
	if (&PermitsConfig{}).Active() || !c.Active() {
		t.Error("Active")
	}
	// An exempt or unbooked tenant is never policed however much it pollutes.
	p := NewPermits(PermitsConfig{Classes: c.Classes[2:]})
	for i := 1; i <= 20; i++ {
		d := p.Observe(PermitSample{At: time.Unix(int64(i), 0), Duration: time.Second, Tenants: []PermitTenant{
			{ID: "/b", Name: "batch-1", LLCCapAct: 1e9, Measured: true, Usage: 8, CPUs: 8},
			{ID: "/n", Name: "nobody", LLCCapAct: 1e9, Measured: true, Usage: 8, CPUs: 8}}})
		if len(d) != 0 || len(p.Status()) != 0 {
			t.Fatalf("unbooked tenants policed: %+v %+v", d, p.Status())
		}
	}
}

func TestPermitsStaleGoneProtected(t *testing.T) {
	p := NewPermits(PermitsConfig{Default: 1000, Burst: time.Second})
	at := time.Unix(0, 0)
	obs := func(ts ...PermitTenant) []PermitDecision {
		at = at.Add(time.Second)
		return p.Observe(PermitSample{At: at, Duration: time.Second, Tenants: ts})
	}
	// Measured once at 3000 on 1 CPU: -2000 per second; starts at 1000.
	if d := obs(PermitTenant{ID: "a", LLCCapAct: 3000, Measured: true, Usage: 1, CPUs: 4}); len(d) != 1 || d[0].State != PermitOver || d[0].CapCores != 0.25 {
		t.Fatalf("over: %+v", d)
	}
	// Not counted since: for 5 s the last rate stands. Capped at 0.25 CPU
	// it pays 750 and earns 1000 a second: -750, -500, -250, 0 (no change
	// at exactly 0), then 250: UNDER.
	for i, want := range []float64{-750, -500, -250, 0} {
		if d := obs(PermitTenant{ID: "a", Usage: 0.25, CPUs: 4}); len(d) != 0 || p.Status()[0].Credit != want || p.Status()[0].State != PermitOver {
			t.Errorf("stale %d s: %+v %+v, want credit %g", i+1, d, p.Status(), want)
		}
	}
	if d := obs(PermitTenant{ID: "a", Usage: 0.25, CPUs: 4}); len(d) != 1 || d[0].State != PermitUnder || d[0].Credit != 250 {
		t.Errorf("recovered with the stale rate: %+v", d)
	}
	// Past Stale nothing is debited, however busy: credit climbs to its limit.
	obs(PermitTenant{ID: "a", Usage: 4, CPUs: 4})
	if st := p.Status()[0]; st.Credit != 1000 || st.State != PermitUnder {
		t.Errorf("unmeasured past stale: %+v", st)
	}
	// OVER again, then protected: released.
	obs(PermitTenant{ID: "a", LLCCapAct: 5000, Measured: true, Usage: 1, CPUs: 1})
	if d := obs(PermitTenant{ID: "a", LLCCapAct: 5000, Measured: true, Usage: 1, CPUs: 1, Protected: true}); len(d) != 1 || d[0].State != PermitUnder || d[0].Reason != "tenant is protected" {
		t.Errorf("protected: %+v", d)
	}
	if d := obs(PermitTenant{ID: "a", LLCCapAct: 5000, Measured: true, Usage: 1, CPUs: 1, Protected: true}); len(d) != 0 || p.Status()[0].State != PermitOver || len(p.Capped()) != 0 {
		t.Errorf("protected stays uncapped (state still shown): %+v %+v", d, p.Status())
	}
	// Capped, then gone: released.
	obs(PermitTenant{ID: "a", LLCCapAct: 5000, Measured: true, Usage: 1, CPUs: 1})
	if c := p.Capped(); c["a"] != 0.0625 {
		t.Errorf("Capped() = %v", c)
	}
	if d := obs(); len(d) != 1 || d[0].Tenant != "a" || d[0].Reason != "tenant gone" || len(p.Status()) != 0 {
		t.Errorf("gone: %+v", d)
	}
}

func TestPermitsConfig(t *testing.T) {
	var c PermitsConfig
	c.Fill()
	if c.Burst != 2*time.Second || c.FloorDuty != 0.0625 || c.Stale != 5*time.Second {
		t.Errorf("defaults %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
	for _, bad := range []struct {
		mod  func(*PermitsConfig)
		want string
	}{
		{func(c *PermitsConfig) { c.Default = -1 }, "permits.default"},
		{func(c *PermitsConfig) { c.Classes = []PermitClass{{Match: "[", LLCCap: 1}} }, "permits.classes[0].match"},
		{func(c *PermitsConfig) { c.Classes = []PermitClass{{Kind: "vmm", LLCCap: 1}} }, "permits.classes[0].kind"},
		{func(c *PermitsConfig) { c.Tenants = map[string]float64{"x": -5} }, "permits.tenants.x"},
		{func(c *PermitsConfig) { c.FloorDuty = 1 }, "permits.floor_duty"},
		{func(c *PermitsConfig) { c.Burst = time.Millisecond }, "permits.burst"},
	} {
		c2 := c
		bad.mod(&c2)
		if err := c2.Validate(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("want %q, got %v", bad.want, err)
		}
	}
}
