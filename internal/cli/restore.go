package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/crosstalk-project/crosstalk/internal/agent"
)

func newRestoreCmd(g *globals) *cobra.Command {
	var (
		configFile string
		stateDir   string
		asJSON     bool
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

A quota changed by someone else since crosstalk wrote it is left as it is.
restore refuses while a running agent holds the state directory (it restores
by itself when stopped). A missing state file means nothing to restore (exit 0).
Exit status: 0 when everything recorded was restored, 2 on any error.

  crosstalk restore                                  # /var/lib/crosstalk
  crosstalk restore --state-dir /tmp/ct --json
  crosstalk restore --root /host --state-dir /host/var/lib/crosstalk   # from a pod`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg, err := agentConfig(configFile)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("state-dir") {
				cfg.StateDir = stateDir
			}
			h, err := g.openHost()
			if err != nil {
				return err
			}
			defer h.Close()
			rep, rerr := agent.RestoreAll(cfg, h, log)
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
				return rerr
			}
			switch {
			case rep.Total() == 0 && rerr == nil && len(rep.Kept) == 0:
				fmt.Fprintf(g.out, "nothing to restore (%s)\n", rep.StateFile)
			default:
				fmt.Fprintf(g.out, "restored %d change(s) from %s\n", rep.Total(), rep.StateFile)
				for kind, n := range rep.Restored {
					fmt.Fprintf(g.out, "  %-12s %d\n", kind, n)
				}
				for kind, keys := range rep.Kept {
					fmt.Fprintf(g.out, "  kept %d %s record(s) this crosstalk cannot undo: %v\n", len(keys), kind, keys)
				}
			}
			return rerr
		},
	}
	cmd.Flags().StringVar(&configFile, "config", "", "agent configuration `FILE` (for its state_dir)")
	cmd.Flags().StringVar(&stateDir, "state-dir", "/var/lib/crosstalk", "the agent's state directory")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}
