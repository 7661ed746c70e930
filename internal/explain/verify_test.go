package explain

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/judge"
)

// labJournal is a journal the agent wrote in a lab run on the dev VM (the
// suite's seed 6017, default settings): a bystander proved innocent in two
// trials, then the split-lock polluter proved in ten.
const labJournal = "testdata/lab-gen-6017.jsonl"

func TestVerifyReproducesARecordedRun(t *testing.T) {
	cfg := judge.ProofConfig{}
	cfg.Fill()
	r, err := Explain(labJournal, Options{Verify: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	if r.Checked != 2 || r.Unreproduced != 0 {
		t.Fatalf("checked %d proofs, %d not reproduced; want 2 and 0", r.Checked, r.Unreproduced)
	}
	verdicts := map[string]string{}
	for _, e := range r.Entries {
		if e.Proof == nil {
			continue
		}
		c := e.Proof.Check
		if c == nil || !c.Reproduced || c.Verdict != e.Proof.Verdict || c.Trials != e.Proof.Trials || c.Diverged != 0 {
			t.Errorf("%s: check %+v of a %s after %d trials", e.Name, c, e.Proof.Verdict, e.Proof.Trials)
		}
		verdicts[e.Name] = e.Proof.Verdict
	}
	if verdicts["cache-1"] != judge.ProofInnocent || verdicts["polluter"] != judge.ProofGuilty {
		t.Errorf("verdicts %v", verdicts)
	}
	var b bytes.Buffer
	if err := Render(&b, r); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "checked: its readings, scored again, give every trial as recorded and the same verdict"); n != 2 {
		t.Errorf("%d proofs told as checked:\n%s", n, b.String())
	}
	if !strings.HasSuffix(b.String(), "verified: every one of 2 proof(s) gives its recorded verdict from its readings\n") {
		t.Errorf("no summary at the end:\n%s", b.String())
	}
	// A journal with no proof says so.
	r, err = Explain(fixture(t), Options{Verify: &cfg, Tenant: "shop/db"})
	if err != nil {
		t.Fatal(err)
	}
	if out := mustRender(t, r); r.Checked != 0 || !strings.HasSuffix(out, "verified: no proof with recorded trials to score again\n") {
		t.Errorf("a tenant never proved: checked %d:\n%s", r.Checked, out)
	}

	// Without Verify nothing is checked.
	if r, _ := Explain(labJournal, Options{}); r.Checked != 0 || strings.Contains(mustRender(t, r), "checked:") {
		t.Error("a proof checked without Verify")
	}
}

// A reading changed after the fact, or other proof settings, show at the
// trial they first change.
func TestVerifyFindsWhatDoesNotReproduce(t *testing.T) {
	raw, err := os.ReadFile(labJournal)
	if err != nil {
		t.Fatal(err)
	}
	// The polluter's verdict: its third trial's freed readings set to the
	// quiet level, as if the storm had not been there.
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	changed := 0
	for i, l := range lines {
		var e map[string]any
		if json.Unmarshal([]byte(l), &e) != nil || e["name"] != "polluter" || !strings.HasPrefix(e["detail"].(string), "polluter:") {
			continue
		}
		trial := e["evidence"].(map[string]any)["trials"].([]any)[2].(map[string]any)
		trial["freed"] = []float64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		lines[i] = string(b)
		changed++
	}
	if changed != 1 {
		t.Fatalf("changed %d verdicts, want the polluter's", changed)
	}
	p := filepath.Join(t.TempDir(), "journal.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := judge.ProofConfig{}
	cfg.Fill()
	r, err := Explain(p, Options{Verify: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	if r.Checked != 2 || r.Unreproduced != 1 {
		t.Fatalf("checked %d, %d not reproduced; want 2 and 1", r.Checked, r.Unreproduced)
	}
	if out := mustRender(t, r); !strings.Contains(out, "NOT REPRODUCED: trial 3 scores otherwise from its readings") ||
		!strings.HasSuffix(out, "verified: 1 of 2 proof(s) NOT REPRODUCED from their readings\n") {
		t.Errorf("the changed reading is not told:\n%s", out)
	}

	// The recorded run under a smaller bet: neither proof reproduces.
	other := cfg
	other.Bet = 0.5
	if r, _ := Explain(labJournal, Options{Verify: &other}); r.Unreproduced != 2 {
		t.Errorf("with bet 0.5: %d of %d not reproduced, want 2", r.Unreproduced, r.Checked)
	}
	// A tenant asked about counts only its own proofs.
	r, _ = Explain(p, Options{Verify: &cfg, Tenant: "cache-1"})
	if r.Checked != 1 || r.Unreproduced != 0 {
		t.Errorf("cache-1 alone: checked %d, %d not reproduced", r.Checked, r.Unreproduced)
	}
}

func mustRender(t *testing.T, r *Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := Render(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
