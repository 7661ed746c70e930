package agent

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// cpuWorld is CPU-time contention as two guests pinned to one CPU make it:
// the victim wants all of CPU 1; the hog, when running, takes its share by
// weight (its fair half at weight 1) unless its quota holds it lower, and
// the victim waits while the hog runs. The bystander is busy on CPU 0. The canary probes read quiet
// throughout: only the waits tell.
type cpuWorld struct {
	root   string
	h      *host.Host
	layout cgroup.Layout

	mu      sync.Mutex
	tenants []sense.Tenant
	hogOn   bool
	// hogWeight is the hog's CPU weight against the victim's 1 (its
	// cpu.shares over the victim's; 0 counts as 1): at weight 4 it takes
	// four fifths of CPU 1, far more than its fair half, and the victim
	// gets less than half its own.
	hogWeight float64
	hogBoot   float64 // while > 0 the hog is booting: it uses this much CPU and hardly waits
	bg        float64 // busy threads of no tenant on CPU 1
	noise     float64 // extra run delay of the victim from outside any tenant (s/s)
	counters  map[string]*sense.TenantStats
	// now is the world's clock, shared with the agent's (newCPUHarness).
	now func() time.Time
}

func newCPUWorld(t *testing.T) *cpuWorld {
	t.Helper()
	w := &cpuWorld{root: t.TempDir(), counters: map[string]*sense.TenantStats{}, now: time.Now}
	for _, tn := range []struct {
		name string
		cpu  int
	}{{"victim", 1}, {"hog", 1}, {"bystander", 0}} {
		dir := filepath.Join(w.root, "cg/cpu/lab", tn.name)
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte("100000\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte("-1\n"), 0o644)
		w.tenants = append(w.tenants, sense.Tenant{ID: "/lab/" + tn.name, Kind: sense.KindCgroup, Name: tn.name, Cgroup: "/lab/" + tn.name, CPUs: cpuset.Of(tn.cpu)})
	}
	h, err := host.Open(w.root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	w.h, w.layout = h, cgroup.Layout{Mode: cgroup.ModeV1, V1: map[string]string{"cpu": "/cg/cpu"}}
	return w
}

func (w *cpuWorld) Discover(context.Context) ([]sense.Tenant, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]sense.Tenant(nil), w.tenants...), nil
}

func (w *cpuWorld) quota(name string) cgroup.Quota {
	q, err := cgroup.Open(w.h, w.layout, "/lab/"+name).CPUQuota()
	if err != nil {
		return cgroup.Quota{Quota: -1}
	}
	return q
}

// rates are each tenant's CPU use and run delay per second now. CPU 1 is
// shared fairly among the victim, the hog when it runs, and bg other
// always-busy threads that belong to no tenant.
func (w *cpuWorld) rates(name string) (usage, delay float64) {
	k := w.bg
	hog, hogDelay := 0.0, 0.0
	switch {
	case w.hogOn && w.hogBoot > 0:
		hog, hogDelay = w.hogBoot, 0.2*w.hogBoot
	case w.hogOn:
		wt := max(1, w.hogWeight)
		hog = wt / (wt + 1 + k)
		if q := w.quota("hog"); !q.Unlimited() {
			hog = min(hog, q.CPUs())
		}
		hogDelay = 1 - hog
	}
	switch name {
	case "victim":
		u := (1 - hog) / (1 + k)
		return u, 0.03 + (1 - u) + w.noise
	case "hog":
		return hog, hogDelay
	case "bystander":
		return 0.9, 0.02
	}
	return 0, 0
}

// Read accumulates counters at the current rates.
func (w *cpuWorld) Read(_ context.Context, t sense.Tenant, _ *sense.TenantStats) (sense.TenantStats, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	st := w.counters[t.ID]
	if st == nil {
		st = &sense.TenantStats{At: now}
		w.counters[t.ID] = st
	}
	if dt := now.Sub(st.At); dt > 0 {
		u, d := w.rates(t.Name)
		st.Usage += time.Duration(u * float64(dt))
		st.RunDelay += time.Duration(d * float64(dt))
		st.At = now
		// Read every time, as sense.CgroupStats does on a host whose
		// threads fit the run-delay budget: the window is since the last read.
		st.RunDelayAt, st.RunDelayRate = now, d
	}
	return *st, nil
}

