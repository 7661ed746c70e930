package resctrl_test

import (
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/resctrl"
	"github.com/crosstalk-project/crosstalk/internal/resctrl/resctrlfs"
)

const mnt = resctrl.DefaultMount

func emulated(t *testing.T, name string) (*host.Host, *resctrlfs.FS) {
	t.Helper()
	h, k, err := resctrlfs.OpenTree(filepath.Join(t.TempDir(), name), filepath.Join("..", "..", "testdata", "hosts", name), resctrlfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h, k
}

func TestGroupName(t *testing.T) {
	a := resctrl.GroupName("mon", "/machine.slice/machine-qemu\\x2d1\\x2dvm1.scope", "vm1")
	b := resctrl.GroupName("mon", "/machine.slice/machine-qemu\\x2d2\\x2dvm1.scope", "vm1")
	if a == b || !strings.HasPrefix(a, "crosstalk-mon-vm1-") || !resctrl.IsOwned(a) {
		t.Errorf("names %q %q", a, b)
	}
	if n := resctrl.GroupName("class", "/x", "kube/ns/pod name\nwith junk and a very long tail indeed"); strings.ContainsAny(n, "/ \n") || len(n) > 64 {
		t.Errorf("unsafe name %q", n)
	}
	if n := resctrl.GroupName("class", "/x", "///"); n != resctrl.GroupName("class", "/x", "") || !strings.Contains(n, "-tenant-") {
		t.Errorf("empty readable part: %q", n)
	}
	if resctrl.IsOwned("libvirt-vm1") {
		t.Error("libvirt's group counted as ours")
	}
}

func TestGroupOps(t *testing.T) {
	h, k := emulated(t, "intel-skx-2s")
	ctrls, err := resctrl.CtrlGroups(h, mnt)
	if err != nil || !slices.Equal(ctrls, []string{"libvirt-vm1"}) {
		t.Fatalf("ctrl groups %v %v", ctrls, err)
	}
	g := resctrl.CtrlGroup(mnt, "crosstalk-class-a")
	if err := resctrl.Create(h, g); err != nil {
		t.Fatal(err)
	}
	if err := resctrl.Create(h, g); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second create: %v", err)
	}
	if !resctrl.Exists(h, g) || resctrl.Exists(h, resctrl.CtrlGroup(mnt, "nope")) {
		t.Error("Exists")
	}
	// One line only: the MB line stays as it was.
	if err := resctrl.WriteLine(h, g, resctrl.Line{Resource: "L3", Domains: []resctrl.Domain{{ID: 1, Value: "600"}}}); err != nil {
		t.Fatal(err)
	}
	s, err := resctrl.ReadSchemata(h, g)
	if err != nil || s.String() != "MB:0=100;1=100\nL3:0=7ff;1=600\n" {
		t.Errorf("schemata %q %v", s.String(), err)
	}
	err = resctrl.WriteLine(h, g, resctrl.Line{Resource: "L3", Domains: []resctrl.Domain{{ID: 0, Value: "505"}}})
	if err == nil || !strings.Contains(err.Error(), "non-consecutive") {
		t.Errorf("invalid mask error should carry the kernel's reason: %v", err)
	}
	if err := resctrl.WriteLine(h, resctrl.MonGroup(mnt, "", "m"), resctrl.Line{Resource: "L3"}); err == nil {
		t.Error("schemata write to a monitoring group")
	}
	// Tasks: one per write; exited threads are reported, not errors.
	k.Exit(12)
	moved, gone, err := resctrl.MoveTasks(h, g, []int{10, 11, 12, 13})
	if err != nil || !slices.Equal(moved, []int{10, 11, 13}) || !slices.Equal(gone, []int{12}) {
		t.Errorf("moved %v gone %v err %v", moved, gone, err)
	}
	if tids, err := resctrl.ReadTasks(h, g); err != nil || !slices.Equal(tids, []int{10, 11, 13}) {
		t.Errorf("tasks %v %v", tids, err)
	}
	m := resctrl.MonGroup(mnt, g.Ctrl, "crosstalk-mon-a")
	if err := resctrl.Create(h, m); err != nil {
		t.Fatal(err)
	}
	if _, _, err := resctrl.MoveTasks(h, m, []int{10, 99}); err == nil || !strings.Contains(err.Error(), "different control group") {
		t.Errorf("moving a thread of another control group into a monitoring group: %v", err)
	}
	if mons, _ := resctrl.MonGroups(h, mnt, g.Ctrl); !slices.Equal(mons, []string{"crosstalk-mon-a"}) {
		t.Errorf("mon groups %v", mons)
	}
	if err := resctrl.Remove(h, g); err != nil {
		t.Fatal(err)
	}
	if err := resctrl.Remove(h, g); err != nil {
		t.Errorf("removing a gone group: %v", err)
	}
	// 99 lives in the default group (the emulation lists threads once seen).
	if tids, _ := resctrl.ReadTasks(h, resctrl.CtrlGroup(mnt, "")); !slices.Equal(tids, []int{10, 11, 13, 99}) {
		t.Errorf("tasks back in the default group: %v", tids)
	}
	if resctrl.Create(h, resctrl.CtrlGroup(mnt, "")) == nil || resctrl.Remove(h, resctrl.CtrlGroup(mnt, "")) == nil {
		t.Error("default group created or removed")
	}
}

