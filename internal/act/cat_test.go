package act

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/resctrl"
	"github.com/crosstalk-project/crosstalk/internal/resctrl/resctrlfs"
)

const rmnt = resctrl.DefaultMount

// classTree is a copy of a host tree with resctrl emulated, and the classes
// actuator on it with a fresh state file.
func classTree(t *testing.T, name string) (*host.Host, *resctrlfs.FS, *ResctrlClasses, string) {
	t.Helper()
	h, k, err := resctrlfs.OpenTree(filepath.Join(t.TempDir(), name), filepath.Join("..", "..", "testdata", "hosts", name), resctrlfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	statePath := filepath.Join(t.TempDir(), "state.json")
	return h, k, newClasses(t, h, statePath), statePath
}

// newClasses is what an agent does at start: open the state, read resctrl.
func newClasses(t *testing.T, h *host.Host, statePath string) *ResctrlClasses {
	t.Helper()
	st, err := OpenState(statePath)
	if err != nil {
		t.Fatal(err)
	}
	in, err := resctrl.Open(h, func(string) bool { return false }, strings.Contains(h.Root(), "amd"))
	if err != nil {
		t.Fatal(err)
	}
	return &ResctrlClasses{Host: h, Info: in, State: st}
}

// snapshot reads every file of the given groups, for "never touched" checks.
func snapshot(t *testing.T, h *host.Host, groups ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, g := range groups {
		for _, f := range []string{"schemata", "tasks", "cpus_list", "mode"} {
			p := filepath.Join(rmnt, g, f)
			b, err := os.ReadFile(h.Path(p))
			if err != nil {
				t.Fatal(err)
			}
			out[p] = string(b)
		}
	}
	return out
}

func want(t *testing.T, h *host.Host, step string, files map[string]string) {
	t.Helper()
	for p, w := range files {
		b, err := os.ReadFile(h.Path(filepath.Join(rmnt, p)))
		if err != nil {
			t.Errorf("%s: %s: %v", step, p, err)
			continue
		}
		if string(b) != w {
			t.Errorf("%s: %s = %q, want %q", step, p, b, w)
		}
	}
}

func gone(t *testing.T, h *host.Host, step, group string) {
	t.Helper()
	if _, err := os.Stat(h.Path(filepath.Join(rmnt, group))); !os.IsNotExist(err) {
		t.Errorf("%s: %s still there (%v)", step, group, err)
	}
}

// Every step of CAT and MBA on the SKX tree, exact file contents after each:
// a class per tenant at the end away from libvirt's cachetune group, one
// line written at a time, threads moved in and back where they came from —
// the libvirt group included — and the default group's and libvirt's
// schemata never written.
func TestResctrlClassesIntel(t *testing.T) {
	h, k, c, _ := classTree(t, "intel-skx-2s")
	// libvirt runs vm1 with its vCPU threads (300, 301) in its cachetune
	// group; vm1's emulator thread 302 stays in the default group.
	if _, _, err := resctrl.MoveTasks(h, resctrl.CtrlGroup(rmnt, "libvirt-vm1"), []int{300, 301}); err != nil {
		t.Fatal(err)
	}
	untouched := snapshot(t, h, "", "libvirt-vm1")
	untouched[rmnt+"/libvirt-vm1/tasks"] = "300\n301\n"
	check := func(step string) {
		t.Helper()
		for p, w := range snapshot(t, h, "", "libvirt-vm1") {
			if w != untouched[p] && !strings.HasSuffix(p, "/tasks") {
				t.Errorf("%s: %s changed: %q -> %q", step, p, untouched[p], w)
			}
		}
	}
	a := ClassTenant{ID: "/machine.slice/a", Name: "a", Threads: []int{100, 101}}
	ga := resctrl.GroupName("class", a.ID, a.Name)

	// 1. Isolate a in domain 0: 2 ways, slot 0 — the high end, since
	// libvirt-vm1 holds the low four ways (00f).
	if err := c.SetCacheWays(a, 0, 2, 0); err != nil {
		t.Fatal(err)
	}
	want(t, h, "isolate", map[string]string{
		ga + "/schemata":       "    MB:0=100;1=100\n    L3:0=600;1=7ff\n",
		ga + "/tasks":          "100\n101\n",
		ga + "/mode":           "shareable\n",
		"tasks":                "",
		"libvirt-vm1/tasks":    "300\n301\n",
		"info/last_cmd_status": "ok\n",
		"info/L3/bit_usage":    "0=SSSSSSSSSSS;1=SSSSSSSSSSS\n",
	})
	var rec classRecord
	if ok, _ := c.State.GetRecord(RecordResctrlClass, a.ID, &rec); !ok || rec.Group != ga || !rec.Created || rec.Origins["100"] != "" || rec.Applied["L3"]["0"] != "600" || rec.Initial["L3"]["0"] != "7ff" {
		t.Fatalf("record %+v", rec)
	}
	check("isolate")
	// 2. The other domain, slot 1: the low end.
	c.SetCacheWays(a, 1, 2, 1)
	want(t, h, "slot 1", map[string]string{ga + "/schemata": "    MB:0=100;1=100\n    L3:0=600;1=003\n"})
	// 3. Relax one way in domain 0.
	c.SetCacheWays(a, 0, 3, 0)
	want(t, h, "relax", map[string]string{ga + "/schemata": "    MB:0=100;1=100\n    L3:0=700;1=003\n"})
	// 4. MBA: half, then a quarter that the hardware applies as 30%.
	if err := c.SetBandwidth(a, 0, 0.5, 0); err != nil {
		t.Fatal(err)
	}
	want(t, h, "mba 50%", map[string]string{ga + "/schemata": "    MB:0= 50;1=100\n    L3:0=700;1=003\n"})
	c.SetBandwidth(a, 0, 0.25, 0)
	want(t, h, "mba 25%", map[string]string{ga + "/schemata": "    MB:0= 30;1=100\n    L3:0=700;1=003\n"})
	check("mba")
	// 5. A new thread joins the class; one that exited is skipped.
	k.Exit(103)
	a.Threads = []int{100, 101, 102, 103}
	if err := c.SyncThreads(a); err != nil {
		t.Fatal(err)
	}
	want(t, h, "new thread", map[string]string{ga + "/tasks": "100\n101\n102\n"})

	// 6. vm1 isolated too: its vCPUs come out of libvirt's group (whose
	// schemata stays as libvirt wrote it), the emulator thread out of the
	// default group.
	vm := ClassTenant{ID: "/machine.slice/vm1", Name: "vm1", Threads: []int{300, 301, 302}}
	gv := resctrl.GroupName("class", vm.ID, vm.Name)
	if err := c.SetCacheWays(vm, 1, 2, 0); err != nil {
		t.Fatal(err)
	}
	want(t, h, "isolate vm1", map[string]string{
		gv + "/schemata":    "    MB:0=100;1=100\n    L3:0=7ff;1=600\n",
		gv + "/tasks":       "300\n301\n302\n",
		"libvirt-vm1/tasks": "",
	})
	check("isolate vm1")
	// 7. Release vm1: the vCPUs go back to libvirt's group, not the root.
	if err := c.Release(vm.ID); err != nil {
		t.Fatal(err)
	}
	want(t, h, "release vm1", map[string]string{"libvirt-vm1/tasks": "300\n301\n", "tasks": "302\n"})
	gone(t, h, "release vm1", gv)
	check("release vm1")
	// 8. Give a everything back piece by piece: the class stays while
	// anything is restricted, with the initial values written back, and
	// goes when nothing is.
	c.ReleaseCache(a.ID, 0)
	want(t, h, "release L3 0", map[string]string{ga + "/schemata": "    MB:0= 30;1=100\n    L3:0=7ff;1=003\n"})
	c.ReleaseBandwidth(a.ID, 0)
	want(t, h, "release MB 0", map[string]string{ga + "/schemata": "    MB:0=100;1=100\n    L3:0=7ff;1=003\n"})
	c.ReleaseCache(a.ID, 1)
	gone(t, h, "release all", ga)
	want(t, h, "release all", map[string]string{"tasks": "100\n101\n102\n302\n", "libvirt-vm1/tasks": "300\n301\n"})
	if len(c.Classed()) != 0 {
		t.Errorf("records left: %v", c.Classed())
	}
	check("end")
	want(t, h, "end", map[string]string{"schemata": "    MB:0=100;1=100\n    L3:0=7ff;1=7ff\n", "libvirt-vm1/schemata": "    MB:0=100;1=100\n    L3:0=00f;1=00f\n"})
}

// AMD: absolute MB units (1/8 GB/s, 2048 unlimited) and, with a libvirt
// group holding the high ways, slot 0 at the low end.
func TestResctrlClassesAMD(t *testing.T) {
	h, _, c, _ := classTree(t, "amd-milan-1s")
	lv := resctrl.CtrlGroup(rmnt, "libvirt-vm2")
	if err := resctrl.Create(h, lv); err != nil {
		t.Fatal(err)
	}
	if err := resctrl.WriteLine(h, lv, resctrl.Line{Resource: "L3", Domains: []resctrl.Domain{{ID: 0, Value: "f000"}, {ID: 1, Value: "f000"}, {ID: 2, Value: "f000"}, {ID: 3, Value: "f000"}}}); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, h, "", "libvirt-vm2")
	s := ClassTenant{ID: "/s", Name: "stream", Threads: []int{7}}
	gs := resctrl.GroupName("class", s.ID, s.Name)
	if err := c.SetCacheWays(s, 1, 3, 0); err != nil {
		t.Fatal(err)
	}
	// 16 GB/s when first throttled, halved: 8 GB/s = 64 × 1/8 GB/s.
	if err := c.SetBandwidth(s, 1, 0.5, 16e9); err != nil {
		t.Fatal(err)
	}
	want(t, h, "amd", map[string]string{
		gs + "/schemata": "    L3:0=ffff;1=0007;2=ffff;3=ffff\n    MB:0=2048;1=  64;2=2048;3=2048\n",
		gs + "/size":     "    L3:0=33554432;1=6291456;2=33554432;3=33554432\n    MB:0=2048;1=64;2=2048;3=2048\n",
		gs + "/tasks":    "7\n",
	})
	// Slot 1 is the other end, next to libvirt's ways (which overlap it:
	// CAT masks may overlap; crosstalk only prefers not to).
	c.SetCacheWays(s, 2, 3, 1)
	want(t, h, "amd slot 1", map[string]string{gs + "/schemata": "    L3:0=ffff;1=0007;2=e000;3=ffff\n    MB:0=2048;1=  64;2=2048;3=2048\n"})
	// Fraction 1 is unlimited again.
	c.SetBandwidth(s, 1, 1, 16e9)
	want(t, h, "amd unthrottled", map[string]string{gs + "/schemata": "    L3:0=ffff;1=0007;2=e000;3=ffff\n    MB:0=2048;1=2048;2=2048;3=2048\n"})
	if _, err := c.MBValue(0.5, 0); err == nil {
		t.Error("AMD limit without a reference")
	}
	if v, _ := c.MBValue(0.001, 16e9); v != 1 {
		t.Errorf("tiny AMD limit %d, want the 1-unit floor", v)
	}
	if n, err := c.RestoreAll(); err != nil || n != 1 {
		t.Fatalf("restore: %d %v", n, err)
	}
	gone(t, h, "restore", gs)
	for p, w := range snapshot(t, h, "", "libvirt-vm2") {
		if !strings.HasSuffix(p, "/tasks") && w != before[p] {
			t.Errorf("%s changed: %q -> %q", p, before[p], w)
		}
	}
}

