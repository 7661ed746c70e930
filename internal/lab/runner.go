package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

// labRoot is the cgroup below which every lab run lives, in every hierarchy:
// /crosstalk-lab/run-PID-NANOS/PHASE/TENANT.
const labRoot = "/crosstalk-lab"

// Options configures a lab run.
type Options struct {
	Host *host.Host
	// Self is the crosstalk binary: it runs the built-in loads and the exec shim.
	Self     string
	Policies []string
	Registry Policies
	// Interval is the built-in loads' progress interval (the timeline's resolution).
	Interval time.Duration
	// Grace is how long tenants get after their end before they are killed.
	Grace time.Duration
	// SoloVictimOnly skips the solo phases of every tenant but the victim:
	// only the victim's slowdown is then known, in a third less time or
	// better (the suite, which scores attribution, needs no more).
	SoloVictimOnly bool
	// WithoutPolluter adds, to a scenario with a polluter, a co-located
	// phase with no policy and the polluter left out: the victim's slowdown
	// there, against the none policy's, is how much the polluter itself
	// hurt it (the rest is its other neighbours' share of the CPUs).
	WithoutPolluter bool
	// CPUStandIn adds, to a scenario whose polluter shares a CPU with the
	// victim, a co-located phase with no policy and the polluter replaced
	// by the built-in cpu load on its CPUs and with its timing: busy as
	// the polluter is, but cache-friendly. The victim's slowdown there,
	// against the none policy's, is what the polluter cost it beyond the
	// CPU time any busy neighbour on its CPU takes, which the scheduler
	// shares out and crosstalk leaves alone.
	CPUStandIn bool
	Log        *slog.Logger
	// Stamp is the caller's part of every result's Meta: the binary's
	// version and commit and the command line.
	Stamp Meta
	// JournalDir, when set, keeps the journal of each co-located phase
	// whose policy keeps one (the crosstalk agent's): DIR/PHASE.jsonl,
	// e.g. r1-crosstalk.jsonl, for 'crosstalk explain --journal' to tell
	// why it did what it did. Unset, the journal goes with the phase.
	JournalDir string
	// Progress, when set, is told of each phase that ends, with its planned
	// length: the sum over a run is what Planned returns.
	Progress func(phase time.Duration)
}

type runner struct {
	opt    Options
	s      *Scenario
	layout cgroup.Layout
	runID  string
	log    *slog.Logger
}

// Run runs the scenario: every tenant solo, then all of them co-located under
// each policy, Repetitions times, and reports medians. Whatever happens —
// success, a failing tenant, ctx cancelled (Ctrl-C) — every tenant process is
// killed and every cgroup the run created is removed before Run returns.
func Run(ctx context.Context, s *Scenario, opt Options) (*Result, error) {
	if err := opt.fill(); err != nil {
		return nil, err
	}
	if err := opt.Registry.Resolve(opt.Policies); err != nil {
		return nil, err
	}
	r, cleanup, err := newRunner(opt, s)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	return r.run(ctx)
}

// newRunner checks the host can run s (Preflight), removes what a killed
// run left (Sweep), and returns a runner whose cgroups cleanup removes.
// opt must be filled.
func newRunner(opt Options, s *Scenario) (r *runner, cleanup func(), err error) {
	layout, err := Preflight(opt.Host, s)
	if err != nil {
		return nil, nil, err
	}
	r = &runner{opt: opt, s: s, layout: layout, log: opt.Log,
		runID: fmt.Sprintf("run-%d-%d", os.Getpid(), time.Now().UnixNano())}
	if n, err := Sweep(opt.Host, layout); err != nil {
		r.log.Warn("could not remove a stale lab run", "err", err)
	} else if n > 0 {
		r.log.Info("removed stale lab cgroups left by a killed run", "runs", n)
	}
	return r, func() {
		if err := cgroup.RemoveTree(opt.Host, layout, path.Join(labRoot, r.runID), 5*time.Second); err != nil {
			r.log.Error("lab cleanup failed; run `crosstalk lab cleanup`", "err", err)
		}
		cgroup.Open(opt.Host, layout, labRoot).Remove() // fails harmlessly while other runs are in it
	}, nil
}

