package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestSimList(t *testing.T) {
	out, _, err := run(t, "sim", "list")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if got := strings.Fields(lines[0]); !slices.Equal(got, []string{"NAME", "TENANTS", "MACHINE", "DESCRIPTION"}) {
		t.Errorf("sim list header %q", lines[0])
	}
	names := []string{"alita-buslock", "alita-llc", "alita-membw", "alita-power", "crowd", "kyoto-permits", "scale"}
	if len(lines) != 1+len(names) {
		t.Errorf("sim list: %d lines, want a header and %d scenarios:\n%s", len(lines), len(names), out)
	}
	for _, name := range names {
		if !strings.Contains(out, name) {
			t.Errorf("sim list lacks %s:\n%s", name, out)
		}
	}
	if !regexp.MustCompile(`(?m)^scale +1000 +sapphirerapids +A large node`).MatchString(out) {
		t.Errorf("scale's row (tenant count, machine, description) missing:\n%s", out)
	}

	out, _, err = run(t, "sim", "list", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Name        string `json:"name"`
		Tenants     int    `json:"tenants"`
		Machine     string `json:"machine"`
		Description string `json:"description"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("sim list --json: %v\n%s", err, out)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.Name)
		if r.Tenants == 0 || r.Machine == "" || r.Description == "" {
			t.Errorf("sim list --json: incomplete %+v", r)
		}
		if r.Name == "scale" && (r.Tenants != 1000 || r.Machine != "sapphirerapids") {
			t.Errorf("sim list --json: scale is %+v", r)
		}
	}
	if !slices.Equal(got, names) {
		t.Errorf("sim list --json names %v, want %v", got, names)
	}
}

func TestSimRunJSON(t *testing.T) {
	out, _, err := run(t, "sim", "run", "alita-buslock", "--json", "--duration", "20s", "--policy", "none,crosstalk", "--seed", "3", "--log-level", "warn")
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Scenario string  `json:"scenario"`
		Duration float64 `json:"duration_seconds"`
		Seed     uint64  `json:"seed"`
		Results  []struct {
			Policy         string   `json:"policy"`
			VictimSlowdown *float64 `json:"victim_slowdown"`
			Tenants        []struct {
				Name, Role       string
				Slowdown         *float64 `json:"slowdown"`
				ThrottledSeconds float64  `json:"throttled_seconds"`
				NamedPolluter    bool     `json:"named_polluter"`
			} `json:"tenants"`
			Agent *struct {
				Intervals        int     `json:"intervals"`
				IntervalCPUMaxMs float64 `json:"interval_cpu_max_ms"`
			} `json:"agent"`
			LeftThrottled []string `json:"left_throttled"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if res.Scenario != "alita-buslock" || res.Duration != 20 || res.Seed != 3 || len(res.Results) != 2 {
		t.Fatalf("result header %+v", res)
	}
	none, ct := res.Results[0], res.Results[1]
	// 20 s at 500 ms: 40 intervals, and a few quicker ones that confirm a
	// first sign of contention.
	if none.Agent != nil || ct.Agent == nil || ct.Agent.Intervals < 40 || ct.Agent.Intervals > 60 || ct.Agent.IntervalCPUMaxMs <= 0 {
		t.Errorf("agent stats: none %+v crosstalk %+v", none.Agent, ct.Agent)
	}
	for _, tr := range ct.Tenants {
		if tr.Slowdown == nil {
			t.Errorf("%s has no slowdown", tr.Name)
		}
		if tr.NamedPolluter != (tr.Role == "polluter") {
			t.Errorf("%s (%s) named %v", tr.Name, tr.Role, tr.NamedPolluter)
		}
	}
	if *ct.VictimSlowdown >= *none.VictimSlowdown || len(ct.LeftThrottled) != 0 {
		t.Errorf("victim none %.2f crosstalk %.2f, left %v", *none.VictimSlowdown, *ct.VictimSlowdown, ct.LeftThrottled)
	}
}

func TestSimRunTextAndErrors(t *testing.T) {
	f := filepath.Join(t.TempDir(), "mine.yaml")
	os.WriteFile(f, []byte(`name: mine
duration: 5s
machine: {cpu: zen3, sockets: 1, cores_per_socket: 4}
tenants:
  - {name: v, role: victim, cpus: "0", phases: [{from: 0s, memory_bound: 0.5}]}
  - {name: p, kind: container, role: polluter, cpus: "1", phases: [{from: 0s, memory_bandwidth: 20GB/s, working_set: 1GiB}]}
`), 0o644)
	out, _, err := run(t, "sim", "run", f, "--policy", "none,static")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"scenario mine: 5s simulated", "POLICY", "static", "worst victim slowdown"} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
	os.WriteFile(f, []byte("name: bad\nmachine: {cpu: zen3, sockets: 1, cores_per_socket: 4}\ntenants:\n  - {name: v, role: victim, cpus: \"0\", colour: red}\n"), 0o644)
	if _, _, err := run(t, "sim", "run", f); err == nil || !strings.Contains(err.Error(), "line 4") {
		t.Errorf("bad scenario: %v, want the line", err)
	}
	if _, _, err := run(t, "sim", "run", "alita-buslock", "--policy", "magic"); err == nil || !strings.Contains(err.Error(), `unknown policy "magic"`) {
		t.Errorf("bad policy: %v", err)
	}
	if _, _, err := run(t, "sim", "run", "no-such-scenario"); err == nil || !strings.Contains(err.Error(), "no built-in scenario") {
		t.Errorf("unknown scenario: %v", err)
	}
}

// --keep-tree makes its directory, however deep, and says where each
// policy's tree went; the tree is there afterwards.
func TestSimRunKeepTree(t *testing.T) {
	f := filepath.Join(t.TempDir(), "mine.yaml")
	os.WriteFile(f, []byte(`name: mine
duration: 3s
machine: {cpu: zen3, sockets: 1, cores_per_socket: 4}
tenants:
  - {name: v, role: victim, cpus: "0", phases: [{from: 0s, memory_bound: 0.5}]}
`), 0o644)
	keep := filepath.Join(t.TempDir(), "not", "yet")
	_, stderr, err := run(t, "sim", "run", f, "--policy", "none,static", "--keep-tree", keep)
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []string{"none", "static"} {
		m := regexp.MustCompile(`kept the host tree of policy ` + policy + ` in (\S+)`).FindStringSubmatch(stderr)
		if m == nil {
			t.Errorf("no line says where %s's tree went:\n%s", policy, stderr)
			continue
		}
		if !strings.HasPrefix(m[1], keep+string(filepath.Separator)) || filepath.Base(m[1]) != "root" {
			t.Errorf("%s's tree %s is not a root under %s", policy, m[1], keep)
		}
		if _, err := os.Stat(filepath.Join(m[1], "proc", "cpuinfo")); err != nil {
			t.Errorf("%s's tree was not kept: %v", policy, err)
		}
	}
}
