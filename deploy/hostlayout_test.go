package deploy_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
)

// hostLayout bind-mounts this machine's /proc and /sys (recursively, with
// cgroupfs below it) under a directory, as the kubelet mounts the
// DaemonSet's hostPath volumes under /host, and returns that root.
func hostLayout(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "crosstalk-ops-hostlayout")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "host")
	var mounted []string
	t.Cleanup(func() {
		for i := len(mounted) - 1; i >= 0; i-- {
			if err := unix.Unmount(mounted[i], unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", mounted[i], err)
			}
		}
		os.RemoveAll(dir)
	})
	for _, p := range []string{"/proc", "/sys"} {
		target := filepath.Join(root, p)
		if err := os.MkdirAll(target, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(p, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			t.Skipf("cannot bind-mount %s here: %v", p, err)
		}
		mounted = append(mounted, target)
		// Our copies must not propagate anything back to the host's mounts.
		if err := unix.Mount("", target, "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
			t.Fatalf("make %s a slave mount: %v", target, err)
		}
	}
	return root
}

// The DaemonSet's layout works with the host layer's openat2 RESOLVE_IN_ROOT
// root: with --root on real bind mounts of /proc and /sys, doctor reads the
// same host (live checks included), restore writes the real cgroup, and the
// agent discovers a real tenant and counts it with perf.
func TestHostLayoutUnderRoot(t *testing.T) {
	h, l := needRootCgroups(t)
	root := hostLayout(t)

	type report struct {
		Capabilities struct {
			Cgroup   struct{ Mode string }
			PSI      bool
			Topology struct{ CPUs int }
		}
		Checks []struct{ ID, Status string }
	}
	doctor := func(args ...string) report {
		t.Helper()
		out, err := exec.Command(binary, append([]string{"doctor", "--json"}, args...)...).Output()
		if err != nil {
			t.Fatalf("doctor %v: %v", args, err)
		}
		var r report
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	direct, rooted := doctor(), doctor("--root", root)
	a, _ := json.Marshal(direct)
	b, _ := json.Marshal(rooted)
	if string(a) != string(b) || direct.Capabilities.Cgroup.Mode == "" {
		t.Errorf("doctor under --root %s differs from doctor on /:\n%s\n%s", root, b, a)
	}

	parent, g := tenantCgroup(t, h, l, "layout")
	dir := t.TempDir()
	st, _ := act.OpenState(agent.StatePath(dir))
	if err := (&act.CPUQuota{Host: h, Layout: l, State: st}).Apply(t.Context(), g.Name, "t1", cgroup.Quota{Quota: time.Millisecond, Period: 16 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(binary, "restore", "--root", root, "--state-dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("restore --root: %v\n%s", err, out)
	}
	if q, _ := g.CPUQuota(); !q.Unlimited() {
		t.Errorf("restore through --root %s left the real cgroup at %v", root, q)
	}

	port := freePort(t)
	cfg := filepath.Join(dir, "crosstalk.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("interval: 200ms\nlisten: 127.0.0.1:%d\nstate_dir: %s\ndry_run: true\n"+
		"tenants:\n  builtin: false\n  globs: [%q]\nperf:\n  software: true\n", port, filepath.Join(dir, "state"), parent+"/*")), 0o644)
	cmd := exec.Command(binary, "run", "--root", root, "--config", cfg)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/api/state", port))
		if err != nil {
			continue
		}
		var s api.State
		json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
		for _, ten := range s.Tenants {
			// Perf counters too: the root holds this machine's /proc, so the
			// agent knows it is live and opens them.
			if ten.Cgroup == g.Name && len(s.Probes) > 0 && s.PerfFDs > 0 {
				return
			}
		}
	}
	t.Errorf("the agent under --root %s never saw tenant %s with perf counters open", root, g.Name)
}
