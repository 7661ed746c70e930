package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/finding"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

// The shape of a finding is plan's too (package finding): doctor reports
// plan's checks of running domains as they are.
type (
	Status   = finding.Status
	Evidence = finding.Evidence
	Check    = finding.Check
)

// Check statuses.
const (
	OK      = finding.OK
	Info    = finding.Info
	Warn    = finding.Warn
	Unknown = finding.Unknown
)

type checkDef struct {
	id  string
	run func(*env) Check
}

// Sources cited in checks' reasons.
const (
	srcBuslock  = "kernel Documentation/arch/x86/buslock.rst"
	srcIntel    = "Intel, \"Crosstalk between VMs\" (2015)"
	srcCERN     = "CERN, \"EPT and KSM for High Throughput Computing\" (2015)"
	srcTopology = "Faggioli, \"Virtual Topology for VMs: Friend or Foe?\" (KVM Forum 2020)"
	srcTHP      = "kernel Documentation/admin-guide/mm/transhuge.rst"
	srcAlita    = "Alita (SC20)"
	srcKyoto    = "Kyoto (Middleware 2016)"
)

// checks run in this order; ids are a stable interface.
var checks = []checkDef{
	{"split_lock_detect", checkSplitLock},
	{"ksm", checkKSM},
	{"ept", checkEPT},
	{"thp", checkTHP},
	{"smt", checkSMT},
	{"numa_balancing", checkNUMABalancing},
	{"cpufreq_governor", checkGovernor},
	{"nmi_watchdog", checkNMIWatchdog},
	{"resctrl_mount", checkResctrlMount},
	{"perf_event_paranoid", checkPerfParanoid},
	{"psi", checkPSI},
}

// fileState is what reading a file for a check found.
type fileState int

const (
	present    fileState = iota
	absent               // the file is missing but its directory exists: the kernel lacks the feature
	unreadable           // unreadable, or its directory is missing too (a partial tree): unknowable
)

// read reads a file for a check, adding what it found to the evidence.
// A missing or unreadable file becomes evidence too ("<absent>", "<error: …>").
func (e *env) read(c *Check, p string) (string, fileState) {
	s, err := e.h.ReadString(p)
	switch {
	case err == nil:
		c.Evidence = append(c.Evidence, Evidence{File: p, Value: s})
		return s, present
	case errors.Is(err, fs.ErrNotExist) && e.h.Exists(path.Dir(p)):
		c.Evidence = append(c.Evidence, Evidence{File: p, Value: "<absent>"})
		return "", absent
	case errors.Is(err, fs.ErrNotExist):
		c.Evidence = append(c.Evidence, Evidence{File: p, Value: "<absent, and so is " + path.Dir(p) + ": partial tree?>"})
		return "", unreadable
	default:
		c.Evidence = append(c.Evidence, Evidence{File: p, Value: "<" + shortErr(err) + ">"})
		return "", unreadable
	}
}

func shortErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	if s == "no such file or directory" {
		return "absent"
	}
	return "error: " + s
}

// splitLockModeRE matches the values split_lock_detect= accepts.
var splitLockModeRE = regexp.MustCompile(`^(off|warn|fatal|ratelimit:[0-9]+)$`)

