package resctrlfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/resctrl"
)

const mnt = "/sys/fs/resctrl"

func tree(t *testing.T, name string, opts Options) (*host.Host, *FS, string) {
	t.Helper()
	dst := filepath.Join(t.TempDir(), name)
	h, k, err := OpenTree(dst, filepath.Join("..", "..", "..", "testdata", "hosts", name), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h, k, dst
}

// file reads a file of the tree exactly (no trimming: exact contents are
// what the kernel shows).
func file(t *testing.T, h *host.Host, rel string) string {
	t.Helper()
	b, err := os.ReadFile(h.Path(filepath.Join(mnt, rel)))
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return string(b)
}

func expect(t *testing.T, h *host.Host, want map[string]string) {
	t.Helper()
	for rel, w := range want {
		if got := file(t, h, rel); got != w {
			t.Errorf("%s = %q, want %q", rel, got, w)
		}
	}
}

func write(h *host.Host, rel, data string) error {
	return h.WriteFile(filepath.Join(mnt, rel), []byte(data))
}

func mustWrite(t *testing.T, h *host.Host, rel, data string) {
	t.Helper()
	if err := write(h, rel, data); err != nil {
		t.Fatalf("write %q to %s: %v", data, rel, err)
	}
}

func mkdir(h *host.Host, rel string) error { return h.Mkdir(filepath.Join(mnt, rel), 0o755) }

// Mounting renders what the kernel shows on the reconstructed SKX host,
// filling in what the tree lacks, without changing the values of the
// libvirt group it found.
func TestMountIntel(t *testing.T) {
	h, k, _ := tree(t, "intel-skx-2s", Options{})
	expect(t, h, map[string]string{
		"schemata":                           "    MB:0=100;1=100\n    L3:0=7ff;1=7ff\n",
		"size":                               "    MB:0=100;1=100\n    L3:0=11534336;1=11534336\n",
		"mode":                               "shareable\n",
		"cpus":                               "ffffffff\n",
		"cpus_list":                          "0-31\n",
		"tasks":                              "",
		"libvirt-vm1/schemata":               "    MB:0=100;1=100\n    L3:0=00f;1=00f\n",
		"libvirt-vm1/size":                   "    MB:0=100;1=100\n    L3:0=4194304;1=4194304\n",
		"libvirt-vm1/cpus":                   "00000000\n",
		"libvirt-vm1/cpus_list":              "\n",
		"mon_data/mon_L3_00/llc_occupancy":   "0\n",
		"mon_data/mon_L3_01/mbm_total_bytes": "0\n",
		"libvirt-vm1/mon_data/mon_L3_01/mbm_local_bytes": "0\n",
		"info/last_cmd_status":                           "ok\n",
		"info/L3/bit_usage":                              "0=SSSSSSSSSSS;1=SSSSSSSSSSS\n",
	})
	if st, err := os.Stat(h.Path(mnt + "/libvirt-vm1/mon_groups")); err != nil || !st.IsDir() {
		t.Errorf("libvirt-vm1/mon_groups: %v", err)
	}
	if c, r, ok := k.GroupIDs("libvirt-vm1"); !ok || c != 1 || r != 1 {
		t.Errorf("libvirt-vm1 ids %d %d %v", c, r, ok)
	}
	if free, limbo := k.RMIDs(); free != 62 || limbo != 0 {
		t.Errorf("RMIDs free %d limbo %d, want 62 0 (64 minus root and libvirt-vm1)", free, limbo)
	}
}

func TestMountAMDTabularAndPlain(t *testing.T) {
	h, _, _ := tree(t, "amd-milan-1s", Options{})
	expect(t, h, map[string]string{
		"schemata": "    L3:0=ffff;1=ffff;2=ffff;3=ffff\n    MB:0=2048;1=2048;2=2048;3=2048\n",
		"cpus":     "ffffffff\n",
	})
	// resctrl.rst's AMD example: "MB:1=16" reads back space-padded.
	mustWrite(t, h, "schemata", "MB:1=16\n")
	expect(t, h, map[string]string{
		"schemata": "    L3:0=ffff;1=ffff;2=ffff;3=ffff\n    MB:0=2048;1=  16;2=2048;3=2048\n",
		"size":     "    L3:0=33554432;1=33554432;2=33554432;3=33554432\n    MB:0=2048;1=16;2=2048;3=2048\n",
	})

	plain := false
	h, _, _ = tree(t, "intel-skx-2s", Options{Tabular: &plain})
	mustWrite(t, h, "libvirt-vm1/schemata", "MB:0=50\n")
	expect(t, h, map[string]string{"libvirt-vm1/schemata": "    MB:0=50;1=100\n    L3:0=f;1=f\n"})
	tab := true
	h, _, _ = tree(t, "intel-skx-2s", Options{Tabular: &tab})
	mustWrite(t, h, "libvirt-vm1/schemata", "MB:0=50\n")
	expect(t, h, map[string]string{"libvirt-vm1/schemata": "    MB:0= 50;1=100\n    L3:0=00f;1=00f\n"})
}

// A control group is born with the kernel's initial allocation and files;
// CLOSIDs run out at the smallest num_closids of all resources (MB's 8).
func TestCtrlGroupsAndCLOSIDs(t *testing.T) {
	h, k, _ := tree(t, "intel-skx-2s", Options{})
	if err := mkdir(h, "g0"); err != nil {
		t.Fatal(err)
	}
	expect(t, h, map[string]string{
		"g0/schemata":                         "    MB:0=100;1=100\n    L3:0=7ff;1=7ff\n",
		"g0/mode":                             "shareable\n",
		"g0/tasks":                            "",
		"g0/cpus_list":                        "\n",
		"g0/mon_data/mon_L3_00/llc_occupancy": "0\n",
	})
	if c, _, _ := k.GroupIDs("g0"); c != 2 {
		t.Errorf("g0 CLOSID %d, want 2", c)
	}
	for i := 1; i <= 5; i++ {
		if err := mkdir(h, fmt.Sprintf("g%d", i)); err != nil {
			t.Fatalf("g%d: %v", i, err)
		}
	}
	err := mkdir(h, "g6")
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("9th CLOSID: %v, want ENOSPC", err)
	}
	if _, serr := os.Stat(h.Path(mnt + "/g6")); !os.IsNotExist(serr) {
		t.Error("failed mkdir left its directory")
	}
	expect(t, h, map[string]string{"info/last_cmd_status": "Out of CLOSIDs\n"})
	if err := h.Remove(mnt + "/g3"); err != nil {
		t.Fatal(err)
	}
	if err := mkdir(h, "g6"); err != nil {
		t.Fatalf("after freeing a CLOSID: %v", err)
	}
	if c, _, _ := k.GroupIDs("g6"); c != 5 {
		t.Errorf("reused CLOSID %d, want g3's 5", c)
	}
	for _, bad := range []string{"g0/sub", "info/x", "mon_data/x", "g0/mon_groups/mon_groups"} {
		if err := mkdir(h, bad); !errors.Is(err, unix.EPERM) {
			t.Errorf("mkdir %s: %v, want EPERM", bad, err)
		}
	}
	for _, bad := range []string{"", "info", "g0/mon_data", "g0/schemata"} {
		if err := h.Remove(filepath.Join(mnt, bad)); !errors.Is(err, unix.EPERM) {
			t.Errorf("rmdir %q: %v, want EPERM", bad, err)
		}
	}
	for _, ro := range []string{"g0/size", "info/L3/cbm_mask", "g0/mon_data/mon_L3_00/llc_occupancy", "info/last_cmd_status"} {
		if err := write(h, ro, "1\n"); !errors.Is(err, unix.EACCES) {
			t.Errorf("write %s: %v, want EACCES", ro, err)
		}
	}
}

