package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// Counters are per-tenant perf counters (nil on hosts without them).
type Counters interface {
	Sync(ctx context.Context, tenants []sense.Tenant) error
	Read(ctx context.Context) (map[string]map[string]float64, error)
	FDs() int
	Close() error
}

// StatsReader samples a tenant's cgroup counters; prev is its previous
// sample (nil for a new tenant), which lets the reader skip what an idle
// tenant cannot have changed.
type StatsReader interface {
	Read(ctx context.Context, t sense.Tenant, prev *sense.TenantStats) (sense.TenantStats, error)
}

// RunnableReader says whether any of a tenant's threads is runnable now,
// and whether that says anything (sense.TaskStates).
type RunnableReader interface {
	Runnable(ctx context.Context, t sense.Tenant) (runnable, known bool, err error)
}

// QuotaActuator throttles and restores tenants' CPU quota.
type QuotaActuator interface {
	Apply(ctx context.Context, cgroupPath, tenant string, q cgroup.Quota) error
	Restore(ctx context.Context, cgroupPath string) error
	RestoreAll(ctx context.Context) (int, error)
}

// Deps are the agent's parts; New wires real ones, tests inject fakes.
type Deps struct {
	Discoverer sense.Discoverer
	Stats      StatsReader
	// Runnable, optional, tells a throttled tenant that stopped from one
	// waiting out a proof's CFS period in the first second of its
	// throttle; without it that second never counts as stopped.
	Runnable RunnableReader
	Probe    Prober
	Counters Counters // optional
	Quota    QuotaActuator
	Journal  *act.Journal
	Log      *slog.Logger
	// OnAction is called for every action (the lab records them on its timeline).
	OnAction func(api.ActionRecord)
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
	// BusLocks are the kernel's reports of bus-locking threads, where the
	// CPU detects split or bus locks (nil: none read); ThreadCgroups reads
	// a reported thread's cgroups (sense.ThreadCgroups).
	BusLocks      BusLockReports
	ThreadCgroups func(tid int) ([]string, error)
	// RestoreRecords undoes every hardware lever recorded in the state
	// file (resctrl classes, clock modulation, cpufreq limits) from the
	// records alone, at start (what a killed predecessor left) and at stop.
	RestoreRecords func(ctx context.Context) (restored int, err error)
	// CPUBusy is each CPU's busy fraction since its previous call
	// (sense.CPUBusy.Read); nil: the agent does not wake between
	// intervals for a CPU that turned busy (see busyWake).
	CPUBusy func() (map[int]float64, error)
}

