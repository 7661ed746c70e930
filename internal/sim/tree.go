package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
)

// The simulated host's tree: the procfs, sysfs, cgroupfs, resctrl,
// powercap, cpufreq, hwmon and /dev/cpu/N/msr files the agent and doctor
// read, in the formats the kernel gives them. Static files are written once
// here; cgroups are made through the host (so the cgroupfs emulation
// populates them); the simulator keeps the sensor files current.

// Paths in the host tree.
const (
	cgroupRoot   = "/sys/fs/cgroup"
	resctrlRoot  = "/sys/fs/resctrl"
	cpufreqRoot  = "/sys/devices/system/cpu/cpufreq"
	powercapRoot = "/sys/class/powercap"
	hwmonRoot    = "/sys/class/hwmon"
	// msrFileSize is how large each /dev/cpu/N/msr stand-in is: it holds
	// the MSRs below 0x1000 at their offsets (IA32_CLOCK_MODULATION 0x19A,
	// IA32_THERM_STATUS 0x19C, the RAPL MSRs 0x606-0x619); all read 0.
	msrFileSize = 0x1000
	// MSRClockModulation is IA32_CLOCK_MODULATION.
	MSRClockModulation = 0x19a
	// energyRange is powercap's max_energy_range_uj (a 32-bit counter of
	// 61 µJ units, as on Skylake-SP).
	energyRange = 262143328850
	// tidBase and tidStride number tenant threads: tenant i's vCPU k is
	// tidBase + i*tidStride + k, its emulator thread the last.
	tidBase   = 100000
	tidStride = 128
)

// writeFile writes a static file below root, creating its directories.
func writeFile(root, p, content string) error {
	dst := filepath.Join(root, filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, []byte(content), 0o644)
}

type treeWriter struct {
	root string
	err  error
}

func (t *treeWriter) put(p, content string) {
	if t.err == nil {
		t.err = writeFile(t.root, p, content)
	}
}

func (t *treeWriter) line(p string, v any) { t.put(p, fmt.Sprint(v)+"\n") }

// cpuLayout is where a CPU sits: Linux numbers the first thread of every
// core socket by socket, then the second threads (as on Intel and AMD servers).
type cpuLayout struct{ id, socket, core, thread int }

func (m Machine) layout() []cpuLayout {
	per := m.Sockets * m.CoresPerSocket
	out := make([]cpuLayout, m.CPUs())
	for id := range out {
		out[id] = cpuLayout{id: id, socket: (id % per) / m.CoresPerSocket, core: id % m.CoresPerSocket, thread: id / per}
	}
	return out
}

// SocketCPUs lists the CPUs of one socket.
func (m Machine) SocketCPUs(s int) cpuset.Set {
	var ids []int
	for _, c := range m.layout() {
		if c.socket == s {
			ids = append(ids, c.id)
		}
	}
	return cpuset.Of(ids...)
}

func cpulist(ids []int) string { return cpuset.Of(ids...).String() }

