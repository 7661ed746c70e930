package main

// The two KVM hosts of the KVM Forum 2020 virtual-topology talk
// (shared/reference/seeds/virtual-topology-kvmforum-2020.txt): the 8-node,
// 128-CPU AMD layout whose CPUs are interleaved across nodes, and the 4-socket,
// 224-CPU Intel host of its lscpu slide. Both run libvirt with guests, and each
// tree carries libvirt's status XML for those guests under run/libvirt/qemu,
// so topology checks have real domains to read: one guest placed as the talk
// recommends and others that trip each check.

import (
	"fmt"
	"strings"
)

// --- AMD EPYC 7551 (Naples), two sockets, eight NUMA nodes, interleaved ---

// naplesFlags is /proc/cpuinfo "flags" of an EPYC 7001 (Zen 1) under 6.1.
const naplesFlags = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl nonstop_tsc cpuid extd_apicid amd_dcm aperfmperf rapl pni pclmulqdq monitor ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx f16c rdrand lahf_lm cmp_legacy svm extapic cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw skinit wdt tce topoext perfctr_core perfctr_nb bpext perfctr_llc mwaitx cpb hw_pstate ssbd ibpb vmmcall fsgsbase bmi1 avx2 smep bmi2 rdseed adx smap clflushopt sha_ni xsaveopt xsavec xgetbv1 xsaves clzero irperf xsaveerptr arat npt lbrv svm_lock nrip_save tsc_scale vmcb_clean flushbyasid decodeassists pausefilter pfthreshold avic v_vmsave_vmload vgif overflow_recov succor smca sev sev_es"

// naplesNodeOfResidue maps CPU number mod 8 to its NUMA node in the talk's
// listing: node0 = 0,8,16,…; node4 = 1,9,17,…; node1 = 2,10,…; and so on.
var naplesNodeOfResidue = [8]int{0, 4, 1, 5, 2, 6, 3, 7}