// quietProbe reads 300 ns everywhere, always.
type quietProbe struct{}

func (quietProbe) reading(cpu int) []sense.ProbeReading {
	return []sense.ProbeReading{{Domain: 0, CPU: cpu, Kind: sense.ProbeDRAM, Ns: 300}}
}
func (p quietProbe) Measure() ([]sense.ProbeReading, error) {
	return append(p.reading(0), p.reading(1)...), nil
}
func (p quietProbe) MeasureCPU(_, cpu int, _ ...string) ([]sense.ProbeReading, error) {
	return p.reading(cpu), nil
}
func (quietProbe) Targets() []sense.Target {
	return []sense.Target{{Domain: 0, CPU: 0}, {Domain: 0, CPU: 1}}
}
func (quietProbe) Domains() []sense.ProbeDomain {
	return []sense.ProbeDomain{{ID: 0, CPUs: cpuset.Of(0, 1)}}
}

type cpuHarness struct {
	w *cpuWorld
	a *Agent
	actionLog
	*vloop
}

// newCPUHarness builds an agent on the world, on virtual time (see vloop),
// and starts it.
func newCPUHarness(t *testing.T, w *cpuWorld, tweak ...func(*Config)) *cpuHarness {
	t.Helper()
	cfg := testConfig(t.TempDir())
	// What CPU wait proves is what these tests are about (cpu_wait.prove;
	// a tweak may turn it off again).
	cfg.CPUWait.Prove = ptrTo(true)
	for _, f := range tweak {
		f(&cfg)
	}
	st, err := act.OpenState(StatePath(cfg.StateDir))
	if err != nil {
		t.Fatal(err)
	}
	c := newClock()
	w.now = c.Now
	hs := &cpuHarness{w: w}
	a, err := New(cfg, Deps{Discoverer: w, Stats: w, Probe: quietProbe{}, Quota: &act.CPUQuota{Host: w.h, Layout: w.layout, State: st},
		OnAction: func(r api.ActionRecord) { hs.mu.Lock(); hs.actions = append(hs.actions, r); hs.mu.Unlock() },
		Now:      c.Now, Sleep: c.Sleep})
	if err != nil {
		t.Fatal(err)
	}
	a.cont.Calibrate(quietProbe{}.reading(0))
	a.sensor.survey = 0 // calibrated: no start-up survey
	hs.a = a
	hs.vloop = startLoop(t, a, c, &hs.actionLog)
	return hs
}

// set changes the world under its lock.
func (w *cpuWorld) set(f func(w *cpuWorld)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(w)
}

// The hog arrives on the victim's CPU after the victim learned its quiet
// waits and takes far more than its fair half of it: the probes stay quiet, the
// victim's CPU wait convicts the hog by a proof, it is throttled, and
// released when it stops. Neither the victim nor the bystander on the other
// CPU is ever throttled.
func TestAgentCPUWaitThrottlesTheHog(t *testing.T) {
	w := newCPUWorld(t)
	w.hogWeight = 4
	hs := newCPUHarness(t, w)
	hs.advance(t, 400*time.Millisecond, nil) // the victim's quiet baseline
	w.set(func(w *cpuWorld) { w.hogOn = true })
	hs.until(t, "hog throttled", 10*time.Second, func() bool { return hs.count("throttle", "hog") > 0 })
	if q := w.quota("hog"); q.Unlimited() || q.CPUs() > 0.2 {
		t.Errorf("hog quota after the throttle: %v", q)
	}
	// Held down, the victim's waits are back to usual (the state reads a
	// window that may still hold the time before the throttle).
	calm := func() bool { st, _ := hs.a.Latest(); return !st.CPUWait && st.CPUWaitRatio <= 1.3 }
	if !hs.advance(t, time.Second, calm) {
		st, _ := hs.a.Latest()
		t.Errorf("victim still waiting while the hog is throttled: ratio %.2f", st.CPUWaitRatio)
	}
	w.set(func(w *cpuWorld) { w.hogOn = false })
	hs.until(t, "hog released after it stopped", 10*time.Second, func() bool { return hs.count("release", "hog") > 0 && w.quota("hog").Unlimited() })
	hs.stop(t)
	for _, name := range []string{"victim", "bystander"} {
		if n := hs.count("throttle", name); n > 0 {
			t.Errorf("%s throttled %d times", name, n)
		}
		if n := hs.count("proof", name); n > 0 {
			t.Errorf("%s proven %d times (victims and tenants on other CPUs are no suspects)", name, n)
		}
	}
}