// After kill -9 the next start finds the records and undoes everything,
// threads going back to where they came from; a crosstalk class without a
// record is removed too.
func TestResctrlClassesRestoreAfterKill(t *testing.T) {
	h, _, c, statePath := classTree(t, "intel-skx-2s")
	resctrl.MoveTasks(h, resctrl.CtrlGroup(rmnt, "libvirt-vm1"), []int{300})
	vm := ClassTenant{ID: "/vm1", Name: "vm1", Threads: []int{300, 301}}
	if err := c.SetCacheWays(vm, 0, 2, 0); err != nil {
		t.Fatal(err)
	}
	c.SetBandwidth(vm, 1, 0.5, 0)
	stray := resctrl.CtrlGroup(rmnt, resctrl.GroupName("class", "/lost", "lost"))
	resctrl.Create(h, stray)
	resctrl.MoveTasks(h, stray, []int{400})
	// A new process: the state file is all it knows.
	c2 := newClasses(t, h, statePath)
	if got := c2.Classed(); len(got) != 1 || got[0] != "/vm1" {
		t.Fatalf("records after restart: %v", got)
	}
	n, err := c2.RestoreAll()
	if err != nil || n != 2 {
		t.Fatalf("restore: %d %v", n, err)
	}
	want(t, h, "restored", map[string]string{"libvirt-vm1/tasks": "300\n", "tasks": "301\n400\n"})
	gone(t, h, "restored", resctrl.GroupName("class", vm.ID, vm.Name))
	gone(t, h, "restored", stray.Ctrl)
	if n, err := c2.RestoreAll(); err != nil || n != 0 {
		t.Errorf("second restore: %d %v", n, err)
	}
}

