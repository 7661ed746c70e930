package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/pmu"
	"github.com/crosstalk-project/crosstalk/internal/resctrl"
	"github.com/crosstalk-project/crosstalk/internal/sense"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

// Capabilities is what crosstalk can sense and control on this host.
type Capabilities struct {
	CPU      CPUCap      `json:"cpu"`
	Topology TopologyCap `json:"topology"`
	Cgroup   CgroupCap   `json:"cgroup"`
	PSI      bool        `json:"psi"`
	PSIInfo  PSICap      `json:"psi_detail"`
	PMU      PMUCap      `json:"pmu"`
	// BusLockReports says whether the kernel names threads that take split
	// or bus locks (read from /dev/kmsg), which the agent uses where no PMU
	// counts bus locks.
	BusLockReports BusLockReportsCap `json:"kernel_bus_lock_reports"`
	Resctrl        ResctrlCap        `json:"resctrl"`
	RAPL           RAPLCap           `json:"rapl"`
	CPUFreq        CPUFreqCap        `json:"cpufreq"`
	MSR            MSRCap            `json:"msr"`
	KVM            KVMCap            `json:"kvm"`
	Libvirt        LibvirtCap        `json:"libvirt"`
}

// BusLockReportsCap is the kernel's split-lock and bus-lock reporting.
type BusLockReportsCap struct {
	On     bool   `json:"on"`
	Reason string `json:"reason"`
}

// CPUCap is the CPU's identity.
type CPUCap struct {
	Vendor     string   `json:"vendor"`
	Family     int      `json:"family"`
	Model      int      `json:"model"`
	Stepping   int      `json:"stepping"`
	ModelName  string   `json:"model_name"`
	Microarch  string   `json:"microarch,omitempty"`
	Hypervisor bool     `json:"hypervisor"` // we are a guest ourselves
	Flags      []string `json:"flags_of_interest"`
	Error      string   `json:"error,omitempty"`
}

// TopologyCap summarises the topology.
type TopologyCap struct {
	CPUs           int              `json:"cpus"`
	Online         string           `json:"online"`
	Packages       int              `json:"packages"`
	Cores          int              `json:"cores"`
	ThreadsPerCore int              `json:"threads_per_core"`
	NUMANodes      int              `json:"numa_nodes"`
	Nodes          []topology.Node  `json:"nodes"`
	L3             []topology.Cache `json:"l3"`
	L2Domains      int              `json:"l2_domains"`
	Warnings       []string         `json:"warnings,omitempty"`
	Error          string           `json:"error,omitempty"`
}

// CgroupCap is the cgroup layout.
type CgroupCap struct {
	cgroup.Layout
	Controllers []string `json:"controllers"`
	CPUControl  string   `json:"cpu_control"` // "v1", "v2" or "" (no CPU throttling possible)
	Error       string   `json:"error,omitempty"`
}

// PSICap says where pressure stall information is available.
type PSICap struct {
	Host      bool   `json:"host"`
	PerCgroup bool   `json:"per_cgroup"`
	Reason    string `json:"reason,omitempty"`
}

// BusLockEvent is the raw PMU event that counts bus locks on this CPU.
type BusLockEvent struct {
	Name   string `json:"name"`
	Config uint64 `json:"config"` // perf_event_attr.config for PERF_TYPE_RAW
	Source string `json:"source"` // kernel pmu-events file
}

// PMUCap is the hardware PMU and the bus-lock event.
type PMUCap struct {
	pmu.Presence
	LiveProbe string `json:"live_probe,omitempty"` // "ok" or the error, live host only
	// BusLockEvent is set only when the event can be counted here: a known
	// CPU model and a working hardware PMU.
	BusLockEvent  *BusLockEvent `json:"bus_lock_event"`
	BusLockReason string        `json:"bus_lock_reason,omitempty"`
	// ModelBusLockEvent is the table's event for this CPU model, PMU or not,
	// so an operator knows what a bare-metal sibling of this host would use.
	ModelBusLockEvent *BusLockEvent `json:"model_bus_lock_event"`
}

// ResctrlCap is resctrl's state.
type ResctrlCap struct {
	Mounted    bool                `json:"mounted"`
	Supported  bool                `json:"kernel_support"` // "resctrl" in /proc/filesystems
	CPUSupport []string            `json:"cpu_support"`
	Mount      string              `json:"mount,omitempty"`
	L3CAT      *resctrl.CacheAlloc `json:"l3_cat"`
	L2CAT      *resctrl.CacheAlloc `json:"l2_cat"`
	CDP        bool                `json:"cdp"`
	MBA        bool                `json:"mba"`
	MBADetail  *resctrl.MemBW      `json:"mba_detail"`
	Monitoring *resctrl.Monitoring `json:"monitoring"`
	Groups     []string            `json:"groups"`
	Reason     string              `json:"reason,omitempty"`
	Warnings   []string            `json:"warnings,omitempty"`
}

