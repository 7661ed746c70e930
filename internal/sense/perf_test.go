package sense

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/pmu"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

// ---- fake opener -------------------------------------------------------

type fakePerfKey struct {
	dir    string // the cgroup directory the pid fd pointed at ("" for pid -1)
	typ    uint32
	config uint64
	cpu    int
}

type fakePerfCounter struct{ value, enabled, running uint64 }

type perfOpenCall struct {
	attr                   unix.PerfEventAttr
	pid, cpu, group, flags int
	dir                    string // readlink of /proc/self/fd/pid at open time
	err                    error
}

// fakePerfOpener records every open and hands out fds whose readings are the
// scripted counter of their (dir, event, cpu).
type fakePerfOpener struct {
	mu       sync.Mutex
	calls    []perfOpenCall
	counters map[fakePerfKey]*fakePerfCounter
	open     int // fds open now
	peak     int
	perDir   map[string]int // fds open now per cgroup dir
	fail     func(c perfOpenCall) error
	readErr  func(k fakePerfKey) error
}

func newFakePerfOpener() *fakePerfOpener {
	return &fakePerfOpener{counters: map[fakePerfKey]*fakePerfCounter{}, perDir: map[string]int{}}
}

func (f *fakePerfOpener) Open(attr *unix.PerfEventAttr, pid, cpu, groupFD int, flags int) (PerfFD, error) {
	c := perfOpenCall{attr: *attr, pid: pid, cpu: cpu, group: groupFD, flags: flags}
	if pid >= 0 {
		c.dir, _ = os.Readlink(fmt.Sprintf("/proc/self/fd/%d", pid))
	}
	f.mu.Lock()
	fail := f.fail
	f.mu.Unlock()
	if fail != nil {
		c.err = fail(c)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
	if c.err != nil {
		return nil, c.err
	}
	k := fakePerfKey{c.dir, attr.Type, attr.Config, cpu}
	ctr := f.counters[k]
	if ctr == nil {
		ctr = &fakePerfCounter{}
		f.counters[k] = ctr
	}
	f.open++
	f.peak = max(f.peak, f.open)
	f.perDir[c.dir]++
	return &fakePerfFD{f: f, k: k, c: ctr}, nil
}

// add advances the counter of (dir, event, cpu).
func (f *fakePerfOpener) add(dir string, e PerfEvent, cpu int, value, enabled, running uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := fakePerfKey{dir, e.Type, e.Config, cpu}
	ctr := f.counters[k]
	if ctr == nil {
		ctr = &fakePerfCounter{}
		f.counters[k] = ctr
	}
	ctr.value += value
	ctr.enabled += enabled
	ctr.running += running
}

func (f *fakePerfOpener) cgroupCalls() []perfOpenCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []perfOpenCall
	for _, c := range f.calls {
		if c.flags&unix.PERF_FLAG_PID_CGROUP != 0 {
			out = append(out, c)
		}
	}
	return out
}

func (f *fakePerfOpener) openNow() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.open
}

type fakePerfFD struct {
	f      *fakePerfOpener
	k      fakePerfKey
	c      *fakePerfCounter
	closed bool
}

func (d *fakePerfFD) Read() (uint64, uint64, uint64, error) {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	if d.closed {
		return 0, 0, 0, unix.EBADF
	}
	if d.f.readErr != nil {
		if err := d.f.readErr(d.k); err != nil {
			return 0, 0, 0, err
		}
	}
	return d.c.value, d.c.enabled, d.c.running, nil
}

func (d *fakePerfFD) Close() error {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	if d.closed {
		return errors.New("fake fd closed twice")
	}
	d.closed = true
	d.f.open--
	d.f.perDir[d.k.dir]--
	return nil
}

// ---- fixtures ----------------------------------------------------------

type perfFakeClock struct{ t time.Time }

func (c *perfFakeClock) now() time.Time          { return c.t }
func (c *perfFakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// perfTree makes a host tree with the online CPUs and a cgroup directory per
// tenant name under mount, and returns the host and the real path of mount.
func perfTree(t testing.TB, online, mount string, names ...string) (*host.Host, string) {
	t.Helper()
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "sys/devices/system/cpu"), 0o755))
	must(os.WriteFile(filepath.Join(root, "sys/devices/system/cpu/online"), []byte(online+"\n"), 0o644))
	for _, n := range names {
		must(os.MkdirAll(filepath.Join(root, mount, n), 0o755))
	}
	h, err := host.Open(root)
	must(err)
	t.Cleanup(func() { h.Close() })
	real, err := filepath.EvalSymlinks(filepath.Join(root, mount))
	must(err)
	return h, real
}

var (
	evCycles   = PerfEvent{EventCycles, unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CPU_CYCLES}
	evInstr    = PerfEvent{EventInstructions, unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_INSTRUCTIONS}
	evTask     = PerfEvent{EventTaskClock, unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_TASK_CLOCK}
	evCS       = PerfEvent{EventContextSwitches, unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_CONTEXT_SWITCHES}
	evBusLocks = PerfEvent{EventBusLocks, unix.PERF_TYPE_RAW, 0x10f4}
)

var v1PerfLayout = cgroup.Layout{Mode: cgroup.ModeHybrid, V1: map[string]string{"cpu": "/sys/fs/cgroup/cpu", "perf_event": "/sys/fs/cgroup/perf_event"}, V2: "/sys/fs/cgroup/unified"}

func newCounters(t testing.TB, h *host.Host, l cgroup.Layout, events []PerfEvent, budget int, f PerfOpener) (*PerfCounters, *perfFakeClock) {
	t.Helper()
	p, err := NewPerfCounters(h, l, events, budget, f)
	if err != nil {
		t.Fatal(err)
	}
	clk := &perfFakeClock{t: time.Unix(1_700_000_000, 0)}
	p.now = clk.now
	return p, clk
}

// flatten lists the leaves of a tree of joined errors.
func flattenErrs(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flattenErrs(e)...)
		}
		return out
	}
	return []error{err}
}

func disabledPerfEvents(err error) []string {
	var out []string
	for _, e := range flattenErrs(err) {
		var d *PerfEventDisabledError
		if errors.As(e, &d) {
			out = append(out, d.Event)
		}
	}
	return out
}

func perfTenant(name string, cpus cpuset.Set) Tenant {
	return Tenant{ID: name, Kind: KindCgroup, Name: name, Cgroup: name, CPUs: cpus}
}