func checkSplitLock(e *env) Check {
	c := Check{Why: "A split lock (a LOCK-prefixed access across two cache lines) takes a bus lock that stalls memory access for every core on the socket — \"uncore just stops\" (" + srcIntel + "); on this project's dev hosts one split-lock loop slows a cache-resident neighbour 5–9×. The kernel can detect them with #AC (split_lock_detect) or a #DB trap (bus_lock_detect) and warn, slow or kill the offender (" + srcBuslock + ")."}
	if e.idErr != nil {
		c.Status, c.Summary = Unknown, "CPU flags unknown"
		c.Evidence = append(c.Evidence, Evidence{File: "/proc/cpuinfo", Value: "<" + shortErr(e.idErr) + ">"})
		return c
	}
	sld, bld := e.id.HasFlag("split_lock_detect"), e.id.HasFlag("bus_lock_detect")
	c.Evidence = append(c.Evidence, Evidence{File: "/proc/cpuinfo", Value: fmt.Sprintf("flags: split_lock_detect=%v bus_lock_detect=%v", sld, bld)})
	mode := ""
	if e.cmdlineErr != nil {
		c.Evidence = append(c.Evidence, Evidence{File: "/proc/cmdline", Value: "<" + shortErr(e.cmdlineErr) + ">"})
	} else {
		v, ok := host.ParseCmdline(e.cmdline).Get("split_lock_detect")
		if ok {
			mode = v
			c.Evidence = append(c.Evidence, Evidence{File: "/proc/cmdline", Value: "split_lock_detect=" + v})
		} else {
			c.Evidence = append(c.Evidence, Evidence{File: "/proc/cmdline", Value: "no split_lock_detect= (kernel default)"})
		}
	}
	mitigate, st := e.read(&c, "/proc/sys/kernel/split_lock_mitigate")
	hasMitigate := st == present

	if !sld && !bld {
		c.Status = Info
		c.Summary = "CPU cannot detect split locks; the kernel will neither log nor slow a tenant that issues them"
		c.Advice = "Nothing to set in the kernel on this CPU. Count bus locks per tenant with the PMU (see capabilities.pmu.bus_lock_event) and let `crosstalk run` throttle the offender; on Intel KVM hosts with bus-lock VM exits, QEMU's `-machine bus-lock-ratelimit=N` caps a guest."
		if e.id.HasFlag("hypervisor") {
			c.Summary += " (this is a VM: the host may detect them, the guest cannot)"
		}
		return c
	}
	if mode == "" {
		mode = "warn" // the kernel's default when the CPU supports detection
	}
	if !splitLockModeRE.MatchString(mode) {
		c.Status = Warn
		c.Summary = fmt.Sprintf("split_lock_detect=%s is not a value the kernel accepts; it falls back to its default", mode)
		c.Advice = "Use one of split_lock_detect=off|warn|fatal|ratelimit:N on the kernel command line."
		return c
	}
	if mode == "warn" || strings.HasPrefix(mode, "ratelimit:") {
		c.Why += " In this mode the kernel names each offending thread in its log; `crosstalk run` reads those reports from /dev/kmsg to find the tenant, with or without a PMU."
	}
	switch {
	case mode == "off":
		c.Status = Warn
		c.Summary = "split-lock detection is off: a tenant's bus-lock storm goes unlogged and unslowed"
		c.Advice = "Remove split_lock_detect=off from the kernel command line (default warn), or use split_lock_detect=ratelimit:N on CPUs with bus_lock_detect; then reboot."
	case mode == "fatal":
		c.Status = Info
		c.Summary = "split_lock_detect=fatal: user-space offenders get SIGBUS"
		c.Advice = "Fatal protects neighbours but crashes legacy tenant software instead of slowing it; on multi-tenant hosts prefer warn (with kernel.split_lock_mitigate=1) plus crosstalk's per-tenant throttling."
	case strings.HasPrefix(mode, "ratelimit:"):
		c.Status = OK
		c.Summary = fmt.Sprintf("bus locks from user space are rate-limited system-wide to %s/s", strings.TrimPrefix(mode, "ratelimit:"))
		c.Why += " The ratelimit is one limit for the whole system, not per tenant: crosstalk's per-tenant accounting still decides who pays."
		if !bld {
			c.Status = Warn
			c.Summary = "ratelimit mode needs bus_lock_detect, which this CPU lacks; the kernel ignores it"
			c.Advice = "Use split_lock_detect=warn on this CPU."
		}
	default: // warn
		switch {
		case hasMitigate && mitigate == "0":
			c.Status = Info
			c.Summary = "split locks are logged once per task but not slowed (kernel.split_lock_mitigate=0)"
			c.Advice = "sysctl -w kernel.split_lock_mitigate=1 to have the kernel slow offenders, or rely on `crosstalk run` to throttle them per tenant."
		case hasMitigate:
			c.Status = OK
			c.Summary = "kernel warns about split locks and slows offending tasks (split_lock_mitigate=1)"
		default:
			c.Status = OK
			c.Summary = "kernel warns about split locks (no split_lock_mitigate sysctl: kernel before 6.2, offenders are only logged)"
		}
	}
	return c
}

