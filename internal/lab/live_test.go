package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/testenv"
)

// These tests run real tenants in real cgroups: they need root and a host
// with cpu and cpuset controllers, and skip otherwise. They keep split locks
// well under 2 s in total.

var crosstalkBin string // built once by TestMain

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "crosstalk-lab-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	crosstalkBin = filepath.Join(dir, "crosstalk")
	build := exec.Command("go", "build", "-o", crosstalkBin, "../../cmd/crosstalk")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building crosstalk for the lab tests: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func liveHost(t *testing.T) (*host.Host, cgroup.Layout) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("lab tests need root to create cgroups")
	}
	testenv.LockCPUs(t, 10*time.Minute)
	h, err := host.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	s := &Scenario{Tenants: []Tenant{{Name: "x", cpus: mustCPUs(t, "0")}}}
	l, err := Preflight(h, s)
	if err != nil {
		t.Skipf("this host cannot run the lab: %v", err)
	}
	return h, l
}

func mustCPUs(t *testing.T, s string) (c cpuset.Set) {
	t.Helper()
	if err := c.UnmarshalText([]byte(s)); err != nil {
		t.Fatal(err)
	}
	return c
}

// twoCPUs picks the victim's and the others' CPUs: 1 and 0 where there are
// two, 0 for both on a one-CPU host.
func twoCPUs(t *testing.T, h *host.Host) (victim, other string) {
	b, _ := h.ReadString("/sys/devices/system/cpu/online")
	if b == "0" {
		return "0", "0"
	}
	return "1", "0"
}

