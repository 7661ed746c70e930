package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/testenv"
)

func TestRunRejectsBadConfig(t *testing.T) {
	f := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(f, []byte("interval: 1s\nprobe:\n  cpus_per_domian: 2\n"), 0o644)
	_, _, err := run(t, "run", "--config", f, "--root", tree("dev-epyc-vm"))
	if err == nil || !strings.Contains(err.Error(), `line 3: unknown key "cpus_per_domian" (did you mean "cpus_per_domain"?)`) {
		t.Errorf("bad config: %v", err)
	}
	if _, _, err := run(t, "run", "--config", filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("missing config accepted")
	}
}

// A crosstalk killed with -9 left a tenant throttled and its state file
// behind: the next `crosstalk run` restores the quota before anything else,
// and on SIGTERM (here: its context ending) exits with nothing throttled.
func TestRunRestoresWhatAKilledAgentLeft(t *testing.T) {
	testenv.LockAgent(t) // one agent per host: the other packages' live agents wait
	h, l := testenv.LiveCgroups(t)
	name := fmt.Sprintf("/crosstalk-test-run-%d/left", os.Getpid())
	g, err := cgroup.Create(h, l, name, cpuset.Of(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cgroup.RemoveTree(h, l, filepath.Dir(name), time.Second)

	dir := t.TempDir()
	st, _ := act.OpenState(agent.StatePath(dir))
	q := &act.CPUQuota{Host: h, Layout: l, State: st}
	if err := q.Apply(t.Context(), name, "left", cgroup.Quota{Quota: time.Millisecond, Period: 16 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if cur, _ := g.CPUQuota(); cur.Unlimited() {
		t.Fatal("setup: not throttled")
	}

	cfg := filepath.Join(dir, "crosstalk.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("interval: 100ms\nlisten: \"off\"\nstate_dir: %s\ntenants:\n  builtin: false\n  globs: [%q]\n", dir, filepath.Dir(name)+"/*")), 0o644)
	var out, errOut bytes.Buffer
	root := NewRoot(Build{Version: "test"}, &out, &errOut)
	root.SetArgs([]string{"run", "--config", cfg})
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatalf("run: %v\n%s", err, errOut.String())
	}
	if cur, err := g.CPUQuota(); err != nil || !cur.Unlimited() {
		t.Errorf("quota after restart = %v, %v; want unlimited", cur, err)
	}
	var doc struct{ Entries map[string]any }
	b, _ := os.ReadFile(agent.StatePath(dir))
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.Entries) != 0 {
		t.Errorf("state file after restart: %s (%v)", b, err)
	}
	j, _ := os.ReadFile(agent.JournalPath(dir))
	for _, k := range []string{`"kind":"restore"`, `"kind":"start"`, `"kind":"stop"`} {
		if !strings.Contains(string(j), k) {
			t.Errorf("journal lacks %s:\n%s", k, j)
		}
	}
}

// --web.listen-address is --listen under the name Prometheus exporters
// use, and --web.config.file is checked before anything starts.
func TestRunWebFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--web.listen-address", "127.0.0.1:99999"}, `listen: "127.0.0.1:99999": port "99999" outside 0-65535`},
		{[]string{"--listen", "127.0.0.1:70000"}, `listen: "127.0.0.1:70000": port "70000" outside 0-65535`},
		{[]string{"--web.config.file", filepath.Join(t.TempDir(), "absent.yml")}, "web_config_file: "},
	} {
		_, _, err := run(t, append([]string{"run", "--root", tree("dev-epyc-vm")}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("run %v: %v, want %q", c.args, err, c.want)
		}
	}
}
