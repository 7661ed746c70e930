package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSimSuiteList(t *testing.T) {
	out, _, err := run(t, "sim", "suite", "--seed", "5", "--runs", "3", "--list")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "gen-5 ") || !strings.HasPrefix(lines[2], "gen-7 ") {
		t.Errorf("sim suite --list of seeds 5-7:\n%s", out)
	}
	if _, _, err := run(t, "sim", "suite", "--runs", "0"); err == nil || !strings.Contains(err.Error(), "at least 1") {
		t.Errorf("--runs 0: %v", err)
	}
}

func TestSimSuiteJSONAndOut(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	out, stderr, err := run(t, "sim", "suite", "--seed", "79", "--runs", "2", "--json", "--out", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var res struct {
		Seed int64 `json:"seed"`
		Runs []struct {
			Name      string  `json:"name"`
			Class     string  `json:"class"`
			Convicted bool    `json:"convicted"`
			Noise     float64 `json:"noise"`
		} `json:"runs"`
		Total struct {
			Runs     int `json:"runs"`
			Recall95 *struct {
				Low, High float64
			} `json:"recall_95"`
		} `json:"total"`
		Breakdowns map[string]map[string]json.RawMessage `json:"breakdowns"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if res.Seed != 79 || len(res.Runs) != 2 || res.Runs[0].Name != "gen-79" || res.Total.Runs != 2 || res.Runs[0].Noise == 0 {
		t.Errorf("sim suite --json: %+v", res)
	}
	if res.Total.Recall95 == nil || res.Total.Recall95.High < res.Total.Recall95.Low {
		t.Errorf("recall interval %+v", res.Total.Recall95)
	}
	for _, k := range []string{"polluter", "timing", "placement", "pmu"} {
		if len(res.Breakdowns[k]) == 0 {
			t.Errorf("no %s breakdown in %v", k, res.Breakdowns)
		}
	}
	saved, err := os.ReadFile(filepath.Join(dir, "suite.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(saved), `"gen-80"`) || !strings.Contains(stderr, "suite.json") {
		t.Errorf("suite.json lacks the runs, or stderr does not say where it went: %s", stderr)
	}
}

func TestSimSuiteText(t *testing.T) {
	out, _, err := run(t, "sim", "suite", "--seed", "1", "--runs", "1", "--verbose")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"gen-1     clean", "1 simulated runs from seed 1", "RECALL (95%)", "control   1", "simulated: the production agent"} {
		if !strings.Contains(out, want) {
			t.Errorf("sim suite --verbose lacks %q:\n%s", want, out)
		}
	}
	out, _, err = run(t, "sim", "suite", "--seed", "1", "--runs", "1")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "gen-1 ") {
		t.Errorf("a line a run without --verbose:\n%s", out)
	}
}

// --config sets the agent's keys over the simulator's: thresholds no probe
// reaches leave seed 5's bus-lock polluter, convicted with the defaults,
// unproved. A file 'crosstalk run' would refuse is refused.
func TestSimSuiteConfig(t *testing.T) {
	convicted := func(args ...string) bool {
		t.Helper()
		out, stderr, err := run(t, append([]string{"sim", "suite", "--seed", "5", "--runs", "1", "--json"}, args...)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		var res struct {
			Runs []struct {
				Convicted bool `json:"convicted"`
			} `json:"runs"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Runs) != 1 {
			t.Fatalf("%v\n%s", err, out)
		}
		return res.Runs[0].Convicted
	}
	if !convicted() {
		t.Fatal("seed 5 not convicted with the defaults: the test needs a run that is")
	}
	dir := t.TempDir()
	deaf := filepath.Join(dir, "deaf.yaml")
	os.WriteFile(deaf, []byte("judge:\n  ratio: 50\n  strong: 60\n  llc_ratio: 50\n  llc_strong: 60\n"), 0o644)
	if convicted("--config", deaf) {
		t.Error("convicted with thresholds no probe reaches: --config not applied")
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("judge:\n  ratoi: 2\n"), 0o644)
	if _, _, err := run(t, "sim", "suite", "--seed", "5", "--runs", "1", "--config", bad); err == nil || !strings.Contains(err.Error(), "ratoi") {
		t.Errorf("a misspelt key: %v", err)
	}
}
