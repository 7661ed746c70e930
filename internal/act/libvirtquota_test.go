package act

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/libvirt"
)

const (
	vmWeb   = "/machine/qemu-3-web.libvirt-qemu"
	vmOther = "/machine/qemu-1-other.libvirt-qemu" // another daemon's domain
	ctr     = "/docker/abc"
)

// fakeLibvirt is libvirtd as LibvirtQuota sees it. Like libvirt, it writes
// global_quota/global_period into the domain's cgroup files.
type fakeLibvirt struct {
	mu        sync.Mutex
	h         *host.Host
	l         cgroup.Layout
	connected bool
	doms      map[string]libvirt.Domain // by cgroup
	cgroups   map[string]string         // UUID -> cgroup
	failSet   error                     // returned by SetSchedParams when set
	sets      []string
	refreshes int
}

func (f *fakeLibvirt) Connected() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.connected
}

func (f *fakeLibvirt) DomainByCgroup(cg string) (libvirt.Domain, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.doms[cg]
	return d, ok
}

func (f *fakeLibvirt) DomainByUUID(uuid string) (libvirt.Domain, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.doms[f.cgroups[uuid]]
	return d, ok && f.cgroups[uuid] != ""
}

func (f *fakeLibvirt) Refresh(ctx context.Context) ([]libvirt.Domain, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refreshes++
	if !f.connected {
		return nil, libvirt.ErrNotConnected
	}
	return nil, nil
}

func (f *fakeLibvirt) lookup(d libvirt.Domain) (string, error) {
	if !f.connected {
		return "", fmt.Errorf("call: %w", libvirt.ErrNotConnected)
	}
	cg, ok := f.cgroups[d.UUID]
	if !ok {
		return "", fmt.Errorf("call: %w: Domain not found", libvirt.ErrDomainGone)
	}
	return cg, nil
}

func (f *fakeLibvirt) SchedParams(ctx context.Context, d libvirt.Domain) (libvirt.SchedParams, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return libvirt.SchedParams{}, fmt.Errorf("call: %w", err) // as the client's calls end with their context
	}
	cg, err := f.lookup(d)
	if err != nil {
		return libvirt.SchedParams{}, err
	}
	q, err := cgroup.Open(f.h, f.l, cg).CPUQuota()
	if err != nil {
		return libvirt.SchedParams{}, err
	}
	return libvirt.SchedParams{GlobalPeriod: libvirt.Ptr(uint64(q.Period.Microseconds())), GlobalQuota: libvirt.Ptr(usecs(q.Quota)),
		VCPUPeriod: libvirt.Ptr[uint64](100000), VCPUQuota: libvirt.Ptr[int64](-1)}, nil
}

func (f *fakeLibvirt) SetSchedParams(ctx context.Context, d libvirt.Domain, p libvirt.SchedParams) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("call: %w", err)
	}
	cg, err := f.lookup(d)
	if err != nil {
		return err
	}
	if f.failSet != nil {
		return f.failSet
	}
	if p.GlobalPeriod == nil || p.GlobalQuota == nil || p.VCPUQuota != nil {
		return fmt.Errorf("unexpected parameters %s", p)
	}
	f.sets = append(f.sets, d.Name+" "+p.String())
	return cgroup.Open(f.h, f.l, cg).SetCPUQuota(fromUsecs(*p.GlobalQuota, int64(*p.GlobalPeriod)))
}

func (f *fakeLibvirt) setConnected(c bool) {
	f.mu.Lock()
	f.connected = c
	f.mu.Unlock()
}

// vanish removes a domain and its cgroup, as a domain destroyed does.
func (f *fakeLibvirt) vanish(t *testing.T, root, cg string) {
	f.mu.Lock()
	d := f.doms[cg]
	delete(f.doms, cg)
	delete(f.cgroups, d.UUID)
	f.mu.Unlock()
	os.RemoveAll(filepath.Join(root, "cg/cpu", cg))
}

type vmWorld struct {
	h     *host.Host
	l     cgroup.Layout
	root  string
	state *StateFile
	lv    *fakeLibvirt
	a     *LibvirtQuota
	logs  *bytes.Buffer
}

