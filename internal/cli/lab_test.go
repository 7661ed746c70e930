package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/lab"
)

func TestLabList(t *testing.T) {
	out, _, err := run(t, "lab", "list")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if got := strings.Fields(lines[0]); !slices.Equal(got, []string{"NAME", "PHASE", "TENANTS", "DESCRIPTION"}) {
		t.Errorf("lab list header %q", lines[0])
	}
	names := lab.Builtins()
	if len(lines) != 1+len(names) {
		t.Errorf("lab list: %d lines, want a header and %d scenarios:\n%s", len(lines), len(names), out)
	}
	if !regexp.MustCompile(`(?m)^buslock +5s +victim=load chase@1  polluter=load splitlock@0  bystander=load cpu@0  A split-lock storm`).MatchString(out) {
		t.Errorf("buslock's row (phase, tenants, description) missing:\n%s", out)
	}

	out, _, err = run(t, "lab", "list", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Name    string `json:"name"`
		Phase   string `json:"phase"`
		Tenants []struct {
			Name string `json:"name"`
			Role string `json:"role"`
			Run  string `json:"run"`
			CPUs string `json:"cpus"`
		} `json:"tenants"`
		Description string `json:"description"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("lab list --json: %v\n%s", err, out)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.Name)
		if r.Phase == "" || len(r.Tenants) == 0 || r.Description == "" {
			t.Errorf("lab list --json: incomplete %+v", r)
		}
		if r.Name == "latency" {
			want := "victim:victim:load server:1 polluter:polluter:load splitlock:0"
			var ts []string
			for _, tn := range r.Tenants {
				ts = append(ts, tn.Name+":"+tn.Role+":"+tn.Run+":"+tn.CPUs)
			}
			if r.Phase != "5s" || strings.Join(ts, " ") != want {
				t.Errorf("lab list --json: latency is %s %v, want 5s %s", r.Phase, ts, want)
			}
		}
	}
	if !slices.Equal(got, names) {
		t.Errorf("lab list --json names %v, want %v", got, names)
	}
}

// `lab run` compares the agent by default: none, a static split and crosstalk.
func TestLabRunDefaultPolicies(t *testing.T) {
	out, _, err := run(t, "lab", "run", "--help")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "(default [none,static,crosstalk])") {
		t.Errorf("lab run's default policies leave the agent out:\n%s", out)
	}
}

// `lab run --config` takes the agent's configuration file and refuses a
// bad one before it starts anything, naming what is wrong.
func TestLabRunConfig(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("proof:\n  slot: 1ms\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := run(t, "lab", "run", "buslock", "--config", bad)
	if err == nil || !strings.Contains(err.Error(), "proof.slot") {
		t.Errorf("lab run with a proof slot of 1ms: %v, want an error naming proof.slot", err)
	}
	out, _, err := run(t, "lab", "run", "--help")
	if err != nil || !strings.Contains(out, "--config FILE") {
		t.Errorf("lab run --help does not offer --config: %v\n%s", err, out)
	}
}

// The scenario file in 'lab run --help' is one the lab accepts.
func TestLabRunHelpScenarioParses(t *testing.T) {
	long := newLabRunCmd(&globals{}).Long
	_, rest, ok := strings.Cut(long, "A scenario file:\n")
	body, _, ok2 := strings.Cut(rest, "\nUnknown fields")
	if !ok || !ok2 {
		t.Fatalf("no scenario file in the help:\n%s", long)
	}
	s, err := lab.Parse([]byte(body), "help")
	if err != nil {
		t.Fatalf("the help's scenario: %v\n%s", err, body)
	}
	if len(s.Tenants) != 3 || s.Tenants[2].Onset == "" {
		t.Errorf("tenants %+v, want three, the last with its onset line", s.Tenants)
	}
}
