package judge

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
)

// alitaHost is Alita's power experiment scaled to a 2 × 24-CPU host: an
// mprime "attacker" on 20 CPUs of socket 0, a one-thread PARSEC "victim" on
// 4 more, and a quiet tenant alone on socket 1.
type alitaHost struct {
	socket0, socket1 float64 // package watts
	attackerTemp     float64
}

func (a alitaHost) sample(at time.Time) PowerSample {
	busy := map[int]float64{}
	temp := map[int]float64{}
	for cpu := 0; cpu < 20; cpu++ {
		busy[cpu], temp[cpu] = 1, a.attackerTemp
	}
	busy[20], temp[20] = 1, 55
	for cpu := 21; cpu < 24; cpu++ {
		busy[cpu], temp[cpu] = 0, 55
	}
	for cpu := 24; cpu < 48; cpu++ {
		busy[cpu], temp[cpu] = 0.9, 60
	}
	avg := func(lo, hi int) float64 {
		var s float64
		for c := lo; c < hi; c++ {
			s += temp[c]
		}
		return s / float64(hi-lo)
	}
	return PowerSample{
		At: at, Duration: time.Second,
		Sockets: []PowerSocket{
			{ID: 0, Watts: a.socket0, CPUs: cpuset.Range(0, 23), AvgTemp: avg(0, 24), HasTemp: true, PerCoreTemps: true},
			{ID: 1, Watts: a.socket1, CPUs: cpuset.Range(24, 47), AvgTemp: avg(24, 48), HasTemp: true, PerCoreTemps: true},
		},
		CPUBusy: busy,
		Tenants: []PowerTenant{
			{ID: "attacker", Name: "mprime", Socket: 0, CPUs: cpuset.Range(0, 19), Watts: a.socket0 * 20 / 21, Temp: a.attackerTemp, HasTemp: true, Lever: LeverClockModulation, Steps: 16},
			{ID: "victim", Name: "parsec", Socket: 0, CPUs: cpuset.Range(20, 23), Watts: a.socket0 / 21, Temp: 55, HasTemp: true, Lever: LeverClockModulation, Steps: 16},
			{ID: "quiet", Name: "quiet", Socket: 1, CPUs: cpuset.Range(24, 47), Watts: a.socket1, Temp: 60, HasTemp: true, Lever: LeverCPUFreq, Steps: 16},
		},
	}
}

// period feeds 12 one-second samples and returns the decisions.
func period(p *PowerBudget, at *time.Time, h alitaHost) []PowerDecision {
	var d []PowerDecision
	for i := 0; i < 12; i++ {
		*at = at.Add(time.Second)
		if got := p.Observe(h.sample(*at)); got != nil {
			if i != 11 {
				panic(fmt.Sprintf("decision after %d samples", i+1))
			}
			d = got
		}
	}
	return d
}

func summary(ds []PowerDecision) string {
	var s []string
	for _, d := range ds {
		s = append(s, fmt.Sprintf("%s@%d %s %d/%d", d.Tenant, d.Socket, d.Action, d.Step, d.Steps))
	}
	return strings.Join(s, ", ")
}

