package cli

import (
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/crosstalk-project/crosstalk/internal/lab"
	"github.com/crosstalk-project/crosstalk/internal/resultdir"
)

func newLabReportCmd(g *globals) *cobra.Command {
	var outDir string
	cmd := &cobra.Command{
		Use:   "report RESULT.json",
		Short: "Render the text and HTML report of a saved lab result again",
		Long: `report reads a result a lab command saved with --out (lab run's result.json,
lab matrix's matrix.json, lab suite's suite.json or lab visibility's
visibility.json), prints its text report as the command did, and with --out
writes its HTML report (report.html, matrix.html, suite.html or
visibility.html) to DIR, so a kept result can be read again with
this crosstalk's report. The header of both says which crosstalk made the
result, when, with which command, and on what machine. A file that is not
one of these results is an error that says so.`,
		Example: `  crosstalk lab report internal/lab/testdata/report-result.json
  crosstalk lab report internal/lab/testdata/report-matrix.json --out /tmp/matrix-report`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := lab.LoadSaved(args[0])
			if err != nil {
				return err
			}
			if outDir != "" {
				if err := g.writeOut(outDir, resultdir.Rendered(s.ReportName(), s.WriteHTML)); err != nil {
					return err
				}
			}
			return s.WriteText(g.out)
		},
	}
	cmd.Flags().StringVar(&outDir, "out", "", "also write the HTML report to `DIR`")
	return cmd
}

// labStamp is the command's part of a lab result's meta: this binary's
// version and commit, and the command line as it was given.
func (g *globals) labStamp(cmd *cobra.Command, args []string) lab.Meta {
	return lab.Meta{Version: g.build.Version, Commit: buildCommit(g.build.Commit, debug.ReadBuildInfo), Command: commandLine(cmd, args)}
}

// buildCommit is the commit the linker flags give, else the one the Go
// toolchain stamped from the checkout (vcs.revision, "-dirty" when the tree
// had changes), else empty.
func buildCommit(linked string, info func() (*debug.BuildInfo, bool)) string {
	if linked != "" && linked != "unknown" {
		return linked
	}
	bi, ok := info()
	if !ok {
		return ""
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" && modified == "true" {
		rev += "-dirty"
	}
	return rev
}

// commandLine is the command as a reader would type it again: its path, the
// flags that were set and its arguments.
func commandLine(cmd *cobra.Command, args []string) string {
	parts := []string{cmd.CommandPath()}
	cmd.Flags().Visit(func(f *pflag.Flag) {
		v := f.Value.String()
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			v = strings.Join(sv.GetSlice(), ",")
		}
		parts = append(parts, "--"+f.Name+"="+shellQuote(v))
	})
	for _, a := range args {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`*?[]{}()<>|&;#~!") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
