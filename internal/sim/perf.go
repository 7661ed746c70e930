package sim

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/crosstalk-project/crosstalk/internal/pmu"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// counterKind is what a simulated perf event counts.
type counterKind int

const (
	cntCycles counterKind = iota
	cntRefCycles
	cntInstructions
	cntLLCRefs
	cntLLCMisses
	cntBusLocks
	cntTaskClock
	cntContextSwitches
	cntZero // counted but always 0 (migrations, faults)
)

// eventKind maps a perf_event_attr to what the simulator counts for it, the
// way the kernel and the CPU would: the generic hardware events; the raw
// encodings of the scenario's CPU model (the bus-lock event from
// internal/pmu's table, and the architectural Intel / AMD core events a PMU
// table may use instead of the generic ones); software events. Anything
// else is refused as the kernel refuses an event the PMU does not know
// (ENOENT without a hardware PMU, EINVAL for an unknown raw code).
//
// This is the one place to extend when the PMU table (hwcache) encodes more
// events per model: add their raw configs here.
func eventKind(m Machine, attr *unix.PerfEventAttr) (counterKind, error) {
	switch attr.Type {
	case unix.PERF_TYPE_SOFTWARE:
		switch attr.Config {
		case unix.PERF_COUNT_SW_TASK_CLOCK, unix.PERF_COUNT_SW_CPU_CLOCK:
			return cntTaskClock, nil
		case unix.PERF_COUNT_SW_CONTEXT_SWITCHES:
			return cntContextSwitches, nil
		case unix.PERF_COUNT_SW_CPU_MIGRATIONS, unix.PERF_COUNT_SW_PAGE_FAULTS:
			return cntZero, nil
		}
		return 0, unix.ENOENT
	case unix.PERF_TYPE_HARDWARE, unix.PERF_TYPE_RAW:
		if !on(m.Features.PMU) {
			return 0, unix.ENOENT // no core PMU: the hardware events do not exist
		}
	default:
		return 0, unix.ENOENT
	}
	if attr.Type == unix.PERF_TYPE_HARDWARE {
		switch attr.Config {
		case unix.PERF_COUNT_HW_CPU_CYCLES:
			return cntCycles, nil
		case unix.PERF_COUNT_HW_REF_CPU_CYCLES:
			return cntRefCycles, nil
		case unix.PERF_COUNT_HW_INSTRUCTIONS:
			return cntInstructions, nil
		case unix.PERF_COUNT_HW_CACHE_REFERENCES:
			return cntLLCRefs, nil
		case unix.PERF_COUNT_HW_CACHE_MISSES:
			return cntLLCMisses, nil
		}
		return 0, unix.ENOENT
	}
	cm := cpuModels[m.CPU]
	cfg := attr.Config & 0xf0000ffff // event select (with AMD's bits 32-35) and umask
	if arch, ok := pmu.Lookup(cm.vendor, cm.family, cm.model, cm.stepping); ok && arch.BusLock.Name != "" && cfg == arch.BusLockConfig() {
		return cntBusLocks, nil
	}
	if cm.vendor == "GenuineIntel" {
		switch cfg {
		case 0x003c: // CPU_CLK_UNHALTED.THREAD_P
			return cntCycles, nil
		case 0x013c: // CPU_CLK_UNHALTED.REF_XCLK (counted here at the TSC rate)
			return cntRefCycles, nil
		case 0x00c0: // INST_RETIRED.ANY_P
			return cntInstructions, nil
		case 0x4f2e: // LONGEST_LAT_CACHE.REFERENCE
			return cntLLCRefs, nil
		case 0x412e: // LONGEST_LAT_CACHE.MISS
			return cntLLCMisses, nil
		}
	} else {
		switch cfg {
		case 0x0076: // ls_not_halted_cyc
			return cntCycles, nil
		case 0x00c0: // ex_ret_instr
			return cntInstructions, nil
		case 0xff60: // l2_request_g1.all (what the kernel's cache-references is on Zen)
			return cntLLCRefs, nil
		case 0x0964: // l2_cache_req_stat.ic_dc_miss_in_l2 (cache-misses on Zen)
			return cntLLCMisses, nil
		}
	}
	return 0, unix.EINVAL
}