// New groups leave out bits of exclusive groups; exclusive needs no overlap.
func TestExclusiveMode(t *testing.T) {
	h, _, _ := tree(t, "intel-skx-2s", Options{})
	mkdir(h, "rt")
	mustWrite(t, h, "rt/schemata", "L3:0=600;1=600\n")
	if err := write(h, "rt/mode", "exclusive\n"); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("exclusive over the default group's mask: %v", err)
	}
	expect(t, h, map[string]string{"info/last_cmd_status": "Schemata overlaps\n"})
	mustWrite(t, h, "schemata", "L3:0=1ff;1=1ff\n")
	mustWrite(t, h, "rt/mode", "exclusive\n")
	mkdir(h, "other")
	expect(t, h, map[string]string{
		"rt/mode":           "exclusive\n",
		"other/schemata":    "    MB:0=100;1=100\n    L3:0=1ff;1=1ff\n",
		"info/L3/bit_usage": "0=EESSSSSSSSS;1=EESSSSSSSSS\n",
	})
	if err := write(h, "other/schemata", "L3:0=400\n"); !errors.Is(err, unix.EINVAL) {
		t.Errorf("overlap with exclusive: %v", err)
	}
	expect(t, h, map[string]string{"info/last_cmd_status": "Overlaps with exclusive group\n"})
}

