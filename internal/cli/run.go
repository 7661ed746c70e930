package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/nodesignal"
	"github.com/crosstalk-project/crosstalk/internal/service"
)

func newRunCmd(g *globals) *cobra.Command {
	var (
		configFile string
		dryRun     bool
		listen     string
		webConfig  string
		stateDir   string
		interval   time.Duration
		cpuProfile string
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the agent: watch every tenant, prove the polluter, throttle only it",
		Long: `run is crosstalk's agent. Every interval it discovers the host's tenants (libvirt
VMs, Kubernetes pods, docker/containerd/podman containers, and cgroups matching
configured globs), samples their CPU use, throttling, pressure and run delay,
perf counters where the host has a PMU, and its own canary probe (locked
operations and pointer chases per L3 domain, against their quiet baselines).

When the probes say neighbours suffer, the judge ranks suspects (bus locks and
LLC misses where counted; otherwise CPU activity on the contended L3, relief
when the probe runs on the suspect's own CPUs, and correlation with the
contention), then proves the top suspect by capping it hard for a moment: only
if the contention recovers is it a polluter. A proven polluter is duty-cycled
through its CPU quota (16 steps of 1/16 of a 16 ms period, and 1 ms in 128 ms
below them for a storm that 1/16 still lets through), tightened until
the probes are back near baseline, relaxed step by step, and released when it
stops.

Safety: before any write the original quota and the value about to be written
are recorded in STATE_DIR/state.json (atomic replace); SIGTERM, SIGINT,
SIGQUIT and every other catchable terminating signal restore everything
(SIGPIPE is ignored); a start after kill -9 restores what the previous run
left; one agent runs per host (/run/crosstalk/agent.lock). Every detection, proof and action is
journalled to STATE_DIR/journal.jsonl. --dry-run judges and journals but writes
nothing.

Metrics (Prometheus) and the state API are served on 127.0.0.1:9477 by default
(/metrics, /api/state, /healthz); 'crosstalk top' shows them live. Keep the
listener on localhost unless a firewall or an authenticating proxy protects it,
or give --web.config.file (TLS and basic auth, as Prometheus exporters take
it); --web.listen-address is another name for --listen.

SIGHUP reloads the --config file: an invalid one changes nothing (the log says
why); otherwise interval, max_throttled, protect (a newly protected tenant is
released at once), log_level, the judge, cpu_wait and cpi thresholds, cpu_wait.prove and cpi.prove, proof and
throttle (but for its period and steps) apply at once, throttles that still
hold are kept, and the log names the changed keys that need a restart.

Under systemd (Type=notify) it reports ready after its first interval, feeds
the watchdog (WatchdogSec=) from its loop and sets a status line; under
journald its log lines carry no time=.

With no --config, safe defaults apply; see 'crosstalk run --help' flags and the
docs/configuration.md for the configuration file (unknown keys are rejected).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// From the first moment: any terminating signal (SIGQUIT,
			// SIGUSR1, …, not just SIGTERM and SIGINT) ends the agent
			// through its restore, SIGHUP reloads the configuration, and
			// SIGPIPE is ignored.
			sigCtx, hup, stopSignals := notifyAgent(cmd.Context())
			defer stopSignals()
			ctx, cancel := context.WithCancel(sigCtx)
			defer cancel()
			log, level, err := g.levelledLogger()
			if err != nil {
				return err
			}
			cfg, err := agentConfig(configFile)
			if err != nil {
				return err
			}
			// The flags win over the file, at start and at every reload.
			flags := cmd.Flags()
			overrides := func(c *agent.Config) {
				if flags.Changed("dry-run") {
					c.DryRun = dryRun
				}
				if flags.Changed("listen") {
					c.Listen = listen
				}
				if flags.Changed("web.config.file") {
					c.WebConfigFile = webConfig
				}
				if flags.Changed("state-dir") {
					c.StateDir = stateDir
				}
				if flags.Changed("interval") {
					c.Interval = interval
				}
				if flags.Changed("log-level") {
					c.LogLevel = g.logLevel
				}
			}
			overrides(&cfg)
			if err := cfg.Validate(); err != nil {
				return err
			}
			if l, err := agent.ParseLogLevel(cfg.LogLevel); err == nil {
				level.Set(l)
			}
			// One agent per state directory: a second one, or a
			// `crosstalk restore` behind this one's back, would undo
			// throttles this agent still manages.
			lock, err := agent.LockStateDir(cfg.StateDir)
			if err != nil {
				return err
			}
			defer lock.Unlock()
			if host, ok := agent.ExposedListen(cfg.Listen); ok && cfg.WebConfigFile == "" {
				log.Warn("LISTENING BEYOND LOCALHOST: /metrics and /api/state are open to anyone who can reach "+host+"; keep it behind a firewall or an authenticating proxy, or give --web.config.file", "listen", cfg.Listen)
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer func() { pprof.StopCPUProfile(); f.Close() }()
			}
			// The agent's heap is small and steady; collecting less often
			// saves CPU on every host it runs on, for a few MiB of memory.
			debug.SetGCPercent(200)
			h, err := g.openHost()
			if err != nil {
				return err
			}
			defer h.Close()
			// One agent per host, whatever its state directory: two would
			// take each other's throttles for originals.
			hostLock, err := agent.LockHost(h, cfg.StateDir)
			if err != nil {
				return err
			}
			defer hostLock.Unlock()
			// Undo what a killed predecessor left, of every actuator kind,
			// before anything else (the agent itself re-checks its quotas).
			if rep, err := lock.RestoreAll(ctx, cfg, h, log); err != nil || rep.Total() > 0 {
				log.Warn("restored what a previous crosstalk left behind", "restored", rep.Restored, "kept", rep.Kept, "err", err)
			}
			safety := agent.NewSafety()
			a, closeFn, err := agent.BuildWith(ctx, cfg, h, agent.BuildOptions{Log: log, Version: g.build.Version, Safety: safety})
			if err != nil {
				return err
			}
			defer closeFn()
			// The node-level signal (uncontained polluter): a gauge always,
			// the node's condition/label/taint with kubernetes.node_signal.
			sig, err := nodesignal.FromConfig(cfg.Kubernetes, cfg.FloorDuty(), g.build.Version, log)
			if err != nil {
				return err
			}

			sigDone := make(chan struct{})
			go func() { sig.Run(ctx, a, cfg.Interval); close(sigDone) }()
			// On the way out the node is marked as no longer watched.
			defer func() { cancel(); <-sigDone }()
			errc := make(chan error, 1)
			if cfg.Listen != "off" {
				reg := agent.NewRegistry(a, g.build.Version, g.build.Commit)
				reg.MustRegister(sig, safety)
				go func() {
					errc <- agent.Serve(ctx, cfg.Listen, cfg.WebConfigFile, agent.CheckHost(cfg.Listen, agent.Handler(a, reg)), log)
				}()
			}
			// systemd (Type=notify): ready after the first interval, the
			// watchdog fed by the loop, stopping when ctx ends.
			notifier := service.NewNotifier(log)
			warnShortWatchdog(log, notifier.Watchdog(), a.WatchEvery())
			notifyDone := make(chan struct{})
			go func() { notifier.Run(ctx, a.Beats(), a.Latest); close(notifyDone) }()
			defer func() { cancel(); <-notifyDone }()
			go func() {
				for {
					select {
					case <-ctx.Done():
						return
					case <-hup:
						reloadAgent(ctx, a, configFile, overrides, level, log)
					}
				}
			}()
			log.Info("crosstalk agent running", "interval", cfg.Interval, "dry_run", cfg.DryRun, "listen", cfg.Listen, "state_dir", cfg.StateDir)
			runErr := make(chan error, 1)
			go func() { runErr <- a.Run(ctx) }()
			select {
			case err := <-runErr:
				return err
			case err := <-errc:
				if err != nil && !errors.Is(err, context.Canceled) {
					cancel()
					<-runErr // the agent restores before returning
					return fmt.Errorf("metrics listener: %w", err)
				}
				return <-runErr
			}
		},
	}
	cmd.Flags().StringVar(&configFile, "config", "", "YAML configuration `FILE` (unknown keys are rejected)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "judge and journal, but write nothing to any cgroup")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:9477", "address for /metrics and /api/state, or \"off\" (also --web.listen-address)")
	cmd.Flags().StringVar(&webConfig, "web.config.file", "", "exporter-toolkit web configuration `FILE` for the listener: TLS and basic auth (https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md)")
	// Prometheus exporters call the listen address --web.listen-address.
	cmd.Flags().SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "web.listen-address" {
			name = "listen"
		}
		return pflag.NormalizedName(name)
	})
	cmd.Flags().StringVar(&stateDir, "state-dir", "/var/lib/crosstalk", "directory for the restore state file and the journal")
	cmd.Flags().DurationVar(&interval, "interval", 500*time.Millisecond, "sampling interval")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a Go CPU profile of the agent to `FILE` (for overhead investigations)")
	cmd.Flags().MarkHidden("cpuprofile")
	return cmd
}