// ---- PerfEventsFor ----------------------------------------------------

func perfEventNames(ev []PerfEvent) []string {
	var out []string
	for _, e := range ev {
		out = append(out, e.Name)
	}
	return out
}

func TestPerfEventsFor(t *testing.T) {
	soft := []string{"task_clock", "context_switches", "cpu_migrations"}
	if got := perfEventNames(PerfEventsFor(pmu.Presence{}, pmu.Microarch{}, false)); !slices.Equal(got, soft) {
		t.Errorf("no PMU: %v", got)
	}
	// A known model without a PMU (a VM on Zen 3) still gets no hardware events.
	zen3, ok := pmu.Lookup("AuthenticAMD", 0x19, 0x01, 1)
	if !ok {
		t.Fatal("Zen 3 unknown")
	}
	if got := perfEventNames(PerfEventsFor(pmu.Presence{}, zen3, true)); !slices.Equal(got, soft) {
		t.Errorf("no PMU, known model: %v", got)
	}
	hw := []string{"cycles", "instructions", "llc_misses", "llc_references"}
	if got := perfEventNames(PerfEventsFor(pmu.Presence{Hardware: true}, pmu.Microarch{}, false)); !slices.Equal(got, append(slices.Clone(hw), soft...)) {
		t.Errorf("PMU, unknown model: %v", got)
	}
	skx, _ := pmu.Lookup("GenuineIntel", 6, 0x55, 4)
	zen1, _ := pmu.Lookup("AuthenticAMD", 0x17, 0x01, 0)
	for _, tc := range []struct {
		arch  pmu.Microarch
		names []string
		want  map[string][2]uint64 // type, config
	}{
		{skx, []string{"cycles", "instructions", "llc_misses", "llc_references", "bus_locks"}, map[string][2]uint64{
			"cycles": {unix.PERF_TYPE_RAW, 0x3c}, "instructions": {unix.PERF_TYPE_RAW, 0xc0},
			"llc_misses": {unix.PERF_TYPE_RAW, 0x412e}, "llc_references": {unix.PERF_TYPE_RAW, 0x4f2e},
			"bus_locks": {unix.PERF_TYPE_RAW, 0x10f4}}},
		{zen3, []string{"cycles", "instructions", "llc_misses", "llc_references", "bus_locks"}, map[string][2]uint64{
			"cycles": {unix.PERF_TYPE_RAW, 0x76}, "instructions": {unix.PERF_TYPE_RAW, 0xc0},
			"llc_misses": {unix.PERF_TYPE_RAW, 0x5c44}, "llc_references": {unix.PERF_TYPE_RAW, 0x5e44},
			"bus_locks": {unix.PERF_TYPE_RAW, 0x125}}},
		// Zen 1 has no per-core L3-miss event: left out, not guessed.
		{zen1, []string{"cycles", "instructions", "llc_references", "bus_locks"}, map[string][2]uint64{
			"cycles": {unix.PERF_TYPE_RAW, 0x76}, "instructions": {unix.PERF_TYPE_RAW, 0xc0},
			"llc_references": {unix.PERF_TYPE_RAW, 0x964}, "bus_locks": {unix.PERF_TYPE_RAW, 0x125}}},
	} {
		ev := PerfEventsFor(pmu.Presence{Hardware: true, Core: "cpu"}, tc.arch, true)
		if got := perfEventNames(ev); !slices.Equal(got, append(slices.Clone(tc.names), soft...)) {
			t.Errorf("%s: %v", tc.arch.Display, got)
		}
		for _, e := range ev {
			if e.Type == unix.PERF_TYPE_SOFTWARE {
				continue
			}
			w := tc.want[e.Name]
			if uint64(e.Type) != w[0] || e.Config != w[1] {
				t.Errorf("%s %s: type %d config %#x, want %d %#x", tc.arch.Display, e.Name, e.Type, e.Config, w[0], w[1])
			}
		}
	}
	// Unknown model: generic events.
	for _, e := range PerfEventsFor(pmu.Presence{Hardware: true}, pmu.Microarch{}, false) {
		want := map[string]PerfEvent{
			"cycles":         {"cycles", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CPU_CYCLES},
			"instructions":   {"instructions", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_INSTRUCTIONS},
			"llc_misses":     {"llc_misses", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CACHE_MISSES},
			"llc_references": {"llc_references", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CACHE_REFERENCES},
		}[e.Name]
		if e.Type != unix.PERF_TYPE_SOFTWARE && e != want {
			t.Errorf("generic %s: %+v, want %+v", e.Name, e, want)
		}
	}
}

// PerfEventsFor on the host trees: the dev VM has no PMU, the reconstructed
// servers have one and a known model.
func TestPerfEventsForHostTrees(t *testing.T) {
	for name, wantBusLock := range map[string]bool{"dev-epyc-vm": false, "intel-skx-2s": true, "amd-milan-1s": true} {
		h := openTree(t, name)
		ev := perfEventsForHost(t, h)
		got := perfEventNames(ev)
		if has := slices.Contains(got, "bus_locks"); has != wantBusLock {
			t.Errorf("%s: events %v", name, got)
		}
		if name == "dev-epyc-vm" && !slices.Equal(got, []string{"task_clock", "context_switches", "cpu_migrations"}) {
			t.Errorf("%s: %v", name, got)
		}
	}
}

func perfEventsForHost(t *testing.T, h *host.Host) []PerfEvent {
	t.Helper()
	b, err := h.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Fatal(err)
	}
	id, err := topology.IdentityFromCPUInfo(string(b))
	if err != nil {
		t.Fatal(err)
	}
	arch, known := pmu.Lookup(id.Vendor, id.Family, id.Model, id.Stepping)
	return PerfEventsFor(pmu.Detect(h), arch, known)
}

// ---- construction -------------------------------------------------------

