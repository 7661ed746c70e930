package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// world is a fake host for the agent: three tenants in a fake v1 cpu tree,
// whose quotas the real CPUQuota actuator writes; a probe whose readings
// follow the physics of the lab (the polluter raises them unless its quota
// holds it under 20% of a CPU); and CPU use that follows the quotas.
type world struct {
	t       *testing.T
	root    string
	h       *host.Host
	layout  cgroup.Layout
	mu      sync.Mutex
	tenants []sense.Tenant
	gone    map[string]bool
	running bool // the polluter is polluting
	// stalled has the polluter run no CPU while running: waiting out the
	// period of a CFS cap it was switched from.
	stalled  bool
	idle     bool          // no tenant uses any CPU
	probed   int           // the probe's per-CPU measurements so far
	probedOn []int         // the CPU of each
	busyCPU  int           // a CPU whose probe never returns (-1: none)
	counters bool          // report PMU counters
	block    chan struct{} // closed to release a blocked probe
	// llc adds an LLC reading to every probe reading: 10 ns, or 100 ns
	// while llcNoise (the physical host's other tenants thrashing the
	// cache, whatever the tenants here do).
	llc, llcNoise bool
	// rates replaces tenants' CPU use (cores) by name.
	rates map[string]float64
	// periodic has a tenant its quota holds back run its whole quota at
	// the start of a period, as the kernel's CFS bandwidth control does,
	// rather than a steady share of every instant: of every period, or of
	// one in runEvery (its runs delayed or its vCPU stalled past the
	// next ones).
	periodic bool
	runEvery int
	// overrun has each of those runs take overrun quotas at once (a vCPU
	// the host stalled mid-run is charged the stall), paid off over the
	// periods until its next run: periodic with runEvery = overrun, its
	// group counted throttled in each of those periods, and for as long
	// again after it stops (the last run's debt).
	overrun int
	stopped time.Time // when the polluter stopped running (overrun)
	// now is the world's clock: the agent's virtual one, or time.Now
	// for an agent on its real loop.
	now func() time.Time
}

// cpuBusy is the world's CPUs' busy fraction (Deps.CPUBusy): none while
// idle, else both CPUs busy.
func (w *world) cpuBusy() (map[int]float64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.idle {
		return map[int]float64{0: 0, 1: 0}, nil
	}
	return map[int]float64{0: 1, 1: 0.8}, nil
}

func newWorld(t *testing.T) *world {
	t.Helper()
	root := t.TempDir()
	w := &world{t: t, root: root, gone: map[string]bool{}, running: true, busyCPU: -1, block: make(chan struct{}), now: time.Now}
	t.Cleanup(func() { close(w.block) })
	for i, name := range []string{"victim", "polluter", "bystander"} {
		dir := filepath.Join(root, "cg/cpu/lab", name)
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte("100000\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte("-1\n"), 0o644)
		w.tenants = append(w.tenants, sense.Tenant{ID: "/lab/" + name, Kind: sense.KindCgroup, Name: name, Cgroup: "/lab/" + name, CPUs: cpuset.Of([]int{1, 0, 0}[i])})
	}
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	w.h = h
	w.layout = cgroup.Layout{Mode: cgroup.ModeV1, V1: map[string]string{"cpu": "/cg/cpu"}}
	return w
}

// quota reads a tenant's quota. A read that meets the actuator half-way
// through rewriting the files is retried: taking it for "unlimited" would
// let a test see a release that never happened.
func (w *world) quota(name string) cgroup.Quota {
	var err error
	for range 20 {
		var q cgroup.Quota
		if q, err = cgroup.Open(w.h, w.layout, "/lab/"+name).CPUQuota(); err == nil {
			return q
		}
		time.Sleep(time.Millisecond)
	}
	w.t.Errorf("quota of %s: %v", name, err)
	return cgroup.Quota{}
}

// setRunning starts or stops the polluter's pollution.
func (w *world) setRunning(on bool) {
	w.mu.Lock()
	w.running = on
	if !on {
		w.stopped = w.now()
	}
	w.mu.Unlock()
}

func (w *world) polluting() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.running || w.gone["/lab/polluter"] {
		return false
	}
	q := w.quota("polluter")
	return q.Unlimited() || q.CPUs() > 0.2
}

// Discover implements sense.Discoverer.
func (w *world) Discover(context.Context) ([]sense.Tenant, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []sense.Tenant
	for _, t := range w.tenants {
		if !w.gone[t.ID] {
			out = append(out, t)
		}
	}
	return out, nil
}

