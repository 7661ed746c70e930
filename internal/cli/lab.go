package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/humanize"
	"github.com/crosstalk-project/crosstalk/internal/lab"
	"github.com/crosstalk-project/crosstalk/internal/resultdir"
)

func newLabCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Measure interference on this host: tenants solo, then co-located under each policy",
		Long: `The lab runs interference experiments on this host, the way the Alita and Kyoto
papers did: every tenant alone, then all tenants together under each policy,
and each tenant's slowdown against its solo run (> 1 = worse).

Tenants run in cgroups the lab creates under /crosstalk-lab (v1 cpu+cpuset
and/or v2, whichever the host has), pinned to the CPUs the scenario gives. On
Ctrl-C, a failing tenant, or any error, every tenant is killed and every
cgroup removed; if the lab itself is killed, its tenants die with it and the
next lab command (or 'crosstalk lab cleanup') removes the cgroups.

Needs root (it creates cgroups).`,
	}
	cmd.AddCommand(newLabRunCmd(g), newLabListCmd(g), newLabMatrixCmd(g), newLabOverheadCmd(g), newLabSuiteCmd(g), newLabVisibilityCmd(g), newLabReportCmd(g), newLabCleanupCmd(g))
	return cmd
}

// labContext cancels on SIGINT/SIGTERM so the lab can clean up.
func labContext(parent context.Context) (context.Context, context.CancelFunc) {
	if parent == nil {
		parent = context.Background()
	}
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}

// labError is a lab command's error; an interrupted one exits as a shell's
// Ctrl-C does and says the host was left clean.
func labError(err error) error {
	if errors.Is(err, context.Canceled) {
		return exitError{code: 130, err: errors.New("interrupted; tenants stopped and cgroups removed")}
	}
	return err
}

// saidJournals says on stderr how many agent journals a lab command kept
// under outDir, and how to read them.
func (g *globals) saidJournals(n int, outDir string) {
	if n > 0 {
		fmt.Fprintf(g.errOut, "kept the agent's journal of %d phase(s) in %s: crosstalk explain --journal FILE tells why it did what it did\n",
			n, filepath.Join(outDir, journalsDir))
	}
}

// journalsDir is where, under --out, the lab keeps the agent's journals:
// 'crosstalk explain --journal' reads them.
const journalsDir = "journals"

// writeOut writes a result directory (--out) and says on stderr what it wrote.
func (g *globals) writeOut(dir string, files ...resultdir.File) error {
	paths, err := resultdir.Write(dir, files...)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.errOut, "wrote %s\n", strings.Join(paths, " and "))
	return nil
}

func (g *globals) labOptions(policies []string, interval time.Duration) (lab.Options, func(), error) {
	log, err := g.logger()
	if err != nil {
		return lab.Options{}, nil, err
	}
	h, err := g.openHost()
	if err != nil {
		return lab.Options{}, nil, err
	}
	self, err := os.Executable()
	if err != nil {
		h.Close()
		return lab.Options{}, nil, fmt.Errorf("cannot find the crosstalk binary to run loads: %w", err)
	}
	return lab.Options{Host: h, Self: self, Policies: policies, Registry: g.policies(), Interval: interval, Log: log}, func() { h.Close() }, nil
}

// policies is the registry of lab policies this binary offers: the
// baselines and the real agent, sampling every 250 ms in the lab.
func (g *globals) policies() lab.Policies {
	p := lab.DefaultPolicies()
	cfg := agent.Defaults()
	cfg.Interval = 250 * time.Millisecond
	p["crosstalk"] = lab.AgentPolicy(cfg)
	return p
}