func checkKSM(e *env) Check {
	c := Check{Why: "KSM scans guest memory to merge identical pages; " + srcCERN + " measured about 1% overhead on 4 VMs × 8 cores, and merged pages are shared state between tenants."}
	run, st := e.read(&c, "/sys/kernel/mm/ksm/run")
	switch {
	case st == unreadable:
		c.Status, c.Summary = Unknown, "KSM state unreadable"
		return c
	case st == absent && e.h.Exists("/sys/kernel/mm"):
		c.Status, c.Summary = OK, "KSM not built into this kernel"
		return c
	case st == absent:
		c.Status, c.Summary = Unknown, "KSM state unknown (/sys/kernel/mm missing)"
		return c
	}
	switch run {
	case "0":
		c.Status, c.Summary = OK, "KSM off"
	case "1":
		sharing, _ := e.read(&c, "/sys/kernel/mm/ksm/pages_sharing")
		c.Status = Warn
		c.Summary = "KSM is merging pages"
		if sharing != "" {
			c.Summary += " (" + sharing + " pages sharing)"
		}
		c.Advice = "If memory headroom allows (check before: unmerging raises RSS), stop it: `echo 2 > /sys/kernel/mm/ksm/run` then `echo 0 > /sys/kernel/mm/ksm/run`, and `systemctl disable --now ksmtuned` so it stays off."
	case "2":
		c.Status, c.Summary = OK, "KSM stopped and unmerging"
	default:
		c.Status, c.Summary = Unknown, fmt.Sprintf("unexpected KSM run value %q", run)
	}
	return c
}

func checkEPT(e *env) Check {
	c := Check{Why: "Two-dimensional paging (Intel EPT, AMD NPT) lets guests manage their own page tables; it usually helps, but " + srcCERN + " measured a 6% gain for HEP batch work with EPT off (TLB-miss-heavy code pays for the longer 2D page walk). Huge pages for guest memory recover most of that cost."}
	for _, p := range []string{"/sys/module/kvm_intel/parameters/ept", "/sys/module/kvm_amd/parameters/npt"} {
		s, err := e.h.ReadString(p)
		if err != nil {
			continue
		}
		c.Evidence = append(c.Evidence, Evidence{File: p, Value: s})
		name := "EPT"
		if strings.Contains(p, "npt") {
			name = "NPT"
		}
		v, ok := parseBool(s)
		switch {
		case !ok:
			c.Status, c.Summary = Unknown, fmt.Sprintf("unexpected %s parameter value %q", name, s)
		case v:
			c.Status, c.Summary = OK, name+" on (the default)"
			c.Advice = "Keep it on unless a benchmark of your own workload says otherwise; back guest memory with huge pages (THP madvise or hugetlbfs) to shorten 2D walks. To test off: `echo 'options kvm_intel ept=0' > /etc/modprobe.d/kvm_intel.conf` and reload the module with no guests running."
		default:
			c.Status, c.Summary = Warn, name+" off: guests run on shadow page tables"
			c.Advice = "Shadow paging makes every guest page-table update a VM exit; only keep it off if you measured a gain as CERN did (they also saw CentOS 7 guests boot with one CPU). Re-enable: remove ept=0 from /etc/modprobe.d and reload kvm_intel."
		}
		return c
	}
	c.Evidence = append(c.Evidence, Evidence{File: "/sys/module/kvm_intel/parameters/ept", Value: "<absent>"}, Evidence{File: "/sys/module/kvm_amd/parameters/npt", Value: "<absent>"})
	if !e.h.Exists("/sys/module") {
		c.Status, c.Summary = Unknown, "cannot tell: /sys/module is missing (partial tree?)"
		return c
	}
	if e.caps != nil && e.caps.KVM.Device {
		c.Status, c.Summary = Info, "KVM present but kvm_intel/kvm_amd parameters are not visible (nested or paravirtual KVM)"
	} else {
		c.Status, c.Summary = Info, "KVM is not loaded on this host"
	}
	return c
}

