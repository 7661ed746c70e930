package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// Prober is the canary probe as the agent uses it.
type Prober interface {
	Measure() ([]sense.ProbeReading, error)
	MeasureCPU(domain, cpu int, kinds ...string) ([]sense.ProbeReading, error)
	Targets() []sense.Target
	Domains() []sense.ProbeDomain
}

// probeTimeout bounds how long the agent waits for the probe on one CPU. A
// probe normally takes a millisecond or two; a CPU starved by its tenants (or,
// in a VM, stopped by the host while it does split locks) can hold the probe
// thread for seconds, and the agent must not stall with it.
const probeTimeout = 60 * time.Millisecond

// probeGap separates the probes of two CPUs in one interval.
const probeGap = 5 * time.Millisecond

// probeRun is a probe measurement that may still be running.
type probeRun struct {
	done     chan struct{}
	readings []sense.ProbeReading
	err      error
}

// Counters are per-tenant perf counters (nil on hosts without them).
type Counters interface {
	Sync(tenants []sense.Tenant) error
	Read() (map[string]map[string]float64, error)
	FDs() int
	Close() error
}

// StatsReader samples a tenant's cgroup counters; prev is its previous
// sample (nil for a new tenant), which lets the reader skip what an idle
// tenant cannot have changed.
type StatsReader interface {
	Read(t sense.Tenant, prev *sense.TenantStats) (sense.TenantStats, error)
}

// QuotaActuator throttles and restores tenants' CPU quota.
type QuotaActuator interface {
	Apply(cgroupPath, tenant string, q cgroup.Quota) error
	Restore(cgroupPath string) error
	RestoreAll() (int, error)
}

// Deps are the agent's parts; New wires real ones, tests inject fakes.
type Deps struct {
	Discoverer sense.Discoverer
	Stats      StatsReader
	Probe      Prober
	Counters   Counters // optional
	Quota      QuotaActuator
	Journal    *act.Journal
	Log        *slog.Logger
	// OnAction is called for every action (the lab records them on its timeline).
	OnAction func(ActionRecord)
	// Host names the machine in the state.
	Host, Version string
	// PMU says whether Counters include hardware events.
	PMU bool
	// Sleep pauses between per-CPU probes (nil: time.Sleep); the simulator
	// runs on virtual time.
	Sleep func(time.Duration)
	// Now is the clock of actions and journal entries made outside an
	// interval's own time (nil: time.Now); the simulator's is virtual.
	Now func() time.Time
	// Hardware are the hardware-assisted policies (bus-lock budget, power
	// budget, pollution permits, LLC/MBA isolation) where the host has
	// what they need; nil runs only the probe policy.
	Hardware *Hardware
	// RestoreRecords undoes every hardware lever recorded in the state
	// file (resctrl classes, clock modulation, cpufreq limits) from the
	// records alone, at start (what a killed predecessor left) and at stop.
	RestoreRecords func() (restored int, err error)
}

// Agent is one running crosstalk agent.
type Agent struct {
	cfg    Config
	d      Deps
	log    *slog.Logger
	sp     act.Sparsify
	cont   *judge.Contention
	susp   *judge.Suspects
	domain map[int]cpuset.Set
	// wait judges CPU-time contention (cpuwait.go), with its own suspects.
	wait     *judge.CPUWait
	waitSusp *judge.Suspects

	latest       atomic.Pointer[State]
	baselinePath string // where probe baselines persist across restarts ("" = nowhere)
	steps        int

	mu        sync.Mutex // guards what the state API reads
	prev      map[string]sense.TenantStats
	marks     map[string]delayMark
	throttled map[string]*throttled
	backoff   map[string]backoff
	holds     map[string]*tenantHolds // what each policy holds each tenant to
	proof     *proof
	pending   map[int]*probeRun // per CPU: a probe that outlived its timeout
	// capTime is each tenant's proof cap time in the last minute, for the
	// budget that bounds what proofs may cost an innocent.
	capTime map[string][]capSlot
	// watchAt is when the next watch is due, watchN counts watches (for
	// the CPU rotation), watchKind is the probe kind it reads: DRAM where
	// the probe has it, else the first kind the intervals read.
	watchAt   time.Time
	watchN    int
	watchKind string
	anyBusy   bool // some tenant used CPU in the last interval
	// hotKind is when each probe kind last read contended: a proof reads
	// the DRAM probe if it did lately (see proofCPU).
	hotKind map[string]time.Time
	// survey is how many start-up surveys of the quiet probe level are
	// left (see surveyQuiet); none once baselines were calibrated or
	// restored.
	survey    int
	lastRatio float64
	// recent are the last intervals' contention ratios: bursty contention is
	// judged by its peak, not by whichever interval a proof happens to start in.
	recent []float64
	// lastWait is this interval's CPU-wait verdict, waitCPUs the CPUs of
	// the tenants it judged.
	lastWait judge.WaitVerdict
	waitCPUs map[string]cpuset.Set
	// lastChange is when a throttle was last applied or lifted: caches and
	// probes need a couple of intervals to settle before the next proof.
	lastChange time.Time
	actions    []ActionRecord
	totals     map[string]uint64
	proofs     map[string]uint64
}

type throttled struct {
	tenant sense.Tenant
	thr    *act.Throttle
	signal string // what convicted it: signalProbe or signalWait
}

type backoff struct {
	until time.Time
	next  time.Duration
}

// proof is a perturbation proof in progress (judge.Proof) and what the
// agent needs to run it: whom it caps, where it reads, and the cap state
// it applied last.
type proof struct {
	tenant sense.Tenant
	p      *judge.Proof
	cpu    CPUDomain // where the probe reads
	kind   string    // the probe kind that showed the contention ("" = all)
	reason string
	capped bool // the cap is applied now
	// switched says the cap state changed since the last reading: a
	// CPU-wait reading's window then spans both states.
	switched bool
	since    time.Time // when the cap was last applied
	next     time.Time // the next reading
	// signal is the contention being proven: signalProbe (the canary
	// probes on cpu) or signalWait (the victims' CPU wait, waitFrom their
	// counters at the previous reading).
	signal   string
	victims  []sense.Tenant
	waitFrom map[string]sense.TenantStats
}

// proofPeriod is the CFS period of a proof's hard cap: the capped suspect
// runs at most 1 ms of it, mostly right when the cap is set (before a
// slot's first reading) and then in one reading of a hundred.
const proofPeriod = 100 * time.Millisecond

// CPUDomain is a CPU and its L3 domain.
type CPUDomain struct{ Domain, CPU int }