// TestPowerBudgetAlita runs Alita's power experiment through the judge:
// socket 0 over its 150 W budget while mprime runs, then under the 140 W
// guard band once it is throttled enough.
func TestPowerBudgetAlita(t *testing.T) {
	p := NewPowerBudget(PowerBudgetConfig{Enabled: true})
	at := time.Unix(0, 0)
	for i, c := range []struct {
		h    alitaHost
		want string
	}{
		// Socket 0 at 165 W; avg core temp (20×75 + 4×55)/24 = 71.7 °C:
		// the attacker (75 °C, 20/20 busy) is noise, the victim (55 °C) is not.
		{alitaHost{165, 90, 75}, "attacker@0 tighten 15/16"},
		{alitaHost{160, 90, 75}, "attacker@0 tighten 14/16"},
		{alitaHost{150, 90, 74}, "attacker@0 tighten 13/16"}, // exactly the budget counts as over
		{alitaHost{145, 90, 72}, ""},                         // inside the guard band: hold
		{alitaHost{140, 90, 70}, "attacker@0 relax 14/16"},   // exactly budget-guard relaxes
		{alitaHost{120, 90, 65}, "attacker@0 relax 15/16"},
		{alitaHost{120, 90, 65}, "attacker@0 release 16/16"},
		{alitaHost{120, 90, 65}, ""},
	} {
		got := summary(period(p, &at, c.h))
		if got != c.want {
			t.Errorf("period %d (%g W): %q, want %q", i+1, c.h.socket0, got, c.want)
		}
		if i == 1 {
			st := p.Sockets()
			if len(st) != 2 || st[0].State != "over" || st[0].Watts != 160 || fmt.Sprint(st[0].Noise) != "[attacker]" || st[1].State != "under" {
				t.Errorf("socket status %+v", st)
			}
			th := p.Throttled()
			if len(th) != 1 || th[0].Tenant != "attacker" || th[0].Name != "mprime" || th[0].Step != 14 || !th[0].CPUs.Equal(cpuset.Range(0, 19)) || th[0].Lever != LeverClockModulation {
				t.Errorf("throttled %+v", th)
			}
		}
	}
}

func TestPowerBudgetReason(t *testing.T) {
	p := NewPowerBudget(PowerBudgetConfig{})
	at := time.Unix(0, 0)
	d := period(p, &at, alitaHost{165, 90, 75})
	if len(d) != 1 || d[0].Reason != "socket 0 at 165.0 W >= budget 150 W; 75.0 °C >= busy tenants' average 75.0 °C; 20/20 CPUs over 50% busy" || d[0].Duty != 15.0/16 {
		t.Errorf("decision %+v", d)
	}
}

// noiseCase is one over-budget socket with one candidate tenant on CPUs
// 0-3 and a busy neighbour on CPUs 4-7 drawing 40 W (10 W per CPU) at
// 60 °C: "hotter than average" is judged against the busy tenants.
func noiseCase(t *testing.T, cfg PowerBudgetConfig, so PowerSocket, ten PowerTenant, busy map[int]float64) bool {
	t.Helper()
	p := NewPowerBudget(cfg)
	ten.Lever, ten.Steps = LeverCPUQuota, 16
	ref := PowerTenant{ID: "ref", CPUs: cpuset.Range(4, 7), Watts: 40, Temp: 60, HasTemp: so.HasTemp, Lever: LeverCPUQuota, Steps: 16}
	for c := 4; c < 8; c++ {
		busy[c] = 0.9
	}
	d := p.Observe(PowerSample{At: time.Unix(100, 0), Duration: p.cfg.Period, Sockets: []PowerSocket{so}, CPUBusy: busy, Tenants: []PowerTenant{ten, ref}})
	for _, x := range d {
		if x.Tenant == ten.ID && x.Action == PowerTighten {
			return true
		}
	}
	return false
}