// Agent is one running crosstalk agent.
type Agent struct {
	cfg    Config
	d      Deps
	log    *slog.Logger
	cont   *judge.Contention
	domain map[int]cpuset.Set
	// wait is the CPU-wait policy (cpuwait.go): it shares the proofs and
	// throttles below with the probe policy.
	wait *cpuWaitPolicy
	// cpi is the CPI policy (cpi.go), where a PMU counts cycles and
	// instructions: it shares them too.
	cpi *cpiPolicy
	// probes finds whom to prove for the probe contention
	// (policy_probe.go), with the same proofs.
	probes *probePolicy

	// latest is the last published state, a snapshot never changed once
	// stored: the state API, the metrics and the service notifier read it
	// from their own goroutines (Latest).
	latest       atomic.Pointer[api.State]
	baselinePath string // where probe baselines persist across restarts ("" = nowhere)
	steps        int
	// perfTotals are each tenant's perf event counts summed over the
	// intervals it was counted in, for the metrics' counters (publish.go).
	perfTotals map[string]map[string]float64

	// The agent has no lock: every field but latest, beats and reloads
	// is read and written only by the goroutine that drives it (Run's
	// loop, or Tick's caller). Other goroutines reach it through latest
	// (the state API, the metrics), beats (the watchdog) and reloads
	// (Reload, applied between passes); a probe that outlives its timeout
	// writes only its own probeRun. A new reader from another goroutine
	// must go through a snapshot or the loop.
	prev  map[string]sense.TenantStats
	marks map[string]sense.DelayMark
	// throttles are the tenants the probe policy and CPU wait hold down
	// (throttle.go).
	throttles *throttles
	// ledger is what the proofs remember of each suspect (ledger.go):
	// backoffs, carried evidence, proof cap time against the budget.
	ledger *proofLedger
	// arb applies every policy's claims and releases (arbiter.go): the
	// holds, the resctrl classes, and the actuators behind them.
	arb *arbiter
	// prover runs the proofs of both (prover.go), one at a time.
	prover *prover
	// sensor reads the canary probe (probe.go) and surveys its quiet
	// level at start (watch.go).
	sensor *probeSensor
	// watchAt is when the next watch is due (the probe policy's watch).
	watchAt time.Time
	// wake looks at each watch for a CPU that turned busy.
	wake busyWake
	// rec is the record of actions (recorder.go); holds are the probe
	// policy's CPU-quota claims through the arbiter (actions.go).
	rec   *recorder
	holds probeHolds

	// kbl attributes the kernel's bus-lock reports (kernelbuslocks.go);
	// nil without them.
	kbl *kernelBusLocks
	// quietSteps counts the intervals in a row in which no tenant was busy
	// (idleProbeEvery); lastReadings are the probe's last readings, which
	// the state shows while the probe rests.
	quietSteps   int
	lastReadings []sense.ProbeReading
	// tenantCPUs are the CPUs a tenant busy in the last interval (or new,
	// its use not known yet) may run on: never idle for the probe (see
	// probeIdle).
	tenantCPUs cpuset.Set

	// health is how each sensor fared (health.go).
	health *sensorHealth

	// beats and reloads are Run's service channels (service.go, reload.go).
	beats   chan struct{}
	reloads chan reloadRequest
}

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
		cfg: cfg, d: d, log: d.Log,
		cont:   judge.NewContention(cfg.Thresholds()),
		domain: map[int]cpuset.Set{}, prev: map[string]sense.TenantStats{}, marks: map[string]sense.DelayMark{},
		ledger: newProofLedger(cfg.Proof), rec: newRecorder(cfg, d),
		beats: make(chan struct{}, 1), reloads: make(chan reloadRequest),
		health: newSensorHealth(d.Log),
	}
	a.sensor = newProbeSensor(d, a.cont, a.ledger)
	a.arb = newArbiter(cfg, d, d.Log, a.rec, a)
	a.holds = probeHolds{arb: a.arb, rec: a.rec, now: d.Now}
	a.wait = newCPUWaitPolicy(cfg, d.Stats, a)
	snaps, _ := d.Counters.(counterSnapshots)
	a.cpi = newCPIPolicy(cfg, d.PMU, snaps, a.domain, a)
	a.prover = newProver(cfg, a.ledger, a.cont, a.wait, a.cpi, a.holds, a.rec, a, a.sensor, d.Log)
	a.prover.clock = d.Now
	a.throttles = newThrottles(cfg, a.cont, a.wait, a.cpi, a.domain, a.ledger, a.prover, a.holds, a.rec, a)
	// The throttles are built on the prover, so the prover learns of
	// them last: a conviction hands the suspect over.
	a.prover.convict = a.throttles.convicted
	a.probes = newProbePolicy(cfg, a.cont, a.domain, d.Probe, a.sensor.measureQuick, a.ledger, a, d.Log)
	a.wake.read = d.CPUBusy
	for _, pd := range d.Probe.Domains() {
		a.domain[pd.ID] = pd.CPUs
	}
	if d.BusLocks != nil {
		a.kbl = newKernelBusLocks(d.BusLocks, d.ThreadCgroups, d.Log)
	}
	return a, nil
}

// Latest returns the last published state.
func (a *Agent) Latest() (api.State, bool) {
	s := a.latest.Load()
	if s == nil {
		return api.State{}, false
	}
	return *s, true
}

// Baselines exports the probe and CPI baselines for saving across restarts.
func (a *Agent) Baselines() map[string]judge.Baseline {
	out := a.cont.Baselines()
	maps.Copy(out, a.cpi.baselines())
	return out
}