func amdNaples2S() *tree {
	t := newTree("amd-naples-2s")
	const nodes, coresPerNode = 8, 8
	m := &machine{
		caches: []cache{
			{level: 1, typ: "Data", sizeK: 32, ways: 8, perCore: true},
			{level: 1, typ: "Instruction", sizeK: 64, ways: 4, perCore: true},
			{level: 2, typ: "Unified", sizeK: 512, ways: 8, perCore: true},
			{level: 3, typ: "Unified", sizeK: 8192, ways: 16},
		},
	}
	// SLIT of a two-socket Naples: the same die 10, another die of the
	// socket 16, the other socket 32.
	for i := range nodes {
		row := make([]int, nodes)
		for j := range nodes {
			switch {
			case i == j:
				row[j] = 10
			case i/4 == j/4:
				row[j] = 16
			default:
				row[j] = 32
			}
		}
		m.distance = append(m.distance, row)
	}
	// 512 GB, 64 GB per die, less what firmware keeps.
	for n := range nodes {
		m.nodeMemKiB = append(m.nodeMemKiB, 65920012-int64(n)*1024)
	}
	// CPU n: thread n/64; within a thread half, n%8 picks the node (the
	// talk's interleaving) and n%64/8 the core of that node. A node is one
	// Zeppelin die of two 4-core CCXs, each CCX with its own 8 MiB L3.
	// core_id is unique per package (die<<3 | ccx<<2 | core) and the APIC ID
	// is socket<<6 | die<<4 | ccx<<3 | core<<1 | thread.
	for id := range 2 * nodes * coresPerNode {
		thread, rest := id/64, id%64
		node := naplesNodeOfResidue[rest%8]
		idx := rest / 8
		pkg, die, ccx, core := node/4, node%4, idx/4, idx%4
		m.cpus = append(m.cpus, cpu{id: id, pkg: pkg, core: die<<3 | ccx<<2 | core, thread: thread,
			apic: pkg<<6 | die<<4 | ccx<<3 | core<<1 | thread, node: node, l3: node*2 + ccx})
	}
	t.writeCPUSysfs(m)
	t.writeCPUFreq(m, cpufreq{driver: "acpi-cpufreq", governor: "schedutil",
		governors: "conservative ondemand userspace powersave performance schedutil", minKHz: 1200000, maxKHz: 2000000})
	t.writeCPUInfo(m, cpuinfo{
		vendor: "AuthenticAMD", family: 23, model: 1, stepping: 2,
		modelName: "AMD EPYC 7551 32-Core Processor",
		microcode: 0x8001250, cacheKB: 512, cpuidLevel: 13,
		flags: naplesFlags, bugs: "sysret_ss_attrs null_seg spectre_v1 spectre_v2 spec_store_bypass retbleed smt_rsb",
		bogomips: "3992.43", tlbSize: 2560, addrSizes: "48 bits physical, 48 bits virtual",
		powerMgmt: "ts ttp tm hwpstate cpb eff_freq_ro [13] [14]",
		mhz:       func(c cpu) string { return mhz(1200000 + (c.id*391721)%1800000) },
	})
	t.writeDebianKVMHost(debianHost{
		hostname: "kvm-naples-01", cmdline: "BOOT_IMAGE=/boot/vmlinuz-6.1.0-13-amd64 root=UUID=3f1c9e0a-6b2d-4e51-9a0c-7d2b8e4f1a66 ro quiet",
		pmuEvent: "config:0-7,32-35", msrType: 11, kvmParam: "sys/module/kvm_amd/parameters/npt",
		cpus: m.all(),
	})

	// Guests. talk-1to1 is the talk's own placement: 1-to-1 pinning of
	// virtual thread pairs onto physical sibling pairs, vCPU 0→0, 1→64,
	// 2→8, 3→72, … 16→2, 17→66, with a die per CCX and a cell per node.
	var talk []int
	for _, node := range []int{0, 1} {
		for idx := range coresPerNode {
			first := naplesFirstThread(node, idx)
			talk = append(talk, first, first+64)
		}
	}
	t.writeDomain(domain{
		name: "talk-1to1", uuid: "5b1e8c9a-2f4d-4a6e-9b3c-0d7e1f2a3b01", id: 3, pid: 40211,
		vcpus: 32, memKiB: 64 << 20,
		vcpuPins: singles(talk), emulatorPin: "7,71",
		numatune: "    <memory mode='strict' nodeset='0-1'/>\n    <memnode cellid='0' mode='strict' nodeset='0'/>\n    <memnode cellid='1' mode='strict' nodeset='1'/>\n",
		cpu: "  <cpu mode='host-passthrough' check='none' migratable='on'>\n" +
			"    <topology sockets='2' dies='2' cores='4' threads='2'/>\n" +
			"    <cache mode='passthrough'/>\n" +
			"    <numa>\n" +
			"      <cell id='0' cpus='0-15' memory='33554432' unit='KiB'/>\n" +
			"      <cell id='1' cpus='16-31' memory='33554432' unit='KiB'/>\n" +
			"    </numa>\n" +
			"  </cpu>\n",
	})
	// stream: the talk's STREAM case in small. Sixteen vCPUs pinned one to
	// one on nodes 2 and 3 but presented as one socket with QEMU's default
	// emulated 16 MiB L3 and no NUMA cells.
	var stream []int
	for _, node := range []int{2, 3} {
		for idx := range coresPerNode {
			stream = append(stream, naplesFirstThread(node, idx))
		}
	}
	t.writeDomain(domain{
		name: "stream", uuid: "5b1e8c9a-2f4d-4a6e-9b3c-0d7e1f2a3b02", id: 4, pid: 40876,
		vcpus: 16, memKiB: 16 << 20,
		vcpuPins: singles(stream), emulatorPin: "68,70",
		numatune: "    <memory mode='strict' nodeset='2-3'/>\n",
		cpu: "  <cpu mode='host-passthrough' check='none' migratable='on'>\n" +
			"    <topology sockets='1' dies='1' cores='16' threads='1'/>\n" +
			"  </cpu>\n",
	})
	// floating: no pinning, no topology (libvirt passes sockets=8,cores=1,
	// threads=1 to QEMU), so its vCPUs roam all eight nodes.
	t.writeDomain(domain{
		name: "floating", uuid: "5b1e8c9a-2f4d-4a6e-9b3c-0d7e1f2a3b03", id: 5, pid: 41502,
		vcpus: 8, memKiB: 8 << 20,
		cpu: "  <cpu mode='host-passthrough' check='none' migratable='on'/>\n",
	})
	return t
}

