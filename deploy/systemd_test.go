package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/sense"
	"github.com/crosstalk-project/crosstalk/internal/testenv"
)

const unitFile = "systemd/crosstalk.service"

// The capabilities the unit keeps, each with the reason docs/operating.md gives.
var unitCaps = []string{"CAP_PERFMON", "CAP_DAC_OVERRIDE", "CAP_SYS_RAWIO", "CAP_SYSLOG", "CAP_SYS_NICE"}

// systemd-analyze verify checks every key and value against systemd's own
// parser (it needs no running manager). It only warns, exit 0, about unknown
// keys and bad values, so any output at all fails the test.
func TestUnitVerifies(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze not installed (apt-get install systemd)")
	}
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	// verify insists that ExecStart's binary exists: point it at the one built.
	dir := t.TempDir()
	f := filepath.Join(dir, "crosstalk.service")
	os.WriteFile(f, []byte(strings.ReplaceAll(string(b), "/usr/bin/crosstalk", binary)), 0o644)
	out, err := exec.Command("systemd-analyze", "verify", f).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	// The test can fail: a typo is reported.
	os.WriteFile(f, []byte(strings.Replace(string(b), "ProtectKernelLogs=", "ProtectKernelLog=", 1)), 0o644)
	if out, _ := exec.Command("systemd-analyze", "verify", f).CombinedOutput(); !strings.Contains(string(out), "Unknown key") {
		t.Errorf("verify did not catch an unknown key: %s", out)
	}
}

// The unit agrees with the code and the docs: where the agent keeps its
// state, how it is stopped and restored, what it may write, and why each
// capability is kept.
func TestUnitMatchesTheAgent(t *testing.T) {
	u, text := parseUnit(t, unitFile)
	svc := "Service"
	if got := "/var/lib/" + u.get(svc, "StateDirectory"); got != agent.Defaults().StateDir {
		t.Errorf("StateDirectory gives %s; the agent's default state_dir is %s", got, agent.Defaults().StateDir)
	}
	if got := u.get(svc, "ExecStart"); got != "/usr/bin/crosstalk run --config /etc/crosstalk/crosstalk.yaml" {
		t.Errorf("ExecStart = %q", got)
	}
	if got := u.get(svc, "ExecStopPost"); got != "/usr/bin/crosstalk restore --config /etc/crosstalk/crosstalk.yaml" {
		t.Errorf("ExecStopPost = %q: a SIGKILLed agent's throttles must be restored after every stop", got)
	}
	if u.get(svc, "KillSignal") != "SIGTERM" {
		t.Errorf("KillSignal = %q: the agent restores on SIGTERM", u.get(svc, "KillSignal"))
	}
	if d, err := time.ParseDuration(u.get(svc, "TimeoutStopSec")); err != nil || d < 10*time.Second {
		t.Errorf("TimeoutStopSec = %q: give the agent time to restore", u.get(svc, "TimeoutStopSec"))
	}
	// Type=notify: the agent sends READY=1, WATCHDOG=1 and STATUS= itself
	// (internal/service), and SIGHUP reloads it.
	if d, err := time.ParseDuration(u.get(svc, "WatchdogSec")); err != nil || d < time.Minute {
		t.Errorf("WatchdogSec = %q: the longest interval (1m) watches every 15s, and a ping goes out every half of WatchdogSec after a pass; give it at least 1m", u.get(svc, "WatchdogSec"))
	}
	if got := u.get(svc, "ExecReload"); got != "/bin/kill -HUP $MAINPID" {
		t.Errorf("ExecReload = %q: systemctl reload must send the agent SIGHUP", got)
	}
	for key, want := range map[string]string{
		"Type": "notify", "NotifyAccess": "main",
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectKernelTunables": "yes",
		"ProtectControlGroups": "no", "PrivateDevices": "no", "DevicePolicy": "closed",
		"ProtectProc": "default", "ProcSubset": "all", "Restart": "on-failure",
	} {
		if got := u.get(svc, key); got != want {
			t.Errorf("%s=%q, want %q", key, got, want)
		}
	}
	rw := u.words(svc, "ReadWritePaths")
	for _, p := range []string{"/sys/fs/cgroup", "-/sys/fs/resctrl", "/sys/devices/system/cpu"} {
		if !slices.Contains(rw, p) {
			t.Errorf("ReadWritePaths %v lacks %s", rw, p)
		}
	}
	if got := u[svc]["DeviceAllow"]; !slices.Equal(got, []string{"char-cpu/msr rw", "/dev/kmsg r"}) {
		t.Errorf("DeviceAllow = %q, want the MSR devices and /dev/kmsg read-only", got)
	}
	if fams := u.words(svc, "RestrictAddressFamilies"); !slices.Contains(fams, "AF_UNIX") || !slices.Contains(fams, "AF_INET") {
		t.Errorf("RestrictAddressFamilies = %v: AF_UNIX (libvirt) and AF_INET (metrics, Kubernetes API) are needed", fams)
	}
	caps := u.words(svc, "CapabilityBoundingSet")
	slices.Sort(caps)
	want := slices.Clone(unitCaps)
	slices.Sort(want)
	if !slices.Equal(caps, want) {
		t.Errorf("CapabilityBoundingSet = %v, want %v", caps, want)
	}
	// The installed default configuration keeps the listener on localhost.
	def, err := agent.LoadConfig("../examples/crosstalk.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if host, _, _ := strings.Cut(def.Listen, ":"); host != "127.0.0.1" || agent.Defaults().Listen != def.Listen {
		t.Errorf("default listen %q: the metrics endpoint must stay on localhost unless configured", def.Listen)
	}
	doc, err := os.ReadFile("../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range unitCaps {
		if !regexp.MustCompile(`#\s+` + c + `\s+\S`).MatchString(text) {
			t.Errorf("%s is kept without a comment saying why", c)
		}
		if !strings.Contains(string(doc), c) {
			t.Errorf("docs/operating.md does not document %s", c)
		}
	}
}