// Run loops until ctx ends, then restores every tenant it throttled (see
// shutdown). Its sensors and actuators run under ctx.
func (a *Agent) Run(ctx context.Context) error {
	a.restoreLeftovers(ctx)
	defer a.shutdown(ctx)

	timer := time.NewTimer(0)
	defer timer.Stop()
	next := time.Time{}
	// rearm sets the timer to the next interval or watch, whichever comes
	// first (a proof's readings have a timer of their own).
	rearm := func() {
		wake := next
		if !a.watchAt.IsZero() && a.watchAt.Before(wake) {
			wake = a.watchAt
		}
		timer.Reset(time.Until(wake))
	}
	for {
		var proofTimer <-chan time.Time
		if p := a.prover.proof; p != nil {
			proofTimer = time.After(time.Until(p.next))
		}
		select {
		case <-ctx.Done():
			return nil
		case now := <-timer.C:
			next = a.Tick(ctx, now, next)
			rearm()
		case now := <-proofTimer:
			next = a.proofSample(ctx, now, next)
			rearm()
		case req := <-a.reloads:
			// Between passes: nothing reads the configuration meanwhile.
			change, err := a.Reconfigure(ctx, req.cfg)
			req.done <- reloadResult{change, err}
		}
		a.beat()
	}
}

// Tick drives the agent on a caller's clock instead of Run's timers (the
// simulator runs on virtual time): it takes a proof sample when one is due,
// runs an interval when next has passed, and between intervals watches for
// a first sign of contention (see watch) and for a CPU that turned busy
// (see busyWake), either of which runs the interval now. It returns when the next interval
// is due: an interval on, or WatchEvery while a first sign of
// contention waits to be confirmed. Call it at least as often as WatchEvery;
// call Start first and Stop at the end. The sensors and actuators it calls
// run under ctx.
func (a *Agent) Tick(ctx context.Context, now, next time.Time) time.Time {
	if p := a.prover.proof; p != nil && !now.Before(p.next) {
		next = a.proofSample(ctx, now, next)
	}
	due := next.IsZero() || !now.Before(next)
	if !due && !a.watchAt.IsZero() && !now.Before(a.watchAt) {
		a.watchAt = now.Add(a.WatchEvery())
		if len(a.throttles.throttled) > 0 && !a.cfg.DryRun {
			a.throttles.releaseStopped(ctx, now, a.d.Stats, a.d.Runnable)
		}
		// Read at every look, so that each read spans one look; before
		// the watch, which reads on the CPUs this read finds idle.
		r, woke := a.wake.look(now, a.WatchEvery(), a.cfg.Interval)
		a.probes.idle = a.probeIdle(now)
		due = a.probes.watch(a.prover.proof != nil || len(a.throttles.throttled) > 0)
		if woke {
			a.log.Debug("a CPU turned busy: the interval runs now", "cpu", r.CPU, "busy_before", fmt.Sprintf("%.2f", r.From), "busy", fmt.Sprintf("%.2f", r.To))
			due = true
		}
	}
	if !due {
		return next
	}
	soon := a.step(ctx, now)
	a.wake.prime(now, a.WatchEvery())
	a.flushState()
	a.watchAt = now.Add(a.WatchEvery())
	if soon > 0 {
		return now.Add(soon)
	}
	return now.Add(a.cfg.Interval)
}

// proofSample takes the reading of the proof in progress that is due now,
// and returns when the next interval runs: next, or within a watch when the
// proof ended without a conviction. The contention it answered is still
// there, and the next suspect is chosen by an interval: waiting out a whole
// one left a polluter proven after an innocent 0.4 s later than needed.
func (a *Agent) proofSample(ctx context.Context, now, next time.Time) time.Time {
	p := a.prover.proof
	a.prover.sample(ctx, now)
	if p == nil || a.prover.proof == p {
		return next // none, or still under way
	}
	if verdict, _ := p.p.Verdict(); verdict == judge.ProofGuilty {
		return next
	}
	if soon := now.Add(a.quickAfter()); !next.IsZero() && soon.Before(next) {
		return soon
	}
	return next
}

