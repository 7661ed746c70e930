package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/humanize"
	"github.com/crosstalk-project/crosstalk/internal/lab"
)

// Policies the simulator compares, as the papers and the lab do.
const (
	PolicyNone      = "none"      // co-located, nothing done
	PolicyStatic    = "static"    // Alita's baseline: CPU time split by CPU counts, capped for the whole run
	PolicyCrosstalk = "crosstalk" // the production agent
)

// PolicyNames lists the policies.
var PolicyNames = []string{PolicyNone, PolicyStatic, PolicyCrosstalk}

// Options adjust a run.
type Options struct {
	Policies []string
	// Duration and Seed override the scenario's when non-zero.
	Duration time.Duration
	Seed     uint64
	Log      *slog.Logger
	// TempDir is where each policy run's host tree is made (default the
	// system's); KeepTree leaves it there.
	TempDir  string
	KeepTree bool
	// Progress, when set, is told of each second of virtual time simulated
	// (the whole run is len(Policies) × the duration).
	Progress func(simulated time.Duration)
	// Agent, when set, edits the agent configuration before it is built.
	Agent func(*agent.Config)
	// Startup, when set, keeps the agent's start-up reports to one copy
	// for all the runs that share it (a suite's).
	Startup *lab.StartupOnce
}

// Epoch is virtual time zero: the simulated clock's wall time at the start.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Planned is the virtual time Run simulates with these options: the
// duration once per policy.
func Planned(sc *Scenario, o Options) time.Duration {
	d := sc.Duration
	if o.Duration > 0 {
		d = o.Duration
	}
	n := len(o.Policies)
	if n == 0 {
		n = len(PolicyNames)
	}
	return time.Duration(n) * d
}

// Run simulates the scenario under each policy.
func Run(ctx context.Context, sc *Scenario, o Options) (*Result, error) {
	if len(o.Policies) == 0 {
		o.Policies = PolicyNames
	}
	for _, p := range o.Policies {
		if !slices.Contains(PolicyNames, p) {
			return nil, fmt.Errorf("unknown policy %q (have %s)", p, strings.Join(PolicyNames, ", "))
		}
	}
	if o.Duration > 0 {
		sc.Duration = o.Duration
	}
	if o.Seed != 0 {
		sc.Seed = o.Seed
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	res := &Result{Scenario: sc.Name, Description: strings.TrimSpace(sc.Description), Machine: sc.Machine.summary(),
		Duration: sc.Duration.Seconds(), Seed: sc.Seed, Tenants: len(sc.tenants)}
	for _, p := range o.Policies {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		pr, err := runPolicy(ctx, sc, p, o)
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", p, err)
		}
		res.Results = append(res.Results, *pr)
	}
	return res, nil
}

func (m Machine) summary() string {
	return fmt.Sprintf("%s, %d socket(s) × %d cores × %d threads = %d CPUs, L3 %s/%d ways, %s/s DRAM, TDP %gW per socket",
		m.CPU, m.Sockets, m.CoresPerSocket, m.ThreadsPerCore, m.CPUs(), humanize.Bytes(float64(m.L3Size)), m.L3Ways,
		humanize.SI(float64(m.MemoryBandwidth), "B"), float64(m.TDP))
}

// run is one policy's simulation in progress.
type run struct {
	sc     *Scenario
	policy string
	s      *simHost
	ag     *agent.Agent
	closeA func()

	work, solo         []float64 // integrals of progress and solo progress while active
	lateWork, lateSolo []float64 // the same over the last 30% of each tenant's active time
	throttled          []float64 // seconds under any lever
	cpuSec             []float64
	actions            []Action
	intervals          []float64 // agent CPU per interval (its own State.IntervalCPU), seconds
	ticks              []float64 // process CPU around each Tick that ran an interval, seconds
	perfFDs            int
}

