package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/testenv"
)

// helperEnv makes this test binary, run again as a child, play a part in
// a test instead of running the tests.
const helperEnv = "CROSSTALK_SAFETY_HELPER"

// victim is a tenant cgroup a child process throttles: a real cgroup where
// the test runs as root with a writable cpu controller, else one in a copy
// of a captured host tree.
type victim struct {
	root, cgroup string
	quota        func() string // "QUOTA/PERIOD" as the kernel shows it
}

func newVictim(t *testing.T) victim {
	t.Helper()
	if os.Geteuid() == 0 {
		if h, l, err := liveCgroups(); err == nil {
			name := fmt.Sprintf("/crosstalk-test-safety-%d/%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
			g, err := cgroup.Create(h, l, name, cpuset.Of(0))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cgroup.RemoveTree(h, l, filepath.Dir(name), time.Second) })
			return victim{root: "/", cgroup: name, quota: func() string {
				q, err := g.CPUQuota()
				if err != nil {
					t.Fatal(err)
				}
				return fmt.Sprintf("%d/%d", usecs(q.Quota), q.Period.Microseconds())
			}}
		}
	}
	root := filepath.Join(t.TempDir(), "host")
	if out, err := exec.Command("cp", "-a", tree("dev-epyc-vm"), root).CombinedOutput(); err != nil {
		t.Fatalf("copy tree: %v\n%s", err, out)
	}
	cg := filepath.Join(root, "sys/fs/cgroup/cpu/crosstalk-safety/victim")
	os.MkdirAll(cg, 0o755)
	os.WriteFile(filepath.Join(cg, "cpu.cfs_period_us"), []byte("100000\n"), 0o644)
	os.WriteFile(filepath.Join(cg, "cpu.cfs_quota_us"), []byte("-1\n"), 0o644)
	return victim{root: root, cgroup: "/crosstalk-safety/victim", quota: func() string {
		return quotaOf(t, filepath.Join(cg, "cpu.cfs_quota_us")) + "/" + quotaOf(t, filepath.Join(cg, "cpu.cfs_period_us"))
	}}
}

func liveCgroups() (*host.Host, cgroup.Layout, error) {
	h, err := host.Open("/")
	if err != nil {
		return nil, cgroup.Layout{}, err
	}
	l, err := cgroup.Detect(h)
	if err != nil || l.CPUControl() == "" {
		h.Close()
		return nil, l, fmt.Errorf("no cpu controller: %v", err)
	}
	return h, l, nil
}

func usecs(d time.Duration) int64 {
	if d <= 0 {
		return -1
	}
	return d.Microseconds()
}

// throttleSequence is what the agent writes to a polluter's quota through
// one episode: a proof's two capped trials and their releases (the second
// cap finds its intent still on disk), a throttle, two tightenings, a
// relaxation, the final release and the agent's flush of it — 6 state
// saves (throttleSaves).
var throttleSequence = []struct {
	restore, flush bool
	q              cgroup.Quota
}{
	{q: cgroup.Quota{Quota: time.Millisecond, Period: 100 * time.Millisecond}},
	{restore: true},
	{q: cgroup.Quota{Quota: time.Millisecond, Period: 100 * time.Millisecond}},
	{restore: true},
	{q: cgroup.Quota{Quota: 8 * time.Millisecond, Period: 16 * time.Millisecond}},
	{q: cgroup.Quota{Quota: 3 * time.Millisecond, Period: 16 * time.Millisecond}},
	{q: cgroup.Quota{Quota: 1 * time.Millisecond, Period: 16 * time.Millisecond}},
	{q: cgroup.Quota{Quota: 3 * time.Millisecond, Period: 16 * time.Millisecond}},
	{restore: true},
	{flush: true},
}

// throttleSaves is how many state saves throttleSequence makes.
const throttleSaves = 6

