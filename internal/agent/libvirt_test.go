package agent

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/libvirt"
)

func TestLibvirtConfig(t *testing.T) {
	c, err := LoadConfig("../../examples/crosstalk.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if d := Defaults(); c.Libvirt != d.Libvirt {
		t.Errorf("example libvirt section %+v differs from the defaults %+v", c.Libvirt, d.Libvirt)
	}
	if d := Defaults(); *c.CPUWait.Enabled != *d.CPUWait.Enabled || c.CPUWait.Ratio != d.CPUWait.Ratio || c.CPUWait.Strong != d.CPUWait.Strong || c.WaitThresholds() != d.WaitThresholds() {
		t.Errorf("example cpu_wait section %+v differs from the defaults %+v", c.CPUWait, d.CPUWait)
	}
	if d := Defaults().Libvirt; d.Enabled != "auto" || d.Socket != "/run/libvirt/libvirt-sock" || d.Timeout != 2*time.Second {
		t.Errorf("defaults %+v", d)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"libvirt:\n  enabled: maybe\n", "libvirt.enabled"},
		{"libvirt:\n  timeout: 1ms\n", "libvirt.timeout"},
		{"libvirt:\n  sockett: /x\n", "sockett"},
		{"cpu_wait:\n  ratio: 0.9\n", "cpu_wait"},
		{"judge:\n  llc_ratio: 8\n  llc_strong: 4\n", "llc_ratio"},
		{"cpu_wait:\n  ratio: 3\n  strong: 2\n", "cpu_wait"},
	} {
		if _, err := ParseConfig([]byte(tc.yaml), "test.yaml"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want one naming %s", tc.yaml, err, tc.want)
		}
	}
	for _, v := range []string{"true", "false", "auto"} {
		if c, err := ParseConfig([]byte("libvirt:\n  enabled: "+v+"\n"), "test.yaml"); err != nil || c.Libvirt.Enabled != v {
			t.Errorf("enabled: %s: %v", v, err)
		}
	}
}

func libvirtHost(t *testing.T) (*host.Host, cgroup.Layout, string) {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "cg/cpu/machine/qemu-3-web.libvirt-qemu")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte("16000\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte("1000\n"), 0o644) // left throttled
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h, cgroup.Layout{Mode: cgroup.ModeV1, V1: map[string]string{"cpu": "/cg/cpu"}}, root
}

// auto without a socket: the agent is wired as before, VMs through cgroup files.
func TestWireLibvirtAutoWithoutSocket(t *testing.T) {
	h, l, _ := libvirtHost(t)
	st, _ := act.OpenState(filepath.Join(t.TempDir(), "state.json"))
	cq := &act.CPUQuota{Host: h, Layout: l, State: st}
	var logs bytes.Buffer
	disc, quota, stop := wireLibvirt(t.Context(), Defaults(), h, slog.New(slog.NewTextHandler(&logs, nil)), nil, 1, cq, st)
	defer stop()
	if quota != QuotaActuator(cq) || disc != nil {
		t.Errorf("without libvirt the parts changed: %T %T", disc, quota)
	}
	if !strings.Contains(logs.String(), "no socket") {
		t.Errorf("not logged: %s", logs.String())
	}
}

// libvirt turned off after a run that throttled a VM through libvirt: the
// throttle is lifted through the VM's cgroup files at start.
func TestWireLibvirtDisabledUndoesLeftovers(t *testing.T) {
	h, l, root := libvirtHost(t)
	st, _ := act.OpenState(filepath.Join(t.TempDir(), "state.json"))
	rec := act.LibvirtRecord{Cgroup: "/machine/qemu-3-web.libvirt-qemu", Domain: "web", UUID: "11111111-2222-3333-4444-555555555555", ID: 3,
		OriginalQuotaUS: -1, OriginalPeriodUS: 100000, AppliedQuotaUS: 1000, AppliedPeriodUS: 16000, Path: act.PathLibvirt}
	st.PutRecord(act.LibvirtRecordKind, rec.Cgroup, rec)
	cfg := Defaults()
	cfg.Libvirt.Enabled = "false"
	cq := &act.CPUQuota{Host: h, Layout: l, State: st}
	_, quota, stop := wireLibvirt(t.Context(), cfg, h, slog.New(slog.DiscardHandler), nil, 1, cq, st)
	defer stop()
	if quota != QuotaActuator(cq) {
		t.Errorf("libvirt off: quota actuator %T", quota)
	}
	b, _ := os.ReadFile(filepath.Join(root, "cg/cpu/machine/qemu-3-web.libvirt-qemu/cpu.cfs_quota_us"))
	if strings.TrimSpace(string(b)) != "-1" {
		t.Errorf("leftover VM throttle not lifted: quota %s", b)
	}
}

