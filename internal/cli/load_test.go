package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/crosstalk-project/crosstalk/internal/load"
)

func TestLoadCmdOutput(t *testing.T) {
	out, errOut, err := run(t, "load", "chase", "--duration", "250ms", "--interval", "100ms", "--size", "64KiB")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 3 {
		t.Fatalf("want a start line, progress lines and a summary, got:\n%s", out)
	}
	for i, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %d not JSON: %v: %s", i, err, l)
		}
		want := "progress"
		switch i {
		case 0:
			want = "start"
		case len(lines) - 1:
			want = "summary"
		}
		if m["type"] != want || m["load"] != "chase" {
			t.Errorf("line %d: %s", i, l)
		}
		if strings.Contains(l, "\n") || strings.Contains(l, "  ") {
			t.Errorf("line %d not compact: %q", i, l)
		}
	}
	var s load.Summary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
		t.Fatal(err)
	}
	if s.Metric != "ns_per_access" || s.Value <= 0 || s.Size != 64<<10 || s.Direction != "lower" {
		t.Errorf("summary: %+v", s)
	}
	if n := strings.Count(errOut, "\n"); n != 1 || !strings.Contains(errOut, "load chase (victim): ns_per_access = ") {
		t.Errorf("stderr: %q", errOut)
	}
}

func TestLoadCmdErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bogus", "--duration", "1s"}, "valid kinds are chase, server, splitlock"},
		{[]string{"splitlock", "--duration", "61s"}, "refused"},
		{[]string{"chase", "--duration", "0s"}, "duration must be > 0"},
		{[]string{"chase", "--size", "12parsecs"}, "--size"},
		{[]string{"chase", "--size", "1KiB"}, "too small"},
		{[]string{"chase", "--size", "0"}, "--size must be > 0"},
		{[]string{"cpu", "--size", "4MiB"}, "takes no size"},
		{[]string{"cpu", "--threads", "0"}, "--threads must be >= 1"},
		{[]string{"stream", "--rate", "10"}, "takes no rate"},
		{[]string{"splitlock", "--rate", "-1"}, "rate must be"},
		{[]string{}, "accepts 1 arg"},
	} {
		out, _, err := run(t, append([]string{"load"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("load %v: err = %v, want %q", tc.args, err, tc.want)
		}
		if out != "" {
			t.Errorf("load %v printed %q before failing", tc.args, out)
		}
	}
}

func TestLoadCmdHelp(t *testing.T) {
	out, _, err := run(t, "load", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range load.Kinds() {
		for _, s := range []string{k.Name, k.Role, k.Metric, k.Unit, k.Direction + " is better"} {
			if !strings.Contains(out, s) {
				t.Errorf("help lacks %q for %s", s, k.Name)
			}
		}
	}
	for _, s := range []string{"stops by itself", "splitlock refuses", "1m0s", "MiB"} {
		if !strings.Contains(out, s) {
			t.Errorf("help lacks %q", s)
		}
	}
}

// A cancelled context (what SIGINT/SIGTERM do) stops the load early and the
// summary is still printed.
func TestLoadCmdCancel(t *testing.T) {
	var out, errOut bytes.Buffer
	g := &globals{out: &out, errOut: &errOut}
	root := &cobra.Command{Use: "crosstalk", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newLoadCmd(g))
	root.SetArgs([]string{"load", "cpu", "--duration", "10s"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(100*time.Millisecond, cancel)
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var s load.Summary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil || s.Type != "summary" {
		t.Fatalf("last line %q: %v", lines[len(lines)-1], err)
	}
	if s.Seconds > 1 {
		t.Errorf("ran %.2f s after cancel", s.Seconds)
	}
	if !strings.Contains(errOut.String(), "cancelled") {
		t.Errorf("stderr: %q", errOut.String())
	}
}