// setpriv runs the built crosstalk as the unit would: root, with only the
// given capabilities in its bounding set (so the only ones it has after
// exec) and no_new_privs.
func setpriv(caps []string, args ...string) *exec.Cmd {
	return setprivRun(caps, binary, args...)
}

// setprivRun runs prog as setpriv does for setpriv.
func setprivRun(caps []string, prog string, args ...string) *exec.Cmd {
	bs := "-all"
	for _, c := range caps {
		bs += ",+" + strings.ToLower(strings.TrimPrefix(c, "CAP_"))
	}
	return exec.Command("setpriv", append([]string{"--bounding-set=" + bs, "--inh-caps=-all", "--no-new-privs", "--", prog}, args...)...)
}

func needRootCgroups(t *testing.T) (*host.Host, cgroup.Layout) {
	t.Helper()
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv not installed (util-linux)")
	}
	return testenv.LiveCgroups(t)
}

// tenantCgroup creates a tenant cgroup for this test (removed at the end).
func tenantCgroup(t *testing.T, h *host.Host, l cgroup.Layout, name string) (parent string, g *cgroup.Group) {
	t.Helper()
	parent = fmt.Sprintf("/crosstalk-ops-%s-%d", name, os.Getpid())
	g, err := cgroup.Create(h, l, parent+"/t1", cpuset.Of(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cgroup.RemoveTree(h, l, parent, 2*time.Second) })
	return parent, g
}

