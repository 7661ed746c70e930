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

// eventKind maps a perf_event_attr to what the simulator counts for it:
// the generic hardware events; the raw encodings internal/pmu gives the
// scenario's CPU model (pmu.Lookup by its cpuinfo identity: cycles,
// instructions, LLC misses and references, bus locks — exactly what
// sense.PerfEventsFor opens there, so a new entry in the PMU table is
// counted here with no change); software events. Anything else is refused:
// ENOENT for a hardware event without a core PMU, as the kernel answers,
// and EINVAL for a raw code the table does not give this model (a real
// core PMU would count whatever that code means; refusing it keeps a
// mismatch between the agent and the table loud).
//
// What a role counts is the model's figure whatever the vendor's event
// measures: on Zen 2-5 the table's LLC events are L1 data-cache fills from
// beyond / from the L3, and Zen 1's llc_references is its L2 misses; the
// simulator gives them the model's L3 references and misses.
func eventKind(m Machine, raw map[uint64]counterKind, attr *unix.PerfEventAttr) (counterKind, error) {
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
	if k, ok := raw[attr.Config]; ok {
		return k, nil
	}
	return 0, unix.EINVAL
}

// roleKinds maps the PMU table's role names (pmu.NamedEvent.Role, the
// names sense.PerfEventsFor gives its events) to what the model counts.
var roleKinds = map[string]counterKind{
	sense.EventCycles:        cntCycles,
	sense.EventInstructions:  cntInstructions,
	sense.EventLLCMisses:     cntLLCMisses,
	sense.EventLLCReferences: cntLLCRefs,
	sense.EventBusLocks:      cntBusLocks,
}

// rawEvents are the raw configs the scenario's CPU model counts, from the
// PMU table (never nil); none for a model the table does not know (the agent then
// opens the generic events).
func rawEvents(m Machine) map[uint64]counterKind {
	cm := cpuModels[m.CPU]
	arch, ok := pmu.Lookup(cm.vendor, cm.family, cm.model, cm.stepping)
	out := map[uint64]counterKind{}
	if !ok {
		return out
	}
	for _, e := range arch.Events() {
		if k, ok := roleKinds[e.Role]; ok {
			out[arch.Config(e.Event)] = k
		}
	}
	return out
}

// perfOpener is the simulator's sense.PerfOpener: a cgroup-mode event maps
// the cgroup directory the agent opened back to a tenant and counts what
// the model says that tenant did on that CPU.
type perfOpener struct{ s *simHost }

func (o perfOpener) Open(attr *unix.PerfEventAttr, pid, cpu, groupFD int, flags int) (sense.PerfFD, error) {
	if o.s.raw == nil {
		o.s.raw = rawEvents(o.s.m)
	}
	kind, err := eventKind(o.s.m, o.s.raw, attr)
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