// Preflight checks the host can run the scenario: cgroup controllers for CPU
// time and pinning, and every CPU the scenario names online.
func Preflight(h *host.Host, s *Scenario) (cgroup.Layout, error) {
	layout, err := cgroup.Detect(h)
	if err != nil {
		return layout, fmt.Errorf("lab: %w", err)
	}
	if layout.CPUControl() == "" {
		return layout, errors.New("lab: no cgroup cpu controller (needed to cap tenants)")
	}
	if layout.V1["cpuset"] == "" && !layout.HasV2Controller("cpuset") {
		return layout, errors.New("lab: no cgroup cpuset controller (needed to pin tenants to CPUs)")
	}
	topo, err := topology.Read(h)
	if err != nil {
		return layout, fmt.Errorf("lab: %w", err)
	}
	for _, t := range s.Tenants {
		if missing := t.cpus.Difference(topo.Online); !missing.IsEmpty() {
			return layout, fmt.Errorf("lab: tenant %s wants CPUs %s, but %s are not online here (online: %s); edit cpus in the scenario",
				t.Name, t.cpus, missing, topo.Online)
		}
	}
	return layout, nil
}

// Sweep removes lab cgroups whose run process is gone (a lab killed with -9
// or a crash: its tenants died with it through their parent-death signal,
// but the cgroups stay until someone removes them). It returns how many runs
// it removed.
func Sweep(h *host.Host, l cgroup.Layout) (int, error) {
	runs := map[string]bool{}
	for _, d := range cgroup.Open(h, l, labRoot).Dirs() {
		ents, err := h.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), "run-") {
				runs[e.Name()] = true
			}
		}
	}
	n := 0
	var errs []error
	for name := range runs {
		// Keep our own runs (each Run removes its own) and those of a lab
		// process still alive.
		if f := strings.Split(name, "-"); len(f) == 3 {
			if pid, err := strconv.Atoi(f[1]); err == nil && (pid == os.Getpid() || cgroup.PIDAlive(pid)) {
				continue
			}
		}
		if err := cgroup.RemoveTree(h, l, path.Join(labRoot, name), 3*time.Second); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	// Leave the empty root behind only if something else is in it.
	if len(runs) == n {
		cgroup.Open(h, l, labRoot).Remove()
	}
	return n, errors.Join(errs...)
}

// Planned is the measured time Run spends on the scenario with these
// options: its solo phases, one co-located phase per policy and the phase
// without the polluter, times its repetitions (setup and teardown between
// phases come on top).
func Planned(s *Scenario, opt Options) time.Duration {
	var rep time.Duration
	polluter := false
	for _, t := range s.Tenants {
		polluter = polluter || t.Role == RolePolluter
		if opt.SoloVictimOnly && t.Role != RoleVictim {
			continue
		}
		rep += t.RunLength(s.Phase)
	}
	rep += time.Duration(len(opt.Policies)) * s.Phase
	if opt.WithoutPolluter && polluter {
		rep += s.Phase
	}
	if _, ok := cpuStandIn(s); opt.CPUStandIn && ok {
		rep += s.Phase
	}
	return time.Duration(max(s.Repetitions, 1)) * rep
}