// The victim waits, but not because of the hog (something outside every
// tenant takes CPU 1 at the moment the light hog starts), and it still gets
// more than its fair half of CPU 1: waiting is then the price of sharing,
// not a neighbour's doing, and nobody is proved or throttled for it. (The
// hog that takes the victim's share is TestAgentCPUWaitThrottlesTheHog.)
func TestAgentCPUWaitAcquitsAnInnocent(t *testing.T) {
	w := newCPUWorld(t)
	// A light hog: its own quota holds it to 20% of a CPU.
	os.WriteFile(filepath.Join(w.root, "cg/cpu/lab/hog/cpu.cfs_quota_us"), []byte("20000\n"), 0o644)
	hs := newCPUHarness(t, w)
	hs.advance(t, 400*time.Millisecond, nil)
	w.set(func(w *cpuWorld) { w.hogOn, w.noise = true, 1.5 })
	hs.until(t, "victim's waits seen", 10*time.Second, func() bool { st, _ := hs.a.Latest(); return st.CPUWaitRatio >= 1.5 })
	hs.advance(t, 3*time.Second, nil)
	hs.stop(t)
	if n := hs.count("proof", "hog") + hs.count("throttle", "hog"); n > 0 {
		t.Errorf("a hog that took no one's fair share was proved or throttled %d times", n)
	}
	if q := w.quota("hog"); q.Quota != 20*time.Millisecond {
		t.Errorf("hog quota not its own: %v", q)
	}
}

// CPU-time contention is symmetric: a newcomer that booted lightly (and
// learned a quiet stretch then) waits far more than usual once it runs flat
// out, while the victim, already sharing CPU 1 with two busy threads of no
// tenant, loses only a quarter of its share (under the threshold). Capping
// the victim would relieve the newcomer, but the victim took no CPU from
// anyone: it must never be proven for the newcomer's waits. The newcomer
// itself lost no work (it gained CPU): its waits are no CPU-wait pollution.
func TestAgentCPUWaitNewcomerAlsoWaits(t *testing.T) {
	w := newCPUWorld(t)
	w.bg = 2
	hs := newCPUHarness(t, w)
	hs.advance(t, 300*time.Millisecond, nil)
	w.set(func(w *cpuWorld) { w.hogOn, w.hogBoot = true, 0.08 })
	hs.advance(t, 400*time.Millisecond, nil) // its quiet stretch, learned while it boots
	w.set(func(w *cpuWorld) { w.hogBoot = 0 })
	hs.advance(t, 3*time.Second, nil)
	hs.stop(t)
	if n := hs.count("proof", "victim") + hs.count("throttle", "victim"); n > 0 {
		t.Errorf("the victim was proven or throttled %d times for the newcomer's waits", n)
	}
	st, _ := hs.a.Latest()
	if st.CPUWaitRatio < 1.5 {
		t.Errorf("the newcomer did not wait more than usual (ratio %.2f): the test would not test anything", st.CPUWaitRatio)
	}
	if st.CPUWait {
		t.Error("a newcomer that gained CPU was judged a victim of CPU wait")
	}
}

// cpu_wait.enabled false: the same hog is left alone. The control: with
// CPU wait on, in the same world, the hog is proven; the run with it off
// then lasts twice as long as that took.
func TestAgentCPUWaitDisabled(t *testing.T) {
	// start starts the hog after the victim's quiet baseline.
	start := func(tweak ...func(*Config)) *cpuHarness {
		w := newCPUWorld(t)
		w.hogWeight = 4
		hs := newCPUHarness(t, w, tweak...)
		hs.advance(t, 300*time.Millisecond, nil)
		w.set(func(w *cpuWorld) { w.hogOn = true })
		return hs
	}

	hs := start()
	took := hs.until(t, "hog proven with cpu_wait on (control)", 10*time.Second, func() bool { return hs.count("proof", "hog") > 0 })
	hs.stop(t)

	hs = start(func(c *Config) { c.CPUWait.Enabled = ptrTo(false) })
	hs.advance(t, max(3*time.Second, 2*took), nil)
	hs.stop(t)
	if n := hs.count("proof", "hog") + hs.count("throttle", "hog"); n > 0 {
		t.Errorf("with cpu_wait off the hog was proven or throttled %d times", n)
	}
}

