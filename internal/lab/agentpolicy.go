package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/api"
)

// AgentPolicy returns the lab policy "crosstalk": the real agent, run in the
// lab's process against the phase's tenant cgroups (found by a glob, as an
// operator would configure it), with its actions put on the lab's timeline.
// base is the agent configuration to use; discovery, the listener and the
// state directory are set per phase.
func AgentPolicy(base agent.Config) PolicyFactory {
	once := &StartupOnce{}
	return func() Policy { return &agentPolicy{base: base, once: once} }
}

type agentPolicy struct {
	base agent.Config
	// once keeps the agents' start-up reports to one copy for all the
	// phases of this factory (nil: every copy).
	once *StartupOnce
	// While the agent runs: cancel stops it, done yields Run's result,
	// close releases what agent.Build opened, dir is its state directory.
	cancel context.CancelFunc
	done   chan error
	// sampled closes when the sampler of the agent's contention has stopped.
	sampled chan struct{}
	dir     string
	close   func()
	// journal is where End leaves a copy of the agent's journal ("": nowhere).
	journal string
	// stopWait bounds how long End waits for the agent to stop besides
	// its context (default 10s).
	stopWait time.Duration
	// latest is the phase's agent's last state (Agent.Latest) and log its
	// logger: End logs what the agent's probe cost the tenants' CPUs.
	latest func() (api.State, bool)
	log    *slog.Logger
}

func (*agentPolicy) Name() string { return "crosstalk" }

func (p *agentPolicy) Begin(ctx context.Context, env *PolicyEnv) error {
	if len(env.Tenants) == 0 {
		return nil
	}
	dir, err := os.MkdirTemp("", "crosstalk-lab-agent")
	if err != nil {
		return err
	}
	p.dir, p.journal = dir, env.Journal
	cfg := p.base
	builtin := false
	cfg.Tenants.Builtin = &builtin
	cfg.Tenants.Globs = []string{path.Join(path.Dir(env.Tenants[0].Group.Name), "*")}
	cfg.Listen = "off"
	cfg.StateDir = dir
	record := func(r api.ActionRecord) {
		env.Record(Action{T: env.Since().Seconds(), Tenant: r.Name, Kind: string(r.Kind), Detail: r.Reason, Quota: r.Quota})
	}
	log, built := p.once.Logger(env.Log)
	a, closeFn, err := agent.Build(ctx, cfg, env.Host, log, "lab", record)
	built()
	if err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("crosstalk agent: %w", err)
	}
	p.close = closeFn
	p.latest, p.log = a.Latest, log
	// Before the tenants start, what the probes read is a quiet host: a
	// baseline worth calibrating on. Among tenants already running (a
	// polluter among them, perhaps) it is not; the agent then starts as it
	// would on a busy host, with no calibrated baseline.
	if !env.TenantsRunning {
		if err := a.Calibrate(ctx, 4); err != nil {
			closeFn()
			os.RemoveAll(dir)
			return fmt.Errorf("crosstalk agent: calibrating probes: %w", err)
		}
	}
	actx := p.start(ctx, a.Run)
	p.sampled = make(chan struct{})
	go sampleContention(actx, a, cfg.Interval, env, p.sampled)
	return nil
}

// sampleContention puts each interval's contention ratio of the agent on the
// phase's timeline, polling its published state at twice its interval's rate
// until ctx ends; then it closes done.
func sampleContention(ctx context.Context, a *agent.Agent, interval time.Duration, env *PolicyEnv, done chan<- struct{}) {
	defer close(done)
	if env.Contention == nil {
		return
	}
	tick := time.NewTicker(max(interval/2, 50*time.Millisecond))
	defer tick.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		st, ok := a.Latest()
		if !ok || !st.Time.After(last) {
			continue
		}
		last = st.Time
		if r := st.ContentionRatio; r > 0 && finite(r) {
			env.Contention(Sample{T: env.Since().Seconds(), Value: r})
		}
	}
}

// start runs the agent's loop until End. Its context keeps the phase's
// values but not its cancellation: the agent must outlive a cancelled phase
// long enough for End to stop it and have it restore what it throttled.
// It returns the agent's context, which End cancels.
func (p *agentPolicy) start(ctx context.Context, run func(context.Context) error) context.Context {
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	p.cancel, p.done = cancel, done
	go func() { done <- run(actx) }()
	return actx
}

// End stops the agent and waits for it: its shutdown restores every tenant
// it throttled, through the very dependencies Build opened, so those are
// released only once Run has returned. An agent that does not stop in time
// is reported, and its dependencies are released when it does stop, never
// under it.
func (p *agentPolicy) End(ctx context.Context) error {
	if p.done == nil {
		return nil
	}
	done, closeFn, dir, keep := p.done, p.close, p.dir, p.journal
	p.done = nil
	var kept error
	release := func() {
		closeFn()
		if keep != "" {
			kept = keepJournal(agent.JournalPath(dir), keep)
		}
		os.RemoveAll(dir)
	}
	p.cancel()
	if p.sampled != nil {
		<-p.sampled // the sampler reads the agent's state: done before it is released
	}
	wait := p.stopWait
	if wait <= 0 {
		wait = 10 * time.Second
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var late error
	select {
	case err := <-done:
		p.logProbeCPU()
		release()
		return errors.Join(err, kept)
	case <-ctx.Done():
		late = fmt.Errorf("crosstalk agent did not stop in time: %w", ctx.Err())
	case <-timer.C:
		late = fmt.Errorf("crosstalk agent did not stop within %s", wait)
	}
	go func() {
		<-done
		release()
	}()
	return late
}

// logProbeCPU logs the CPU time the agent's probe took on each CPU over the
// phase, by reading (interval, watch, proof), from its last state.
func (p *agentPolicy) logProbeCPU() {
	if p.latest == nil || p.log == nil {
		return
	}
	st, ok := p.latest()
	if !ok {
		return
	}
	for _, c := range st.ProbeCPU {
		p.log.Info("the agent's probe took CPU time beside the tenants", "cpu", c.CPU, "reading", c.Reading, "seconds", c.Seconds)
	}
}

// keepJournal copies the agent's journal at src (after the part rotated to
// src.1, if any) to dst, making dst's directory.
func keepJournal(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("keeping the agent's journal: %w", err)
	}
	out, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("keeping the agent's journal: %w", err)
	}
	for _, part := range []string{src + ".1", src} {
		in, err := os.Open(part)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil {
			_, err = io.Copy(out, in)
			in.Close()
		}
		if err != nil {
			out.Close()
			return fmt.Errorf("keeping the agent's journal: %w", err)
		}
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("keeping the agent's journal: %w", err)
	}
	return nil
}
