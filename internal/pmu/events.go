// Package pmu knows which hardware performance events crosstalk counts on
// which CPU, encoded as the perf_event_attr the agent opens.
//
// There is no generic perf alias for bus locks, and the generic cache events
// mean different things per vendor (on AMD Zen the kernel maps
// PERF_COUNT_HW_CACHE_MISSES to L2 misses), so the events are chosen by CPU
// vendor, family and model, following the kernel's
// tools/perf/pmu-events/arch/x86/mapfile.csv; testdata/pmu-events-excerpt.json
// holds the kernel's entries this table is checked against, each with the
// commit it was read at.
//
// What the LLC events count, per vendor:
//
//   - Intel: LONGEST_LAT_CACHE.MISS / .REFERENCE (0x2e, umask 0x41 / 0x4f),
//     the architectural LLC events: core-originated cacheable requests
//     (demand data and code reads, RFOs, L1 and L2 hardware prefetches) that
//     miss / look up the L3. Countable per cgroup like any core event.
//
//   - AMD Zen: the L3 belongs to the CCX and is counted by the amd_l3
//     uncore PMU (l3_lookup_state, l3_comb_clstr_state), which counts for
//     the whole CCX and cannot be opened per cgroup or per task. The nearest
//     per-core measure is the data-source breakdown of L1 data-cache fills:
//     a fill served "from beyond the L3" (another CCX's cache, local or
//     remote DRAM, CXL) is an L3 miss of a data access, and a fill from the
//     local L3 (or another L2 of the same CCX) is an L3 hit. llc_misses is
//     the event with the beyond-L3 unit-mask bits ORed together, and
//     llc_references adds the local-CCX bit. Limits, stated plainly: these
//     count only data-cache fills (instruction-fetch misses and lines the
//     L2 hardware prefetcher brings in without an L1 fill are not seen), so
//     on AMD the numbers are lower than Intel's LONGEST_LAT_CACHE counts for
//     the same work — streaming code whose lines arrive by L2 prefetch is
//     undercounted most; they rank tenants on one host, they do not compare
//     across vendors. Zen 2 has only the demand-fill event (0x43,
//     ls_refills_from_sys), whose "local cache" source also covers the other
//     CCX of the same die, so a little of its L3-miss traffic is counted as
//     hits. Zen 3–5 use the any-fill event (0x44, ls_any_fills_from_sys:
//     demand and L1 prefetch). Zen 1's kernel data has no fill-source
//     event: llc_misses is not counted there (nothing rather than a
//     mislabelled L2 figure), and llc_references is the L2 miss count
//     (l2_cache_req_stat.ic_dc_miss_in_l2, requests the L3 sees).
//
// Cycles and instructions are the architectural unhalted-core-cycles and
// retired-instructions events. On Intel the raw encodings 0x3c and 0xc0 are
// the ones perf's jevents.py uses for CPU_CLK_UNHALTED.THREAD and
// INST_RETIRED.ANY, and the kernel schedules them on fixed counters 1 and 0
// when free (FIXED_EVENT_CONSTRAINT(0x003c, 1) / (0x00c0, 0)), leaving the
// general counters to the LLC and bus-lock events.
package pmu

import (
	"fmt"
	"strings"
)

// Event is one core-PMU event as the kernel's pmu-events data names it.
type Event struct {
	Name  string // kernel pmu-events name, e.g. "SQ_MISC.SPLIT_LOCK"
	Code  uint16 // event select; AMD uses up to 12 bits
	Umask uint8
	File  string // pmu-events file in the microarchitecture's directory
	// Parts names the kernel events (same file and code) whose unit masks
	// are ORed into Umask, when the event combines several data sources.
	Parts []string
}

// Zero reports whether the event is absent (not counted on this CPU).
func (e Event) Zero() bool { return e.Name == "" }

// Microarch is a CPU generation with its kernel pmu-events directory.
type Microarch struct {
	Dir     string // pmu-events directory, e.g. "skylakex"
	Display string // what an operator calls it, e.g. "Skylake-SP/Cascade Lake"
	Vendor  string // "GenuineIntel" or "AuthenticAMD"
	BusLock Event
	// Cycles counts unhalted core cycles, Instructions retired instructions,
	// LLCMisses and LLCReferences the last-level cache as the package
	// comment describes. A zero Event is not counted on this CPU.
	Cycles        Event
	Instructions  Event
	LLCMisses     Event
	LLCReferences Event
}