func newVMWorld(t *testing.T) *vmWorld {
	t.Helper()
	root := t.TempDir()
	for _, cg := range []string{vmWeb, vmOther, ctr} {
		dir := filepath.Join(root, "cg/cpu", cg)
		os.MkdirAll(filepath.Join(dir, "vcpu0"), 0o755)
		os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte("100000\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte("-1\n"), 0o644)
	}
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	l := cgroup.Layout{Mode: cgroup.ModeV1, V1: map[string]string{"cpu": "/cg/cpu"}}
	state, err := OpenState(filepath.Join(t.TempDir(), "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	web := libvirt.Domain{Name: "web", UUID: "11111111-2222-3333-4444-555555555555", ID: 3, VCPUs: 1, Settled: true}
	lv := &fakeLibvirt{h: h, l: l, connected: true, doms: map[string]libvirt.Domain{vmWeb: web}, cgroups: map[string]string{web.UUID: vmWeb}}
	w := &vmWorld{h: h, l: l, root: root, state: state, lv: lv, logs: &bytes.Buffer{}}
	w.a = w.actuator()
	return w
}

// actuator is a fresh LibvirtQuota over the world's state file (a restarted agent).
func (w *vmWorld) actuator() *LibvirtQuota {
	log := slog.New(slog.NewTextHandler(w.logs, nil))
	return &LibvirtQuota{Libvirt: w.lv, Cgroups: &CPUQuota{Host: w.h, Layout: w.l, State: w.state, Log: log}, State: w.state, Log: log}
}

func (w *vmWorld) quota(t *testing.T, cg string) string {
	t.Helper()
	return file(t, w.root, "cg/cpu"+cg+"/cpu.cfs_quota_us") + "/" + file(t, w.root, "cg/cpu"+cg+"/cpu.cfs_period_us")
}

var throttle = cgroup.Quota{Quota: 1000 * 1000, Period: 16000 * 1000} // 1 ms per 16 ms

func TestLibvirtQuotaThrottlesVMsThroughLibvirt(t *testing.T) {
	w := newVMWorld(t)
	if err := w.a.Apply(t.Context(), vmWeb, "web", throttle); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(w.lv.sets, "; "); got != "web global_period=16000 global_quota=1000" {
		t.Errorf("libvirt calls: %s", got)
	}
	if q := w.quota(t, vmWeb); q != "1000/16000" {
		t.Errorf("domain cgroup after the throttle: %s", q)
	}
	var rec LibvirtRecord
	if ok, _ := w.state.GetRecord(LibvirtRecordKind, vmWeb, &rec); !ok || rec.Path != PathLibvirt || rec.OriginalQuotaUS != -1 || rec.OriginalPeriodUS != 100000 || rec.UUID == "" {
		t.Errorf("record: %+v", rec)
	}
	if len(w.state.Entries()) != 0 {
		t.Error("a VM throttled through libvirt also got a cgroup entry")
	}
	// A second step keeps the first original.
	w.a.Apply(t.Context(), vmWeb, "web", cgroup.Quota{Quota: 3000 * 1000, Period: 16000 * 1000})
	if err := w.a.Restore(t.Context(), vmWeb); err != nil {
		t.Fatal(err)
	}
	if q := w.quota(t, vmWeb); q != "-1/100000" {
		t.Errorf("after restore: %s", q)
	}
	if last := w.lv.sets[len(w.lv.sets)-1]; last != "web global_period=100000 global_quota=-1" {
		t.Errorf("restore call: %s", last)
	}
	if keys := w.state.RecordKeys(LibvirtRecordKind); len(keys) != 0 {
		t.Errorf("records left: %v", keys)
	}
}

func TestLibvirtQuotaOtherTenantsUseCgroupFiles(t *testing.T) {
	w := newVMWorld(t)
	// A container, and a VM cgroup no domain of this libvirt matches.
	for _, cg := range []string{ctr, vmOther} {
		if err := w.a.Apply(t.Context(), cg, "x", throttle); err != nil {
			t.Fatal(err)
		}
		if q := w.quota(t, cg); q != "1000/16000" {
			t.Errorf("%s: %s", cg, q)
		}
		if _, ok := w.state.Get(cg); !ok {
			t.Errorf("%s: no cgroup entry", cg)
		}
	}
	if w.lv.refreshes != 1 {
		t.Errorf("an unknown VM cgroup should re-list libvirt once before falling back: %d", w.lv.refreshes)
	}
	if len(w.lv.sets) != 0 {
		t.Errorf("libvirt called for non-libvirt tenants: %v", w.lv.sets)
	}
	n, err := w.a.RestoreAll(t.Context())
	if err != nil || n != 2 || w.quota(t, ctr) != "-1/100000" || w.quota(t, vmOther) != "-1/100000" {
		t.Errorf("RestoreAll = %d, %v", n, err)
	}
}

// libvirt down: no throttle is put on behind its back.
func TestLibvirtQuotaRefusesToThrottleWhileLibvirtIsDown(t *testing.T) {
	w := newVMWorld(t)
	w.lv.setConnected(false)
	err := w.a.Apply(t.Context(), vmWeb, "web", throttle)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Apply with libvirt down: %v", err)
	}
	if q := w.quota(t, vmWeb); q != "-1/100000" {
		t.Errorf("throttled behind libvirt's back: %s", q)
	}
	if len(w.state.RecordKeys(LibvirtRecordKind)) != 0 || len(w.state.Entries()) != 0 {
		t.Error("recorded a throttle that was not applied")
	}
}

// libvirtd down when a throttle must be lifted: the cgroup files are written
// (loudly), and libvirt is told once it is back.
func TestLibvirtQuotaRestoreFallsBackWhenLibvirtIsDown(t *testing.T) {
	w := newVMWorld(t)
	if err := w.a.Apply(t.Context(), vmWeb, "web", throttle); err != nil {
		t.Fatal(err)
	}
	w.lv.setConnected(false)
	if err := w.a.Restore(t.Context(), vmWeb); err != nil {
		t.Fatal(err)
	}
	if q := w.quota(t, vmWeb); q != "-1/100000" {
		t.Fatalf("left throttled while libvirt was down: %s", q)
	}
	if !strings.Contains(w.logs.String(), "LIBVIRT UNREACHABLE") || !strings.Contains(w.logs.String(), "level=ERROR") {
		t.Errorf("fallback not logged loudly:\n%s", w.logs.String())
	}
	var rec LibvirtRecord
	if ok, _ := w.state.GetRecord(LibvirtRecordKind, vmWeb, &rec); !ok || rec.Path != PathCgroupFallback {
		t.Fatalf("record after fallback: %+v", rec)
	}
	// Still down: an agent stop or restart keeps the record, touches nothing.
	if n, err := w.actuator().RestoreAll(t.Context()); n != 0 || err != nil {
		t.Errorf("RestoreAll while down = %d, %v", n, err)
	}
	// Back: Resync (the client's OnConnect hook) tells libvirt.
	w.lv.setConnected(true)
	w.a.Resync(t.Context())
	if last := w.lv.sets[len(w.lv.sets)-1]; last != "web global_period=100000 global_quota=-1" {
		t.Errorf("resync call: %s", last)
	}
	if len(w.state.RecordKeys(LibvirtRecordKind)) != 0 {
		t.Error("record kept after resync")
	}
}

// libvirt answers but refuses to restore: the files are written anyway.
func TestLibvirtQuotaRestoreFallsBackWhenLibvirtRefuses(t *testing.T) {
	w := newVMWorld(t)
	w.a.Apply(t.Context(), vmWeb, "web", throttle)
	w.lv.failSet = errors.New("internal error: cgroup write refused")
	if err := w.a.Restore(t.Context(), vmWeb); err != nil {
		t.Fatal(err)
	}
	if q := w.quota(t, vmWeb); q != "-1/100000" {
		t.Errorf("left throttled: %s", q)
	}
}

// A domain that vanishes mid-action: ErrGone, nothing left in the state.
func TestLibvirtQuotaDomainVanishes(t *testing.T) {
	w := newVMWorld(t)
	if err := w.a.Apply(t.Context(), vmWeb, "web", throttle); err != nil {
		t.Fatal(err)
	}
	w.lv.vanish(t, w.root, vmWeb)
	if err := w.a.Apply(t.Context(), vmWeb, "web", cgroup.Quota{Quota: 2000 * 1000, Period: 16000 * 1000}); !errors.Is(err, ErrGone) {
		t.Errorf("tighten on a vanished domain: %v, want ErrGone", err)
	}
	if err := w.a.Restore(t.Context(), vmWeb); err != nil {
		t.Errorf("restore of a vanished domain: %v", err)
	}
	if len(w.state.RecordKeys(LibvirtRecordKind)) != 0 {
		t.Error("record of a vanished domain kept")
	}

	// Vanishing while libvirt is also down: the fallback finds no cgroup.
	w2 := newVMWorld(t)
	w2.a.Apply(t.Context(), vmWeb, "web", throttle)
	w2.lv.setConnected(false)
	w2.lv.vanish(t, w2.root, vmWeb)
	if err := w2.a.Restore(t.Context(), vmWeb); err != nil || len(w2.state.RecordKeys(LibvirtRecordKind)) != 0 {
		t.Errorf("restore of a vanished domain with libvirt down: %v, records %v", err, w2.state.RecordKeys(LibvirtRecordKind))
	}
}

// kill -9, then a restart: the next agent restores through libvirt, and
// leaves alone parameters someone else changed since.
func TestLibvirtQuotaRestoreAllAfterKill(t *testing.T) {
	w := newVMWorld(t)
	w.a.Apply(t.Context(), vmWeb, "web", throttle)
	state, err := OpenState(w.state.Path()) // what the next process reads
	if err != nil {
		t.Fatal(err)
	}
	w.state = state
	n, err := w.actuator().RestoreAll(t.Context())
	if err != nil || n != 1 || w.quota(t, vmWeb) != "-1/100000" {
		t.Errorf("RestoreAll = %d, %v; quota %s", n, err, w.quota(t, vmWeb))
	}

	w.a = w.actuator()
	w.a.Apply(t.Context(), vmWeb, "web", throttle)
	os.WriteFile(filepath.Join(w.root, "cg/cpu", vmWeb, "cpu.cfs_quota_us"), []byte("50000\n"), 0o644) // an operator's virsh schedinfo
	n, err = w.actuator().RestoreAll(t.Context())
	if err != nil || n != 0 || file(t, w.root, "cg/cpu"+vmWeb+"/cpu.cfs_quota_us") != "50000" {
		t.Errorf("someone else's value: RestoreAll = %d, %v", n, err)
	}
	if !strings.Contains(w.logs.String(), "changed by someone else") {
		t.Error("leaving someone else's value not logged")
	}

	// At exit with libvirt down: the fallback lifts it (back to the
	// operator's value, now the original).
	w.a = w.actuator()
	w.a.Apply(t.Context(), vmWeb, "web", throttle)
	w.lv.setConnected(false)
	n, err = w.a.RestoreAll(t.Context())
	if err != nil || n != 1 || w.quota(t, vmWeb) != "50000/16000" {
		t.Errorf("RestoreAll with libvirt down = %d, %v; quota %s", n, err, w.quota(t, vmWeb))
	}
}

// A throttle whose libvirt call was cut (outcome unknown) keeps its record,
// so a later restore undoes it whichever way it went.
func TestLibvirtQuotaUnknownOutcomeKeepsRecord(t *testing.T) {
	w := newVMWorld(t)
	w.a.Apply(t.Context(), vmWeb, "web", throttle)
	w.lv.failSet = fmt.Errorf("set: %w: did not answer", libvirt.ErrNotConnected)
	err := w.a.Apply(t.Context(), vmWeb, "web", cgroup.Quota{Quota: 2000 * 1000, Period: 16000 * 1000})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("cut call: %v", err)
	}
	if len(w.state.RecordKeys(LibvirtRecordKind)) != 1 {
		t.Fatal("record dropped after a call with an unknown outcome")
	}
	w.lv.failSet = nil
	if err := w.a.Restore(t.Context(), vmWeb); err != nil || w.quota(t, vmWeb) != "-1/100000" {
		t.Errorf("restore: %v, %s", err, w.quota(t, vmWeb))
	}
}

// Killed between recording a tighter throttle and libvirt applying it, with
// libvirt down at the next start: the VM's cgroup files still hold the
// previous throttle, which the fallback takes for crosstalk's own (the
// write-ahead intent) and lifts. A value nobody recorded is left alone.
func TestLibvirtQuotaFallbackKnowsThePreviousThrottle(t *testing.T) {
	for _, c := range []struct {
		name     string
		files    string // the cgroup files' quota when the restore comes
		restored bool
	}{
		{"the previous throttle", "2000", true},
		{"an operator's value", "5000", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newVMWorld(t)
			if err := w.a.Apply(t.Context(), vmWeb, "web", cgroup.Quota{Quota: 2000 * 1000, Period: 16000 * 1000}); err != nil {
				t.Fatal(err)
			}
			// The tighter step is recorded, but the call never reaches libvirt.
			w.lv.failSet = fmt.Errorf("set: %w: did not answer", libvirt.ErrNotConnected)
			if err := w.a.Apply(t.Context(), vmWeb, "web", throttle); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("cut call: %v", err)
			}
			w.lv.failSet = nil
			os.WriteFile(filepath.Join(w.root, "cg/cpu", vmWeb, "cpu.cfs_quota_us"), []byte(c.files+"\n"), 0o644)
			w.lv.setConnected(false)
			if _, err := w.actuator().RestoreAll(t.Context()); err != nil {
				t.Fatal(err)
			}
			got := w.quota(t, vmWeb)
			if c.restored && got != "-1/100000" {
				t.Errorf("left at %s: the previous throttle was not taken for crosstalk's", got)
			}
			if !c.restored && got != c.files+"/16000" {
				t.Errorf("an operator's %s/16000 became %s", c.files, got)
			}
		})
	}
}