// Schemata writes are validated like the kernel's and merged line by line.
func TestSchemataWrites(t *testing.T) {
	h, _, _ := tree(t, "intel-skx-2s", Options{})
	mkdir(h, "g")
	start := "    MB:0=100;1=100\n    L3:0=7ff;1=7ff\n"
	for _, tc := range []struct {
		write, status string
	}{
		{"L3:0=7f7\n", "The mask 7f7 has non-consecutive 1-bits\n"},
		{"L3:0=fff\n", "Mask out of range\n"},
		{"L3:0=0\n", "Mask out of range\n"},
		{"L3:0=xyz\n", "Non-hex character in the mask xyz\n"},
		{"L3:2=f\n", "ok\n"}, // unknown domain: the kernel says nothing
		{"L3:0=f;0=f\n", "Duplicate domain 0\n"},
		{"L2:0=f\n", "Unknown or unsupported resource name 'L2'\n"},
		{"L3\n", "Missing ':'\n"},
		{"L3:\n", "Missing 'L3' value\n"},
		{"L3: 0=f\n", "Missing '=' or non-numeric domain\n"},
		{"MB:0=5\n", "MB value 5 out of range [10,100]\n"},
		{"MB:0=101\n", "MB value 101 out of range [10,100]\n"},
		{"MB:0=x\n", "Invalid MB value x\n"},
		{"L3:0=f\nMB:0=5\n", "MB value 5 out of range [10,100]\n"}, // nothing applied
	} {
		if err := write(h, "g/schemata", tc.write); !errors.Is(err, unix.EINVAL) {
			t.Errorf("%q: %v, want EINVAL", tc.write, err)
		}
		expect(t, h, map[string]string{"g/schemata": start, "info/last_cmd_status": tc.status})
	}
	if err := write(h, "g/schemata", "L3:0=f"); !errors.Is(err, unix.EINVAL) {
		t.Errorf("no trailing newline: %v", err)
	}
	// Valid: merged per line and domain; MB rounded up to the 10% step; 0x
	// prefixes and spaces around the resource name and values are accepted.
	mustWrite(t, h, "g/schemata", "L3:1=0x600;\n")
	mustWrite(t, h, "g/schemata", "  MB:0= 15\n")
	expect(t, h, map[string]string{
		"g/schemata":           "    MB:0= 20;1=100\n    L3:0=7ff;1=600\n",
		"g/size":               "    MB:0=20;1=100\n    L3:0=11534336;1=2097152\n",
		"info/last_cmd_status": "ok\n",
	})
	// The displayed text can be written back as is.
	mustWrite(t, h, "g/schemata", file(t, h, "g/schemata"))
	expect(t, h, map[string]string{"g/schemata": "    MB:0= 20;1=100\n    L3:0=7ff;1=600\n"})
}