// webLibvirt is a connected libvirt with one domain, the web VM of libvirtHost,
// that honours its callers' contexts as the client's calls do.
type webLibvirt struct {
	offline
	h    *host.Host
	l    cgroup.Layout
	sets int
}

var webDomain = libvirt.Domain{Name: "web", UUID: "11111111-2222-3333-4444-555555555555", ID: 3, VCPUs: 1, Settled: true}

const webCgroup = "/machine/qemu-3-web.libvirt-qemu"

func (*webLibvirt) Connected() bool { return true }
func (*webLibvirt) DomainByCgroup(cg string) (libvirt.Domain, bool) {
	return webDomain, cg == webCgroup
}
func (*webLibvirt) DomainByUUID(uuid string) (libvirt.Domain, bool) {
	return webDomain, uuid == webDomain.UUID
}
func (s *webLibvirt) SchedParams(ctx context.Context, d libvirt.Domain) (libvirt.SchedParams, error) {
	if err := ctx.Err(); err != nil {
		return libvirt.SchedParams{}, err
	}
	q, err := cgroup.Open(s.h, s.l, webCgroup).CPUQuota()
	if err != nil {
		return libvirt.SchedParams{}, err
	}
	quota := int64(-1)
	if q.Quota > 0 {
		quota = q.Quota.Microseconds()
	}
	return libvirt.SchedParams{GlobalPeriod: libvirt.Ptr(uint64(q.Period.Microseconds())), GlobalQuota: libvirt.Ptr(quota)}, nil
}
func (s *webLibvirt) SetSchedParams(ctx context.Context, d libvirt.Domain, p libvirt.SchedParams) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.sets++
	q := cgroup.Quota{Period: time.Duration(*p.GlobalPeriod) * time.Microsecond}
	if *p.GlobalQuota > 0 {
		q.Quota = time.Duration(*p.GlobalQuota) * time.Microsecond
	}
	return cgroup.Open(s.h, s.l, webCgroup).SetCPUQuota(q)
}

// The agent's VM actuator runs under the agent's context: once that has
// ended it puts no throttle on, but still lifts one through libvirt (not
// the cgroup-file fallback), as the agent's releases at shutdown need.
func TestVMQuotaRunsUnderTheCallersContext(t *testing.T) {
	h, l, root := libvirtHost(t)
	os.WriteFile(filepath.Join(root, "cg/cpu", webCgroup, "cpu.cfs_quota_us"), []byte("-1\n"), 0o644)
	st, err := act.OpenState(filepath.Join(t.TempDir(), "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	lv := &webLibvirt{h: h, l: l}
	cq := &act.CPUQuota{Host: h, Layout: l, State: st}
	ctx, stop := context.WithCancel(t.Context())
	var q QuotaActuator = &act.LibvirtQuota{Libvirt: lv, Cgroups: cq, State: st, Log: slog.New(slog.DiscardHandler)}
	throttle := cgroup.Quota{Quota: time.Millisecond, Period: 16 * time.Millisecond}
	quota := func() string {
		b, _ := os.ReadFile(filepath.Join(root, "cg/cpu", webCgroup, "cpu.cfs_quota_us"))
		return strings.TrimSpace(string(b))
	}

	if err := q.Apply(ctx, webCgroup, "web", throttle); err != nil || quota() != "1000" || lv.sets != 1 {
		t.Fatalf("throttle while running: err %v, quota %s, libvirt sets %d", err, quota(), lv.sets)
	}
	stop()
	if err := q.Restore(ctx, webCgroup); err != nil || quota() != "-1" || lv.sets != 2 {
		t.Errorf("lift after the context ended: err %v, quota %s, libvirt sets %d (want the lift through libvirt)", err, quota(), lv.sets)
	}
	if err := q.Apply(ctx, webCgroup, "web", throttle); err == nil || quota() != "-1" {
		t.Errorf("throttle after the context ended: err %v, quota %s; want it refused", err, quota())
	}
}