// leftovers lists processes still running the test's crosstalk binary, and
// lab cgroups of this test process.
func leftovers(t *testing.T, h *host.Host, l cgroup.Layout, labPID int) (procs []string, groups []string) {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err == nil && exe == crosstalkBin {
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			procs = append(procs, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	for _, d := range cgroup.Open(h, l, labRoot).Dirs() {
		runs, _ := h.ReadDir(d)
		for _, r := range runs {
			if strings.HasPrefix(r.Name(), fmt.Sprintf("run-%d-", labPID)) {
				groups = append(groups, filepath.Join(d, r.Name()))
			}
		}
	}
	return procs, groups
}

func assertClean(t *testing.T, h *host.Host, l cgroup.Layout, labPID int) {
	t.Helper()
	// Give killed processes a moment to be reaped by their parents.
	deadline := time.Now().Add(3 * time.Second)
	for {
		procs, groups := leftovers(t, h, l, labPID)
		if len(procs) == 0 && len(groups) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("left behind: processes %v, cgroups %v", procs, groups)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestLiveRunNoneAndStatic(t *testing.T) {
	h, l := liveHost(t)
	vc, oc := twoCPUs(t, h)
	s, err := Parse([]byte(fmt.Sprintf(`name: live
phase: 700ms
tenants:
  - {name: victim, role: victim, load: chase, args: ["--size", "1MiB"], cpus: "%s"}
  - {name: busy, role: bystander, load: cpu, cpus: "%s", start: 100ms, stop: 600ms}
  - {name: steady, role: bystander, load: cpu, args: ["--rate", "1e7"], cpus: "%s"}
`, vc, oc, oc)), "live")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), s, Options{Host: h, Self: crosstalkBin, Policies: []string{"none", "static"}, Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	assertClean(t, h, l, os.Getpid())
	if so := res.Solo["victim"]; so.Value == nil || *so.Value <= 0 || so.Metric != "ns_per_access" {
		t.Errorf("victim solo = %+v", so)
	}
	if len(res.Results) != 2 || res.Results[0].Policy != "none" || res.Results[1].Policy != "static" {
		t.Fatalf("results = %+v", res.Results)
	}
	for _, pr := range res.Results {
		if pr.VictimSlowdown == nil || pr.Tenants["busy"].Slowdown == nil {
			t.Errorf("%s: missing slowdowns %+v", pr.Policy, pr)
		}
		if len(pr.Timeline.Victim) == 0 {
			t.Errorf("%s: no victim samples on the timeline", pr.Policy)
		}
		kinds := map[string]int{}
		for _, e := range pr.Timeline.Events {
			kinds[e.Tenant+"/"+e.Kind]++
			if e.Tenant == "busy" && e.Kind == "start" && (e.T < 0.09 || e.T > 0.4) {
				t.Errorf("%s: bystander started at %.3fs, want ~0.1s", pr.Policy, e.T)
			}
		}
		for _, k := range []string{"victim/start", "victim/stop", "busy/start", "busy/stop"} {
			if kinds[k] != 1 {
				t.Errorf("%s: events %v lack %s", pr.Policy, kinds, k)
			}
		}
	}
	if res.Results[0].Tenants["victim"].ThrottledSeconds != 0 || len(res.Results[0].Actions) != 0 {
		t.Errorf("none throttled something: %+v", res.Results[0])
	}
	// Static splits the 2 CPUs in use among 3 one-CPU tenants: each capped to 2/3.
	if vc != oc {
		acts := res.Results[1].Actions
		if len(acts) != 3 || acts[0].Kind != "cap" || acts[0].Quota < 0.66 || acts[0].Quota > 0.67 {
			t.Errorf("static actions = %+v", acts)
		}
	}
}

func TestLiveFailingTenantCleansUp(t *testing.T) {
	h, l := liveHost(t)
	vc, oc := twoCPUs(t, h)
	s, err := Parse([]byte(fmt.Sprintf(`name: failing
phase: 2s
tenants:
  - {name: victim, role: victim, load: cpu, cpus: "%s"}
  - name: broken
    role: polluter
    command: ["sh", "-c", "sleep 0.2; echo boom-from-tenant >&2; exit 3"]
    cpus: "%s"
`, vc, oc)), "failing")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = Run(context.Background(), s, Options{Host: h, Self: crosstalkBin, Policies: []string{"none"}})
	if err == nil || !strings.Contains(err.Error(), "broken") || !strings.Contains(err.Error(), "boom-from-tenant") {
		t.Fatalf("error = %v; want the failing tenant and its output", err)
	}
	if time.Since(start) > 3*time.Second+2*time.Second {
		t.Errorf("a failing tenant should end the run early; took %v", time.Since(start))
	}
	assertClean(t, h, l, os.Getpid())
}

func TestLiveCancelCleansUp(t *testing.T) {
	h, l := liveHost(t)
	vc, oc := twoCPUs(t, h)
	s, _ := Parse([]byte(fmt.Sprintf(`name: cancel
phase: 10s
tenants:
  - {name: victim, role: victim, load: cpu, cpus: "%s"}
  - {name: other, role: polluter, command: ["sleep", "30"], cpus: "%s"}
`, vc, oc)), "cancel")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := Run(ctx, s, Options{Host: h, Self: crosstalkBin, Policies: []string{"none"}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	assertClean(t, h, l, os.Getpid())
}

// The CLI under SIGINT: exit 130, every tenant killed, every cgroup removed.
// Under SIGKILL: tenants die with the lab (parent-death signal), and the
// next `lab cleanup` removes the cgroups it could not.
func TestLiveSignals(t *testing.T) {
	h, l := liveHost(t)
	vc, oc := twoCPUs(t, h)
	file := filepath.Join(t.TempDir(), "sig.yaml")
	os.WriteFile(file, []byte(fmt.Sprintf(`name: sig
phase: 10s
tenants:
  - {name: victim, role: victim, load: cpu, cpus: "%s"}
  - {name: sleeper, role: bystander, command: ["sleep", "60"], cpus: "%s"}
`, vc, oc)), 0o644)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(crosstalkBin, "lab", "run", file, "--policy", "none")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Inside the victim's solo phase: wait for its tenant, not a
			// fixed time (beside other packages' tests the lab takes
			// longer to start it).
			for deadline := time.Now().Add(8 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				procs, groups := leftovers(t, h, l, cmd.Process.Pid)
				if len(procs) >= 2 && len(groups) > 0 {
					break
				}
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					t.Fatalf("lab not running as expected after 8s: %v %v", procs, groups)
				}
			}
			time.Sleep(200 * time.Millisecond)
			cmd.Process.Signal(sig)
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("lab exit: %v", err)
			}
			if sig == syscall.SIGINT {
				if ee.ExitCode() != 130 {
					t.Errorf("exit code %d after SIGINT, want 130; stderr:\n%s", ee.ExitCode(), stderr.String())
				}
				assertClean(t, h, l, cmd.Process.Pid)
				return
			}
			// SIGKILL: give the parent-death signal a moment, then no process may remain.
			deadline := time.Now().Add(3 * time.Second)
			for {
				procs, _ := leftovers(t, h, l, cmd.Process.Pid)
				if len(procs) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("tenants outlived a killed lab: %v", procs)
				}
				time.Sleep(50 * time.Millisecond)
			}
			out, err := exec.Command(crosstalkBin, "lab", "cleanup").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "removed 1 stale") {
				t.Errorf("cleanup: %v %s", err, out)
			}
			assertClean(t, h, l, cmd.Process.Pid)
		})
	}
}

