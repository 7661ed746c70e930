package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/lab"
)

func newLabVisibilityCmd(g *globals) *cobra.Command {
	var (
		loads       []string
		commands    []string
		duration    time.Duration
		every       time.Duration
		lcpus       string
		pcpus       string
		configFile  string
		asJSON      bool
		outDir      string
		probeCPUSet cpuset.Set
	)
	cmd := &cobra.Command{
		Use:   "visibility",
		Short: "What the agent's probe reads beside each built-in load: which pollution it can see here",
		Long: `Reads the agent's canary probe (built as 'crosstalk run' builds it, from its
defaults or --config) on the probe CPUs with nothing running, then while each
built-in load runs alone on the load CPUs, and prints for each load and probe
kind (dram, llc, lock) the readings' median and 90th percentile over the quiet
level, how many readings the agent would count as contended, and whether it
sees the load: often, sometimes or no. A last quiet reading after the loads
shows how far the host itself moved the probe meanwhile.

The quiet level is read with whatever else runs on the host: run it where
the tenants are idle or stopped, and read the last row, quiet again after the
loads, for how far the host itself moved the probe meanwhile.

Without a PMU the probe is all the agent sees: it proves only what the probe
reads, on a CPU the suspect does not run on. A polluter not seen here can be
caught on this host only by a PMU's counters or resctrl (crosstalk doctor says
which this host has). Run it before relying on the agent without a PMU; the
innocent loads (cpu, chase) show what busy tenants alone move.

--command runs any other program the same way (a shell command line, pinned
to the load CPUs in its own cgroup and stopped at the end of its phase), so an
operator can try the programs their tenants run.

Split locks stall the whole physical host: the splitlock load, and any
command (it may split locks), run at most 15 s (--duration). With all 7 loads and 3 s phases it takes about 30 s.

Needs root (it creates cgroups).`,
		Example: `  crosstalk lab visibility
  crosstalk lab visibility --loads splitlock,stream,cachethrash,cpu --duration 5s --json
  crosstalk lab visibility --command 'stress-ng --stream 1 -q' --command 'stress-ng --cache 1 -q'`,
		Args:    cobra.NoArgs,
		PreRunE: positiveFlags("duration", "every"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			lc, err := cpuset.Parse(lcpus)
			if err != nil {
				return fmt.Errorf("--load-cpus: %w", err)
			}
			if pcpus != "" {
				if probeCPUSet, err = cpuset.Parse(pcpus); err != nil {
					return fmt.Errorf("--probe-cpus: %w", err)
				}
			}
			cfg, err := agentConfig(configFile)
			if err != nil {
				return err
			}
			opt, done, err := g.labOptions([]string{"none"}, 0)
			if err != nil {
				return err
			}
			defer done()
			vo := lab.VisibilityOptions{Loads: loads, Commands: commands, Phase: duration, Every: every, LoadCPUs: lc, ProbeCPUs: probeCPUSet, Config: cfg}
			opt.Stamp = g.labStamp(cmd, nil)
			bar := g.progress(vo.Planned(), "lab visibility", asJSON)
			opt.Progress = bar.add
			ctx, cancel := labContext(cmd.Context())
			defer cancel()
			v, err := lab.RunVisibility(ctx, vo, opt)
			bar.finish()
			if err != nil {
				return labError(err)
			}
			return g.writeLabResult(outDir, asJSON, "visibility.json", v, &lab.Saved{Kind: lab.KindVisibility, Visibility: v})
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&loads, "loads", nil, "built-in loads to run, one at a time (default: all, or none with --command)")
	f.StringArrayVar(&commands, "command", nil, "another program to run the same way: a shell command line, stopped at the end of its phase (repeatable)")
	f.DurationVar(&duration, "duration", 3*time.Second, "how long each load runs, and the quiet reading before them (at most 15s with splitlock)")
	f.DurationVar(&every, "every", 0, "time between two readings of the probe (default: a quarter of the agent's interval, its watch's pace)")
	f.StringVar(&lcpus, "load-cpus", "0", "CPUs the loads run on")
	f.StringVar(&pcpus, "probe-cpus", "", "CPUs the probe reads on (default: every other allowed CPU)")
	f.StringVar(&configFile, "config", "", "the agent's configuration: its probe settings and judge thresholds (default: crosstalk run's defaults)")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	f.StringVar(&outDir, "out", "", "also write visibility.json and visibility.html to `DIR`")
	return cmd
}