// wakeAt is when Tick next has work to do, given the next interval Tick
// returned: that interval, the next watch or the proof's next reading,
// whichever comes first (the zero time before the first interval). Run
// waits on its timers for the same three; a caller on virtual time (the
// agent's tests) jumps from one to the next with it instead of stepping the
// clock in small increments and sleeping.
func (a *Agent) wakeAt(next time.Time) time.Time {
	wake := next
	if !a.watchAt.IsZero() && a.watchAt.Before(wake) {
		wake = a.watchAt
	}
	if p := a.prover.proof; p != nil && p.next.Before(wake) {
		wake = p.next
	}
	return wake
}

// stateFlusher is a quota actuator whose releases leave their state
// entries to be dropped from disk later (act.CPUQuota.Flush).
type stateFlusher interface{ Flush() error }

// flushState saves the releases the quota actuator left unsaved, once no
// proof is under way: a proof's trials cap and free its suspect with no
// state save between them, and the save that drops the entry waits until
// it is over.
func (a *Agent) flushState() {
	f, ok := a.d.Quota.(stateFlusher)
	if !ok || a.prover.proof != nil {
		return
	}
	if err := f.Flush(); err != nil {
		a.log.Warn("saving released throttles to the state file", "err", err)
	}
}

// Start does what Run does before its first interval: restore throttles a
// previous run left behind.
func (a *Agent) Start(ctx context.Context) { a.restoreLeftovers(ctx) }

// Stop restores everything the agent changed, as Run does when it ends,
// even under an ended ctx (see shutdown).
func (a *Agent) Stop(ctx context.Context) { a.shutdown(ctx) }

func (a *Agent) restoreLeftovers(ctx context.Context) {
	a.journal(act.Event{Kind: "start", Detail: fmt.Sprintf("interval %s, dry-run %v", a.cfg.Interval, a.cfg.DryRun)})
	if n, err := a.d.Quota.RestoreAll(ctx); n > 0 || err != nil {
		a.log.Warn("restored quotas a previous crosstalk left behind", "restored", n, "err", err)
		a.journal(act.Event{Kind: "restore", Detail: fmt.Sprintf("restored %d tenant(s) left throttled by a previous run (err: %v)", n, err)})
	}
	if a.d.RestoreRecords != nil {
		if n, err := a.d.RestoreRecords(ctx); n > 0 || err != nil {
			a.log.Warn("restored hardware levers a previous crosstalk left behind (resctrl classes, clock modulation, cpufreq)", "restored", n, "err", err)
			a.journal(act.Event{Kind: "restore", Detail: fmt.Sprintf("restored %d hardware lever(s) left by a previous run (err: %v)", n, err)})
		}
	}
}

// shutdownTimeout bounds the releases at shutdown: long enough for
// libvirt's calls (each bounded by its own timeout), short enough that a
// hung actuator cannot keep the agent from exiting.
const shutdownTimeout = 30 * time.Second

// shutdown restores everything the agent changed. Run's context has ended
// by the time it runs, yet the throttles must still come off: the releases
// run detached from its cancellation (keeping its values), under a timeout
// of their own.
func (a *Agent) shutdown(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	for id, t := range a.throttles.throttled {
		a.holds.release(ctx, t.tenant, "agent stopping")
		delete(a.throttles.throttled, id)
	}
	if p := a.prover.proof; p != nil {
		p.p.Abort("agent stopping")
		a.prover.uncap(ctx, a.d.Now(), p, "agent stopping during a proof")
		a.prover.proof = nil
		a.rec.record(a.d.Now(), p.tenant, api.KindRelease, 0, 1, "agent stopping during a proof")
	}
	a.arb.stop(ctx, a.d.Now())
	if a.d.Hardware != nil {
		a.d.Hardware.stop()
	}
	// What the holds could not undo, and anything recorded outside them.
	if n, err := a.d.Quota.RestoreAll(ctx); err != nil || n > 0 {
		a.log.Warn("restore on exit", "restored", n, "err", err)
	}
	if a.d.RestoreRecords != nil {
		if n, err := a.d.RestoreRecords(ctx); err != nil || n > 0 {
			a.log.Warn("restore of hardware levers on exit", "restored", n, "err", err)
		}
	}
	if a.d.Counters != nil {
		a.d.Counters.Close()
	}
	a.saveBaselines()
	a.journal(act.Event{Kind: "stop"})
}