// New builds an agent from its configuration and parts.
func New(cfg Config, d Deps) (*Agent, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Discoverer == nil || d.Stats == nil || d.Probe == nil || d.Quota == nil {
		return nil, errors.New("agent: discoverer, stats, probe and quota actuator are required")
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Journal == nil {
		d.Journal, _ = act.OpenJournal("")
	}
	if d.Sleep == nil {
		d.Sleep = time.Sleep
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	a := &Agent{
		cfg: cfg, d: d, log: d.Log, sp: cfg.Sparsify(),
		cont: judge.NewContention(cfg.Thresholds()), susp: judge.NewSuspects(cfg.Judge.Window),
		wait: judge.NewCPUWait(cfg.WaitThresholds()), waitSusp: judge.NewSuspects(cfg.Judge.Window),
		domain: map[int]cpuset.Set{}, prev: map[string]sense.TenantStats{}, marks: map[string]delayMark{}, throttled: map[string]*throttled{},
		backoff: map[string]backoff{}, totals: map[string]uint64{}, proofs: map[string]uint64{}, holds: map[string]*tenantHolds{},
		pending: map[int]*probeRun{}, capTime: map[string][]capSlot{}, survey: surveyRounds,
		hotKind: map[string]time.Time{},
	}
	for _, pd := range d.Probe.Domains() {
		a.domain[pd.ID] = pd.CPUs
	}
	return a, nil
}

// Latest returns the last published state.
func (a *Agent) Latest() (State, bool) {
	s := a.latest.Load()
	if s == nil {
		return State{}, false
	}
	return *s, true
}

// Calibrate takes n quiet probe readings into the baselines, one per
// interval: call it before tenants start (the lab does), or rely on saved
// baselines. The spacing matters: back-to-back readings find the probe's
// buffers still warm in the caches and would set a baseline that normal
// operation, one reading per interval, never gets back to.
func (a *Agent) Calibrate(ctx context.Context, n int) error {
	for i := range n {
		if i > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(a.cfg.Interval):
			}
		}
		rs, err := a.d.Probe.Measure()
		if err != nil {
			return err
		}
		a.cont.Calibrate(rs)
	}
	a.survey = 0
	return nil
}

// Baselines exports the probe baselines for saving across restarts.
func (a *Agent) Baselines() map[string]judge.Baseline { return a.cont.Baselines() }

// RestoreBaselines imports saved baselines.
func (a *Agent) RestoreBaselines(b map[string]judge.Baseline) {
	a.cont.Restore(b)
	if len(a.cont.Baselines()) > 0 {
		a.survey = 0
	}
}

// Run loops until ctx ends, then restores every tenant it throttled.
func (a *Agent) Run(ctx context.Context) error {
	a.restoreLeftovers()
	defer a.shutdown()

	timer := time.NewTimer(0)
	defer timer.Stop()
	next := time.Time{}
	for {
		var proofTimer <-chan time.Time
		if p := a.currentProof(); p != nil {
			proofTimer = time.After(time.Until(p.next))
		}
		select {
		case <-ctx.Done():
			return nil
		case now := <-timer.C:
			next = a.Tick(now, next)
			wake := next
			if !a.watchAt.IsZero() && a.watchAt.Before(wake) {
				wake = a.watchAt
			}
			timer.Reset(time.Until(wake))
		case now := <-proofTimer:
			a.proofSample(now)
		}
	}
}

// Tick drives the agent on a caller's clock instead of Run's timers (the
// simulator runs on virtual time): it takes a proof sample when one is due,
// runs an interval when next has passed, and between intervals watches for
// a first sign of contention (see watch). It returns when the next interval
// is due: an interval on, or WatchEvery while a first sign of
// contention waits to be confirmed. Call it at least as often as WatchEvery;
// call Start first and Stop at the end.
func (a *Agent) Tick(now, next time.Time) time.Time {
	if p := a.currentProof(); p != nil && !now.Before(p.next) {
		a.proofSample(now)
	}
	due := next.IsZero() || !now.Before(next)
	if !due && !a.watchAt.IsZero() && !now.Before(a.watchAt) {
		a.watchAt = now.Add(a.WatchEvery())
		due = a.watch()
	}
	if !due {
		return next
	}
	quick := a.step(now)
	a.watchAt = now.Add(a.WatchEvery())
	if quick {
		return now.Add(a.WatchEvery())
	}
	return now.Add(a.cfg.Interval)
}

// WatchEvery is how often the agent looks for a first sign of contention
// between intervals, and how soon it confirms one: a quarter of an interval,
// at least quickInterval. (Each look costs about 0.2-0.3 ms of CPU in a VM,
// most of it the wake-up itself: four a second at the 1 s interval.)
func (a *Agent) WatchEvery() time.Duration { return max(a.cfg.Interval/4, quickInterval) }

// minBusy is the CPU use (cores) of a busy tenant, for the watch.
const minBusy = 0.05

// quickInterval is the shortest watch: the probes' own cost bounds it.
const quickInterval = 100 * time.Millisecond

// watch takes one cheap probe reading between intervals — two chunks of
// the DRAM kind on one CPU, in turn — while some tenant was busy in the
// last interval (with every tenant idle there is nobody to protect yet,
// and the next interval sees whoever starts), and
// reports whether it reads contended, so that the interval runs now: a
// polluter that starts just after an interval would otherwise run free for
// most of one before anyone looks. It teaches the baselines nothing, and
// stays quiet while a proof or a throttle is running (the interval then
// watches closely enough), or before the first interval's readings.
func (a *Agent) watch() bool {
	a.mu.Lock()
	busy := a.proof != nil || len(a.throttled) > 0 || a.watchKind == "" || !a.anyBusy
	a.mu.Unlock()
	if busy {
		return false
	}
	targets := a.d.Probe.Domains()
	if len(targets) == 0 {
		return false
	}
	a.watchN++
	d := targets[a.watchN%len(targets)]
	cpus := d.CPUs.List()
	if len(cpus) == 0 {
		return false
	}
	cpu := cpus[(a.watchN/len(targets))%len(cpus)]
	rs, err := a.measureQuick(d.ID, cpu, a.watchKind)
	if err != nil || len(rs) == 0 {
		return false
	}
	rated := a.cont.Rate(rs)
	return a.cont.Worst(rated, nil) >= a.cont.Thresholds().Ratio && a.cont.Above(rated[0])
}

// surveyRounds is how many intervals at start survey the quiet level.
const surveyRounds = 2

// surveyMax bounds the tenants a survey caps at once.
const surveyMax = 16

