package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// positiveFlags is a PreRunE that rejects the named flags where the command
// line set them to zero or less (ints, durations), or to less than zero for
// those named with a trailing "=0" ("runs=0": zero generated runs is a
// choice). A flag left at its default is not checked: several commands take
// their zero default to mean "the scenario's own" or "the usual", which an
// operator who typed the value did not ask for.
func positiveFlags(names ...string) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		for _, n := range names {
			n, zeroOK := strings.CutSuffix(n, "=0")
			f := cmd.Flags().Lookup(n)
			if f == nil || !f.Changed {
				continue
			}
			switch f.Value.Type() {
			case "int":
				v, err := cmd.Flags().GetInt(n)
				if err != nil {
					return err
				}
				if zeroOK && v < 0 {
					return fmt.Errorf("--%s must be 0 or more, got %d", n, v)
				}
				if !zeroOK && v < 1 {
					return fmt.Errorf("--%s must be at least 1, got %d", n, v)
				}
			case "duration":
				v, err := cmd.Flags().GetDuration(n)
				if err != nil {
					return err
				}
				if v <= 0 {
					return fmt.Errorf("--%s must be longer than 0, got %s", n, v)
				}
			default:
				return fmt.Errorf("internal error: --%s is a %s, not an int or a duration", n, f.Value.Type())
			}
		}
		return nil
	}
}