func runPolicy(ctx context.Context, sc *Scenario, policy string, o Options) (*PolicyResult, error) {
	if o.KeepTree && o.TempDir != "" {
		// A directory asked for by name is made, as for any output.
		if err := os.MkdirAll(o.TempDir, 0o755); err != nil {
			return nil, fmt.Errorf("the directory for kept trees: %w", err)
		}
	}
	dir, err := os.MkdirTemp(tempDir(o.TempDir), "crosstalk-sim-"+sc.Name+"-"+policy+"-")
	if err != nil {
		return nil, err
	}
	if !o.KeepTree {
		defer os.RemoveAll(dir)
	}
	s, err := newSimHost(sc, dir)
	if err != nil {
		return nil, err
	}
	defer s.close()
	n := len(sc.tenants)
	r := &run{sc: sc, policy: policy, s: s, work: make([]float64, n), solo: make([]float64, n), lateWork: make([]float64, n),
		lateSolo: make([]float64, n), throttled: make([]float64, n), cpuSec: make([]float64, n)}

	// Tenants present from the start.
	for i, t := range sc.tenants {
		if t.Start == 0 {
			if err := s.appear(i); err != nil {
				return nil, err
			}
		}
	}
	if err := s.readLevers(); err != nil {
		return nil, err
	}
	vclock := func() time.Time { return Epoch.Add(s.now) }
	switch policy {
	case PolicyStatic:
		if err := r.applyStatic(); err != nil {
			return nil, err
		}
	case PolicyCrosstalk:
		cfg, err := sc.agentConfig()
		if err != nil {
			return nil, err
		}
		// The model moves in steps, and the agent runs between them: a
		// proof's slot spans two steps, read once after each, unless the
		// scenario shapes the proof itself.
		if sc.Agent.Proof.Slot == 0 {
			cfg.Proof.Slot = 2 * sc.Step
			if sc.Agent.Proof.Settle == 0 {
				// Read 30% and 65% in: once after each step.
				cfg.Proof.Settle = cfg.Proof.WindowSettle()
			}
			if sc.Agent.Proof.FreeLead == 0 {
				// A step is read as a whole: a freed slot is free
				// from its start.
				cfg.Proof.FreeLead = cfg.Proof.Slot
			}
		}
		if sc.Agent.Proof.Samples == 0 {
			cfg.Proof.Samples = 2
		}
		cfg.StateDir = filepath.Join(dir, "state")
		cfg.Listen = "off"
		cfg.DryRun = false
		// The simulated root is not this machine, so CPUID cannot say
		// whether its clock modulation has 16 duty steps: the scenario's
		// CPU model does, unless the scenario says otherwise.
		if cfg.Levers.ClockModulation.ExtendedDuty == nil && on(sc.Machine.Features.MSR) {
			ext := sc.Machine.ExtendedClockModulation()
			cfg.Levers.ClockModulation.ExtendedDuty = &ext
		}
		if o.Agent != nil {
			o.Agent(&cfg)
		}
		ps := cfg.ProbeSettings()
		prober := newSimProber(s, ps)
		log, built := o.Startup.Logger(o.Log)
		a, closeA, err := agent.BuildWith(ctx, cfg, s.h, agent.BuildOptions{
			Log: log, Version: "sim", OnAction: r.onAction,
			PerfOpener: perfOpener{s}, Probe: prober, Sleep: func(time.Duration) {}, Now: vclock,
		})
		built()
		if err != nil {
			return nil, fmt.Errorf("building the agent: %w", err)
		}
		r.ag, r.closeA = a, closeA
		// Calibrate the probe on the quiet machine before the tenants run,
		// as the lab does (a restarted agent restores baselines.json instead).
		s.setState(s.model.quietState())
		for range 8 {
			if err := a.Calibrate(ctx, 1); err != nil {
				return nil, err
			}
		}
		a.Start(ctx)
	}

	var next, lastState time.Time
	var reported time.Duration // virtual time told to o.Progress
	step := sc.Step
	dt := step.Seconds()
	for s.now = 0; s.now < sc.Duration; s.now += step {
		if s.now%(time.Second) == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if o.Progress != nil && s.now > 0 {
				o.Progress(time.Second)
				reported += time.Second
			}
		}
		if err := s.step(step); err != nil {
			return nil, err
		}
		r.account(dt)
		if r.ag != nil {
			now := vclock()
			// The kernel's counters move continuously, and the agent
			// reads some between its intervals (the watch, a proof's
			// readings) and may run an interval early (a first sign of
			// contention): every step publishes them all.
			if err := s.publish(); err != nil {
				return nil, err
			}
			before := processCPU()
			nn := r.ag.Tick(ctx, now, next)
			// An interval ran if the agent published a new state.
			if st, ok := r.ag.Latest(); ok && st.Time.After(lastState) {
				lastState = st.Time
				r.ticks = append(r.ticks, (processCPU() - before).Seconds())
				r.intervals = append(r.intervals, st.IntervalCPU)
				r.perfFDs = max(r.perfFDs, st.PerfFDs)
			}
			next = nn
		}
	}
	if o.Progress != nil && sc.Duration > reported {
		o.Progress(sc.Duration - reported)
	}
	pr := &PolicyResult{Policy: policy, LeftThrottled: []string{}}
	if o.KeepTree {
		pr.Tree = s.root
	}
	switch policy {
	case PolicyCrosstalk:
		s.now = sc.Duration
		r.ag.Stop(ctx)
		r.closeA()
	case PolicyStatic:
		if err := r.endStatic(); err != nil {
			return nil, err
		}
	}
	// Nothing may be left throttled.
	for i := range sc.tenants {
		if s.present[i] {
			s.dirtyQuota[i] = true
		}
	}
	s.dirtyResctrl, s.dirtyFreq = true, true
	if err := s.readLevers(); err != nil {
		return nil, err
	}
	for i, t := range sc.tenants {
		if s.present[i] && s.leverOn(i) {
			pr.LeftThrottled = append(pr.LeftThrottled, t.Name)
		}
	}
	r.result(pr)
	return pr, nil
}