func checkTHP(e *env) Check {
	c := Check{Why: "Guest RAM backed by 2 MiB pages shortens the two-dimensional page walk EPT/NPT adds (" + srcCERN + " measured what that walk costs); QEMU madvises guest memory, so \"madvise\" is enough, while \"always\" and synchronous defrag can stall latency-sensitive tenants in compaction (" + srcTHP + ")."}
	en, st := e.read(&c, "/sys/kernel/mm/transparent_hugepage/enabled")
	if st != present {
		c.Status, c.Summary = Unknown, "THP setting unreadable (kernel without THP?)"
		return c
	}
	def, _ := e.read(&c, "/sys/kernel/mm/transparent_hugepage/defrag")
	mode, dmode := bracketed(en), bracketed(def)
	switch mode {
	case "madvise":
		c.Status, c.Summary = OK, "THP on for madvised memory (QEMU guest RAM)"
	case "always":
		c.Status, c.Summary = Info, "THP always on"
		c.Advice = "Fine for throughput hosts; for latency-sensitive tenants prefer `echo madvise > /sys/kernel/mm/transparent_hugepage/enabled`."
	case "never":
		c.Status, c.Summary = Warn, "THP off: guest memory uses 4 KiB pages, lengthening every 2D page walk"
		c.Advice = "`echo madvise > /sys/kernel/mm/transparent_hugepage/enabled` (persist with transparent_hugepage=madvise on the kernel command line), or back guests with hugetlbfs."
	default:
		c.Status, c.Summary = Unknown, fmt.Sprintf("cannot tell the THP mode from %q", en)
		return c
	}
	if dmode == "always" {
		c.Status = Warn
		c.Summary += "; defrag=always makes page faults compact memory synchronously"
		c.Advice = strings.TrimSpace(c.Advice + " Set `echo defer+madvise > /sys/kernel/mm/transparent_hugepage/defrag`.")
	}
	return c
}

// bracketed returns the selected word of a sysfs choice list "a [b] c".
func bracketed(s string) string {
	i, j := strings.IndexByte(s, '['), strings.IndexByte(s, ']')
	if i < 0 || j < i {
		return ""
	}
	return s[i+1 : j]
}

func checkSMT(e *env) Check {
	c := Check{Why: "SMT siblings share a core's L1, L2 and execution units, so two tenants on sibling threads interfere more than through any shared LLC: \"Don't run tasks on CPUs that share computational resources\" (" + srcTopology + "); \"Run VMs on different cores or better sockets, mind the HT\" (" + srcIntel + ")."}
	ctl, st := e.read(&c, "/sys/devices/system/cpu/smt/control")
	ok := st == present
	tpc := 0
	if e.topo != nil {
		tpc = e.topo.SMT
		c.Evidence = append(c.Evidence, Evidence{File: "/sys/devices/system/cpu/cpu*/topology/thread_siblings_list", Value: fmt.Sprintf("%d thread(s) per core", tpc)})
	}
	switch {
	case ok && (ctl == "off" || ctl == "forceoff"):
		c.Status, c.Summary = OK, "SMT disabled"
	case ok && (ctl == "notsupported" || ctl == "notimplemented"):
		c.Status, c.Summary = OK, "no SMT on this CPU (or not exposed to this VM)"
	case (ok && ctl == "on") || tpc > 1:
		c.Status = Info
		c.Summary = fmt.Sprintf("SMT on (%d threads per core): tenants sharing a core are each other's worst neighbours", max(tpc, 2))
		c.Advice = "Give each tenant whole cores: pin a VM's vCPU pairs to sibling pairs from thread_siblings_list and expose them as <topology threads='2'/>, and never pin two tenants to siblings of one core. Where capacity allows: `echo off > /sys/devices/system/cpu/smt/control`."
	case ok:
		c.Status, c.Summary = Unknown, fmt.Sprintf("unexpected smt/control value %q", ctl)
	case tpc == 1:
		c.Status, c.Summary = OK, "one thread per core"
	default:
		c.Status, c.Summary = Unknown, "SMT state unknown"
	}
	return c
}