// Read implements StatsReader: cumulative usage from a per-tenant rate.
type fakeStats struct {
	w     *world
	mu    sync.Mutex
	usage map[string]time.Duration
	// throttled is the time each tenant was held back, in the periodic
	// world (see periodicUse).
	throttled map[string]time.Duration
	last      map[string]time.Time
	// nrThrottled counts the periods each was held back in, in the
	// overrun world.
	nrThrottled map[string]uint64
}

func (s *fakeStats) Read(_ context.Context, t sense.Tenant, _ *sense.TenantStats) (sense.TenantStats, error) {
	s.w.mu.Lock()
	gone := s.w.gone[t.ID]
	s.w.mu.Unlock()
	if gone {
		return sense.TenantStats{}, fmt.Errorf("tenant %s: %w", t.ID, fs.ErrNotExist)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.w.now()
	rate := map[string]float64{"victim": 1.0, "polluter": 0.85, "bystander": 0.15}[t.Name]
	s.w.mu.Lock()
	if r, ok := s.w.rates[t.Name]; ok {
		rate = r
	}
	if t.Name == "polluter" && (!s.w.running || s.w.stalled) || s.w.idle {
		rate = 0
	}
	s.w.mu.Unlock()
	s.w.mu.Lock()
	periodic, every, overrun, stopped := s.w.periodic || s.w.overrun > 0, max(s.w.runEvery, s.w.overrun, 1), max(s.w.overrun, 1), s.w.stopped
	running := s.w.running
	s.w.mu.Unlock()
	q := s.w.quota(t.Name)
	if !q.Unlimited() {
		rate = min(rate, q.CPUs())
	}
	if s.throttled == nil {
		s.throttled, s.nrThrottled = map[string]time.Duration{}, map[string]uint64{}
	}
	if last, ok := s.last[t.ID]; ok {
		capped := periodic && !q.Unlimited() && q.Period > 0
		if capped && rate >= q.CPUs() {
			q1 := q
			q1.Quota *= time.Duration(overrun)
			use, held := periodicUse(q1, every, now)
			use0, held0 := periodicUse(q1, every, last)
			s.usage[t.ID] += use - use0
			s.throttled[t.ID] += held - held0
		} else {
			s.usage[t.ID] += time.Duration(rate * float64(now.Sub(last)))
		}
		if capped && overrun > 1 && t.Name == "polluter" {
			// Throttled in every period but those it runs in, while it
			// runs and while it pays its last run off.
			end := now
			if !running {
				if paid := stopped.Add(time.Duration(overrun) * q.Period); paid.Before(now) {
					end = paid
				}
			}
			if end.After(last) {
				s.nrThrottled[t.ID] += uint64(periodsThrottled(q.Period, every, end) - periodsThrottled(q.Period, every, last))
			}
		}
	}
	s.last[t.ID] = now
	return sense.TenantStats{At: now, Usage: s.usage[t.ID], Throttled: s.throttled[t.ID], NrThrottled: s.nrThrottled[t.ID]}, nil
}

// periodsThrottled is how many periods of length period that do not begin
// a run (one in every) have begun by at.
func periodsThrottled(period time.Duration, every int, at time.Time) int64 {
	n := int64(time.Duration(at.UnixNano())/period) + 1
	return n - (n+int64(every)-1)/int64(every)
}

// periodicUse is the CPU time a tenant that always wants more than its
// quota q has had by at, running its quota at the start of one period in
// every since the epoch, and the time it was held back: as the kernel
// counts it, added when a run begins, the wait since the last one.
func periodicUse(q cgroup.Quota, every int, at time.Time) (use, held time.Duration) {
	since := time.Duration(at.UnixNano())
	n, into := int64(since/q.Period), since%q.Period
	k := int64(every)
	runs := n/k + 1 // the runs begun by at: periods 0, k, 2k, … up to n
	use = time.Duration(runs-1) * q.Quota
	if n%k == 0 {
		use += min(into, q.Quota)
	} else {
		use += q.Quota
	}
	return use, time.Duration(runs) * (time.Duration(k)*q.Period - q.Quota)
}

// worldRunnable implements RunnableReader: the polluter's thread is
// runnable while it runs (stalled or not), the others' always.
type worldRunnable struct{ w *world }

func (r worldRunnable) Runnable(_ context.Context, t sense.Tenant) (bool, bool, error) {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	if r.w.gone[t.ID] {
		return false, false, nil
	}
	return t.Name != "polluter" || r.w.running, true, nil
}

// fakeProbe reads 300 ns (DRAM) quiet, 2000 ns while the polluter pollutes.
type fakeProbe struct{ w *world }

func (p fakeProbe) reading(cpu int) []sense.ProbeReading {
	ns := 300.0
	if p.w.polluting() {
		ns = 2000
	}
	rs := []sense.ProbeReading{{Domain: 0, CPU: cpu, Kind: sense.ProbeDRAM, Ns: ns}}
	p.w.mu.Lock()
	llc, noise := p.w.llc, p.w.llcNoise
	p.w.mu.Unlock()
	if llc {
		ns := 10.0
		if noise {
			ns = 100
		}
		rs = append(rs, sense.ProbeReading{Domain: 0, CPU: cpu, Kind: sense.ProbeLLC, Ns: ns})
	}
	return rs
}
func (p fakeProbe) Measure() ([]sense.ProbeReading, error) {
	return append(p.reading(0), p.reading(1)...), nil
}
func (p fakeProbe) MeasureCPU(domain, cpu int, _ ...string) ([]sense.ProbeReading, error) {
	p.w.mu.Lock()
	p.w.probed++
	p.w.probedOn = append(p.w.probedOn, cpu)
	p.w.mu.Unlock()
	if cpu == p.w.busyCPU {
		// A CPU the probe cannot get onto. Released when the test ends,
		// it reads nothing: the world is being torn down.
		<-p.w.block
		return nil, errors.New("probe released at the end of the test")
	}
	return p.reading(cpu), nil
}
func (p fakeProbe) Targets() []sense.Target {
	return []sense.Target{{Domain: 0, CPU: 0}, {Domain: 0, CPU: 1}}
}
func (p fakeProbe) Domains() []sense.ProbeDomain {
	return []sense.ProbeDomain{{ID: 0, CPUs: cpuset.Of(0, 1)}}
}

// fakeCounters reports bus locks for the polluter, like a PMU would.
type fakeCounters struct{ w *world }

func (fakeCounters) Sync(context.Context, []sense.Tenant) error { return nil }
func (c fakeCounters) Read(context.Context) (map[string]map[string]float64, error) {
	out := map[string]map[string]float64{}
	for _, t := range c.w.tenants {
		out[t.ID] = map[string]float64{"bus_locks": 10}
	}
	if c.w.polluting() {
		out["/lab/polluter"]["bus_locks"] = 800000
	}
	return out, nil
}
func (fakeCounters) FDs() int     { return 6 }
func (fakeCounters) Close() error { return nil }

func testConfig(dir string) Config {
	c := Defaults()
	c.Interval = 50 * time.Millisecond
	c.Proof.Slot = 10 * time.Millisecond
	c.Proof.Backoff = time.Second
	c.Throttle.Hold = 200 * time.Millisecond
	c.StateDir = dir
	return c
}

type harness struct {
	w     *world
	agent *Agent
	state *act.StateFile
	actionLog
	journal string
	// vloop drives the agent on virtual time (newVirtualHarness); nil
	// for one that runs on its real loop (run).
	*vloop
}

// actionLog is the actions a test agent reported (Deps.OnAction).
type actionLog struct {
	mu      sync.Mutex
	actions []api.ActionRecord
}

// count says how many actions of a kind on the named tenant were reported.
func (l *actionLog) count(kind api.ActionKind, name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.actions {
		if a.Kind == kind && a.Name == name {
			n++
		}
	}
	return n
}

func (l *actionLog) has(kind api.ActionKind, name string) bool { return l.count(kind, name) > 0 }

// newVirtualHarness is newHarness on virtual time: the agent and its world
// share a clock, and the test moves it on (advance, until) instead of
// running the loop and waiting; the agent is started, and stop restores.
func newVirtualHarness(t *testing.T, w *world, cfg Config, quota QuotaActuator) *harness {
	t.Helper()
	return newVirtualHarnessWith(t, w, cfg, quota)
}

// newVirtualHarnessWith is newVirtualHarness with parts changed (tweak).
func newVirtualHarnessWith(t *testing.T, w *world, cfg Config, quota QuotaActuator, tweak ...func(*Deps)) *harness {
	t.Helper()
	c := newClock()
	w.now = c.Now
	tweak = append([]func(*Deps){func(d *Deps) { d.Now, d.Sleep = c.Now, c.Sleep }}, tweak...)
	hs := newHarness(t, w, cfg, quota, tweak...)
	hs.vloop = startLoop(t, hs.agent, c, &hs.actionLog)
	return hs
}

// newHarness builds an agent on the world with fake parts; tweak changes
// its parts before it is built.
func newHarness(t *testing.T, w *world, cfg Config, quota QuotaActuator, tweak ...func(*Deps)) *harness {
	t.Helper()
	hs := &harness{w: w}
	st, err := act.OpenState(StatePath(cfg.StateDir))
	if err != nil {
		t.Fatal(err)
	}
	hs.state = st
	if quota == nil {
		quota = &act.CPUQuota{Host: w.h, Layout: w.layout, State: st}
	}
	hs.journal = JournalPath(cfg.StateDir)
	j, err := act.OpenJournal(hs.journal)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	d := Deps{Discoverer: w, Stats: &fakeStats{w: w, usage: map[string]time.Duration{}, last: map[string]time.Time{}}, Runnable: worldRunnable{w},
		Probe: fakeProbe{w}, Quota: quota, Journal: j,
		OnAction: func(r api.ActionRecord) { hs.mu.Lock(); hs.actions = append(hs.actions, r); hs.mu.Unlock() }}
	if w.counters {
		d.Counters, d.PMU = fakeCounters{w}, true
	}
	for _, f := range tweak {
		f(&d)
	}
	a, err := New(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	// Quiet baselines, as the lab calibrates before tenants start.
	a.cont.Calibrate([]sense.ProbeReading{{Domain: 0, CPU: 0, Kind: sense.ProbeDRAM, Ns: 300}, {Domain: 0, CPU: 1, Kind: sense.ProbeDRAM, Ns: 310}})
	a.sensor.survey = 0 // calibrated: no start-up survey
	hs.agent = a
	return hs
}

func (hs *harness) run(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- hs.agent.Run(ctx) }()
	return func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("agent did not stop")
		}
	}
}

