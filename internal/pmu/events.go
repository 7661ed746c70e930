// Package pmu knows which hardware performance events crosstalk counts on
// which CPU, encoded as the perf_event_attr the agent opens.
//
// There is no generic perf alias for bus locks, so the event is chosen by CPU
// vendor, family and model, following the kernel's
// tools/perf/pmu-events/arch/x86/mapfile.csv; testdata/pmu-events-excerpt.json
// holds the kernel's entries this table is checked against.
package pmu

import "fmt"

// Event is one core-PMU event as the kernel's pmu-events data names it.
type Event struct {
	Name  string // kernel pmu-events name, e.g. "SQ_MISC.SPLIT_LOCK"
	Code  uint16 // event select; AMD uses up to 12 bits
	Umask uint8
	File  string // pmu-events file in the microarchitecture's directory
}

// Microarch is a CPU generation with its kernel pmu-events directory.
type Microarch struct {
	Dir     string // pmu-events directory, e.g. "skylakex"
	Display string // what an operator calls it, e.g. "Skylake-SP/Cascade Lake"
	Vendor  string // "GenuineIntel" or "AuthenticAMD"
	BusLock Event
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

var (
	splitLockSKX = Event{Name: "SQ_MISC.SPLIT_LOCK", Code: 0xf4, Umask: 0x10, File: "cache.json"}
	busLockICX   = Event{Name: "SQ_MISC.BUS_LOCK", Code: 0xf4, Umask: 0x10, File: "cache.json"}
	busLockSPR   = Event{Name: "SQ_MISC.BUS_LOCK", Code: 0x2c, Umask: 0x10, File: "cache.json"}
	busLockZen1  = Event{Name: "ls_locks.bus_lock", Code: 0x25, Umask: 0x01, File: "memory.json"}
	busLockZen2  = Event{Name: "ls_locks.bus_lock", Code: 0x25, Umask: 0x01, File: "memory.json"}
	busLockZen3  = Event{Name: "ls_locks.bus_lock", Code: 0x25, Umask: 0x01, File: "memory.json"}
	busLockZen4  = Event{Name: "ls_locks.bus_lock", Code: 0x25, Umask: 0x01, File: "core.json"}
	busLockZen5  = Event{Name: "ls_locks.bus_lock", Code: 0x25, Umask: 0x01, File: "load-store.json"}
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
	{6, 0x55, 0x55, 0, 4, Microarch{Dir: "skylakex", Display: "Skylake-SP", Vendor: "GenuineIntel", BusLock: splitLockSKX}},
	{6, 0x55, 0x55, 5, 15, Microarch{Dir: "cascadelakex", Display: "Cascade Lake", Vendor: "GenuineIntel", BusLock: splitLockSKX}},
	{6, 0x6a, 0x6a, 0, 255, Microarch{Dir: "icelakex", Display: "Ice Lake-SP", Vendor: "GenuineIntel", BusLock: busLockICX}},
	{6, 0x6c, 0x6c, 0, 255, Microarch{Dir: "icelakex", Display: "Ice Lake-D", Vendor: "GenuineIntel", BusLock: busLockICX}},
	{6, 0x8f, 0x8f, 0, 255, Microarch{Dir: "sapphirerapids", Display: "Sapphire Rapids", Vendor: "GenuineIntel", BusLock: busLockSPR}},
	{6, 0xcf, 0xcf, 0, 255, Microarch{Dir: "emeraldrapids", Display: "Emerald Rapids", Vendor: "GenuineIntel", BusLock: busLockSPR}},
	{6, 0xad, 0xae, 0, 255, Microarch{Dir: "graniterapids", Display: "Granite Rapids", Vendor: "GenuineIntel", BusLock: busLockSPR}},
	{0x17, 0x00, 0x2f, 0, 255, Microarch{Dir: "amdzen1", Display: "AMD Zen 1", Vendor: "AuthenticAMD", BusLock: busLockZen1}},
	{0x17, 0x30, 0xff, 0, 255, Microarch{Dir: "amdzen2", Display: "AMD Zen 2", Vendor: "AuthenticAMD", BusLock: busLockZen2}},
	{0x19, 0x00, 0x0f, 0, 255, Microarch{Dir: "amdzen3", Display: "AMD Zen 3", Vendor: "AuthenticAMD", BusLock: busLockZen3}},
	{0x19, 0x20, 0x2f, 0, 255, Microarch{Dir: "amdzen3", Display: "AMD Zen 3", Vendor: "AuthenticAMD", BusLock: busLockZen3}},
	{0x19, 0x40, 0x5f, 0, 255, Microarch{Dir: "amdzen3", Display: "AMD Zen 3", Vendor: "AuthenticAMD", BusLock: busLockZen3}},
	// Every other family 19h model is Zen 4 in mapfile.csv.
	{0x19, 0x00, 0xff, 0, 255, Microarch{Dir: "amdzen4", Display: "AMD Zen 4", Vendor: "AuthenticAMD", BusLock: busLockZen4}},
	// Family 1Ah is shared with Zen 6; mapfile.csv gives Zen 5 these model ranges.
	{0x1a, 0x00, 0x2f, 0, 255, Microarch{Dir: "amdzen5", Display: "AMD Zen 5", Vendor: "AuthenticAMD", BusLock: busLockZen5}},
	{0x1a, 0x40, 0x4f, 0, 255, Microarch{Dir: "amdzen5", Display: "AMD Zen 5", Vendor: "AuthenticAMD", BusLock: busLockZen5}},
	{0x1a, 0x60, 0x7f, 0, 255, Microarch{Dir: "amdzen5", Display: "AMD Zen 5", Vendor: "AuthenticAMD", BusLock: busLockZen5}},
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