// libvirtd restarting: several rewrites of a throttle fail in a row, each
// without telling whether it reached the kernel. Whichever of them, or the
// last confirmed throttle, is in force when the agent stops with libvirt
// gone is taken for crosstalk's own and lifted.
func TestLibvirtQuotaFallbackAfterRewritesFailInARow(t *testing.T) {
	for _, files := range []string{"1000", "2000", "3000"} {
		t.Run("files hold "+files, func(t *testing.T) {
			w := newVMWorld(t)
			if err := w.a.Apply(t.Context(), vmWeb, "web", throttle); err != nil {
				t.Fatal(err)
			}
			w.lv.failSet = fmt.Errorf("set: %w: connection reset", libvirt.ErrNotConnected)
			for _, us := range []int64{2000, 2000, 3000, 2000} {
				if err := w.a.Apply(t.Context(), vmWeb, "web", cgroup.Quota{Quota: time.Duration(us) * time.Microsecond, Period: 16 * time.Millisecond}); !errors.Is(err, ErrUnavailable) {
					t.Fatalf("cut rewrite to %d: %v", us, err)
				}
			}
			w.lv.failSet = nil
			os.WriteFile(filepath.Join(w.root, "cg/cpu", vmWeb, "cpu.cfs_quota_us"), []byte(files+"\n"), 0o644)
			w.lv.setConnected(false)
			if err := w.a.Restore(t.Context(), vmWeb); err != nil {
				t.Fatal(err)
			}
			if got := w.quota(t, vmWeb); got != "-1/100000" {
				t.Errorf("left at %s after the rewrites failed", got)
			}
		})
	}
}