// TestHelperThrottleSequence is the child of the kill test: it runs the
// real actuator through throttleSequence and SIGKILLs itself at one state
// save, before or after it reaches the disk.
func TestHelperThrottleSequence(t *testing.T) {
	if os.Getenv(helperEnv) != "throttle" {
		t.Skip("the child of TestKillAtEveryStateWriteStrandsNothing")
	}
	killAt, _ := strconv.Atoi(os.Getenv("KILL_AT"))
	killAfter := os.Getenv("KILL_WHEN") == "after"
	h, err := host.Open(os.Getenv("HOST_ROOT"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := cgroup.Detect(h)
	if err != nil {
		t.Fatal(err)
	}
	st, err := act.OpenState(agent.StatePath(os.Getenv("STATE_DIR")))
	if err != nil {
		t.Fatal(err)
	}
	saves := 0
	st.SetSaveHook(func(saved bool) error {
		if !saved {
			saves++
		}
		if saves == killAt && saved == killAfter {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			time.Sleep(time.Minute)
		}
		return nil
	})
	q := &act.CPUQuota{Host: h, Layout: l, State: st}
	cg := os.Getenv("CGROUP")
	for _, step := range throttleSequence {
		switch {
		case step.flush:
			err = q.Flush()
		case step.restore:
			err = q.Restore(t.Context(), cg)
		default:
			err = q.Apply(t.Context(), cg, "victim", step.q)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// kill -9 at every state write of a real throttle sequence, before and
// after the write reaches the disk, then `crosstalk restore`: nothing is
// ever stranded, and restore's report and exit status say what it did.
func TestKillAtEveryStateWriteStrandsNothing(t *testing.T) {
	v := newVictim(t)
	original := v.quota()
	for killAt := 1; killAt <= throttleSaves+1; killAt++ {
		for _, when := range []string{"before", "after"} {
			if killAt == throttleSaves+1 && when == "after" {
				continue
			}
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperThrottleSequence$", "-test.count=1")
			cmd.Env = append(os.Environ(), helperEnv+"=throttle", "KILL_AT="+strconv.Itoa(killAt), "KILL_WHEN="+when,
				"HOST_ROOT="+v.root, "STATE_DIR="+dir, "CGROUP="+v.cgroup)
			out, err := cmd.CombinedOutput()
			killed := false
			if ee, ok := err.(*exec.ExitError); ok {
				ws := ee.Sys().(syscall.WaitStatus)
				killed = ws.Signaled() && ws.Signal() == syscall.SIGKILL
			}
			if killAt <= throttleSaves && !killed {
				t.Fatalf("kill at save %d %s: child not killed: %v\n%s", killAt, when, err, out)
			}
			if killAt == throttleSaves+1 && err != nil {
				t.Fatalf("child without a kill: %v\n%s", err, out)
			}
			left := v.quota()
			var entries int
			if st, err := act.OpenState(agent.StatePath(dir)); err == nil {
				entries = len(st.Entries())
			}
			stdout, _, rerr := run(t, "restore", "--root", v.root, "--state-dir", dir)
			if rerr != nil {
				t.Errorf("kill at save %d %s (left %s): restore failed: %v\n%s", killAt, when, left, rerr, stdout)
			}
			if got := v.quota(); got != original {
				t.Errorf("kill at save %d %s: STRANDED at %s after restore (original %s)\n%s", killAt, when, got, original, stdout)
			}
			// What restore says matches what it found.
			var want string
			switch {
			case entries == 0:
				want = "nothing to restore"
			case left != original:
				want = "restored 1 change(s)"
			default:
				want = "skipped, already at their original quota: 1"
			}
			if !strings.Contains(stdout, want) {
				t.Errorf("kill at save %d %s (left %s, %d entries): restore said\n%s\nwant %q", killAt, when, left, entries, stdout, want)
			}
			if st, err := act.OpenState(agent.StatePath(dir)); err == nil && len(st.Entries()) != 0 {
				t.Errorf("kill at save %d %s: entries left after restore: %+v", killAt, when, st.Entries())
			}
		}
	}
}

// TestHelperSignal is the child of the signal test: it sets up signals as
// `crosstalk run` does, throttles the victim, says so, and restores when
// its context ends — the agent's shutdown path.
func TestHelperSignal(t *testing.T) {
	if os.Getenv(helperEnv) != "signal" {
		t.Skip("the child of TestEveryTerminatingSignalRestores")
	}
	ctx, hup, cancel := notifyAgent(context.Background())
	defer cancel()
	go func() {
		for range hup {
			fmt.Println("reload")
		}
	}()
	h, _ := host.Open(os.Getenv("HOST_ROOT"))
	l, _ := cgroup.Detect(h)
	st, _ := act.OpenState(agent.StatePath(os.Getenv("STATE_DIR")))
	q := &act.CPUQuota{Host: h, Layout: l, State: st}
	cg := os.Getenv("CGROUP")
	if err := q.Apply(t.Context(), cg, "victim", cgroup.Quota{Quota: time.Millisecond, Period: 16 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	fmt.Println("throttled")
	<-ctx.Done()
	if err := q.Restore(t.Context(), cg); err != nil {
		t.Fatal(err)
	}
	fmt.Println("restored")
}

// Every terminating signal ends the agent through its restore; SIGHUP
// (a reload) and SIGPIPE do not end it at all.
func TestEveryTerminatingSignalRestores(t *testing.T) {
	testenv.LockAgent(t) // one agent per host: the other packages' live agents wait
	v := newVictim(t)
	original := v.quota()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1,
		syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGPWR, syscall.Signal(40), syscall.SIGPIPE} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperSignal$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), helperEnv+"=signal", "HOST_ROOT="+v.root, "STATE_DIR="+t.TempDir(), "CGROUP="+v.cgroup)
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(out.String(), "throttled") {
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					t.Fatalf("child never throttled:\n%s", out.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			if got := v.quota(); got != "1000/16000" {
				t.Fatalf("child's throttle = %s", got)
			}
			cmd.Process.Signal(sig)
			if sig == syscall.SIGPIPE || sig == syscall.SIGHUP {
				time.Sleep(200 * time.Millisecond)
				if cmd.ProcessState != nil || !strings.Contains(out.String(), "throttled") || strings.Contains(out.String(), "restored") {
					t.Fatalf("%v ended the agent:\n%s", sig, out.String())
				}
				if sig == syscall.SIGHUP && !strings.Contains(out.String(), "reload") {
					t.Errorf("SIGHUP did not arrive as a reload:\n%s", out.String())
				}
				cmd.Process.Signal(syscall.SIGTERM)
			}
			err := cmd.Wait()
			if err != nil || !strings.Contains(out.String(), "restored") {
				t.Errorf("after %v: %v\n%s", sig, err, out.String())
			}
			if got := v.quota(); got != original {
				t.Errorf("after %v the quota is %s, want %s", sig, got, original)
			}
		})
	}
}

// exitCode is the status Execute would return for err.
func exitCode(err error) int {
	var ee exitError
	switch {
	case err == nil:
		return 0
	case asExit(err, &ee):
		return ee.code
	}
	return 2
}

// A configuration with a typo does not keep restore from the state
// directory it names.
func TestRestoreWithBrokenConfig(t *testing.T) {
	root, dir, qf := throttledTree(t)
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("state_dir: %s\nintervall: 1s\njudge:\n  ratio: .nan\n", dir)), 0o644)
	out, _, err := run(t, "restore", "--root", root, "--config", cfg)
	if err != nil || quotaOf(t, qf) != "-1" {
		t.Fatalf("restore with a broken config: %v, quota %s\n%s", err, quotaOf(t, qf), out)
	}
	if !strings.Contains(out, "warning: configuration not valid") || !strings.Contains(out, "restored 1 change(s)") {
		t.Errorf("output:\n%s", out)
	}
	// A config that does not even exist: the --state-dir flag still works.
	if _, _, err := run(t, "restore", "--root", root, "--config", filepath.Join(t.TempDir(), "none.yaml"), "--state-dir", dir); err != nil {
		t.Errorf("restore with a missing config: %v", err)
	}
}

// Restore's exit status tells restored, left-alone and refused apart.
func TestRestoreExitStatus(t *testing.T) {
	// Someone changed the quota since crosstalk set it: left, exit 5.
	root, dir, qf := throttledTree(t)
	os.WriteFile(qf, []byte("50000\n"), 0o644)
	out, _, err := run(t, "restore", "--root", root, "--state-dir", dir)
	if exitCode(err) != restoreExitLeftOver || !strings.Contains(out, "left, changed by someone else since crosstalk set it: 1") || quotaOf(t, qf) != "50000" {
		t.Errorf("foreign change: exit %d (%v), quota %s\n%s", exitCode(err), err, quotaOf(t, qf), out)
	}
	// A running agent holds the directory: nothing done, exit 3.
	root, dir, qf = throttledTree(t)
	lock, lerr := agent.LockStateDir(dir)
	if lerr != nil {
		t.Fatal(lerr)
	}
	out, _, err = run(t, "restore", "--root", root, "--state-dir", dir)
	lock.Unlock()
	if exitCode(err) != restoreExitLocked || !strings.Contains(out, "nothing done") || quotaOf(t, qf) != "1000" {
		t.Errorf("locked: exit %d (%v), quota %s\n%s", exitCode(err), err, quotaOf(t, qf), out)
	}
	// Restored: exit 0.
	out, _, err = run(t, "restore", "--root", root, "--state-dir", dir)
	if exitCode(err) != 0 || quotaOf(t, qf) != "-1" {
		t.Errorf("restore: exit %d (%v)\n%s", exitCode(err), err, out)
	}
}

// On a read-only state directory restore still restores, and says (exit
// 4) that the file could not be updated; a later restore on a writable one
// finds it done.
func TestRestoreOnReadOnlyStateDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a read-only bind mount")
	}
	root, dir, qf := throttledTree(t)
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v", err)
	}
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	if err := syscall.Mount("", dir, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Skipf("read-only remount: %v", err)
	}
	out, _, err := run(t, "restore", "--root", root, "--state-dir", dir)
	if exitCode(err) != restoreExitUnsaved || quotaOf(t, qf) != "-1" || !strings.Contains(out, "state file NOT updated") {
		t.Errorf("read-only: exit %d (%v), quota %s\n%s", exitCode(err), err, quotaOf(t, qf), out)
	}
	syscall.Unmount(dir, syscall.MNT_DETACH)
	out, _, err = run(t, "restore", "--root", root, "--state-dir", dir)
	if exitCode(err) != 0 || !strings.Contains(out, "skipped, already at their original quota: 1") {
		t.Errorf("after: exit %d (%v)\n%s", exitCode(err), err, out)
	}
}