func TestPowerBudgetNoise(t *testing.T) {
	sock := PowerSocket{ID: 0, Watts: 160, CPUs: cpuset.Range(0, 15)}
	four := cpuset.Range(0, 3)
	busyN := func(n int) map[int]float64 {
		b := map[int]float64{}
		for c := 0; c < 4; c++ {
			if c < n {
				b[c] = 0.8
			} else {
				b[c] = 0.5 // not over 50%
			}
		}
		return b
	}
	temps := PowerSocket{ID: 0, Watts: 160, CPUs: cpuset.Range(0, 15), AvgTemp: 50, HasTemp: true}
	perCore := temps
	perCore.PerCoreTemps = true
	for _, c := range []struct {
		name string
		cfg  PowerBudgetConfig
		so   PowerSocket
		ten  PowerTenant
		busy map[int]float64
		want bool
	}{
		{"hot by power, all busy", PowerBudgetConfig{}, sock, PowerTenant{ID: "a", CPUs: four, Watts: 50}, busyN(4), true},
		{"half its CPUs busy is enough", PowerBudgetConfig{}, sock, PowerTenant{ID: "a", CPUs: four, Watts: 50}, busyN(2), true},
		{"one of four busy is not", PowerBudgetConfig{}, sock, PowerTenant{ID: "a", CPUs: four, Watts: 50}, busyN(1), false},
		{"exactly the average per CPU is hot", PowerBudgetConfig{}, sock, PowerTenant{ID: "a", CPUs: four, Watts: 40}, busyN(4), true},
		{"cooler than average", PowerBudgetConfig{}, sock, PowerTenant{ID: "a", CPUs: four, Watts: 39}, busyN(4), false},
		{"under budget", PowerBudgetConfig{}, PowerSocket{ID: 0, Watts: 149.9, CPUs: cpuset.Range(0, 15)}, PowerTenant{ID: "a", CPUs: four, Watts: 100}, busyN(4), false},
		{"protected", PowerBudgetConfig{}, sock, PowerTenant{ID: "a", CPUs: four, Watts: 50, Protected: true}, busyN(4), false},
		// Idle CPUs do not lower the average: on a 64-CPU socket (2.5 W per
		// CPU over the package) a tenant at 9.75 W per CPU is still cooler
		// than its busy neighbour's 10 W, so it is not noise.
		{"idle CPUs are not in the average", PowerBudgetConfig{}, PowerSocket{ID: 0, Watts: 160, CPUs: cpuset.Range(0, 63)}, PowerTenant{ID: "a", CPUs: four, Watts: 39}, busyN(4), false},
		// A tenant drawing under min_share of the socket is never noise,
		// however hot its one core runs.
		{"a small share of the socket is not noise", PowerBudgetConfig{}, sock, PowerTenant{ID: "a", CPUs: cpuset.Of(0), Watts: 15}, map[int]float64{0: 1}, false},
		{"min_share configurable", PowerBudgetConfig{MinShare: 0.05}, sock, PowerTenant{ID: "a", CPUs: cpuset.Of(0), Watts: 15}, map[int]float64{0: 1}, true},
		// AMD: temperatures per socket only, so auto judges by power.
		{"auto without per-core temps uses power", PowerBudgetConfig{}, temps, PowerTenant{ID: "a", CPUs: four, Watts: 20, Temp: 70, HasTemp: true}, busyN(4), false},
		{"auto with per-core temps uses temperature", PowerBudgetConfig{}, perCore, PowerTenant{ID: "a", CPUs: four, Watts: 20, Temp: 70, HasTemp: true}, busyN(4), true},
		{"cooler by temperature", PowerBudgetConfig{}, perCore, PowerTenant{ID: "a", CPUs: four, Watts: 60, Temp: 55, HasTemp: true}, busyN(4), false},
		{"hot_by power ignores temperature", PowerBudgetConfig{HotBy: "power"}, perCore, PowerTenant{ID: "a", CPUs: four, Watts: 20, Temp: 70, HasTemp: true}, busyN(4), false},
		{"busy threshold configurable", PowerBudgetConfig{BusyThreshold: 0.9}, sock, PowerTenant{ID: "a", CPUs: four, Watts: 50}, busyN(4), false},
	} {
		if got := noiseCase(t, c.cfg, c.so, c.ten, c.busy); got != c.want {
			t.Errorf("%s: noise %v, want %v", c.name, got, c.want)
		}
	}
}

// The period's power is the time-weighted mean of its samples.
func TestPowerBudgetAveragesThePeriod(t *testing.T) {
	for _, c := range []struct {
		watts []float64
		want  bool
	}{
		{[]float64{200, 200, 50}, true}, // mean 150: over
		{[]float64{200, 200, 49}, false},
	} {
		p := NewPowerBudget(PowerBudgetConfig{})
		var d []PowerDecision
		for i, w := range c.watts {
			d = p.Observe(PowerSample{At: time.Unix(int64(4*(i+1)), 0), Duration: 4 * time.Second,
				Sockets: []PowerSocket{{ID: 0, Watts: w, CPUs: cpuset.Range(0, 3)}}, CPUBusy: map[int]float64{0: 1, 1: 1, 2: 1, 3: 1},
				Tenants: []PowerTenant{{ID: "a", CPUs: cpuset.Range(0, 3), Watts: w, Lever: LeverCPUFreq, Steps: 16}}})
			if d != nil && i < 2 {
				t.Fatalf("decided after %d s", 4*(i+1))
			}
		}
		if got := len(d) == 1; got != c.want {
			t.Errorf("%v: decisions %v", c.watts, summary(d))
		}
	}
}

