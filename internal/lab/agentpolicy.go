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
	dir    string
	close  func()
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
	return nil
}

func (p *agentPolicy) End(ctx context.Context) error {
	if p.agent == nil {
		return nil
	}
	p.cancel()
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