// Task moves: one control group and at most one monitoring group per task;
// a monitoring group only takes tasks of its control group; rmdir gives
// tasks back; exited threads are ESRCH.
func TestTasks(t *testing.T) {
	h, k, _ := tree(t, "intel-skx-2s", Options{})
	mkdir(h, "g")
	mkdir(h, "g/mon_groups/m")
	mkdir(h, "mon_groups/rootmon")
	mustWrite(t, h, "tasks", "100\n")
	mustWrite(t, h, "tasks", "101\n")
	mustWrite(t, h, "mon_groups/rootmon/tasks", "101\n")
	mustWrite(t, h, "g/tasks", "100\n")
	expect(t, h, map[string]string{"tasks": "101\n", "g/tasks": "100\n", "mon_groups/rootmon/tasks": "101\n"})
	mustWrite(t, h, "g/mon_groups/m/tasks", "100\n")
	expect(t, h, map[string]string{"g/tasks": "100\n", "g/mon_groups/m/tasks": "100\n"})
	if err := write(h, "g/mon_groups/m/tasks", "101\n"); !errors.Is(err, unix.EINVAL) {
		t.Errorf("task of another control group into m: %v", err)
	}
	expect(t, h, map[string]string{"info/last_cmd_status": "Can't move task to different control group\nError while processing task 101\n"})
	// Moving 101 into g takes it out of rootmon.
	mustWrite(t, h, "g/tasks", "101\n")
	expect(t, h, map[string]string{"tasks": "", "g/tasks": "100\n101\n", "mon_groups/rootmon/tasks": "", "g/mon_groups/m/tasks": "100\n"})
	ti, _ := k.Task(100)
	_, mrmid, _ := k.GroupIDs("g/mon_groups/m")
	if ti.Ctrl != "g" || ti.Mon != "g/mon_groups/m" || ti.RMID != mrmid || ti.CLOSID != 2 {
		t.Errorf("task 100: %+v", ti)
	}
	// Lists work as on 6.2+; garbage does not.
	mustWrite(t, h, "g/tasks", "102,103\n")
	for _, bad := range []string{"x\n", "-1\n", "0\n"} {
		if err := write(h, "g/tasks", bad); !errors.Is(err, unix.EINVAL) {
			t.Errorf("tasks %q: %v", bad, err)
		}
	}
	k.Exit(103)
	expect(t, h, map[string]string{"g/tasks": "100\n101\n102\n"})
	if err := write(h, "g/tasks", "103\n"); !errors.Is(err, unix.ESRCH) {
		t.Errorf("exited thread: %v, want ESRCH", err)
	}
	expect(t, h, map[string]string{"info/last_cmd_status": "No task 103\nError while processing task 103\n"})
	// rmdir of the monitoring group: its tasks stay in g; of g: back to root.
	if err := h.Remove(mnt + "/g/mon_groups/m"); err != nil {
		t.Fatal(err)
	}
	if ti, _ := k.Task(100); ti.Ctrl != "g" || ti.Mon != "" {
		t.Errorf("after rmdir m: %+v", ti)
	}
	mkdir(h, "g/mon_groups/m2")
	mustWrite(t, h, "g/mon_groups/m2/tasks", "102\n")
	if err := h.Remove(mnt + "/g"); err != nil {
		t.Fatal(err)
	}
	expect(t, h, map[string]string{"tasks": "100\n101\n102\n"})
	if _, err := os.Stat(h.Path(mnt + "/g")); !os.IsNotExist(err) {
		t.Error("g still there")
	}
	if _, _, ok := k.GroupIDs("g/mon_groups/m2"); ok {
		t.Error("m2 survived its control group")
	}
	// With a liveness oracle, unknown threads are ESRCH.
	h2, _, _ := tree(t, "intel-skx-2s", Options{TaskExists: func(tid int) bool { return tid < 1000 }})
	if err := write(h2, "tasks", "5000\n"); !errors.Is(err, unix.ESRCH) {
		t.Errorf("dead thread: %v", err)
	}
}

