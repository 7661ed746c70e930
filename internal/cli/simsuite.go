package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/resultdir"
	"github.com/crosstalk-project/crosstalk/internal/sim"
	"github.com/crosstalk-project/crosstalk/internal/yamlfile"
)

func newSimSuiteCmd(g *globals) *cobra.Command {
	var (
		seed    int64
		runs    int
		asJSON  bool
		verbose bool
		list    bool
		outDir  string
		config  string
	)
	cmd := &cobra.Command{
		Use:   "suite",
		Short: "Score the agent's attribution like a classifier over many generated simulated scenarios",
		Long: `Draws --runs simulated scenarios (run i from seed --seed+i alone, so any run can
be replayed by itself): a small one-socket machine of 4-16 cores, a VM without
a PMU in most runs and with one in about a quarter; a victim (cache-sensitive
or memory-bound); a polluter (bus locks, an LLC thrasher or a memory-bandwidth
streamer, at a declared rate from weak to strong) that runs the whole run,
starts late, stops early, pauses and comes back, or storms in bursts of a
5-200 ms period at a 10-60% duty; placed alone, beside a bystander or on the
victim's CPUs; 0-4 innocent bystanders (steady or bursty CPU, phases, a small
cache user, a moderate LLC user); a noise level of 1-8%; and about one run in
five a control run with no polluter.

Each run is simulated under none and crosstalk (and none without the
polluter, for its harm) and scored from the crosstalk policy's actions as
'crosstalk lab suite' scores them. The totals: recall and the false-conviction
rate with their 95% Wilson intervals, innocent proof cap-seconds, reaction and
release (median and p95), overall, by run class, by polluter kind, timing,
placement and PMU, and the victim's slowdown under each policy.

--config FILE sets the agent's configuration as 'crosstalk run --config' takes
it, over the simulator's own (each run's state directory, no listener, a proof
slot of two model steps read once a step): a key the file sets wins, so an
operator can weigh a threshold or a proof setting against the same scenarios.

Needs no root and touches nothing outside a temporary directory.`,
		Example: `  crosstalk sim suite --seed 1 --runs 20 --list
  crosstalk sim suite --seed 1 --runs 2 --verbose
  crosstalk sim suite --seed 1 --runs 200 --json --out /tmp/simsuite`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cases, err := sim.SuiteCases(seed, runs)
			if err != nil {
				return err
			}
			if list {
				for _, c := range cases {
					if _, err := fmt.Fprintf(g.out, "%-9s %s\n", c.Scenario.Name, c.Describe()); err != nil {
						return err
					}
				}
				return nil
			}
			overlay, err := agentOverlay(config)
			if err != nil {
				return err
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			bar := g.progress(sim.SuitePlanned(cases), "sim suite", asJSON)
			ctx, cancel := labContext(cmd.Context())
			defer cancel()
			// As in 'sim run': the agent's heap is small and steady.
			debug.SetGCPercent(200)
			res, err := sim.RunSuite(ctx, cases, sim.SuiteOptions{Log: log, Progress: bar.add, Agent: overlay})
			bar.finish()
			if err != nil {
				if errors.Is(err, context.Canceled) {
					return exitError{code: 130, err: errors.New("interrupted")}
				}
				return err
			}
			if outDir != "" {
				if err := g.writeOut(outDir, resultdir.JSON("suite.json", res)); err != nil {
					return err
				}
			}
			if asJSON {
				return writeJSON(g.out, res)
			}
			return sim.WriteSuiteText(g.out, res, verbose)
		},
	}
	f := cmd.Flags()
	f.Int64Var(&seed, "seed", 1, "seed of the first run (run i uses seed+i)")
	f.IntVar(&runs, "runs", 20, "generated runs")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	f.BoolVar(&verbose, "verbose", false, "print a line a run before the totals")
	f.BoolVar(&list, "list", false, "print the runs the suite would make, without running them")
	f.StringVar(&outDir, "out", "", "also write suite.json to `DIR`")
	f.StringVar(&config, "config", "", "the agent's configuration `FILE`, over the simulator's (default: its own)")
	return cmd
}

// agentOverlay reads an agent configuration file (checked as 'crosstalk
// run' checks it) and returns what sets its keys over the simulator's
// configuration of each run: only the keys the file names, so the
// simulator's own settings stand where it is silent. The simulated run's
// own state directory, listener and writes are kept whatever the file says.
// No file: nil.
func agentOverlay(file string) (func(*agent.Config), error) {
	if file == "" {
		return nil, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	if _, err := agent.ParseConfig(data, file); err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	return func(cfg *agent.Config) {
		stateDir, listen := cfg.StateDir, cfg.Listen
		// Checked above: the same bytes decode onto any configuration.
		yamlfile.DecodeStrict(data, file, "", cfg)
		cfg.StateDir, cfg.Listen, cfg.DryRun = stateDir, listen, false
	}, nil
}