func (hs *harness) waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			hs.mu.Lock()
			defer hs.mu.Unlock()
			t.Fatalf("timed out waiting for %s; actions: %+v", what, hs.actions)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The whole loop: contention is detected, the polluter alone is proven and
// throttled, the bystander and the victim are never throttled, and when the
// polluter stops it is released; on exit nothing stays throttled.
func TestAgentThrottlesOnlyThePolluter(t *testing.T) {
	for _, pmu := range []bool{false, true} {
		t.Run(fmt.Sprintf("pmu=%v", pmu), func(t *testing.T) {
			w := newWorld(t)
			w.counters = pmu
			hs := newVirtualHarness(t, w, testConfig(t.TempDir()), nil)
			hs.until(t, "throttle", 5*time.Second, func() bool { return hs.has("throttle", "polluter") })
			// Its 6.7× storm predicts 1.06× at 1/16: held on the deep
			// floor, 1 ms in 128.
			if q := w.quota("polluter"); q.Quota != time.Millisecond || q.Period != 128*time.Millisecond {
				t.Errorf("polluter quota after throttle = %v, want the deep floor (1ms/128ms)", q)
			}
			for _, n := range []string{"victim", "bystander"} {
				if hs.has("throttle", n) {
					t.Errorf("%s throttled", n)
				}
			}
			if pmu && (hs.has("proof", "victim") || hs.has("proof", "bystander")) {
				t.Error("with bus-lock counts, only the polluter should be proven")
			}
			// The polluter stops: it is released within a few intervals.
			w.setRunning(false)
			hs.until(t, "release", 3*time.Second, func() bool { return w.quota("polluter").Unlimited() })
			st, ok := hs.agent.Latest()
			if !ok || len(st.Tenants) != 3 || st.ActionsTotal["throttle"] < 1 || st.ProofsTotal["polluter"] < 1 {
				t.Errorf("state: %+v", st)
			}
			hs.stop(t)
			for _, n := range []string{"victim", "polluter", "bystander"} {
				if q := w.quota(n); !q.Unlimited() || q.Period != 100*time.Millisecond {
					t.Errorf("%s left at %v after exit", n, q)
				}
			}
			if len(hs.state.Entries()) != 0 {
				t.Errorf("state file not empty: %+v", hs.state.Entries())
			}
			b, _ := os.ReadFile(hs.journal)
			for _, k := range []string{`"kind":"start"`, `"kind":"detection"`, `"kind":"proof"`, `"kind":"throttle"`, `"kind":"release"`, `"kind":"stop"`} {
				if !strings.Contains(string(b), k) {
					t.Errorf("journal lacks %s", k)
				}
			}
		})
	}
}