// Config encodes the event as perf_event_attr.config for PERF_TYPE_RAW
// (arch/x86/events: Intel event select in bits 0-7 and umask in 8-15; AMD adds
// event select bits 8-11 at config bits 32-35).
func (m Microarch) Config(e Event) uint64 {
	c := uint64(e.Code&0xff) | uint64(e.Umask)<<8
	if m.Vendor == "AuthenticAMD" {
		c |= uint64(e.Code>>8&0xf) << 32
	}
	return c
}

// BusLockConfig is the raw config of the microarchitecture's bus-lock event.
func (m Microarch) BusLockConfig() uint64 { return m.Config(m.BusLock) }

// Events lists the microarchitecture's events by crosstalk's role name
// (cycles, instructions, llc_misses, llc_references, bus_locks), leaving out
// the absent ones.
func (m Microarch) Events() []NamedEvent {
	var out []NamedEvent
	for _, e := range []NamedEvent{
		{"cycles", m.Cycles}, {"instructions", m.Instructions},
		{"llc_misses", m.LLCMisses}, {"llc_references", m.LLCReferences},
		{"bus_locks", m.BusLock},
	} {
		if !e.Event.Zero() {
			out = append(out, e)
		}
	}
	return out
}

// NamedEvent is an event with the role crosstalk counts it for.
type NamedEvent struct {
	Role  string
	Event Event
}

// combined builds an event whose unit mask ORs several kernel events of the
// same code. name is the common prefix ("ls_any_fills_from_sys"); parts are
// the suffixes with their unit masks.
func combined(file, name string, code uint16, parts ...part) Event {
	e := Event{Code: code, File: file}
	var suffixes []string
	for _, p := range parts {
		e.Umask |= p.umask
		e.Parts = append(e.Parts, name+"."+p.suffix)
		suffixes = append(suffixes, p.suffix)
	}
	e.Name = name + ".{" + strings.Join(suffixes, ",") + "}"
	return e
}

type part struct {
	suffix string
	umask  uint8
}