// writeStatic writes the machine's static files.
func writeStatic(root string, sc *Scenario) error {
	m := sc.Machine
	cm := cpuModels[m.CPU]
	lay := m.layout()
	t := &treeWriter{root: root}
	all := cpulist(seq(m.CPUs()))

	// CPUs, caches, NUMA nodes.
	const sysCPU = "sys/devices/system/cpu"
	t.line(sysCPU+"/online", all)
	t.line(sysCPU+"/possible", all)
	t.line(sysCPU+"/present", all)
	if m.ThreadsPerCore > 1 {
		t.line(sysCPU+"/smt/control", "on")
		t.line(sysCPU+"/smt/active", 1)
	} else {
		t.line(sysCPU+"/smt/control", "notsupported")
		t.line(sysCPU+"/smt/active", 0)
	}
	l3K := int64(m.L3Size) >> 10
	type cacheIdx struct {
		level int
		typ   string
		sizeK int64
		ways  int
		core  bool
	}
	caches := []cacheIdx{{1, "Data", 48, 12, true}, {1, "Instruction", 32, 8, true}, {2, "Unified", 1024, 16, true}, {3, "Unified", l3K, m.L3Ways, false}}
	for _, c := range lay {
		dir := fmt.Sprintf("%s/cpu%d", sysCPU, c.id)
		var sib, pkg []int
		for _, o := range lay {
			if o.socket == c.socket {
				pkg = append(pkg, o.id)
				if o.core == c.core {
					sib = append(sib, o.id)
				}
			}
		}
		t.line(dir+"/online", 1)
		t.line(dir+"/topology/physical_package_id", c.socket)
		t.line(dir+"/topology/die_id", 0)
		t.line(dir+"/topology/core_id", c.core)
		t.line(dir+"/topology/thread_siblings_list", cpulist(sib))
		t.line(dir+"/topology/core_cpus_list", cpulist(sib))
		t.line(dir+"/topology/package_cpus_list", cpulist(pkg))
		for i, k := range caches {
			idx := fmt.Sprintf("%s/cache/index%d/", dir, i)
			shared, id := pkg, c.socket
			if k.core {
				shared, id = sib, c.socket*m.CoresPerSocket+c.core
			}
			t.line(idx+"level", k.level)
			t.line(idx+"type", k.typ)
			t.line(idx+"size", fmt.Sprintf("%dK", k.sizeK))
			t.line(idx+"ways_of_associativity", k.ways)
			t.line(idx+"coherency_line_size", lineSize)
			t.line(idx+"number_of_sets", k.sizeK*1024/int64(k.ways*lineSize))
			t.line(idx+"shared_cpu_list", cpulist(shared))
			t.line(idx+"id", id)
		}
	}
	var nodes []int
	for s := 0; s < m.Sockets; s++ {
		nodes = append(nodes, s)
		var d []string
		for o := 0; o < m.Sockets; o++ {
			if o == s {
				d = append(d, "10")
			} else {
				d = append(d, "21")
			}
		}
		t.line(fmt.Sprintf("sys/devices/system/node/node%d/cpulist", s), m.SocketCPUs(s).String())
		t.line(fmt.Sprintf("sys/devices/system/node/node%d/distance", s), strings.Join(d, " "))
	}
	t.line("sys/devices/system/node/online", cpulist(nodes))

	// cpuinfo.
	f := m.Features
	flags := []string{"fpu", "vme", "de", "pse", "tsc", "msr", "pae", "mce", "cx8", "apic", "sep", "mtrr", "pge", "mca", "cmov", "pat", "pse36", "clflush", "mmx", "fxsr", "sse", "sse2", "syscall", "nx", "pdpe1gb", "rdtscp", "lm", "constant_tsc", "nonstop_tsc", "cpuid", "aperfmperf", "pni", "pclmulqdq", "ssse3", "fma", "cx16", "pcid", "sse4_1", "sse4_2", "x2apic", "movbe", "popcnt", "aes", "xsave", "avx", "f16c", "rdrand", "lahf_lm", "abm", "avx2", "bmi1", "bmi2", "erms", "clflushopt", "clwb", "xsaveopt", "xsavec", "xgetbv1", "xsaves", "arat"}
	if m.ThreadsPerCore > 1 {
		flags = append(flags, "ht")
	}
	if cm.vendor == "GenuineIntel" {
		// dts and acpi: thermal monitor and software-controlled clock
		// modulation (CPUID.01H:EDX[22]), which act.ClockModSupport checks.
		flags = append(flags, "dts", "acpi", "vmx", "ept", "vpid", "dtherm", "ida", "pln", "pts")
		if on(f.PMU) {
			flags = append(flags, "arch_perfmon", "pebs", "bts")
		}
		if m.busLockTrap() == trapSplitLock {
			flags = append(flags, "split_lock_detect")
		}
	} else {
		flags = append(flags, "svm", "npt", "extapic", "topoext", "cpb", "hw_pstate")
		if on(f.PMU) {
			flags = append(flags, "perfctr_core", "perfctr_nb", "perfctr_llc")
		}
		if m.busLockTrap() == trapBusLock {
			flags = append(flags, "bus_lock_detect")
		}
	}
	if on(f.CAT) || on(f.MBA) || on(f.MBM) {
		flags = append(flags, "rdt_a")
	}
	if on(f.CAT) {
		flags = append(flags, "cat_l3", "cdp_l3")
	}
	if on(f.MBA) {
		flags = append(flags, "mba")
	}
	if on(f.MBM) {
		flags = append(flags, "cqm", "cqm_llc", "cqm_occup_llc", "cqm_mbm_total", "cqm_mbm_local")
	}
	if on(f.RAPL) && cm.vendor == "AuthenticAMD" {
		flags = append(flags, "rapl")
	}
	var ci strings.Builder
	for _, c := range lay {
		fmt.Fprintf(&ci, "processor\t: %d\nvendor_id\t: %s\ncpu family\t: %d\nmodel\t\t: %d\nmodel name\t: %s\nstepping\t: %d\n",
			c.id, cm.vendor, cm.family, cm.model, cm.name, cm.stepping)
		fmt.Fprintf(&ci, "microcode\t: 0x1000065\ncpu MHz\t\t: %d.000\ncache size\t: %d KB\nphysical id\t: %d\nsiblings\t: %d\ncore id\t\t: %d\ncpu cores\t: %d\n",
			m.MaxMHz, l3K, c.socket, m.CoresPerSocket*m.ThreadsPerCore, c.core, m.CoresPerSocket)
		apic := c.socket<<8 | c.core<<1 | c.thread
		fmt.Fprintf(&ci, "apicid\t\t: %d\ninitial apicid\t: %d\nfpu\t\t: yes\nfpu_exception\t: yes\ncpuid level\t: 22\nwp\t\t: yes\nflags\t\t: %s\nbugs\t\t: spectre_v1 spectre_v2\nbogomips\t: %d.00\nclflush size\t: 64\ncache_alignment\t: 64\naddress sizes\t: 46 bits physical, 57 bits virtual\npower management:\n\n",
			apic, apic, strings.Join(flags, " "), 2*m.MaxMHz)
	}
	t.put("proc/cpuinfo", ci.String())

	// Kernel, mounts, sysctls.
	t.line("proc/cmdline", "BOOT_IMAGE=/vmlinuz-6.8.0-sim root=/dev/sda1 ro")
	fsList := "nodev\tsysfs\nnodev\tproc\nnodev\ttmpfs\nnodev\tcgroup\nnodev\tcgroup2\nnodev\tdevpts\n\text4\n"
	mounts := []string{
		"22 1 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw",
		"23 1 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:13 - proc proc rw",
		"24 1 0:5 / /dev rw,nosuid,relatime shared:2 - devtmpfs udev rw,mode=755",
		"1 0 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw",
		"35 22 0:28 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot",
	}
	if hasResctrl(m) {
		fsList += "nodev\tresctrl\n"
		opts := "rw"
		if on(f.MBA) && cm.vendor == "GenuineIntel" {
			opts = "rw" // percentages: no mba_MBps
		}
		mounts = append(mounts, "98 22 0:42 / /sys/fs/resctrl rw,relatime shared:51 - resctrl resctrl "+opts)
	}
	t.put("proc/filesystems", fsList)
	t.put("proc/1/mountinfo", strings.Join(mounts, "\n")+"\n")
	t.put("proc/self/mountinfo", strings.Join(mounts, "\n")+"\n")
	t.line("proc/sys/kernel/hostname", "sim-"+sc.Name)
	t.line("proc/sys/kernel/osrelease", "6.8.0-sim")
	t.line("proc/sys/kernel/perf_event_paranoid", 2)
	t.line("proc/sys/kernel/nmi_watchdog", 0)
	t.line("proc/sys/kernel/numa_balancing", 0)
	t.line("proc/sys/kernel/split_lock_mitigate", 1)
	t.put("proc/stat", procStat(make([]float64, m.CPUs()), 0))
	t.put("proc/pressure/cpu", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
	t.line("sys/kernel/mm/ksm/run", 0)
	t.line("sys/kernel/mm/ksm/pages_shared", 0)
	t.line("sys/kernel/mm/ksm/pages_sharing", 0)
	t.line("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never")
	t.line("sys/kernel/mm/transparent_hugepage/defrag", "always defer defer+madvise [madvise] never")
	if cm.vendor == "GenuineIntel" {
		t.line("sys/module/kvm_intel/parameters/ept", "Y")
	} else {
		t.line("sys/module/kvm_amd/parameters/npt", 1)
	}
	t.put("dev/kvm", "")

	// Perf event sources.
	t.line("sys/bus/event_source/devices/software/type", 1)
	t.line("sys/bus/event_source/devices/tracepoint/type", 2)
	t.line("sys/bus/event_source/devices/msr/type", 9)
	if on(f.PMU) {
		t.line("sys/bus/event_source/devices/cpu/type", 4)
		if cm.pmuName != "" {
			t.line("sys/bus/event_source/devices/cpu/caps/pmu_name", cm.pmuName)
		}
		if cm.vendor == "AuthenticAMD" {
			t.line("sys/bus/event_source/devices/cpu/format/event", "config:0-7,32-35")
		} else {
			t.line("sys/bus/event_source/devices/cpu/format/event", "config:0-7")
		}
		t.line("sys/bus/event_source/devices/cpu/format/umask", "config:8-15")
	}
	if on(f.RAPL) {
		t.line("sys/bus/event_source/devices/power/type", 49)
	}

	// cpufreq: one policy per CPU, as intel_pstate and acpi-cpufreq with
	// per-CPU _PSD. intel_pstate with HWP (Skylake and later) shows the
	// nominal frequency as base_frequency and lists no frequencies;
	// acpi-cpufreq lists its P-states, P0 (the top, cpuinfo_max_freq) first.
	if on(f.CPUFreq) {
		driver, gov := "intel_pstate", "performance"
		if cm.vendor == "AuthenticAMD" {
			driver = "acpi-cpufreq"
		}
		pstates := m.pStates()
		for _, c := range lay {
			p := fmt.Sprintf("%s/policy%d/", strings.TrimPrefix(cpufreqRoot, "/"), c.id)
			t.line(p+"scaling_driver", driver)
			t.line(p+"scaling_governor", gov)
			t.line(p+"scaling_available_governors", "performance powersave")
			t.line(p+"cpuinfo_min_freq", m.MinMHz*1000)
			t.line(p+"cpuinfo_max_freq", m.MaxMHz*1000)
			t.line(p+"scaling_min_freq", m.MinMHz*1000)
			t.line(p+"scaling_max_freq", m.MaxMHz*1000)
			t.line(p+"scaling_cur_freq", m.MaxMHz*1000)
			t.line(p+"cpuinfo_cur_freq", m.MaxMHz*1000)
			t.line(p+"affected_cpus", c.id)
			t.line(p+"related_cpus", c.id)
			switch {
			case driver == "acpi-cpufreq":
				var ps []string
				for _, k := range pstates {
					ps = append(ps, strconv.Itoa(k*1000))
				}
				t.line(p+"scaling_available_frequencies", strings.Join(ps, " "))
			case cm.hwp:
				t.line(p+"base_frequency", min(cm.nominalMHz, m.MaxMHz)*1000)
			}
		}
	}

	// RAPL through powercap: a package zone per socket.
	if on(f.RAPL) {
		t.line(strings.TrimPrefix(powercapRoot, "/")+"/intel-rapl/enabled", 1)
		for s := 0; s < m.Sockets; s++ {
			z := fmt.Sprintf("%s/intel-rapl:%d/", strings.TrimPrefix(powercapRoot, "/"), s)
			t.line(z+"name", fmt.Sprintf("package-%d", s))
			t.line(z+"energy_uj", 0)
			t.line(z+"max_energy_range_uj", int64(energyRange))
			t.line(z+"enabled", 1)
			t.line(z+"constraint_0_name", "long_term")
			t.line(z+"constraint_0_power_limit_uw", int64(float64(m.TDP)*1e6))
			t.line(z+"constraint_0_time_window_us", 999424)
			t.line(z+"constraint_0_max_power_uw", int64(float64(m.TDP)*1e6))
		}
	}

	// hwmon temperatures: coretemp per package (Intel), k10temp (AMD, Tctl only).
	if on(f.Hwmon) {
		for s := 0; s < m.Sockets; s++ {
			d := fmt.Sprintf("%s/hwmon%d/", strings.TrimPrefix(hwmonRoot, "/"), s)
			if cm.vendor == "AuthenticAMD" {
				t.line(d+"name", "k10temp")
				t.line(d+"temp1_label", "Tctl")
				t.line(d+"temp1_input", int(ambientC*1000))
				continue
			}
			t.line(d+"name", "coretemp")
			t.line(d+"temp1_label", fmt.Sprintf("Package id %d", s))
			t.line(d+"temp1_input", int(ambientC*1000))
			t.line(d+"temp1_crit", 100000)
			for c := 0; c < m.CoresPerSocket; c++ {
				t.line(fmt.Sprintf("%stemp%d_label", d, c+2), fmt.Sprintf("Core %d", c))
				t.line(fmt.Sprintf("%stemp%d_input", d, c+2), int(ambientC*1000))
				t.line(fmt.Sprintf("%stemp%d_crit", d, c+2), 100000)
			}
		}
	}

	// MSR devices: regular files holding MSRs at their offsets; the msr
	// module's write policy at its default.
	if on(f.MSR) {
		t.line("sys/module/msr/parameters/allow_writes", "default")
		for _, c := range lay {
			p := filepath.Join(root, "dev", "cpu", strconv.Itoa(c.id), "msr")
			if t.err == nil {
				t.err = os.MkdirAll(filepath.Dir(p), 0o755)
			}
			if t.err == nil {
				t.err = os.WriteFile(p, make([]byte, msrFileSize), 0o600)
			}
		}
	}

	// cgroup2 root: cpu and cpuset enabled for the whole tree.
	cg := strings.TrimPrefix(cgroupRoot, "/") + "/"
	t.line(cg+"cgroup.controllers", cgroupControllers)
	t.line(cg+"cgroup.subtree_control", cgroupControllers)
	t.put(cg+"cgroup.procs", "1\n")
	t.put(cg+"cgroup.threads", "1\n")
	t.line(cg+"cpuset.cpus.effective", all)
	t.line(cg+"cpuset.mems.effective", cpulist(nodes))
	t.put(cg+"cpu.stat", cpuStat(0, 0, 0, 0))
	t.put(cg+"cpu.pressure", pressure(0))

	if hasResctrl(m) {
		writeResctrlStatic(t, m, cm)
	}
	return t.err
}

const cgroupControllers = "cpuset cpu io memory pids"

func hasResctrl(m Machine) bool {
	return on(m.Features.CAT) || on(m.Features.MBA) || on(m.Features.MBM)
}

// writeResctrlStatic writes what the kernel finds at mount time: the info
// directory (resources, limits, monitoring) and the root group's schemata.
// The emulation (resctrlfs) renders the rest when it mounts: the root
// group's tasks, cpus, mode, size, mon_data, bit_usage and last_cmd_status.
func writeResctrlStatic(t *treeWriter, m Machine, cm cpuModel) {
	rc := strings.TrimPrefix(resctrlRoot, "/") + "/"
	amd := cm.vendor == "AuthenticAMD"
	var schemata []string
	full := strconv.FormatUint(1<<uint(m.L3Ways)-1, 16)
	if on(m.Features.CAT) {
		t.line(rc+"info/L3/num_closids", 16)
		t.line(rc+"info/L3/cbm_mask", full)
		t.line(rc+"info/L3/min_cbm_bits", 1)
		t.line(rc+"info/L3/shareable_bits", 0)
		schemata = append(schemata, "L3:"+domainList(m.Sockets, full))
	}
	if on(m.Features.MBA) {
		if amd {
			t.line(rc+"info/MB/num_closids", 16)
			t.line(rc+"info/MB/min_bandwidth", 0)
			t.line(rc+"info/MB/bandwidth_gran", 1)
			t.line(rc+"info/MB/delay_linear", 0)
			schemata = append(schemata, "MB:"+domainList(m.Sockets, "2048"))
		} else {
			t.line(rc+"info/MB/num_closids", 8)
			t.line(rc+"info/MB/min_bandwidth", 10)
			t.line(rc+"info/MB/bandwidth_gran", 10)
			t.line(rc+"info/MB/delay_linear", 1)
			t.line(rc+"info/MB/thread_throttle_mode", "max")
			schemata = append(schemata, "MB:"+domainList(m.Sockets, "100"))
		}
	}
	if on(m.Features.MBM) {
		t.line(rc+"info/L3_MON/num_rmids", 224)
		t.put(rc+"info/L3_MON/mon_features", "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n")
		t.line(rc+"info/L3_MON/max_threshold_occupancy", occupancyUnit)
	}
	t.line(rc+"info/last_cmd_status", "ok")
	t.put(rc+"schemata", strings.Join(schemata, "\n")+"\n")
}

func domainList(n int, v string) string {
	parts := make([]string, n)
	for d := range parts {
		parts[d] = fmt.Sprintf("%d=%s", d, v)
	}
	return strings.Join(parts, ";")
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// cgroupPath is where a tenant's cgroup lives below the cgroup2 root
// (computed once: a container's name is hashed).
func (t *Tenant) cgroupPath() string {
	if t.cgroup != "" {
		return t.cgroup
	}
	if t.Kind == KindContainer {
		t.cgroup = "/system.slice/docker-" + containerID(t.Name) + ".scope"
	} else {
		// libvirt with systemd-machined: machine-qemu\x2d<id>\x2d<name>.scope
		t.cgroup = fmt.Sprintf(`/machine.slice/machine-qemu\x2d%d\x2d%s.scope`, t.Index+1, strings.ReplaceAll(t.Name, "-", `\x2d`))
	}
	return t.cgroup
}

// containerID is a stable 64-hex container ID for a name.
func containerID(name string) string {
	sum := sha256.Sum256([]byte("crosstalk-sim/" + name))
	return hex.EncodeToString(sum[:])
}

// threadCgroups lists, for each of the tenant's threads, the cgroup (below
// its own) that holds it: a VM's vCPUs in libvirt/vcpuN, its emulator in
// libvirt/emulator; a container's threads in its own cgroup.
func (t *Tenant) threadCgroups() []string {
	out := make([]string, t.Threads)
	for k := range out {
		switch {
		case t.Kind == KindContainer:
			out[k] = ""
		case k < len(t.VCPUs):
			out[k] = fmt.Sprintf("/libvirt/vcpu%d", k)
		default:
			out[k] = "/libvirt/emulator"
		}
	}
	return out
}

// TID is the thread ID of the tenant's k-th thread.
func (t *Tenant) TID(k int) int { return tidBase + t.Index*tidStride + k }