// naplesFirstThread is the first hardware thread of core idx (0-7) of node.
func naplesFirstThread(node, idx int) int {
	for r, n := range naplesNodeOfResidue {
		if n == node {
			return idx*8 + r
		}
	}
	panic("no such node")
}

// --- Intel Xeon Platinum 8180M (Skylake-SP), four sockets ---

func intelSKX4S() *tree {
	t := newTree("intel-skx-4s")
	const sockets, cores = 4, 28
	m := &machine{
		caches: []cache{
			{level: 1, typ: "Data", sizeK: 32, ways: 8, perCore: true},
			{level: 1, typ: "Instruction", sizeK: 32, ways: 8, perCore: true},
			{level: 2, typ: "Unified", sizeK: 1024, ways: 16, perCore: true},
			{level: 3, typ: "Unified", sizeK: 39424, ways: 11},
		},
	}
	// Four sockets fully connected by UPI: 21 between any two.
	for i := range sockets {
		row := make([]int, sockets)
		for j := range row {
			row[j] = 21
		}
		row[i] = 10
		m.distance = append(m.distance, row)
	}
	// 3 TB, 768 GB per socket (8180M: up to 1.5 TB per socket).
	for n := range sockets {
		m.nodeMemKiB = append(m.nodeMemKiB, 791642844-int64(n)*2048)
	}
	// As the talk's lscpu shows: node0 0-27,112-139, node1 28-55,140-167, …
	// The 28 cores of an XCC die carry core ids 0-6, 8-14, 16-22, 24-30
	// (sparse, as on real 8180s); APIC ID = socket<<6 | core_id<<1 | thread.
	for id := range 2 * sockets * cores {
		thread, rest := id/(sockets*cores), id%(sockets*cores)
		pkg, c := rest/cores, rest%cores
		core := c + c/7
		m.cpus = append(m.cpus, cpu{id: id, pkg: pkg, core: core, thread: thread,
			apic: pkg<<6 | core<<1 | thread, node: pkg, l3: pkg})
	}
	t.writeCPUSysfs(m)
	t.writeCPUFreq(m, cpufreq{driver: "intel_pstate", governor: "performance",
		governors: "performance powersave", minKHz: 1000000, maxKHz: 3800000})
	t.writeCPUInfo(m, cpuinfo{
		vendor: "GenuineIntel", family: 6, model: 85, stepping: 4,
		modelName: "Intel(R) Xeon(R) Platinum 8180M CPU @ 2.50GHz",
		microcode: 0x2007006, cacheKB: 39424, cpuidLevel: 22,
		flags: skxFlags, vmxFlags: skxVMXFlags, bugs: skxBugs,
		bogomips: "5000.00", addrSizes: "46 bits physical, 48 bits virtual",
		mhz: func(c cpu) string { return mhz(2500000 + (c.id*48611)%1300000) },
	})
	t.writeDebianKVMHost(debianHost{
		hostname: "kvm-skx4-01", cmdline: "BOOT_IMAGE=/boot/vmlinuz-6.1.0-13-amd64 root=UUID=9a4d2c71-0e3b-4f8a-b6d1-2c5e7f9a0b13 ro quiet",
		pmuEvent: "config:0-7", pmuName: "skylake", msrType: 9, kvmParam: "sys/module/kvm_intel/parameters/ept",
		resctrlKernel: true, cpus: m.all(),
	})

	// sap-hana: the talk's ~2.7 TB guest (e820 ends at 0x2b57fffffff), 1-to-1
	// on half of every socket with a cell per socket, but with 42 physical
	// address bits (set for migration to older hosts) on a 46-bit host:
	// its RAM lies above MAX_PA/2 and the guest reports L1TF unmitigable.
	var sap []int
	for pkg := range sockets {
		for c := range 14 {
			first := pkg*cores + c
			sap = append(sap, first, first+sockets*cores)
		}
	}
	const sapMemKiB = 2772 << 20 // 2772 GiB, so RAM ends at 0x2b580000000 on q35
	cells := ""
	for pkg := range sockets {
		cells += fmt.Sprintf("      <cell id='%d' cpus='%d-%d' memory='%d' unit='KiB'/>\n", pkg, pkg*28, pkg*28+27, sapMemKiB/sockets)
	}
	t.writeDomain(domain{
		name: "sap-hana", uuid: "c0ffee00-4a5b-4c6d-8e7f-90a1b2c3d401", id: 1, pid: 3187,
		vcpus: 112, memKiB: sapMemKiB,
		vcpuPins: singles(sap), emulatorPin: "27,139",
		numatune: "    <memory mode='strict' nodeset='0-3'/>\n" +
			"    <memnode cellid='0' mode='strict' nodeset='0'/>\n" +
			"    <memnode cellid='1' mode='strict' nodeset='1'/>\n" +
			"    <memnode cellid='2' mode='strict' nodeset='2'/>\n" +
			"    <memnode cellid='3' mode='strict' nodeset='3'/>\n",
		cpu: "  <cpu mode='host-passthrough' check='none' migratable='on'>\n" +
			"    <topology sockets='4' dies='1' cores='14' threads='2'/>\n" +
			"    <cache mode='passthrough'/>\n" +
			"    <maxphysaddr mode='emulate' bits='42'/>\n" +
			"    <numa>\n" + cells + "    </numa>\n" +
			"  </cpu>\n",
	})
	// db-remote: pinned on socket 1, memory bound to node 2.
	var db []int
	for c := 14; c < 22; c++ {
		db = append(db, cores+c)
	}
	t.writeDomain(domain{
		name: "db-remote", uuid: "c0ffee00-4a5b-4c6d-8e7f-90a1b2c3d402", id: 2, pid: 5523,
		vcpus: 8, memKiB: 64 << 20,
		vcpuPins: singles(db), emulatorPin: "55,167",
		numatune: "    <memory mode='strict' nodeset='2'/>\n",
		cpu: "  <cpu mode='host-passthrough' check='none' migratable='on'>\n" +
			"    <topology sockets='1' dies='1' cores='8' threads='1'/>\n" +
			"    <cache mode='passthrough'/>\n" +
			"  </cpu>\n",
	})
	// smt-wrong: two virtual cores of two threads, but each thread pair is
	// pinned to two different physical cores (84,85 and 86,87), not to
	// siblings (84,196 and 85,197).
	t.writeDomain(domain{
		name: "smt-wrong", uuid: "c0ffee00-4a5b-4c6d-8e7f-90a1b2c3d403", id: 6, pid: 9034,
		vcpus: 4, memKiB: 8 << 20,
		vcpuPins: singles([]int{84, 85, 86, 87}), emulatorPin: "111,223",
		numatune: "    <memory mode='strict' nodeset='3'/>\n",
		cpu: "  <cpu mode='host-passthrough' check='none' migratable='on'>\n" +
			"    <topology sockets='1' dies='1' cores='2' threads='2'/>\n" +
			"  </cpu>\n",
	})
	return t
}

