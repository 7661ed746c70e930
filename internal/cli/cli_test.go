package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/testenv"
)

func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return runCtx(ctx, args...)
}

// runCtx runs the real command tree with args, as main does.
func runCtx(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	root := NewRoot(Build{Version: "v0.0.0-test", Commit: "abc123"}, &out, &errOut)
	root.SetArgs(args)
	err = root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

func tree(name string) string { return filepath.Join("..", "..", "testdata", "hosts", name) }

func TestDoctorJSON(t *testing.T) {
	out, _, err := run(t, "doctor", "--root", tree("intel-skx-2s"), "--json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	caps := m["capabilities"].(map[string]any)
	if caps["cgroup"].(map[string]any)["mode"] != "v2" {
		t.Errorf("mode = %v", caps["cgroup"])
	}
}

// A capture of a tree, read back, must give the same report: the recorder
// saw every file doctor used.
func TestCaptureRoundTrip(t *testing.T) {
	for _, name := range []string{"dev-epyc-vm", "intel-emr-vm", "intel-skx-2s", "amd-milan-1s"} {
		t.Run(name, func(t *testing.T) { checkCaptureRoundTrip(t, tree(name)) })
	}
}

func checkCaptureRoundTrip(t *testing.T, root string) {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "cap")
	orig, _, err := run(t, "doctor", "--root", root, "--json", "--capture", dst)
	if err != nil {
		t.Fatal(err)
	}
	again, _, err := run(t, "doctor", "--root", dst, "--json")
	if err != nil {
		t.Fatal(err)
	}
	// Messages may name the root (e.g. "the root … is not this
	// machine"): both roots read as ROOT.
	strip := func(s string) string {
		for _, r := range []string{root, dst} {
			if abs, err := filepath.Abs(r); err == nil {
				s = strings.ReplaceAll(s, abs, "ROOT")
			}
		}
		var m map[string]any
		json.Unmarshal([]byte(s), &m)
		delete(m, "root")
		b, _ := json.Marshal(m)
		return string(b)
	}
	if strip(orig) != strip(again) {
		t.Errorf("report from the capture differs from the original")
	}
}

// `crosstalk doctor --root DIR` on a real machine's lscpu dump (see
// testdata/lscpu/README.md), whose nodes have only a cpumap: the report
// shows its 8 nodes and 16 L3 domains, and a capture of it keeps the cpumaps.
func TestDoctorLscpuDump(t *testing.T) {
	root := testenv.UnpackTree(t, filepath.Join("..", "..", "testdata", "lscpu", "x86_64-epyc_7451.tar.gz"))
	t.Setenv("COLUMNS", "200") // one topology line, unwrapped
	out, _, err := run(t, "doctor", "--root", root)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "96 CPUs (0-95), 2 package(s), 48 cores, 2 thread(s)/core, 8 NUMA node(s)") ||
		!strings.Contains(out, "node7: 42-47,90-95") || strings.Count(out, "  L3 #") != 16 {
		t.Errorf("doctor on the EPYC 7451 dump, want 8 nodes and 16 L3 domains:\n%s", out)
	}
	checkCaptureRoundTrip(t, root)
}

func TestBadRootExitsOne(t *testing.T) {
	_, _, err := run(t, "doctor", "--root", filepath.Join(t.TempDir(), "nope"))
	var ee exitError
	if !asExit(err, &ee) || ee.code != 1 {
		t.Errorf("err = %v, want exit code 1", err)
	}
}

func TestUsageErrors(t *testing.T) {
	if _, _, err := run(t, "doctor", "--bogus"); err == nil {
		t.Error("unknown flag accepted")
	}
	if _, _, err := run(t, "doctor", "extra-arg"); err == nil {
		t.Error("extra argument accepted")
	}
	if _, _, err := run(t, "doctor", "--root", tree("dev-epyc-vm"), "--log-level", "loud"); err == nil || !strings.Contains(err.Error(), "log-level") {
		t.Errorf("bad log level: %v", err)
	}
}