// The same on the real loop (Run, its timers, its end when the context
// ends), end to end: the polluter is throttled, and Run restores it when it
// returns.
func TestAgentRunThrottlesAndRestores(t *testing.T) {
	w := newWorld(t)
	hs := newHarness(t, w, testConfig(t.TempDir()), nil)
	stop := hs.run(t)
	hs.waitFor(t, "a throttle", 5*time.Second, func() bool { return hs.has("throttle", "polluter") })
	if q := w.quota("polluter"); q.Unlimited() || q.CPUs() > 0.2 {
		t.Errorf("polluter quota after throttle = %v", q)
	}
	stop()
	if q := w.quota("polluter"); !q.Unlimited() || q.Period != 100*time.Millisecond {
		t.Errorf("polluter left at %v after Run returned", q)
	}
	if len(hs.state.Entries()) != 0 {
		t.Errorf("state file not empty: %+v", hs.state.Entries())
	}
}

// kill -9 while throttling: the agent is dropped without its shutdown. The
// next agent restores the quota from the state file before anything else.
func TestAgentRestoresAfterKill(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	hs := newVirtualHarness(t, w, testConfig(dir), nil)
	hs.until(t, "throttle", 5*time.Second, func() bool { return hs.has("throttle", "polluter") })
	if w.quota("polluter").Unlimited() {
		t.Fatal("setup: polluter not throttled")
	}
	// "kill -9": hs.agent is abandoned. A new one, on the real loop,
	// starts and stops at once.
	w.setRunning(false)
	w.now = time.Now
	hs2 := newHarness(t, w, testConfig(dir), nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := hs2.agent.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if q := w.quota("polluter"); !q.Unlimited() || q.Period != 100*time.Millisecond {
		t.Errorf("polluter still at %v after restart", q)
	}
	b, _ := os.ReadFile(JournalPath(dir))
	if !strings.Contains(string(b), `"kind":"restore"`) {
		t.Error("restart did not journal the restore")
	}
}

// A tenant removed mid-sample, and a throttled tenant that vanishes.
func TestAgentTenantVanishes(t *testing.T) {
	w := newWorld(t)
	hs := newVirtualHarness(t, w, testConfig(t.TempDir()), nil)
	defer hs.stop(t)
	hs.until(t, "throttle", 5*time.Second, func() bool { return hs.has("throttle", "polluter") })
	w.mu.Lock()
	w.gone["/lab/polluter"] = true
	w.mu.Unlock()
	os.RemoveAll(filepath.Join(w.root, "cg/cpu/lab/polluter"))
	hs.until(t, "vanished tenant forgotten", 3*time.Second, func() bool {
		st, _ := hs.agent.Latest()
		return len(st.Tenants) == 2 && len(hs.state.Entries()) == 0
	})
	if !hs.has(api.KindRelease, "polluter") {
		t.Error("the vanished polluter's throttle was dropped without a release on record")
	}
}

// failingQuota fails every write as cgroupfs does without permission.
type failingQuota struct {
	mu     sync.Mutex
	writes int
}

func (f *failingQuota) Apply(context.Context, string, string, cgroup.Quota) error {
	f.mu.Lock()
	f.writes++
	f.mu.Unlock()
	return &fs.PathError{Op: "write", Path: "cpu.cfs_quota_us", Err: syscall.EACCES}
}
func (f *failingQuota) Restore(context.Context, string) error   { return nil }
func (f *failingQuota) RestoreAll(context.Context) (int, error) { return 0, nil }

// Write errors from cgroupfs: journalled, backed off, never a crash or a
// tight retry loop.
func TestAgentWriteErrors(t *testing.T) {
	w := newWorld(t)
	fq := &failingQuota{}
	cfg := testConfig(t.TempDir())
	hs := newVirtualHarness(t, w, cfg, fq)
	writes := func() int {
		fq.mu.Lock()
		defer fq.mu.Unlock()
		return fq.writes
	}
	hs.advance(t, 800*time.Millisecond, nil)
	if n := writes(); n == 0 || n > 4 {
		t.Errorf("%d write attempts in 0.8 s; want a few, backed off", n)
	}
	// And so on: at most an attempt a second on each of the three tenants,
	// not one an interval.
	before := writes()
	hs.advance(t, 10*time.Second, nil)
	if n := writes() - before; n > 3*10+3 {
		t.Errorf("%d write attempts in 10 s; want at most one a second per tenant", n)
	}
	// The backoff doubles (1 s, 2 s, 4 s, …): by now each tenant waits 8 s
	// or more between attempts, however its aborted proofs ended.
	before = writes()
	hs.advance(t, 20*time.Second, nil)
	hs.stop(t)
	if n := writes() - before; n > 3*3 {
		t.Errorf("%d write attempts in the next 20 s; want the backoff to have grown (at most 3 a tenant)", n)
	}
	b, _ := os.ReadFile(hs.journal)
	if !strings.Contains(string(b), `"kind":"error"`) || !strings.Contains(string(b), "permission denied") {
		t.Errorf("journal lacks the write error:\n%s", b)
	}
}

// A CPU the probe cannot get onto: the agent keeps its interval, reports the
// other CPU's readings, and still catches the polluter.
func TestAgentProbeCPUBusy(t *testing.T) {
	w := newWorld(t)
	w.busyCPU = 0
	cfg := testConfig(t.TempDir())
	hs := newVirtualHarness(t, w, cfg, nil)
	defer hs.stop(t)
	hs.until(t, "throttle despite a busy probe CPU", 5*time.Second, func() bool { return hs.has("throttle", "polluter") })
	steps := hs.agent.steps
	hs.advance(t, 10*cfg.Interval, nil)
	if n := hs.agent.steps - steps; n < 10 {
		t.Errorf("%d intervals in 10 × Interval: the agent stalled", n)
	}
	st, _ := hs.agent.Latest()
	if age := hs.clock.Now().Sub(st.Time); age > cfg.Interval {
		t.Errorf("agent stalled: last state %v ago", age)
	}
	for _, p := range st.Probes {
		if p.CPU == 0 {
			t.Errorf("reading from the busy CPU: %+v", p)
		}
	}
}

// Dry run: the agent judges and journals, and writes nothing, at any
// moment (a write undone by the time it stops is a write all the same).
func TestAgentDryRun(t *testing.T) {
	w := newWorld(t)
	cfg := testConfig(t.TempDir())
	cfg.DryRun = true
	hs := newVirtualHarness(t, w, cfg, nil)
	written := func() bool {
		for _, n := range []string{"victim", "polluter", "bystander"} {
			b, _ := os.ReadFile(filepath.Join(w.root, "cg/cpu/lab", n, "cpu.cfs_quota_us"))
			if strings.TrimSpace(string(b)) != "-1" {
				t.Errorf("dry run wrote %s's quota: %s", n, b)
				return true
			}
		}
		if len(hs.state.Entries()) != 0 {
			t.Errorf("dry run recorded state: %+v", hs.state.Entries())
			return true
		}
		return false
	}
	hs.until(t, "would-be proof", 3*time.Second, func() bool {
		return written() || hs.has("proof", "polluter") || hs.has("proof", "victim")
	})
	// Long enough for a real proof to have capped someone and convicted
	// the polluter.
	hs.advance(t, 2*time.Second, written)
	hs.stop(t)
	written()
}

// Protected tenants are never proven nor throttled. The control: in the
// same world, unprotected, the polluter is proven and throttled; the
// protected run then lasts twice as long as that took, so nothing happening
// means the protection held, not that the run was too short.
func TestAgentProtect(t *testing.T) {
	w := newWorld(t)
	hs := newVirtualHarness(t, w, testConfig(t.TempDir()), nil)
	took := hs.until(t, "unprotected polluter throttled (control)", 5*time.Second, func() bool { return hs.has("throttle", "polluter") })
	hs.stop(t)
	if !hs.has("proof", "polluter") {
		t.Fatal("control: the unprotected polluter was throttled without a proof")
	}

	w = newWorld(t)
	cfg := testConfig(t.TempDir())
	cfg.Protect = []string{"polluter"}
	hs = newVirtualHarness(t, w, cfg, nil)
	hs.advance(t, max(5*time.Second, 2*took), nil)
	hs.stop(t)
	if hs.has("proof", "polluter") || hs.has("throttle", "polluter") {
		t.Error("protected tenant touched")
	}
	for _, n := range []string{"victim", "bystander"} {
		if hs.has("throttle", n) {
			t.Errorf("%s throttled while the real polluter is protected", n)
		}
	}
	if !w.polluting() {
		t.Error("the protected polluter stopped polluting: the run tested nothing")
	}
}