// While libvirt is away a throttle is not rewritten, and its record keeps
// what is in force.
func TestLibvirtQuotaNoRewriteWhileLibvirtIsAway(t *testing.T) {
	w := newVMWorld(t)
	if err := w.a.Apply(t.Context(), vmWeb, "web", throttle); err != nil {
		t.Fatal(err)
	}
	w.lv.setConnected(false)
	if err := w.a.Apply(t.Context(), vmWeb, "web", cgroup.Quota{Quota: 2 * time.Millisecond, Period: 16 * time.Millisecond}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("rewrite while away: %v", err)
	}
	var rec LibvirtRecord
	if ok, _ := w.state.GetRecord(LibvirtRecordKind, vmWeb, &rec); !ok || rec.AppliedQuotaUS != 1000 || len(rec.Unconfirmed) != 0 {
		t.Errorf("record after a rewrite while away: %+v", rec)
	}
}

// A domain libvirt is still starting is not touched: libvirt holds its job,
// and a change would wait for it.
func TestLibvirtQuotaWaitsForAStartingDomain(t *testing.T) {
	w := newVMWorld(t)
	d := w.lv.doms[vmWeb]
	d.Settled = false
	w.lv.doms[vmWeb] = d
	if err := w.a.Apply(t.Context(), vmWeb, "web", throttle); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "still starting") {
		t.Fatalf("Apply on a starting domain: %v", err)
	}
	if len(w.lv.sets) != 0 || len(w.state.RecordKeys(LibvirtRecordKind)) != 0 {
		t.Error("acted on a starting domain")
	}
}