func TestHelpAndVersion(t *testing.T) {
	out, _, err := run(t, "doctor", "--help")
	if err != nil || !strings.Contains(out, "--capture") || !strings.Contains(out, "split_lock_detect") {
		t.Errorf("help: %v\n%s", err, out)
	}
	out, _, err = run(t, "version")
	if err != nil || out != "crosstalk v0.0.0-test (commit abc123)\n" {
		t.Errorf("version = %q, %v", out, err)
	}
}

func TestDoctorText(t *testing.T) {
	out, _, err := run(t, "doctor", "--root", tree("amd-milan-1s"))
	if err != nil || !strings.Contains(out, "ls_locks.bus_lock") || !strings.Contains(out, "[warn]    psi") {
		t.Errorf("text: %v\n%s", err, out)
	}
}

func TestCaptureRefusesNonEmptyDir(t *testing.T) {
	dst := t.TempDir()
	if err := os.WriteFile(filepath.Join(dst, "mine.txt"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := run(t, "doctor", "--root", tree("dev-epyc-vm"), "--capture", dst)
	if err == nil || !strings.Contains(err.Error(), "not empty") || !strings.Contains(err.Error(), "--force") {
		t.Errorf("non-empty --capture: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dst, "proc")); err == nil {
		t.Error("wrote into the refused directory")
	}
	if _, _, err := run(t, "doctor", "--root", tree("dev-epyc-vm"), "--capture", dst, "--force"); err != nil {
		t.Fatalf("--force: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dst, "proc", "cpuinfo")); err != nil {
		t.Errorf("--force did not capture: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "mine.txt")); string(b) != "keep" {
		t.Error("--force lost a file already there")
	}
	// An empty directory, and one that does not exist yet, are fine.
	for _, d := range []string{t.TempDir(), filepath.Join(t.TempDir(), "new")} {
		if _, _, err := run(t, "doctor", "--root", tree("dev-epyc-vm"), "--capture", d); err != nil {
			t.Errorf("--capture %s: %v", d, err)
		}
	}
}

// perf_event_paranoid's status depends on who runs doctor; a capture of
// this machine must replay it the same.
func TestCaptureLiveParanoidSameReplayed(t *testing.T) {
	if _, err := os.Stat("/proc/sys/kernel/perf_event_paranoid"); err != nil {
		t.Skip("no perf_event_paranoid here")
	}
	status := func(out string) string {
		var r struct {
			Checks []struct{ ID, Status, Summary string }
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		for _, c := range r.Checks {
			if c.ID == "perf_event_paranoid" {
				return c.Status + " " + c.Summary
			}
		}
		t.Fatal("no perf_event_paranoid check")
		return ""
	}
	dst := filepath.Join(t.TempDir(), "cap")
	live, _, err := run(t, "doctor", "--root", "/", "--json", "--capture", dst)
	if err != nil {
		t.Fatal(err)
	}
	replayed, _, err := run(t, "doctor", "--root", dst, "--json")
	if err != nil {
		t.Fatal(err)
	}
	if a, b := status(live), status(replayed); a != b {
		t.Errorf("live %q, replayed %q", a, b)
	}
}

func TestDoctorTextWidth(t *testing.T) {
	t.Setenv("COLUMNS", "")
	out, _, err := run(t, "doctor", "--root", tree("intel-skx-4s"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "\nVERDICT") {
		t.Errorf("no verdict:\n%s", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if n := len([]rune(l)); n > 80 {
			t.Errorf("%d wide with no terminal (80): %q", n, l)
		}
	}
	t.Setenv("COLUMNS", "120")
	out, _, _ = run(t, "doctor", "--root", tree("intel-skx-4s"))
	wide := 0
	for _, l := range strings.Split(out, "\n") {
		if n := len([]rune(l)); n > 120 {
			t.Errorf("%d wide at COLUMNS=120: %q", n, l)
		} else if n > 80 {
			wide++
		}
	}
	if wide == 0 {
		t.Error("COLUMNS=120 not followed: no line over 80")
	}
}