var (
	splitLockSKX = Event{Name: "SQ_MISC.SPLIT_LOCK", Code: 0xf4, Umask: 0x10, File: "cache.json"}
	busLockICX   = Event{Name: "SQ_MISC.BUS_LOCK", Code: 0xf4, Umask: 0x10, File: "cache.json"}
	busLockSPR   = Event{Name: "SQ_MISC.BUS_LOCK", Code: 0x2c, Umask: 0x10, File: "cache.json"}
	busLockZen1  = Event{Name: "ls_locks.bus_lock", Code: 0x25, Umask: 0x01, File: "memory.json"}
	busLockZen2  = Event{Name: "ls_locks.bus_lock", Code: 0x25, Umask: 0x01, File: "memory.json"}
	busLockZen3  = Event{Name: "ls_locks.bus_lock", Code: 0x25, Umask: 0x01, File: "memory.json"}
	busLockZen4  = Event{Name: "ls_locks.bus_lock", Code: 0x25, Umask: 0x01, File: "core.json"}
	busLockZen5  = Event{Name: "ls_locks.bus_lock", Code: 0x25, Umask: 0x01, File: "load-store.json"}

	// Intel architectural events, the same encodings on every server core.
	cyclesIntel  = Event{Name: "CPU_CLK_UNHALTED.THREAD_P", Code: 0x3c, File: "pipeline.json"}
	instIntel    = Event{Name: "INST_RETIRED.ANY_P", Code: 0xc0, File: "pipeline.json"}
	llcMissIntel = Event{Name: "LONGEST_LAT_CACHE.MISS", Code: 0x2e, Umask: 0x41, File: "cache.json"}
	llcRefIntel  = Event{Name: "LONGEST_LAT_CACHE.REFERENCE", Code: 0x2e, Umask: 0x4f, File: "cache.json"}

	// AMD: unhalted cycles and retired instructions (the files moved between
	// generations, the codes did not).
	cyclesZen12 = Event{Name: "ls_not_halted_cyc", Code: 0x76, File: "memory.json"}
	cyclesZen3  = Event{Name: "ls_not_halted_cyc", Code: 0x76, File: "memory.json"}
	cyclesZen4  = Event{Name: "ls_not_halted_cyc", Code: 0x76, File: "core.json"}
	cyclesZen5  = Event{Name: "ls_not_halted_cyc", Code: 0x76, File: "load-store.json"}
	instZen     = Event{Name: "ex_ret_instr", Code: 0xc0, File: "core.json"}
	instZen5    = Event{Name: "ex_ret_instr", Code: 0xc0, File: "execution.json"}

	// Zen 1: L2 misses (IC and DC) are the requests the L3 sees.
	llcRefZen1 = Event{Name: "l2_cache_req_stat.ic_dc_miss_in_l2", Code: 0x64, Umask: 0x09, File: "cache.json"}

	// Zen 2: demand data-cache fills by source (0x43).
	llcMissZen2 = combined("memory.json", "ls_refills_from_sys", 0x43,
		part{"ls_mabresp_lcl_dram", 0x08}, part{"ls_mabresp_rmt_cache", 0x10}, part{"ls_mabresp_rmt_dram", 0x40})
	llcRefZen2 = combined("memory.json", "ls_refills_from_sys", 0x43,
		part{"ls_mabresp_lcl_cache", 0x02}, part{"ls_mabresp_lcl_dram", 0x08}, part{"ls_mabresp_rmt_cache", 0x10}, part{"ls_mabresp_rmt_dram", 0x40})

	// Zen 3: any data-cache fills by source (0x44).
	llcMissZen3 = combined("memory.json", "ls_any_fills_from_sys", 0x44,
		part{"ext_cache_local", 0x04}, part{"mem_io_local", 0x08}, part{"ext_cache_remote", 0x10}, part{"mem_io_remote", 0x40})
	llcRefZen3 = combined("memory.json", "ls_any_fills_from_sys", 0x44,
		part{"int_cache", 0x02}, part{"ext_cache_local", 0x04}, part{"mem_io_local", 0x08}, part{"ext_cache_remote", 0x10}, part{"mem_io_remote", 0x40})

	// Zen 4 and 5: the same event with the sources renamed (and CXL memory).
	llcMissZen4 = zen45Miss("cache.json")
	llcRefZen4  = zen45Ref("cache.json")
	llcMissZen5 = zen45Miss("load-store.json")
	llcRefZen5  = zen45Ref("load-store.json")
)

func zen45Miss(file string) Event {
	return combined(file, "ls_any_fills_from_sys", 0x44,
		part{"near_cache", 0x04}, part{"dram_io_near", 0x08}, part{"far_cache", 0x10}, part{"dram_io_far", 0x40}, part{"alternate_memories", 0x80})
}

func zen45Ref(file string) Event {
	return combined(file, "ls_any_fills_from_sys", 0x44,
		part{"local_ccx", 0x02}, part{"near_cache", 0x04}, part{"dram_io_near", 0x08}, part{"far_cache", 0x10}, part{"dram_io_far", 0x40}, part{"alternate_memories", 0x80})
}

func intel(dir, display string, busLock Event) Microarch {
	return Microarch{Dir: dir, Display: display, Vendor: "GenuineIntel", BusLock: busLock,
		Cycles: cyclesIntel, Instructions: instIntel, LLCMisses: llcMissIntel, LLCReferences: llcRefIntel}
}

