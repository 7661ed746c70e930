// Package cli wires crosstalk's subcommands. It parses flags, opens the host,
// calls into the pipeline packages and prints; the work lives elsewhere.
package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/service"
)

// Build describes the binary; set by main from linker flags.
type Build struct {
	Version string
	Commit  string
}

// globals are the flags every subcommand shares.
type globals struct {
	root     string
	logLevel string
	out      io.Writer
	errOut   io.Writer
	build    Build
}

// NewRoot builds the command tree. out and errOut receive normal output and logs.
func NewRoot(b Build, out, errOut io.Writer) *cobra.Command {
	g := &globals{out: out, errOut: errOut, build: b}
	root := &cobra.Command{
		Use:   "crosstalk",
		Short: "Find the tenant polluting shared hardware and throttle only it",
		Long: `crosstalk watches the tenants (VMs and containers) of a multi-tenant Linux host,
finds the one polluting shared hardware — the memory bus (split/bus locks), the
last-level cache, memory bandwidth, power — proves it, and throttles only that
tenant so its neighbours get their performance back.

Start with 'crosstalk doctor' to see what this host lets crosstalk sense and
control, and what in its tuning hurts tenants.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	root.SetErr(errOut)
	root.PersistentFlags().StringVar(&g.root, "root", "/", "root of the host filesystem to examine: / on the host, /host in a DaemonSet, or a captured tree")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.AddCommand(newDoctorCmd(g), newRunCmd(g), newRestoreCmd(g), newTopCmd(g), newLoadCmd(g), newLabCmd(g), newSimCmd(g), newPlanCmd(g), newExplainCmd(g), newTenantExecCmd(), newVersionCmd(g), newGenCmd(g))
	return root
}

// Execute runs the CLI and returns the process exit code.
func Execute(b Build, args []string) int {
	root := NewRoot(b, os.Stdout, os.Stderr)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "crosstalk:", err)
		var ee exitError
		if asExit(err, &ee) {
			return ee.code
		}
		return 2
	}
	return 0
}

// exitError carries a specific exit code out of a command.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

func asExit(err error, target *exitError) bool {
	ee, ok := err.(exitError)
	if ok {
		*target = ee
	}
	return ok
}

func (g *globals) logger() (*slog.Logger, error) {
	log, _, err := g.levelledLogger()
	return log, err
}

// levelledLogger is logger with its level left adjustable (the agent's
// configuration may change it). Under journald its lines carry no time=.
func (g *globals) levelledLogger() (*slog.Logger, *slog.LevelVar, error) {
	lvl, err := agent.ParseLogLevel(g.logLevel)
	if err != nil {
		return nil, nil, fmt.Errorf("--log-level %w", err)
	}
	v := new(slog.LevelVar)
	v.Set(lvl)
	return slog.New(service.LogHandler(g.errOut, os.Getenv, slog.HandlerOptions{Level: v})), v, nil
}

// openHost opens --root; an unusable root is the one error that stops doctor.
func (g *globals) openHost(opts ...host.Option) (*host.Host, error) {
	h, err := host.Open(g.root, opts...)
	if err != nil {
		return nil, exitError{code: 1, err: err}
	}
	return h, nil
}

func newVersionCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version and commit of this binary",
		Long: `version prints the release version and git commit this binary was built from
(set by the release build, 'make release' / 'make deb'). --json adds the Go
version and platform, for fleet inventories.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				b, _ := json.Marshal(map[string]string{"version": g.build.Version, "commit": g.build.Commit,
					"go": runtime.Version(), "platform": runtime.GOOS + "/" + runtime.GOARCH})
				_, err := fmt.Fprintln(g.out, string(b))
				return err
			}
			_, err := fmt.Fprintf(g.out, "crosstalk %s (commit %s)\n", g.build.Version, g.build.Commit)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print version, commit, Go version and platform as JSON")
	return cmd
}

// agentConfig is the agent's configuration from file, or the defaults when
// no file is named.
func agentConfig(file string) (agent.Config, error) {
	if file == "" {
		return agent.Defaults(), nil
	}
	return agent.LoadConfig(file)
}

// oneLine folds a YAML block's line breaks and runs of spaces into single spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// writeList prints a list command's rows: a JSON array with asJSON, else
// a table of header and line(row) for each row, columns separated by tabs.
func writeList[R any](w io.Writer, asJSON bool, rows []R, header string, line func(R) string) error {
	if asJSON {
		return writeJSON(w, rows)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, line(r))
	}
	return tw.Flush()
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