func newLabRunCmd(g *globals) *cobra.Command {
	var (
		policies []string
		duration time.Duration
		reps     int
		asJSON   bool
		outDir   string
		interval time.Duration
		config   string
	)
	cmd := &cobra.Command{
		Use:   "run SCENARIO|FILE",
		Short: "Run a scenario under each policy and report every tenant's slowdown",
		Long: `Run a built-in scenario (see 'crosstalk lab list') or a YAML file.

A scenario file:

  name: redis-vs-splitlock
  phase: 5s              # length of each measured phase
  repetitions: 3         # medians are reported
  tenants:
    - name: redis
      role: victim                    # exactly one victim
      command: ["redis-benchmark", "-q", "-t", "get", "-n", "200000"]
      metric: {regex: 'GET: ([0-9.]+) requests per second', direction: higher, unit: "req/s"}
      cpus: "1"
    - name: noisy
      role: polluter                  # polluter or bystander
      load: splitlock                 # a built-in load ('crosstalk load --help')
      args: ["--rate", "500000"]
      cpus: "0"
      start: 1s                       # offsets into the co-located phase
      stop: 4s
    - name: lockbus
      role: polluter
      command: ["stress-ng", "--lockbus", "1", "--verbose"]
      onset: ': started \[\d+\]'       # the line it prints as its work begins: its
      cpus: "0"                       # reaction times count from there, not its exec

Unknown fields are rejected; errors name the line.`,
		Example: `  crosstalk lab run buslock
  crosstalk lab run membw --policy none,static --json
  crosstalk lab run my-scenario.yaml --duration 10s --out /tmp/report`,
		Args:    cobra.ExactArgs(1),
		PreRunE: positiveFlags("duration", "repetitions", "interval"),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := lab.Load(args[0])
			if err != nil {
				return err
			}
			if duration > 0 {
				if s, err = s.WithPhase(duration); err != nil {
					return fmt.Errorf("--duration: %w", err)
				}
			}
			if reps > 0 {
				s.Repetitions = reps
			}
			var cfg *agent.Config
			if config != "" {
				c, err := agentConfig(config)
				if err != nil {
					return err
				}
				cfg = &c
			}
			opt, done, err := g.labOptions(policies, interval)
			if err != nil {
				return err
			}
			defer done()
			if cfg != nil {
				// An operator's configuration, as the agent would run it:
				// its interval too, not the lab's quicker sampling.
				opt.Registry["crosstalk"] = lab.AgentPolicy(*cfg)
			}
			opt.Stamp = g.labStamp(cmd, args)
			if outDir != "" {
				opt.JournalDir = filepath.Join(outDir, journalsDir)
			}
			bar := g.progress(lab.Planned(s, opt), "lab "+s.Name, asJSON)
			opt.Progress = bar.add
			ctx, cancel := labContext(cmd.Context())
			defer cancel()
			res, err := lab.Run(ctx, s, opt)
			bar.finish()
			if err != nil {
				return labError(err)
			}
			if outDir != "" {
				if err := g.writeOut(outDir, labRunFiles(res)...); err != nil {
					return err
				}
				kept := 0
				for _, pr := range res.Results {
					if pr.Journal != "" {
						kept++
					}
				}
				g.saidJournals(kept, outDir)
			}
			if asJSON {
				return writeJSON(g.out, res)
			}
			return lab.WriteText(g.out, res)
		},
	}
	cmd.Flags().StringSliceVar(&policies, "policy", []string{"none", "static", "crosstalk"}, "policies to compare, comma separated: "+strings.Join(g.policies().Names(), ", "))
	cmd.Flags().DurationVar(&duration, "duration", 0, "override the scenario's phase length (start/stop offsets scale with it)")
	cmd.Flags().IntVar(&reps, "repetitions", 0, "override the scenario's repetitions")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.Flags().StringVar(&outDir, "out", "", "also write result.json and an HTML report to `DIR`, and keep the agent's journal of each crosstalk phase in DIR/journals")
	cmd.Flags().DurationVar(&interval, "interval", 250*time.Millisecond, "progress interval of built-in loads (timeline resolution)")
	cmd.Flags().StringVar(&config, "config", "", "the agent's configuration `FILE` for the crosstalk policy (default: crosstalk run's defaults, sampling every 250 ms)")
	return cmd
}

// writeLabResult ends a lab command that measured v: with outDir, v as
// jsonName (which 'lab report' reads back) and its HTML report there; then
// v as JSON with asJSON, else its text report.
func (g *globals) writeLabResult(outDir string, asJSON bool, jsonName string, v any, s *lab.Saved) error {
	if outDir != "" {
		if err := g.writeOut(outDir, resultdir.JSON(jsonName, v), resultdir.Rendered(s.ReportName(), s.WriteHTML)); err != nil {
			return err
		}
	}
	if asJSON {
		return writeJSON(g.out, v)
	}
	return s.WriteText(g.out)
}

