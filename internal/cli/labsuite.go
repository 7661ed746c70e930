package cli

import (
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/crosstalk-project/crosstalk/internal/lab"
	"github.com/crosstalk-project/crosstalk/internal/resultdir"
)

func newLabSuiteCmd(g *globals) *cobra.Command {
	var (
		plan       lab.SuitePlan
		polluters  []string
		reps       int
		policies   []string
		configFile string
		asJSON     bool
		list       bool
		outDir     string
		interval   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "suite [SCENARIO|FILE ...]",
		Short: "Score the agent's attribution like a classifier over many generated scenarios",
		Long: `Draws --runs scenarios for this host's CPUs (run i from seed --seed+i alone, so any
run can be replayed by itself): a victim (pointer chases of several sizes, the
latency server, redis or stress-ng where installed), a polluter (split locks,
memory bandwidth, cache thrashing, built in or stress-ng) that runs the whole
phase, starts late, stops early, pauses and comes back, or is already running
when the agent starts; 0-3 innocent bystanders; and about one run in five a
control run with no polluter at all. --polluters draws the polluters from
the kinds named instead, among them splitlock-paced (the built-in split-lock
loop paced to 150k, 200k or 300k locks a second: bursts shorter than one of
the probe's readings), which is drawn only when named. Built-in
scenarios (--builtins) and scenario files can be added; scenarios named on
the command line (built-in names or files) run alone unless --runs is given
too. Each run has the victim's solo phase and one co-located phase per
policy; a polluter run under the none policy has one more without the
polluter (its harm) and, where the polluter shares the victim's CPUs, one
with a cache-friendly cpu load in its place (its harm beyond the CPU time it
takes there). Harmful runs (at least 1.2x) are scored apart.

Each run is scored from the crosstalk policy's actions: the polluter convicted
or not, the time to its first cap and to its conviction, its release after it
stops, the innocents capped for proofs and convicted, and the victim's slowdown
under each policy. The totals: recall, false-conviction rate, innocent proof
cap-seconds, reaction and release times (median and p95) and the victim's
slowdown, overall and by run class; the victims restored (where no policy
slowed the victim 1.5x or more, how often it ran within 1.05x after the first
action, of its solo level and of its level without the polluter); then the
polluter runs by polluter kind, timing and placement.

Needs root (it creates cgroups), except --list.`,
		Example: `  crosstalk lab suite --seed 1 --runs 30 --list
  crosstalk lab suite --seed 1 --runs 1 --duration 2s
  crosstalk lab suite --seed 1 --runs 20 --polluters splitlock,splitlock-paced --list
  crosstalk lab suite buslock examples/lab/lockbus-redis.yaml --repetitions 3 --list`,
		PreRunE: positiveFlags("runs=0", "repetitions", "duration", "interval"),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := g.openHost()
			if err != nil {
				return err
			}
			plan.CPUs, err = lab.AllowedCPUs(h)
			h.Close()
			if err != nil {
				return err
			}
			plan.Programs = lab.FindPrograms(exec.LookPath)
			plan.Programs.Polluters = polluters
			plan.Files = args
			if len(args) > 0 && !cmd.Flags().Changed("runs") {
				// Named scenarios are what the operator asked to score:
				// ten generated runs more would take minutes unasked.
				plan.Runs = 0
			}
			cases, err := lab.SuiteCases(plan)
			if err != nil {
				return err
			}
			if list {
				return writeSuiteList(g, cases)
			}
			cfg, err := agentConfig(configFile)
			if err != nil {
				return err
			}
			opt, done, err := g.labOptions(policies, interval)
			if err != nil {
				return err
			}
			defer done()
			// The suite scores the agent as an operator runs it: its
			// defaults (or --config), not the lab's quicker sampling.
			opt.Registry["crosstalk"] = lab.AgentPolicy(cfg)
			opt.Stamp = g.labStamp(cmd, args)
			if outDir != "" {
				opt.JournalDir = filepath.Join(outDir, journalsDir)
			}
			bar := g.progress(lab.SuitePlanned(cases, reps, opt), "lab suite", asJSON)
			opt.Progress = bar.add
			ctx, cancel := labContext(cmd.Context())
			defer cancel()
			progress := func(sc lab.RunScore) {
				bar.clear()
				lab.WriteSuiteRun(g.errOut, sc)
			}
			res, err := lab.RunSuite(ctx, cases, reps, opt, progress)
			bar.finish()
			if err != nil {
				return labError(err)
			}
			if outDir != "" {
				if err := g.writeOut(outDir, suiteFiles(res)...); err != nil {
					return err
				}
				kept := 0
				for _, r := range res.Runs {
					if r.Journal != "" {
						kept++
					}
				}
				g.saidJournals(kept, outDir)
			}
			if asJSON {
				return writeJSON(g.out, res)
			}
			return lab.WriteSuiteText(g.out, res)
		},
	}
	f := cmd.Flags()
	f.Int64Var(&plan.Seed, "seed", 1, "seed of the first generated run (run i uses seed+i)")
	f.IntVar(&plan.Runs, "runs", 10, "generated runs (none by default where scenarios are named)")
	f.StringSliceVar(&polluters, "polluters", nil, "polluter kinds to draw from, comma separated: "+strings.Join(lab.PolluterKinds(), ", ")+" (default: all but "+lab.PolluterSplitLockPaced+", stress-ng's where installed; another list draws other runs from the same seeds)")
	f.BoolVar(&plan.Builtins, "builtins", false, "also run every built-in scenario")
	f.DurationVar(&plan.Phase, "duration", 0, "override every scenario's phase length (offsets scale with it)")
	f.IntVar(&reps, "repetitions", 1, "runs of each scenario, each scored")
	f.StringSliceVar(&policies, "policy", []string{"none", "crosstalk"}, "policies to run, comma separated; crosstalk is the one scored")
	f.StringVar(&configFile, "config", "", "the agent's configuration for the crosstalk policy (default: crosstalk run's defaults)")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	f.BoolVar(&list, "list", false, "print the runs the suite would make, without running them")
	f.StringVar(&outDir, "out", "", "also write suite.json and an HTML page to `DIR`, and keep the agent's journal of each run in DIR/journals/NAME-REPETITION")
	f.DurationVar(&interval, "interval", 250*time.Millisecond, "progress interval of built-in loads (timeline resolution)")
	return cmd
}

func writeSuiteList(g *globals, cases []lab.SuiteCase) error {
	for _, c := range cases {
		what := "scenario: " + strings.TrimSpace(c.Scenario.Description)
		if c.Gen != nil {
			what = c.Gen.Describe()
		} else if c.Scenario.Description == "" {
			what = fmt.Sprintf("scenario, %.1fs phase", c.Scenario.Phase.Seconds())
		}
		if _, err := fmt.Fprintf(g.out, "%-14s %s\n", c.Scenario.Name, what); err != nil {
			return err
		}
	}
	return nil
}

// suiteFiles is lab suite's result directory: the result, which 'lab
// report' reads back, and its HTML page.
func suiteFiles(res *lab.SuiteResult) []resultdir.File {
	return []resultdir.File{
		resultdir.JSON("suite.json", res),
		resultdir.Rendered("suite.html", func(w io.Writer) error { return lab.WriteSuiteReport(w, res) }),
	}
}
