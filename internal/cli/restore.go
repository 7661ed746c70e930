package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/crosstalk-project/crosstalk/internal/agent"
)

// Exit codes of `crosstalk restore`, from the worst down: what the process
// says when it ends tells a script or systemd what happened.
const (
	restoreExitOK       = 0 // everything recorded is back, or nothing was recorded
	restoreExitError    = 2 // something could not be restored (the error says what)
	restoreExitLocked   = 3 // a running agent holds the state directory: nothing done
	restoreExitUnsaved  = 4 // all restored, but the state file could not be updated
	restoreExitLeftOver = 5 // done, but something is left: changed by someone else, unowned throttles not adopted, records of kinds this binary cannot undo
)

func newRestoreCmd(g *globals) *cobra.Command {
	var (
		configFile string
		stateDir   string
		asJSON     bool
		adopt      bool
	)
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Undo everything a stopped agent left changed (throttles), from its state file",
		Long: `restore reads the agent's state file (STATE_DIR/state.json) and puts back
everything it records: the original CPU quota of every tenant the agent
throttled or was proving, and the records of the other actuators. It is what
an agent does itself on SIGTERM and at start-up; run it when the agent cannot:
after it was killed with SIGKILL, by the OOM killer or a crash, before
uninstalling, or to take a host out of crosstalk's hands. The systemd unit runs
it as ExecStopPost, so a stopped service never leaves a tenant throttled.

It needs only the state directory: a configuration file that is missing or
invalid is a warning (its state_dir is still used when it can be read), and a
read-only state directory is restored from (the file is left as it was, and
the exit status says so). A quota changed by someone else since crosstalk wrote
it is left as it is. An agent that finds a tenant at a quota shaped like
crosstalk's (a 16 ms period or 2, 4 or 8 of it, or 1 ms per CPU per 500 ms) that no state covers
flags it instead of taking it for the original; --adopt lifts those (no limit).
restore refuses while a running agent holds the state directory (it restores
by itself when stopped). A missing state file means nothing to restore.

Exit status:
  0  everything recorded was restored (or there was nothing to restore)
  2  something could not be restored
  3  a running agent holds the state directory: nothing was done
  4  everything was restored, but the state file could not be updated
  5  done, but something is left: a quota someone else changed, unowned
     throttles not adopted, or records this crosstalk cannot undo

  crosstalk restore                                  # /var/lib/crosstalk
  crosstalk restore --state-dir /tmp/ct --json
  crosstalk restore --adopt                          # also lift unowned throttles
  crosstalk restore --root /host --state-dir /host/var/lib/crosstalk   # from a pod`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg, warning := restoreConfig(configFile)
			if warning != "" {
				log.Warn(warning)
			}
			if cmd.Flags().Changed("state-dir") {
				cfg.StateDir = stateDir
			}
			h, err := g.openHost()
			if err != nil {
				return err
			}
			defer h.Close()
			// Ctrl-C (or systemd's SIGTERM) stops a wait on libvirt: the
			// VMs' throttles are then lifted through their cgroup files.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, rerr := agent.RestoreWith(ctx, cfg, h, log, agent.RestoreOptions{Adopt: adopt})
			if warning != "" {
				rep.Warnings = append([]string{warning}, rep.Warnings...)
			}
			if asJSON {
				out := struct {
					agent.RestoreReport
					Error string `json:"error,omitempty"`
				}{RestoreReport: rep}
				if rerr != nil {
					out.Error = rerr.Error()
				}
				b, _ := json.MarshalIndent(out, "", "  ")
				fmt.Fprintln(g.out, string(b))
			} else {
				printRestore(g.out, rep, rerr)
			}
			return restoreExit(rep, rerr)
		},
	}
	cmd.Flags().StringVar(&configFile, "config", "", "agent configuration `FILE` (for its state_dir; a broken one is a warning)")
	cmd.Flags().StringVar(&stateDir, "state-dir", "/var/lib/crosstalk", "the agent's state directory")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().BoolVar(&adopt, "adopt", false, "also lift unowned throttles: crosstalk-shaped quotas an agent flagged because no state covered them")
	return cmd
}