var (
	zen1 = Microarch{Dir: "amdzen1", Display: "AMD Zen 1", Vendor: "AuthenticAMD", BusLock: busLockZen1,
		Cycles: cyclesZen12, Instructions: instZen, LLCReferences: llcRefZen1}
	zen2 = Microarch{Dir: "amdzen2", Display: "AMD Zen 2", Vendor: "AuthenticAMD", BusLock: busLockZen2,
		Cycles: cyclesZen12, Instructions: instZen, LLCMisses: llcMissZen2, LLCReferences: llcRefZen2}
	zen3 = Microarch{Dir: "amdzen3", Display: "AMD Zen 3", Vendor: "AuthenticAMD", BusLock: busLockZen3,
		Cycles: cyclesZen3, Instructions: instZen, LLCMisses: llcMissZen3, LLCReferences: llcRefZen3}
	zen4 = Microarch{Dir: "amdzen4", Display: "AMD Zen 4", Vendor: "AuthenticAMD", BusLock: busLockZen4,
		Cycles: cyclesZen4, Instructions: instZen, LLCMisses: llcMissZen4, LLCReferences: llcRefZen4}
	zen5 = Microarch{Dir: "amdzen5", Display: "AMD Zen 5", Vendor: "AuthenticAMD", BusLock: busLockZen5,
		Cycles: cyclesZen5, Instructions: instZen5, LLCMisses: llcMissZen5, LLCReferences: llcRefZen5}
)

// table lists, per microarchitecture, the (family, model, stepping) ranges of
// the kernel's mapfile.csv. Order matters where ranges overlap in family, as
// it does in mapfile.csv: the first match wins.
var table = []struct {
	family           int
	modelLo, modelHi int
	stepLo, stepHi   int // inclusive; 0-255 for "any"
	arch             Microarch
}{
	{6, 0x55, 0x55, 0, 4, intel("skylakex", "Skylake-SP", splitLockSKX)},
	{6, 0x55, 0x55, 5, 15, intel("cascadelakex", "Cascade Lake", splitLockSKX)},
	{6, 0x6a, 0x6a, 0, 255, intel("icelakex", "Ice Lake-SP", busLockICX)},
	{6, 0x6c, 0x6c, 0, 255, intel("icelakex", "Ice Lake-D", busLockICX)},
	{6, 0x8f, 0x8f, 0, 255, intel("sapphirerapids", "Sapphire Rapids", busLockSPR)},
	{6, 0xcf, 0xcf, 0, 255, intel("emeraldrapids", "Emerald Rapids", busLockSPR)},
	{6, 0xad, 0xae, 0, 255, intel("graniterapids", "Granite Rapids", busLockSPR)},
	{0x17, 0x00, 0x2f, 0, 255, zen1},
	{0x17, 0x30, 0xff, 0, 255, zen2},
	{0x19, 0x00, 0x0f, 0, 255, zen3},
	{0x19, 0x20, 0x2f, 0, 255, zen3},
	{0x19, 0x40, 0x5f, 0, 255, zen3},
	// Every other family 19h model is Zen 4 in mapfile.csv.
	{0x19, 0x00, 0xff, 0, 255, zen4},
	// Family 1Ah is shared with Zen 6; mapfile.csv gives Zen 5 these model ranges.
	{0x1a, 0x00, 0x2f, 0, 255, zen5},
	{0x1a, 0x40, 0x4f, 0, 255, zen5},
	{0x1a, 0x60, 0x7f, 0, 255, zen5},
}

// Lookup finds the microarchitecture of a CPU. ok is false for CPUs crosstalk
// has no verified events for (client parts, Atom servers, older Xeons).
func Lookup(vendor string, family, model, stepping int) (Microarch, bool) {
	if vendor == "HygonGenuine" {
		return Microarch{}, false // Hygon's Dhyana is Zen 1 based, but its PMU data is not in the kernel table
	}
	for _, e := range table {
		if e.arch.Vendor == vendor && e.family == family &&
			model >= e.modelLo && model <= e.modelHi &&
			stepping >= e.stepLo && stepping <= e.stepHi {
			return e.arch, true
		}
	}
	return Microarch{}, false
}

// NoEventReason explains why Lookup found nothing, for doctor's output.
func NoEventReason(vendor string, family, model int) string {
	switch vendor {
	case "GenuineIntel", "AuthenticAMD":
		return fmt.Sprintf("no verified bus-lock event for %s family %#x model %#x (crosstalk knows Skylake-SP and later Xeons and AMD Zen 1-5; Sierra Forest has none in the kernel's data)", vendor, family, model)
	case "":
		return "CPU vendor unknown"
	default:
		return fmt.Sprintf("no bus-lock event table for vendor %s", vendor)
	}
}