func (r *runner) run(ctx context.Context) (*Result, error) {
	s := r.s
	res := &Result{
		Scenario: s.Name, Description: strings.TrimSpace(s.Description), Phase: s.Phase.Seconds(),
		Repetitions: s.Repetitions, Victim: s.Victim().Name, Solo: map[string]Solo{},
		Meta: r.opt.stamp(KindRun),
	}
	res.Host, _ = r.opt.Host.ReadString("/proc/sys/kernel/hostname")
	soloVals := map[string][]float64{}
	colo := map[string]map[string][]float64{}
	stats := map[string]map[string][2]time.Duration{} // policy → tenant → {throttled, cpu} summed
	last := map[string]phaseOut{}
	var without []float64 // the victim's value with the polluter left out
	var standIn []float64 // and with a cpu load in its place
	for _, p := range r.opt.Policies {
		colo[p] = map[string][]float64{}
		stats[p] = map[string][2]time.Duration{}
	}

	for rep := 1; rep <= s.Repetitions; rep++ {
		for _, t := range s.Tenants {
			if r.opt.SoloVictimOnly && t.Role != RoleVictim {
				continue
			}
			solo := t
			solo.Start, solo.Stop, solo.Pause, solo.Resume = 0, 0, 0, 0
			length := t.RunLength(s.Phase)
			r.log.Info("solo phase", "tenant", t.Name, "load", t.What(), "seconds", length.Seconds(), "repetition", rep)
			out, err := r.phase(ctx, fmt.Sprintf("r%d-solo-%s", rep, t.Name), length, 0, []Tenant{solo}, nonePolicy{})
			if err != nil {
				return nil, err
			}
			if v, ok := out.values[t.Name]; ok {
				soloVals[t.Name] = append(soloVals[t.Name], v)
			}
		}
		for _, pname := range r.opt.Policies {
			r.log.Info("co-located phase", "policy", pname, "seconds", s.Phase.Seconds(), "repetition", rep)
			out, err := r.phase(ctx, fmt.Sprintf("r%d-%s", rep, pname), s.Phase, s.PolicyStart, s.Tenants, r.opt.Registry[pname]())
			if err != nil {
				return nil, err
			}
			for n, v := range out.values {
				colo[pname][n] = append(colo[pname][n], v)
			}
			for n, st := range out.stats {
				acc := stats[pname][n]
				stats[pname][n] = [2]time.Duration{acc[0] + st[0], acc[1] + st[1]}
			}
			last[pname] = out
		}
		if r.opt.WithoutPolluter {
			var rest []Tenant
			for _, t := range s.Tenants {
				if t.Role != RolePolluter {
					rest = append(rest, t)
				}
			}
			if len(rest) < len(s.Tenants) {
				r.log.Info("co-located phase without the polluter", "policy", "none", "seconds", s.Phase.Seconds(), "repetition", rep)
				var err error
				if without, err = r.victimUnderNone(ctx, fmt.Sprintf("r%d-without-polluter", rep), rest, without); err != nil {
					return nil, err
				}
			}
		}
		if tenants, ok := cpuStandIn(s); r.opt.CPUStandIn && ok {
			r.log.Info("co-located phase with a cpu load in the polluter's place", "policy", "none", "seconds", s.Phase.Seconds(), "repetition", rep)
			var err error
			if standIn, err = r.victimUnderNone(ctx, fmt.Sprintf("r%d-cpu-stand-in", rep), tenants, standIn); err != nil {
				return nil, err
			}
		}
	}

	for _, t := range s.Tenants {
		name, unit, dir := t.MetricInfo()
		so := Solo{Metric: name, Unit: unit, Direction: dir, Values: soloVals[t.Name]}
		if v, ok := median(soloVals[t.Name]); ok {
			so.Value = ptr(v)
		}
		if so.Values == nil {
			so.Values = []float64{}
		}
		res.Solo[t.Name] = so
	}
	if v, ok := median(without); ok {
		if so := res.Solo[res.Victim]; so.Value != nil {
			if sd, ok := Slowdown(*so.Value, v, so.Direction); ok {
				res.VictimSlowdownWithoutPolluter = ptr(sd)
			}
		}
	}
	if v, ok := median(standIn); ok {
		if so := res.Solo[res.Victim]; so.Value != nil {
			if sd, ok := Slowdown(*so.Value, v, so.Direction); ok {
				res.VictimSlowdownCPUStandIn = ptr(sd)
			}
		}
	}
	for _, pname := range r.opt.Policies {
		out := last[pname]
		pr := PolicyResult{Policy: pname, Tenants: map[string]TenantResult{}, Actions: out.actions,
			Timeline: Timeline{Victim: out.victim, Contention: out.contention, Events: out.events}, PolicyStartSeconds: out.policyStart.Seconds(),
			Journal: out.journal}
		if pr.Actions == nil {
			pr.Actions = []Action{}
		}
		reps := float64(s.Repetitions)
		for _, t := range s.Tenants {
			st := stats[pname][t.Name]
			tr := TenantResult{Role: t.Role, Metric: res.Solo[t.Name].Metric, Values: colo[pname][t.Name],
				ThrottledSeconds: st[0].Seconds() / reps, CPUSeconds: st[1].Seconds() / reps}
			if tr.Values == nil {
				tr.Values = []float64{}
			}
			if v, ok := median(colo[pname][t.Name]); ok {
				tr.Value = ptr(v)
				if so := res.Solo[t.Name].Value; so != nil {
					if sd, ok := Slowdown(*so, v, res.Solo[t.Name].Direction); ok {
						tr.Slowdown = ptr(sd)
					}
				}
			}
			pr.Tenants[t.Name] = tr
			if t.Role == RoleVictim {
				pr.VictimSlowdown = tr.Slowdown
			}
		}
		pr.FirstActionSeconds, pr.ReleaseSeconds = reactionTimes(s, out)
		res.Results = append(res.Results, pr)
	}
	return res, nil
}