// The unit's capabilities are enough for perf counters in cgroup mode
// (software events here; the same perf_event_open path and permission check
// as hardware events), and CAP_PERFMON is the one that makes them work.
func TestUnitCapabilitiesOpenPerfCounters(t *testing.T) {
	testenv.LockAgent(t) // one agent per host: the other packages' live agents wait
	h, l := needRootCgroups(t)
	parent, _ := tenantCgroup(t, h, l, "caps")
	fds := func(caps []string) (n int, log string) {
		t.Helper()
		dir := t.TempDir()
		port := freePort(t)
		cfg := filepath.Join(dir, "crosstalk.yaml")
		os.WriteFile(cfg, []byte(fmt.Sprintf("interval: 200ms\nlisten: 127.0.0.1:%d\nstate_dir: %s\ndry_run: true\n"+
			"tenants:\n  builtin: false\n  globs: [%q]\nperf:\n  software: true\n", port, filepath.Join(dir, "state"), parent+"/*")), 0o644)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := setpriv(caps, "run", "--config", cfg)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			cmd.Process.Signal(os.Interrupt)
			cmd.Wait()
			log = stderr.String()
		}()
		url := fmt.Sprintf("http://127.0.0.1:%d/api/state", port)
		for ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
			resp, err := http.Get(url)
			if err != nil {
				continue
			}
			var s api.State
			err = json.NewDecoder(resp.Body).Decode(&s)
			resp.Body.Close()
			if err == nil && len(s.Tenants) > 0 {
				// Give the counters one more interval after the tenant appeared.
				time.Sleep(400 * time.Millisecond)
				if resp, err := http.Get(url); err == nil {
					json.NewDecoder(resp.Body).Decode(&s)
					resp.Body.Close()
				}
				return s.PerfFDs, ""
			}
		}
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		t.Fatalf("agent under setpriv %v never published a tenant:\n%s", caps, stderr.String())
		return 0, ""
	}
	const normalPriority = "probe at its normal priority"
	n, log := fds(unitCaps)
	if n == 0 {
		t.Errorf("with the unit's capabilities %v the agent opened no perf counters", unitCaps)
	}
	if strings.Contains(log, normalPriority) {
		t.Errorf("with the unit's capabilities %v the agent warns that its probe has no real-time priority:\n%s", unitCaps, log)
	}
	// Without CAP_SYS_NICE the agent runs on and says what it risks.
	noNice := slices.DeleteFunc(slices.Clone(unitCaps), func(c string) bool { return c == "CAP_SYS_NICE" })
	if _, log := fds(noNice); sense.RealtimeAllowed() == nil && !strings.Contains(log, normalPriority) {
		t.Errorf("without CAP_SYS_NICE the agent did not warn that its probe runs at its normal priority:\n%s", log)
	}
	without := slices.DeleteFunc(slices.Clone(unitCaps), func(c string) bool { return c == "CAP_PERFMON" })
	if n, _ := fds(without); n != 0 {
		// perf_event_paranoid <= 0 lets anyone count system-wide: then the
		// capability is not what made the difference.
		if b, _ := os.ReadFile("/proc/sys/kernel/perf_event_paranoid"); strings.TrimSpace(string(b)) > "0" {
			t.Errorf("without CAP_PERFMON the agent still opened %d perf counters: is the capability needed?", n)
		}
	}
}

// needRootSetpriv skips a test that re-runs the test binary as the unit
// would, where it cannot.
func needRootSetpriv(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv not installed (util-linux)")
	}
}

