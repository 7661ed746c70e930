package sim

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/explain"
	"github.com/crosstalk-project/crosstalk/internal/judge"
)

// Every proof the agent runs in the simulator, in five built-in scenarios
// and forty of the suite's generated runs (convicting, acquitting or
// stopped), gives its verdict again from the readings it journalled
// (explain --verify), under the proof settings it ran with: the journal
// is a faithful record of what decided.
func TestSimProofsReproduceFromTheirJournal(t *testing.T) {
	var scenarios []*Scenario
	for _, name := range []string{"alita-buslock", "alita-llc", "alita-membw", "crowd", "kyoto-permits"} {
		sc, err := Load(name)
		if err != nil {
			t.Fatal(err)
		}
		scenarios = append(scenarios, sc)
	}
	for seed := int64(1); seed <= 40; seed++ {
		c, err := GenerateSuiteCase(seed)
		if err != nil {
			t.Fatal(err)
		}
		c.Scenario.Name = fmt.Sprintf("seed %d", seed)
		scenarios = append(scenarios, c.Scenario)
	}
	checked, convictions := 0, 0
	for _, sc := range scenarios {
		dir := t.TempDir()
		var proof judge.ProofConfig
		_, err := Run(t.Context(), sc, Options{Policies: []string{PolicyCrosstalk}, Agent: func(c *agent.Config) {
			c.StateDir = filepath.Join(dir, "state")
			proof = c.Proof.ProofConfig
		}})
		if err != nil {
			t.Fatalf("%s: %v", sc.Name, err)
		}
		r, err := explain.Explain(agent.JournalPath(filepath.Join(dir, "state")), explain.Options{Verify: &proof})
		if err != nil {
			t.Fatalf("%s: %v", sc.Name, err)
		}
		checked += r.Checked
		for _, e := range r.Entries {
			if e.Proof == nil || e.Proof.Check == nil {
				continue
			}
			if e.Proof.Verdict == judge.ProofGuilty {
				convictions++
			}
			if c := e.Proof.Check; !c.Reproduced {
				t.Errorf("%s: %s's proof (%s after %d trials) does not reproduce: %+v", sc.Name, e.Name, e.Proof.Verdict, e.Proof.Trials, *c)
			}
		}
	}
	// Enough proofs, convictions among them, that the check says something.
	if checked < 30 || convictions < 5 {
		t.Errorf("checked %d proofs, %d convictions; want at least 30 and 5", checked, convictions)
	}
	t.Logf("%d proofs in %d runs, %d convictions, every one reproduced", checked, len(scenarios), convictions)
}