func TestNoSpaceErrors(t *testing.T) {
	h, k := emulated(t, "intel-skx-2s")
	var err error
	for i := 0; err == nil; i++ {
		err = resctrl.Create(h, resctrl.CtrlGroup(mnt, "c"+string(rune('a'+i))))
	}
	var ns *resctrl.NoSpaceError
	if !errors.As(err, &ns) || ns.Resource != "CLOSID" || ns.Limbo {
		t.Fatalf("CLOSID exhaustion: %v", err)
	}
	for _, g := range []string{"ca", "cb", "cc", "cd", "ce", "cf"} {
		resctrl.Remove(h, resctrl.CtrlGroup(mnt, g))
	}
	for i := 0; ; i++ {
		err = resctrl.Create(h, resctrl.MonGroup(mnt, "", "m"+string(rune('A'+i%26))+string(rune('a'+i/26))))
		if err != nil {
			break
		}
	}
	if !errors.As(err, &ns) || ns.Resource != "RMID" || ns.Limbo {
		t.Fatalf("RMID exhaustion: %v", err)
	}
	_, r, _ := k.GroupIDs("mon_groups/mAa")
	k.Account(resctrlfs.Sample{RMID: r, Domain: 0, OccupancyBytes: 1 << 30})
	resctrl.Remove(h, resctrl.MonGroup(mnt, "", "mAa"))
	err = resctrl.Create(h, resctrl.MonGroup(mnt, "", "late"))
	if !errors.As(err, &ns) || !ns.Limbo || !strings.Contains(err.Error(), "limbo") {
		t.Fatalf("limbo: %v", err)
	}
}

func TestMonData(t *testing.T) {
	h, k := emulated(t, "amd-milan-1s")
	g := resctrl.MonGroup(mnt, "", "m")
	if err := resctrl.Create(h, g); err != nil {
		t.Fatal(err)
	}
	doms, err := resctrl.MonDomains(h, g)
	if err != nil || !slices.Equal(doms, []int{0, 1, 2, 3}) {
		t.Fatalf("domains %v %v", doms, err)
	}
	_, r, _ := k.GroupIDs("mon_groups/m")
	k.Account(resctrlfs.Sample{RMID: r, Domain: 3, OccupancyBytes: 4 << 20, TotalBytes: 1000, LocalBytes: 900})
	first, err := resctrl.ReadMonData(h, g, []int{3})
	if err != nil || first[0].Occupancy != (resctrl.Counter{Value: 4 << 20, OK: true}) || first[0].Total.Value != 1000 || first[0].Local.Value != 900 {
		t.Fatalf("read %+v %v", first, err)
	}
	k.Account(resctrlfs.Sample{RMID: r, Domain: 3, OccupancyBytes: 4 << 20, TotalBytes: 500})
	second, _ := resctrl.ReadMonData(h, g, []int{3})
	if d, ok := second[0].Total.Since(first[0].Total); !ok || d != 500 {
		t.Errorf("delta %d %v", d, ok)
	}
	k.SetUnavailable(r, 3, true)
	third, _ := resctrl.ReadMonData(h, g, []int{3})
	if third[0].Total.OK || third[0].Total.Status != "Unavailable" || !third[0].Occupancy.OK {
		t.Errorf("unavailable: %+v", third[0])
	}
	if _, ok := third[0].Total.Since(second[0].Total); ok {
		t.Error("delta across Unavailable")
	}
	// A counter that went backwards was reset, not wrapped.
	if _, ok := (resctrl.Counter{Value: 5, OK: true}).Since(resctrl.Counter{Value: 9, OK: true}); ok {
		t.Error("backwards counter gave a delta")
	}
	if _, err := resctrl.ReadMonData(h, resctrl.MonGroup(mnt, "", "gone"), []int{0}); err == nil {
		t.Error("missing group read")
	}
}