// helperUnder re-runs the test binary under setpriv with only caps, as the
// helper that env turns on (see TestMain): nil, or its error and output.
func helperUnder(caps []string, env string) error {
	cmd := setprivRun(caps, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// CAP_SYSLOG is what lets the agent read the kernel's bus-lock reports from
// /dev/kmsg where kernel.dmesg_restrict is 1: the test binary, re-run under
// setpriv, opens it as the agent does (sense.OpenKernelBusLocks).
func TestUnitCapabilitiesReadKernelLog(t *testing.T) {
	needRootSetpriv(t)
	if _, err := os.Stat("/dev/kmsg"); err != nil {
		t.Skip("no /dev/kmsg")
	}
	open := func(caps []string) error { return helperUnder(caps, kmsgHelperEnv) }
	if err := open(unitCaps); err != nil {
		t.Errorf("with the unit's capabilities %v /dev/kmsg does not open: %v", unitCaps, err)
	}
	without := slices.DeleteFunc(slices.Clone(unitCaps), func(c string) bool { return c == "CAP_SYSLOG" })
	err := open(without)
	if b, _ := os.ReadFile("/proc/sys/kernel/dmesg_restrict"); strings.TrimSpace(string(b)) == "1" {
		switch {
		case err == nil:
			t.Error("without CAP_SYSLOG /dev/kmsg still opened under dmesg_restrict=1: is the capability needed?")
		case !strings.Contains(err.Error(), "doctor: /dev/kmsg cannot be read") || !strings.Contains(err.Error(), "CAP_SYSLOG"):
			t.Errorf("without CAP_SYSLOG, doctor's reason does not say why: %v", err)
		}
	}
}

// CAP_SYS_NICE is what lets the probe's pinned thread take its real-time
// priority (sense.RealtimeAllowed, as the probe does): the test binary,
// re-run under setpriv, tries it.
func TestUnitCapabilitiesRealtimeProbe(t *testing.T) {
	needRootSetpriv(t)
	if err := sense.RealtimeAllowed(); err != nil {
		t.Skipf("no real-time priority for root here either: %v", err)
	}
	try := func(caps []string) error { return helperUnder(caps, realtimeHelperEnv) }
	if err := try(unitCaps); err != nil {
		t.Errorf("with the unit's capabilities %v the probe gets no real-time priority: %v", unitCaps, err)
	}
	without := slices.DeleteFunc(slices.Clone(unitCaps), func(c string) bool { return c == "CAP_SYS_NICE" })
	if err := try(without); err == nil {
		t.Error("without CAP_SYS_NICE the probe still got its real-time priority: is the capability needed?")
	} else if !strings.Contains(err.Error(), "SCHED_FIFO") {
		t.Errorf("without CAP_SYS_NICE, the refusal does not say what: %v", err)
	}
}

// CAP_DAC_OVERRIDE is what lets root write the quota of a tenant whose cgroup
// files belong to another user (a delegated subtree: rootless containers).
// With the unit's capabilities `crosstalk restore` puts such a quota back;
// without that one capability it cannot.
func TestUnitCapabilitiesRestoreDelegatedCgroups(t *testing.T) {
	testenv.LockAgent(t) // one agent per host: the other packages' live agents wait
	h, l := needRootCgroups(t)
	_, g := tenantCgroup(t, h, l, "dac")
	// Hand the cgroup's files to nobody, as systemd's Delegate= does.
	for _, d := range g.Dirs() {
		p := h.Path(d)
		entries, _ := os.ReadDir(p)
		for _, e := range entries {
			os.Chown(filepath.Join(p, e.Name()), 65534, 65534)
		}
		os.Chown(p, 65534, 65534)
	}
	throttle := func() string {
		t.Helper()
		dir := t.TempDir()
		st, err := act.OpenState(agent.StatePath(dir))
		if err != nil {
			t.Fatal(err)
		}
		if err := (&act.CPUQuota{Host: h, Layout: l, State: st}).Apply(t.Context(), g.Name, "t1", cgroup.Quota{Quota: time.Millisecond, Period: 16 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	quota := func() cgroup.Quota {
		q, err := g.CPUQuota()
		if err != nil {
			t.Fatal(err)
		}
		return q
	}

	dir := throttle()
	without := slices.DeleteFunc(slices.Clone(unitCaps), func(c string) bool { return c == "CAP_DAC_OVERRIDE" })
	out, err := setpriv(without, "restore", "--state-dir", dir).CombinedOutput()
	if err == nil || quota().Unlimited() {
		t.Errorf("restore without CAP_DAC_OVERRIDE of a cgroup owned by another user succeeded (%v): is the capability needed?\n%s", err, out)
	}
	out, err = setpriv(unitCaps, "restore", "--state-dir", dir).CombinedOutput()
	if err != nil || !quota().Unlimited() {
		t.Errorf("restore with the unit's capabilities: %v, quota %v\n%s", err, quota(), out)
	}
}

// syscallGroups expands systemd's system-call groups (systemd-analyze
// syscall-filter, which needs no running manager).
func syscallGroups(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("systemd-analyze", "syscall-filter").Output()
	if err != nil {
		t.Skipf("systemd-analyze syscall-filter: %v", err)
	}
	groups := map[string][]string{}
	cur := ""
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "@"):
			cur = strings.TrimSpace(line)
		case strings.TrimSpace(line) == "":
			cur = ""
		case cur != "" && !strings.HasPrefix(strings.TrimSpace(line), "#"):
			groups[cur] = append(groups[cur], strings.TrimSpace(line))
		}
	}
	return groups
}

func expand(groups map[string][]string, names []string, into map[string]bool) {
	for _, n := range names {
		if strings.HasPrefix(n, "@") {
			if !into[n] {
				into[n] = true
				expand(groups, groups[n], into)
			}
			continue
		}
		into[n] = true
	}
}

// Every system call the agent makes — running with perf counters, a tenant,
// the HTTP listener being scraped, then `crosstalk restore` — is inside the
// unit's SystemCallFilter, so the filter never breaks it (strace shows them).
func TestUnitSystemCallFilterCoversTheAgent(t *testing.T) {
	testenv.LockAgent(t) // one agent per host: the other packages' live agents wait
	h, l := needRootCgroups(t)
	if _, err := exec.LookPath("strace"); err != nil {
		t.Skip("strace not installed (apt-get install strace)")
	}
	groups := syscallGroups(t)
	u, _ := parseUnit(t, unitFile)
	allowed := map[string]bool{}
	expand(groups, u.words("Service", "SystemCallFilter"), allowed)
	if len(allowed) < 100 {
		t.Fatalf("SystemCallFilter expands to only %d calls: parse problem", len(allowed))
	}

	parent, g := tenantCgroup(t, h, l, "sysc")
	dir := t.TempDir()
	port := freePort(t)
	cfg := filepath.Join(dir, "crosstalk.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("interval: 100ms\nlisten: 127.0.0.1:%d\nstate_dir: %s\n"+
		"tenants:\n  builtin: false\n  globs: [%q]\nperf:\n  software: true\n", port, filepath.Join(dir, "state"), parent+"/*")), 0o644)
	trace := filepath.Join(dir, "trace")
	cmd := exec.Command("strace", "-f", "-qq", "-o", trace, binary, "run", "--config", cfg)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	scraped := false
	for time.Now().Before(deadline) && !scraped {
		time.Sleep(300 * time.Millisecond)
		if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port)); err == nil {
			resp.Body.Close()
			if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/state", port)); err == nil {
				scraped = resp.StatusCode == 200
				resp.Body.Close()
			}
		}
	}
	time.Sleep(time.Second) // a few intervals with the tenant
	// strace blocks signals itself: stop the agent (its child) with
	// SIGTERM, as systemd would; strace exits with it.
	stopTraced(t, cmd)
	if !scraped {
		t.Fatal("agent under strace never served its state")
	}
	// And restore, with something to restore.
	st, _ := act.OpenState(agent.StatePath(filepath.Join(dir, "state")))
	if err := (&act.CPUQuota{Host: h, Layout: l, State: st}).Apply(t.Context(), g.Name, "t1", cgroup.Quota{Quota: time.Millisecond, Period: 16 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	trace2 := filepath.Join(dir, "trace2")
	if out, err := exec.Command("strace", "-f", "-qq", "-o", trace2, binary, "restore", "--state-dir", filepath.Join(dir, "state")).CombinedOutput(); err != nil {
		t.Fatalf("restore under strace: %v\n%s", err, out)
	}

	used := map[string]bool{}
	call := regexp.MustCompile(`^\d+\s+([a-z0-9_]+)\(`)
	for _, f := range []string{trace, trace2} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if m := call.FindStringSubmatch(line); m != nil {
				used[m[1]] = true
			}
		}
	}
	if !used["perf_event_open"] || !used["openat2"] && !used["openat"] {
		t.Fatalf("trace looks wrong (no perf_event_open or openat): %v", used)
	}
	var outside []string
	for c := range used {
		// execve is strace starting the binary, before the filter would apply.
		if allowed[c] || c == "execve" {
			continue
		}
		// strace names a number it has no name for syscall_0xN. One beyond
		// every x86-64 system call (the table ends below 0x200, where the
		// x32 ABI's numbers start, and those carry bit 30) is no call the
		// agent made but a register strace read mid-transition while
		// attaching a new thread (0x8be, once).
		if hex, ok := strings.CutPrefix(c, "syscall_0x"); ok {
			if n, err := strconv.ParseUint(hex, 16, 64); err == nil && n >= 0x200 && n < 1<<30 {
				t.Logf("ignored %s from the trace: no x86-64 system call has that number", c)
				continue
			}
		}
		outside = append(outside, c)
	}
	slices.Sort(outside)
	if len(outside) > 0 {
		t.Errorf("system calls the agent makes that SystemCallFilter does not allow: %v", outside)
	}
	t.Logf("%d distinct system calls, all allowed", len(used))
}

// stopTraced sends SIGTERM to the process strace runs and waits for both
// (killing them after 10 s).
func stopTraced(t *testing.T, strace *exec.Cmd) {
	t.Helper()
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", strace.Process.Pid, strace.Process.Pid))
	for _, pid := range strings.Fields(string(b)) {
		var p int
		fmt.Sscan(pid, &p)
		if p > 0 {
			syscall.Kill(p, syscall.SIGTERM)
		}
	}
	done := make(chan struct{})
	go func() { strace.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("the agent under strace did not stop within 10s of SIGTERM")
		for _, pid := range strings.Fields(string(b)) {
			var p int
			fmt.Sscan(pid, &p)
			if p > 0 {
				syscall.Kill(p, syscall.SIGKILL)
			}
		}
		strace.Process.Kill()
		<-done
	}
}