// A short bus-lock run (1.2 s of split locks in all): the lab's plumbing for
// the polluter, not a performance claim — those live in `crosstalk lab` runs.
// Phases of 0.6 s: with 0.4 s, while other packages' tests kept both CPUs
// busy, the victim's chase once reported nothing before its phase ended.
func TestLiveShortBuslock(t *testing.T) {
	h, l := liveHost(t)
	vc, oc := twoCPUs(t, h)
	if vc == oc {
		t.Skip("needs two CPUs")
	}
	s, _ := Load("buslock")
	s, err := s.WithPhase(600 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), s, Options{Host: h, Self: crosstalkBin, Policies: []string{"none"}, Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	assertClean(t, h, l, os.Getpid())
	pol := res.Results[0].Tenants["polluter"]
	if pol.Value == nil || *pol.Value <= 0 || res.Results[0].VictimSlowdown == nil {
		t.Fatalf("buslock result = %+v", res.Results[0])
	}
	t.Logf("victim slowdown under none with %.1fs phases: %.2fx (a measurement, not asserted)", s.Phase.Seconds(), *res.Results[0].VictimSlowdown)
}

// startsLate is a policy that records what the lab told it when it began.
type startsLate struct {
	began          time.Duration
	tenantsRunning bool
}

func (*startsLate) Name() string { return "late" }
func (p *startsLate) Begin(_ context.Context, env *PolicyEnv) error {
	p.began, p.tenantsRunning = env.Since(), env.TenantsRunning
	return nil
}
func (*startsLate) End(context.Context) error { return nil }

// A built-in load paused during its setup, before its own clock starts,
// still ends at its scheduled end: the lab tells it the wall-clock time
// (--until), where a duration alone would run in full after the resume.
func TestLivePausedInSetupKeepsItsEnd(t *testing.T) {
	h, l := liveHost(t)
	vc, oc := twoCPUs(t, h)
	s, err := Parse([]byte(fmt.Sprintf(`name: setup-pause
phase: 1500ms
tenants:
  - {name: victim, role: victim, load: chase, args: ["--size", "256KiB"], cpus: "%s"}
  - {name: big, role: bystander, load: chase, args: ["--size", "64MiB"], cpus: "%s", pause: 20ms, resume: 1000ms}
`, vc, oc)), "setup-pause")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), s, Options{Host: h, Self: crosstalkBin, Policies: []string{"none"},
		Interval: 100 * time.Millisecond, SoloVictimOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	assertClean(t, h, l, os.Getpid())
	var paused, stopped float64
	for _, e := range res.Results[0].Timeline.Events {
		if e.Tenant == "big" {
			switch e.Kind {
			case "pause":
				paused = e.T
			case "stop":
				stopped = e.T
			}
		}
	}
	// Its 64 MiB cycle takes far longer than 20 ms to build (0.13 s on the
	// dev VM), so the pause lands in its setup; run in full after the
	// resume at 1 s, it would stop at 2.5 s or later. (A 256 MiB cycle took
	// 0.55 s to build, and beside another package's tests it built past
	// 2 s.)
	if paused == 0 || paused > 0.3 || stopped < 1.0 || stopped > 2.0 {
		t.Errorf("big paused at %.2fs and stopped at %.2fs, want a pause in its setup and a stop at about 1.5s", paused, stopped)
	}
}

// A policy that starts into the phase sees the tenants already running and
// is told so; a pause window stops the tenant's processes (no CPU used while
// paused) and is marked on the timeline; SoloVictimOnly runs only the
// victim's solo phase; WithoutPolluter adds a phase with the polluter left
// out, the victim's slowdown there reported.
func TestLivePolicyStartAndPause(t *testing.T) {
	h, l := liveHost(t)
	vc, oc := twoCPUs(t, h)
	s, err := Parse([]byte(fmt.Sprintf(`name: late
phase: 1500ms
policy_start: 400ms
tenants:
  - {name: victim, role: victim, load: chase, args: ["--size", "256KiB"], cpus: "%s"}
  - {name: busy, role: polluter, load: cpu, cpus: "%s", pause: 300ms, resume: 1200ms}
`, vc, oc)), "late")
	if err != nil {
		t.Fatal(err)
	}
	pol := &startsLate{}
	reg := DefaultPolicies()
	reg["late"] = func() Policy { return pol }
	res, err := Run(context.Background(), s, Options{Host: h, Self: crosstalkBin, Policies: []string{"late"}, Registry: reg,
		Interval: 100 * time.Millisecond, SoloVictimOnly: true, WithoutPolluter: true})
	if err != nil {
		t.Fatal(err)
	}
	assertClean(t, h, l, os.Getpid())
	if !pol.tenantsRunning || pol.began < 400*time.Millisecond || pol.began > 900*time.Millisecond {
		t.Errorf("policy began at %v (tenants running: %v), want ~400ms and true", pol.began, pol.tenantsRunning)
	}
	pr := res.Results[0]
	if pr.PolicyStartSeconds < 0.4 || pr.PolicyStartSeconds > 0.9 {
		t.Errorf("policy_start_seconds = %v", pr.PolicyStartSeconds)
	}
	at := map[string]float64{}
	for _, e := range pr.Timeline.Events {
		if e.Tenant == "busy" {
			at[e.Kind] = e.T
		}
	}
	if p, r := at["pause"], at["resume"]; p < 0.3 || p > 0.6 || r < 1.2 || r > 1.5 {
		t.Errorf("busy events %v: want a pause at ~0.3s and a resume at ~1.2s", at)
	}
	// Paused for 0.9 s of a 1.5 s phase: its CPU time shows it stopped.
	if cpu := pr.Tenants["busy"].CPUSeconds; cpu > 1.0 {
		t.Errorf("busy used %.2fs of CPU in 1.5s with 0.9s paused", cpu)
	}
	if res.Solo["busy"].Value != nil || res.Solo["victim"].Value == nil {
		t.Errorf("solo values: victim %v, busy %v (want only the victim's)", res.Solo["victim"].Value, res.Solo["busy"].Value)
	}
	if res.VictimSlowdownWithoutPolluter == nil {
		t.Error("no victim slowdown without the polluter")
	}
}