// A corrupt state file does not stop the agent (a restart loop under
// systemd would protect nobody): it is moved aside, journalled, and the
// throttle it covered, crosstalk-shaped, is flagged rather than adopted.
func TestRunMovesACorruptStateAsideAndFlagsWhatItCovered(t *testing.T) {
	root, dir, qf := throttledTree(t) // left at 1000/16000
	os.WriteFile(filepath.Join(filepath.Dir(qf), "tasks"), nil, 0o644)
	os.WriteFile(agent.StatePath(dir), []byte("{\"entries\": {\"/crosstalk-ops-te"), 0o600)
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("listen: \"off\"\nstate_dir: %s\ntenants:\n  builtin: false\n  globs: [\"/crosstalk-ops-test/*\"]\n", dir)), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, stderr, err := runCtx(ctx, "run", "--root", root, "--config", cfg)
	if err != nil {
		t.Fatalf("run with a corrupt state file: %v\n%s", err, stderr)
	}
	moved, _ := filepath.Glob(agent.StatePath(dir) + ".corrupt-*")
	if len(moved) != 1 {
		t.Errorf("corrupt state not moved aside: %v\n%s", moved, stderr)
	}
	j, _ := os.ReadFile(agent.JournalPath(dir))
	if !strings.Contains(string(j), "moved aside") || !strings.Contains(string(j), `"kind":"unowned"`) {
		t.Errorf("journal:\n%s", j)
	}
	if q := quotaOf(t, qf); q != "1000" {
		t.Errorf("the unowned throttle was touched: %s", q)
	}
	// restore lists it; --adopt lifts it.
	out, _, err := run(t, "restore", "--root", root, "--state-dir", dir)
	if exitCode(err) != restoreExitLeftOver || !strings.Contains(out, "unowned throttles left in place") {
		t.Errorf("restore: exit %d\n%s", exitCode(err), out)
	}
	out, _, err = run(t, "restore", "--root", root, "--state-dir", dir, "--adopt")
	if err != nil || quotaOf(t, qf) != "-1" || !strings.Contains(out, "adopted and lifted: 1") {
		t.Errorf("restore --adopt: %v, quota %s\n%s", err, quotaOf(t, qf), out)
	}
}