// tempDir is where host trees are made: memory-backed /dev/shm when there
// is one (the agent fsyncs its state file on every throttle, and a tree has
// thousands of files), else the system's temporary directory.
func tempDir(dir string) string {
	if dir != "" {
		return dir
	}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() && syscall.Access("/dev/shm", 2) == nil {
		return "/dev/shm"
	}
	return os.TempDir()
}

// quietState is the host with no tenant running: what the agent calibrates on.
func (md *Model) quietState() *State {
	st := &State{Tenants: make([]TenantState, len(md.tenants))}
	md.solve(st, nil, NewLevers(len(md.tenants), md.ncpu, md.m.Sockets), 1)
	return st
}

// account integrates a step into the per-tenant results.
func (r *run) account(dt float64) {
	s := r.s
	for i, t := range r.sc.tenants {
		ts := &s.state.Tenants[i]
		if !ts.Active {
			continue
		}
		r.work[i] += ts.Progress * dt
		r.solo[i] += ts.Solo * dt
		r.cpuSec[i] += ts.Alloc * dt
		end := r.sc.Duration
		if t.Stop > 0 {
			end = min(end, t.Stop)
		}
		if s.now >= t.Start+time.Duration(0.7*float64(end-t.Start)) {
			r.lateWork[i] += ts.Progress * dt
			r.lateSolo[i] += ts.Solo * dt
		}
		if s.leverOn(i) {
			r.throttled[i] += dt
		}
	}
}

func (r *run) onAction(a api.ActionRecord) {
	idx := -1
	for i, t := range r.sc.tenants {
		if r.s.present[i] && t.cgroupPath() == a.Tenant {
			idx = i
			break
		}
	}
	name := a.Name
	if idx >= 0 {
		name = r.sc.tenants[idx].Name
	}
	r.actions = append(r.actions, Action{T: a.Time.Sub(Epoch).Seconds(), Tenant: name, Kind: string(a.Kind), Quota: a.Quota, Reason: a.Reason, index: idx})
}

// applyStatic caps every tenant to its share of the CPUs in use, split by
// CPU counts (lab.StaticShares), through the same cgroup writer the lab uses.
func (r *run) applyStatic() error {
	var pts []lab.PolicyTenant
	for i, t := range r.sc.tenants {
		if r.s.present[i] {
			pts = append(pts, lab.PolicyTenant{Name: t.Name, Role: t.Role, CPUs: t.CPUSet})
		}
	}
	shares := lab.StaticShares(pts)
	layout, err := cgroup.Detect(r.s.h)
	if err != nil {
		return err
	}
	for i, t := range r.sc.tenants {
		if !r.s.present[i] {
			continue
		}
		share := shares[t.Name]
		if share >= float64(t.CPUSet.Len()) {
			continue
		}
		q := cgroup.Quota{Quota: time.Duration(share * float64(lab.StaticPeriod)), Period: lab.StaticPeriod}
		if q.Quota < cgroup.MinQuota {
			q.Quota = cgroup.MinQuota
		}
		if err := cgroup.Open(r.s.h, layout, t.cgroupPath()).SetCPUQuota(q); err != nil {
			return fmt.Errorf("static cap of %s: %w", t.Name, err)
		}
		r.actions = append(r.actions, Action{T: 0, Tenant: t.Name, Kind: "cap", Quota: q.CPUs(), Reason: "static share " + q.String(), index: i})
	}
	return nil
}

