package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
// the victim wants all of CPU 1; the hog, when running, takes its fair
// half unless its quota holds it lower, and the victim waits while the hog
// runs. The bystander is busy on CPU 0. The canary probes read quiet
// throughout: only the waits tell.
type cpuWorld struct {
	root   string
	h      *host.Host
	layout cgroup.Layout

	mu       sync.Mutex
	tenants  []sense.Tenant
	hogOn    bool
	hogBoot  float64 // while > 0 the hog is booting: it uses this much CPU and hardly waits
	bg       float64 // busy threads of no tenant on CPU 1
	noise    float64 // extra run delay of the victim from outside any tenant (s/s)
	counters map[string]*sense.TenantStats
}

func newCPUWorld(t *testing.T) *cpuWorld {
	t.Helper()
	w := &cpuWorld{root: t.TempDir(), counters: map[string]*sense.TenantStats{}}
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

func (w *cpuWorld) Discover() ([]sense.Tenant, error) {
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
		hog = 1 / (2 + k)
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
func (w *cpuWorld) Read(t sense.Tenant, _ *sense.TenantStats) (sense.TenantStats, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
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
}

func newCPUHarness(t *testing.T, w *cpuWorld, tweak ...func(*Config)) *cpuHarness {
	t.Helper()
	cfg := testConfig(t.TempDir())
	for _, f := range tweak {
		f(&cfg)
	}
	st, err := act.OpenState(StatePath(cfg.StateDir))
	if err != nil {
		t.Fatal(err)
	}
	hs := &cpuHarness{w: w}
	a, err := New(cfg, Deps{Discoverer: w, Stats: w, Probe: quietProbe{}, Quota: &act.CPUQuota{Host: w.h, Layout: w.layout, State: st},
		OnAction: func(r api.ActionRecord) { hs.mu.Lock(); hs.actions = append(hs.actions, r); hs.mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	a.cont.Calibrate(quietProbe{}.reading(0))
	a.survey = 0 // calibrated: no start-up survey
	hs.a = a
	return hs
}

func (hs *cpuHarness) run(t *testing.T) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { hs.a.Run(ctx); close(done) }()
	return func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("agent did not stop")
		}
	}
}

func (hs *cpuHarness) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			hs.mu.Lock()
			defer hs.mu.Unlock()
			var s []string
			for _, r := range hs.actions {
				s = append(s, fmt.Sprintf("%s %s (%s)", r.Kind, r.Name, r.Reason))
			}
			t.Fatalf("timed out waiting for %s; actions:\n%s", what, strings.Join(s, "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The hog arrives on the victim's CPU after the victim learned its quiet
// waits: the probes stay quiet, the victim's CPU wait convicts the hog by
// a proof, it is throttled, and released when it stops. Neither the
// victim nor the bystander on the other CPU is ever throttled.
func TestAgentCPUWaitThrottlesTheHog(t *testing.T) {
	w := newCPUWorld(t)
	hs := newCPUHarness(t, w)
	stop := hs.run(t)
	time.Sleep(400 * time.Millisecond) // the victim's quiet baseline
	w.mu.Lock()
	w.hogOn = true
	w.mu.Unlock()
	hs.waitFor(t, "the hog throttled", func() bool { return hs.count("throttle", "hog") > 0 })
	if q := w.quota("hog"); q.Unlimited() || q.CPUs() > 0.2 {
		t.Errorf("hog quota after the throttle: %v", q)
	}
	// Held down, the victim's waits are back to usual (the state reads a
	// window that may still hold the time before the throttle).
	deadline := time.Now().Add(time.Second)
	st, _ := hs.a.Latest()
	for (st.CPUWait || st.CPUWaitRatio > 1.3) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		st, _ = hs.a.Latest()
	}
	if st.CPUWait || st.CPUWaitRatio > 1.3 {
		t.Errorf("victim still waiting while the hog is throttled: ratio %.2f", st.CPUWaitRatio)
	}
	w.mu.Lock()
	w.hogOn = false
	w.mu.Unlock()
	hs.waitFor(t, "the hog released after it stopped", func() bool { return hs.count("release", "hog") > 0 && w.quota("hog").Unlimited() })
	stop()
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
	hs := newCPUHarness(t, w)
	// A light hog: its own quota holds it to 20% of a CPU.
	os.WriteFile(filepath.Join(w.root, "cg/cpu/lab/hog/cpu.cfs_quota_us"), []byte("20000\n"), 0o644)
	stop := hs.run(t)
	time.Sleep(400 * time.Millisecond)
	w.mu.Lock()
	w.hogOn, w.noise = true, 1.5
	w.mu.Unlock()
	hs.waitFor(t, "the victim's waits seen", func() bool { st, _ := hs.a.Latest(); return st.CPUWaitRatio >= 1.5 })
	time.Sleep(800 * time.Millisecond)
	stop()
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
	stop := hs.run(t)
	time.Sleep(300 * time.Millisecond)
	w.mu.Lock()
	w.hogOn, w.hogBoot = true, 0.08
	w.mu.Unlock()
	time.Sleep(400 * time.Millisecond) // its quiet stretch, learned while it boots
	w.mu.Lock()
	w.hogBoot = 0
	w.mu.Unlock()
	time.Sleep(1500 * time.Millisecond)
	stop()
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
	// run starts the hog after the victim's quiet baseline and returns
	// the harness and when the hog started.
	run := func(tweak ...func(*Config)) (*cpuHarness, func(), time.Time) {
		w := newCPUWorld(t)
		hs := newCPUHarness(t, w, tweak...)
		stop := hs.run(t)
		time.Sleep(300 * time.Millisecond)
		w.mu.Lock()
		w.hogOn = true
		w.mu.Unlock()
		return hs, stop, time.Now()
	}

	hs, stop, hogOn := run()
	hs.waitFor(t, "the hog proven with cpu_wait on (control)", func() bool { return hs.count("proof", "hog") > 0 })
	took := time.Since(hogOn)
	stop()

	hs, stop, _ = run(func(c *Config) { c.CPUWait.Enabled = ptrTo(false) })
	time.Sleep(max(800*time.Millisecond, 2*took))
	stop()
	if n := hs.count("proof", "hog") + hs.count("throttle", "hog"); n > 0 {
		t.Errorf("with cpu_wait off the hog was proven or throttled %d times", n)
	}
}
