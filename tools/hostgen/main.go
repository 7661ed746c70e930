// Command hostgen writes the reconstructed host trees under testdata/hosts.
//
// Each tree holds, relative to its root, the procfs, sysfs, devfs and /run
// paths crosstalk reads on a real machine, with the contents a kernel of the
// modelled version would show there. Device nodes and sockets (/dev/kvm,
// /dev/cpu/N/msr, the libvirt socket) are stored as empty regular files, the
// convention every captured tree follows. Paths a machine does not have are
// left absent, so absence can be tested too.
//
// The output is deterministic: the same binary always writes the same bytes.
// Each tree's directory is removed and rewritten as a whole; nothing else
// under -out (README.md, captured trees) is touched.
//
// Usage:
//
//	go run ./tools/hostgen -out testdata/hosts
//
// See testdata/hosts/README.md for what each tree models and where its values
// come from.
package main

import (
	"flag"
	"fmt"
	"log"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

func main() {
	out := flag.String("out", "testdata/hosts", "directory that receives the host trees")
	flag.Parse()
	for _, t := range []*tree{intelSKX2S(), amdMilan1S(), amdNaples2S(), intelSKX4S()} {
		n, size, err := t.write(*out)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %d files, %d bytes\n", filepath.Join(*out, t.name), n, size)
	}
}

// tree is one host: a set of files keyed by their slash-separated path
// relative to the tree root.
type tree struct {
	name  string
	files map[string]string
}

func newTree(name string) *tree { return &tree{name: name, files: map[string]string{}} }

// put records a file whose content is exactly s.
func (t *tree) put(path, s string) {
	if _, dup := t.files[path]; dup {
		panic("hostgen: " + t.name + ": " + path + " written twice")
	}
	t.files[path] = s
}

// line records a one-line sysfs/procfs attribute (content plus newline).
func (t *tree) line(path string, v any) { t.put(path, fmt.Sprint(v)+"\n") }

// standIn records a device node or socket as an empty regular file.
func (t *tree) standIn(path string) { t.put(path, "") }

func (t *tree) write(out string) (files int, size int64, err error) {
	root := filepath.Join(out, t.name)
	if err := os.RemoveAll(root); err != nil {
		return 0, 0, err
	}
	paths := slices.Sorted(maps.Keys(t.files))
	for _, p := range paths {
		dst := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return 0, 0, err
		}
		if err := os.WriteFile(dst, []byte(t.files[p]), 0o644); err != nil {
			return 0, 0, err
		}
		size += int64(len(t.files[p]))
	}
	return len(paths), size, nil
}

// cpu is one logical CPU as the kernel numbers and places it.
type cpu struct {
	id     int
	pkg    int
	core   int // core_id as the kernel reports it (sparse on some parts)
	thread int // 0 for the first hyperthread of a core, 1 for its sibling
	apic   int
	node   int
	l3     int // L3 domain (cache id of index3)
}

// cache describes one cache index as sysfs lists it under cpuN/cache/indexI.
type cache struct {
	level int
	typ   string // Data, Instruction, Unified
	sizeK int
	ways  int
	// perCore caches are shared by a core's hyperthreads and have id
	// apicid>>1; the others are shared by an L3 domain with id cpu.l3.
	perCore bool
}

// machine is what the generic sysfs writers need to know.
type machine struct {
	cpus   []cpu
	caches []cache
	// distance[i][j] is the SLIT distance from node i to node j.
	distance [][]int
	// nodeMemKiB[i] is node i's MemTotal; nil writes no nodeN/meminfo.
	nodeMemKiB []int64
}

func (m *machine) filter(keep func(cpu) bool) []int {
	var ids []int
	for _, c := range m.cpus {
		if keep(c) {
			ids = append(ids, c.id)
		}
	}
	return ids
}

func (m *machine) all() []int { return m.filter(func(cpu) bool { return true }) }