// step runs one interval: sense, judge, act, publish. It returns how soon
// the next interval should run when that is sooner than an interval (0:
// an interval on): when the probes saw a first sign of contention that it
// should confirm (or clear), as a reaction waits for persistent contention
// and a polluter should not run free for two whole intervals before it is
// proved; at start; and when a throttled tenant looks idle.
func (a *Agent) step(ctx context.Context, now time.Time) (soon time.Duration) {
	cpuBefore := selfCPU()
	a.steps++
	if a.steps%120 == 0 {
		a.saveBaselines()
	}
	start := time.Now()
	tenants, err := a.d.Discoverer.Discover(ctx)
	a.health.record(sensorDiscovery, time.Since(start), err)
	discovered := err == nil
	if lh, ok := a.d.Discoverer.(libvirtHealth); ok {
		took, err := lh.LibvirtHealth()
		a.health.record(sensorLibvirt, took, err)
	}
	a.budgetRunDelay(tenants)
	samples := a.sampleTenants(ctx, tenants)
	if a.kbl != nil {
		start := time.Now()
		err := a.kbl.observe(now, samples)
		a.health.record(sensorKernelReport, time.Since(start), err)
	}
	// At start no tenant has rates yet (they take two readings): the
	// next interval comes soon, so that a polluter already running is
	// judged within a fraction of a second, not after two intervals.
	starting := len(samples) > 0 && !slices.ContainsFunc(samples, func(s sample) bool { return s.fresh })
	if a.sensor.survey > 0 {
		a.sensor.surveyQuiet(ctx, now, samples, a.cfg, a.holds, a.rec, a)
	}

	var counters map[string]map[string]float64
	if a.d.Counters != nil {
		order := a.priority(samples)
		start := time.Now()
		syncErr := a.d.Counters.Sync(ctx, order)
		if syncErr != nil {
			syncErr = fmt.Errorf("sync: %w", syncErr)
		}
		counters, err = a.d.Counters.Read(ctx)
		if err != nil {
			err = fmt.Errorf("read: %w", err)
		}
		a.health.record(sensorPerfCounters, time.Since(start), errors.Join(syncErr, err))
		for i := range samples {
			samples[i].counters = counters[samples[i].t.ID]
		}
	}

	// The hardware sensors (RAPL, resctrl monitoring) are read now; their
	// policies decide below, with the rest.
	var hw *hwObservation
	if a.d.Hardware != nil {
		hw = a.d.Hardware.sense(ctx, now, samples, a.cfg.protects, a.health)
	}

	var readings []sense.ProbeReading
	var starved []int
	targets := a.d.Probe.Targets()
	resting := false
	if !starting && a.noneBusy(samples) {
		// No tenant uses the CPU a polluter needs: there is no one to
		// judge, so the probe only keeps its quiet baselines learning, one
		// interval in idleProbeEvery. A tenant that turns busy is seen in
		// the same interval (its CPU use is read first), and probed there.
		resting = a.quietSteps%idleProbeEvery != 0
		a.quietSteps++
	} else {
		a.quietSteps = 0
	}
	if resting {
		targets = nil
	}
	a.tenantCPUs = busyTenantCPUs(samples, a.allCPUs())
	targets = onIdle(targets, a.domain, a.probeIdle(now), a.steps)
	if n := len(targets); n > 1 {
		// Start from a different CPU each interval and pause between CPUs:
		// probing a CPU pauses the tenant running there, and whatever runs
		// next on it (another tenant with a lower vruntime) must not be what
		// always fills the moment the next CPU is probed.
		k := a.steps % n
		targets = append(targets[k:], targets[:k]...)
	}
	// The probe's health is its measurements' time (not the gaps), and a
	// CPU's error; a CPU it could not get onto in time is a contention
	// signal, not a broken probe.
	var probeTook time.Duration
	var probeErrs []error
	for i, t := range targets {
		if i > 0 {
			a.d.Sleep(probeGap)
		}
		start := time.Now()
		rs, err := a.sensor.measureCPU(t.Domain, t.CPU, t.Kinds...)
		probeTook += time.Since(start)
		switch {
		case errors.Is(err, errProbeBusy):
			starved = append(starved, t.CPU)
		case err != nil:
			probeErrs = append(probeErrs, fmt.Errorf("cpu %d: %w", t.CPU, err))
		default:
			readings = append(readings, rs...)
		}
	}
	if len(targets) > 0 {
		a.health.record(sensorProbe, probeTook, errors.Join(probeErrs...))
	}
	if len(starved) > 0 {
		a.log.Debug("probe could not run in time on CPUs", "cpus", starved)
	}
	if resting {
		views := a.viewsOf(samples)
		a.wait.observe(samples, views)
		a.cpi.observe(samples, views)
		a.hardware(ctx, now, hw, tenants, discovered)
		a.publish(now, judge.Verdict{Ratio: a.probes.lastRatio}, samples, nil, a.lastReadings, cpuBefore)
		return 0
	}
	if len(readings) == 0 {
		// No probe signal this interval: hold every probe decision rather
		// than read silence as quiet (which would relax throttled
		// polluters). CPU wait and the hardware policies have their own
		// sensors — and a CPU starved by a neighbour is exactly where the
		// probe cannot run.
		views := a.viewsOf(samples)
		present := presentOf(samples)
		a.wait.observe(samples, views)
		a.cpi.observe(samples, views)
		a.throttles.control(ctx, now, judge.Verdict{Ratio: a.probes.lastRatio}, present, false)
		a.hardware(ctx, now, hw, tenants, discovered)
		var ranked []judge.Suspect
		if a.prover.proof == nil {
			ranked = a.wait.maybeProve(ctx, now, views, present)
		}
		if a.prover.proof == nil {
			ranked = append(ranked, a.cpi.maybeProve(ctx, now, views, present)...)
		}
		a.publish(now, judge.Verdict{Ratio: a.probes.lastRatio}, samples, ranked, nil, cpuBefore)
		if starting {
			return a.quickAfter()
		}
		return 0
	}
	a.lastReadings = readings
	held := a.heldDomains()
	a.probes.noteInterval(samples, readings)
	a.cont.Hold(held)
	a.probes.noteHot(now, readings)
	v := a.cont.Update(readings)
	a.probes.lastRatio = v.Ratio
	if a.log.Enabled(ctx, slog.LevelDebug) {
		var rs []string
		for _, r := range v.Readings {
			rs = append(rs, fmt.Sprintf("cpu%d/%s=%.0fns(%.1f×)", r.CPU, r.Kind, r.Latency, r.Ratio))
		}
		a.log.Debug("interval", "tenants", len(tenants), "contended", v.Contended, "ratio", fmt.Sprintf("%.2f", v.Ratio), "probes", strings.Join(rs, " "))
	}
	views := a.viewsOf(samples)
	a.probes.observe(v, views)

	present := presentOf(samples)
	a.wait.observe(samples, views)
	a.cpi.observe(samples, views)
	idle := a.throttles.control(ctx, now, v, present, true)
	a.hardware(ctx, now, hw, tenants, discovered)

	var ranked []judge.Suspect
	if v.Contended && a.prover.proof == nil {
		a.throttles.rethrottle(ctx, now, v, present)
	}
	if v.Contended {
		ranked = a.probes.rank(now, v, views)
		if a.prover.proof == nil && v.Persistent && now.Sub(a.rec.lastChange) >= 2*a.cfg.Interval {
			a.probes.maybeProve(ctx, now, v, ranked, views, present)
		}
	}
	if a.prover.proof == nil {
		ranked = append(ranked, a.wait.maybeProve(ctx, now, views, present)...)
	}
	if a.prover.proof == nil {
		ranked = append(ranked, a.cpi.maybeProve(ctx, now, views, present)...)
	}
	a.publish(now, v, samples, ranked, readings, cpuBefore)
	// A first sign of contention, or a throttled polluter that looks idle:
	// the next interval comes soon, to confirm it (or release it).
	firstSign := a.prover.proof == nil && len(a.throttles.throttled) == 0 && v.Ratio >= a.cont.Thresholds().Ratio && !v.Persistent
	switch {
	case firstSign && a.probes.dramSign(v):
		return confirmAfter
	case starting || idle || firstSign:
		return a.quickAfter()
	}
	return 0
}