// reactionTimes measures, for the first polluter, the time from its onset
// (its work's start where it said so, else its process start) to the first
// "throttle" of it, and from its stop to the "release" that restored its
// full quota.
func reactionTimes(s *Scenario, out phaseOut) (first, release *float64) {
	for _, t := range s.Tenants {
		if t.Role != RolePolluter {
			continue
		}
		var started, stopped *float64
		for _, e := range out.events {
			if e.Tenant != t.Name {
				continue
			}
			v := e.T
			if e.Kind == "start" && started == nil {
				started = &v
			}
			if e.Kind == "stop" {
				stopped = &v
			}
		}
		if started == nil {
			continue
		}
		ref := onsetIn(out.events, t.Name, window{*started, math.Inf(1)})
		for _, a := range out.actions {
			if a.Tenant == t.Name && a.Kind == "throttle" && a.T >= *started {
				first = ptr(max(0, a.T-ref))
				break
			}
		}
		// Only a polluter that stops before the phase ends shows a release.
		if first != nil && stopped != nil && t.Stop > 0 && t.Stop < s.Phase {
			for _, a := range out.actions {
				if a.Tenant == t.Name && a.Kind == "release" && a.Quota == 0 && a.T >= *stopped {
					release = ptr(a.T - *stopped)
					break
				}
			}
		}
		return first, release
	}
	return nil, nil
}

// phaseOut is what one phase measured.
type phaseOut struct {
	values     map[string]float64
	stats      map[string][2]time.Duration // throttled, cpu
	victim     []Sample
	contention []Sample
	events     []TenantEvent
	actions    []Action
	// policyStart is when the policy began, into the phase.
	policyStart time.Duration
	// journal is where the policy's journal of the phase was kept ("": none).
	journal string
}