// A state directory others may write, or owned by someone else, is refused.
func TestRunRefusesAnInsecureStateDir(t *testing.T) {
	root, _, _ := throttledTree(t)
	dir := filepath.Join(t.TempDir(), "state")
	os.Mkdir(dir, 0o700)
	os.Chmod(dir, 0o777)
	_, _, err := run(t, "run", "--root", root, "--state-dir", dir, "--listen", "off")
	if !errors.Is(err, agent.ErrInsecureStateDir) {
		t.Errorf("0777 state dir: %v", err)
	}
	if os.Geteuid() == 0 {
		os.Chmod(dir, 0o700)
		os.Chown(dir, 65534, 65534)
		if _, _, err := run(t, "run", "--root", root, "--state-dir", dir, "--listen", "off"); !errors.Is(err, agent.ErrInsecureStateDir) {
			t.Errorf("state dir owned by nobody: %v", err)
		}
	}
	// A symlink planted as the lock file is refused, not written through.
	dir2 := t.TempDir()
	target := filepath.Join(t.TempDir(), "target")
	os.WriteFile(target, []byte("precious\n"), 0o644)
	os.Symlink(target, agent.LockPath(dir2))
	if _, err := agent.LockStateDir(dir2); !errors.Is(err, act.ErrNotRegular) {
		t.Errorf("symlinked lock: %v", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "precious\n" {
		t.Errorf("written through the link: %q", b)
	}
}

// Two agents on one host never both run, whatever their state directories.
func TestOneAgentPerHost(t *testing.T) {
	// A tree whose proc/self names this process reads as a live host.
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "proc"), 0o755)
	os.Symlink(strconv.Itoa(os.Getpid()), filepath.Join(root, "proc", "self"))
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	first, err := agent.LockHost(h, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agent.LockHost(h, t.TempDir()); !errors.Is(err, agent.ErrHostLocked) || !strings.Contains(err.Error(), "state_dir") {
		t.Errorf("second agent: %v", err)
	}
	first.Unlock()
	second, err := agent.LockHost(h, t.TempDir())
	if err != nil {
		t.Errorf("after the first stopped: %v", err)
	}
	second.Unlock()
}