// quickAfter is how soon an interval that should come soon comes: at the
// next watch, within an interval.
func (a *Agent) quickAfter() time.Duration { return min(a.WatchEvery(), a.cfg.Interval) }

// confirmAfter is how soon an interval confirms a first sign of contention
// that a DRAM reading gave. The spread's median or its strong peak is over
// the threshold (a storm that comes and goes, or a steady one), and what
// moves it that much on the dev VM lasts: a split-lock storm, read again
// 25 ms later, is proved 75 ms sooner than at the next watch, a tenth of a
// second of storm its neighbours do not take. The lock probe's first signs
// wait for the watch: on a 16-vCPU guest it read 4–15× for a moment, now
// and then, beside any load (the host's other guests), and when every
// first sign was confirmed that soon, control runs there proved innocents
// on those moments.
const confirmAfter = 25 * time.Millisecond

// idleProbeEvery is how often the probe runs while no tenant is busy: one
// interval in four (it is most of an idle agent's CPU).
const idleProbeEvery = 4

// noneBusy says no tenant uses judge.MinUsage of a CPU or more, none is
// new (without rates yet), and none is throttled or being proved.
func (a *Agent) noneBusy(samples []sample) bool {
	if a.prover.proof != nil || len(a.throttles.throttled) > 0 {
		return false
	}
	return !slices.ContainsFunc(samples, sample.busyOrNew)
}