func checkNUMABalancing(e *env) Check {
	c := Check{Why: "Automatic NUMA balancing unmaps pages to sample accesses and migrates memory behind running guests; for VMs pinned to a node with <numatune> it only adds hinting faults and jitter (" + srcTopology + ": pin vCPUs and memory to the node instead)."}
	v, st := e.read(&c, "/proc/sys/kernel/numa_balancing")
	nodes := 0
	if e.topo != nil {
		nodes = len(e.topo.Nodes)
		c.Evidence = append(c.Evidence, Evidence{File: "/sys/devices/system/node", Value: fmt.Sprintf("%d NUMA node(s)", nodes)})
	}
	switch {
	case st == absent:
		c.Status, c.Summary = OK, "kernel without NUMA balancing"
	case st == unreadable:
		c.Status, c.Summary = Unknown, "numa_balancing unreadable"
	case v != "0" && v != "1" && v != "2" && v != "3":
		c.Status, c.Summary = Unknown, fmt.Sprintf("unexpected numa_balancing value %q", v)
	case v == "0":
		c.Status, c.Summary = OK, "NUMA balancing off"
		if nodes > 1 {
			c.Advice = "Keep tenants pinned to one node each (cputune + numatune) so their memory stays local."
		}
	case nodes == 1:
		c.Status, c.Summary = OK, "NUMA balancing on, but there is one node: nothing to migrate"
	case nodes > 1:
		c.Status = Warn
		c.Summary = fmt.Sprintf("NUMA balancing on across %d nodes", nodes)
		c.Advice = "If tenants are pinned per node (recommended), turn it off: `sysctl -w kernel.numa_balancing=0` and persist it in /etc/sysctl.d/."
	default:
		c.Status, c.Summary = Info, "NUMA balancing on (node count unknown)"
	}
	return c
}

func checkGovernor(e *env) Check {
	c := Check{Why: "Frequency that moves with load changes every tenant's CPI and the probe latencies crosstalk compares against baselines, and a busy neighbour lowering the shared turbo budget is itself power crosstalk (" + srcAlita + "); " + srcKyoto + "'s pollution rate is normalised by CPU frequency."}
	if e.caps == nil || !e.caps.CPUFreq.Present {
		c.Evidence = append(c.Evidence, Evidence{File: "/sys/devices/system/cpu/cpufreq", Value: "<no policies>"})
		c.Status, c.Summary = Info, "no cpufreq driver: frequency is managed by firmware or the hypervisor"
		if e.caps != nil && e.caps.CPUFreq.Reason != "" && !strings.HasPrefix(e.caps.CPUFreq.Reason, "no cpufreq") {
			c.Status, c.Summary = Unknown, e.caps.CPUFreq.Reason
		}
		return c
	}
	f := e.caps.CPUFreq
	c.Evidence = append(c.Evidence, Evidence{File: "/sys/devices/system/cpu/cpufreq/policy*/scaling_governor", Value: strings.Join(f.Governors, ",")},
		Evidence{File: "/sys/devices/system/cpu/cpufreq/policy*/scaling_driver", Value: strings.Join(f.Drivers, ",")})
	worst := OK
	for _, g := range f.Governors {
		switch g {
		case "performance":
		case "schedutil", "userspace":
			worst = maxStatus(worst, Info)
		default: // powersave, ondemand, conservative
			worst = Warn
		}
	}
	c.Status = worst
	switch worst {
	case OK:
		c.Summary = "performance governor everywhere"
	case Info:
		c.Summary = "governor " + strings.Join(f.Governors, ",") + ": frequency follows load"
		c.Advice = "For stable per-tenant baselines: `cpupower frequency-set -g performance` (or tuned's virtual-host profile)."
	default:
		c.Summary = "governor " + strings.Join(f.Governors, ",") + ": frequency drops and rises with load"
		c.Advice = "`cpupower frequency-set -g performance` on all CPUs (or tuned-adm profile virtual-host); with intel_pstate keep HWP but set the energy-performance preference to performance."
	}
	if len(f.Capped) > 0 {
		c.Summary += fmt.Sprintf("; %d polic(ies) have scaling_max_freq below the hardware maximum (crosstalk or someone else capped them)", len(f.Capped))
	}
	return c
}