// RAPLCap lists the RAPL power zones.
type RAPLCap struct {
	Zones      []string         `json:"zones"`
	ZoneDetail []sense.RAPLZone `json:"zone_detail"`
	Reason     string           `json:"reason,omitempty"`
}

// CPUFreqCap summarises cpufreq.
type CPUFreqCap struct {
	Present   bool     `json:"present"`
	Policies  int      `json:"policies"`
	Drivers   []string `json:"drivers"`
	Governors []string `json:"governors"`
	HWMinKHz  int64    `json:"cpuinfo_min_khz,omitempty"`
	HWMaxKHz  int64    `json:"cpuinfo_max_khz,omitempty"`
	// Capped lists policies whose scaling_max_freq is below the hardware maximum.
	Capped []string `json:"capped"`
	Reason string   `json:"reason,omitempty"`
}

// MSRCap says whether model-specific registers can be written (clock modulation).
type MSRCap struct {
	Present bool   `json:"present"`
	CPUs    int    `json:"cpus"`
	Reason  string `json:"reason,omitempty"`
}

// KVMCap describes the hypervisor side.
type KVMCap struct {
	Device bool `json:"dev_kvm"`
	// Virtualization is "vmx", "svm" or "" (CPU flag).
	Virtualization string `json:"virtualization"`
	Module         string `json:"module,omitempty"` // kvm_intel or kvm_amd when loaded
	// TDP is two-dimensional paging: EPT on Intel, NPT on AMD; null when unknown.
	TDP      *bool  `json:"tdp"`
	TDPParam string `json:"tdp_param,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// LibvirtCap says whether libvirt's socket is there.
type LibvirtCap struct {
	Socket  string `json:"socket,omitempty"`
	Present bool   `json:"present"`
}

// flagsOfInterest are the cpuinfo flags doctor's readers care about.
var flagsOfInterest = []string{
	"hypervisor", "vmx", "svm", "ept", "npt", "ht",
	"split_lock_detect", "bus_lock_detect",
	"rdt_a", "cat_l3", "cat_l2", "cdp_l3", "mba", "cqm_llc", "cqm_occup_llc", "cqm_mbm_total", "cqm_mbm_local",
	"avx2", "avx512f", "fma", "arch_perfmon", "perfctr_core",
}

func capabilities(e *env) Capabilities {
	var c Capabilities
	c.CPU = cpuCap(e)
	c.Topology = topologyCap(e)
	c.Cgroup = cgroupCap(e)
	c.PSIInfo = psiCap(e, c.Cgroup)
	c.PSI = c.PSIInfo.Host
	c.PMU = pmuCap(e)
	if e.idErr != nil {
		c.BusLockReports.Reason = "CPU unknown: " + e.idErr.Error()
	} else {
		c.BusLockReports.On, c.BusLockReports.Reason = sense.KernelReportsBusLocks(e.h, e.id.HasFlag)
	}
	c.Resctrl = resctrlCap(e)
	c.RAPL = raplCap(e)
	c.CPUFreq = cpufreqCap(e)
	c.MSR = msrCap(e)
	c.KVM = kvmCap(e)
	c.Libvirt = libvirtCap(e)
	return c
}

func cpuCap(e *env) CPUCap {
	c := CPUCap{Flags: []string{}}
	if e.idErr != nil {
		c.Error = e.idErr.Error()
		return c
	}
	c.Vendor, c.Family, c.Model, c.Stepping, c.ModelName = e.id.Vendor, e.id.Family, e.id.Model, e.id.Stepping, e.id.ModelName
	c.Hypervisor = e.id.HasFlag("hypervisor")
	if m, ok := pmu.Lookup(e.id.Vendor, e.id.Family, e.id.Model, e.id.Stepping); ok {
		c.Microarch = m.Display
	}
	for _, f := range flagsOfInterest {
		if e.id.HasFlag(f) {
			c.Flags = append(c.Flags, f)
		}
	}
	return c
}

func topologyCap(e *env) TopologyCap {
	t := TopologyCap{Nodes: []topology.Node{}, L3: []topology.Cache{}}
	if e.topoErr != nil {
		t.Error = e.topoErr.Error()
		return t
	}
	tp := e.topo
	t.CPUs = tp.Online.Len()
	t.Online = tp.Online.String()
	t.Packages = len(tp.Packages)
	t.Cores = tp.Cores()
	t.ThreadsPerCore = tp.SMT
	t.NUMANodes = len(tp.Nodes)
	t.Nodes = tp.Nodes
	t.L3 = append(t.L3, tp.CacheLevel(3)...)
	t.L2Domains = len(tp.CacheLevel(2))
	t.Warnings = tp.Warnings
	return t
}

func cgroupCap(e *env) CgroupCap {
	l, err := cgroup.Detect(e.h)
	c := CgroupCap{Layout: l, Controllers: l.Controllers(), CPUControl: l.CPUControl()}
	if c.Controllers == nil {
		c.Controllers = []string{}
	}
	if err != nil {
		c.Error = err.Error()
	}
	return c
}

func psiCap(e *env, cg CgroupCap) PSICap {
	var p PSICap
	var reasons []string
	if _, err := e.h.ReadString("/proc/pressure/cpu"); err == nil {
		p.Host = true
	} else {
		reasons = append(reasons, psiWhy(err))
	}
	if cg.V2 != "" {
		// The root cgroup has no pressure files on kernels before 5.x; any
		// child having one is as good a proof.
		if e.h.Exists(path.Join(cg.V2, "cpu.pressure")) {
			p.PerCgroup = true
		} else if m, _ := e.h.Glob(path.Join(cg.V2, "*", "cpu.pressure")); len(m) > 0 {
			p.PerCgroup = true
		} else {
			reasons = append(reasons, "no cpu.pressure files in the cgroup2 hierarchy")
		}
	} else {
		reasons = append(reasons, "per-cgroup PSI needs a cgroup2 mount (there is none)")
	}
	p.Reason = strings.Join(reasons, "; ")
	return p
}

func psiWhy(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "/proc/pressure absent: PSI disabled at boot (CONFIG_PSI_DEFAULT_DISABLED, psi=0), kernel built without CONFIG_PSI, or older than 4.20"
	case errors.Is(err, unix.EOPNOTSUPP):
		return "/proc/pressure present but PSI disabled (boot with psi=1)"
	default:
		return fmt.Sprintf("/proc/pressure/cpu unreadable: %v", err)
	}
}

func pmuCap(e *env) PMUCap {
	c := PMUCap{Presence: pmu.Detect(e.h)}
	if e.opt.ProbePerf != nil && c.Hardware {
		if err := e.opt.ProbePerf(); err != nil {
			c.LiveProbe = err.Error()
		} else {
			c.LiveProbe = "ok"
		}
	}
	if e.idErr != nil {
		c.BusLockReason = "CPU identity unknown: " + e.idErr.Error()
		return c
	}
	m, ok := pmu.Lookup(e.id.Vendor, e.id.Family, e.id.Model, e.id.Stepping)
	if !ok {
		c.BusLockReason = pmu.NoEventReason(e.id.Vendor, e.id.Family, e.id.Model)
		return c
	}
	ev := &BusLockEvent{Name: m.BusLock.Name, Config: m.BusLockConfig(), Source: "tools/perf/pmu-events/arch/x86/" + m.Dir + "/" + m.BusLock.File}
	c.ModelBusLockEvent = ev
	switch {
	case !c.Hardware:
		c.BusLockReason = fmt.Sprintf("%s would count bus locks with %s (raw %#x), but there is no hardware PMU here", m.Display, ev.Name, ev.Config)
	case c.LiveProbe != "" && c.LiveProbe != "ok":
		c.BusLockReason = fmt.Sprintf("hardware PMU listed but counters cannot be opened: %s", c.LiveProbe)
	default:
		c.BusLockEvent = ev
	}
	return c
}

func resctrlCap(e *env) ResctrlCap {
	c := ResctrlCap{CPUSupport: resctrl.CPUSupport(e.id.HasFlag), Groups: []string{}}
	if fsList, err := e.h.ReadString("/proc/filesystems"); err == nil {
		for _, line := range strings.Split(fsList, "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[len(f)-1] == "resctrl" {
				c.Supported = true
			}
		}
	}
	mount, opts, ok := resctrl.MountPoint(e.h)
	if !ok {
		switch {
		case len(c.CPUSupport) > 0:
			c.Reason = fmt.Sprintf("not mounted, but the CPU supports it (%s): mount -t resctrl resctrl %s", strings.Join(c.CPUSupport, " "), resctrl.DefaultMount)
		case e.idErr != nil:
			c.Reason = "not mounted; CPU flags unknown"
		default:
			c.Reason = "not mounted and the CPU shows no RDT/PQoS flags: no cache or bandwidth monitoring or isolation (the canary probe and CPU-quota throttling still work)"
		}
		return c
	}
	c.Mounted, c.Mount = true, mount
	in := resctrl.ReadInfo(e.h, mount, opts, e.id.IsAMD())
	c.L3CAT, c.L2CAT, c.CDP = in.L3, in.L2, in.CDP
	c.MBA, c.MBADetail = in.MB != nil, in.MB
	c.Monitoring = in.Mon
	c.Groups = in.Groups
	c.Warnings = in.Warnings
	return c
}

func raplCap(e *env) RAPLCap {
	c := RAPLCap{Zones: []string{}, ZoneDetail: []sense.RAPLZone{}}
	zones, err := sense.RAPLZones(e.h)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		c.Reason = "no /sys/class/powercap: kernel without powercap, or a VM"
		return c
	case err != nil:
		c.Reason = err.Error()
		return c
	}
	for _, z := range zones {
		c.Zones = append(c.Zones, z.Name)
	}
	c.ZoneDetail = zones
	if len(zones) == 0 {
		c.Reason = "powercap present but no intel-rapl zones (modprobe intel_rapl_msr; AMD needs Linux 5.8+)"
	} else if !zones[0].EnergyReadable {
		c.Reason = "energy_uj not readable by this user (root only since Linux 5.10)"
	}
	return c
}

func cpufreqCap(e *env) CPUFreqCap {
	c := CPUFreqCap{Drivers: []string{}, Governors: []string{}, Capped: []string{}}
	pols, err := sense.FreqPolicies(e.h)
	if err != nil {
		c.Reason = err.Error()
		return c
	}
	if len(pols) == 0 && !e.h.Exists("/sys/devices/system/cpu") {
		c.Reason = "cannot tell: /sys/devices/system/cpu is missing (partial tree?)"
		return c
	}
	if len(pols) == 0 {
		c.Reason = "no cpufreq policies: no frequency driver (usual in VMs; on bare metal check BIOS power management and the intel_pstate/acpi-cpufreq/amd-pstate module)"
		return c
	}
	c.Present, c.Policies = true, len(pols)
	for _, p := range pols {
		if p.Driver != "" && !slices.Contains(c.Drivers, p.Driver) {
			c.Drivers = append(c.Drivers, p.Driver)
		}
		if p.Governor != "" && !slices.Contains(c.Governors, p.Governor) {
			c.Governors = append(c.Governors, p.Governor)
		}
		if c.HWMinKHz == 0 || (p.HWMinKHz > 0 && p.HWMinKHz < c.HWMinKHz) {
			c.HWMinKHz = p.HWMinKHz
		}
		c.HWMaxKHz = max(c.HWMaxKHz, p.HWMaxKHz)
		if p.ScaleMaxKHz > 0 && p.HWMaxKHz > 0 && p.ScaleMaxKHz < p.HWMaxKHz {
			c.Capped = append(c.Capped, p.Name)
		}
	}
	return c
}

func msrCap(e *env) MSRCap {
	var c MSRCap
	devs, _ := e.h.Glob("/dev/cpu/[0-9]*/msr")
	c.CPUs = len(devs)
	c.Present = c.CPUs > 0
	if !c.Present {
		c.Reason = "no /dev/cpu/*/msr: load the msr module (modprobe msr); clock-modulation throttling is unavailable until then"
		if e.id.HasFlag("hypervisor") {
			c.Reason = "no /dev/cpu/*/msr (and this is a VM: hypervisors rarely pass IA32_CLOCK_MODULATION through)"
		}
	}
	return c
}

func kvmCap(e *env) KVMCap {
	c := KVMCap{Device: e.h.Exists("/dev/kvm")}
	switch {
	case e.id.HasFlag("vmx"):
		c.Virtualization = "vmx"
	case e.id.HasFlag("svm"):
		c.Virtualization = "svm"
	}
	for _, m := range []struct{ mod, param string }{{"kvm_intel", "ept"}, {"kvm_amd", "npt"}} {
		p := "/sys/module/" + m.mod + "/parameters/" + m.param
		s, err := e.h.ReadString(p)
		if err != nil {
			continue
		}
		c.Module, c.TDPParam = m.mod, p
		if v, ok := parseBool(s); ok {
			c.TDP = &v
		}
		break
	}
	switch {
	case !c.Device && c.Virtualization == "":
		c.Reason = "no /dev/kvm and no vmx/svm CPU flag: this host cannot run KVM guests"
	case !c.Device:
		c.Reason = "CPU supports virtualization but /dev/kvm is absent: modprobe kvm_intel or kvm_amd"
	case c.Module == "":
		c.Reason = "/dev/kvm present but neither kvm_intel nor kvm_amd parameters are visible (nested or paravirtual KVM)"
	}
	return c
}

func libvirtCap(e *env) LibvirtCap {
	for _, s := range []string{"/run/libvirt/libvirt-sock", "/run/libvirt/virtqemud-sock", "/var/run/libvirt/libvirt-sock"} {
		if e.h.Exists(s) {
			return LibvirtCap{Socket: s, Present: true}
		}
	}
	return LibvirtCap{}
}

// parseBool reads kernel module booleans: Y/N, 1/0.
func parseBool(s string) (bool, bool) {
	switch strings.TrimSpace(s) {
	case "Y", "y", "1":
		return true, true
	case "N", "n", "0":
		return false, true
	}
	return false, false
}