// Something outside every tenant (a busy host thread) shares CPU 1 with the
// victim and a hog that takes only its fair share: the victim gets less
// than its own share and waits, and capping the hog would relieve it, but
// the hog crowds no one out and is never proved for it. The control: the
// same world with the hog weighted to take more than its share convicts it.
func TestAgentCPUWaitSparesATenantWithinItsFairShare(t *testing.T) {
	run := func(weight float64) *cpuHarness { return runHog(t, weight, 1) }
	if hs := run(8); hs.count("throttle", "hog") == 0 {
		t.Fatalf("control: a hog taking 4/5 of CPU 1 (over half again its fair half) was not throttled: %+v", hs.actions)
	}
	hs := run(1)
	if n := hs.count("proof", "hog") + hs.count("throttle", "hog"); n > 0 {
		t.Errorf("a hog within its fair share (1/3 of CPU 1, fair 1/2) was proved or throttled %d times", n)
	}
	st, _ := hs.a.Latest()
	if st.CPUWaitRatio < 1.3 {
		t.Errorf("the victim did not wait (ratio %.2f): the test tests nothing", st.CPUWaitRatio)
	}
}

// A tenant a little over its fair share — 0.63 of CPU 1 against a fair
// half, as a service that wakes often takes from a CPU-bound neighbour —
// makes the victim wait, and capping it would relieve the victim, but it
// is not crowding anyone out: it is never proved for it. The control: the
// same world with the hog at four fifths of CPU 1 convicts it.
func TestAgentCPUWaitSparesATenantAShadeOverItsShare(t *testing.T) {
	run := func(weight float64) *cpuHarness { return runHog(t, weight, 0) }
	if hs := run(4); hs.count("throttle", "hog") == 0 {
		t.Fatalf("control: a hog taking 4/5 of CPU 1 was not throttled: %+v", hs.actions)
	}
	hs := run(1.7) // 1.7/2.7 = 0.63 of CPU 1
	if n := hs.count("proof", "hog") + hs.count("throttle", "hog"); n > 0 {
		t.Errorf("a hog at 0.63 of CPU 1 (fair 1/2) was proved or throttled %d times", n)
	}
	st, _ := hs.a.Latest()
	if st.CPUWaitRatio < 1.3 {
		t.Errorf("the victim did not wait (ratio %.2f): the test tests nothing", st.CPUWaitRatio)
	}
}

// runHog starts the hog at a CPU weight on the victim's CPU, beside bg busy
// threads of no tenant, once the victim's quiet waits are learned; runs the
// agent 4 s on and stops it.
func runHog(t *testing.T, weight, bg float64) *cpuHarness {
	t.Helper()
	w := newCPUWorld(t)
	w.hogWeight = weight
	hs := newCPUHarness(t, w)
	hs.advance(t, 400*time.Millisecond, nil)
	w.set(func(w *cpuWorld) { w.hogOn, w.bg = true, bg })
	hs.advance(t, 4*time.Second, nil)
	hs.stop(t)
	return hs
}

// By default (cpu_wait.prove off) CPU wait judges and reports — the victim
// waits, the hog that takes four fifths of CPU 1 is its suspect — and
// proves no one: equal shares are the scheduler's to keep, and a tenant
// over them by its weight is where its weight puts it.
func TestAgentCPUWaitReportsWithoutProvingByDefault(t *testing.T) {
	w := newCPUWorld(t)
	w.hogWeight = 4
	hs := newCPUHarness(t, w, func(c *Config) { c.CPUWait.Prove = nil })
	hs.advance(t, 400*time.Millisecond, nil)
	w.set(func(w *cpuWorld) { w.hogOn = true })
	waiting := func() bool { st, _ := hs.a.Latest(); return st.CPUWait }
	hs.until(t, "the victim's waits reported", 10*time.Second, waiting)
	hs.advance(t, 4*time.Second, nil)
	hs.stop(t)
	if n := hs.count("proof", "hog") + hs.count("throttle", "hog"); n > 0 {
		t.Errorf("the hog was proved or throttled %d times with cpu_wait.prove off", n)
	}
	if q := w.quota("hog"); !q.Unlimited() {
		t.Errorf("hog quota %v", q)
	}
}