func TestNewPerfCountersHierarchy(t *testing.T) {
	h, _ := perfTree(t, "0-1", "/sys/fs/cgroup/unified", "a")
	if _, err := NewPerfCounters(h, cgroup.Layout{Mode: cgroup.ModeNone}, []PerfEvent{evTask}, 10, newFakePerfOpener()); err == nil {
		t.Error("no hierarchy accepted")
	}
	for _, bad := range [][]PerfEvent{nil, {evTask, evTask}, {{Name: ""}}} {
		if _, err := NewPerfCounters(h, v1PerfLayout, bad, 10, newFakePerfOpener()); err == nil {
			t.Errorf("events %v accepted", bad)
		}
	}
	if _, err := NewPerfCounters(h, v1PerfLayout, []PerfEvent{evTask}, 0, newFakePerfOpener()); err == nil {
		t.Error("budget 0 accepted")
	}
	// A budget past RLIMIT_NOFILE is lowered, with a warning from the first Sync.
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY {
		t.Skip("no finite RLIMIT_NOFILE")
	}
	p, _ := newCounters(t, h, v1PerfLayout, []PerfEvent{evTask}, 1<<30, newFakePerfOpener())
	if b := p.Budget(); b >= int(rl.Cur) || b < 1 {
		t.Errorf("budget %d with RLIMIT_NOFILE %d", b, rl.Cur)
	}
	if err := p.Sync(t.Context(), nil); err == nil || !strings.Contains(err.Error(), "RLIMIT_NOFILE") {
		t.Errorf("first Sync: %v", err)
	}
	if err := p.Sync(t.Context(), nil); err != nil {
		t.Errorf("second Sync: %v", err)
	}
	t.Logf("RLIMIT_NOFILE %d/%d: budget 1<<30 lowered to %d", rl.Cur, rl.Max, p.Budget())
}

// ---- attrs --------------------------------------------------------------