// surveyQuiet learns what the probes read when no tenant runs, for an
// agent that starts with no baselines (none saved, none calibrated) on a
// host that may already be contended: whatever the probes read first would
// otherwise become "quiet", and a polluter already running would never
// show. Every busy tenant is capped hard at once for a few milliseconds
// while the probes read; those readings only ever lower the baselines.
// It runs surveyRounds times, on intervals where tenants have rates, and
// costs each busy tenant a few tens of milliseconds of CPU once; in
// dry-run it is skipped (nothing may be written).
func (a *Agent) surveyQuiet(now time.Time, samples []sample) {
	if a.cfg.DryRun {
		a.survey = 0
		return
	}
	var busy []sense.Tenant
	fresh := false
	for _, s := range samples {
		fresh = fresh || s.fresh
		if s.fresh && s.usage >= 0.05 && !a.protected(s.t) && len(busy) < surveyMax {
			busy = append(busy, s.t)
		}
	}
	if !fresh {
		return // no rates yet: who is busy is not known
	}
	a.survey--
	if len(busy) == 0 {
		return
	}
	a.mu.Lock()
	var capped []sense.Tenant
	for _, t := range busy {
		if a.heldLocked(t.ID, "") {
			continue
		}
		q := cgroup.Quota{Quota: time.Duration(max(1, t.CPUs.Len())) * cgroup.MinQuota, Period: proofPeriod}
		if err := a.apply(t, q, "survey", now); err != nil {
			a.handleWriteErr(t, err)
			continue
		}
		capped = append(capped, t)
		a.recordSlotLocked(now, t, "proof", q.CPUs(), "start-up survey: capped for a moment to read the probes' quiet level")
	}
	a.mu.Unlock()
	start := a.d.Now()
	a.d.Sleep(a.cfg.Proof.Slot / 4)
	var readings []sense.ProbeReading
	for range 2 {
		for _, t := range a.d.Probe.Targets() {
			if rs, err := a.measureCPU(t.Domain, t.CPU, t.Kinds...); err == nil {
				readings = append(readings, rs...)
			}
		}
	}
	a.cont.Lower(readings)
	a.mu.Lock()
	end := a.d.Now()
	for _, t := range capped {
		if err := a.releaseHoldLocked(t.ID, policyProbe); err != nil {
			a.log.Error("restore quota", "tenant", t.ID, "err", err)
		}
		a.capSpent(t.ID, end, end.Sub(start))
		a.recordSlotLocked(end, t, "proof-free", 0, "start-up survey done")
	}
	a.mu.Unlock()
	a.log.Info("surveyed the probes' quiet level with busy tenants capped", "tenants", len(capped), "readings", len(readings))
}

// Start does what Run does before its first interval: restore throttles a
// previous run left behind.
func (a *Agent) Start() { a.restoreLeftovers() }

// Stop restores everything the agent changed, as Run does when it ends.
func (a *Agent) Stop() { a.shutdown() }

func (a *Agent) restoreLeftovers() {
	a.journal(act.Event{Kind: "start", Detail: fmt.Sprintf("interval %s, dry-run %v", a.cfg.Interval, a.cfg.DryRun)})
	if n, err := a.d.Quota.RestoreAll(); n > 0 || err != nil {
		a.log.Warn("restored quotas a previous crosstalk left behind", "restored", n, "err", err)
		a.journal(act.Event{Kind: "restore", Detail: fmt.Sprintf("restored %d tenant(s) left throttled by a previous run (err: %v)", n, err)})
	}
	if a.d.RestoreRecords != nil {
		if n, err := a.d.RestoreRecords(); n > 0 || err != nil {
			a.log.Warn("restored hardware levers a previous crosstalk left behind (resctrl classes, clock modulation, cpufreq)", "restored", n, "err", err)
			a.journal(act.Event{Kind: "restore", Detail: fmt.Sprintf("restored %d hardware lever(s) left by a previous run (err: %v)", n, err)})
		}
	}
}

// shutdown restores everything the agent changed.
func (a *Agent) shutdown() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, t := range a.throttled {
		a.releaseLocked(t.tenant, "agent stopping")
		delete(a.throttled, id)
	}
	if p := a.proof; p != nil {
		p.p.Abort("agent stopping")
		a.uncapLocked(a.d.Now(), p, "agent stopping during a proof")
		a.proof = nil
		a.recordLocked(a.d.Now(), p.tenant, "release", 0, 1, "agent stopping during a proof")
	}
	for id, h := range a.holds {
		claims := h.claims
		a.forgetHoldsLocked(id)
		for _, p := range slices.Sorted(maps.Keys(claims)) {
			a.recordPolicyLocked(a.d.Now(), h.tenant, p, "release", string(claims[p].lever), 1, "agent stopping")
		}
	}
	if a.d.Hardware != nil {
		a.d.Hardware.stop(a)
	}
	// What the holds could not undo, and anything recorded outside them.
	if n, err := a.d.Quota.RestoreAll(); err != nil || n > 0 {
		a.log.Warn("restore on exit", "restored", n, "err", err)
	}
	if a.d.RestoreRecords != nil {
		if n, err := a.d.RestoreRecords(); err != nil || n > 0 {
			a.log.Warn("restore of hardware levers on exit", "restored", n, "err", err)
		}
	}
	if a.d.Counters != nil {
		a.d.Counters.Close()
	}
	a.saveBaselines()
	a.journal(act.Event{Kind: "stop"})
}

// sample is one interval's view of one tenant.
type sample struct {
	t        sense.Tenant
	usage    float64
	thrRatio float64
	psi      float64
	delay    float64
	counters map[string]float64
	fresh    bool // has rates (seen before)
	// waitUsage and waitDelay are CPU use and run delay over one window
	// (since the run delay was last read: an interval, or a turn of up to
	// 5 s on a busy host), for the CPU-wait judge's stretch; waitFresh says
	// the window ended this interval.
	waitUsage, waitDelay float64
	waitFresh            bool
}

// delayMark is a tenant's CPU time when its run delay was last read.
type delayMark struct {
	at    time.Time
	usage time.Duration
}

