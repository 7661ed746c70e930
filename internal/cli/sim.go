package cli

import (
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/crosstalk-project/crosstalk/internal/sim"
)

func newSimCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run the production agent on a simulated host: policies compared on modelled contention",
		Long: `The simulator builds a host from a YAML scenario — sockets, CPUs, L3 size and
ways, memory bandwidth, power budget, PMU model, which of resctrl (CAT, MBA,
MBM), RAPL, cpufreq and MSRs exist — and its tenants (VMs and containers with
behaviours that may change over time: bus locks, working set, LLC references,
memory bandwidth, power). A contention model turns behaviours and the
throttles in force into each tenant's speed and counters. The simulated host
is a directory tree the real agent reads and writes (cgroupfs, resctrl,
sysfs, /dev/cpu/N/msr) with the kernel's file formats; perf counters come
through the agent's PerfOpener and the canary probe reads the model. The
agent runs on virtual time: a minute of simulation takes seconds.

Each policy runs the same scenario from the start: none (co-located, nothing
done), static (Alita's baseline: every tenant capped to its share of the CPUs
by CPU count for the whole run) and crosstalk (the agent). Slowdowns are
against the same tenant alone on the same machine, from the model.

Needs no root and touches nothing outside a temporary directory.`,
	}
	cmd.AddCommand(newSimRunCmd(g), newSimListCmd(g), newSimSuiteCmd(g))
	return cmd
}

func newSimRunCmd(g *globals) *cobra.Command {
	var (
		policies []string
		asJSON   bool
		duration time.Duration
		seed     uint64
		keep     string
	)
	cmd := &cobra.Command{
		Use:   "run SCENARIO|FILE",
		Short: "Simulate a built-in scenario or a scenario file under each policy",
		Long: `Simulate a scenario (a built-in name from 'crosstalk sim list', or a YAML file)
under each policy and print every tenant's slowdown, throttled time and
whether the agent named it a polluter, and the agent's CPU per interval.

Scenario YAML (unknown keys are errors, with their line):

  name: my-host
  duration: 60s            # virtual time
  seed: 1                  # runs are reproducible for a seed
  noise: 0.02              # relative noise of probe readings and counters
  machine:
    cpu: skylakex          # cpuinfo identity and PMU encodings (skylakex, icelakex, sapphirerapids, zen3, …)
    sockets: 2
    cores_per_socket: 24
    threads_per_core: 2
    max_mhz: 3100
    min_mhz: 1000
    l3_size: 33MiB         # per socket
    l3_ways: 11
    memory_bandwidth: 100GB/s   # per socket
    tdp: 165W              # per socket, enforced by lowering the socket's frequency
    idle_power: 40W
    features: {pmu: true, cat: true, mba: true, mbm: true, rapl: true, cpufreq: true, msr: true, hwmon: true,
               kernel_reports: true}   # kernel_reports: the kernel names split-lock/bus-lock threads in /dev/kmsg, where the CPU detects them
  agent:                   # any key of 'crosstalk run --config'
    interval: 500ms
  tenants:
    - name: victim
      kind: vm             # vm (libvirt scope, vcpuN cgroups) or container (docker scope)
      role: victim         # victim, polluter or bystander: for the report only
      cpus: "24-27"        # pinned; or cpus: auto with vcpus: N
      start: 0s            # stop: 50s makes it vanish
      count: 1             # > 1: that many alike, names NAME-0001…
      phases:              # a field left out keeps the previous phase's value
        - from: 0s
          cpu: 1.0         # busy fraction of each vCPU
          memory_bound: 0.5     # fraction of its solo time waiting on memory
          working_set: 64MiB
          llc_refs: 8e7    # per second, alone (or memory_bandwidth: 10GB/s)
          bus_locks: 0     # per second, alone
          power: 24W       # all vCPUs busy at max_mhz

The model, its constants and their sources: see docs/simulator.md and
'go doc ./internal/sim'.`,
		Args:    cobra.ExactArgs(1),
		PreRunE: positiveFlags("duration"),
		RunE: func(cmd *cobra.Command, args []string) error {
			sc, err := sim.Load(args[0])
			if err != nil {
				return err
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			o := sim.Options{Policies: policies, Duration: duration, Seed: seed, Log: log}
			if keep != "" {
				o.TempDir, o.KeepTree = keep, true
			}
			bar := g.progress(sim.Planned(sc, o), "sim "+sc.Name, asJSON)
			o.Progress = bar.add
			ctx, cancel := labContext(cmd.Context())
			defer cancel()
			// The agent runs as `crosstalk run` runs it (its CPU per interval is
			// reported): its heap is small and steady, so it collects less often.
			debug.SetGCPercent(200)
			res, err := sim.Run(ctx, sc, o)
			bar.finish()
			if err != nil {
				return err
			}
			for _, pr := range res.Results {
				if pr.Tree != "" {
					fmt.Fprintf(g.errOut, "kept the host tree of policy %s in %s\n", pr.Policy, pr.Tree)
				}
			}
			if asJSON {
				return writeJSON(g.out, res)
			}
			return sim.WriteText(g.out, res)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&policies, "policy", sim.PolicyNames, "policies to compare: "+strings.Join(sim.PolicyNames, ", "))
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	f.DurationVar(&duration, "duration", 0, "simulated time (default: the scenario's)")
	f.Uint64Var(&seed, "seed", 0, "random seed (default: the scenario's)")
	f.StringVar(&keep, "keep-tree", "", "make the simulated host trees in this directory and keep them (for inspection or 'crosstalk doctor --root')")
	return cmd
}

func newSimListCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the built-in scenarios",
		Long: `list prints the built-in scenarios: each one's name, its number of tenants,
the simulated machine and the first sentence of its description. --json prints
the same fields as an array of objects, with the whole description.`,
		Example: `  crosstalk sim list
  crosstalk sim list --json | jq '.[].name'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			builtins, err := sim.LoadBuiltins()
			if err != nil {
				return err
			}
			var rows []simListEntry
			for _, b := range builtins {
				sc := b.Scenario
				rows = append(rows, simListEntry{Name: b.Name, Tenants: len(sc.Resolved()), Machine: sc.Machine.CPU, Description: oneLine(sc.Description)})
			}
			return writeList(g.out, asJSON, rows, "NAME\tTENANTS\tMACHINE\tDESCRIPTION", func(e simListEntry) string {
				desc := e.Description
				if i := strings.Index(desc, ". "); i > 0 {
					desc = desc[:i+1]
				}
				return fmt.Sprintf("%s\t%d\t%s\t%s", e.Name, e.Tenants, e.Machine, desc)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the scenarios as a JSON array")
	return cmd
}

// simListEntry is one row of 'sim list', and one object of its --json.
type simListEntry struct {
	Name        string `json:"name"`
	Tenants     int    `json:"tenants"`
	Machine     string `json:"machine"`
	Description string `json:"description"`
}