// The caller's context bounds a throttle: one that has ended puts nothing
// on. Lifting a throttle does not stop with it (an agent stopping because
// its context ended still lifts what it put on) and still goes through
// libvirt, not the cgroup-file fallback.
func TestLibvirtQuotaCallerContext(t *testing.T) {
	ended, cancel := context.WithCancel(t.Context())
	cancel()

	t.Run("an ended context throttles nothing", func(t *testing.T) {
		w := newVMWorld(t)
		if err := w.a.Apply(ended, vmWeb, "web", throttle); err == nil {
			t.Fatal("Apply with an ended context succeeded")
		}
		if q := w.quota(t, vmWeb); q != "-1/100000" {
			t.Errorf("quota %s, want untouched", q)
		}
		if len(w.lv.sets) != 0 || len(w.state.RecordKeys(LibvirtRecordKind)) != 0 {
			t.Errorf("libvirt sets %v, records %v: want none", w.lv.sets, w.state.RecordKeys(LibvirtRecordKind))
		}
	})
	for _, tt := range []struct {
		name string
		lift func(*vmWorld) error
	}{
		{"Restore", func(w *vmWorld) error { return w.a.Restore(ended, vmWeb) }},
		{"RestoreAll", func(w *vmWorld) error { _, err := w.actuator().RestoreAll(ended); return err }},
	} {
		t.Run(tt.name+" with an ended context lifts through libvirt", func(t *testing.T) {
			w := newVMWorld(t)
			if err := w.a.Apply(t.Context(), vmWeb, "web", throttle); err != nil {
				t.Fatal(err)
			}
			if err := tt.lift(w); err != nil {
				t.Fatal(err)
			}
			if q := w.quota(t, vmWeb); q != "-1/100000" {
				t.Errorf("quota %s after the lift, want -1/100000", q)
			}
			if n := len(w.lv.sets); n != 2 {
				t.Errorf("libvirt sets %v: want the throttle and its lift", w.lv.sets)
			}
			if keys := w.state.RecordKeys(LibvirtRecordKind); len(keys) != 0 {
				t.Errorf("records left %v (a cgroup-file fallback keeps one)", keys)
			}
			if strings.Contains(w.logs.String(), "LIBVIRT UNREACHABLE") {
				t.Errorf("fell back to the cgroup files: %s", w.logs)
			}
		})
	}
}