// labRunFiles is lab run's result directory: the result, which 'lab
// report' reads back, and its HTML report.
func labRunFiles(res *lab.Result) []resultdir.File {
	return []resultdir.File{
		resultdir.JSON("result.json", res),
		resultdir.Rendered("report.html", func(w io.Writer) error { return lab.WriteReport(w, res) }),
	}
}

func newLabListCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the built-in scenarios",
		Long: `list prints the built-in scenarios: each one's name, the length of a measured
phase, its tenants (role=what@cpus) and what it shows. --json prints the same
fields as an array of objects, with each tenant as an object.`,
		Example: `  crosstalk lab list
  crosstalk lab list --json | jq '.[].name'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			builtins, err := lab.LoadBuiltins()
			if err != nil {
				return err
			}
			var rows []labListEntry
			for _, b := range builtins {
				s := b.Scenario
				e := labListEntry{Name: b.Name, Phase: s.Phase.String(), Description: oneLine(s.Description)}
				for _, t := range s.Tenants {
					e.Tenants = append(e.Tenants, labListTenant{Name: t.Name, Role: t.Role, Run: t.What(), CPUs: t.CPUs})
				}
				rows = append(rows, e)
			}
			return writeList(g.out, asJSON, rows, "NAME\tPHASE\tTENANTS\tDESCRIPTION", func(e labListEntry) string {
				var ts []string
				for _, t := range e.Tenants {
					ts = append(ts, fmt.Sprintf("%s=%s@%s", t.Role, t.Run, t.CPUs))
				}
				return fmt.Sprintf("%s\t%s\t%s\t%s", e.Name, e.Phase, strings.Join(ts, "  "), e.Description)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the scenarios as a JSON array")
	return cmd
}

// labListEntry is one row of 'lab list', and one object of its --json.
type labListEntry struct {
	Name        string          `json:"name"`
	Phase       string          `json:"phase"`
	Tenants     []labListTenant `json:"tenants"`
	Description string          `json:"description"`
}

type labListTenant struct {
	Name string `json:"name"`
	Role string `json:"role"`
	// Run is what the tenant runs: "load KIND" or its command line.
	Run  string `json:"run"`
	CPUs string `json:"cpus"`
}

func newLabMatrixCmd(g *globals) *cobra.Command {
	var (
		victims, polluters []string
		duration           time.Duration
		vcpus, pcpus       string
		asJSON             bool
		outDir             string
	)
	cmd := &cobra.Command{
		Use:   "matrix",
		Short: "Every built-in load as victim against every load as polluter: sensitivity and aggressiveness",
		Long: `Runs each victim load solo, then every victim × polluter pair co-located (no
policy), and prints the victim-slowdown matrix with two rankings, as in Kyoto's
evaluation: aggressiveness (mean slowdown a polluter inflicts) and sensitivity
(mean slowdown a victim suffers). With all 7 loads and 3 s phases it takes
about 3 minutes.`,
		Args:    cobra.NoArgs,
		PreRunE: positiveFlags("duration"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			vc, err := cpuset.Parse(vcpus)
			if err != nil {
				return fmt.Errorf("--victim-cpus: %w", err)
			}
			pc, err := cpuset.Parse(pcpus)
			if err != nil {
				return fmt.Errorf("--polluter-cpus: %w", err)
			}
			opt, done, err := g.labOptions([]string{"none"}, 0)
			if err != nil {
				return err
			}
			defer done()
			mo := lab.MatrixOptions{Victims: victims, Polluters: polluters, Phase: duration, VictimCPUs: vc, PolluterCPUs: pc}
			opt.Stamp = g.labStamp(cmd, nil)
			bar := g.progress(mo.Planned(), "lab matrix", asJSON)
			opt.Progress = bar.add
			ctx, cancel := labContext(cmd.Context())
			defer cancel()
			m, err := lab.RunMatrix(ctx, mo, opt)
			bar.finish()
			if err != nil {
				return labError(err)
			}
			return g.writeLabResult(outDir, asJSON, "matrix.json", m, &lab.Saved{Kind: lab.KindMatrix, Matrix: m})
		},
	}
	cmd.Flags().StringSliceVar(&victims, "victims", nil, "victim loads (default: all built-in loads)")
	cmd.Flags().StringSliceVar(&polluters, "polluters", nil, "polluter loads (default: all built-in loads)")
	cmd.Flags().DurationVar(&duration, "duration", 3*time.Second, "phase length per pair (at most 15s: split locks)")
	cmd.Flags().StringVar(&vcpus, "victim-cpus", "1", "CPUs for the victim")
	cmd.Flags().StringVar(&pcpus, "polluter-cpus", "0", "CPUs for the polluter")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the matrix as JSON")
	cmd.Flags().StringVar(&outDir, "out", "", "also write matrix.json and matrix.html to `DIR`")
	return cmd
}

func newLabOverheadCmd(g *globals) *cobra.Command {
	var oo lab.OverheadOptions
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "overhead",
		Short: "Measure what the agent costs: CPU and memory of `crosstalk run` watching idle tenants",
		Long: `Creates --tenants idle tenant cgroups, runs 'crosstalk run' on them as a separate