// step runs one interval: sense, judge, act, publish. It returns true when
// the probes saw a first sign of contention that the next interval should
// confirm (or clear) soon rather than an interval later: a reaction waits
// for persistent contention, and a polluter should not run free for two
// whole intervals before it is proved.
func (a *Agent) step(now time.Time) (quick bool) {
	cpuBefore := selfCPU()
	a.steps++
	if a.steps%120 == 0 {
		a.saveBaselines()
	}
	tenants, err := a.d.Discoverer.Discover()
	if err != nil {
		a.log.Warn("tenant discovery", "err", err)
	}
	a.budgetRunDelay(tenants)
	samples := a.sampleTenants(tenants)
	if a.survey > 0 {
		a.surveyQuiet(now, samples)
	}

	var counters map[string]map[string]float64
	if a.d.Counters != nil {
		order := a.priority(samples)
		if err := a.d.Counters.Sync(order); err != nil {
			a.log.Debug("perf counters", "err", err)
		}
		counters, err = a.d.Counters.Read()
		if err != nil {
			a.log.Debug("perf counters read", "err", err)
		}
		for i := range samples {
			samples[i].counters = counters[samples[i].t.ID]
		}
	}

	// The hardware sensors (RAPL, resctrl monitoring) are read now, outside
	// the lock; their policies decide below, with the rest.
	var hw *hwObservation
	if a.d.Hardware != nil {
		hw = a.d.Hardware.sense(now, samples, a.protected)
	}

	var readings []sense.ProbeReading
	var starved []int
	targets := a.d.Probe.Targets()
	if n := len(targets); n > 1 {
		// Start from a different CPU each interval and pause between CPUs:
		// probing a CPU pauses the tenant running there, and whatever runs
		// next on it (another tenant with a lower vruntime) must not be what
		// always fills the moment the next CPU is probed.
		k := a.steps % n
		targets = append(targets[k:], targets[:k]...)
	}
	for i, t := range targets {
		if i > 0 {
			a.d.Sleep(probeGap)
		}
		rs, err := a.measureCPU(t.Domain, t.CPU, t.Kinds...)
		switch {
		case errors.Is(err, errProbeBusy):
			starved = append(starved, t.CPU)
		case err != nil:
			a.log.Warn("probe", "cpu", t.CPU, "err", err)
		default:
			readings = append(readings, rs...)
		}
	}
	if len(starved) > 0 {
		a.log.Debug("probe could not run in time on CPUs", "cpus", starved)
	}
	if len(readings) == 0 {
		// No probe signal this interval: hold every probe decision rather
		// than read silence as quiet (which would relax throttled
		// polluters). CPU wait and the hardware policies have their own
		// sensors — and a CPU starved by a neighbour is exactly where the
		// probe cannot run.
		views := a.viewsOf(samples)
		a.mu.Lock()
		present := presentOf(samples)
		a.judgeWaitLocked(samples, views)
		a.controlLocked(now, judge.Verdict{Ratio: a.lastRatio}, present, false)
		if a.d.Hardware != nil {
			a.d.Hardware.actLocked(a, hw)
		}
		var ranked []judge.Suspect
		if a.proof == nil {
			ranked = a.maybeProveWaitLocked(now, views, present)
		}
		a.publishLocked(now, judge.Verdict{Ratio: a.lastRatio}, samples, ranked, nil, cpuBefore)
		a.mu.Unlock()
		return false
	}
	a.mu.Lock()
	held := a.heldDomainsLocked()
	a.anyBusy = false
	for _, s := range samples {
		if s.usage >= minBusy {
			a.anyBusy = true
			break
		}
	}
	if a.watchKind != sense.ProbeDRAM {
		for _, r := range readings {
			if r.Kind == sense.ProbeDRAM || a.watchKind == "" {
				a.watchKind = r.Kind
			}
		}
	}
	a.mu.Unlock()
	a.cont.Hold(held)
	for _, r := range a.cont.Rate(readings) {
		if a.cont.Above(r) {
			a.hotKind[r.Kind] = now
		}
	}
	v := a.cont.Update(readings)
	a.lastRatio = v.Ratio
	a.recent = append(a.recent, v.Ratio)
	if len(a.recent) > 3 {
		a.recent = a.recent[len(a.recent)-3:]
	}
	if a.log.Enabled(context.Background(), slog.LevelDebug) {
		var rs []string
		for _, r := range v.Readings {
			rs = append(rs, fmt.Sprintf("cpu%d/%s=%.0fns(%.1f×)", r.CPU, r.Kind, r.Ns, r.Ratio))
		}
		a.log.Debug("interval", "tenants", len(tenants), "contended", v.Contended, "ratio", fmt.Sprintf("%.2f", v.Ratio), "probes", strings.Join(rs, " "))
	}
	views := a.viewsOf(samples)
	a.susp.Observe(v, views)

	a.mu.Lock()
	defer a.mu.Unlock()
	present := presentOf(samples)
	a.judgeWaitLocked(samples, views)
	idle := a.controlLocked(now, v, present, true)
	if a.d.Hardware != nil {
		a.d.Hardware.actLocked(a, hw)
	}

	var ranked []judge.Suspect
	if v.Contended {
		ranked = a.susp.Rank(v, views, a.domain, func(id string) bool {
			if _, ok := a.throttled[id]; ok {
				return true
			}
			// Held down by another policy already (a budget, a permit):
			// proving it now would measure that policy's throttle.
			if a.heldLocked(id, "") {
				return true
			}
			if a.proof != nil && a.proof.tenant.ID == id {
				return true
			}
			return now.Before(a.backoff[id].until) || a.overBudget(id, now)
		})
		if a.proof == nil && v.Persistent && now.Sub(a.lastChange) >= 2*a.cfg.Interval {
			a.maybeProveLocked(now, v, ranked, present)
		}
	}
	if a.proof == nil {
		ranked = append(ranked, a.maybeProveWaitLocked(now, views, present)...)
	}
	a.publishLocked(now, v, samples, ranked, readings, cpuBefore)
	// A first sign of contention, or a throttled polluter that looks idle:
	// the next interval comes soon, to confirm it (or release it).
	return idle || a.proof == nil && len(a.throttled) == 0 && v.Ratio >= a.cont.Thresholds().Ratio && !v.Persistent
}

// runDelayBudget is how many threads' run delay (a /proc/TID/schedstat
// each) the agent reads per interval before it reads tenants in turns.
const runDelayBudget = 400

// maxRunDelayEvery bounds the turn: every tenant's run delay at least this often.
const maxRunDelayEvery = 5 * time.Second

// budgetRunDelay sets how often each tenant's run delay is read: every
// interval while the host's threads fit in the budget (a few VMs: the CPU-
// wait signal stays an interval's), else in turns long enough to stay
// within it, up to every 5 s (a thousand tenants).
func (a *Agent) budgetRunDelay(tenants []sense.Tenant) {
	r, ok := a.d.Stats.(interface{ SetRunDelayEvery(time.Duration) })
	if !ok {
		return
	}
	n := 0
	for _, t := range tenants {
		n += len(t.Threads)
	}
	every := time.Duration(0) // every read
	if n > runDelayBudget {
		every = min(maxRunDelayEvery, time.Duration(int64(a.cfg.Interval)*int64(n)/runDelayBudget))
	}
	r.SetRunDelayEvery(every)
}

// viewsOf is what the judges see of the tenants with rates this interval.
func (a *Agent) viewsOf(samples []sample) []judge.TenantView {
	views := make([]judge.TenantView, 0, len(samples))
	for _, s := range samples {
		if !s.fresh {
			continue
		}
		views = append(views, judge.TenantView{ID: s.t.ID, Name: s.t.Name, CPUs: s.t.CPUs, Usage: s.usage, Counters: s.counters, Protected: a.protected(s.t)})
	}
	return views
}

func presentOf(samples []sample) map[string]sample {
	present := make(map[string]sample, len(samples))
	for _, s := range samples {
		present[s.t.ID] = s
	}
	return present
}

// sampleTenants reads every tenant's counters and turns them into rates.
func (a *Agent) sampleTenants(tenants []sense.Tenant) []sample {
	out := make([]sample, 0, len(tenants))
	seen := map[string]bool{}
	for _, t := range tenants {
		var prev *sense.TenantStats
		if p, ok := a.prev[t.ID]; ok {
			prev = &p
		}
		st, err := a.d.Stats.Read(t, prev)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				a.log.Debug("tenant stats", "tenant", t.ID, "err", err)
			}
			continue // vanished mid-sample, or unreadable this time
		}
		seen[t.ID] = true
		s := sample{t: t}
		if p, ok := a.prev[t.ID]; ok {
			if dt := st.At.Sub(p.At).Seconds(); dt > 0 {
				s.fresh = true
				s.usage = max(0, (st.Usage-p.Usage).Seconds()/dt)
				s.thrRatio = max(0, (st.Throttled-p.Throttled).Seconds()/dt)
				// Run delay is read in turns (sense.CgroupStats.RunDelayEvery):
				// its rate is over the window between two reads.
				s.delay = st.RunDelayRate
				if st.HasPSI && p.HasPSI {
					s.psi = max(0, (st.PSISome-p.PSISome).Seconds()/dt)
				}
			}
		}
		// The run delay's window ends when it is read (or brought up to
		// date): CPU use over the same window makes the stretch consistent.
		if !st.RunDelayAt.IsZero() && st.RunDelayAt.Equal(st.At) {
			if m, ok := a.marks[t.ID]; ok {
				if dt := st.At.Sub(m.at).Seconds(); dt > 0 {
					s.waitUsage = max(0, (st.Usage-m.usage).Seconds()/dt)
					s.waitDelay = st.RunDelayRate
					s.waitFresh = true
				}
			}
			a.marks[t.ID] = delayMark{at: st.At, usage: st.Usage}
		}
		a.prev[t.ID] = st
		out = append(out, s)
	}
	for id := range a.prev {
		if !seen[id] {
			delete(a.prev, id)
		}
	}
	for id := range a.marks {
		if !seen[id] {
			delete(a.marks, id)
		}
	}
	return out
}