func singles(cpus []int) []string {
	out := make([]string, len(cpus))
	for i, c := range cpus {
		out[i] = fmt.Sprint(c)
	}
	return out
}

// --- what both Debian 12 KVM hosts share ---

type debianHost struct {
	hostname, cmdline string
	pmuEvent, pmuName string
	msrType           int
	kvmParam          string
	resctrlKernel     bool // the CPU has RDT: resctrl is listed but not mounted
	cpus              []int
}

// writeDebianKVMHost writes the non-topology files of a Debian 12 host with
// kernel 6.1 (cgroup v2 only, PSI on, perf_event_paranoid 3 from Debian's
// patch) running libvirt 9.0 and QEMU 7.2.
func (t *tree) writeDebianKVMHost(d debianHost) {
	t.line("proc/cmdline", d.cmdline)
	t.put("proc/cgroups", cgroupsV2(87))
	t.put("proc/1/mountinfo", mountinfo(
		"21 28 0:20 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw",
		"22 28 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw",
		"23 28 0:5 / /dev rw,nosuid,relatime shared:2 - devtmpfs udev rw,size=264015444k,nr_inodes=66003861,mode=755,inode64",
		"24 23 0:22 / /dev/pts rw,nosuid,noexec,relatime shared:3 - devpts devpts rw,gid=5,mode=620,ptmxmode=000",
		"25 28 0:23 / /run rw,nosuid,nodev,noexec,relatime shared:5 - tmpfs tmpfs rw,size=52806340k,mode=755,inode64",
		"28 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro",
		"26 21 0:6 / /sys/kernel/security rw,nosuid,nodev,noexec,relatime shared:8 - securityfs securityfs rw",
		"27 23 0:24 / /dev/shm rw,nosuid,nodev shared:4 - tmpfs tmpfs rw,inode64",
		"29 25 0:25 / /run/lock rw,nosuid,nodev,noexec,relatime shared:6 - tmpfs tmpfs rw,size=5120k,inode64",
		"30 21 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot",
		"31 21 0:27 / /sys/fs/pstore rw,nosuid,nodev,noexec,relatime shared:10 - pstore pstore rw",
		"32 21 0:28 / /sys/fs/bpf rw,nosuid,nodev,noexec,relatime shared:11 - bpf bpf rw,mode=700",
		"33 23 0:29 / /dev/hugepages rw,relatime shared:14 - hugetlbfs hugetlbfs rw,pagesize=2M",
		"34 23 0:19 / /dev/mqueue rw,nosuid,nodev,noexec,relatime shared:15 - mqueue mqueue rw",
		"35 21 0:7 / /sys/kernel/debug rw,nosuid,nodev,noexec,relatime shared:16 - debugfs debugfs rw",
		"36 21 0:12 / /sys/kernel/tracing rw,nosuid,nodev,noexec,relatime shared:17 - tracefs tracefs rw",
		"61 28 259:1 / /boot/efi rw,relatime shared:31 - vfat /dev/nvme0n1p1 rw,fmask=0077,dmask=0077,codepage=437,iocharset=ascii,shortname=mixed,utf8,errors=remount-ro",
	))
	fs := "nodev\tsysfs\nnodev\ttmpfs\nnodev\tbdev\nnodev\tproc\nnodev\tcgroup\nnodev\tcgroup2\nnodev\tcpuset\nnodev\tdevtmpfs\nnodev\tdebugfs\nnodev\ttracefs\nnodev\tsecurityfs\nnodev\tsockfs\nnodev\tbpf\nnodev\tpipefs\nnodev\tramfs\nnodev\thugetlbfs\nnodev\tdevpts\n\text3\n\text2\n\text4\nnodev\tautofs\nnodev\tmqueue\n\tvfat\n"
	if d.resctrlKernel {
		fs += "nodev\tresctrl\n"
	}
	t.put("proc/filesystems", fs)
	t.put("proc/pressure/cpu", "some avg10=0.84 avg60=0.77 avg300=0.71 total=902817344\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
	t.put("proc/pressure/memory", "some avg10=0.00 avg60=0.00 avg300=0.00 total=1203391\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=930211\n")
	t.put("proc/pressure/io", "some avg10=0.02 avg60=0.05 avg300=0.04 total=29103344\nfull avg10=0.01 avg60=0.02 avg300=0.02 total=18320477\n")
	t.sysctl("osrelease", "6.1.0-13-amd64")
	t.sysctl("hostname", d.hostname)
	t.sysctl("perf_event_paranoid", 3)
	t.sysctl("nmi_watchdog", 1)
	t.sysctl("numa_balancing", 1)

	const ctrls = "cpuset cpu io memory hugetlb pids rdma misc"
	cg := "sys/fs/cgroup/"
	t.line(cg+"cgroup.controllers", ctrls)
	t.line(cg+"cgroup.subtree_control", ctrls)
	t.put(cg+"cpu.pressure", "some avg10=0.84 avg60=0.77 avg300=0.71 total=902817344\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
	for _, s := range []string{"system.slice", "machine.slice"} {
		d := cg + s + "/"
		t.line(d+"cgroup.controllers", ctrls)
		t.line(d+"cpu.max", "max 100000")
		t.put(d+"cpu.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
	}

	t.pmu("cpu", 4)
	if d.pmuName != "" {
		t.line("sys/bus/event_source/devices/cpu/caps/pmu_name", d.pmuName)
	}
	t.line("sys/bus/event_source/devices/cpu/format/event", d.pmuEvent)
	t.line("sys/bus/event_source/devices/cpu/format/umask", "config:8-15")
	t.pmu("software", 1)
	t.pmu("tracepoint", 2)
	t.pmu("msr", d.msrType)

	t.line("sys/kernel/mm/ksm/run", 0)
	t.line("sys/kernel/mm/ksm/pages_shared", 0)
	t.line("sys/kernel/mm/ksm/pages_sharing", 0)
	t.line("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never")
	t.line("sys/kernel/mm/transparent_hugepage/defrag", "always defer defer+madvise [madvise] never")
	t.line(d.kvmParam, "Y")
	t.line("sys/module/kvm/parameters/halt_poll_ns", 200000)
	t.standIn("dev/kvm")
	for _, c := range d.cpus {
		t.standIn(fmt.Sprintf("dev/cpu/%d/msr", c))
	}
	t.standIn("run/libvirt/libvirt-sock")
}

// domain is one running guest, written as libvirt 9.0 writes its status file
// /run/libvirt/qemu/NAME.xml: a <domstatus> wrapping the live <domain>.
type domain struct {
	name, uuid  string
	id, pid     int
	vcpus       int
	memKiB      int64
	vcpuPins    []string // per vCPU; nil: no <cputune>
	emulatorPin string
	numatune    string // the inside of <numatune>, or ""
	cpu         string // the whole <cpu> element, indented two spaces
}

// writeDomain renders the status file. Its layout follows a status file
// libvirt 9.0 wrote on the dev machine (internal/plan/testdata), with the
// system daemon's paths, KVM instead of TCG and an AppArmor/DAC seclabel as
// on Debian; the qemuCaps flag list is cut to a few entries.
func (t *tree) writeDomain(d domain) {
	var b strings.Builder
	b.WriteString("<!--\nWARNING: THIS IS AN AUTO-GENERATED FILE. CHANGES TO IT ARE LIKELY TO BE\nOVERWRITTEN AND LOST. Changes to this xml configuration should be made using:\n")
	fmt.Fprintf(&b, "  virsh edit %s\nor other application using the libvirt API.\n-->\n\n", d.name)
	fmt.Fprintf(&b, "<domstatus state='running' reason='booted' pid='%d'>\n", d.pid)
	fmt.Fprintf(&b, "  <taint flag='high-privileges'/>\n")
	lib := fmt.Sprintf("/var/lib/libvirt/qemu/domain-%d-%s", d.id, d.name)
	fmt.Fprintf(&b, "  <monitor path='%s/monitor.sock' type='unix'/>\n", lib)
	b.WriteString("  <vcpus>\n")
	for v := range d.vcpus {
		fmt.Fprintf(&b, "    <vcpu id='%d' pid='%d'/>\n", v, d.pid+30+v)
	}
	b.WriteString("  </vcpus>\n  <qemuCaps>\n")
	for _, f := range []string{"kvm", "sdl", "spice", "vnc", "query-cpu-model-expansion", "cpu-cache", "x86-max-cpu", "smp-dies", "numa.hmat", "query-stats"} {
		fmt.Fprintf(&b, "    <flag name='%s'/>\n", f)
	}
	b.WriteString("  </qemuCaps>\n  <devices>\n    <device alias='balloon0'/>\n    <device alias='serial0'/>\n    <device alias='virtio-disk0'/>\n    <device alias='net0'/>\n  </devices>\n")
	fmt.Fprintf(&b, "  <libDir path='%s'/>\n", lib)
	fmt.Fprintf(&b, "  <channelTargetDir path='/var/lib/libvirt/qemu/channel/target/domain-%d-%s'/>\n", d.id, d.name)
	// The status file keeps the CPU definition as the guest was started
	// (without <numa>), before the live <domain>.
	b.WriteString(stripNUMA(d.cpu))
	b.WriteString("  <chardevStdioLogd/>\n  <allowReboot value='yes'/>\n  <nodename index='2'/>\n  <fdset index='0'/>\n  <blockjobs active='no'/>\n  <agentTimeout>-2</agentTimeout>\n")

	dom := &strings.Builder{}
	fmt.Fprintf(dom, "<domain type='kvm' id='%d'>\n", d.id)
	fmt.Fprintf(dom, "  <name>%s</name>\n  <uuid>%s</uuid>\n", d.name, d.uuid)
	fmt.Fprintf(dom, "  <memory unit='KiB'>%d</memory>\n  <currentMemory unit='KiB'>%d</currentMemory>\n", d.memKiB, d.memKiB)
	fmt.Fprintf(dom, "  <vcpu placement='static'>%d</vcpu>\n", d.vcpus)
	if d.vcpuPins != nil {
		dom.WriteString("  <cputune>\n")
		for v, p := range d.vcpuPins {
			fmt.Fprintf(dom, "    <vcpupin vcpu='%d' cpuset='%s'/>\n", v, p)
		}
		if d.emulatorPin != "" {
			fmt.Fprintf(dom, "    <emulatorpin cpuset='%s'/>\n", d.emulatorPin)
		}
		dom.WriteString("  </cputune>\n")
	}
	if d.numatune != "" {
		dom.WriteString("  <numatune>\n" + d.numatune + "  </numatune>\n")
	}
	dom.WriteString("  <resource>\n    <partition>/machine</partition>\n  </resource>\n")
	dom.WriteString("  <os>\n    <type arch='x86_64' machine='pc-q35-7.2'>hvm</type>\n    <boot dev='hd'/>\n  </os>\n")
	dom.WriteString("  <features>\n    <acpi/>\n    <apic/>\n  </features>\n")
	dom.WriteString(d.cpu)
	dom.WriteString("  <clock offset='utc'>\n    <timer name='rtc' tickpolicy='catchup'/>\n    <timer name='pit' tickpolicy='delay'/>\n    <timer name='hpet' present='no'/>\n  </clock>\n")
	dom.WriteString("  <on_poweroff>destroy</on_poweroff>\n  <on_reboot>restart</on_reboot>\n  <on_crash>destroy</on_crash>\n")
	dom.WriteString("  <devices>\n    <emulator>/usr/bin/qemu-system-x86_64</emulator>\n")
	fmt.Fprintf(dom, "    <disk type='file' device='disk'>\n      <driver name='qemu' type='qcow2'/>\n      <source file='/var/lib/libvirt/images/%s.qcow2' index='1'/>\n      <backingStore/>\n      <target dev='vda' bus='virtio'/>\n      <alias name='virtio-disk0'/>\n      <address type='pci' domain='0x0000' bus='0x04' slot='0x00' function='0x0'/>\n    </disk>\n", d.name)
	fmt.Fprintf(dom, "    <interface type='network'>\n      <mac address='52:54:00:%02x:%02x:%02x'/>\n      <source network='default' portid='%s' bridge='virbr0'/>\n      <target dev='vnet%d'/>\n      <model type='virtio'/>\n      <alias name='net0'/>\n      <address type='pci' domain='0x0000' bus='0x01' slot='0x00' function='0x0'/>\n    </interface>\n", d.id, d.pid%256, d.vcpus%256, d.uuid, d.id)
	dom.WriteString("    <serial type='pty'>\n      <source path='/dev/pts/1'/>\n      <target type='isa-serial' port='0'>\n        <model name='isa-serial'/>\n      </target>\n      <alias name='serial0'/>\n    </serial>\n")
	dom.WriteString("    <memballoon model='virtio'>\n      <alias name='balloon0'/>\n      <address type='pci' domain='0x0000' bus='0x05' slot='0x00' function='0x0'/>\n    </memballoon>\n  </devices>\n")
	fmt.Fprintf(dom, "  <seclabel type='dynamic' model='apparmor' relabel='yes'>\n    <label>libvirt-%s</label>\n    <imagelabel>libvirt-%s</imagelabel>\n  </seclabel>\n", d.uuid, d.uuid)
	dom.WriteString("  <seclabel type='dynamic' model='dac' relabel='yes'>\n    <label>+64055:+64055</label>\n    <imagelabel>+64055:+64055</imagelabel>\n  </seclabel>\n")
	dom.WriteString("</domain>\n")
	b.WriteString(indent(dom.String(), "  "))
	b.WriteString("</domstatus>\n")
	t.put("run/libvirt/qemu/"+d.name+".xml", b.String())
}

// stripNUMA drops the <numa>…</numa> lines of a <cpu> element.
func stripNUMA(cpu string) string {
	var out []string
	skip := false
	for _, l := range strings.SplitAfter(cpu, "\n") {
		switch {
		case strings.Contains(l, "<numa>"):
			skip = true
		case strings.Contains(l, "</numa>"):
			skip = false
		case !skip:
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}

func indent(s, pre string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = pre + l
		}
	}
	return strings.Join(lines, "")
}
