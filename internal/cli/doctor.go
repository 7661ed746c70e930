package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/doctor"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

func newDoctorCmd(g *globals) *cobra.Command {
	var asJSON, force bool
	var capture, configFile string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Show what this host lets crosstalk sense and control, and what in its tuning hurts tenants",
		Long: `doctor reads the host (never writes) and reports two things.

Capabilities: the cgroup layout and controllers, pressure stall information,
the hardware PMU and the bus-lock event for this CPU model, resctrl (cache and
memory-bandwidth allocation and monitoring), RAPL power zones, cpufreq, MSR
access, KVM and libvirt.

Checks: host tuning that makes tenants hurt each other, each with the files
read, the reason (with its source) and the exact setting to change:
split_lock_detect, ksm, ept, thp, smt, numa_balancing, cpufreq_governor,
nmi_watchdog, resctrl_mount, perf_event_paranoid, psi.

Policies: which of the agent's hardware policies (bus-lock budget, pollution
permits, power budget, LLC and memory-bandwidth isolation) and per-CPU levers
(clock modulation, cpufreq) would run here with the default configuration (or
--config FILE), and why the others would not.

Domains: for every running libvirt guest (its status file in /run/libvirt/qemu,
read-only, no libvirt connection) the topology checks of 'crosstalk plan':
vm_numa_span, vm_smt_siblings, vm_l3_sharing, vm_copy_threshold, vm_phys_bits.

Anything missing or unreadable is reported as unknown with the reason; doctor
exits 0 unless the root itself is unusable (exit 1).

The text report starts with the verdict: what 'crosstalk run' will do on this
host (the canary probe, CPU wait, the CPU-quota lever, the PMU counters and
each hardware policy) and, one line each, why the rest is off. It is wrapped to
the terminal's width ($COLUMNS, else 80 when not a terminal).

--capture DIR copies every file doctor read into DIR (devices and sockets as
empty stand-ins), so the tree can be attached to a bug report and replayed with
'crosstalk doctor --root DIR'. DIR must be new or empty; --force writes into a
directory that is not (its other files stay).`,
		Example: `  crosstalk doctor
  crosstalk doctor --json | jq .capabilities.pmu
  crosstalk doctor --root testdata/hosts/intel-skx-2s
  crosstalk doctor --capture /tmp/myhost && tar czf myhost.tgz -C /tmp myhost`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			if capture != "" && !force {
				if err := emptyOrAbsent(capture); err != nil {
					return err
				}
			}
			var rec host.Recorder
			var opts []host.Option
			if capture != "" {
				opts = append(opts, host.WithRecorder(&rec))
			}
			h, err := g.openHost(opts...)
			if err != nil {
				return err
			}
			defer h.Close()

			dopt := doctor.Options{Log: log}
			if h.IsLive() {
				dopt = doctor.LiveOptions(log)
			}
			report := doctor.Run(h, dopt)
			cfg, err := agentConfig(configFile)
			if err != nil {
				return err
			}
			for _, p := range agent.HardwareAvailability(cfg, h) {
				report.Policies = append(report.Policies, doctor.Policy{Name: p.Name, On: p.On, Why: p.Why})
			}
			report.Verdict = doctor.Verdict(report)

			if capture != "" {
				m, err := host.Capture(h, rec.Touched(), capture)
				if err != nil {
					return exitError{code: 1, err: err}
				}
				fmt.Fprintf(g.errOut, "captured %d files, %d directories and %d device/socket stand-ins into %s (%d unreadable, listed in %s)\n",
					m.Files, m.Dirs, len(m.StandIns), capture, len(m.Unreadable), host.ManifestName)
			}
			if asJSON {
				enc := json.NewEncoder(g.out)
				enc.SetIndent("", "  ")
				return enc.Encode(report)
			}
			return doctor.WriteText(g.out, report, termSize(0, "COLUMNS", g.out, func(ws *unix.Winsize) uint16 { return ws.Col }, 80))
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON (a stable interface)")
	cmd.Flags().StringVar(&capture, "capture", "", "also copy the files doctor reads into `DIR`, for bug reports and tests")
	cmd.Flags().BoolVar(&force, "force", false, "let --capture write into a directory that is not empty")
	cmd.Flags().StringVar(&configFile, "config", "", "judge the hardware policies with this agent configuration `FILE` (default: the defaults)")
	return cmd
}

// emptyOrAbsent refuses a --capture directory with something in it: files
// left from another capture would be replayed as this host's.
func emptyOrAbsent(dir string) error {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("--capture %s: %w", dir, err)
	case len(ents) > 0:
		return fmt.Errorf("--capture %s: the directory is not empty (%d entries); name a new one, or add --force to write into it", dir, len(ents))
	}
	return nil
}