func TestPerfCountersAttrs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layout cgroup.Layout
		mount  string
	}{
		{"v1 perf_event", v1PerfLayout, "/sys/fs/cgroup/perf_event"},
		{"cgroup2", cgroup.Layout{Mode: cgroup.ModeHybrid, V1: map[string]string{"cpu": "/sys/fs/cgroup/cpu"}, V2: "/sys/fs/cgroup/unified"}, "/sys/fs/cgroup/unified"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, mount := perfTree(t, "0-3", tc.mount, "machine.slice/vm1", "kubepods/pod1", "other")
			// The wrong hierarchy also has the directories: the counters must not use it.
			for _, d := range []string{"machine.slice/vm1", "kubepods/pod1"} {
				if err := os.MkdirAll(filepath.Join(h.Root(), "sys/fs/cgroup/cpu", d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			f := newFakePerfOpener()
			events := []PerfEvent{evCycles, evTask, evBusLocks}
			p, _ := newCounters(t, h, tc.layout, events, 100, f)
			tenants := []Tenant{
				perfTenant("/machine.slice/vm1", cpuset.Of(1, 3)),
				perfTenant("/kubepods/pod1", cpuset.Set{}), // unconfined: all online CPUs
				perfTenant("/gone", cpuset.Of(0)),          // no directory: dropped quietly
				perfTenant("/other", cpuset.Of(2, 7)),      // CPU 7 is not online
			}
			if err := p.Sync(t.Context(), tenants); err != nil {
				t.Fatal(err)
			}
			wantCPUs := map[string][]int{
				filepath.Join(mount, "machine.slice/vm1"): {1, 3},
				filepath.Join(mount, "kubepods/pod1"):     {0, 1, 2, 3},
				filepath.Join(mount, "other"):             {2},
			}
			got := map[string]map[PerfEvent][]int{}
			for _, c := range f.cgroupCalls() {
				if c.flags != unix.PERF_FLAG_PID_CGROUP|unix.PERF_FLAG_FD_CLOEXEC || c.group != -1 {
					t.Errorf("flags %#x group %d", c.flags, c.group)
				}
				a := c.attr
				if a.Size != uint32(unsafe.Sizeof(unix.PerfEventAttr{})) ||
					a.Read_format != unix.PERF_FORMAT_TOTAL_TIME_ENABLED|unix.PERF_FORMAT_TOTAL_TIME_RUNNING ||
					a.Bits&unix.PerfBitExcludeHv == 0 || a.Bits&unix.PerfBitExcludeKernel != 0 ||
					a.Bits&unix.PerfBitDisabled != 0 || a.Bits&unix.PerfBitInherit != 0 {
					t.Errorf("attr %+v", a)
				}
				var ev PerfEvent
				for _, e := range events {
					if e.Type == a.Type && e.Config == a.Config {
						ev = e
					}
				}
				if ev.Name == "" {
					t.Errorf("unexpected event type %d config %#x", a.Type, a.Config)
				}
				if got[c.dir] == nil {
					got[c.dir] = map[PerfEvent][]int{}
				}
				got[c.dir][ev] = append(got[c.dir][ev], c.cpu)
			}
			if len(got) != len(wantCPUs) {
				t.Errorf("opened in %d dirs, want %d: %v", len(got), len(wantCPUs), got)
			}
			fds := 0
			for dir, cpus := range wantCPUs {
				for _, e := range events {
					if !slices.Equal(got[dir][e], cpus) {
						t.Errorf("%s %s: CPUs %v, want %v", dir, e.Name, got[dir][e], cpus)
					}
				}
				fds += len(events) * len(cpus)
			}
			if p.FDs() != fds || f.openNow() != fds {
				t.Errorf("FDs() = %d, fake open %d, want %d", p.FDs(), f.openNow(), fds)
			}
			// Event support is probed once, CPU-wide, before any cgroup opens.
			probes := 0
			for _, c := range f.calls {
				if c.pid == -1 {
					probes++
					if c.flags != unix.PERF_FLAG_FD_CLOEXEC || c.cpu != 0 {
						t.Errorf("probe %+v", c)
					}
				}
			}
			if probes != len(events) {
				t.Errorf("%d probes, want %d", probes, len(events))
			}
			// A second Sync with the same tenants opens nothing.
			n := len(f.calls)
			if err := p.Sync(t.Context(), tenants); err != nil || len(f.calls) != n {
				t.Errorf("resync: %v, %d new opens", err, len(f.calls)-n)
			}
			if !slices.Equal(p.Counted(), []string{"/kubepods/pod1", "/machine.slice/vm1", "/other"}) {
				t.Errorf("counted %v", p.Counted())
			}
			// A changed cpuset reopens the tenant on its new CPUs.
			tenants[0].CPUs = cpuset.Of(0)
			if err := p.Sync(t.Context(), tenants); err != nil {
				t.Fatal(err)
			}
			if want := fds - 3*2 + 3*1; p.FDs() != want || f.openNow() != want {
				t.Errorf("after cpuset change: FDs %d, fake %d, want %d", p.FDs(), f.openNow(), want)
			}
			if err := p.Close(); err != nil || f.openNow() != 0 || p.FDs() != 0 {
				t.Errorf("Close: %v, fake open %d, FDs %d", err, f.openNow(), p.FDs())
			}
		})
	}
}

// ---- rates --------------------------------------------------------------

func TestPerfCountersRates(t *testing.T) {
	h, mount := perfTree(t, "0-1", "/sys/fs/cgroup/perf_event", "a", "b")
	f := newFakePerfOpener()
	p, clk := newCounters(t, h, v1PerfLayout, []PerfEvent{evCycles, evInstr, evTask, evCS}, 100, f)
	a, b := filepath.Join(mount, "a"), filepath.Join(mount, "b")
	tenants := []Tenant{perfTenant("/a", cpuset.Of(0, 1)), perfTenant("/b", cpuset.Of(0, 1))}
	if err := p.Sync(t.Context(), tenants); err != nil {
		t.Fatal(err)
	}
	// Counters ran a while before the first Read: no rate yet, only a baseline.
	f.add(a, evCycles, 0, 5000, 100, 100)
	rates, err := p.Read(t.Context())
	if err != nil || len(rates) != 0 {
		t.Fatalf("first Read = %v, %v; want no rates", rates, err)
	}
	ms := uint64(time.Millisecond)
	// 500 ms later. a: CPU 0 multiplexed at half (running = enabled/2) doubles
	// its delta; CPU 1 fully running.
	f.add(a, evCycles, 0, 1000, 400*ms, 200*ms) // → 2000
	f.add(a, evCycles, 1, 300, 100*ms, 100*ms)  // → 300
	// instructions: measured on CPU 0 only; CPU 1 enabled but never running is
	// estimated at CPU 0's per-enabled-time rate.
	f.add(a, evInstr, 0, 800, 400*ms, 100*ms) // → 3200 over 400 ms enabled
	f.add(a, evInstr, 1, 0, 100*ms, 0)        // → 3200/400*100 = 800
	// task_clock in ns: 450 ms of CPU over the two CPUs.
	f.add(a, evTask, 0, 400*ms, 400*ms, 400*ms)
	f.add(a, evTask, 1, 50*ms, 50*ms, 50*ms)
	f.add(a, evCS, 0, 7, 400*ms, 400*ms)
	// b: never ran (cgroup time stood still), except cycles enabled but
	// never running anywhere: not measured, so omitted.
	f.add(b, evCycles, 0, 0, 100*ms, 0)
	clk.advance(500 * time.Millisecond)
	rates, err = p.Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]float64{
		"/a": {"cycles": 2300 / 0.5, "instructions": 4000 / 0.5, "task_clock": 0.45 / 0.5, "context_switches": 7 / 0.5},
		"/b": {"instructions": 0, "task_clock": 0, "context_switches": 0},
	}
	checkPerfRates(t, rates, want)

	// Next interval, 250 ms: rates are per second of this interval.
	f.add(a, evCycles, 0, 100, 10*ms, 10*ms)
	clk.advance(250 * time.Millisecond)
	rates, _ = p.Read(t.Context())
	if got := rates["/a"]["cycles"]; !perfNear(got, 400) {
		t.Errorf("cycles over 250 ms = %v, want 400", got)
	}

	// A read error omits the event and re-baselines it; the others go on.
	f.mu.Lock()
	f.readErr = func(k fakePerfKey) error {
		if k.dir == a && k.config == evTask.Config && k.typ == evTask.Type {
			return unix.EIO
		}
		return nil
	}
	f.mu.Unlock()
	f.add(a, evCS, 1, 5, ms, ms)
	clk.advance(time.Second)
	rates, err = p.Read(t.Context())
	if err == nil || !errors.Is(err, unix.EIO) {
		t.Errorf("read error not reported: %v", err)
	}
	if _, ok := rates["/a"]["task_clock"]; ok || !perfNear(rates["/a"]["context_switches"], 5) {
		t.Errorf("after read error: %v", rates["/a"])
	}
	f.mu.Lock()
	f.readErr = nil
	f.mu.Unlock()
	clk.advance(time.Second)
	rates, _ = p.Read(t.Context())
	if _, ok := rates["/a"]["task_clock"]; ok {
		t.Errorf("task_clock has a rate right after its re-baseline: %v", rates["/a"])
	}
	f.add(a, evTask, 0, 200*ms, 200*ms, 200*ms)
	clk.advance(time.Second)
	rates, _ = p.Read(t.Context())
	if !perfNear(rates["/a"]["task_clock"], 0.2) {
		t.Errorf("task_clock after re-baseline: %v", rates["/a"])
	}

	// A tenant added later gets its baseline first.
	os.MkdirAll(filepath.Join(mount, "c"), 0o755)
	if err := p.Sync(t.Context(), append(tenants, perfTenant("/c", cpuset.Of(0)))); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Second)
	rates, _ = p.Read(t.Context())
	if _, ok := rates["/c"]; ok || len(rates) != 2 {
		t.Errorf("new tenant has a rate at once: %v", rates)
	}
	clk.advance(time.Second)
	rates, _ = p.Read(t.Context())
	if _, ok := rates["/c"]; !ok {
		t.Errorf("new tenant has no rate at its second Read: %v", rates)
	}
}

func perfNear(a, b float64) bool {
	d := a - b
	return d < 1e-9*max(1, b) && d > -1e-9*max(1, b)
}

func checkPerfRates(t *testing.T, got, want map[string]map[string]float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("rates for %d tenants, want %d: %v", len(got), len(want), got)
	}
	for id, w := range want {
		g := got[id]
		if len(g) != len(w) {
			t.Errorf("%s: %v, want %v", id, g, w)
			continue
		}
		for name, v := range w {
			if gv, ok := g[name]; !ok || !perfNear(gv, v) {
				t.Errorf("%s %s = %v (present %v), want %v", id, name, gv, ok, v)
			}
		}
	}
}