// priority orders tenants for the perf fd budget: throttled and suspected
// first, then by CPU use.
func (a *Agent) priority(samples []sample) []sense.Tenant {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := slices.Clone(samples)
	rank := func(x sample) int {
		if _, ok := a.throttled[x.t.ID]; ok {
			return 0
		}
		if a.proof != nil && a.proof.tenant.ID == x.t.ID {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(s, func(x, y sample) int {
		return cmp.Or(cmp.Compare(rank(x), rank(y)), cmp.Compare(y.usage, x.usage))
	})
	out := make([]sense.Tenant, len(s))
	for i := range s {
		out[i] = s[i].t
	}
	return out
}

// protected reports whether config protects a tenant.
func (a *Agent) protected(t sense.Tenant) bool {
	for _, p := range a.cfg.Protect {
		if p == t.ID || p == t.Name {
			return true
		}
		if ok, _ := path.Match(p, t.Cgroup); ok {
			return true
		}
	}
	return false
}

// domainsOf lists the probe domains a tenant's CPUs touch.
func (a *Agent) domainsOf(cpus cpuset.Set) []int {
	var out []int
	for id, c := range a.domain {
		if !c.Intersect(cpus).IsEmpty() {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// controlLocked runs the duty controller of every throttled tenant; with
// probed false (no probe readings this interval) only those convicted for
// CPU wait, whose signal does not come from the probes.
//
// It returns true when a throttled tenant used less than its idle share:
// it has likely stopped, and the next interval should come soon to
// release it.
func (a *Agent) controlLocked(now time.Time, v judge.Verdict, present map[string]sample, probed bool) (idle bool) {
	for id, t := range a.throttled {
		if !probed && t.signal != signalWait {
			if _, ok := present[id]; ok {
				continue
			}
		}
		s, ok := present[id]
		if !ok {
			// The tenant vanished: nothing to restore, forget it.
			a.forgetHoldsLocked(id)
			delete(a.throttled, id)
			a.recordLocked(now, t.tenant, "release", 0, 1, "tenant vanished")
			continue
		}
		ratio := a.cont.Worst(v.Readings, a.domainsOf(t.tenant.CPUs))
		if t.signal == signalWait {
			// Convicted for its neighbours' CPU wait: held to that. (The
			// probes' noise must not make it look useless.)
			ratio = a.waitRatioLocked(t.tenant)
		}
		if ratio == 0 {
			ratio = 1
		}
		ncpus := t.tenant.CPUs.Len()
		d := a.sp.Next(t.thr, now, ratio, s.usage, ncpus)
		if d != act.Release && d != act.Useless && s.usage < a.sp.IdleFraction*a.sp.Duty(t.thr.Step)*float64(ncpus) {
			idle = true
		}
		switch d {
		case act.Useless:
			// Held at the floor and the contention stays: it is not the
			// cause. Free it, and do not suspect it again for a while.
			a.releaseLocked(t.tenant, fmt.Sprintf("throttling it does not help: contention stayed at %.2f× while it was held down", ratio))
			delete(a.throttled, id)
			key := backoffKey(t.signal, id)
			a.backoff[key] = a.nextBackoff(key, now)
		case act.Release:
			why := fmt.Sprintf("contention %.2f× stayed under %.2f× at full relaxation", ratio, a.sp.RelaxBelow)
			if s.usage < a.sp.IdleFraction*a.sp.Duty(t.thr.Step)*float64(ncpus) {
				why = fmt.Sprintf("it stopped: %.2f CPU used of %.2f allowed", s.usage, a.sp.Duty(t.thr.Step)*float64(ncpus))
			}
			a.releaseLocked(t.tenant, why)
			delete(a.throttled, id)
		case act.Tighten, act.Relax:
			q := a.sp.Quota(t.thr.Step, ncpus)
			if err := a.apply(t.tenant, q, fmt.Sprintf("duty %d/%d", t.thr.Step, a.sp.Steps), now); err != nil {
				a.handleWriteErr(t.tenant, err)
				continue
			}
			a.recordLocked(now, t.tenant, string(d), q.CPUs(), a.sp.Duty(t.thr.Step), fmt.Sprintf("contention %.2f×", ratio))
		}
	}
	return idle
}

// maybeProveLocked starts a perturbation proof on the top suspect.
func (a *Agent) maybeProveLocked(now time.Time, v judge.Verdict, ranked []judge.Suspect, present map[string]sample) {
	if len(ranked) == 0 || len(a.throttled) >= a.cfg.MaxThrottled {
		return
	}
	// While a throttled polluter on a contended domain can still be held
	// tighter, contention there is its controller's business: proving a
	// neighbour now would blame it for what is left of the polluter.
	for _, t := range a.throttled {
		for _, d := range a.domainsOf(t.tenant.CPUs) {
			if slices.Contains(v.Domains, d) && t.thr.Step > a.sp.FloorStep {
				return
			}
		}
	}
	top := ranked[0]
	s, ok := present[top.ID]
	if !ok {
		return
	}
	cpu, kind, before := a.proofCPU(now, v, s.t.CPUs)
	reason := fmt.Sprintf("%s; suspect score %.2f: %s", v.Reason, top.Score, strings.Join(top.Reasons, "; "))
	a.journal(act.Event{Kind: "detection", Tenant: top.ID, Name: top.Name, Detail: reason, Evidence: map[string]any{"ratio": v.Ratio, "suspects": ranked}})
	a.startProofLocked(now, &proof{tenant: s.t, cpu: cpu, kind: kind, reason: reason, signal: signalProbe}, before)
}

// proofCPU picks where and what a proof of a tenant on cpus reads, and the
// contention it answers to. The kind: the DRAM probe if it read contended
// in the last few intervals — it answers a cap within milliseconds, while
// the LLC probe shares the cache with whatever runs beside it and wanders
// (measured on the dev machines: a capped split-lock polluter left the DRAM
// probe at 1.0× and the LLC probe anywhere in 1-18×) — else the kind that
// reads worst. The CPU: one of a contended domain that the tenant does not
// run on, where one exists (capping a tenant frees its own CPU, and a probe
// there reads the tenant's absence as relief), the most contended in that
// kind. The ratio: the worst of that kind on the contended domains now, at
// least the contention threshold.
func (a *Agent) proofCPU(now time.Time, v judge.Verdict, cpus cpuset.Set) (CPUDomain, string, float64) {
	th := a.cont.Thresholds()
	kind, worst := "", 0.0
	for _, r := range v.Readings {
		if slices.Contains(v.Domains, r.Domain) {
			if x := a.cont.Worst([]judge.RatedReading{r}, nil); x > worst {
				kind, worst = r.Kind, x
			}
		}
	}
	if at, ok := a.hotKind[sense.ProbeDRAM]; ok && now.Sub(at) <= 4*a.cfg.Interval {
		kind = sense.ProbeDRAM
	}
	var best CPUDomain
	bestRatio, bestAway, found := 0.0, false, false
	before := th.Ratio
	for _, r := range v.Readings {
		if !slices.Contains(v.Domains, r.Domain) || r.Kind != kind {
			continue
		}
		x := a.cont.Worst([]judge.RatedReading{r}, nil)
		before = max(before, x)
		away := !cpus.Contains(r.CPU)
		if !found || away && !bestAway || away == bestAway && x > bestRatio {
			best, bestRatio, bestAway, found = CPUDomain{r.Domain, r.CPU}, x, away, true
		}
	}
	if !found {
		// No reading of that kind on a contended domain this interval:
		// any CPU of one, away from the tenant if it can be.
		for _, d := range v.Domains {
			for _, c := range a.domain[d].List() {
				away := !cpus.Contains(c)
				if !found || away && !bestAway {
					best, bestAway, found = CPUDomain{d, c}, away, true
				}
			}
		}
	}
	return best, kind, before
}

// startProofLocked caps or frees the suspect as the proof's first trial
// asks and schedules its first reading; in dry-run it only says what it
// would do. before is the contention ratio the proof answers to.
func (a *Agent) startProofLocked(now time.Time, p *proof, before float64) {
	if a.cfg.DryRun {
		a.recordLocked(now, p.tenant, "proof", 0, 1, "dry run: would cap it to prove it: "+p.reason)
		key := backoffKey(p.signal, p.tenant.ID)
		a.backoff[key] = a.nextBackoff(key, now)
		return
	}
	cfg := a.cfg.Proof.ProofConfig
	if p.signal == signalWait {
		// CPU wait is read over the time between two readings: a few
		// windows a slot, the first of which (it spans the switch) only
		// starts the count.
		cfg.Samples = min(cfg.Samples, 4)
	}
	p.p = judge.NewProof(cfg, before, now, uint64(now.UnixNano()))
	a.proof = p
	a.recordLocked(now, p.tenant, "proof", 0, 1, fmt.Sprintf("proving it, %d randomized capped/freed trials at most: %s", a.cfg.Proof.Trials, p.reason))
	a.followPlanLocked(now, p)
}

// followPlanLocked applies the cap state the proof wants now and sets the
// time of its next reading. A failed write ends the proof.
func (a *Agent) followPlanLocked(now time.Time, p *proof) {
	plan := p.p.Plan()
	p.next = plan.SampleAt
	if plan.Capped == p.capped {
		return
	}
	p.switched = true
	if plan.Capped {
		// Capped hard: the kernel's minimum quota (1 ms) per CPU a period,
		// so the suspect runs in rare 1 ms slots while the probe reads.
		q := cgroup.Quota{Quota: time.Duration(max(1, p.tenant.CPUs.Len())) * cgroup.MinQuota, Period: proofPeriod}
		if err := a.apply(p.tenant, q, "proof", now); err != nil {
			a.handleWriteErr(p.tenant, err)
			p.p.Abort("could not cap it: " + err.Error())
			a.endProofLocked(now, p)
			return
		}
		p.capped, p.since = true, now
		a.capSpent(p.tenant.ID, now, 0)
		a.recordSlotLocked(now, p.tenant, "proof", q.CPUs(), "proof: capped for a trial")
		return
	}
	a.uncapLocked(now, p, "proof: freed for a trial")
}

// uncapLocked lifts a proof's cap (if on) and books the time it was on.
func (a *Agent) uncapLocked(now time.Time, p *proof, why string) {
	if !p.capped {
		return
	}
	if err := a.releaseHoldLocked(p.tenant.ID, policyProbe); err != nil {
		a.log.Error("restore quota", "tenant", p.tenant.ID, "err", err)
		a.journal(act.Event{Kind: "error", Tenant: p.tenant.ID, Name: p.tenant.Name, Detail: "restore failed: " + err.Error()})
	}
	p.capped = false
	a.capSpent(p.tenant.ID, now, now.Sub(p.since))
	a.recordSlotLocked(now, p.tenant, "proof-free", 0, why)
}

func (a *Agent) currentProof() *proof {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.proof
}

// proofSample takes one reading for the proof in progress and moves it
// on: the cap state of the next slot, or the verdict.
func (a *Agent) proofSample(now time.Time) {
	a.mu.Lock()
	p := a.proof
	a.mu.Unlock()
	if p == nil {
		return
	}
	ratio, ok := -1.0, false
	var waitNow map[string]sense.TenantStats
	if p.signal == signalWait {
		waitNow = a.readVictims(p.victims)
	} else {
		var kinds []string
		if p.kind != "" {
			kinds = []string{p.kind}
		}
		if rs, err := a.measureCPU(p.cpu.Domain, p.cpu.CPU, kinds...); err == nil && len(rs) > 0 {
			ratio, ok = a.cont.Worst(a.cont.Rate(rs), nil), true
		}
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	if a.proof != p {
		return // ended meanwhile (the tenant vanished, the agent stopped)
	}
	if p.signal == signalWait {
		ratio = a.waitProofRatioLocked(p, waitNow)
		ok = ratio > 0 && !p.switched
	}
	p.switched = false
	a.log.Debug("proof reading", "tenant", p.tenant.Name, "capped", p.capped, "ratio", ratio, "ok", ok, "cpu", p.cpu.CPU, "kind", p.kind)
	if p.p.Observe(now, ratio, ok) {
		a.endProofLocked(now, p)
		return
	}
	a.followPlanLocked(now, p)
}

// endProofLocked records a proof's verdict, with every trial's evidence,
// and acts on it: a polluter is throttled at the start step; anyone else is
// left free and not tested again for a while.
func (a *Agent) endProofLocked(now time.Time, p *proof) {
	a.proof = nil
	verdict, why := p.p.Verdict()
	a.proofs[verdict]++
	a.journal(act.Event{Kind: "proof", Tenant: p.tenant.ID, Name: p.tenant.Name, Detail: verdict + ": " + why,
		Evidence: map[string]any{"before": p.p.Before(), "cpu": p.cpu.CPU, "kind": p.kind, "signal": p.signal, "trials": p.p.Trials(),
			"false_conviction_bound": a.cfg.Proof.FalseConviction()}})
	key := backoffKey(p.signal, p.tenant.ID)
	if verdict != judge.ProofGuilty {
		a.uncapLocked(now, p, verdict+": "+why)
		if verdict == judge.ProofInconclusive {
			// Not acquitted: proved again soon, within the budget, with
			// the backoff it had.
			b := a.backoff[key]
			b.until = now.Add(inconclusiveRetry)
			a.backoff[key] = b
		} else {
			a.backoff[key] = a.nextBackoff(key, now)
		}
		a.noteActionLocked(ActionRecord{Time: now, Tenant: p.tenant.ID, Name: p.tenant.Name, Kind: "release", Policy: policyProbe,
			Lever: string(judge.LeverCPUQuota), Duty: 1, Reason: verdict + ": " + why})
		a.log.Info("proof", "tenant", p.tenant.Name, "verdict", verdict, "trials", p.p.Summary(), "why", why)
		return
	}
	if p.capped {
		a.capSpent(p.tenant.ID, now, now.Sub(p.since))
	}
	a.log.Info("proof", "tenant", p.tenant.Name, "verdict", verdict, "trials", p.p.Summary(), "why", why)
	thr := a.sp.NewThrottle(now, p.p.Before())
	q := a.sp.Quota(thr.Step, p.tenant.CPUs.Len())
	if err := a.apply(p.tenant, q, "proven polluter", now); err != nil {
		a.handleWriteErr(p.tenant, err)
		return
	}
	a.throttled[p.tenant.ID] = &throttled{tenant: p.tenant, thr: thr, signal: p.signal}
	delete(a.backoff, key)
	a.recordLocked(now, p.tenant, "throttle", q.CPUs(), a.sp.Duty(thr.Step), "proven polluter: "+why+"; "+p.reason)
}

// inconclusiveRetry is how soon a suspect whose proof was inconclusive
// may be proved again.
const inconclusiveRetry = time.Second

// capSpent books d of proof cap time on a tenant (at now) and forgets
// what is older than a minute; it returns what the tenant was capped in
// the last minute.
func (a *Agent) capSpent(id string, now time.Time, d time.Duration) time.Duration {
	spent := a.capTime[id]
	keep := spent[:0]
	for _, s := range spent {
		if now.Sub(s.at) < time.Minute {
			keep = append(keep, s)
		}
	}
	if d > 0 {
		keep = append(keep, capSlot{at: now, d: d})
	}
	var total time.Duration
	for _, s := range keep {
		total += s.d
	}
	if len(keep) == 0 {
		delete(a.capTime, id)
	} else {
		a.capTime[id] = keep
	}
	return total
}

// overBudget says a tenant was capped for proofs as much as the budget
// allows in the last minute: it is not proved again until that passes.
func (a *Agent) overBudget(id string, now time.Time) bool {
	return a.capSpent(id, now, 0) >= a.cfg.Proof.Budget
}

// capSlot is a stretch of proof cap time on a tenant.
type capSlot struct {
	at time.Time
	d  time.Duration
}

// errProbeBusy says the probe on a CPU did not finish within probeTimeout.
var errProbeBusy = errors.New("probe did not run in time")

// measureCPU runs the probe on one CPU with a timeout. A measurement that
// times out keeps running in its goroutine; until it finishes, that CPU is
// reported busy instead of starting a second probe behind it.
func (a *Agent) measureCPU(domain, cpu int, kinds ...string) ([]sense.ProbeReading, error) {
	return a.measureOn(cpu, func() ([]sense.ProbeReading, error) { return a.d.Probe.MeasureCPU(domain, cpu, kinds...) })
}

// quickProber is a probe with a cheap reading for the watch.
type quickProber interface {
	MeasureQuick(domain, cpu int, kind string) ([]sense.ProbeReading, error)
}

// measureQuick is the watch's reading: the probe's cheap one where it has
// one, else a whole reading of the kind.
func (a *Agent) measureQuick(domain, cpu int, kind string) ([]sense.ProbeReading, error) {
	if q, ok := a.d.Probe.(quickProber); ok {
		return a.measureOn(cpu, func() ([]sense.ProbeReading, error) { return q.MeasureQuick(domain, cpu, kind) })
	}
	return a.measureCPU(domain, cpu, kind)
}

// measureOn runs one measurement on cpu with the timeout of measureCPU.
func (a *Agent) measureOn(cpu int, measure func() ([]sense.ProbeReading, error)) ([]sense.ProbeReading, error) {
	if run := a.pending[cpu]; run != nil {
		select {
		case <-run.done:
			delete(a.pending, cpu) // late and stale: discard it
		default:
			return nil, errProbeBusy
		}
	}
	run := &probeRun{done: make(chan struct{})}
	go func() {
		run.readings, run.err = measure()
		close(run.done)
	}()
	timer := time.NewTimer(probeTimeout)
	defer timer.Stop()
	select {
	case <-run.done:
		return run.readings, run.err
	case <-timer.C:
		a.pending[cpu] = run
		return nil, errProbeBusy
	}
}

func (a *Agent) nextBackoff(id string, now time.Time) backoff {
	b := a.backoff[id]
	if b.next == 0 {
		b.next = a.cfg.Proof.Backoff
	}
	b.until = now.Add(b.next)
	b.next = min(2*b.next, a.cfg.Proof.MaxBackoff)
	return b
}

// apply states the probe policy's CPU-quota claim on a tenant (a proof's
// cap or a proven polluter's duty); the tenant gets the tightest claim of
// all policies. In dry-run nothing is written.
func (a *Agent) apply(t sense.Tenant, q cgroup.Quota, reason string, now time.Time) error {
	return a.holdQuotaLocked(t, policyProbe, q, reason, now)
}

// releaseLocked drops the probe policy's claim on a tenant: it gets its
// original quota back unless another policy still holds it.
func (a *Agent) releaseLocked(t sense.Tenant, why string) {
	if err := a.releaseHoldLocked(t.ID, policyProbe); err != nil {
		a.log.Error("restore quota", "tenant", t.ID, "err", err)
		a.journal(act.Event{Kind: "error", Tenant: t.ID, Name: t.Name, Detail: "restore failed: " + err.Error()})
	}
	a.recordLocked(a.d.Now(), t, "release", 0, 1, why)
}

// handleWriteErr deals with a failed cgroup write: a vanished tenant is
// forgotten; anything else is logged and journalled, and the tenant left
// alone until the next decision.
func (a *Agent) handleWriteErr(t sense.Tenant, err error) {
	if errors.Is(err, act.ErrGone) {
		delete(a.throttled, t.ID)
		a.forgetHoldsLocked(t.ID)
		a.log.Info("tenant vanished while acting on it", "tenant", t.ID)
		return
	}
	if errors.Is(err, act.ErrUnavailable) {
		a.unavailableLocked(t, err)
		return
	}
	a.log.Error("cgroup write failed", "tenant", t.ID, "err", err)
	a.journal(act.Event{Kind: "error", Tenant: t.ID, Name: t.Name, Detail: err.Error()})
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EROFS) {
		a.backoff[t.ID] = a.nextBackoff(t.ID, a.d.Now())
	}
}

// recordLocked notes an action of the probe policy (through CPU quota).
func (a *Agent) recordLocked(now time.Time, t sense.Tenant, kind string, quota, duty float64, reason string) {
	a.recordActionLocked(ActionRecord{Time: now, Tenant: t.ID, Name: t.Name, Kind: kind, Policy: policyProbe, Lever: string(judge.LeverCPUQuota), Quota: quota, Duty: duty, Reason: reason})
}

// recordSlotLocked notes a proof's cap or release for one trial's slot: on
// the timeline and in the journal like any action, at debug level in the log
// (a proof switches a dozen times).
func (a *Agent) recordSlotLocked(now time.Time, t sense.Tenant, kind string, quota float64, reason string) {
	a.recordActionLocked(ActionRecord{Time: now, Tenant: t.ID, Name: t.Name, Kind: kind, Policy: policyProbe, Lever: string(judge.LeverCPUQuota), Quota: quota, Duty: 1, Reason: reason})
}

// recordPolicyLocked notes an action of another policy.
func (a *Agent) recordPolicyLocked(now time.Time, t sense.Tenant, policy, kind, lever string, duty float64, reason string) {
	var quota float64
	if h := a.holds[t.ID]; h != nil && h.quota.Period > 0 {
		quota = h.quota.CPUs()
	}
	a.recordActionLocked(ActionRecord{Time: now, Tenant: t.ID, Name: t.Name, Kind: kind, Policy: policy, Lever: lever, Quota: quota, Duty: duty, Reason: reason})
}

// recordActionLocked notes an action for the state, the journal and the hook.
func (a *Agent) recordActionLocked(r ActionRecord) {
	// A throttle set or lifted changes what the probes read: the next
	// proof waits for them to settle. Permits are left out: a tenant at
	// its booking flips between OVER and UNDER every few intervals by
	// design, and would otherwise keep every proof waiting; so are a
	// proof's own caps and releases (a suspect capped for tens of
	// milliseconds at a time leaves nothing to settle).
	if r.Kind != "proof" && r.Kind != "proof-free" && r.Policy != policyPermits {
		a.lastChange = r.Time
	}
	a.noteActionLocked(r)
}

// noteActionLocked records an action for the state, the journal, the log
// and the hook.
func (a *Agent) noteActionLocked(r ActionRecord) {
	r.DryRun = a.cfg.DryRun
	slot := r.Kind == "proof" || r.Kind == "proof-free"
	a.actions = append(a.actions, r)
	if len(a.actions) > 50 {
		a.actions = a.actions[len(a.actions)-50:]
	}
	a.totals[r.Kind]++
	q := r.Quota
	a.journal(act.Event{Time: r.Time, Kind: r.Kind, Policy: r.Policy, Lever: r.Lever, Tenant: r.Tenant, Name: r.Name, Detail: r.Reason, Quota: &q, DryRun: r.DryRun})
	level := slog.LevelInfo
	if slot && r.Quota > 0 || r.Kind == "proof-free" {
		level = slog.LevelDebug
	}
	a.log.Log(context.Background(), level, "action", "kind", r.Kind, "by", r.Policy, "lever", r.Lever, "tenant", r.Name, "quota_cpus", r.Quota, "duty", r.Duty, "reason", r.Reason)
	if a.d.OnAction != nil {
		a.d.OnAction(r)
	}
}

func (a *Agent) journal(e act.Event) {
	if e.Time.IsZero() {
		e.Time = a.d.Now().UTC()
	}
	if err := a.d.Journal.Write(e); err != nil {
		a.log.Warn("journal", "err", err)
	}
}

// publishLocked builds and publishes the State.
func (a *Agent) publishLocked(now time.Time, v judge.Verdict, samples []sample, ranked []judge.Suspect, readings []sense.ProbeReading, cpuBefore time.Duration) {
	st := &State{
		Time: now, Interval: a.cfg.Interval.Seconds(), Host: a.d.Host, Version: a.d.Version, DryRun: a.cfg.DryRun,
		PMU: a.d.PMU, Contention: v.Contended, ContentionRatio: v.Ratio,
		CPUWait: a.lastWait.Contended, CPUWaitRatio: a.lastWait.Ratio,
		Tenants: []TenantState{}, Probes: []ProbeState{}, Suspects: []Suspect{},
		Actions: slices.Clone(a.actions), ActionsTotal: map[string]uint64{}, ProofsTotal: map[string]uint64{},
	}
	if st.Actions == nil {
		st.Actions = []ActionRecord{}
	}
	for k, n := range a.totals {
		st.ActionsTotal[k] = n
	}
	for k, n := range a.proofs {
		st.ProofsTotal[k] = n
	}
	scores := map[string]float64{}
	for _, r := range ranked {
		scores[r.ID] = r.Score
		st.Suspects = append(st.Suspects, Suspect{Tenant: r.ID, Name: r.Name, Score: r.Score, Reasons: r.Reasons})
	}
	for _, s := range samples {
		ts := TenantState{ID: s.t.ID, Kind: s.t.Kind, Name: s.t.Name, UUID: s.t.UUID, Cgroup: s.t.Cgroup, CPUs: s.t.CPUs.String(),
			CPU: s.usage, ThrottledRatio: s.thrRatio, RunDelay: s.delay, PSI: s.psi, Counters: s.counters,
			Duty: 1, Protected: a.protected(s.t), Score: scores[s.t.ID]}
		if h := a.holds[s.t.ID]; h != nil && len(h.claims) > 0 {
			ts.Throttled, ts.Duty, ts.Holds = true, h.duty(), h.describe()
			if h.quota.Period > 0 {
				ts.Quota = h.quota.CPUs()
			}
		}
		if hw := a.d.Hardware; hw != nil {
			if cl := hw.tenantClasses(s.t.ID); len(cl) > 0 {
				ts.Throttled, ts.Holds = true, append(ts.Holds, cl...)
			}
			if khz := hw.nominalKHz; khz > 0 {
				ts.Pollution, _ = sense.TenantPollution(s.counters, khz)
			}
			ts.Watts = hw.status.TenantWatts[s.t.ID]
			if u, ok := hw.status.Resctrl[s.t.ID]; ok {
				for _, d := range u.Domains {
					ts.LLCOccupancy += d.OccupancyBytes
					ts.MemBandwidth += d.TotalBytesPerSec
				}
			}
		}
		st.Tenants = append(st.Tenants, ts)
	}
	for _, r := range a.cont.Rate(readings) {
		st.Probes = append(st.Probes, ProbeState{Domain: r.Domain, CPU: r.CPU, Kind: r.Kind, LatencyNs: r.Ns, BaselineNs: r.Baseline, Ratio: r.Ratio})
	}
	if a.proof != nil {
		st.Proof = &ProofState{Tenant: a.proof.tenant.ID, Name: a.proof.tenant.Name, Started: a.proof.p.Started(), Before: a.proof.p.Before(), Trials: a.proof.p.Trials()}
	}
	if a.d.Counters != nil {
		st.PerfFDs = a.d.Counters.FDs()
	}
	if a.d.Hardware != nil {
		hs := a.d.Hardware.State()
		st.Hardware = &hs
	}
	st.IntervalCPU = (selfCPU() - cpuBefore).Seconds()
	a.latest.Store(st)
}

// selfCPU is this process's CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// StatePath and JournalPath are where the agent keeps its files.
func StatePath(dir string) string   { return filepath.Join(dir, "state.json") }
func JournalPath(dir string) string { return filepath.Join(dir, "journal.jsonl") }
