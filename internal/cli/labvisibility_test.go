package cli

import (
	"strings"
	"testing"
)

// Bad input is refused before any cgroup is made or load started.
func TestLabVisibilityRefusesBadInput(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--load-cpus", "x"}, "--load-cpus"},
		{[]string{"--probe-cpus", "1-"}, "--probe-cpus"},
		{[]string{"--loads", "nope"}, `unknown load "nope"`},
		{[]string{"--load-cpus", "0", "--probe-cpus", "0"}, "overlap the load CPUs"},
		{[]string{"--loads", "splitlock", "--duration", "20s"}, "allowed for split locks"},
		{[]string{"--config", "no-such-file.yaml"}, "no-such-file.yaml"},
		{[]string{"extra"}, "unknown command"},
	} {
		_, _, err := run(t, append([]string{"lab", "visibility"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("lab visibility %v: err = %v, want it to say %q", c.args, err, c.want)
		}
	}
}