// restoreConfig is the configuration restore works from: the file when it
// is valid; else the defaults with the file's state_dir where that one key
// can be read, and a warning. restore must never be blocked by a typo in a
// key it does not use.
func restoreConfig(file string) (agent.Config, string) {
	if file == "" {
		return agent.Defaults(), ""
	}
	cfg, err := agent.LoadConfig(file)
	if err == nil {
		return cfg, ""
	}
	cfg = agent.Defaults()
	b, rerr := os.ReadFile(file)
	if rerr == nil {
		if dir, ok := agent.StateDirOf(b); ok {
			cfg.StateDir = dir
			return cfg, fmt.Sprintf("configuration not valid (%v): restoring from its state_dir %s with defaults for the rest", err, dir)
		}
	}
	return cfg, fmt.Sprintf("configuration not usable (%v): restoring from state_dir %s (or --state-dir)", err, cfg.StateDir)
}

// restoreExit turns a report into the command's exit status.
func restoreExit(rep agent.RestoreReport, err error) error {
	switch {
	case errors.Is(err, agent.ErrStateLocked):
		return exitError{code: restoreExitLocked, err: err}
	case errors.Is(err, agent.ErrStateNotUpdated):
		return exitError{code: restoreExitUnsaved, err: err}
	case err != nil:
		return exitError{code: restoreExitError, err: err}
	case rep.Left():
		return exitError{code: restoreExitLeftOver, err: errors.New("restore left changes in place (see above)")}
	}
	return nil
}

func printRestore(w io.Writer, rep agent.RestoreReport, err error) {
	for _, m := range rep.Warnings {
		fmt.Fprintf(w, "warning: %s\n", m)
	}
	if rep.Empty() {
		switch {
		case errors.Is(err, agent.ErrStateLocked):
			fmt.Fprintf(w, "nothing done: %v\n", err)
		case err != nil:
			fmt.Fprintf(w, "restore failed: %v\n", err)
		default:
			fmt.Fprintf(w, "nothing to restore (%s)\n", rep.StateFile)
		}
		return
	}
	fmt.Fprintf(w, "restored %d change(s) from %s\n", rep.Total(), rep.StateFile)
	for _, kind := range slices.Sorted(maps.Keys(rep.Restored)) {
		fmt.Fprintf(w, "  %-18s %d\n", kind, rep.Restored[kind])
	}
	q := rep.Quotas
	list := func(what string, cgroups []string) {
		if len(cgroups) > 0 {
			fmt.Fprintf(w, "  %s: %d %v\n", what, len(cgroups), cgroups)
		}
	}
	list("skipped, already at their original quota", q.Unchanged)
	list("skipped, cgroup gone", q.Gone)
	list("left, changed by someone else since crosstalk set it", q.Foreign)
	list("failed", q.Failed)
	list("unowned throttles left in place (crosstalk-shaped, no state; --adopt lifts them)", rep.Unowned)
	if a := rep.Adopted; a != nil {
		list("adopted and lifted", a.Restored)
		list("adopted, but changed by someone else since flagged: left", a.Foreign)
		list("adopted, cgroup gone", a.Gone)
		list("adoption failed", a.Failed)
	}
	for _, kind := range slices.Sorted(maps.Keys(rep.Kept)) {
		fmt.Fprintf(w, "  kept %d %s record(s) this crosstalk cannot undo: %v\n", len(rep.Kept[kind]), kind, rep.Kept[kind])
	}
	if rep.StateNotUpdated != "" {
		fmt.Fprintf(w, "  state file NOT updated: %s\n", rep.StateNotUpdated)
	}
	if err != nil {
		fmt.Fprintf(w, "errors: %v\n", err)
	}
}