func maxStatus(a, b Status) Status {
	rank := map[Status]int{OK: 0, Info: 1, Warn: 2, Unknown: 3}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

func checkNMIWatchdog(e *env) Check {
	c := Check{Why: "The hard-lockup detector keeps a cycles counter pinned on every CPU, leaving one general-purpose PMU counter fewer for crosstalk's per-tenant events and forcing multiplexing (perf itself advises \"Try disabling the NMI watchdog\")."}
	v, st := e.read(&c, "/proc/sys/kernel/nmi_watchdog")
	hw := e.caps != nil && e.caps.PMU.Hardware
	c.Evidence = append(c.Evidence, Evidence{File: "/sys/bus/event_source/devices/cpu", Value: fmt.Sprintf("hardware PMU: %v", hw)})
	switch {
	case st == absent:
		c.Status, c.Summary = OK, "kernel without the NMI watchdog"
	case st == unreadable:
		c.Status, c.Summary = Unknown, "nmi_watchdog unreadable"
	case v != "0" && v != "1":
		c.Status, c.Summary = Unknown, fmt.Sprintf("unexpected nmi_watchdog value %q", v)
	case v == "0":
		c.Status, c.Summary = OK, "NMI watchdog off: all PMU counters are free"
	case !hw:
		c.Status, c.Summary = OK, "NMI watchdog on, but there is no hardware PMU for it to occupy"
	default:
		c.Status, c.Summary = Warn, "NMI watchdog holds a PMU counter on every CPU"
		c.Advice = "`sysctl -w kernel.nmi_watchdog=0` and persist it in /etc/sysctl.d/ (softlockup detection stays on)."
	}
	return c
}

func checkResctrlMount(e *env) Check {
	c := Check{Why: "resctrl is how Linux exposes cache allocation (CAT), memory-bandwidth allocation (MBA) and occupancy/bandwidth monitoring; without it crosstalk cannot give only the polluter a small cache class, as " + srcAlita + " does, nor measure per-tenant LLC occupancy (" + srcIntel + ": \"Use CAT when available\")."}
	if e.caps == nil {
		c.Status, c.Summary = Unknown, "capabilities unavailable"
		return c
	}
	r := e.caps.Resctrl
	c.Evidence = append(c.Evidence, Evidence{File: "/proc/1/mountinfo", Value: fmt.Sprintf("resctrl mounted: %v %s", r.Mounted, r.Mount)},
		Evidence{File: "/proc/cpuinfo", Value: "RDT/PQoS flags: " + orNone(strings.Join(r.CPUSupport, " "))},
		Evidence{File: "/proc/filesystems", Value: fmt.Sprintf("resctrl listed: %v", r.Supported)})
	switch {
	case r.Mounted:
		c.Status, c.Summary = OK, "resctrl mounted at "+r.Mount
		if len(r.Warnings) > 0 {
			c.Status, c.Summary = Warn, "resctrl mounted but partly unreadable: "+strings.Join(r.Warnings, "; ")
		}
		if r.L3CAT == nil && e.id.HasFlag("cat_l3") && skxQuirk(e) {
			c.Status = Warn
			c.Summary = "resctrl mounted without L3 CAT: the kernel turns CAT, CMT and MBM off by default on Skylake-SP stepping ≤ 4"
			c.Why += " The default-off is an erratum workaround in arch/x86/kernel/cpu/resctrl/core.c (__check_quirks_intel)."
			c.Advice = "Boot with rdt=l3cat,cmt,mbmtotal,mbmlocal to enable them, after reading the erratum's impact for your workload."
		}
	case len(r.CPUSupport) > 0:
		c.Status = Warn
		c.Summary = "the CPU supports RDT/PQoS but resctrl is not mounted"
		c.Advice = "`mount -t resctrl resctrl /sys/fs/resctrl` and add `resctrl /sys/fs/resctrl resctrl defaults 0 0` to /etc/fstab."
		if !r.Supported {
			c.Advice = "The kernel lacks resctrl (CONFIG_X86_CPU_RESCTRL not in /proc/filesystems): use a kernel with it, then " + c.Advice
		}
	case e.idErr != nil:
		c.Status, c.Summary = Unknown, "resctrl not mounted, and the CPU flags that would say whether it could be are unknown"
	default:
		c.Status, c.Summary = Info, "no RDT/PQoS on this CPU: no LLC or bandwidth isolation (the canary probe and CPU-quota throttling still work)"
	}
	return c
}

// skxQuirk reports a Skylake-SP stepping ≤ 4 booted without rdt=…l3cat.
func skxQuirk(e *env) bool {
	if !e.id.IsIntel() || e.id.Family != 6 || e.id.Model != 0x55 || e.id.Stepping > 4 {
		return false
	}
	v, _ := host.ParseCmdline(e.cmdline).Get("rdt")
	return !strings.Contains(v, "l3cat")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func checkPerfParanoid(e *env) Check {
	c := Check{Why: "Per-tenant counters are per-CPU events in cgroup mode, which the kernel only allows to CAP_PERFMON/CAP_SYS_ADMIN holders unless perf_event_paranoid ≤ 0."}
	v, st := e.read(&c, "/proc/sys/kernel/perf_event_paranoid")
	if st != present {
		c.Status, c.Summary = Unknown, "perf_event_paranoid unreadable (kernel without perf events?)"
		return c
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		c.Status, c.Summary = Unknown, fmt.Sprintf("perf_event_paranoid %q is not a number", v)
		return c
	}
	if n <= 0 {
		c.Status, c.Summary = OK, fmt.Sprintf("perf_event_paranoid=%d: cgroup-mode counters allowed", n)
		return c
	}
	// Who may open the counters is a property of the process, read from a
	// file like everything else so that a captured tree answers the same as
	// the host it was captured on (the process's uid, which is no file, would
	// not be captured).
	if caps, ok := perfCapabilities(e); ok {
		c.Status, c.Summary = OK, fmt.Sprintf("perf_event_paranoid=%d, but crosstalk runs with %s", n, caps)
		return c
	}
	c.Status, c.Summary = Info, fmt.Sprintf("perf_event_paranoid=%d: the agent needs CAP_PERFMON or CAP_SYS_ADMIN", n)
	c.Advice = "Run the agent as root or with CAP_PERFMON (the shipped systemd unit and DaemonSet do); do not lower the sysctl host-wide for it."
	return c
}

// Capability bits in /proc/PID/status CapEff (linux/capability.h).
const (
	capSysAdmin = 21
	capPerfmon  = 38
)

// perfCapabilities says which of CAP_PERFMON and CAP_SYS_ADMIN this process
// holds, from /proc/self/status; false when it holds neither or the file is
// not there (a tree captured without it).
func perfCapabilities(e *env) (string, bool) {
	s, err := e.h.ReadString("/proc/self/status")
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(s, "\n") {
		hex, ok := strings.CutPrefix(line, "CapEff:")
		if !ok {
			continue
		}
		bits, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil {
			return "", false
		}
		var held []string
		if bits&(1<<capSysAdmin) != 0 {
			held = append(held, "CAP_SYS_ADMIN")
		}
		if bits&(1<<capPerfmon) != 0 {
			held = append(held, "CAP_PERFMON")
		}
		return strings.Join(held, " and "), len(held) > 0
	}
	return "", false
}

func checkPSI(e *env) Check {
	c := Check{Why: "Pressure stall information per cgroup tells how long each tenant waited for CPU, memory and I/O; crosstalk uses it as a victim signal on hosts without a PMU."}
	if e.caps == nil {
		c.Status, c.Summary = Unknown, "capabilities unavailable"
		return c
	}
	p := e.caps.PSIInfo
	c.Evidence = append(c.Evidence, Evidence{File: "/proc/pressure/cpu", Value: fmt.Sprintf("readable: %v", p.Host)},
		Evidence{File: "<cgroup2>/cpu.pressure", Value: fmt.Sprintf("present: %v", p.PerCgroup)})
	switch {
	case !p.Host && !e.h.Exists("/proc/sys/kernel"):
		c.Status, c.Summary = Unknown, "cannot tell: /proc/sys/kernel is missing (partial tree?)"
	case p.Host && p.PerCgroup:
		c.Status, c.Summary = OK, "PSI host-wide and per cgroup"
	case p.Host:
		c.Status, c.Summary = Info, "PSI host-wide only: "+p.Reason
		c.Advice = "Mount cgroup2 (systemd.unified_cgroup_hierarchy=1, or at least the hybrid /sys/fs/cgroup/unified) to get per-tenant pressure."
	default:
		c.Status, c.Summary = Warn, "no PSI: "+p.Reason
		c.Advice = "Boot with psi=1 (kernels built with CONFIG_PSI_DEFAULT_DISABLED, e.g. RHEL 8) to get pressure stall information."
	}
	return c
}
