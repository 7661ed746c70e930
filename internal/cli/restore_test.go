package cli

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

// throttledTree is a copy of the dev machine's captured tree (hybrid cgroups,
// cpu controller at /sys/fs/cgroup/cpu) with one tenant cgroup that a
// SIGKILLed agent left throttled: its quota written and the original
// recorded in the state file of stateDir.
func throttledTree(t *testing.T) (root, stateDir, quotaFile string) {
	t.Helper()
	root = filepath.Join(t.TempDir(), "host")
	if out, err := exec.Command("cp", "-a", tree("dev-epyc-vm"), root).CombinedOutput(); err != nil {
		t.Fatalf("copy tree: %v\n%s", err, out)
	}
	cg := filepath.Join(root, "sys/fs/cgroup/cpu/crosstalk-ops-test/left")
	os.MkdirAll(cg, 0o755)
	os.WriteFile(filepath.Join(cg, "cpu.cfs_period_us"), []byte("100000\n"), 0o644)
	os.WriteFile(filepath.Join(cg, "cpu.cfs_quota_us"), []byte("-1\n"), 0o644)
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := cgroup.Detect(h)
	if err != nil {
		t.Fatal(err)
	}
	stateDir = t.TempDir()
	st, err := act.OpenState(agent.StatePath(stateDir))
	if err != nil {
		t.Fatal(err)
	}
	if err := (&act.CPUQuota{Host: h, Layout: l, State: st}).Apply(t.Context(), "/crosstalk-ops-test/left", "left",
		cgroup.Quota{Quota: time.Millisecond, Period: 16 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	quotaFile = filepath.Join(cg, "cpu.cfs_quota_us")
	if b, _ := os.ReadFile(quotaFile); strings.TrimSpace(string(b)) != "1000" {
		t.Fatalf("setup: quota %q", b)
	}
	return root, stateDir, quotaFile
}

func quotaOf(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestRestoreCommandUndoesAKilledAgentsThrottle(t *testing.T) {
	root, dir, qf := throttledTree(t)
	out, _, err := run(t, "restore", "--root", root, "--state-dir", dir)
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	if !strings.Contains(out, "restored 1 change(s)") || !strings.Contains(out, "cpu_quota") {
		t.Errorf("output: %q", out)
	}
	if q := quotaOf(t, qf); q != "-1" {
		t.Errorf("quota after restore = %s, want -1 (unlimited, the original)", q)
	}
	out, _, err = run(t, "restore", "--root", root, "--state-dir", dir, "--json")
	var rep agent.RestoreReport
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil || rep.Total() != 0 {
		t.Errorf("second restore: %v\n%s", err, out)
	}
	// With no state at all (a fresh host), restore is a quiet no-op: the
	// systemd unit runs it on every stop.
	out, _, err = run(t, "restore", "--root", root, "--state-dir", filepath.Join(t.TempDir(), "none"))
	if err != nil || !strings.Contains(out, "nothing to restore") {
		t.Errorf("restore without state: %v %q", err, out)
	}
}

// An upgrade or restart after a kill -9: the new agent restores what the
// old one left before anything else, and exits with nothing throttled.
func TestRunRestartRestoresATreeThrottle(t *testing.T) {
	root, dir, qf := throttledTree(t)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, stderr, err := runCtx(ctx, "run", "--root", root, "--state-dir", dir, "--listen", "off", "--interval", "100ms")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stderr)
	}
	if q := quotaOf(t, qf); q != "-1" {
		t.Errorf("quota after the agent restarted = %s, want -1\n%s", q, stderr)
	}
	j, _ := os.ReadFile(agent.JournalPath(dir))
	if !strings.Contains(string(j), `"kind":"restore"`) {
		t.Errorf("journal lacks the restore:\n%s", j)
	}
}

// restore will not undo throttles behind a running agent's back.
func TestRestoreRefusesWhileTheAgentRuns(t *testing.T) {
	root, dir, qf := throttledTree(t)
	lock, err := agent.LockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Unlock()
	_, _, err = run(t, "restore", "--root", root, "--state-dir", dir)
	if err == nil || !strings.Contains(err.Error(), "held by pid") {
		t.Errorf("restore under a running agent: %v", err)
	}
	if q := quotaOf(t, qf); q != "1000" {
		t.Errorf("quota changed behind the agent: %s", q)
	}
	_, _, err = run(t, "run", "--root", root, "--state-dir", dir, "--listen", "off")
	if err == nil || !strings.Contains(err.Error(), "state directory in use") {
		t.Errorf("a second agent on the same state dir: %v", err)
	}
}

// `crosstalk run` needs no configuration file: the defaults are valid and
// it runs (here against a host tree, watching only).
func TestRunWithoutConfig(t *testing.T) {
	root, _, _ := throttledTree(t)
	dir := filepath.Join(t.TempDir(), "state")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, stderr, err := runCtx(ctx, "run", "--root", root, "--state-dir", dir, "--listen", "off")
	if err != nil {
		t.Fatalf("run with no config: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "crosstalk agent running") || !strings.Contains(stderr, "interval=500ms") {
		t.Errorf("no config: log lacks the default interval:\n%s", stderr)
	}
}
