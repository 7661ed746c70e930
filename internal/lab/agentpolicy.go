package lab

import (
	"context"
	"fmt"
	"os"
	"path"
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
	return func() Policy { return &agentPolicy{base: base} }
}

type agentPolicy struct {
	base   agent.Config
	agent  *agent.Agent
	cancel context.CancelFunc
	done   chan error
	// sampled closes when the sampler of the agent's contention has stopped.
	sampled chan struct{}
	dir     string
	close   func()
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
	p.dir = dir
	cfg := p.base
	builtin := false
	cfg.Tenants.Builtin = &builtin
	cfg.Tenants.Globs = []string{path.Join(path.Dir(env.Tenants[0].Group.Name), "*")}
	cfg.Listen = "off"
	cfg.StateDir = dir
	record := func(r api.ActionRecord) {
		env.Record(Action{T: env.Since().Seconds(), Tenant: r.Name, Kind: string(r.Kind), Detail: r.Reason, Quota: r.Quota})
	}
	a, closeFn, err := agent.Build(cfg, env.Host, env.Log, "lab", record)
	if err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("crosstalk agent: %w", err)
	}
	p.agent, p.close = a, closeFn
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
	actx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan error, 1)
	go func() { p.done <- a.Run(actx) }()
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

func (p *agentPolicy) End(ctx context.Context) error {
	if p.agent == nil {
		return nil
	}
	p.cancel()
	if p.sampled != nil {
		<-p.sampled
	}
	var err error
	select {
	case err = <-p.done:
	case <-ctx.Done():
		err = fmt.Errorf("crosstalk agent did not stop in time: %w", ctx.Err())
	case <-time.After(10 * time.Second):
		err = fmt.Errorf("crosstalk agent did not stop within 10s")
	}
	p.close()
	os.RemoveAll(p.dir)
	return err
}