// RMIDs: exhaustion is ENOSPC; freed RMIDs whose lines still occupy the
// cache wait in limbo (EBUSY) until the occupancy drops.
func TestRMIDExhaustionAndLimbo(t *testing.T) {
	h, k, _ := tree(t, "intel-skx-2s", Options{})
	for i := 0; i < 62; i++ {
		if err := mkdir(h, fmt.Sprintf("mon_groups/m%02d", i)); err != nil {
			t.Fatalf("m%02d: %v", i, err)
		}
	}
	if err := mkdir(h, "mon_groups/one-too-many"); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("64th RMID: %v", err)
	}
	expect(t, h, map[string]string{"info/last_cmd_status": "Out of RMIDs\n"})
	// A control group needs an RMID too.
	if err := mkdir(h, "ctrl"); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("control group without RMIDs: %v", err)
	}
	_, r, _ := k.GroupIDs("mon_groups/m00")
	if err := k.Account(Sample{RMID: r, Domain: 1, OccupancyBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	h.Remove(mnt + "/mon_groups/m00")
	if free, limbo := k.RMIDs(); free != 0 || limbo != 1 {
		t.Fatalf("free %d limbo %d", free, limbo)
	}
	if err := mkdir(h, "mon_groups/again"); !errors.Is(err, unix.EBUSY) {
		t.Fatalf("only a limbo RMID: %v, want EBUSY", err)
	}
	k.Account(Sample{RMID: r, Domain: 1, OccupancyBytes: 32768}) // under max_threshold_occupancy
	if err := mkdir(h, "mon_groups/again"); err != nil {
		t.Fatal(err)
	}
	if _, r2, _ := k.GroupIDs("mon_groups/again"); r2 != r {
		t.Errorf("reused RMID %d, want %d", r2, r)
	}
}

// mon_data shows the simulator's counts, a control group's as the sum over
// itself and its monitoring groups; MBM counts restart at zero for a new
// group; Unavailable is shown for the bandwidth events.
func TestMonData(t *testing.T) {
	h, k, _ := tree(t, "amd-milan-1s", Options{})
	mkdir(h, "c")
	mkdir(h, "c/mon_groups/a")
	_, rc, _ := k.GroupIDs("c")
	_, ra, _ := k.GroupIDs("c/mon_groups/a")
	k.Account(
		Sample{RMID: rc, Domain: 2, OccupancyBytes: 1000, TotalBytes: 5000, LocalBytes: 4000},
		Sample{RMID: ra, Domain: 2, OccupancyBytes: 300, TotalBytes: 700, LocalBytes: 100},
	)
	k.Account(Sample{RMID: ra, Domain: 2, OccupancyBytes: 200, TotalBytes: 300})
	expect(t, h, map[string]string{
		"c/mon_data/mon_L3_02/llc_occupancy":                "1200\n",
		"c/mon_data/mon_L3_02/mbm_total_bytes":              "6000\n",
		"c/mon_data/mon_L3_02/mbm_local_bytes":              "4100\n",
		"c/mon_groups/a/mon_data/mon_L3_02/llc_occupancy":   "200\n",
		"c/mon_groups/a/mon_data/mon_L3_02/mbm_total_bytes": "1000\n",
		"c/mon_data/mon_L3_00/llc_occupancy":                "0\n",
	})
	k.SetUnavailable(ra, 2, true)
	expect(t, h, map[string]string{
		"c/mon_groups/a/mon_data/mon_L3_02/mbm_total_bytes": "Unavailable\n",
		"c/mon_data/mon_L3_02/mbm_local_bytes":              "Unavailable\n",
		"c/mon_groups/a/mon_data/mon_L3_02/llc_occupancy":   "200\n",
	})
	if err := k.Account(Sample{RMID: ra, Domain: 9}); err == nil {
		t.Error("unknown domain accepted")
	}
	// Reallocated RMID: the MBM counts start over.
	h.Remove(mnt + "/c/mon_groups/a")
	k.Account(Sample{RMID: ra, Domain: 2, OccupancyBytes: 0})
	mkdir(h, "c/mon_groups/b")
	if _, rb, _ := k.GroupIDs("c/mon_groups/b"); rb == ra {
		t.Error("freed RMID reused before the older free ones (the kernel's free list is FIFO)")
	}
}

func TestCPUs(t *testing.T) {
	h, _, _ := tree(t, "intel-skx-2s", Options{})
	mkdir(h, "p0")
	mustWrite(t, h, "p0/cpus", "f0\n")
	expect(t, h, map[string]string{"p0/cpus_list": "4-7\n", "p0/cpus": "000000f0\n", "cpus_list": "0-3,8-31\n"})
	mustWrite(t, h, "libvirt-vm1/cpus_list", "6-9\n")
	expect(t, h, map[string]string{"p0/cpus_list": "4-5\n", "libvirt-vm1/cpus_list": "6-9\n", "cpus_list": "0-3,10-31\n"})
	mkdir(h, "p0/mon_groups/m")
	if err := write(h, "p0/mon_groups/m/cpus_list", "8\n"); !errors.Is(err, unix.EINVAL) {
		t.Errorf("mon group CPU outside its parent: %v", err)
	}
	mustWrite(t, h, "p0/mon_groups/m/cpus_list", "5\n")
	if err := write(h, "cpus_list", "0-3\n"); !errors.Is(err, unix.EINVAL) {
		t.Errorf("dropping CPUs from the default group: %v", err)
	}
	if err := write(h, "p0/cpus_list", "40\n"); !errors.Is(err, unix.EINVAL) {
		t.Errorf("offline CPU: %v", err)
	}
	h.Remove(mnt + "/p0")
	expect(t, h, map[string]string{"cpus_list": "0-5,10-31\n"})
	if !strings.HasSuffix(file(t, h, "cpus"), "\n") {
		t.Error("cpus without newline")
	}
}

func TestMountNeedsResctrl(t *testing.T) {
	k := New(Options{})
	h, err := host.Open(t.TempDir(), host.WithKernel(k))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := k.Mount(h); err == nil {
		t.Error("mounted a tree without resctrl")
	}
	// Unmounted, the hooks stay out of the way.
	if err := h.Mkdir("/x", 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(h.Path("/x/f"), nil, 0o644)
	if err := h.WriteFile("/x/f", []byte("1")); err != nil {
		t.Fatal(err)
	}
	// Mounted, paths outside the mount are plain files.
	h2, _, _ := tree(t, "intel-skx-2s", Options{})
	if err := h2.WriteFile("/proc/sys/kernel/osrelease", []byte("6.18.0\n")); err != nil {
		t.Fatal(err)
	}
}

// Whatever is written to a schemata file, the group keeps a schemata the
// kernel could hold: a failed write changes nothing, a successful one
// leaves only valid masks and MB steps.
func FuzzSchemataWrite(f *testing.F) {
	for _, s := range []string{"L3:0=f\n", "MB:1=15\n", "L3:0=f;1=0x7f0\nMB:0=100\n", "L3:0=505\n", "  L3 :1= 3 ;\n", "MB:0=999999999999\n", "L3:0=f\n\n", ""} {
		f.Add(s)
	}
	dst := filepath.Join(f.TempDir(), "skx")
	h, _, err := OpenTree(dst, filepath.Join("..", "..", "..", "testdata", "hosts", "intel-skx-2s"), Options{})
	if err != nil {
		f.Fatal(err)
	}
	defer h.Close()
	if err := mkdir(h, "g"); err != nil {
		f.Fatal(err)
	}
	ca := &resctrl.CacheAlloc{CBMMask: 0x7ff, Ways: 11, MinCBMBits: 1}
	f.Fuzz(func(t *testing.T, data string) {
		before := file(t, h, "g/schemata")
		werr := write(h, "g/schemata", data)
		after := file(t, h, "g/schemata")
		if werr != nil && after != before {
			t.Fatalf("failed write %q changed %q to %q", data, before, after)
		}
		s, err := resctrl.ParseSchemata(after)
		if err != nil {
			t.Fatalf("after %q: unparseable %q: %v", data, after, err)
		}
		for _, d := range []int{0, 1} {
			m, err := s.CacheMask("L3", d)
			if err != nil || ca.Validate(m) != nil {
				t.Fatalf("after %q: L3 domain %d mask %#x (%v)", data, d, m, err)
			}
			v, _ := s.Value("MB", d)
			n, err := strconv.Atoi(v)
			if err != nil || n < 10 || n > 100 || n%10 != 0 {
				t.Fatalf("after %q: MB domain %d = %q", data, d, v)
			}
		}
	})
}
