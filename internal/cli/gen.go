package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/crosstalk-project/crosstalk/internal/docgen"
)

// newGenCmd is for packagers ('make install', 'make deb'), hence hidden: it
// writes the man pages and shell completions of this very binary.
func newGenCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:    "gen",
		Short:  "Write the man pages or the shell completions of this binary",
		Hidden: true,
	}
	man := &cobra.Command{
		Use:   "man DIR",
		Short: "Write crosstalk.1 and one page per subcommand into DIR",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return docgen.Man(cmd.Root(), g.build.Version, args[0])
		},
	}
	completions := &cobra.Command{
		Use:   "completions DIR",
		Short: fmt.Sprintf("Write the bash (%s), zsh (%s) and fish (%s) completions into DIR", docgen.BashFile, docgen.ZshFile, docgen.FishFile),
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return docgen.Completions(cmd.Root(), args[0])
		},
	}
	cmd.AddCommand(man, completions)
	return cmd
}