process at --interval, and after --warmup measures that process's CPU time
(/proc/PID/stat) and memory (VmRSS, VmHWM) over --duration. The cgroups are
removed afterwards.

Over the same time the benchmark itself wakes at the pace of the agent's
look between intervals (a quarter of --interval) and reads /proc/stat, and
reports what that cost it: the host's price of waking that often, the floor
under the agent's own share. On a VM, where each switch of a thread costs
tens of microseconds, that floor can be a good part of the agent's share;
the switches a second of both say how much.`,
		Args:    cobra.NoArgs,
		PreRunE: positiveFlags("tenants", "interval", "warmup", "duration"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			opt, done, err := g.labOptions(nil, 0)
			if err != nil {
				return err
			}
			defer done()
			ctx, cancel := labContext(cmd.Context())
			defer cancel()
			o, err := lab.RunOverhead(ctx, oo, opt)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.out, o)
			}
			// The agent's CPU share is a small fraction of a percent: it
			// keeps three decimals where humanize.Percent would round to one.
			_, err = fmt.Fprintf(g.out, "agent watching %d idle tenants (it saw %d) at a %s interval, measured over %s:\n  CPU    %.3f%% of one core (%s of CPU), %.0f switches a second\n  memory %s RSS (peak %s)\nreference, a process that only wakes every %s and reads /proc/stat, over the same time:\n  CPU    %.3f%% of one core, %.0f switches a second\n",
				o.Tenants, o.Seen, humanize.Duration(o.Interval), humanize.Duration(o.Seconds), o.CorePercent, humanize.Duration(o.CPUSeconds), o.Switches,
				humanize.Bytes(o.RSSMiB*(1<<20)), humanize.Bytes(o.PeakRSSMiB*(1<<20)),
				humanize.Duration(o.Reference.Every), o.Reference.CorePercent, o.Reference.Switches)
			return err
		},
	}
	cmd.Flags().IntVar(&oo.Tenants, "tenants", 100, "idle tenant cgroups to create")
	cmd.Flags().DurationVar(&oo.Interval, "interval", time.Second, "the agent's sampling interval")
	cmd.Flags().DurationVar(&oo.Warmup, "warmup", 5*time.Second, "time before measuring")
	cmd.Flags().DurationVar(&oo.Duration, "duration", 30*time.Second, "measured time")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&oo.CPUProfile, "cpuprofile", "", "have the agent write a Go CPU profile of its run to `FILE` (for overhead investigations)")
	cmd.Flags().MarkHidden("cpuprofile")
	return cmd
}

func newLabCleanupCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cleanup",
		Short: "Remove cgroups left by a lab run that was killed",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := g.openHost()
			if err != nil {
				return err
			}
			defer h.Close()
			l, err := cgroup.Detect(h)
			if err != nil {
				return err
			}
			n, err := lab.Sweep(h, l)
			fmt.Fprintf(g.out, "removed %d stale lab run(s)\n", n)
			return err
		},
	}
}

// newTenantExecCmd is the hidden shim every lab tenant starts through.
func newTenantExecCmd() *cobra.Command {
	return &cobra.Command{
		Use:                lab.ExecShim + " -- CMD [ARG…]",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && args[0] == "--" {
				args = args[1:]
			}
			return lab.TenantExec(args)
		},
	}
}