// allCPUs are the CPUs of the probe's domains.
func (a *Agent) allCPUs() cpuset.Set {
	var all cpuset.Set
	for _, c := range a.domain {
		all = all.Union(c)
	}
	return all
}

// probeIdle are the CPUs where the probe takes no tenant's time (see
// onIdle): those the last look's /proc/stat read found idle, less every
// CPU a busy tenant may run on; none with probe.prefer_idle off. The read
// alone would take the CPU of a tenant that runs a few milliseconds at a
// time for idle, and a polluter that runs so harms all the same; the
// tenants alone would miss one that started since the last interval.
func (a *Agent) probeIdle(now time.Time) cpuset.Set {
	if !a.cfg.Probe.preferIdle() {
		return cpuset.Set{}
	}
	return a.wake.idle(now, a.WatchEvery()).Difference(a.tenantCPUs)
}

// busyTenantCPUs is the union of the CPUs of the tenants that were busy
// in the last interval, or are new (their use not known yet); a tenant
// whose CPUs are not known may run on all of them.
func busyTenantCPUs(samples []sample, all cpuset.Set) cpuset.Set {
	var out cpuset.Set
	for _, s := range samples {
		if s.busyOrNew() {
			cpus := s.t.CPUs
			if cpus.IsEmpty() {
				cpus = all
			}
			out = out.Union(cpus)
		}
	}
	return out
}

// domainsOf lists the probe domains a tenant's CPUs touch.
func (a *Agent) domainsOf(cpus cpuset.Set) []int { return domainsIn(a.domain, cpus) }

// domainsIn lists the domains of domain (their CPUs by ID) that cpus touch.
func domainsIn(domain map[int]cpuset.Set, cpus cpuset.Set) []int {
	var out []int
	for id, c := range domain {
		if !c.Intersect(cpus).IsEmpty() {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// StatePath and JournalPath are where the agent keeps its files.
func StatePath(dir string) string   { return filepath.Join(dir, "state.json") }
func JournalPath(dir string) string { return filepath.Join(dir, "journal.jsonl") }
