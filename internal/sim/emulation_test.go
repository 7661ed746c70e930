package sim

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// cgroupHost is a bare tree with the cgroupfs emulation at /sys/fs/cgroup.
func cgroupHost(t *testing.T) (*host.Host, *CgroupFS, string) {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "sys/fs/cgroup"), 0o755); err != nil {
		t.Fatal(err)
	}
	cg := NewCgroupFS(cgroupRoot, cpuset.MustParse("0-7"))
	h, err := host.Open(root, host.WithKernel(&simKernel{cgroups: cg, changed: func(string) {}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h, cg, root
}

func readTree(t *testing.T, root, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, p))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCgroupFS(t *testing.T) {
	h, cg, root := cgroupHost(t)
	for _, d := range []string{"/sys/fs/cgroup/a", "/sys/fs/cgroup/a/b", "/sys/fs/cgroup/c"} {
		if err := h.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got := readTree(t, root, "sys/fs/cgroup/a/cpu.max"); got != "max 100000\n" {
		t.Errorf("new cgroup cpu.max = %q", got)
	}
	// cpu.max: normalised as the kernel does, invalid values refused.
	for _, c := range []struct{ write, want string }{
		{"50000 100000", "50000 100000\n"},
		{"2000", "2000 100000\n"},
		{"max", "max 100000\n"},
		{"1000 16000", "1000 16000\n"},
		{"max", "max 16000\n"},
	} {
		if err := h.WriteFile("/sys/fs/cgroup/a/cpu.max", []byte(c.write)); err != nil {
			t.Fatalf("write %q: %v", c.write, err)
		}
		if got := readTree(t, root, "sys/fs/cgroup/a/cpu.max"); got != c.want {
			t.Errorf("after %q cpu.max = %q, want %q", c.write, got, c.want)
		}
	}
	for _, bad := range []string{"999 100000", "1000 999", "1000 2000000", "x", "1 2 3", ""} {
		if err := h.WriteFile("/sys/fs/cgroup/a/cpu.max", []byte(bad)); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("cpu.max %q: err %v, want EINVAL", bad, err)
		}
	}
	// The real CPU-quota writer goes through it.
	l := cgroup.Layout{Mode: cgroup.ModeV2, V2: "/sys/fs/cgroup", V2Controllers: []string{"cpu", "cpuset"}}
	g := cgroup.Open(h, l, "/c")
	if err := g.SetCPUQuota(cgroup.Quota{Quota: 3 * time.Millisecond, Period: 16 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if q, err := g.CPUQuota(); err != nil || q.Quota != 3*time.Millisecond || q.Period != 16*time.Millisecond {
		t.Errorf("quota read back %v, %v", q, err)
	}
	// Tasks move between cgroups instead of replacing the file.
	for _, w := range []struct{ file, tid string }{{"a/cgroup.threads", "10"}, {"a/cgroup.threads", "11"}, {"a/b/cgroup.procs", "10"}} {
		if err := h.WriteFile("/sys/fs/cgroup/"+w.file, []byte(w.tid)); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := readTree(t, root, "sys/fs/cgroup/a/cgroup.threads"), readTree(t, root, "sys/fs/cgroup/a/b/cgroup.threads"); a != "11\n" || b != "10\n" {
		t.Errorf("tasks a=%q b=%q, want 11 and 10", a, b)
	}
	// cpuset.cpus sets the effective CPUs of the cgroup and its children.
	if err := h.WriteFile("/sys/fs/cgroup/a/cpuset.cpus", []byte("2-5")); err != nil {
		t.Fatal(err)
	}
	if got := readTree(t, root, "sys/fs/cgroup/a/b/cpuset.cpus.effective"); got != "2-5\n" {
		t.Errorf("child effective = %q", got)
	}
	if err := h.WriteFile("/sys/fs/cgroup/a/b/cpuset.cpus", []byte("4-9")); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("cpuset beyond the online CPUs: %v, want EINVAL", err)
	}
	if err := h.WriteFile("/sys/fs/cgroup/a/cpu.stat", []byte("x")); !errors.Is(err, syscall.EACCES) {
		t.Errorf("write to cpu.stat: %v, want EACCES", err)
	}
	// rmdir: busy while there are tasks or children.
	if err := h.Remove("/sys/fs/cgroup/a"); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("rmdir with a child: %v, want EBUSY", err)
	}
	if err := h.Remove("/sys/fs/cgroup/a/b"); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("rmdir with a task: %v, want EBUSY", err)
	}
	if err := cg.Exit(h, 10); err != nil {
		t.Fatal(err)
	}
	if err := h.Remove("/sys/fs/cgroup/a/b"); err != nil {
		t.Errorf("rmdir of an empty cgroup: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "sys/fs/cgroup/a/b")); !os.IsNotExist(err) {
		t.Error("cgroup still there after rmdir")
	}
	// A write to an MSR device without an offset is what the device refuses.
	os.MkdirAll(filepath.Join(root, "dev/cpu/0"), 0o755)
	os.WriteFile(filepath.Join(root, "dev/cpu/0/msr"), make([]byte, msrFileSize), 0o600)
	if err := h.WriteFile("/dev/cpu/0/msr", []byte{1, 2, 3, 4, 5, 6, 7, 8}); !errors.Is(err, syscall.EIO) {
		t.Errorf("plain write to an MSR device: %v, want EIO", err)
	}
}

// The CPU-quota actuator (state file first, then cpu.max) works on the
// emulation, and restores the original.
func TestCPUQuotaActuatorOnEmulation(t *testing.T) {
	h, _, root := cgroupHost(t)
	if err := h.Mkdir("/sys/fs/cgroup/t", 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := act.OpenState(filepath.Join(t.TempDir(), "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	l := cgroup.Layout{Mode: cgroup.ModeV2, V2: "/sys/fs/cgroup", V2Controllers: []string{"cpu"}}
	q := &act.CPUQuota{Host: h, Layout: l, State: st}
	if err := q.Apply(t.Context(), "/t", "t", cgroup.Quota{Quota: time.Millisecond, Period: 16 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if got := readTree(t, root, "sys/fs/cgroup/t/cpu.max"); got != "1000 16000\n" {
		t.Errorf("throttled cpu.max = %q", got)
	}
	if err := q.Restore(t.Context(), "/t"); err != nil {
		t.Fatal(err)
	}
	if got := readTree(t, root, "sys/fs/cgroup/t/cpu.max"); got != "max 100000\n" {
		t.Errorf("restored cpu.max = %q", got)
	}
}

// The simulated host's resctrl is internal/resctrl/resctrlfs: its files
// are the kernel's (padded schemata of a 6.8 kernel, merged per domain,
// validated), the levers the model uses come from its groups (where a
// tenant's threads are, the class's mask and MB value), and its mon_data
// shows what the model computed, summed per control group as the kernel
// does.
func TestResctrlOnSimHost(t *testing.T) {
	sc := mustParse(t, `
name: rc
noise_off: true
machine: {cpu: skylakex, sockets: 2, cores_per_socket: 4, l3_ways: 11}
tenants: [{name: a, role: victim, cpus: "0", phases: [{from: 0s, memory_bound: 0.5, working_set: 4MiB, llc_refs: 1e8}]}]
`)
	s, err := newSimHost(sc, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	h := s.h
	if err := s.appear(0); err != nil {
		t.Fatal(err)
	}
	if got := readTree(t, s.root, "sys/fs/resctrl/schemata"); got != "L3:0=7ff;1=7ff\nMB:0=100;1=100\n" {
		t.Errorf("default group schemata = %q", got)
	}
	if err := h.Mkdir("/sys/fs/resctrl/abuser", 0o755); err != nil {
		t.Fatal(err)
	}
	if got := readTree(t, s.root, "sys/fs/resctrl/abuser/schemata"); got != "L3:0=7ff;1=7ff\nMB:0=100;1=100\n" {
		t.Errorf("new group schemata = %q", got)
	}
	for _, w := range []string{"L3:0=3\n", "MB:0=50\n"} {
		if err := h.WriteFile("/sys/fs/resctrl/abuser/schemata", []byte(w)); err != nil {
			t.Fatalf("schemata %q: %v", w, err)
		}
	}
	if got := readTree(t, s.root, "sys/fs/resctrl/abuser/schemata"); got != "L3:0=003;1=7ff\nMB:0= 50;1=100\n" {
		t.Errorf("merged schemata = %q", got)
	}
	for _, bad := range []string{"L3:0=5\n", "L3:0=0\n", "L3:0=fff\n", "L3:2=3\n", "MB:0=5\n", "XX:0=1\n", "L3:0=3"} {
		if err := h.WriteFile("/sys/fs/resctrl/abuser/schemata", []byte(bad)); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("schemata %q: %v, want EINVAL", bad, err)
		}
	}
	// The tenant's vCPU thread moves to the class, then into a monitoring
	// group there; the simulator sees the class's mask and MB value.
	tid := s.tenants[0].TID(0)
	if err := h.WriteFile("/sys/fs/resctrl/abuser/tasks", []byte(itoa(tid))); err != nil {
		t.Fatal(err)
	}
	if err := h.Mkdir("/sys/fs/resctrl/abuser/mon_groups/a", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := h.WriteFile("/sys/fs/resctrl/abuser/mon_groups/a/tasks", []byte(itoa(tid))); err != nil {
		t.Fatal(err)
	}
	if err := h.WriteFile("/sys/fs/resctrl/mon_groups/x/tasks", []byte(itoa(tid))); err == nil {
		t.Error("write to a monitoring group that does not exist succeeded")
	}
	if err := s.readLevers(); err != nil {
		t.Fatal(err)
	}
	if s.levers.Mask[0][0] != 3 || s.levers.MBA[0][0] != 50 {
		t.Errorf("levers: mask %v MBA %v", s.levers.Mask[0], s.levers.MBA[0])
	}
	if !s.leverOn(0) {
		t.Error("a tenant in a restricted group is not counted as throttled")
	}
	// Monitoring data: the model's occupancy and traffic of the tenant's
	// vCPU (its emulator thread, still in the default group, does no work).
	for range 20 {
		if err := s.step(sc.Step); err != nil {
			t.Fatal(err)
		}
		s.now += sc.Step
	}
	if err := s.publish(); err != nil {
		t.Fatal(err)
	}
	ts := s.state.Tenants[0]
	mon := "sys/fs/resctrl/abuser/mon_groups/a/mon_data/mon_L3_00/"
	occ, _ := strconv.ParseFloat(strings.TrimSpace(readTree(t, s.root, mon+"llc_occupancy")), 64)
	if want := ts.Occupancy[0]; occ > want || occ < want-occupancyUnit || want < 1<<20 {
		t.Errorf("llc_occupancy %v, model %v", occ, want)
	}
	mbm, _ := strconv.ParseFloat(strings.TrimSpace(readTree(t, s.root, mon+"mbm_total_bytes")), 64)
	if want := ts.Traffic[0] * 1.0; want <= 0 || math.Abs(mbm-want)/want > 0.01 {
		t.Errorf("mbm_total_bytes %v after 1 s, model %v B/s", mbm, want)
	}
	if got := readTree(t, s.root, "sys/fs/resctrl/abuser/mon_data/mon_L3_00/mbm_total_bytes"); got != readTree(t, s.root, mon+"mbm_total_bytes") {
		t.Errorf("control group's mbm_total_bytes %q is not its monitoring group's sum", got)
	}
	if got := readTree(t, s.root, "sys/fs/resctrl/mon_data/mon_L3_00/mbm_total_bytes"); got != "0\n" {
		t.Errorf("default group counts traffic no thread of it made: %q", got)
	}
	// rmdir sends the tasks back to the default group.
	if err := h.Remove("/sys/fs/resctrl/abuser"); err != nil {
		t.Fatal(err)
	}
	if err := s.readLevers(); err != nil {
		t.Fatal(err)
	}
	if s.leverOn(0) {
		t.Error("tenant still restricted after its group was removed")
	}
	// A tenant that ends takes its threads out of resctrl.
	if err := s.vanish(0); err != nil {
		t.Fatal(err)
	}
	if err := h.WriteFile("/sys/fs/resctrl/tasks", []byte(itoa(tid))); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("moving an exited thread: %v, want ESRCH", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestClockModulationDuty(t *testing.T) {
	for v, want := range map[uint64]float64{0: 1, 0x10: 1, 0x11: 1.0 / 16, 0x18: 0.5, 0x1f: 15.0 / 16, 0x02: 1, 0x12: 2.0 / 16} {
		if got := ClockModulationDuty(v); got != want {
			t.Errorf("IA32_CLOCK_MODULATION %#x: duty %g, want %g", v, got, want)
		}
	}
}

// The perf opener maps the cgroup directory the agent opens back to its
// tenant (or a VM's vcpuN below it), recognises the model's raw bus-lock
// event, and refuses what a kernel would.
func TestPerfOpener(t *testing.T) {
	sc := mustParse(t, `
name: perf
machine: {cpu: skylakex, sockets: 1, cores_per_socket: 4}
tenants:
  - {name: p, kind: vm, role: polluter, cpus: "0-1", phases: [{from: 0s, bus_locks: 100k, llc_refs: 1e6}]}
  - {name: q, kind: container, role: bystander, cpus: "2-3", phases: [{from: 0s, llc_refs: 2e6}]}
`)
	s, err := newSimHost(sc, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	for i := range s.tenants {
		if err := s.appear(i); err != nil {
			t.Fatal(err)
		}
	}
	s.setState(steady(s.model, s.levers, 0))
	o := perfOpener{s}
	open := func(dir string, typ uint32, config uint64, cpu int) (sense.PerfFD, error) {
		f, err := s.h.OpenFile(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return o.Open(&unix.PerfEventAttr{Type: typ, Config: config}, int(f.Fd()), cpu, -1, unix.PERF_FLAG_PID_CGROUP)
	}
	pDir := cgroupRoot + s.tenants[0].cgroupPath()
	busLock, err := open(pDir, unix.PERF_TYPE_RAW, 0x10f4, 0) // SQ_MISC.SPLIT_LOCK on Skylake-SP
	if err != nil {
		t.Fatal(err)
	}
	vcpuRefs, err := open(pDir+"/libvirt/vcpu1", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CACHE_REFERENCES, 1)
	if err != nil {
		t.Fatal(err)
	}
	qRefs, err := open(cgroupRoot+s.tenants[1].cgroupPath(), unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CACHE_REFERENCES, 2)
	if err != nil {
		t.Fatal(err)
	}
	qOnP, err := open(cgroupRoot+s.tenants[1].cgroupPath(), unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CACHE_REFERENCES, 0)
	if err != nil {
		t.Fatal(err)
	}
	s.advance(2) // two seconds
	v, en, run, _ := busLock.Read()
	// 100k/s over two CPUs: 100k on CPU 0 in 2 s (with 2% noise).
	if v < 90000 || v > 110000 || en != run || en < 1.9e9 || en > 2.1e9 {
		t.Errorf("bus locks on CPU 0: %d in %d ns enabled (%d running), want ~100000 in 2e9", v, en, run)
	}
	if v, _, _, _ := vcpuRefs.Read(); v < 0.9e6 || v > 1.1e6 {
		t.Errorf("LLC references through the VM's vcpu1 cgroup on CPU 1: %d, want ~1e6", v)
	}
	if v, _, _, _ := qRefs.Read(); v < 1.8e6 || v > 2.2e6 {
		t.Errorf("container's LLC references on CPU 2: %d, want ~2e6", v)
	}
	if v, en, _, _ := qOnP.Read(); v != 0 || en != 0 {
		t.Errorf("container counted on a CPU it cannot run on: %d, %d", v, en)
	}
	if _, err := open(pDir, unix.PERF_TYPE_RAW, 0x10f5, 0); !errors.Is(err, unix.EINVAL) {
		t.Errorf("unknown raw event: %v, want EINVAL", err)
	}
	if _, err := open(pDir, unix.PERF_TYPE_RAW, 0x10f4, 9); !errors.Is(err, unix.ENODEV) {
		t.Errorf("CPU 9 of 4: %v, want ENODEV", err)
	}
	notCgroup, _ := os.Open(t.TempDir())
	defer notCgroup.Close()
	if _, err := o.Open(&unix.PerfEventAttr{Type: unix.PERF_TYPE_HARDWARE}, int(notCgroup.Fd()), 0, -1, unix.PERF_FLAG_PID_CGROUP); !errors.Is(err, unix.EBADF) {
		t.Errorf("a directory outside the cgroup tree: %v, want EBADF", err)
	}
	// Without a hardware PMU only software events exist.
	s.m.Features.PMU = new(bool)
	if _, err := open(pDir, unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CPU_CYCLES, 0); !errors.Is(err, unix.ENOENT) {
		t.Errorf("hardware event without a PMU: %v, want ENOENT", err)
	}
	if fd, err := open(pDir, unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_TASK_CLOCK, 0); err != nil {
		t.Errorf("task clock without a PMU: %v", err)
	} else if v, _, _, _ := fd.Read(); v != 0 {
		t.Errorf("fresh counter reads %d", v)
	}
}

// A monitoring group removed while its lines are in the cache leaves its
// RMID in limbo (mkdir answers EBUSY when no other is free) until the
// cache has evicted them.
func TestRMIDLimbo(t *testing.T) {
	sc := mustParse(t, `
name: limbo
noise_off: true
machine: {cpu: skylakex, sockets: 1, cores_per_socket: 4, l3_size: 16MiB, l3_ways: 16}
tenants:
  - {name: a, role: victim, cpus: "0", phases: [{from: 0s, memory_bound: 0.5, working_set: 8MiB, llc_refs: 1e8}]}
  - {name: s, role: polluter, cpus: "1", phases: [{from: 0s, memory_bound: 0.9, working_set: 1GiB, llc_refs: 2e8}]}
`)
	s, err := newSimHost(sc, simTestDir(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	run := func(d time.Duration) {
		for end := s.now + d; s.now < end; s.now += sc.Step {
			if err := s.step(sc.Step); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.publish(); err != nil {
			t.Fatal(err)
		}
	}
	run(time.Second)
	if err := s.h.Mkdir("/sys/fs/resctrl/mon_groups/a", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := s.h.WriteFile("/sys/fs/resctrl/mon_groups/a/tasks", []byte(itoa(s.tenants[0].TID(0)))); err != nil {
		t.Fatal(err)
	}
	run(time.Second)
	_, rmid, _ := s.rc.GroupIDs("mon_groups/a")
	if o := s.rmidOcc[rmid]; o == nil || o[0] < 1<<20 {
		t.Fatalf("the victim's RMID occupies %v", o)
	}
	// Take every other RMID, then free the victim's.
	for n := 0; ; n++ {
		if err := s.h.Mkdir(fmt.Sprintf("/sys/fs/resctrl/mon_groups/x%d", n), 0o755); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	if err := s.h.Remove("/sys/fs/resctrl/mon_groups/a"); err != nil {
		t.Fatal(err)
	}
	if _, limbo := s.rc.RMIDs(); limbo != 1 {
		t.Fatalf("%d RMIDs in limbo after removing a group whose lines are cached, want 1", limbo)
	}
	if err := s.h.Mkdir("/sys/fs/resctrl/mon_groups/b", 0o755); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("mkdir with the only RMID in limbo: %v, want EBUSY", err)
	}
	run(3 * time.Second) // the streamer's misses evict the victim's untouched lines
	if free, limbo := s.rc.RMIDs(); free != 1 || limbo != 0 {
		t.Errorf("after the lines were evicted: %d free, %d in limbo; want 1 and 0", free, limbo)
	}
	if err := s.h.Mkdir("/sys/fs/resctrl/mon_groups/b", 0o755); err != nil {
		t.Errorf("mkdir once the RMID left limbo: %v", err)
	}
}
