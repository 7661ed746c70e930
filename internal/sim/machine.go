package sim

import (
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
}

// cpuModels are the models a scenario may name, one representative part
// each (family/model/stepping as in the kernel's pmu-events mapfile.csv).
var cpuModels = map[string]cpuModel{
	"haswellx":       {"GenuineIntel", 6, 0x3f, 2, "Intel(R) Xeon(R) CPU E5-1603 v3 @ 2.80GHz", "haswell"},
	"skylakex":       {"GenuineIntel", 6, 0x55, 4, "Intel(R) Xeon(R) Platinum 8163 CPU @ 2.50GHz", "skylake"},
	"cascadelakex":   {"GenuineIntel", 6, 0x55, 7, "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", "skylake"},
	"icelakex":       {"GenuineIntel", 6, 0x6a, 6, "Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz", "icelake"},
	"sapphirerapids": {"GenuineIntel", 6, 0x8f, 8, "Intel(R) Xeon(R) Platinum 8480+", "sapphire_rapids"},
	"emeraldrapids":  {"GenuineIntel", 6, 0xcf, 2, "INTEL(R) XEON(R) PLATINUM 8592+", "sapphire_rapids"},
	"graniterapids":  {"GenuineIntel", 6, 0xad, 1, "Intel(R) Xeon(R) 6980P", "granite_rapids"},
	"zen1":           {"AuthenticAMD", 0x17, 0x01, 2, "AMD EPYC 7601 32-Core Processor", ""},
	"zen2":           {"AuthenticAMD", 0x17, 0x31, 0, "AMD EPYC 7742 64-Core Processor", ""},
	"zen3":           {"AuthenticAMD", 0x19, 0x01, 1, "AMD EPYC 7763 64-Core Processor", ""},
	"zen4":           {"AuthenticAMD", 0x19, 0x11, 1, "AMD EPYC 9654 96-Core Processor", ""},
	"zen5":           {"AuthenticAMD", 0x1a, 0x02, 1, "AMD EPYC 9755 128-Core Processor", ""},
}

func cpuModelNames() []string {
	var out []string
	for n := range cpuModels {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// newRNG returns a deterministic generator for one purpose (stream) of a seeded run.
func newRNG(seed, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, stream))
}