func TestPerfCorrectedDelta(t *testing.T) {
	for _, tc := range []struct {
		name      string
		prev, cur []perfSample
		want      float64
		ok        bool
	}{
		{"full", []perfSample{{0, 0, 0}}, []perfSample{{10, 5, 5}}, 10, true},
		{"half running doubles", []perfSample{{100, 10, 10}}, []perfSample{{150, 30, 20}}, 100, true},
		{"idle", []perfSample{{7, 7, 7}}, []perfSample{{7, 7, 7}}, 0, true},
		{"never running", []perfSample{{0, 0, 0}}, []perfSample{{0, 10, 0}}, 0, false},
		{"backwards", []perfSample{{10, 10, 10}}, []perfSample{{5, 20, 20}}, 0, false},
		{"huge values", []perfSample{{0, 0, 0}}, []perfSample{{1 << 62, 1 << 62, 1 << 61}}, 1 << 63, true},
	} {
		got, ok := perfCorrectedDelta(tc.prev, tc.cur)
		if ok != tc.ok || (ok && !perfNear(got, tc.want)) {
			t.Errorf("%s: %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// ---- budget and rotation ------------------------------------------------

func TestPerfCountersBudgetRotation(t *testing.T) {
	const nTenants, budget = 100, 64
	var names []string
	for i := range nTenants {
		names = append(names, fmt.Sprintf("t%03d", i))
	}
	h, mount := perfTree(t, "0-3", "/sys/fs/cgroup/perf_event", names...)
	f := newFakePerfOpener()
	events := []PerfEvent{evCycles, evInstr, evTask, evCS}
	p, clk := newCounters(t, h, v1PerfLayout, events, budget, f)
	var tenants []Tenant
	for i, n := range names {
		tenants = append(tenants, perfTenant("/"+n, cpuset.Of(i%4, (i+1)%4)))
	}
	// Per tenant 4 events × 2 CPUs = 8 fds: the head (half the budget) holds
	// 4 tenants, the other 32 fds rotate 4 tenants at a time, each for two
	// Reads: the 96 others are all counted within 2·96/4 = 48 intervals.
	const bound = 2*(nTenants-4)/4 + 2
	lastRate := map[string]int{}
	maxGap := map[string]int{}
	for round := 1; round <= 3*bound; round++ {
		if err := p.Sync(t.Context(), tenants); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if p.FDs() > budget || f.openNow() != p.FDs() {
			t.Fatalf("round %d: FDs %d, fake open %d, budget %d", round, p.FDs(), f.openNow(), budget)
		}
		for _, tn := range tenants {
			for _, cpu := range tn.CPUs.List() {
				f.add(filepath.Join(mount, tn.Cgroup), evTask, cpu, 1e6, 1e6, 1e6)
			}
		}
		clk.advance(500 * time.Millisecond)
		rates, err := p.Read(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for id, r := range rates {
			if !perfNear(r["task_clock"], 2*2e-3) {
				t.Errorf("%s task_clock %v", id, r["task_clock"])
			}
			prev := lastRate[id]
			maxGap[id] = max(maxGap[id], round-prev)
			lastRate[id] = round
		}
		if round == bound {
			for _, tn := range tenants {
				if lastRate[tn.ID] == 0 {
					t.Errorf("%s not counted within %d intervals", tn.ID, bound)
				}
			}
		}
	}
	if f.peak > budget {
		t.Errorf("peak %d fds open, budget %d", f.peak, budget)
	}
	worst := 0
	for _, tn := range tenants {
		worst = max(worst, maxGap[tn.ID])
	}
	for _, tn := range tenants[:4] {
		if maxGap[tn.ID] != 2 { // baseline at round 1, then a rate every round
			t.Errorf("head tenant %s: max gap %d", tn.ID, maxGap[tn.ID])
		}
	}
	if worst > bound {
		t.Errorf("a tenant waited %d intervals for a rate, bound %d", worst, bound)
	}
	t.Logf("%d tenants × 8 fds, budget %d: worst gap between rates %d intervals (bound %d), peak fds %d", nTenants, budget, worst, bound, f.peak)

	// A new suspect goes to the front: it is counted from the next Sync on,
	// still within the budget.
	suspect := tenants[77]
	reordered := append([]Tenant{suspect}, slices.Delete(slices.Clone(tenants), 77, 78)...)
	if err := p.Sync(t.Context(), reordered); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(p.Counted(), suspect.ID) || p.FDs() > budget {
		t.Errorf("suspect not counted at once (counted %v, fds %d)", p.Counted(), p.FDs())
	}

	// Tenants vanish: their fds are closed and everybody left fits.
	if err := p.Sync(t.Context(), tenants[:5]); err != nil {
		t.Fatal(err)
	}
	if p.FDs() != 5*8 || f.openNow() != 5*8 {
		t.Errorf("after 95 vanished: FDs %d, fake %d", p.FDs(), f.openNow())
	}
	for _, tn := range tenants[5:] {
		if n := f.perDir[filepath.Join(mount, tn.Cgroup)]; n != 0 {
			t.Errorf("vanished %s still has %d fds", tn.ID, n)
		}
	}
	if err := p.Close(); err != nil || f.openNow() != 0 {
		t.Errorf("Close: %v, %d fake fds open", err, f.openNow())
	}
}

// A tenant larger than the whole budget is never opened, and says so once.
func TestPerfCountersTenantOverBudget(t *testing.T) {
	h, _ := perfTree(t, "0-63", "/sys/fs/cgroup/perf_event", "big", "small")
	f := newFakePerfOpener()
	p, _ := newCounters(t, h, v1PerfLayout, []PerfEvent{evTask, evCS}, 64, f)
	tenants := []Tenant{perfTenant("/big", cpuset.Set{}), perfTenant("/small", cpuset.Of(0))}
	err := p.Sync(t.Context(), tenants)
	if err == nil || !strings.Contains(err.Error(), "/big needs 128 descriptors") {
		t.Errorf("Sync: %v", err)
	}
	if err := p.Sync(t.Context(), tenants); err != nil {
		t.Errorf("warned twice: %v", err)
	}
	if !slices.Equal(p.Counted(), []string{"/small"}) || p.FDs() != 2 {
		t.Errorf("counted %v, %d fds", p.Counted(), p.FDs())
	}
}

// ---- errors -------------------------------------------------------------

func TestPerfCountersVanishedTenants(t *testing.T) {
	h, mount := perfTree(t, "0-1", "/sys/fs/cgroup/perf_event", "a", "b", "racy", "notperf")
	f := newFakePerfOpener()
	racy, notperf := filepath.Join(mount, "racy"), filepath.Join(mount, "notperf")
	f.fail = func(c perfOpenCall) error {
		switch c.dir {
		case racy:
			// rmdir between our directory open and perf_event_open: the
			// kernel answers ENOENT (the css is offline).
			os.Remove(racy)
			return unix.ENOENT
		case notperf:
			return unix.EBADF // a directory, but not of the perf_event hierarchy
		}
		return nil
	}
	p, _ := newCounters(t, h, v1PerfLayout, []PerfEvent{evTask, evCS}, 100, f)
	all := []Tenant{perfTenant("/a", cpuset.Of(0, 1)), perfTenant("/b", cpuset.Of(0, 1)), perfTenant("/racy", cpuset.Of(0)), perfTenant("/missing", cpuset.Of(0)), perfTenant("/notperf", cpuset.Of(0))}
	err := p.Sync(t.Context(), all)
	if len(flattenErrs(err)) != 1 || !strings.Contains(err.Error(), "not a cgroup of the perf_event hierarchy") {
		t.Errorf("Sync errors: %v", err)
	}
	if d := disabledPerfEvents(err); len(d) != 0 || len(p.Events()) != 2 {
		t.Errorf("events disabled by vanished tenants: %v", d)
	}
	if !slices.Equal(p.Counted(), []string{"/a", "/b"}) || p.FDs() != 8 || f.openNow() != 8 {
		t.Errorf("counted %v, FDs %d, fake %d", p.Counted(), p.FDs(), f.openNow())
	}
	if err := p.Sync(t.Context(), all); err != nil {
		t.Errorf("second Sync repeats warnings: %v", err)
	}
	// b vanishes: its fds are closed, a's stay.
	if err := p.Sync(t.Context(), all[:1]); err != nil {
		t.Fatal(err)
	}
	if f.perDir[filepath.Join(mount, "b")] != 0 || f.perDir[filepath.Join(mount, "a")] != 4 || p.FDs() != 4 {
		t.Errorf("after b vanished: %v, FDs %d", f.perDir, p.FDs())
	}
	if _, err := p.Read(t.Context()); err != nil {
		t.Error(err)
	}
}

func TestPerfCountersUnsupportedEvent(t *testing.T) {
	h, mount := perfTree(t, "0-1", "/sys/fs/cgroup/perf_event", "a", "b", "c")
	f := newFakePerfOpener()
	// No hardware PMU: cycles fails everywhere with ENOENT (probe included).
	// bus_locks opens CPU-wide but the PMU refuses it per cgroup (EOPNOTSUPP),
	// discovered at the second tenant, after the first one got it.
	b := filepath.Join(mount, "b")
	f.fail = func(c perfOpenCall) error {
		switch {
		case c.attr.Type == evCycles.Type && c.attr.Config == evCycles.Config:
			return unix.ENOENT
		case c.attr.Type == evBusLocks.Type && c.attr.Config == evBusLocks.Config && c.dir == b && c.cpu == 1:
			return unix.EOPNOTSUPP
		}
		return nil
	}
	p, _ := newCounters(t, h, v1PerfLayout, []PerfEvent{evCycles, evTask, evBusLocks, evCS}, 100, f)
	tenants := []Tenant{perfTenant("/a", cpuset.Of(0, 1)), perfTenant("/b", cpuset.Of(0, 1)), perfTenant("/c", cpuset.Of(0, 1))}
	err := p.Sync(t.Context(), tenants)
	got := disabledPerfEvents(err)
	slices.Sort(got)
	if !slices.Equal(got, []string{"bus_locks", "cycles"}) || len(flattenErrs(err)) != 2 {
		t.Fatalf("Sync: %v (disabled %v)", err, got)
	}
	if !errors.Is(err, unix.ENOENT) || !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("causes lost: %v", err)
	}
	if n := perfEventNames(p.Events()); !slices.Equal(n, []string{"task_clock", "context_switches"}) {
		t.Errorf("events left %v", n)
	}
	// Every tenant counts the two events left on both CPUs; a's bus_locks fds are closed.
	if !slices.Equal(p.Counted(), []string{"/a", "/b", "/c"}) || p.FDs() != 3*2*2 || f.openNow() != 12 {
		t.Errorf("counted %v, FDs %d, fake %d", p.Counted(), p.FDs(), f.openNow())
	}
	for _, c := range f.cgroupCalls() {
		if c.attr.Config == evCycles.Config && c.attr.Type == evCycles.Type {
			t.Errorf("cycles tried in cgroup mode after its probe failed: %+v", c)
		}
	}
	n := len(f.calls)
	if err := p.Sync(t.Context(), tenants); err != nil || len(f.calls) != n {
		t.Errorf("second Sync: %v, %d opens", err, len(f.calls)-n)
	}
	p.Read(t.Context())
	rates, _ := p.Read(t.Context())
	for id, r := range rates {
		if _, ok := r["cycles"]; ok {
			t.Errorf("%s has cycles", id)
		}
		if _, ok := r["task_clock"]; !ok {
			t.Errorf("%s lacks task_clock", id)
		}
	}
}

func TestPerfCountersNoPrivilegeOrDescriptors(t *testing.T) {
	h, _ := perfTree(t, "0-1", "/sys/fs/cgroup/perf_event", "a", "b", "c")
	tenants := []Tenant{perfTenant("/a", cpuset.Of(0, 1)), perfTenant("/b", cpuset.Of(0, 1)), perfTenant("/c", cpuset.Of(0, 1))}

	// Not privileged: nothing is opened, nothing is disabled, Sync says why.
	f := newFakePerfOpener()
	f.fail = func(perfOpenCall) error { return unix.EACCES }
	p, _ := newCounters(t, h, v1PerfLayout, []PerfEvent{evTask, evCS}, 100, f)
	err := p.Sync(t.Context(), tenants)
	if !errors.Is(err, unix.EACCES) || disabledPerfEvents(err) != nil || p.FDs() != 0 || len(p.Events()) != 2 {
		t.Errorf("EACCES: %v, FDs %d, events %v", err, p.FDs(), p.Events())
	}

	// No event countable at all: every one disabled once, nothing held.
	f = newFakePerfOpener()
	f.fail = func(perfOpenCall) error { return unix.ENOENT }
	p, _ = newCounters(t, h, v1PerfLayout, []PerfEvent{evTask, evCS}, 100, f)
	err = p.Sync(t.Context(), tenants)
	if d := disabledPerfEvents(err); len(d) != 2 || p.FDs() != 0 || len(p.Counted()) != 0 || len(p.Events()) != 0 {
		t.Errorf("all unsupported: %v, FDs %d, counted %v", err, p.FDs(), p.Counted())
	}
	if err := p.Sync(t.Context(), tenants); err != nil {
		t.Errorf("second Sync: %v", err)
	}

	// Out of descriptors after 6 opens: the budget shrinks to what is open,
	// no event is disabled.
	f = newFakePerfOpener()
	opened := 0
	f.fail = func(c perfOpenCall) error {
		if c.pid == -1 {
			return nil
		}
		if opened++; opened > 6 {
			return unix.EMFILE
		}
		return nil
	}
	p, _ = newCounters(t, h, v1PerfLayout, []PerfEvent{evTask, evCS}, 100, f)
	err = p.Sync(t.Context(), tenants)
	if !errors.Is(err, unix.EMFILE) || disabledPerfEvents(err) != nil || len(p.Events()) != 2 {
		t.Errorf("EMFILE: %v", err)
	}
	if p.Budget() != 4 || p.FDs() != 4 || f.openNow() != 4 {
		t.Errorf("after EMFILE: budget %d, FDs %d, fake %d", p.Budget(), p.FDs(), f.openNow())
	}
}

func TestPerfCountersClose(t *testing.T) {
	h, _ := perfTree(t, "0-3", "/sys/fs/cgroup/perf_event", "a", "b")
	f := newFakePerfOpener()
	p, _ := newCounters(t, h, v1PerfLayout, []PerfEvent{evCycles, evTask, evCS}, 100, f)
	if err := p.Sync(t.Context(), []Tenant{perfTenant("/a", cpuset.Set{}), perfTenant("/b", cpuset.Of(2))}); err != nil {
		t.Fatal(err)
	}
	if f.openNow() != 3*4+3*1 {
		t.Fatalf("fake open %d", f.openNow())
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if f.openNow() != 0 || p.FDs() != 0 {
		t.Errorf("after Close: fake open %d, FDs %d", f.openNow(), p.FDs())
	}
	if err := p.Sync(t.Context(), nil); err == nil {
		t.Error("Sync after Close")
	}
	if _, err := p.Read(t.Context()); err == nil {
		t.Error("Read after Close")
	}
}

// ---- live ---------------------------------------------------------------

// PerfEventsFor on this machine: the dev VM has no hardware PMU, so only
// software events.
func TestLivePerfEventsForThisHost(t *testing.T) {
	h, err := host.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	pres := pmu.Detect(h)
	got := perfEventNames(perfEventsForHost(t, h))
	t.Logf("this host: hardware PMU %v (%s); events %v", pres.Hardware, pres.Core, got)
	if !pres.Hardware && !slices.Equal(got, []string{"task_clock", "context_switches", "cpu_migrations"}) {
		t.Errorf("no PMU here but events %v", got)
	}
}

// In a real cgroup: a busy loop's task_clock counted in cgroup mode with the
// real opener, against the cgroup's own CPU accounting.
func TestLivePerfCgroupMode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for cgroups and cgroup-mode perf events")
	}
	h, err := host.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := cgroup.Detect(h)
	if err != nil || l.CPUControl() == "" || (l.V1["perf_event"] == "" && l.V2 == "") {
		t.Skipf("no writable cgroups with a perf_event hierarchy: %v", err)
	}
	var rl unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &rl)
	t.Logf("RLIMIT_NOFILE soft %d hard %d; perf hierarchy %q", rl.Cur, rl.Max, cmp.Or(l.V1["perf_event"], l.V2))

	// Its own top-level group: other packages' live tests clean up
	// /crosstalk-test as a whole, and packages are tested in parallel.
	top := fmt.Sprintf("/crosstalk-test-perf-%d", os.Getpid())
	name := top + "/busy"
	g, err := cgroup.Create(h, l, name, cpuset.Set{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cgroup.RemoveTree(h, l, top, 2*time.Second); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	// The dev machine is shared: weigh the group up so the loop gets a CPU.
	if m := l.V1["cpu"]; m != "" {
		h.WriteFile(path.Join(m, name, "cpu.shares"), []byte("262144"))
	} else if l.HasV2Controller("cpu") {
		h.WriteFile(path.Join(l.V2, name, "cpu.weight"), []byte("10000"))
	}
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := g.AddProc(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}

	// All events, hardware included: without a PMU here the hardware ones
	// must be disabled once each and the software ones still counted.
	events := PerfEventsFor(pmu.Presence{Hardware: true}, pmu.Microarch{}, false)
	p, err := NewPerfCounters(h, l, events, 1024, SystemPerfOpener())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	}()
	tn := Tenant{ID: name, Kind: KindCgroup, Name: "perf-test", Cgroup: name}
	err = p.Sync(t.Context(), []Tenant{tn})
	disabled := disabledPerfEvents(err)
	slices.Sort(disabled)
	t.Logf("Sync: %v", err)
	if pmu.Detect(h).Hardware {
		t.Logf("hardware PMU present: disabled %v", disabled)
	} else if !slices.Equal(disabled, []string{"cycles", "instructions", "llc_misses", "llc_references"}) || len(flattenErrs(err)) != 4 {
		t.Errorf("without a PMU: disabled %v, errors %v", disabled, err)
	}
	online, _ := h.ReadString("/sys/devices/system/cpu/online")
	ncpu := cpuset.MustParse(online).Len()
	if want := len(p.Events()) * ncpu; p.FDs() != want {
		t.Errorf("FDs %d, want %d (%d events × %d CPUs)", p.FDs(), want, len(p.Events()), ncpu)
	}
	if err := p.Sync(t.Context(), []Tenant{tn}); err != nil {
		t.Errorf("second Sync: %v", err)
	}

	if r, err := p.Read(t.Context()); err != nil || len(r) != 0 {
		t.Errorf("first Read = %v, %v", r, err)
	}
	st0, err := g.CPUStat()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	time.Sleep(300 * time.Millisecond)
	rates, err := p.Read(t.Context())
	elapsed := time.Since(t0).Seconds()
	st1, _ := g.CPUStat()
	if err != nil {
		t.Fatal(err)
	}
	r := rates[name]
	usage := (st1.Usage - st0.Usage).Seconds() / elapsed
	t.Logf("over %.3f s: perf %v; cgroup accounting %.3f CPUs", elapsed, r, usage)
	for _, e := range []string{"task_clock", "context_switches", "cpu_migrations"} {
		if _, ok := r[e]; !ok {
			t.Errorf("no %s rate", e)
		}
	}
	tc := r["task_clock"]
	if tc < 0.8*usage-0.02 || tc > 1.2*usage+0.02 {
		t.Errorf("task_clock %.3f s/s disagrees with the cgroup's CPU accounting %.3f", tc, usage)
	}
	if usage > 0.35 && tc <= 0.3 {
		t.Errorf("task_clock %.3f s/s for a busy loop", tc)
	} else if usage <= 0.35 {
		t.Logf("host too loaded for the > 0.3 s/s check: the group only got %.3f CPUs", usage)
	}

	// The process ends and the cgroup goes: the tenant is dropped.
	cmd.Process.Kill()
	cmd.Wait()
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(t.Context(), nil); err != nil || p.FDs() != 0 {
		t.Errorf("after removal: %v, FDs %d", err, p.FDs())
	}
	// Listed but gone (discovery raced with rmdir): quietly not counted.
	if err := p.Sync(t.Context(), []Tenant{tn}); err != nil || p.FDs() != 0 {
		t.Errorf("vanished tenant: %v, FDs %d", err, p.FDs())
	}
}

// ---- benchmarks ---------------------------------------------------------

// One Read of 100 tenants × 3 events × 2 CPUs with the fake opener: the cost
// of the bookkeeping alone.
func BenchmarkPerfReadFake(b *testing.B) {
	var names []string
	for i := range 100 {
		names = append(names, fmt.Sprintf("t%03d", i))
	}
	h, _ := perfTree(b, "0-1", "/sys/fs/cgroup/perf_event", names...)
	f := newFakePerfOpener()
	p, clk := newCounters(b, h, v1PerfLayout, []PerfEvent{evTask, evCS, evCycles}, 1000, f)
	var tenants []Tenant
	for _, n := range names {
		tenants = append(tenants, perfTenant("/"+n, cpuset.Of(0, 1)))
	}
	if err := p.Sync(b.Context(), tenants); err != nil || p.FDs() != 600 {
		b.Fatalf("%v, %d fds", err, p.FDs())
	}
	p.Read(b.Context())
	for b.Loop() {
		clk.advance(500 * time.Millisecond)
		if r, _ := p.Read(b.Context()); len(r) != 100 {
			b.Fatalf("%d tenants", len(r))
		}
	}
	p.Close()
}

// The same with real software counters in 100 real cgroups (root only).
func BenchmarkPerfReadLive(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	h, err := host.Open("/")
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	l, err := cgroup.Detect(h)
	if err != nil || l.CPUControl() == "" {
		b.Skip("no writable cgroups")
	}
	base := fmt.Sprintf("/crosstalk-bench-%d", os.Getpid())
	defer cgroup.RemoveTree(h, l, base, 2*time.Second)
	var tenants []Tenant
	for i := range 100 {
		name := fmt.Sprintf("%s/t%03d", base, i)
		if _, err := cgroup.Create(h, l, name, cpuset.Set{}); err != nil {
			b.Fatal(err)
		}
		tenants = append(tenants, Tenant{ID: name, Cgroup: name, CPUs: cpuset.Of(0, 1)})
	}
	events := []PerfEvent{evTask, evCS, {EventCPUMigrations, unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_CPU_MIGRATIONS}}
	p, err := NewPerfCounters(h, l, events, 1000, SystemPerfOpener())
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	t0 := time.Now()
	if err := p.Sync(b.Context(), tenants); err != nil || p.FDs() != 600 {
		b.Fatalf("%v, %d fds", err, p.FDs())
	}
	b.Logf("Sync opening 600 cgroup-mode counters: %v", time.Since(t0))
	p.Read(b.Context())
	for b.Loop() {
		if _, err := p.Read(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}

// Snapshots read a tenant's counters at any pace, corrected for
// multiplexing as Read is, and leave the interval's rates untouched.
func TestPerfCountersSnapshot(t *testing.T) {
	h, mount := perfTree(t, "0-1", "/sys/fs/cgroup/perf_event", "a")
	f := newFakePerfOpener()
	p, clk := newCounters(t, h, v1PerfLayout, []PerfEvent{evCycles, evInstr, evTask}, 100, f)
	a := filepath.Join(mount, "a")
	if err := p.Sync(t.Context(), []Tenant{perfTenant("/a", cpuset.Of(0, 1))}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Read(t.Context()); err != nil { // the interval's baseline
		t.Fatal(err)
	}
	if _, ok := p.Snapshot("/nobody", "cycles"); ok {
		t.Error("a snapshot of a tenant not counted")
	}
	ms := uint64(time.Millisecond)
	s0, ok := p.Snapshot("/a", "cycles", "instructions")
	if !ok {
		t.Fatal("no snapshot of a counted tenant")
	}
	// 25 ms: cycles multiplexed at half on CPU 0 (its delta doubles), in
	// full on CPU 1; instructions in full.
	f.add(a, evCycles, 0, 1000, 20*ms, 10*ms)
	f.add(a, evCycles, 1, 500, 5*ms, 5*ms)
	f.add(a, evInstr, 0, 1250, 20*ms, 20*ms)
	f.add(a, evTask, 0, 20*ms, 20*ms, 20*ms)
	clk.advance(25 * time.Millisecond)
	s1, _ := p.Snapshot("/a", "cycles", "instructions")
	if got := s1.At.Sub(s0.At); got != 25*time.Millisecond {
		t.Errorf("snapshots %v apart, want 25ms", got)
	}
	d := s1.Since(s0)
	if !perfNear(d["cycles"], 2500) || !perfNear(d["instructions"], 1250) {
		t.Errorf("Since = %v, want cycles 2500, instructions 1250", d)
	}
	if _, ok := d["task_clock"]; ok {
		t.Errorf("Since has an event the snapshots did not read: %v", d)
	}
	// The interval's rates still run from the interval's own baseline.
	clk.advance(975 * time.Millisecond)
	rates, err := p.Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := rates["/a"]["cycles"]; !perfNear(got, 2500) {
		t.Errorf("interval cycles rate %v after snapshots, want 2500 a second", got)
	}
}