func (r *run) endStatic() error {
	layout, err := cgroup.Detect(r.s.h)
	if err != nil {
		return err
	}
	var errs []error
	for i, t := range r.sc.tenants {
		if r.s.present[i] {
			if err := cgroup.Open(r.s.h, layout, t.cgroupPath()).SetCPUQuota(cgroup.Quota{Quota: -1, Period: lab.StaticPeriod}); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// processCPU is this process's CPU time so far (user + system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// result fills a policy's result from the run.
func (r *run) result(pr *PolicyResult) {
	named := map[int]bool{}
	proofs := map[int]int{}
	for _, a := range r.actions {
		if a.index < 0 {
			continue
		}
		switch a.Kind {
		case "proof":
			// A proof starts with a record of no quota; its trials' caps
			// follow as "proof" with the cap's quota.
			if a.Quota == 0 {
				proofs[a.index]++
			}
		case "release", "cap", "proof-free":
		default:
			named[a.index] = true
		}
	}
	for i, t := range r.sc.tenants {
		tr := TenantResult{Name: t.Name, Role: t.Role, Kind: t.Kind, ThrottledSeconds: round(r.throttled[i], 2),
			CPUSeconds: round(r.cpuSec[i], 2), NamedPolluter: named[i], Proofs: proofs[i]}
		if r.work[i] > 0 && r.solo[i] > 0 {
			v := round(r.solo[i]/r.work[i], 3)
			tr.Slowdown = &v
		}
		if r.lateWork[i] > 0 && r.lateSolo[i] > 0 {
			v := round(r.lateSolo[i]/r.lateWork[i], 3)
			tr.SteadySlowdown = &v
		}
		pr.Tenants = append(pr.Tenants, tr)
		if t.Role == RoleVictim && tr.Slowdown != nil && (pr.VictimSlowdown == nil || *tr.Slowdown > *pr.VictimSlowdown) {
			v := *tr.Slowdown
			pr.VictimSlowdown = &v
		}
	}
	for _, a := range r.actions {
		if a.index >= 0 && r.sc.tenants[a.index].Role == RolePolluter && named[a.index] && a.Kind != "proof" && a.Kind != "proof-free" && a.Kind != "release" {
			v := round(a.T, 2)
			pr.FirstAction = &v
			break
		}
	}
	pr.Actions = r.actions
	if pr.Actions == nil {
		pr.Actions = []Action{}
	}
	if r.ag != nil {
		as := &AgentStats{Intervals: len(r.intervals), PerfFDsMax: r.perfFDs}
		as.IntervalCPUMaxMs, as.IntervalCPUMeanMs = maxMean(r.intervals)
		as.IntervalCPUMs = make([]float64, len(r.intervals))
		for k, x := range r.intervals {
			as.IntervalCPUMs[k] = round(x*1000, 2)
		}
		if n := len(r.intervals); n > 0 {
			sorted := slices.Clone(as.IntervalCPUMs)
			slices.Sort(sorted)
			as.IntervalCPUP95Ms = sorted[min(n-1, int(math.Ceil(0.95*float64(n)))-1)]
		}
		as.TickCPUMaxMs, as.TickCPUMeanMs = maxMean(r.ticks)
		pr.Agent = as
	}
}

func maxMean(v []float64) (maxMs, meanMs float64) {
	if len(v) == 0 {
		return 0, 0
	}
	sum := 0.0
	for _, x := range v {
		maxMs = max(maxMs, x)
		sum += x
	}
	return round(maxMs*1000, 3), round(sum/float64(len(v))*1000, 3)
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
