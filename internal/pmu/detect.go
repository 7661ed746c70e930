package pmu

import (
	"fmt"
	"path"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

const eventSources = "/sys/bus/event_source/devices"

// Presence says whether the host has a hardware core PMU the kernel drives.
type Presence struct {
	Hardware bool     `json:"hardware"`
	PMUs     []string `json:"pmus"`               // every event source: cpu, software, msr, …
	Core     string   `json:"core_pmu,omitempty"` // "cpu", or "cpu_core" on hybrid Intel parts
	Name     string   `json:"pmu_name,omitempty"` // caps/pmu_name, e.g. "skylake"
	Reason   string   `json:"reason,omitempty"`   // why there is none
}

// Detect looks for a core PMU in sysfs. Virtual machines without a virtual
// PMU (this project's dev machines) have only software, tracepoint and msr
// event sources.
func Detect(h *host.Host) Presence {
	p := Presence{PMUs: []string{}}
	ents, err := h.ReadDir(eventSources)
	if err != nil {
		p.Reason = fmt.Sprintf("cannot list perf event sources: %v", err)
		return p
	}
	for _, e := range ents {
		p.PMUs = append(p.PMUs, e.Name())
	}
	for _, core := range []string{"cpu", "cpu_core"} {
		if h.Exists(path.Join(eventSources, core, "type")) {
			p.Hardware, p.Core = true, core
			p.Name, _ = h.ReadString(path.Join(eventSources, core, "caps/pmu_name"))
			return p
		}
	}
	p.Reason = fmt.Sprintf("no core PMU in %s (only %s): a VM without a virtual PMU, or perf support disabled; hardware counters (cycles, LLC misses, bus locks) are unavailable",
		eventSources, strings.Join(p.PMUs, ", "))
	return p
}

// ProbeCycles opens and closes a cycles counter on the calling thread, the
// cheapest proof that hardware counting works here (sysfs can list a PMU that
// a hypervisor then refuses to program). Only meaningful on the live host.
func ProbeCycles() error {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_HARDWARE,
		Config: unix.PERF_COUNT_HW_CPU_CYCLES,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Bits:   unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv,
	}
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("perf_event_open(cycles): %w", err)
	}
	return unix.Close(fd)
}
