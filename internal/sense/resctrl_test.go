package sense

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/resctrl"
	"github.com/crosstalk-project/crosstalk/internal/resctrl/resctrlfs"
)

const rmnt = resctrl.DefaultMount

func resctrlTree(t *testing.T, name string) (*host.Host, *resctrlfs.FS) {
	t.Helper()
	h, k, err := resctrlfs.OpenTree(filepath.Join(t.TempDir(), name), filepath.Join("..", "..", "testdata", "hosts", name), resctrlfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h, k
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time         { return c.t }
func (c *fakeClock) add(d time.Duration)    { c.t = c.t.Add(d) }
func noFlags(string) bool                   { return false }
func tenantT(id string, tids ...int) Tenant { return Tenant{ID: "/t/" + id, Name: id, Threads: tids} }
func monOf(tn Tenant, ctrl string) resctrl.Group {
	return resctrl.MonGroup(rmnt, ctrl, resctrl.GroupName("mon", tn.ID, tn.Name))
}

func newMonitor(t *testing.T, h *host.Host, o ResctrlMonitorOptions) *ResctrlMonitor {
	t.Helper()
	m, err := NewResctrlMonitor(h, noFlags, false, o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func tasksOf(t *testing.T, h *host.Host, g resctrl.Group) []int {
	t.Helper()
	tids, err := resctrl.ReadTasks(h, g)
	if err != nil {
		t.Fatalf("%s: %v", g, err)
	}
	return tids
}

func rmidOf(t *testing.T, k *resctrlfs.FS, g resctrl.Group) int {
	t.Helper()
	rel := strings.TrimPrefix(strings.TrimPrefix(g.Path(), rmnt), "/")
	_, r, ok := k.GroupIDs(rel)
	if !ok {
		t.Fatalf("no group %s", rel)
	}
	return r
}

func TestResctrlMonitorUnavailable(t *testing.T) {
	_, err := NewResctrlMonitor(openTree(t, "dev-epyc-vm"), noFlags, true, ResctrlMonitorOptions{})
	var ue *resctrl.UnavailableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "not mounted and the CPU shows no RDT/PQoS flags") {
		t.Errorf("dev VM: %v", err)
	}
	_, err = NewResctrlMonitor(openTree(t, "dev-epyc-vm"), func(f string) bool { return f == "cqm_llc" }, true, ResctrlMonitorOptions{})
	if err == nil || !strings.Contains(err.Error(), "mount -t resctrl resctrl /sys/fs/resctrl") {
		t.Errorf("supported but unmounted: %v", err)
	}
	// Mounted without monitoring (SKX stepping 4 without rdt=cmt,...).
	h, _ := resctrlTree(t, "intel-skx-2s")
	os.RemoveAll(h.Path(rmnt + "/info/L3_MON"))
	_, err = NewResctrlMonitor(h, noFlags, false, ResctrlMonitorOptions{})
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "without monitoring") {
		t.Errorf("no L3_MON: %v", err)
	}
}

// A monitoring group per tenant, its threads kept in, occupancy and
// bandwidth per L3 domain from the deltas; exited threads are not errors;
// groups of tenants that left are removed.
func TestResctrlMonitorSyncRead(t *testing.T) {
	h, k := resctrlTree(t, "intel-skx-2s")
	clk := &fakeClock{time.Unix(1000, 0)}
	m := newMonitor(t, h, ResctrlMonitorOptions{Now: clk.now})
	if !slices.Equal(m.Domains(), []int{0, 1}) {
		t.Fatalf("domains %v", m.Domains())
	}
	a, b := tenantT("a", 100, 101), tenantT("b", 200)
	if err := m.Sync(t.Context(), []Tenant{a, b}); err != nil {
		t.Fatal(err)
	}
	if got := tasksOf(t, h, monOf(a, "")); !slices.Equal(got, []int{100, 101}) {
		t.Errorf("a's group: %v", got)
	}
	if got := tasksOf(t, h, monOf(b, "")); !slices.Equal(got, []int{200}) {
		t.Errorf("b's group: %v", got)
	}
	ra := rmidOf(t, k, monOf(a, ""))
	k.Account(resctrlfs.Sample{RMID: ra, Domain: 0, OccupancyBytes: 6 << 20, TotalBytes: 1e9, LocalBytes: 8e8})
	u, err := m.Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	d0, _ := u[a.ID].Domain(0)
	if !d0.OccupancyOK || d0.OccupancyBytes != 6<<20 || d0.BandwidthOK {
		t.Errorf("first read: %+v (bandwidth needs two readings)", d0)
	}
	clk.add(2 * time.Second)
	k.Account(resctrlfs.Sample{RMID: ra, Domain: 0, OccupancyBytes: 7 << 20, TotalBytes: 4e9, LocalBytes: 1e9},
		resctrlfs.Sample{RMID: ra, Domain: 1, OccupancyBytes: 1 << 20, TotalBytes: 2e8})
	u, _ = m.Read(t.Context())
	d0, _ = u[a.ID].Domain(0)
	d1, _ := u[a.ID].Domain(1)
	if !d0.BandwidthOK || d0.TotalBytesPerSec != 2e9 || d0.LocalBytesPerSec != 5e8 || d0.OccupancyBytes != 7<<20 {
		t.Errorf("domain 0: %+v", d0)
	}
	if !d1.BandwidthOK || d1.TotalBytesPerSec != 1e8 || d1.LocalBytesPerSec != 0 {
		t.Errorf("domain 1: %+v", d1)
	}
	if bd, _ := u[b.ID].Domain(0); !bd.BandwidthOK || bd.TotalBytesPerSec != 0 {
		t.Errorf("idle b: %+v", bd)
	}
	// Unavailable counters: no bandwidth that interval.
	k.SetUnavailable(ra, 1, true)
	clk.add(time.Second)
	u, _ = m.Read(t.Context())
	if d1, _ := u[a.ID].Domain(1); d1.BandwidthOK || d1.TotalBytesPerSec != 0 || !d1.OccupancyOK {
		t.Errorf("unavailable: %+v", d1)
	}
	// New threads go in; a thread that exited before Sync wrote it is fine.
	k.Exit(101)
	a.Threads = []int{100, 101, 102}
	if err := m.Sync(t.Context(), []Tenant{a}); err != nil {
		t.Fatalf("sync with an exited thread: %v", err)
	}
	if got := tasksOf(t, h, monOf(a, "")); !slices.Equal(got, []int{100, 102}) {
		t.Errorf("a after new and exited threads: %v", got)
	}
	if resctrl.Exists(h, monOf(b, "")) {
		t.Error("b left but its group stayed")
	}
	if err := m.Close(); err != nil || resctrl.Exists(h, monOf(a, "")) {
		t.Errorf("close: %v", err)
	}
}

// When an actuator moves the tenant into a crosstalk class, the monitoring
// group follows into the class; the old one is removed.
func TestResctrlMonitorFollowsClass(t *testing.T) {
	h, k := resctrlTree(t, "amd-milan-1s")
	clk := &fakeClock{time.Unix(1000, 0)}
	m := newMonitor(t, h, ResctrlMonitorOptions{Now: clk.now})
	a := tenantT("a", 10, 11)
	m.Sync(t.Context(), []Tenant{a})
	class := resctrl.CtrlGroup(rmnt, resctrl.GroupName("class", a.ID, a.Name))
	if err := resctrl.Create(h, class); err != nil {
		t.Fatal(err)
	}
	resctrl.MoveTasks(h, class, []int{10, 11}) // what act does
	if got := tasksOf(t, h, monOf(a, "")); len(got) != 0 {
		t.Fatalf("the kernel takes moved threads out of their monitoring group: %v", got)
	}
	if err := m.Sync(t.Context(), []Tenant{a}); err != nil {
		t.Fatal(err)
	}
	if resctrl.Exists(h, monOf(a, "")) {
		t.Error("old monitoring group left behind")
	}
	if got := tasksOf(t, h, monOf(a, class.Ctrl)); !slices.Equal(got, []int{10, 11}) {
		t.Errorf("monitoring group in the class: %v", got)
	}
	r := rmidOf(t, k, monOf(a, class.Ctrl))
	m.Read(t.Context())
	clk.add(time.Second)
	k.Account(resctrlfs.Sample{RMID: r, Domain: 2, OccupancyBytes: 3 << 20, TotalBytes: 5e8, LocalBytes: 5e8})
	u, _ := m.Read(t.Context())
	if d, _ := u[a.ID].Domain(2); !d.BandwidthOK || d.TotalBytesPerSec != 5e8 || d.OccupancyBytes != 3<<20 {
		t.Errorf("read in the class: %+v", d)
	}
	// The class is released: back to the default group, and so is the
	// monitoring.
	resctrl.Remove(h, class)
	m.Sync(t.Context(), []Tenant{a})
	if got := tasksOf(t, h, monOf(a, "")); !slices.Equal(got, []int{10, 11}) {
		t.Errorf("back in the default group: %v", got)
	}
}

// Other tools' groups are read, never written: a libvirt cachetune group
// holding only the VM's vCPUs is read as it is; one shared with other
// tasks leaves that part unmeasured, said in Partial; threads in another
// tool's monitoring group stay there.
func TestResctrlMonitorForeignGroups(t *testing.T) {
	h, k := resctrlTree(t, "intel-skx-2s")
	clk := &fakeClock{time.Unix(1000, 0)}
	libvirt := resctrl.CtrlGroup(rmnt, "libvirt-vm1")
	// libvirt put the VM's vCPU threads in its group; the emulator thread
	// (302) stays in the default group.
	resctrl.MoveTasks(h, libvirt, []int{300, 301})
	before, _ := os.ReadFile(h.Path(rmnt + "/libvirt-vm1/schemata"))
	m := newMonitor(t, h, ResctrlMonitorOptions{Now: clk.now})
	vm := tenantT("vm1", 300, 301, 302)
	if err := m.Sync(t.Context(), []Tenant{vm}); err != nil {
		t.Fatal(err)
	}
	if mons, _ := resctrl.MonGroups(h, rmnt, "libvirt-vm1"); len(mons) != 0 {
		t.Errorf("crosstalk wrote into libvirt's group: %v", mons)
	}
	if got := tasksOf(t, h, libvirt); !slices.Equal(got, []int{300, 301}) {
		t.Errorf("libvirt's tasks changed: %v", got)
	}
	if after, _ := os.ReadFile(h.Path(rmnt + "/libvirt-vm1/schemata")); string(after) != string(before) {
		t.Errorf("libvirt's schemata changed: %q -> %q", before, after)
	}
	if got := tasksOf(t, h, monOf(vm, "")); !slices.Equal(got, []int{302}) {
		t.Errorf("our group: %v", got)
	}
	_, rl, _ := k.GroupIDs("libvirt-vm1")
	k.Account(resctrlfs.Sample{RMID: rl, Domain: 0, OccupancyBytes: 5 << 20},
		resctrlfs.Sample{RMID: rmidOf(t, k, monOf(vm, "")), Domain: 0, OccupancyBytes: 1 << 20})
	u, _ := m.Read(t.Context())
	if d, _ := u[vm.ID].Domain(0); d.OccupancyBytes != 6<<20 || u[vm.ID].Partial != "" {
		t.Errorf("vm1 = libvirt's group + ours: %+v partial %q", d, u[vm.ID].Partial)
	}
	// Someone else's task joins libvirt's group: no longer the VM's alone.
	resctrl.MoveTasks(h, libvirt, []int{999})
	m.Sync(t.Context(), []Tenant{vm})
	u, _ = m.Read(t.Context())
	if d, _ := u[vm.ID].Domain(0); d.OccupancyBytes != 1<<20 || !strings.Contains(u[vm.ID].Partial, "2 threads in control group libvirt-vm1") {
		t.Errorf("shared libvirt group: %+v partial %q", d, u[vm.ID].Partial)
	}
	// Another tool's monitoring group in the default group keeps its threads.
	pqos := resctrl.MonGroup(rmnt, "", "pqos-1")
	resctrl.Create(h, pqos)
	resctrl.MoveTasks(h, pqos, []int{302, 303})
	m.Sync(t.Context(), []Tenant{vm})
	if got := tasksOf(t, h, pqos); !slices.Equal(got, []int{302, 303}) {
		t.Errorf("pqos group lost its threads: %v", got)
	}
	if m.Unmonitored()[0].ID != vm.ID || !strings.Contains(m.Unmonitored()[0].Reason, "monitoring group pqos-1") {
		t.Errorf("nothing measurable left: %+v", m.Unmonitored())
	}
}

// RMIDs run out: tenants are monitored in priority order, a higher-priority
// newcomer takes a lower one's group, and Unmonitored says who and why.
// Groups a killed predecessor left are removed; others' are not.
func TestResctrlMonitorPriorityAndLeftovers(t *testing.T) {
	h, _ := resctrlTree(t, "intel-skx-2s")
	leftover := resctrl.MonGroup(rmnt, "", resctrl.GroupName("mon", "/t/old", "old"))
	resctrl.Create(h, leftover)
	resctrl.Create(h, resctrl.MonGroup(rmnt, "", "pqos-1"))
	m := newMonitor(t, h, ResctrlMonitorOptions{MaxGroups: 2})
	a, b, c, d := tenantT("a", 1), tenantT("b", 2), tenantT("c", 3), tenantT("d", 4)
	// The leftover counts against the limit until this Sync removes it: b
	// evicts nothing (c is lower and has none) and waits a turn.
	m.Sync(t.Context(), []Tenant{a, b, c})
	if resctrl.Exists(h, leftover) || !resctrl.Exists(h, resctrl.MonGroup(rmnt, "", "pqos-1")) {
		t.Error("leftover kept or another tool's group removed")
	}
	m.Sync(t.Context(), []Tenant{a, b, c})
	un := m.Unmonitored()
	if len(un) != 1 || un[0].ID != c.ID || !strings.Contains(un[0].Reason, "limit of 2") {
		t.Fatalf("unmonitored %+v", un)
	}
	m.Sync(t.Context(), []Tenant{d, a, b, c})
	if !resctrl.Exists(h, monOf(d, "")) || !resctrl.Exists(h, monOf(a, "")) || resctrl.Exists(h, monOf(b, "")) {
		t.Error("d should have taken b's group")
	}
	un = m.Unmonitored()
	if len(un) != 2 || un[0].ID != b.ID || un[1].ID != c.ID {
		t.Fatalf("unmonitored %+v", un)
	}
	// Hardware exhaustion: 62 RMIDs free on this host (minus pqos-1).
	m2 := newMonitor(t, h, ResctrlMonitorOptions{})
	var many []Tenant
	for i := 0; i < 64; i++ {
		many = append(many, tenantT(fmt.Sprintf("t%02d", i), 1000+i))
	}
	m.Close()
	m2.Sync(t.Context(), many)
	un = m2.Unmonitored()
	if len(un) != 3 || un[0].ID != many[61].ID || !strings.Contains(un[0].Reason, "out of RMIDs") {
		t.Errorf("exhaustion: %d unmonitored, first %+v", len(un), un)
	}
}

func TestResctrlUsageDomain(t *testing.T) {
	u := ResctrlUsage{Domains: []L3Usage{{Domain: 3, TotalBytesPerSec: 1}}}
	if d, ok := u.Domain(3); !ok || d.TotalBytesPerSec != 1 {
		t.Error("Domain(3)")
	}
	if _, ok := u.Domain(0); ok {
		t.Error("Domain(0)")
	}
}

// With DomainCPUs a tenant pinned to one socket is read in that socket's
// L3 domain only, an unconfined one in every domain; SkipLocal leaves
// mbm_local_bytes unread without costing the total its bandwidth.
func TestResctrlMonitorReadsOnlyItsDomains(t *testing.T) {
	h, k := resctrlTree(t, "intel-skx-2s")
	clk := &fakeClock{time.Unix(1000, 0)}
	m := newMonitor(t, h, ResctrlMonitorOptions{Now: clk.now, SkipLocal: true,
		DomainCPUs: map[int]cpuset.Set{0: cpuset.MustParse("0-7,16-23"), 1: cpuset.MustParse("8-15,24-31")}})
	pinned, free := tenantT("pinned", 100), tenantT("free", 200)
	pinned.CPUs = cpuset.MustParse("8-9")
	if err := m.Sync(t.Context(), []Tenant{pinned, free}); err != nil {
		t.Fatal(err)
	}
	rp, rf := rmidOf(t, k, monOf(pinned, "")), rmidOf(t, k, monOf(free, ""))
	account := func(total uint64) { // bytes moved since the last account
		k.Account(resctrlfs.Sample{RMID: rp, Domain: 1, OccupancyBytes: 3 << 20, TotalBytes: total, LocalBytes: total / 2},
			resctrlfs.Sample{RMID: rf, Domain: 0, OccupancyBytes: 1 << 20, TotalBytes: total},
			resctrlfs.Sample{RMID: rf, Domain: 1, OccupancyBytes: 2 << 20, TotalBytes: total})
	}
	account(1e9)
	m.Read(t.Context())
	clk.add(time.Second)
	account(3e9)
	u, err := m.Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if ds := u[pinned.ID].Domains; len(ds) != 1 || ds[0].Domain != 1 || ds[0].OccupancyBytes != 3<<20 || !ds[0].BandwidthOK || ds[0].TotalBytesPerSec != 3e9 || ds[0].LocalBytesPerSec != 0 {
		t.Errorf("pinned to socket 1: %+v", ds)
	}
	if ds := u[free.ID].Domains; len(ds) != 2 || ds[0].OccupancyBytes != 1<<20 || ds[1].OccupancyBytes != 2<<20 || !ds[1].BandwidthOK {
		t.Errorf("unconfined: %+v", ds)
	}
	// The tenant moves to the other socket: read there from now on.
	pinned.CPUs = cpuset.MustParse("0-1")
	m.Sync(t.Context(), []Tenant{pinned, free})
	u, _ = m.Read(t.Context())
	if ds := u[pinned.ID].Domains; len(ds) != 1 || ds[0].Domain != 0 || ds[0].BandwidthOK {
		t.Errorf("after moving (no previous reading there yet): %+v", ds)
	}
}

// MaxNewPerSync spreads group creation over Syncs: each makes at most that
// many, most important first, and the rest follow in the next ones.
func TestResctrlMonitorMakesFewGroupsPerSync(t *testing.T) {
	h, _ := resctrlTree(t, "intel-skx-2s")
	m := newMonitor(t, h, ResctrlMonitorOptions{MaxNewPerSync: 2})
	var ts []Tenant
	for i := range 5 {
		ts = append(ts, tenantT(fmt.Sprintf("t%d", i), 100+i))
	}
	monitored := func() int {
		n := 0
		for _, tn := range ts {
			if resctrl.Exists(h, monOf(tn, "")) {
				n++
			}
		}
		return n
	}
	for sync, want := range []int{2, 4, 5, 5} {
		if err := m.Sync(t.Context(), ts); err != nil {
			t.Fatal(err)
		}
		if got := monitored(); got != want {
			t.Fatalf("after Sync %d: %d groups, want %d", sync+1, got, want)
		}
	}
	if !resctrl.Exists(h, monOf(ts[0], "")) || len(m.Unmonitored()) != 0 {
		t.Errorf("first tenant not monitored first, or some left unmonitored: %v", m.Unmonitored())
	}
}