// phase runs tenants for length under a policy that begins policyAt into
// the phase (0: before any tenant starts), then tears everything down.
func (r *runner) phase(ctx context.Context, name string, length, policyAt time.Duration, tenants []Tenant, pol Policy) (out phaseOut, err error) {
	out = phaseOut{values: map[string]float64{}, stats: map[string][2]time.Duration{}}
	phaseCG := path.Join(labRoot, r.runID, name)
	defer func() {
		if rerr := cgroup.RemoveTree(r.opt.Host, r.layout, phaseCG, 5*time.Second); rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing phase cgroups: %w", rerr))
		}
		if err == nil && r.opt.Progress != nil {
			r.opt.Progress(length)
		}
	}()

	var start atomic.Int64
	start.Store(time.Now().UnixNano())
	since := func() time.Duration { return time.Duration(time.Now().UnixNano() - start.Load()) }
	var mu sync.Mutex
	env := &PolicyEnv{Host: r.opt.Host, Layout: r.layout, Log: r.log.With("policy", pol.Name()), Since: since,
		Record:     func(a Action) { mu.Lock(); out.actions = append(out.actions, a); mu.Unlock() },
		Contention: func(s Sample) { mu.Lock(); out.contention = append(out.contention, s); mu.Unlock() }}
	if r.opt.JournalDir != "" {
		env.Journal = filepath.Join(r.opt.JournalDir, name+".jsonl")
		defer func() {
			if _, serr := os.Stat(env.Journal); serr == nil {
				out.journal = env.Journal
			}
		}()
	}
	groups := map[string]*cgroup.Group{}
	for _, t := range tenants {
		g, err := cgroup.Create(r.opt.Host, r.layout, path.Join(phaseCG, t.Name), t.cpus)
		if err != nil {
			return out, fmt.Errorf("phase %s: %w", name, err)
		}
		groups[t.Name] = g
		env.Tenants = append(env.Tenants, PolicyTenant{Name: t.Name, Role: t.Role, CPUs: t.cpus, Group: g})
	}

	begun := false
	begin := func() error {
		env.TenantsRunning = policyAt > 0
		if err := pol.Begin(ctx, env); err != nil {
			return fmt.Errorf("phase %s: policy %s: %w", name, pol.Name(), err)
		}
		begun = true
		out.policyStart = since()
		return nil
	}
	defer func() {
		if !begun {
			return
		}
		// Restore even when ctx is cancelled: its values, bounded, without
		// its cancellation.
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if perr := pol.End(ectx); perr != nil {
			err = errors.Join(err, fmt.Errorf("phase %s: policy %s: %w", name, pol.Name(), perr))
		}
	}()
	if policyAt == 0 {
		// The policy may calibrate on the quiet host first: the phase's
		// clock starts after it.
		if err := begin(); err != nil {
			return out, err
		}
		out.policyStart = 0
	}
	start.Store(time.Now().UnixNano())

	procs := map[string]*proc{}
	stopAll := func() {
		for _, p := range procs {
			p.stop()
		}
		for _, p := range procs {
			<-p.done
		}
	}
	order := slices.Clone(tenants)
	slices.SortStableFunc(order, func(a, b Tenant) int { return int(a.Start - b.Start) })
	next := 0
	deadline := length + r.opt.Grace
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		now := since()
		for next < len(order) && order[next].Start <= now {
			t := order[next]
			runFor := t.RunLength(length)
			p, err := startProc(r.opt.Self, t, groups[t.Name], runFor, r.opt.Interval, since)
			if err != nil {
				stopAll()
				return out, fmt.Errorf("phase %s: %w", name, err)
			}
			procs[t.Name] = p
			out.events = append(out.events, TenantEvent{T: p.startAt.Seconds(), Tenant: t.Name, Role: t.Role, Kind: "start"})
			next++
		}
		if !begun && now >= policyAt {
			if err := begin(); err != nil {
				stopAll()
				return out, err
			}
		}
		for _, p := range procs {
			if kind := p.pauseStep(now); kind != "" {
				out.events = append(out.events, TenantEvent{T: now.Seconds(), Tenant: p.t.Name, Role: p.t.Role, Kind: kind})
			}
		}
		allDone := next == len(order) && begun
		for _, p := range procs {
			select {
			case <-p.done:
				if ferr := p.failure(); ferr != nil {
					stopAll()
					return out, fmt.Errorf("phase %s: %w", name, ferr)
				}
			default:
				allDone = false
				// External commands are stopped at their stop offset or the phase end;
				// built-in loads stop themselves and only get killed after the grace.
				end := p.startAt + p.t.RunLength(length)
				if (p.t.Load == "" && now >= end) || now >= end+r.opt.Grace {
					p.stop()
				}
			}
		}
		if allDone {
			break
		}
		if now > deadline+r.opt.Grace {
			stopAll()
			return out, fmt.Errorf("phase %s: tenants did not stop", name)
		}
		select {
		case <-ctx.Done():
			stopAll()
			return out, ctx.Err()
		case <-tick.C:
		}
	}

	for _, t := range tenants {
		p := procs[t.Name]
		if v, ok := p.value(); ok {
			out.values[t.Name] = v
		} else if err := p.noMetric(length); err != nil {
			return out, fmt.Errorf("phase %s: %w", name, err)
		} else if t.Load != "" || t.Metric != nil {
			r.log.Warn("tenant reported no metric", "tenant", t.Name, "phase", name)
		}
		p.mu.Lock()
		if p.onset != nil {
			out.events = append(out.events, TenantEvent{T: p.onset.Seconds(), Tenant: t.Name, Role: t.Role, Kind: "onset"})
		}
		out.events = append(out.events, TenantEvent{T: p.exitedAt.Seconds(), Tenant: t.Name, Role: t.Role, Kind: "stop"})
		if t.Role == RoleVictim {
			out.victim = slices.Clone(p.samples)
		}
		p.mu.Unlock()
		if st, err := groups[t.Name].CPUStat(); err == nil {
			out.stats[t.Name] = [2]time.Duration{st.Throttled, st.Usage}
		} else {
			r.log.Warn("no cpu accounting for tenant", "tenant", t.Name, "err", err)
		}
	}
	slices.SortStableFunc(out.events, func(a, b TenantEvent) int {
		switch {
		case a.T < b.T:
			return -1
		case a.T > b.T:
			return 1
		}
		return 0
	})
	if out.victim == nil {
		out.victim = []Sample{}
	}
	return out, nil
}

