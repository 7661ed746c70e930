package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

func TestPositiveFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // "" for no error
	}{
		{nil, ""}, // defaults are not checked, even a zero one
		{[]string{"--reps", "2", "--wait", "1s", "--runs", "0"}, ""},
		{[]string{"--reps", "0"}, "--reps must be at least 1, got 0"},
		{[]string{"--reps", "-3"}, "--reps must be at least 1, got -3"},
		{[]string{"--runs", "-1"}, "--runs must be 0 or more, got -1"},
		{[]string{"--wait", "0s"}, "--wait must be longer than 0, got 0s"},
		{[]string{"--wait", "-2s"}, "--wait must be longer than 0, got -2s"},
		{[]string{"--name", "x"}, ""}, // not named: not checked
	} {
		var reps, runs int
		var wait time.Duration
		var name string
		cmd := &cobra.Command{Use: "x", PreRunE: positiveFlags("reps", "runs=0", "wait"), RunE: func(*cobra.Command, []string) error { return nil }}
		cmd.Flags().IntVar(&reps, "reps", 0, "")
		cmd.Flags().IntVar(&runs, "runs", 10, "")
		cmd.Flags().DurationVar(&wait, "wait", 0, "")
		cmd.Flags().StringVar(&name, "name", "", "")
		cmd.SetArgs(c.args)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		err := cmd.Execute()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want != "" && (err == nil || err.Error() != c.want):
			t.Errorf("%v: got %v, want %q", c.args, err, c.want)
		}
	}
	// A flag of another type named by mistake is caught at once.
	cmd := &cobra.Command{Use: "x", PreRunE: positiveFlags("name"), RunE: func(*cobra.Command, []string) error { return nil }}
	cmd.Flags().String("name", "", "")
	cmd.SetArgs([]string{"--name", "y"})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "internal error") {
		t.Errorf("a string flag: %v", err)
	}
}

// The lab and sim commands refuse a count or a length the operator set to
// nothing, instead of silently running their defaults.
func TestLabCommandsRefuseEmptyCountsAndLengths(t *testing.T) {
	for _, args := range [][]string{
		{"lab", "run", "buslock", "--repetitions", "0"},
		{"lab", "run", "buslock", "--duration", "-2s"},
		{"lab", "suite", "--runs", "-1", "--list"},
		{"lab", "suite", "--repetitions", "0", "--list"},
		{"lab", "suite", "--duration", "0s", "--list"},
		{"lab", "overhead", "--tenants", "0"},
		{"lab", "overhead", "--warmup", "-1s"},
		{"lab", "matrix", "--duration", "0s"},
		{"lab", "visibility", "--every", "0s"},
		{"sim", "run", "alita-buslock", "--duration", "-1s"},
	} {
		_, _, err := run(t, args...)
		if err == nil || !strings.Contains(err.Error(), "must be") {
			t.Errorf("crosstalk %s: %v", strings.Join(args, " "), err)
		}
	}
}
