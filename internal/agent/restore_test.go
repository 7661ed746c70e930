package agent

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

// v2Tree is a host tree with a cgroup2 mount (found through init's
// mountinfo, as on a real host) and one tenant per name, unlimited.
func v2Tree(t *testing.T, tenants ...string) (*host.Host, cgroup.Layout) {
	t.Helper()
	root := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("proc/1/mountinfo", "25 1 252:0 / / rw,relatime - ext4 /dev/vda rw\n"+
		"30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n")
	write("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")
	write("sys/fs/cgroup/cgroup.subtree_control", "cpu\n")
	for _, name := range tenants {
		write(filepath.Join("sys/fs/cgroup", name, "cpu.max"), "max 100000\n")
	}
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	l, err := cgroup.Detect(h)
	if err != nil || l.CPUControl() == "" {
		t.Fatalf("tree layout = %+v, %v", l, err)
	}
	return h, l
}

func cpuMax(t *testing.T, h *host.Host, name string) string {
	t.Helper()
	s, err := h.ReadString(filepath.Join("/sys/fs/cgroup", name, "cpu.max"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(s)
}

// What a SIGKILLed agent leaves — throttled quotas recorded in the state
// file, and records of other actuators — is undone (or kept) by RestoreAll
// from the file alone.
func TestRestoreAllUndoesWhatTheStateFileRecords(t *testing.T) {
	h, l := v2Tree(t, "vms/polluter", "vms/other", "vms/changed", "vms/gone")
	dir := t.TempDir()
	st, err := act.OpenState(StatePath(dir))
	if err != nil {
		t.Fatal(err)
	}
	q := &act.CPUQuota{Host: h, Layout: l, State: st}
	throttle := cgroup.Quota{Quota: time.Millisecond, Period: 16 * time.Millisecond}
	for _, name := range []string{"/vms/polluter", "/vms/changed", "/vms/gone"} {
		if err := q.Apply(t.Context(), name, filepath.Base(name), throttle); err != nil {
			t.Fatal(err)
		}
	}
	if got := cpuMax(t, h, "vms/polluter"); got != "1000 16000" {
		t.Fatalf("setup: cpu.max = %q", got)
	}
	// Someone else changed one quota after crosstalk did; another tenant is gone.
	os.WriteFile(h.Path("/sys/fs/cgroup/vms/changed/cpu.max"), []byte("50000 100000\n"), 0o644)
	os.RemoveAll(h.Path("/sys/fs/cgroup/vms/gone"))
	// A record of an actuator this build does not know.
	if err := st.PutRecord("future_lever", "cpu7", map[string]int{"was": 3}); err != nil {
		t.Fatal(err)
	}

	cfg := Defaults()
	cfg.StateDir = dir
	rep, err := RestoreAll(t.Context(), cfg, h, nil)
	if err != nil {
		t.Fatalf("RestoreAll: %v", err)
	}
	if rep.Restored[KindCPUQuota] != 1 || rep.Total() != 1 {
		t.Errorf("restored = %v, want 1 cpu quota", rep.Restored)
	}
	if got := cpuMax(t, h, "vms/polluter"); got != "max 100000" {
		t.Errorf("polluter cpu.max after restore = %q, want the original \"max 100000\"", got)
	}
	if got := cpuMax(t, h, "vms/changed"); got != "50000 100000" {
		t.Errorf("a quota someone else set was overwritten: %q", got)
	}
	if got := cpuMax(t, h, "vms/other"); got != "max 100000" {
		t.Errorf("untouched tenant changed: %q", got)
	}
	if keys := rep.Kept["future_lever"]; len(keys) != 1 || keys[0] != "cpu7" {
		t.Errorf("kept = %v, want the unknown record kept", rep.Kept)
	}
	again, err := act.OpenState(StatePath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if e := again.Entries(); len(e) != 0 {
		t.Errorf("state file still has entries: %+v", e)
	}
	if k := again.RecordKeys("future_lever"); len(k) != 1 {
		t.Errorf("unknown record dropped from the state file: %v", k)
	}
	j, _ := os.ReadFile(JournalPath(dir))
	if !strings.Contains(string(j), `"kind":"restore"`) || !strings.Contains(string(j), "cpu_quota 1") {
		t.Errorf("journal lacks the restore:\n%s", j)
	}

	// Restoring twice is harmless.
	rep, err = RestoreAll(t.Context(), cfg, h, nil)
	if err != nil || rep.Total() != 0 {
		t.Errorf("second restore = %+v, %v", rep, err)
	}
}

func TestRestoreAllRefusesWhileAnAgentHoldsTheStateDir(t *testing.T) {
	h, l := v2Tree(t, "t1")
	dir := t.TempDir()
	st, _ := act.OpenState(StatePath(dir))
	if err := (&act.CPUQuota{Host: h, Layout: l, State: st}).Apply(t.Context(), "/t1", "t1", cgroup.Quota{Quota: time.Millisecond, Period: 16 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	lock, err := LockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Defaults()
	cfg.StateDir = dir
	_, err = RestoreAll(t.Context(), cfg, h, nil)
	if !errors.Is(err, ErrStateLocked) || !strings.Contains(err.Error(), "held by pid") {
		t.Fatalf("restore under a held lock: %v", err)
	}
	if got := cpuMax(t, h, "t1"); got != "1000 16000" {
		t.Errorf("restore wrote behind the agent's back: %q", got)
	}
	if _, err := LockStateDir(dir); !errors.Is(err, ErrStateLocked) {
		t.Errorf("a second agent got the lock: %v", err)
	}
	lock.Unlock()
	if rep, err := RestoreAll(t.Context(), cfg, h, nil); err != nil || rep.Restored[KindCPUQuota] != 1 {
		t.Errorf("restore after the agent stopped = %+v, %v", rep, err)
	}
}

func TestRestoreAllWithNothingRecorded(t *testing.T) {
	h, _ := v2Tree(t)
	cfg := Defaults()
	cfg.StateDir = filepath.Join(t.TempDir(), "never-created")
	rep, err := RestoreAll(t.Context(), cfg, h, nil)
	if err != nil || rep.Total() != 0 {
		t.Errorf("missing state dir: %+v, %v", rep, err)
	}
	if _, err := os.Stat(cfg.StateDir); !os.IsNotExist(err) {
		t.Errorf("restore created the state dir: %v", err)
	}
	// A corrupt state file is an error that says what to do, not a silent pass.
	dir := t.TempDir()
	os.WriteFile(StatePath(dir), []byte("{not json"), 0o600)
	cfg.StateDir = dir
	if _, err := RestoreAll(t.Context(), cfg, h, nil); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("corrupt state file: %v", err)
	}
}

// A throttle a killed agent made through libvirt is undone by `crosstalk
// restore` even with libvirtd gone: through the domain's cgroup files, only
// where they still hold what crosstalk set, and the record is kept (marked)
// so the next agent tells libvirt.
func TestRestoreAllLiftsLibvirtThrottlesWithoutLibvirt(t *testing.T) {
	h, _ := v2Tree(t, "machine/qemu-1-vm.libvirt-qemu", "machine/qemu-2-other.libvirt-qemu")
	// The killed agent's throttle on vm; someone else's limit on other.
	os.WriteFile(h.Path("/sys/fs/cgroup/machine/qemu-1-vm.libvirt-qemu/cpu.max"), []byte("2000 16000\n"), 0o644)
	os.WriteFile(h.Path("/sys/fs/cgroup/machine/qemu-2-other.libvirt-qemu/cpu.max"), []byte("50000 100000\n"), 0o644)
	dir := t.TempDir()
	st, err := act.OpenState(StatePath(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []act.LibvirtRecord{
		{Cgroup: "/machine/qemu-1-vm.libvirt-qemu", Domain: "vm", UUID: "u1", ID: 1, OriginalQuotaUS: -1, OriginalPeriodUS: 100000,
			AppliedQuotaUS: 2000, AppliedPeriodUS: 16000, Path: act.PathLibvirt},
		{Cgroup: "/machine/qemu-2-other.libvirt-qemu", Domain: "other", UUID: "u2", ID: 2, OriginalQuotaUS: -1, OriginalPeriodUS: 100000,
			AppliedQuotaUS: 2000, AppliedPeriodUS: 16000, Path: act.PathLibvirt},
	} {
		if err := st.PutRecord(act.LibvirtRecordKind, r.Cgroup, r); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Defaults()
	cfg.StateDir = dir
	cfg.Libvirt.Socket = "/run/libvirt/nothing-here" // no libvirtd
	cfg.Libvirt.Timeout = 200 * time.Millisecond
	rep, err := RestoreAll(t.Context(), cfg, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cpuMax(t, h, "machine/qemu-1-vm.libvirt-qemu"); got != "max 100000" {
		t.Errorf("vm's throttle not lifted through its cgroup: cpu.max %q", got)
	}
	if got := cpuMax(t, h, "machine/qemu-2-other.libvirt-qemu"); got != "50000 100000" {
		t.Errorf("a limit someone else set was overwritten: %q", got)
	}
	if rep.Restored[act.LibvirtRecordKind] != 1 || len(rep.Kept) != 0 {
		t.Errorf("report %+v", rep)
	}
	again, _ := act.OpenState(StatePath(dir))
	var rec act.LibvirtRecord
	if ok, _ := again.GetRecord(act.LibvirtRecordKind, "/machine/qemu-1-vm.libvirt-qemu", &rec); !ok || rec.Path != act.PathCgroupFallback {
		t.Errorf("vm's record should stay, marked for a resync through libvirt: %+v (found %v)", rec, ok)
	}
	if ok, _ := again.GetRecord(act.LibvirtRecordKind, "/machine/qemu-2-other.libvirt-qemu", &rec); ok {
		t.Error("the record of a VM whose limit someone else changed was kept")
	}
}

// A restore waiting on a libvirt that accepts but never answers stops
// waiting when its context ends, and lifts the VM's throttle through its
// cgroup files instead.
func TestRestoreAllStopsWaitingOnLibvirtWhenCancelled(t *testing.T) {
	h, _ := v2Tree(t, "machine/qemu-1-vm.libvirt-qemu")
	os.WriteFile(h.Path("/sys/fs/cgroup/machine/qemu-1-vm.libvirt-qemu/cpu.max"), []byte("2000 16000\n"), 0o644)
	ln, err := net.Listen("unix", h.Path("/libvirt-sock"))
	if err != nil {
		t.Skip("no unix socket here:", err)
	}
	defer ln.Close()
	go func() { // accept, hold, never answer
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	dir := t.TempDir()
	st, err := act.OpenState(StatePath(dir))
	if err != nil {
		t.Fatal(err)
	}
	r := act.LibvirtRecord{Cgroup: "/machine/qemu-1-vm.libvirt-qemu", Domain: "vm", UUID: "u1", ID: 1, OriginalQuotaUS: -1, OriginalPeriodUS: 100000,
		AppliedQuotaUS: 2000, AppliedPeriodUS: 16000, Path: act.PathLibvirt}
	if err := st.PutRecord(act.LibvirtRecordKind, r.Cgroup, r); err != nil {
		t.Fatal(err)
	}
	cfg := Defaults()
	cfg.StateDir = dir
	cfg.Libvirt.Enabled, cfg.Libvirt.Socket, cfg.Libvirt.Timeout = "true", "/libvirt-sock", 5*time.Second
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	if _, err := RestoreAll(ctx, cfg, h, nil); err != nil {
		t.Fatal(err)
	}
	// Uncancelled, it would wait twice the timeout (10 s) for libvirt.
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("a cancelled restore waited %v on libvirt", took)
	}
	if got := cpuMax(t, h, "machine/qemu-1-vm.libvirt-qemu"); got != "max 100000" {
		t.Errorf("vm's throttle not lifted through its cgroup: cpu.max %q", got)
	}
}