// cpulist formats CPU numbers the way the kernel's %*pbl does: ascending,
// runs of two or more as "a-b", joined by commas.
func cpulist(ids []int) string {
	s := append([]int(nil), ids...)
	sort.Ints(s)
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", s[i], s[j]))
		} else {
			parts = append(parts, strconv.Itoa(s[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// writeCPUSysfs writes the topology, cache and node attributes of m.
func (t *tree) writeCPUSysfs(m *machine) {
	const base = "sys/devices/system/cpu"
	all := cpulist(m.all())
	t.line(base+"/online", all)
	t.line(base+"/possible", all)
	t.line(base+"/present", all)
	t.line(base+"/smt/control", "on")
	t.line(base+"/smt/active", 1)
	for _, c := range m.cpus {
		dir := fmt.Sprintf("%s/cpu%d", base, c.id)
		sib := cpulist(m.filter(func(o cpu) bool { return o.pkg == c.pkg && o.core == c.core }))
		t.line(dir+"/topology/physical_package_id", c.pkg)
		t.line(dir+"/topology/die_id", 0)
		t.line(dir+"/topology/core_id", c.core)
		t.line(dir+"/topology/thread_siblings_list", sib)
		t.line(dir+"/topology/core_cpus_list", sib)
		t.line(dir+"/topology/package_cpus_list", cpulist(m.filter(func(o cpu) bool { return o.pkg == c.pkg })))
		for i, k := range m.caches {
			idx := fmt.Sprintf("%s/cache/index%d/", dir, i)
			id, shared := c.l3, m.filter(func(o cpu) bool { return o.l3 == c.l3 })
			if k.perCore {
				id = c.apic >> 1
				shared = m.filter(func(o cpu) bool { return o.pkg == c.pkg && o.core == c.core })
			}
			t.line(idx+"level", k.level)
			t.line(idx+"type", k.typ)
			t.line(idx+"size", fmt.Sprintf("%dK", k.sizeK))
			t.line(idx+"ways_of_associativity", k.ways)
			t.line(idx+"coherency_line_size", 64)
			t.line(idx+"number_of_sets", k.sizeK*1024/(k.ways*64))
			t.line(idx+"shared_cpu_list", cpulist(shared))
			t.line(idx+"id", id)
		}
	}
	const nodes = "sys/devices/system/node"
	var online []int
	for n, row := range m.distance {
		online = append(online, n)
		d := make([]string, len(row))
		for i, v := range row {
			d[i] = strconv.Itoa(v)
		}
		t.line(fmt.Sprintf("%s/node%d/cpulist", nodes, n), cpulist(m.filter(func(o cpu) bool { return o.node == n })))
		t.line(fmt.Sprintf("%s/node%d/distance", nodes, n), strings.Join(d, " "))
		if m.nodeMemKiB != nil {
			t.put(fmt.Sprintf("%s/node%d/meminfo", nodes, n), nodeMeminfo(n, m.nodeMemKiB[n]))
		}
	}
	t.line(nodes+"/online", cpulist(online))
}

// nodeMeminfo renders the head of nodeN/meminfo as drivers/base/node.c
// prints it (the MemTotal/MemFree/MemUsed lines) and its huge page lines; the
// other counters of the real file are left out. A host running guests has
// most of its memory in use.
func nodeMeminfo(n int, totalKiB int64) string {
	free := totalKiB / 7
	var b strings.Builder
	fmt.Fprintf(&b, "Node %d MemTotal:       %8d kB\n", n, totalKiB)
	fmt.Fprintf(&b, "Node %d MemFree:        %8d kB\n", n, free)
	fmt.Fprintf(&b, "Node %d MemUsed:        %8d kB\n", n, totalKiB-free)
	fmt.Fprintf(&b, "Node %d HugePages_Total: %5d\n", n, 0)
	fmt.Fprintf(&b, "Node %d HugePages_Free:  %5d\n", n, 0)
	fmt.Fprintf(&b, "Node %d HugePages_Surp:  %5d\n", n, 0)
	return b.String()
}

// cpufreq is one policy's settings; every CPU has its own policy on both
// modelled machines (intel_pstate always, acpi-cpufreq with _PSD per CPU).
type cpufreq struct {
	driver, governor, governors string
	minKHz, maxKHz              int
}

func (t *tree) writeCPUFreq(m *machine, f cpufreq) {
	for _, c := range m.cpus {
		p := fmt.Sprintf("sys/devices/system/cpu/cpufreq/policy%d/", c.id)
		t.line(p+"scaling_driver", f.driver)
		t.line(p+"scaling_governor", f.governor)
		t.line(p+"scaling_available_governors", f.governors)
		t.line(p+"cpuinfo_min_freq", f.minKHz)
		t.line(p+"cpuinfo_max_freq", f.maxKHz)
		t.line(p+"scaling_min_freq", f.minKHz)
		t.line(p+"scaling_max_freq", f.maxKHz)
		t.line(p+"affected_cpus", c.id)
	}
}

// cpuinfo holds the per-model part of a /proc/cpuinfo stanza.
type cpuinfo struct {
	vendor     string
	family     int
	model      int
	modelName  string
	stepping   int
	microcode  int
	cacheKB    int // "cache size": L3 on Intel, L2 on AMD (x86_cache_size)
	cpuidLevel int
	flags      string
	vmxFlags   string // "" on kernels before 5.8 and on AMD
	bugs       string
	bogomips   string
	tlbSize    int // AMD only: "TLB size"
	addrSizes  string
	powerMgmt  string
	mhz        func(c cpu) string
}

// writeCPUInfo writes /proc/cpuinfo in the layout of arch/x86/kernel/cpu/proc.c.
func (t *tree) writeCPUInfo(m *machine, ci cpuinfo) {
	var b strings.Builder
	for _, c := range m.cpus {
		pkgCPUs := m.filter(func(o cpu) bool { return o.pkg == c.pkg })
		cores := map[int]bool{}
		for _, id := range pkgCPUs {
			cores[m.cpus[id].core] = true
		}
		fmt.Fprintf(&b, "processor\t: %d\n", c.id)
		fmt.Fprintf(&b, "vendor_id\t: %s\n", ci.vendor)
		fmt.Fprintf(&b, "cpu family\t: %d\n", ci.family)
		fmt.Fprintf(&b, "model\t\t: %d\n", ci.model)
		fmt.Fprintf(&b, "model name\t: %s\n", ci.modelName)
		fmt.Fprintf(&b, "stepping\t: %d\n", ci.stepping)
		fmt.Fprintf(&b, "microcode\t: 0x%x\n", ci.microcode)
		fmt.Fprintf(&b, "cpu MHz\t\t: %s\n", ci.mhz(c))
		fmt.Fprintf(&b, "cache size\t: %d KB\n", ci.cacheKB)
		fmt.Fprintf(&b, "physical id\t: %d\n", c.pkg)
		fmt.Fprintf(&b, "siblings\t: %d\n", len(pkgCPUs))
		fmt.Fprintf(&b, "core id\t\t: %d\n", c.core)
		fmt.Fprintf(&b, "cpu cores\t: %d\n", len(cores))
		fmt.Fprintf(&b, "apicid\t\t: %d\n", c.apic)
		fmt.Fprintf(&b, "initial apicid\t: %d\n", c.apic)
		b.WriteString("fpu\t\t: yes\nfpu_exception\t: yes\n")
		fmt.Fprintf(&b, "cpuid level\t: %d\n", ci.cpuidLevel)
		b.WriteString("wp\t\t: yes\n")
		fmt.Fprintf(&b, "flags\t\t: %s\n", ci.flags)
		if ci.vmxFlags != "" {
			fmt.Fprintf(&b, "vmx flags\t: %s\n", ci.vmxFlags)
		}
		fmt.Fprintf(&b, "bugs\t\t: %s\n", ci.bugs)
		fmt.Fprintf(&b, "bogomips\t: %s\n", ci.bogomips)
		if ci.tlbSize > 0 {
			fmt.Fprintf(&b, "TLB size\t: %d 4K pages\n", ci.tlbSize)
		}
		b.WriteString("clflush size\t: 64\ncache_alignment\t: 64\n")
		fmt.Fprintf(&b, "address sizes\t: %s\n", ci.addrSizes)
		b.WriteString("power management:")
		if ci.powerMgmt != "" {
			b.WriteString(" " + ci.powerMgmt)
		}
		b.WriteString("\n\n")
	}
	t.put("proc/cpuinfo", b.String())
}

// mhz renders a frequency in kHz as cpuinfo's "%u.%03u" MHz.
func mhz(khz int) string { return fmt.Sprintf("%d.%03d", khz/1000, khz%1000) }

// pmu records a perf event source. Types 1 (software), 2 (tracepoint) and
// 4 (the core PMU, PERF_TYPE_RAW) are fixed by the perf ABI; the others are
// allocated dynamically at registration and only plausible here.
func (t *tree) pmu(name string, typ int) {
	t.line("sys/bus/event_source/devices/"+name+"/type", typ)
}

func (t *tree) sysctl(name string, v any) { t.line("proc/sys/kernel/"+name, v) }

// mountinfo joins mountinfo lines, each already in proc(5) layout.
func mountinfo(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

// bitUsage renders resctrl's info/L3/bit_usage for domains whose every
// bit is in use by shareable software allocations only.
func bitUsage(domains, bits int) string {
	parts := make([]string, domains)
	for d := range parts {
		parts[d] = fmt.Sprintf("%d=%s", d, strings.Repeat("S", bits))
	}
	return strings.Join(parts, ";")
}

// domainValues renders "0=v;1=v;…" for a schemata line.
// monData writes a control group's mon_data (per L3 domain: occupancy and
// the MBM byte counters, a little different per domain) and an empty
// mon_groups directory.
func (t *tree) monData(group string, domains int, occ, total, local int64) {
	for d := range domains {
		dir := fmt.Sprintf("%smon_data/mon_L3_%02d/", group, d)
		t.line(dir+"llc_occupancy", occ+int64(d)*32768)
		t.line(dir+"mbm_total_bytes", total+int64(d)*1048576)
		t.line(dir+"mbm_local_bytes", local+int64(d)*1048576)
	}
	t.put(group+"mon_groups/.crosstalk-keep", "")
}

func domainValues(domains int, v string) string {
	parts := make([]string, domains)
	for d := range parts {
		parts[d] = fmt.Sprintf("%d=%s", d, v)
	}
	return strings.Join(parts, ";")
}

// --- Intel Xeon Silver 4108, two sockets, Ubuntu 22.04 (5.15), Kubernetes ---

// skxFlags is /proc/cpuinfo "flags" of a Skylake-SP stepping 4 under
// Ubuntu's 5.15 (pti: SKX is Meltdown-affected; no arch_capabilities).
const skxFlags = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi mmx fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc art arch_perfmon pebs bts rep_good nopl xtopology nonstop_tsc cpuid aperfmperf pni pclmulqdq dtes64 monitor ds_cpl vmx smx est tm2 ssse3 sdbg fma cx16 xtpr pdcm pcid dca sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm abm 3dnowprefetch cpuid_fault epb cat_l3 cdp_l3 invpcid_single pti intel_ppin ssbd mba ibrs ibpb stibp tpr_shadow vnmi flexpriority ept vpid ept_ad fsgsbase tsc_adjust bmi1 hle avx2 smep bmi2 erms invpcid rtm cqm mpx rdt_a avx512f avx512dq rdseed adx smap clflushopt clwb intel_pt avx512cd avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local dtherm ida arat pln pts hwp hwp_act_window hwp_epp hwp_pkg_req pku ospke md_clear flush_l1d"

const skxVMXFlags = "vnmi preemption_timer posted_intr invvpid ept_x_only ept_ad ept_1gb flexpriority apicv tsc_offset vtpr mtf vapic ept vpid unrestricted_guest vapic_reg vid ple shadow_vmcs pml ept_mode_based_exec tsc_scaling"

const skxBugs = "cpu_meltdown spectre_v1 spectre_v2 spec_store_bypass l1tf mds swapgs taa itlb_multihit mmio_stale_data retbleed gds"

func intelSKX2S() *tree {
	t := newTree("intel-skx-2s")
	const sockets, cores = 2, 8
	m := &machine{
		caches: []cache{
			{level: 1, typ: "Data", sizeK: 32, ways: 8, perCore: true},
			{level: 1, typ: "Instruction", sizeK: 32, ways: 8, perCore: true},
			{level: 2, typ: "Unified", sizeK: 1024, ways: 16, perCore: true},
			{level: 3, typ: "Unified", sizeK: 11264, ways: 11},
		},
		distance: [][]int{{10, 21}, {21, 10}},
		// 192 GB of DIMMs, 6 × 16 GB per socket, less firmware reservations.
		nodeMemKiB: []int64{98375484, 98601776},
	}
	// Linux numbers the first thread of every core, socket by socket, then
	// the second threads: 0-7 socket 0, 8-15 socket 1, 16-31 their siblings.
	// APIC IDs are socket<<4 | core<<1 | thread, as on a real 8-core SKX.
	for id := 0; id < 2*sockets*cores; id++ {
		thread, pkg, core := id/(sockets*cores), id%(sockets*cores)/cores, id%cores
		m.cpus = append(m.cpus, cpu{id: id, pkg: pkg, core: core, thread: thread,
			apic: pkg<<4 | core<<1 | thread, node: pkg, l3: pkg})
	}
	t.writeCPUSysfs(m)
	t.writeCPUFreq(m, cpufreq{driver: "intel_pstate", governor: "powersave",
		governors: "performance powersave", minKHz: 800000, maxKHz: 3000000})
	t.writeCPUInfo(m, cpuinfo{
		vendor: "GenuineIntel", family: 6, model: 85, stepping: 4,
		modelName: "Intel(R) Xeon(R) Silver 4108 CPU @ 1.80GHz",
		microcode: 0x2007006, cacheKB: 11264, cpuidLevel: 22,
		flags: skxFlags, vmxFlags: skxVMXFlags, bugs: skxBugs,
		bogomips: "3600.00", addrSizes: "46 bits physical, 48 bits virtual",
		// powersave on an idle-ish node: scattered between 800 MHz and turbo.
		mhz: func(c cpu) string { return mhz(800000 + (c.id*737213)%2200000) },
	})

	t.line("proc/cmdline", "BOOT_IMAGE=/vmlinuz-5.15.0-91-generic root=/dev/mapper/ubuntu--vg-ubuntu--lv ro rdt=cmt,mbmtotal,mbmlocal,l3cat")
	t.put("proc/cgroups", cgroupsV2(152))
	t.put("proc/1/mountinfo", mountinfo(
		"24 31 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw",
		"25 31 0:23 / /proc rw,nosuid,nodev,noexec,relatime shared:13 - proc proc rw",
		"26 31 0:5 / /dev rw,nosuid,relatime shared:2 - devtmpfs udev rw,size=98681244k,nr_inodes=24670311,mode=755,inode64",
		"27 26 0:24 / /dev/pts rw,nosuid,noexec,relatime shared:3 - devpts devpts rw,gid=5,mode=620,ptmxmode=000",
		"28 31 0:25 / /run rw,nosuid,nodev,noexec,relatime shared:5 - tmpfs tmpfs rw,size=19745028k,mode=755,inode64",
		"31 1 253:0 / / rw,relatime shared:1 - ext4 /dev/mapper/ubuntu--vg-ubuntu--lv rw",
		"32 24 0:6 / /sys/kernel/security rw,nosuid,nodev,noexec,relatime shared:8 - securityfs securityfs rw",
		"33 26 0:26 / /dev/shm rw,nosuid,nodev shared:4 - tmpfs tmpfs rw,inode64",
		"34 28 0:27 / /run/lock rw,nosuid,nodev,noexec,relatime shared:6 - tmpfs tmpfs rw,size=5120k,inode64",
		"35 24 0:28 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot",
		"36 24 0:29 / /sys/fs/pstore rw,nosuid,nodev,noexec,relatime shared:10 - pstore pstore rw",
		"37 24 0:30 / /sys/firmware/efi/efivars rw,nosuid,nodev,noexec,relatime shared:11 - efivarfs efivarfs rw",
		"38 24 0:31 / /sys/fs/bpf rw,nosuid,nodev,noexec,relatime shared:12 - bpf bpf rw,mode=700",
		"39 25 0:32 / /proc/sys/fs/binfmt_misc rw,relatime shared:14 - autofs systemd-1 rw,fd=29,pgrp=1,timeout=0,minproto=5,maxproto=5,direct,pipe_ino=31285",
		"40 26 0:33 / /dev/hugepages rw,relatime shared:15 - hugetlbfs hugetlbfs rw,pagesize=2M",
		"41 26 0:20 / /dev/mqueue rw,nosuid,nodev,noexec,relatime shared:16 - mqueue mqueue rw",
		"42 24 0:7 / /sys/kernel/debug rw,nosuid,nodev,noexec,relatime shared:17 - debugfs debugfs rw",
		"43 24 0:12 / /sys/kernel/tracing rw,nosuid,nodev,noexec,relatime shared:18 - tracefs tracefs rw",
		"44 24 0:34 / /sys/fs/fuse/connections rw,nosuid,nodev,noexec,relatime shared:19 - fusectl fusectl rw",
		"45 24 0:21 / /sys/kernel/config rw,nosuid,nodev,noexec,relatime shared:20 - configfs configfs rw",
		"92 31 8:2 / /boot rw,relatime shared:47 - ext4 /dev/sda2 rw",
		"95 92 8:1 / /boot/efi rw,relatime shared:49 - vfat /dev/sda1 rw,fmask=0022,dmask=0022,codepage=437,iocharset=iso8859-1,shortname=mixed,errors=remount-ro",
		"98 24 0:42 / /sys/fs/resctrl rw,relatime shared:51 - resctrl resctrl rw",
		"612 28 0:4 net:[4026532671] /run/netns/cni-5f1e0b8a-37c4-a6d2-9e43-0c1f2b7d8e61 rw shared:317 - nsfs nsfs rw",
		"640 28 0:51 / /run/containerd/io.containerd.grpc.v1.cri/sandboxes/4b0f6c1e2d9a7f3358c1e0d4a6b2c8e9f01d3a5b7c9e1f2a4b6c8d0e2f4a6b8c/shm rw,nosuid,nodev,noexec,relatime shared:331 - tmpfs shm rw,size=65536k,inode64",
		"655 28 0:52 / /run/containerd/io.containerd.runtime.v2.task/k8s.io/4b0f6c1e2d9a7f3358c1e0d4a6b2c8e9f01d3a5b7c9e1f2a4b6c8d0e2f4a6b8c/rootfs rw,relatime shared:339 - overlay overlay rw,lowerdir=/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/1/fs,upperdir=/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/27/fs,workdir=/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/27/work",
		"671 31 0:53 / /var/lib/kubelet/pods/9d3c2a71-5b8e-4f06-a1d4-7e2b9c0f8a13/volumes/kubernetes.io~projected/kube-api-access-7wq2x rw,relatime shared:347 - tmpfs tmpfs rw,size=204800k,inode64",
	))
	t.put("proc/pressure/cpu", "some avg10=2.04 avg60=1.87 avg300=1.52 total=1843093817\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
	t.put("proc/pressure/memory", "some avg10=0.00 avg60=0.03 avg300=0.05 total=48302911\nfull avg10=0.00 avg60=0.01 avg300=0.02 total=27840130\n")
	t.put("proc/pressure/io", "some avg10=0.31 avg60=0.42 avg300=0.38 total=392017442\nfull avg10=0.12 avg60=0.19 avg300=0.17 total=201338770\n")
	t.sysctl("osrelease", "5.15.0-91-generic")
	t.sysctl("hostname", "k8s-worker-skx-03")
	t.sysctl("perf_event_paranoid", 2)
	t.sysctl("nmi_watchdog", 1)
	t.sysctl("numa_balancing", 1)
	// No split_lock_mitigate: that sysctl arrived in 6.2.

	// cgroup v2, systemd unified hierarchy, kubelet with the systemd driver.
	const ctrls = "cpuset cpu io memory hugetlb pids rdma misc"
	cg := "sys/fs/cgroup/"
	t.line(cg+"cgroup.controllers", ctrls)
	t.line(cg+"cgroup.subtree_control", ctrls)
	t.put(cg+"cpu.pressure", "some avg10=2.04 avg60=1.87 avg300=1.52 total=1843093817\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
	for _, s := range []struct {
		name                      string
		usage, user, system       int64
		someAvg, someTot, fullTot string
	}{
		{"system.slice", 912837461203, 601928374112, 310909087091, "0.00 avg60=0.00 avg300=0.00", "83104273", "61298551"},
		{"kubepods.slice", 3820193847551, 3301928475112, 518265372439, "2.01 avg60=1.84 avg300=1.49", "1741023344", "902837412"},
	} {
		d := cg + s.name + "/"
		t.line(d+"cgroup.controllers", ctrls)
		t.line(d+"cpu.max", "max 100000")
		t.put(d+"cpu.stat", fmt.Sprintf("usage_usec %d\nuser_usec %d\nsystem_usec %d\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\nnr_bursts 0\nburst_usec 0\n",
			s.usage, s.user, s.system))
		t.put(d+"cpu.pressure", fmt.Sprintf("some avg10=%s total=%s\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=%s\n",
			s.someAvg, s.someTot, s.fullTot))
	}

	// resctrl: L3 CAT 11 ways, 16 CLOSIDs; MBA linear 10% steps, 8 CLOSIDs;
	// CMT+MBM with 8 RMIDs per core. 5.15 lists schemata lines in reverse
	// resource order (MB first) and pads names to "L3CODE" width.
	rc := "sys/fs/resctrl/"
	t.line(rc+"info/L3/num_closids", 16)
	t.line(rc+"info/L3/cbm_mask", "7ff")
	t.line(rc+"info/L3/min_cbm_bits", 1)
	t.line(rc+"info/L3/shareable_bits", 0)
	t.line(rc+"info/L3/bit_usage", bitUsage(sockets, 11))
	t.line(rc+"info/MB/num_closids", 8)
	t.line(rc+"info/MB/min_bandwidth", 10)
	t.line(rc+"info/MB/bandwidth_gran", 10)
	t.line(rc+"info/MB/delay_linear", 1)
	t.line(rc+"info/MB/thread_throttle_mode", "max")
	t.line(rc+"info/L3_MON/num_rmids", 64)
	t.put(rc+"info/L3_MON/mon_features", "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n")
	// x86_cache_size*1024/num_rmids rounded down to the 32 KiB occupancy unit.
	t.line(rc+"info/L3_MON/max_threshold_occupancy", 163840)
	t.put(rc+"schemata", "    MB:"+domainValues(sockets, "100")+"\n    L3:"+domainValues(sockets, "7ff")+"\n")
	t.line(rc+"cpus_list", cpulist(m.all()))
	t.put(rc+"tasks", "")
	t.put(rc+"libvirt-vm1/schemata", "    MB:"+domainValues(sockets, "100")+"\n    L3:"+domainValues(sockets, "00f")+"\n")
	t.line(rc+"libvirt-vm1/cpus_list", "")
	// With monitoring, every control group has mon_data (its counters per
	// L3 domain) and mon_groups; occupancy is a multiple of the 32 KiB
	// unit (x86_cache_occ_scale), the MBM counters are since boot.
	t.monData(rc, sockets, 4718592, 93217766400, 90127104000)
	t.monData(rc+"libvirt-vm1/", sockets, 1835008, 2415919104, 2390753280)

	// RAPL through intel_rapl_msr: a package zone per socket, DRAM below it.
	for pkg, e := range [][2]int64{{84512340187, 20317765521}, {79034471823, 19477830094}} {
		z := fmt.Sprintf("sys/class/powercap/intel-rapl:%d", pkg)
		t.line(z+"/name", fmt.Sprintf("package-%d", pkg))
		t.line(z+"/energy_uj", e[0])
		t.line(z+"/max_energy_range_uj", 262143328850)
		t.line(z+"/enabled", 1)
		t.line(z+":0/name", "dram")
		t.line(z+":0/energy_uj", e[1])
		t.line(z+":0/max_energy_range_uj", 65712999613)
		t.line(z+":0/enabled", 0)
	}

	t.pmu("cpu", 4)
	t.line("sys/bus/event_source/devices/cpu/caps/pmu_name", "skylake")
	t.line("sys/bus/event_source/devices/cpu/format/event", "config:0-7")
	t.line("sys/bus/event_source/devices/cpu/format/umask", "config:8-15")
	t.pmu("software", 1)
	t.pmu("tracepoint", 2)
	t.pmu("msr", 9)
	t.pmu("power", 49)

	t.line("sys/kernel/mm/ksm/run", 1)
	t.line("sys/kernel/mm/ksm/pages_shared", 21037)
	t.line("sys/kernel/mm/ksm/pages_sharing", 187344)
	t.line("sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never")
	t.line("sys/kernel/mm/transparent_hugepage/defrag", "always defer defer+madvise [madvise] never")
	t.line("sys/module/kvm_intel/parameters/ept", "Y")
	t.line("sys/module/kvm/parameters/halt_poll_ns", 200000)

	t.standIn("dev/kvm")
	for _, c := range m.cpus {
		t.standIn(fmt.Sprintf("dev/cpu/%d/msr", c.id))
	}
	return t
}

// cgroupsV2 is /proc/cgroups of a 5.15 kernel with every controller on the
// unified hierarchy (hierarchy 0).
func cgroupsV2(n int) string {
	var b strings.Builder
	b.WriteString("#subsys_name\thierarchy\tnum_cgroups\tenabled\n")
	for _, c := range []string{"cpuset", "cpu", "cpuacct", "blkio", "memory", "devices", "freezer", "net_cls", "perf_event", "net_prio", "hugetlb", "pids", "rdma", "misc"} {
		fmt.Fprintf(&b, "%s\t0\t%d\t1\n", c, n)
	}
	return b.String()
}

// --- AMD EPYC 7313, one socket, RHEL 8.7 (4.18), KVM host with libvirt ---

// milanFlags is /proc/cpuinfo "flags" of an EPYC 7003 on bare metal; a
// RHEL 8 kernel has no "rapl" flag (AMD RAPL support is 5.8+).
const milanFlags = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl nonstop_tsc cpuid extd_apicid aperfmperf pni pclmulqdq monitor ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand lahf_lm cmp_legacy svm extapic cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw ibs skinit wdt tce topoext perfctr_core perfctr_nb bpext perfctr_llc mwaitx cpb cat_l3 cdp_l3 invpcid_single hw_pstate ssbd mba ibrs ibpb stibp vmmcall fsgsbase bmi1 avx2 smep bmi2 invpcid cqm rdt_a rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local clzero irperf xsaveerptr rdpru wbnoinvd amd_ppin arat npt lbrv svm_lock nrip_save tsc_scale vmcb_clean flushbyasid decodeassists pausefilter pfthreshold v_vmsave_vmload vgif v_spec_ctrl umip pku ospke vaes vpclmulqdq rdpid overflow_recov succor smca fsrm"

func amdMilan1S() *tree {
	t := newTree("amd-milan-1s")
	const cores, ccds = 16, 4
	m := &machine{
		caches: []cache{
			{level: 1, typ: "Data", sizeK: 32, ways: 8, perCore: true},
			{level: 1, typ: "Instruction", sizeK: 32, ways: 8, perCore: true},
			{level: 2, typ: "Unified", sizeK: 512, ways: 8, perCore: true},
			{level: 3, typ: "Unified", sizeK: 32768, ways: 16},
		},
		distance: [][]int{{10}},
		// 256 GB of DIMMs, 8 × 32 GB.
		nodeMemKiB: []int64{263623816},
	}
	// 0-15 the cores, 16-31 their siblings. Each CCD has room for 8 cores
	// (16 APIC IDs); the 7313 enables 4 per CCD, so core_id (CPUID
	// 0x8000001E EBX, used as-is by 4.18) and APIC IDs are sparse:
	// core ids 0-3, 8-11, 16-19, 24-27.
	for id := 0; id < 2*cores; id++ {
		thread, c := id/cores, id%cores
		ccd := c / (cores / ccds)
		core := ccd*8 + c%(cores/ccds)
		m.cpus = append(m.cpus, cpu{id: id, pkg: 0, core: core, thread: thread,
			apic: core<<1 | thread, node: 0, l3: ccd})
	}
	t.writeCPUSysfs(m)
	t.writeCPUFreq(m, cpufreq{
		driver:    "acpi-cpufreq",
		governor:  "performance",
		governors: "conservative userspace powersave ondemand performance schedutil",
		minKHz:    1500000,
		maxKHz:    3000000,
	})
	t.writeCPUInfo(m, cpuinfo{
		vendor: "AuthenticAMD", family: 25, model: 1, stepping: 1,
		modelName: "AMD EPYC 7313 16-Core Processor",
		microcode: 0xa0011d1, cacheKB: 512, cpuidLevel: 16,
		flags: milanFlags, bugs: "sysret_ss_attrs spectre_v1 spectre_v2 spec_store_bypass",
		bogomips: "5988.96", tlbSize: 2560, addrSizes: "48 bits physical, 48 bits virtual",
		powerMgmt: "ts ttp tm hwpstate cpb eff_freq_ro [13] [14]",
		// performance governor: every core near P0 (3.0 GHz), boosting a little.
		mhz: func(c cpu) string { return mhz(2994000 + (c.id*48611)%700000) },
	})

	t.line("proc/cmdline", "BOOT_IMAGE=(hd0,gpt2)/vmlinuz-4.18.0-425.3.1.el8.x86_64 root=/dev/mapper/rhel-root ro crashkernel=auto resume=/dev/mapper/rhel-swap rd.lvm.lv=rhel/root rd.lvm.lv=rhel/swap rhgb quiet")
	// Hierarchy IDs follow the mount order in mountinfo (name=systemd is 1).
	t.put("proc/cgroups", "#subsys_name\thierarchy\tnum_cgroups\tenabled\n"+
		"cpuset\t5\t6\t1\n"+
		"cpu\t3\t118\t1\n"+
		"cpuacct\t3\t118\t1\n"+
		"blkio\t8\t118\t1\n"+
		"memory\t4\t171\t1\n"+
		"devices\t10\t118\t1\n"+
		"freezer\t12\t6\t1\n"+
		"net_cls\t2\t6\t1\n"+
		"perf_event\t9\t6\t1\n"+
		"net_prio\t2\t6\t1\n"+
		"hugetlb\t6\t6\t1\n"+
		"pids\t11\t124\t1\n"+
		"rdma\t7\t1\t1\n")
	t.put("proc/1/mountinfo", mountinfo(
		"22 97 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw,seclabel",
		"23 97 0:5 / /proc rw,nosuid,nodev,noexec,relatime shared:26 - proc proc rw",
		"24 97 0:6 / /dev rw,nosuid shared:22 - devtmpfs devtmpfs rw,seclabel,size=131811908k,nr_inodes=32952977,mode=755",
		"25 22 0:7 / /sys/kernel/security rw,nosuid,nodev,noexec,relatime shared:3 - securityfs securityfs rw",
		"26 24 0:22 / /dev/shm rw,nosuid,nodev shared:23 - tmpfs tmpfs rw,seclabel",
		"27 24 0:23 / /dev/pts rw,nosuid,noexec,relatime shared:24 - devpts devpts rw,seclabel,gid=5,mode=620,ptmxmode=000",
		"28 97 0:24 / /run rw,nosuid,nodev shared:25 - tmpfs tmpfs rw,seclabel,mode=755",
		"29 22 0:25 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:4 - tmpfs tmpfs ro,seclabel,mode=755",
		"30 29 0:26 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:5 - cgroup cgroup rw,seclabel,xattr,release_agent=/usr/lib/systemd/systemd-cgroups-agent,name=systemd",
		"31 22 0:27 / /sys/fs/pstore rw,nosuid,nodev,noexec,relatime shared:17 - pstore pstore rw,seclabel",
		"32 22 0:28 / /sys/firmware/efi/efivars rw,nosuid,nodev,noexec,relatime shared:18 - efivarfs efivarfs rw",
		"33 22 0:29 / /sys/fs/bpf rw,nosuid,nodev,noexec,relatime shared:19 - bpf bpf rw,mode=700",
		"34 29 0:30 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid,nodev,noexec,relatime shared:6 - cgroup cgroup rw,seclabel,net_cls,net_prio",
		"35 29 0:31 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:7 - cgroup cgroup rw,seclabel,cpu,cpuacct",
		"36 29 0:32 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:8 - cgroup cgroup rw,seclabel,memory",
		"37 29 0:33 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:9 - cgroup cgroup rw,seclabel,cpuset",
		"38 29 0:34 / /sys/fs/cgroup/hugetlb rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup rw,seclabel,hugetlb",
		"39 29 0:35 / /sys/fs/cgroup/rdma rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,seclabel,rdma",
		"40 29 0:36 / /sys/fs/cgroup/blkio rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,seclabel,blkio",
		"41 29 0:37 / /sys/fs/cgroup/perf_event rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,seclabel,perf_event",
		"42 29 0:38 / /sys/fs/cgroup/devices rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,seclabel,devices",
		"43 29 0:39 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,seclabel,pids",
		"44 29 0:40 / /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,seclabel,freezer",
		"94 22 0:20 / /sys/kernel/config rw,nosuid,nodev,noexec,relatime shared:20 - configfs configfs rw",
		"97 1 253:0 / / rw,relatime shared:1 - xfs /dev/mapper/rhel-root rw,seclabel,attr2,inode64,logbufs=8,logbsize=32k,noquota",
		"45 22 0:19 / /sys/fs/selinux rw,relatime shared:21 - selinuxfs selinuxfs rw",
		"46 23 0:41 / /proc/sys/fs/binfmt_misc rw,relatime shared:27 - autofs systemd-1 rw,fd=33,pgrp=1,timeout=0,minproto=5,maxproto=5,direct,pipe_ino=40682",
		"47 22 0:8 / /sys/kernel/debug rw,relatime shared:28 - debugfs debugfs rw,seclabel",
		"48 24 0:42 / /dev/hugepages rw,relatime shared:29 - hugetlbfs hugetlbfs rw,seclabel,pagesize=2M",
		"49 24 0:18 / /dev/mqueue rw,relatime shared:30 - mqueue mqueue rw,seclabel",
		"50 22 0:43 / /sys/fs/fuse/connections rw,relatime shared:31 - fusectl fusectl rw",
		"112 97 259:2 / /boot rw,relatime shared:60 - xfs /dev/nvme0n1p2 rw,seclabel,attr2,inode64,logbufs=8,logbsize=32k,noquota",
		"115 112 259:1 / /boot/efi rw,relatime shared:62 - vfat /dev/nvme0n1p1 rw,fmask=0077,dmask=0077,codepage=437,iocharset=ascii,shortname=winnt,errors=remount-ro",
		"118 97 253:2 / /var/lib/libvirt/images rw,relatime shared:64 - xfs /dev/mapper/rhel-images rw,seclabel,attr2,inode64,logbufs=8,logbsize=32k,noquota",
		"121 22 0:45 / /sys/fs/resctrl rw,relatime shared:66 - resctrl resctrl rw",
		"504 28 0:47 / /run/user/0 rw,nosuid,nodev,relatime shared:270 - tmpfs tmpfs rw,seclabel,size=26366876k,mode=700",
	))
	// PSI is compiled in but off by default on RHEL 8 (psi=1 not given):
	// no proc/pressure at all.
	t.sysctl("osrelease", "4.18.0-425.3.1.el8.x86_64")
	t.sysctl("hostname", "kvm-milan-01.lab.example.com")
	t.sysctl("perf_event_paranoid", 2)
	t.sysctl("nmi_watchdog", 1)
	t.sysctl("numa_balancing", 0)

	// cgroup v1: the tmpfs at /sys/fs/cgroup with one mount per controller
	// group; the cpu and cpuacct symlinks to cpu,cpuacct are not stored.
	for _, g := range []struct {
		dir     string
		usage   int64
		procs   string
		machine bool
	}{
		{"", 371928374651029, "1\n2\n3\n4\n6\n8\n9\n10\n11\n12\n", false},
		{"machine.slice/", 301827364519283, "", true},
	} {
		d := "sys/fs/cgroup/cpu,cpuacct/" + g.dir
		t.line(d+"cpu.cfs_period_us", 100000)
		t.line(d+"cpu.cfs_quota_us", -1)
		t.line(d+"cpu.shares", 1024)
		t.line(d+"cpuacct.usage", g.usage)
		t.put(d+"cgroup.procs", g.procs)
		c := "sys/fs/cgroup/cpuset/" + g.dir
		t.line(c+"cpuset.cpus", cpulist(m.all()))
		t.line(c+"cpuset.mems", 0)
		t.put(c+"cgroup.procs", g.procs)
	}

	// resctrl with AMD QoS values: 16-bit CBM, 16 CLOSIDs for L3 and MBA,
	// MBA in absolute 1/8 GB/s units up to 2048, 256 RMIDs per L3.
	rc := "sys/fs/resctrl/"
	t.line(rc+"info/L3/num_closids", 16)
	t.line(rc+"info/L3/cbm_mask", "ffff")
	t.line(rc+"info/L3/min_cbm_bits", 1) // 0 only from 6.1 (and stable backports), commit 67bf6493449b
	t.line(rc+"info/L3/shareable_bits", 0)
	t.line(rc+"info/L3/bit_usage", bitUsage(ccds, 16))
	t.line(rc+"info/MB/num_closids", 16)
	t.line(rc+"info/MB/min_bandwidth", 0)
	t.line(rc+"info/MB/bandwidth_gran", 1)
	t.line(rc+"info/MB/delay_linear", 0)
	t.line(rc+"info/L3_MON/num_rmids", 256)
	t.put(rc+"info/L3_MON/mon_features", "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n")
	// x86_cache_size is the L2 (512 KB) on AMD: 512K/256 RMIDs = 2048 bytes.
	t.line(rc+"info/L3_MON/max_threshold_occupancy", 2048)
	t.put(rc+"schemata", "    L3:"+domainValues(ccds, "ffff")+"\n    MB:"+domainValues(ccds, "2048")+"\n")
	t.line(rc+"cpus_list", cpulist(m.all()))
	t.put(rc+"tasks", "")
	t.monData(rc, ccds, 12582912, 48318382080, 48318382080)

	// No powercap zones: AMD RAPL in powercap needs 5.11+.
	t.pmu("cpu", 4)
	t.line("sys/bus/event_source/devices/cpu/format/event", "config:0-7,32-35")
	t.line("sys/bus/event_source/devices/cpu/format/umask", "config:8-15")
	t.pmu("software", 1)
	t.pmu("tracepoint", 2)
	t.pmu("msr", 12)

	t.line("sys/kernel/mm/ksm/run", 0)
	t.line("sys/kernel/mm/ksm/pages_shared", 0)
	t.line("sys/kernel/mm/ksm/pages_sharing", 0)
	t.line("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never")
	t.line("sys/kernel/mm/transparent_hugepage/defrag", "always defer defer+madvise [madvise] never")
	t.line("sys/module/kvm_amd/parameters/npt", 1)
	t.line("sys/module/kvm/parameters/halt_poll_ns", 200000)

	t.standIn("dev/kvm")
	for _, c := range m.cpus {
		t.standIn(fmt.Sprintf("dev/cpu/%d/msr", c.id))
	}
	t.standIn("run/libvirt/libvirt-sock")
	return t
}