// CLOSIDs run out: a typed error, nothing recorded, nothing left behind.
// And nothing is written when the way back cannot be recorded.
func TestResctrlClassesExhaustedAndUnrecordable(t *testing.T) {
	h, _, c, _ := classTree(t, "intel-skx-2s")
	var err error
	// 8 CLOSIDs (MB's num_closids): the default group, libvirt-vm1, six more.
	for i := 0; i < 6; i++ {
		tn := ClassTenant{ID: "/t" + string(rune('a'+i)), Name: "t", Threads: []int{10 + i}}
		if err := c.SetCacheWays(tn, 0, 2, 0); err != nil {
			t.Fatalf("class %d: %v", i, err)
		}
	}
	late := ClassTenant{ID: "/late", Name: "late", Threads: []int{99}}
	err = c.SetCacheWays(late, 0, 2, 0)
	var ce *ClassExhaustedError
	if !errors.As(err, &ce) || ce.Err.Resource != "CLOSID" || !strings.Contains(err.Error(), "out of CLOSIDs") {
		t.Fatalf("7th class: %v", err)
	}
	if ok, _ := c.State.GetRecord(RecordResctrlClass, late.ID, &classRecord{}); ok {
		t.Error("record left for a class that was never made")
	}
	gone(t, h, "exhausted", resctrl.GroupName("class", late.ID, late.Name))
	if n, err := c.RestoreAll(); err != nil || n != 6 {
		t.Fatalf("restore %d %v", n, err)
	}

	// A state file that cannot be written: no class is made.
	dir := t.TempDir()
	bad, err := OpenState(filepath.Join(dir, "sub", "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "sub"), nil, 0o644) // its directory cannot be made now
	c.State = bad
	if err := c.SetCacheWays(late, 0, 2, 0); err == nil || !strings.Contains(err.Error(), "cannot record") {
		t.Fatalf("unrecordable: %v", err)
	}
	gone(t, h, "unrecordable", resctrl.GroupName("class", late.ID, late.Name))
}

func TestMBValue(t *testing.T) {
	intel := &ResctrlClasses{Info: resctrl.Info{MB: &resctrl.MemBW{MinBandwidth: 10, Granularity: 10, Units: "percent", Max: 100}}}
	for _, tc := range []struct {
		f    float64
		want int
	}{{0.5, 50}, {0.25, 30}, {0.2, 20}, {0.05, 10}, {1, 100}, {0.999, 100}} {
		if v, err := intel.MBValue(tc.f, 0); err != nil || v != tc.want {
			t.Errorf("Intel %v: %d %v, want %d", tc.f, v, err, tc.want)
		}
	}
	if _, err := intel.MBValue(0, 0); err == nil {
		t.Error("zero rate")
	}
	mbps := &ResctrlClasses{Info: resctrl.Info{MB: &resctrl.MemBW{Units: "MBps", Max: 1<<32 - 1}}}
	if v, _ := mbps.MBValue(0.5, 2<<30); v != 1024 {
		t.Errorf("MBps %d", v)
	}
	if _, err := (&ResctrlClasses{}).MBValue(0.5, 1); err == nil {
		t.Error("no MBA")
	}
}