// A VM cgroup no domain of this libvirt matches is throttled through its
// files and logged once; when its domain is destroyed (the cgroup goes) it
// is forgotten, so a new VM under the same name is logged again and VM
// churn under another daemon does not grow the set.
func TestLibvirtQuotaNotOursPrunedWhenTheDomainGoes(t *testing.T) {
	w := newVMWorld(t)
	logged := func() int { return strings.Count(w.logs.String(), "matches no domain of this libvirt") }
	for range 2 {
		if err := w.a.Apply(t.Context(), vmOther, "other", throttle); err != nil {
			t.Fatal(err)
		}
	}
	if n := logged(); n != 1 {
		t.Fatalf("logged %d times for two throttles, want once", n)
	}
	if err := w.a.Restore(t.Context(), vmOther); err != nil {
		t.Fatal(err)
	}
	if !w.a.notOurs[vmOther] {
		t.Fatal("a lifted throttle of a VM still running forgot it (it would be logged again)")
	}

	w.lv.vanish(t, w.root, vmOther)
	if err := w.a.Restore(t.Context(), vmOther); err != nil {
		t.Fatal(err)
	}
	if len(w.a.notOurs) != 0 {
		t.Errorf("not-ours set %v after its VM's cgroup went, want empty", w.a.notOurs)
	}

	// A new VM of the other daemon under the same name.
	dir := filepath.Join(w.root, "cg/cpu", vmOther)
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte("100000\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte("-1\n"), 0o644)
	if err := w.a.Apply(t.Context(), vmOther, "other", throttle); err != nil {
		t.Fatal(err)
	}
	if n := logged(); n != 2 {
		t.Errorf("the new VM was logged %d times in all, want it logged anew", n)
	}
}

// Entries whose cgroup went without a Restore (the agent saw the tenant
// vanish while it was not throttled) go when the next VM is added.
func TestLibvirtQuotaNotOursPrunedOnTheNextVM(t *testing.T) {
	w := newVMWorld(t)
	third := "/machine/qemu-2-third.libvirt-qemu"
	dir := filepath.Join(w.root, "cg/cpu", third)
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte("100000\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte("-1\n"), 0o644)
	if err := w.a.Apply(t.Context(), vmOther, "other", throttle); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(w.root, "cg/cpu", vmOther))
	if err := w.a.Apply(t.Context(), third, "third", throttle); err != nil {
		t.Fatal(err)
	}
	if len(w.a.notOurs) != 1 || !w.a.notOurs[third] {
		t.Errorf("not-ours set %v, want only %s", w.a.notOurs, third)
	}
}
