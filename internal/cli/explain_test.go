package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The journal under internal/explain/testdata is written by the agent's
// journal writer (internal/explain's tests hold it to that).
const explainFixture = "../explain/testdata/journal.jsonl"

func TestExplain(t *testing.T) {
	out, _, err := run(t, "explain", "vm-noisy", "--journal", explainFixture, "--since", "2025-03-01T10:00:10Z")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"vm-noisy suspected:", "proved a polluter after 4 trial(s) (3 passed, 1 partial)", "trial 4 passed", "tightened to 0.5 CPU", "released by probe"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "shop/web proved") || strings.Contains(out, "capped to 0.002 CPU") {
		t.Errorf("another tenant's proof, or a slot record without --all:\n%s", out)
	}

	out, _, err = run(t, "explain", "--journal", explainFixture, "--json", "--all")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Entries []struct {
			Kind, Step, Text string
		} `json:"entries"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	slots := 0
	for _, e := range doc.Entries {
		if e.Step == "slot" {
			slots++
		}
	}
	if slots == 0 || len(doc.Entries) == 0 {
		t.Errorf("--all --json: %d entries, %d slots", len(doc.Entries), slots)
	}
}

func TestExplainErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--state-dir", t.TempDir()}, "no journal at"},
		{[]string{"vm-nosy", "--journal", explainFixture}, `no tenant "vm-nosy" in the journal; it knows, closest first: vm-noisy`},
		{[]string{"--journal", explainFixture, "--since", "last week"}, "--since"},
		{[]string{"--journal", explainFixture, "--state-dir", "/x"}, "none of the others"},
		{[]string{"a", "b"}, "accepts at most 1 arg"},
	} {
		_, _, err := run(t, append([]string{"explain"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("explain %v: %v, want %q", c.args, err, c.want)
		}
	}
}

// Every `crosstalk explain` command the README shows runs here as written,
// from the repository's root.
func TestREADMEExplainExamples(t *testing.T) {
	cmds := docCommands(t, "../../README.md", "crosstalk explain")
	if len(cmds) == 0 {
		t.Fatal("the README shows no crosstalk explain command")
	}
	t.Chdir("../..")
	for _, c := range cmds {
		out, _, err := run(t, strings.Fields(strings.TrimPrefix(c, "crosstalk "))...)
		if err != nil {
			t.Errorf("%s: %v", c, err)
			continue
		}
		if !strings.Contains(out, "proved a polluter") {
			t.Errorf("%s told no proof:\n%s", c, out)
		}
	}
}

// --verify scores each proof again from its readings: a recorded lab run
// reproduces; a journal with a reading changed exits with an error; other
// proof settings come from --config, which only --verify reads.
func TestExplainVerify(t *testing.T) {
	const lab = "../explain/testdata/lab-gen-6017.jsonl"
	out, _, err := run(t, "explain", "--verify", "--journal", lab)
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if n := strings.Count(out, "checked: its readings, scored again"); n != 2 {
		t.Errorf("%d proofs checked, want 2:\n%s", n, out)
	}
	out, _, err = run(t, "explain", "--verify", "--config", "../../examples/crosstalk.yaml", "--journal", lab, "--json")
	if err != nil || !strings.Contains(out, `"checked_proofs": 2`) || strings.Contains(out, "unreproduced_proofs") {
		t.Errorf("--config with the defaults' file, --json: %v:\n%s", err, out)
	}

	raw, err := os.ReadFile(lab)
	if err != nil {
		t.Fatal(err)
	}
	// The innocent's first freed reading, read lower: its first trial
	// scores otherwise.
	tampered := strings.Replace(string(raw), `"freed":[`, `"freed":[0.5,`, 1)
	if tampered == string(raw) {
		t.Fatal("nothing to change in the journal")
	}
	p := filepath.Join(t.TempDir(), "journal.jsonl")
	if err := os.WriteFile(p, []byte(tampered), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err = run(t, "explain", "--verify", "--journal", p)
	if err == nil || !strings.Contains(err.Error(), "1 of 2 proofs did not reproduce") || !strings.Contains(out, "NOT REPRODUCED") {
		t.Errorf("a changed reading: %v:\n%s", err, out)
	}

	if _, _, err := run(t, "explain", "--journal", lab, "--config", "x.yaml"); err == nil || !strings.Contains(err.Error(), "add --verify") {
		t.Errorf("--config without --verify: %v", err)
	}
	if _, _, err := run(t, "explain", "--verify", "--journal", lab, "--config", filepath.Join(t.TempDir(), "none.yaml")); err == nil {
		t.Error("a --config that does not exist: no error")
	}
}