func TestPowerBudgetFloorGoneAndSteps(t *testing.T) {
	p := NewPowerBudget(PowerBudgetConfig{Period: time.Second})
	at := time.Unix(0, 0)
	hot := func(ten ...PowerTenant) []PowerDecision {
		at = at.Add(time.Second)
		busy := map[int]float64{}
		for c := 0; c < 8; c++ {
			busy[c] = 1
		}
		return p.Observe(PowerSample{At: at, Duration: time.Second, CPUBusy: busy, Tenants: ten, Sockets: []PowerSocket{
			{ID: 0, Watts: 200, CPUs: cpuset.Range(0, 3)}, {ID: 1, Watts: 200, CPUs: cpuset.Range(4, 7)}}})
	}
	// A tenant spanning both sockets, on an 8-step lever.
	span := func(steps int) []PowerTenant {
		return []PowerTenant{
			{ID: "s", Socket: 0, CPUs: cpuset.Range(0, 3), Watts: 200, Lever: LeverClockModulation, Steps: steps},
			{ID: "s", Socket: 1, CPUs: cpuset.Range(4, 5), Watts: 100, Lever: LeverClockModulation, Steps: steps},
		}
	}
	for i := 0; i < 7; i++ {
		hot(span(8)...)
	}
	if st, steps, ok := p.TenantStep("s"); !ok || st != 1 || steps != 8 {
		t.Fatalf("after 7 periods over budget: %d/%d %v", st, steps, ok)
	}
	if d := hot(span(8)...); len(d) != 0 {
		t.Errorf("at the floor: %s", summary(d))
	}
	// Its lever changes to CPU quota (16 steps): the duty is kept (1/8 is
	// 2/16), and as it is still noise it drops one of the finer steps.
	if d := summary(hot(span(16)...)); d != "s@0 tighten 1/16, s@1 tighten 1/16" {
		t.Errorf("after the lever changed: %q", d)
	}
	// It disappears: every throttle of it is released.
	if d := summary(hot()); d != "s@0 release 16/16, s@1 release 16/16" {
		t.Errorf("gone: %q", d)
	}
	if _, _, ok := p.TenantStep("s"); ok || len(p.Throttled()) != 0 {
		t.Error("state kept for a gone tenant")
	}
}

func TestPowerBudgetConfig(t *testing.T) {
	var c PowerBudgetConfig
	c.Fill()
	if c.BudgetWatts != 150 || c.GuardWatts != 10 || c.Period != 12*time.Second || c.BusyThreshold != 0.5 || c.BusyCPUs != 0.5 || c.HotBy != "auto" || len(c.Levers) != 3 {
		t.Errorf("defaults %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
	for _, bad := range []struct {
		mod  func(*PowerBudgetConfig)
		want string
	}{
		{func(c *PowerBudgetConfig) { c.GuardWatts = 150 }, "power.guard_watts"},
		{func(c *PowerBudgetConfig) { c.Period = time.Millisecond }, "power.period"},
		{func(c *PowerBudgetConfig) { c.HotBy = "vibes" }, "power.hot_by"},
		{func(c *PowerBudgetConfig) { c.Levers = []string{"msr"} }, "unknown lever"},
		{func(c *PowerBudgetConfig) { c.Levers = []string{"cpufreq", "cpufreq"} }, "twice"},
		{func(c *PowerBudgetConfig) { c.BusyThreshold = 1.5 }, "power.busy_threshold"},
	} {
		c2 := c
		bad.mod(&c2)
		if err := c2.Validate(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("want %q, got %v", bad.want, err)
		}
	}
}
