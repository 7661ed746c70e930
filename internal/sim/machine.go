package sim

import (
	"maps"
	"math/rand/v2"
	"slices"
)

// cpuModel is a CPU's identity as /proc/cpuinfo shows it: what the agent's
// PMU table (internal/pmu) keys its event encodings on.
type cpuModel struct {
	vendor                  string
	family, model, stepping int
	name                    string
	pmuName                 string // sys/bus/event_source/devices/cpu/caps/pmu_name (Intel)
	// nominalMHz is the part's base frequency; hwp says intel_pstate runs
	// it with HWP (Skylake-SP and later), which shows it as base_frequency.
	nominalMHz int
	hwp        bool
}

// cpuModels are the models a scenario may name, one representative part
// each (family/model/stepping as in the kernel's pmu-events mapfile.csv).
var cpuModels = map[string]cpuModel{
	"haswellx":       {"GenuineIntel", 6, 0x3f, 2, "Intel(R) Xeon(R) CPU E5-1603 v3 @ 2.80GHz", "haswell", 2800, false},
	"skylakex":       {"GenuineIntel", 6, 0x55, 4, "Intel(R) Xeon(R) Platinum 8163 CPU @ 2.50GHz", "skylake", 2500, true},
	"cascadelakex":   {"GenuineIntel", 6, 0x55, 7, "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", "skylake", 2500, true},
	"icelakex":       {"GenuineIntel", 6, 0x6a, 6, "Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz", "icelake", 2300, true},
	"sapphirerapids": {"GenuineIntel", 6, 0x8f, 8, "Intel(R) Xeon(R) Platinum 8480+", "sapphire_rapids", 2000, true},
	"emeraldrapids":  {"GenuineIntel", 6, 0xcf, 2, "INTEL(R) XEON(R) PLATINUM 8592+", "sapphire_rapids", 1900, true},
	"graniterapids":  {"GenuineIntel", 6, 0xad, 1, "Intel(R) Xeon(R) 6980P", "granite_rapids", 2000, true},
	"zen1":           {"AuthenticAMD", 0x17, 0x01, 2, "AMD EPYC 7601 32-Core Processor", "", 2200, false},
	"zen2":           {"AuthenticAMD", 0x17, 0x31, 0, "AMD EPYC 7742 64-Core Processor", "", 2250, false},
	"zen3":           {"AuthenticAMD", 0x19, 0x01, 1, "AMD EPYC 7763 64-Core Processor", "", 2450, false},
	"zen4":           {"AuthenticAMD", 0x19, 0x11, 1, "AMD EPYC 9654 96-Core Processor", "", 2400, false},
	"zen5":           {"AuthenticAMD", 0x1a, 0x02, 1, "AMD EPYC 9755 128-Core Processor", "", 2700, false},
}

// pStates are the frequencies (MHz) acpi-cpufreq lists for the machine,
// highest first: P0 at the maximum, the minimum, and one between (EPYC
// parts list three).
func (m Machine) pStates() []int {
	mid := (m.MaxMHz + m.MinMHz) / 2 / 100 * 100
	out := []int{m.MaxMHz}
	if mid < m.MaxMHz && mid > m.MinMHz {
		out = append(out, mid)
	}
	if m.MinMHz < m.MaxMHz {
		out = append(out, m.MinMHz)
	}
	return out
}

func cpuModelNames() []string {
	return slices.Sorted(maps.Keys(cpuModels))
}

// newRNG returns a deterministic generator for one purpose (stream) of a seeded run.
func newRNG(seed, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, stream))
}

// ExtendedClockModulation says whether the machine's CPU has 16 clock-
// modulation duty steps (ECMD, CPUID.06H:EAX[5]; every Xeon the simulator
// models has it) rather than 8; false for AMD, which has no clock
// modulation. A simulated root is not the machine the agent runs on, so
// CPUID cannot tell: the agent's configuration must
// (levers.clock_modulation.extended_duty), and this is its value.
func (m Machine) ExtendedClockModulation() bool {
	return cpuModels[m.CPU].vendor == "GenuineIntel"
}
