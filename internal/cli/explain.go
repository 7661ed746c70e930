package cli

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/explain"
)

func newExplainCmd(g *globals) *cobra.Command {
	var (
		stateDir, journal, since, config string
		asJSON, all, verify              bool
	)
	cmd := &cobra.Command{
		Use:   "explain [TENANT]",
		Short: "Tell from the agent's journal why each tenant was suspected, proved, throttled and released",
		Long: `explain reads the agent's journal (STATE_DIR/journal.jsonl, after the part
rotated to journal.jsonl.1) and tells it in time order, in plain sentences: why
each tenant was suspected, how its proof went (the trials passed, partial,
failed and quiet, each with what the contention read freed and capped, and the
evidence against the bound a conviction needs), and why it was throttled,
tightened, relaxed and released, by which policy through which lever. A
proof's per-slot cap and release records are folded into its verdict (--all
lists them).

TENANT is a tenant's cgroup path (its ID), its name, or a cgroupfs path ending
in its cgroup; one the journal does not know is an error that lists those it
does, closest first. Lines that are not events are skipped and counted.

--verify checks each verdict without trusting the agent that gave it: it
scores every proof's recorded trials again from the readings of each capped
and freed slot, with the proof settings of --config or the defaults, and says
under each proof whether they give every trial's drop, score and evidence and
the verdict as recorded. A proof that does not reproduce makes explain exit
with status 1.`,
		Example: `  crosstalk explain
  crosstalk explain vm-web-1 --since 2h
  crosstalk explain --journal /tmp/ct/journal.jsonl --since 2025-01-01T00:00:00Z --json
  crosstalk explain --verify --config /etc/crosstalk/crosstalk.yaml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var opt explain.Options
			if len(args) == 1 {
				opt.Tenant = args[0]
			}
			opt.All = all
			if config != "" && !verify {
				return fmt.Errorf("--config is read for --verify's proof settings: add --verify")
			}
			if verify {
				cfg := agent.Defaults()
				if config != "" {
					var err error
					if cfg, err = agent.LoadConfig(config); err != nil {
						return err
					}
				}
				pc := cfg.Proof.ProofConfig
				opt.Verify = &pc
			}
			if since != "" {
				t, err := explain.ParseSince(since, time.Now())
				if err != nil {
					return err
				}
				opt.Since = t
			}
			path := journal
			if path == "" {
				path = agent.JournalPath(stateDir)
			}
			r, err := explain.Explain(path, opt)
			if err != nil {
				return err
			}
			if asJSON {
				b, err := json.MarshalIndent(r, "", "  ")
				if err != nil {
					return err
				}
				if _, err = fmt.Fprintln(g.out, string(b)); err != nil {
					return err
				}
			} else if err := explain.Render(g.out, r); err != nil {
				return err
			}
			if r.Unreproduced > 0 {
				return fmt.Errorf("%d of %d proofs did not reproduce from their recorded readings", r.Unreproduced, r.Checked)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", agent.Defaults().StateDir, "the agent's state directory, whose journal.jsonl is read")
	cmd.Flags().StringVar(&journal, "journal", "", "read this journal `FILE` instead of the state directory's")
	cmd.Flags().StringVar(&since, "since", "", "only what happened since a duration ago (90m) or an RFC 3339 time")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().BoolVar(&all, "all", false, "also list every proof slot's cap and release")
	cmd.Flags().BoolVar(&verify, "verify", false, "score each proof's recorded trials again and say whether they give the recorded verdict (exit 1 where one does not)")
	cmd.Flags().StringVar(&config, "config", "", "the agent's configuration `FILE`, for --verify's proof settings (default: the defaults)")
	cmd.MarkFlagsMutuallyExclusive("state-dir", "journal")
	return cmd
}