// perfOpener is the simulator's sense.PerfOpener: a cgroup-mode event maps
// the cgroup directory the agent opened back to a tenant and counts what
// the model says that tenant did on that CPU.
type perfOpener struct{ s *simHost }

func (o perfOpener) Open(attr *unix.PerfEventAttr, pid, cpu, groupFD int, flags int) (sense.PerfFD, error) {
	kind, err := eventKind(o.s.m, attr)
	if err != nil {
		return nil, err
	}
	if cpu < 0 || cpu >= o.s.m.CPUs() {
		return nil, unix.ENODEV
	}
	if pid == -1 {
		return &simPerfFD{s: o.s, tenant: -1}, nil // CPU-wide: the agent only probes support with it
	}
	if flags&unix.PERF_FLAG_PID_CGROUP == 0 {
		return nil, unix.EINVAL // the agent counts per cgroup only
	}
	target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(pid))
	if err != nil {
		return nil, unix.EBADF
	}
	mount := filepath.Join(o.s.root, filepath.FromSlash(cgroupRoot))
	rel, ok := strings.CutPrefix(target, mount)
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
		return nil, unix.EBADF // not a directory of the cgroup2 (perf_event) hierarchy
	}
	fd := &simPerfFD{s: o.s, tenant: -1, cpu: cpu, kind: kind}
	if i, ok := o.s.byCgroup[rel]; ok {
		fd.tenant = i
	} else {
		// A cgroup below a tenant (a VM's vcpuN) counts that tenant too;
		// any other cgroup counts nothing here.
		for i, t := range o.s.tenants {
			if o.s.present[i] && strings.HasPrefix(rel, t.cgroupPath()+"/") {
				fd.tenant = i
				break
			}
		}
	}
	fd.v0, fd.t0 = fd.raw()
	return fd, nil
}

// simPerfFD is one counter: a tenant's count on one CPU since it was opened.
type simPerfFD struct {
	s      *simHost
	tenant int
	cpu    int
	kind   counterKind
	v0, t0 float64
	closed bool
}

// raw is the tenant's cumulative count and CPU time (ns) on this CPU.
func (f *simPerfFD) raw() (value, timeNS float64) {
	if f.tenant < 0 {
		return 0, 0
	}
	t := f.s.tenants[f.tenant]
	if !t.CPUSet.Contains(f.cpu) {
		return 0, 0
	}
	share := 1 / float64(t.CPUSet.Len())
	c := &f.s.cum[f.tenant]
	var v float64
	switch f.kind {
	case cntCycles:
		v = c.cycles
	case cntRefCycles:
		v = c.refCycles
	case cntInstructions:
		v = c.instructions
	case cntLLCRefs:
		v = c.llcRefs
	case cntLLCMisses:
		v = c.llcMisses
	case cntBusLocks:
		v = c.busLocks
	case cntTaskClock:
		v = c.usage * 1e9
	case cntContextSwitches:
		v = c.ctxs
	}
	return v * share, c.usage * 1e9 * share
}

func (f *simPerfFD) Read() (value, enabled, running uint64, err error) {
	if f.closed {
		return 0, 0, 0, fmt.Errorf("read perf counter: %w", unix.EBADF)
	}
	v, t := f.raw()
	// Cgroup time only advances while the cgroup runs on the CPU; no
	// multiplexing in the simulator, so running = enabled.
	dv, dt := max(0, v-f.v0), max(0, t-f.t0)
	return uint64(dv), uint64(dt), uint64(dt), nil
}

func (f *simPerfFD) Close() error {
	f.closed = true
	return nil
}