// fill sets defaults and checks what every run needs.
func (o *Options) fill() error {
	if o.Host == nil {
		return errors.New("lab: no host")
	}
	if _, err := os.Stat(o.Self); err != nil {
		return fmt.Errorf("lab: crosstalk binary for loads: %w", err)
	}
	if o.Interval <= 0 {
		o.Interval = 250 * time.Millisecond
	}
	if o.Grace <= 0 {
		o.Grace = 3 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Registry == nil {
		o.Registry = DefaultPolicies()
	}
	return nil
}

// victimUnderNone runs a co-located phase of these tenants under no
// policy and appends the victim's value to vals (if it reported one).
func (r *runner) victimUnderNone(ctx context.Context, name string, tenants []Tenant, vals []float64) ([]float64, error) {
	out, err := r.phase(ctx, name, r.s.Phase, 0, tenants, nonePolicy{})
	if err != nil {
		return vals, err
	}
	if v, ok := out.values[r.s.Victim().Name]; ok {
		vals = append(vals, v)
	}
	return vals, nil
}

// cpuStandIn is the scenario's tenants with the polluter replaced by the
// built-in cpu load, on the polluter's CPUs and with its start, stop and
// pause: ok is false unless the polluter shares a CPU with the victim (only
// there does its CPU use alone slow the victim).
func cpuStandIn(s *Scenario) ([]Tenant, bool) {
	victim := s.Victim()
	out := make([]Tenant, 0, len(s.Tenants))
	ok := false
	for _, t := range s.Tenants {
		if t.Role == RolePolluter && !t.cpus.Intersect(victim.cpus).IsEmpty() {
			t.Load, t.Args, t.Command, t.Metric, t.re = "cpu", nil, nil, nil, nil
			ok = true
		}
		out = append(out, t)
	}
	return out, ok
}
