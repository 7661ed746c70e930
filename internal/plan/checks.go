package plan

import (
	"fmt"
	"maps"
	"math"
	"math/bits"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/finding"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

// The shape of a finding is doctor's too (package finding).
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

// Check ids, a stable interface (doctor --json, plan --json).
const (
	CheckNUMASpan      = "vm_numa_span"
	CheckSMTSiblings   = "vm_smt_siblings"
	CheckL3Sharing     = "vm_l3_sharing"
	CheckCopyThreshold = "vm_copy_threshold"
	CheckPhysBits      = "vm_phys_bits"
)

// CheckIDs lists the checks in the order CheckDomain runs them.
var CheckIDs = []string{CheckNUMASpan, CheckSMTSiblings, CheckL3Sharing, CheckCopyThreshold, CheckPhysBits}

const (
	srcTalk  = "Faggioli, \"Virtual Topology for VMs: Friend or Foe?\" (KVM Forum 2020)"
	srcQEMU  = "QEMU target/i386/cpu.c"
	srcL1TF  = "kernel arch/x86/kernel/cpu/bugs.c (l1tf_select_mitigation)"
	srcLibvd = "libvirt formatdomain (cpu/maxphysaddr, since 8.7.0)"
)

// CheckDomain runs every topology check on one domain. A check that trips
// over unexpected input reports unknown instead of failing the others.
func CheckDomain(hc *Host, d *Domain) []Check {
	// Work on a copy whose pins are already limited to online CPUs, so the
	// checks' many lookups stay cheap even for a garbled 8192-CPU cpuset.
	n := *d
	n.Pins = make([]cpuset.Set, len(d.Pins))
	for i := range d.Pins {
		n.Pins[i] = d.pins(hc, i)
	}
	d = &n
	fns := []func(*Host, *Domain) Check{checkNUMASpan, checkSMTSiblings, checkL3Sharing, checkCopyThreshold, checkPhysBits}
	out := make([]Check, len(fns))
	for i, fn := range fns {
		out[i] = safeCheck(CheckIDs[i], fn, hc, d)
	}
	return out
}

func safeCheck(id string, fn func(*Host, *Domain) Check, hc *Host, d *Domain) (c Check) {
	defer func() {
		if p := recover(); p != nil {
			c = Check{ID: id, Status: Unknown, Summary: "check failed internally",
				Why: fmt.Sprintf("internal error: %v (please report with the domain XML)\n%s", p, debug.Stack()), Evidence: []Evidence{}}
		}
	}()
	c = fn(hc, d)
	c.ID = id
	if c.Evidence == nil {
		c.Evidence = []Evidence{}
	}
	return c
}

// pins returns vCPU i's usable host CPUs: its pinning limited to online
// CPUs, or every online CPU when it is not pinned.
func (d *Domain) pins(hc *Host, i int) cpuset.Set {
	if i < len(d.Pins) && !d.Pins[i].IsEmpty() {
		if s := d.Pins[i].Intersect(hc.Topo.Online); !s.IsEmpty() {
			return s
		}
		return d.Pins[i]
	}
	return hc.Topo.Online
}

// pinSummary renders the pinning of vCPUs 0..n-1 compactly for evidence.
func (d *Domain) pinSummary(hc *Host) string {
	if d.PinSource == "none" {
		return fmt.Sprintf("%d vCPUs, not pinned (any of CPUs %s)", d.VCPUs, hc.Topo.Online)
	}
	single := true
	for i := range d.VCPUs {
		if d.pins(hc, i).Len() != 1 {
			single = false
		}
	}
	var parts []string
	if single {
		for i := range d.VCPUs {
			if i == 12 && d.VCPUs > 16 {
				parts = append(parts, fmt.Sprintf("… %d→%d", d.VCPUs-1, d.pins(hc, d.VCPUs-1).First()))
				break
			}
			parts = append(parts, fmt.Sprintf("%d→%d", i, d.pins(hc, i).First()))
		}
		return fmt.Sprintf("%s, vCPU→CPU %s", d.PinSource, strings.Join(parts, " "))
	}
	// Group runs of vCPUs with the same pinning.
	for i := 0; i < d.VCPUs; {
		j := i
		for j+1 < d.VCPUs && d.pins(hc, j+1).Equal(d.pins(hc, i)) {
			j++
		}
		parts = append(parts, fmt.Sprintf("vCPUs %s → CPUs %s", cpuset.Range(i, j), d.pins(hc, i)))
		i = j + 1
	}
	return d.PinSource + ", " + strings.Join(parts, "; ")
}

func nodeList(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = itoa(n)
	}
	return strings.Join(s, ",")
}

// ---------------------------------------------------------------- NUMA span

func checkNUMASpan(hc *Host, d *Domain) Check {
	c := Check{Why: "A guest that runs on several host NUMA nodes but sees one node places memory and threads as if all were local: every remote access costs the inter-node hop, and the guest's NUMA-aware scheduler cannot help. Pin each VM to one node, or give it one virtual cell per host node it uses, each pinned and bound to that node (" + srcTalk + ": per-node and 1-to-1 pinning with <numatune>)."}
	c.Evidence = append(c.Evidence, Evidence{File: d.Source, Value: d.pinSummary(hc)})
	if len(hc.Topo.Nodes) <= 1 {
		c.Status, c.Summary = OK, "the host has one NUMA node: nothing to span"
		return c
	}
	nodesOf := make([][]int, d.VCPUs)
	all := map[int]bool{}
	for i := range d.VCPUs {
		nodesOf[i] = hc.NodesOf(d.pins(hc, i))
		for _, n := range nodesOf[i] {
			all[n] = true
		}
	}
	used := slices.Sorted(maps.Keys(all))
	for _, n := range used {
		if node, ok := hc.Node(n); ok && len(c.Evidence) < 9 {
			c.Evidence = append(c.Evidence, Evidence{File: fmt.Sprintf("%s/node%d/cpulist", nodeDir, n), Value: node.CPUs.String()})
		}
	}
	mem := "not bound (<numatune> absent)"
	var memNodes []int
	switch {
	case d.NUMAPlaceAut:
		mem = "placement='auto' (numad decides)"
	case d.NUMAMode != "" && !d.NUMANodeset.IsEmpty():
		memNodes = d.NUMANodeset.List()
		mem = fmt.Sprintf("mode='%s' nodeset='%s'", d.NUMAMode, d.NUMANodeset)
	}
	c.Evidence = append(c.Evidence, Evidence{File: d.Source, Value: "<numatune><memory> " + mem})
	if len(d.Cells) > 0 {
		var cs []string
		for _, cell := range d.Cells {
			s := fmt.Sprintf("cell %d: vCPUs %s, %s", cell.ID, cell.VCPUs, kibIEC(cell.MemoryKiB))
			if !cell.HostNodes.IsEmpty() {
				s += " on node " + cell.HostNodes.String()
			}
			cs = append(cs, s)
		}
		c.Evidence = append(c.Evidence, Evidence{File: d.Source, Value: "<numa> " + strings.Join(cs, "; ")})
	}

	if len(used) == 0 {
		// Pinned to CPUs no node of this host has (a domain written for
		// another host, or a typo): there is no node to judge it on.
		c.Status = Warn
		c.Summary = fmt.Sprintf("its vCPUs are pinned to CPUs on none of this host's %d NUMA nodes: libvirt refuses to start it here, or it runs where the pinning no longer says", len(hc.Topo.Nodes))
		c.Advice = "Pin it to CPUs this host has: `crosstalk plan --from-status` prints a <cputune> for this host."
		return c
	}
	if len(used) == 1 {
		n := used[0]
		switch {
		case d.NUMAPlaceAut:
			c.Status, c.Summary = Info, fmt.Sprintf("vCPUs on node %d; memory placed by numad", n)
		case memNodes == nil:
			c.Status = Info
			c.Summary = fmt.Sprintf("vCPUs stay on node %d, but memory is not bound: first touch keeps most of it local, anything else may land remote", n)
			c.Advice = fmt.Sprintf("Bind the memory to the vCPUs' node: <numatune><memory mode='strict' nodeset='%d'/></numatune>.", n)
		case len(memNodes) == 1 && memNodes[0] == n:
			c.Status, c.Summary = OK, fmt.Sprintf("vCPUs and memory on node %d", n)
		case !slices.Contains(memNodes, n):
			c.Status = Warn
			c.Summary = fmt.Sprintf("vCPUs run on node %d but memory is bound to node %s: every memory access crosses nodes (distance %d vs 10)", n, nodeList(memNodes), hc.Distance(n, memNodes[0]))
			c.Advice = fmt.Sprintf("<numatune><memory mode='strict' nodeset='%d'/></numatune> (moving memory of a running guest: `virsh numatune %s --nodeset %d --live` migrates it where the mode allows), or pin the vCPUs to node %s.", n, d.Name, n, nodeList(memNodes))
		default:
			c.Status = Info
			c.Summary = fmt.Sprintf("vCPUs on node %d; memory may be allocated on nodes %s", n, nodeList(memNodes))
			c.Advice = fmt.Sprintf("<numatune><memory mode='strict' nodeset='%d'/></numatune>", n)
		}
		return c
	}

	// Spanning nodes is fine when the guest sees it: one cell per host
	// node, each cell's vCPUs pinned to that node and its memory bound there.
	if ok, memOK, why := cellsMatchNodes(hc, d, nodesOf); ok {
		if memOK {
			c.Status, c.Summary = OK, fmt.Sprintf("spans nodes %s as %d virtual NUMA cells, each pinned and bound to its node", nodeList(used), len(d.Cells))
		} else {
			c.Status = Info
			c.Summary = fmt.Sprintf("spans nodes %s as %d virtual cells that match the vCPU pinning, but %s", nodeList(used), len(d.Cells), why)
			c.Advice = "Bind each cell's memory to its node: " + memnodeXML(hc, d, nodesOf)
		}
		return c
	}
	c.Status = Warn
	if d.PinSource == "none" {
		c.Summary = fmt.Sprintf("not pinned: its %d vCPUs float over all %d NUMA nodes while the guest sees %d", d.VCPUs, len(used), max(len(d.Cells), 1))
	} else {
		c.Summary = fmt.Sprintf("vCPUs run on %d NUMA nodes (%s) while the guest sees %d", len(used), nodeList(used), max(len(d.Cells), 1))
	}
	c.Advice = numaAdvice(hc, d, nodesOf, used)
	return c
}

// cellsMatchNodes reports whether the guest's cells mirror the host nodes:
// every online vCPU in a cell, each cell's vCPUs on exactly one host node,
// no two cells on one node. memOK adds that each cell's memory is bound to
// its node.
func cellsMatchNodes(hc *Host, d *Domain, nodesOf [][]int) (ok, memOK bool, why string) {
	if len(d.Cells) < 2 {
		return false, false, ""
	}
	taken := map[int]bool{}
	memOK = true
	for _, cell := range d.Cells {
		node := -1
		for _, v := range cell.VCPUs.List() {
			if v >= d.VCPUs {
				continue
			}
			if len(nodesOf[v]) != 1 || (node >= 0 && nodesOf[v][0] != node) {
				return false, false, ""
			}
			node = nodesOf[v][0]
		}
		if node < 0 || taken[node] {
			return false, false, ""
		}
		taken[node] = true
		if !cell.HostNodes.Equal(cpuset.Of(node)) {
			memOK = false
			why = fmt.Sprintf("cell %d's memory is not bound to node %d", cell.ID, node)
		}
	}
	covered := 0
	for _, cell := range d.Cells {
		for _, v := range cell.VCPUs.List() {
			if v < d.VCPUs {
				covered++
			}
		}
	}
	return covered == d.VCPUs, memOK, why
}

func memnodeXML(hc *Host, d *Domain, nodesOf [][]int) string {
	var b strings.Builder
	b.WriteString("<numatune>")
	var all []int
	for _, cell := range d.Cells {
		v := cell.VCPUs.First()
		if v >= 0 && v < len(nodesOf) && len(nodesOf[v]) == 1 {
			fmt.Fprintf(&b, "<memnode cellid='%d' mode='strict' nodeset='%d'/>", cell.ID, nodesOf[v][0])
			all = append(all, nodesOf[v][0])
		}
	}
	slices.Sort(all)
	return strings.Replace(b.String(), "<numatune>", fmt.Sprintf("<numatune><memory mode='strict' nodeset='%s'/>", nodeList(all)), 1) + "</numatune>"
}

// numaAdvice proposes cells for a guest whose vCPUs are each pinned within
// one node, grouped in contiguous runs; otherwise it points at crosstalk plan.
func numaAdvice(hc *Host, d *Domain, nodesOf [][]int, used []int) string {
	type run struct{ node, first, last int }
	var runs []run
	for i := range d.VCPUs {
		if len(nodesOf[i]) != 1 || d.PinSource == "none" {
			runs = nil
			break
		}
		if len(runs) > 0 && runs[len(runs)-1].node == nodesOf[i][0] {
			runs[len(runs)-1].last = i
			continue
		}
		runs = append(runs, run{nodesOf[i][0], i, i})
	}
	seen := map[int]bool{}
	for _, r := range runs {
		if seen[r.node] {
			runs = nil // a node's vCPUs are not contiguous
			break
		}
		seen[r.node] = true
	}
	if runs == nil || d.VCPUs != d.MaxVCPUs {
		return fmt.Sprintf("Pin the VM to one node, or 1-to-1 with one cell per node: `crosstalk plan --from-status --policy per-node` (or 1to1) prints the <cputune>, <numatune> and <cpu><numa> to use. For one node: <vcpu placement='static' cpuset='%s'>%d</vcpu> and <numatune><memory mode='strict' nodeset='%d'/></numatune>.",
			nodeCPUs(hc, used[0]), d.MaxVCPUs, used[0])
	}
	var cells, memnodes strings.Builder
	per := d.MemoryKiB / uint64(len(runs))
	for i, r := range runs {
		mem := per
		if i == len(runs)-1 {
			mem = d.MemoryKiB - per*uint64(len(runs)-1)
		}
		fmt.Fprintf(&cells, "<cell id='%d' cpus='%d-%d' memory='%d' unit='KiB'/>", i, r.first, r.last, mem)
		fmt.Fprintf(&memnodes, "<memnode cellid='%d' mode='strict' nodeset='%d'/>", i, r.node)
	}
	return fmt.Sprintf("Give the guest one cell per node it runs on, each whole virtual sockets: <cpu><numa>%s</numa></cpu> with <numatune><memory mode='strict' nodeset='%s'/>%s</numatune>, and a <topology> whose sockets split at the same vCPUs.",
		cells.String(), nodeList(used), memnodes.String())
}

func nodeCPUs(hc *Host, n int) string {
	if node, ok := hc.Node(n); ok {
		return node.CPUs.Intersect(hc.Topo.Online).String()
	}
	return "?"
}

// ------------------------------------------------------------- SMT siblings

func checkSMTSiblings(hc *Host, d *Domain) Check {
	c := Check{Why: "QEMU makes vCPUs 0..threads-1 the threads of virtual core 0, the next ones core 1, and so on. The guest's SMT-aware scheduler spreads busy tasks over cores first; that only helps if the threads of a virtual core run on the sibling threads of one physical core, pinned 1-to-1. Threads that float, or sit on different cores, make the guest avoid or seek contention that is not there (" + srcTalk + ")."}
	t := d.Topology.Threads
	c.Evidence = append(c.Evidence,
		Evidence{File: d.Source, Value: fmt.Sprintf("<topology> sockets/dies/cores/threads %s%s", d.Topology, map[bool]string{true: "", false: " (no <topology>: libvirt's default)"}[d.TopologyGiven])},
		Evidence{File: d.Source, Value: d.pinSummary(hc)},
		Evidence{File: "/sys/devices/system/cpu/cpu*/topology/thread_siblings_list", Value: fmt.Sprintf("%d thread(s) per core", hc.Topo.SMT)})

	if t == 1 {
		byCore := map[string][]int{}
		var order []string
		for i := range d.VCPUs {
			p := d.pins(hc, i)
			if p.Len() != 1 {
				continue
			}
			k := hc.siblings(p.First()).String()
			if _, ok := byCore[k]; !ok {
				order = append(order, k)
			}
			byCore[k] = append(byCore[k], i)
		}
		for _, k := range order {
			if v := byCore[k]; len(v) > 1 && cpuset.MustParse(k).Len() > 1 {
				c.Status = Info
				c.Summary = fmt.Sprintf("vCPUs %s run on sibling threads of one physical core (CPUs %s), but the guest sees them as separate cores", cpuset.Of(v...), k)
				c.Advice = fmt.Sprintf("Either expose the pairs as threads — <topology sockets='%d' dies='%d' cores='%d' threads='2'/> with each pair of adjacent vCPUs pinned to one core's siblings — or pin them to different cores.", d.Topology.Sockets, d.Topology.Dies, max(d.Topology.Cores/2, 1))
				return c
			}
		}
		c.Status, c.Summary = OK, "no virtual SMT (threads=1) and no two of its vCPUs pinned to sibling threads"
		return c
	}
	if hc.Topo.SMT < 2 {
		c.Status = Warn
		c.Summary = fmt.Sprintf("the guest sees %d threads per core, the host has no SMT", t)
		c.Advice = fmt.Sprintf("<topology sockets='%d' dies='%d' cores='%d' threads='1'/>", d.Topology.Sockets, d.Topology.Dies, d.Topology.Cores*t)
		return c
	}
	var floating, split []string
	var fix []string
	fixable := true
	usedByFix := map[int]bool{}
	for k := 0; k*t < d.VCPUs; k++ {
		var cpus []int
		float := false
		for j := range t {
			v := k*t + j
			if v >= d.VCPUs {
				break
			}
			p := d.pins(hc, v)
			if p.Len() != 1 {
				float = true
				break
			}
			cpus = append(cpus, p.First())
		}
		if float {
			floating = append(floating, fmt.Sprintf("core %d (vCPUs %s)", k, cpuset.Range(k*t, min(k*t+t, d.VCPUs)-1)))
			fixable = false
			continue
		}
		sib := hc.siblings(cpus[0])
		ok := cpuset.Of(cpus...).Len() == len(cpus) && cpuset.Of(cpus...).IsSubsetOf(sib)
		if !ok {
			split = append(split, fmt.Sprintf("core %d: vCPUs %s on CPUs %s", k, cpuset.Range(k*t, k*t+len(cpus)-1), cpuset.Of(cpus...)))
		}
		if sib.Len() < len(cpus) {
			fixable = false
			continue
		}
		for j, cpu := range sib.List()[:len(cpus)] {
			if usedByFix[cpu] {
				fixable = false
			}
			usedByFix[cpu] = true
			fix = append(fix, fmt.Sprintf("<vcpupin vcpu='%d' cpuset='%d'/>", k*t+j, cpu))
		}
	}
	switch {
	case len(floating) == 0 && len(split) == 0:
		c.Status, c.Summary = OK, fmt.Sprintf("every virtual core's %d threads are pinned 1-to-1 to one physical core's siblings", t)
		return c
	case len(floating) > 0:
		c.Status = Warn
		c.Summary = fmt.Sprintf("the guest sees %d threads per core, but %d virtual core(s) are not pinned 1-to-1 (%s), so its threads are not physical siblings", t, len(floating), firstFew(floating, 3))
	default:
		c.Status = Warn
		c.Summary = fmt.Sprintf("virtual threads on different physical cores: %s", firstFew(split, 3))
	}
	if fixable {
		c.Advice = "Pin each virtual core's threads to the siblings of the core its first thread is on: <cputune>" + strings.Join(fix, "") + "</cputune> — or drop the virtual SMT: <topology sockets='" + itoa(d.Topology.Sockets) + "' dies='" + itoa(d.Topology.Dies) + "' cores='" + itoa(d.Topology.Cores*t) + "' threads='1'/>."
	} else {
		c.Advice = fmt.Sprintf("Pin 1-to-1, each pair of adjacent vCPUs on one core's siblings (`crosstalk plan --from-status --policy 1to1` prints the <cputune>), or drop the virtual SMT: <topology sockets='%d' dies='%d' cores='%d' threads='1'/>.", d.Topology.Sockets, d.Topology.Dies, d.Topology.Cores*t)
	}
	return c
}

func firstFew(s []string, n int) string {
	if len(s) <= n {
		return strings.Join(s, "; ")
	}
	return strings.Join(s[:n], "; ") + fmt.Sprintf("; and %d more", len(s)-n)
}

// --------------------------------------------------------------- L3 sharing

func checkL3Sharing(hc *Host, d *Domain) Check {
	c := Check{Why: "When the waking and the target CPU share a cache, the kernel's try_to_wake_up() queues the task on the target's runqueue directly and often saves the IPI; when they do not, it sends one. In a guest the decision follows the virtual topology — QEMU gives each virtual die one emulated L3 — so vCPUs that share a virtual L3 must share a physical one, and vice versa: \"Virtually shared caches == Really shared caches\" (" + srcTalk + ")."}
	l3 := hc.L3Domains()
	c.Evidence = append(c.Evidence,
		Evidence{File: d.Source, Value: fmt.Sprintf("<topology> %s: virtual L3 shared by the %d vCPUs of each die", d.Topology, d.Topology.Cores*d.Topology.Threads)},
		Evidence{File: d.Source, Value: d.pinSummary(hc)})
	l3Of := make([][]int, d.VCPUs)
	touched := map[int]bool{}
	for i := range d.VCPUs {
		seen := map[int]bool{}
		for _, cpu := range d.pins(hc, i).List() {
			if _, idx, ok := hc.L3Of(cpu); ok {
				seen[idx] = true
				touched[idx] = true
			}
		}
		l3Of[i] = slices.Sorted(maps.Keys(seen))
	}
	for _, idx := range slices.Sorted(maps.Keys(touched)) {
		if len(c.Evidence) >= 8 {
			break
		}
		c.Evidence = append(c.Evidence, Evidence{File: l3File(hc, l3[idx]), Value: l3[idx].CPUs.String()})
	}
	if d.VCPUs < 2 {
		c.Status, c.Summary = OK, "one vCPU: nothing to share"
		return c
	}
	// A: vCPUs of one virtual die on more than one physical L3.
	dies := map[int][]int{}
	for i := range d.VCPUs {
		dies[d.Topology.dieOf(i)] = append(dies[d.Topology.dieOf(i)], i)
	}
	var claimed []string
	for _, die := range slices.Sorted(maps.Keys(boolKeys(dies))) {
		v := dies[die]
		if len(v) < 2 {
			continue
		}
		phys := map[int]bool{}
		for _, i := range v {
			for _, x := range l3Of[i] {
				phys[x] = true
			}
		}
		if len(phys) > 1 {
			claimed = append(claimed, fmt.Sprintf("virtual die %d (vCPUs %s) spans %d physical L3s", die, cpuset.Of(v...), len(phys)))
		}
	}
	// B: vCPUs of different virtual dies confined to one physical L3.
	confined := map[int]map[int]bool{} // L3 index → virtual dies confined in it
	for i := range d.VCPUs {
		if len(l3Of[i]) != 1 {
			continue
		}
		x := l3Of[i][0]
		if confined[x] == nil {
			confined[x] = map[int]bool{}
		}
		confined[x][d.Topology.dieOf(i)] = true
	}
	var missed []string
	for _, x := range slices.Sorted(maps.Keys(boolKeys(confined))) {
		if n := len(confined[x]); n > 1 {
			missed = append(missed, fmt.Sprintf("%d virtual dies share the physical L3 of CPUs %s", n, l3[x].CPUs))
		}
	}
	switch {
	case len(claimed) > 0:
		c.Status = Warn
		c.Summary = "the guest believes vCPUs share an L3 that they do not: " + firstFew(claimed, 2)
		c.Advice = l3Advice(hc, d, l3Of)
	case len(missed) > 0:
		c.Status = Info
		c.Summary = "vCPUs share a physical L3 the guest does not know about (" + firstFew(missed, 2) + "): the guest sends wake-up IPIs it could save"
		c.Advice = l3Advice(hc, d, l3Of)
	default:
		c.Status, c.Summary = OK, "virtual L3 sharing matches the physical L3 domains the vCPUs are pinned to"
		if d.PinSource == "none" {
			c.Summary = "no virtual L3 is shared (every vCPU its own die), and the unpinned vCPUs share none reliably either"
		}
	}
	return c
}

func boolKeys[V any](m map[int]V) map[int]bool {
	out := make(map[int]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

func l3File(hc *Host, c topology.Cache) string {
	return fmt.Sprintf("/sys/devices/system/cpu/cpu%d/cache/index*/shared_cpu_list (L3, %s)", c.CPUs.First(), bytesIEC(c.SizeBytes))
}

// l3Advice proposes a <topology> whose dies follow the physical L3s when the
// vCPUs are pinned in contiguous runs, one run per L3.
func l3Advice(hc *Host, d *Domain, l3Of [][]int) string {
	t := d.Topology.Threads
	var runs []int // run lengths
	var runL3 []int
	for i := range d.VCPUs {
		if len(l3Of[i]) != 1 || d.PinSource == "none" {
			runs = nil
			break
		}
		if len(runs) > 0 && runL3[len(runL3)-1] == l3Of[i][0] {
			runs[len(runs)-1]++
			continue
		}
		runs = append(runs, 1)
		runL3 = append(runL3, l3Of[i][0])
	}
	if runs != nil && d.VCPUs == d.MaxVCPUs {
		r := runs[0]
		same := true
		for _, x := range runs {
			if x != r {
				same = false
			}
		}
		if same && r%t == 0 {
			return fmt.Sprintf("Make each physical L3 one virtual die: <topology sockets='%d' dies='1' cores='%d' threads='%d'/> (one socket per L3; use dies within sockets instead if the guest should also see the packages), with <cell>s split at the same vCPUs when it spans nodes.", len(runs), r/t, t)
		}
	}
	return "Pin each virtual die to one L3 domain — `crosstalk plan --from-status --policy per-llc` (or 1to1) prints matching <cputune> and <topology> — or, for VMs that must float, keep the default one-socket-per-vCPU topology so the guest claims no sharing."
}

// --------------------------------------------------------- copy threshold

// qemuLegacyL3 is QEMU's emulated L3 (legacy_l3_cache: 16 MiB, one per die)
// and qemuLegacyL2Intel/AMD its L2 as CPUID leaf 4 and leaf 0x80000006 show
// it (legacy_l2_cache 4 MiB, legacy_l2_cache_amd 512 KiB); the host and max
// CPU models use them unless told host-cache-info=on.
const (
	qemuLegacyL3      = 16 << 20
	qemuLegacyL2Intel = 4 << 20
	qemuLegacyL2AMD   = 512 << 10
)

// qemuModelCaches are the named models with their own cache tables in QEMU
// (epyc_cache_info, epyc_rome_cache_info, epyc_milan_cache_info, …): L3 and
// L2 sizes, by model-name prefix, longest first.
var qemuModelCaches = []struct {
	prefix string
	l3, l2 int64
}{
	{"EPYC-Genoa", 32 << 20, 1 << 20},
	{"EPYC-Milan", 32 << 20, 512 << 10},
	{"EPYC-Rome", 16 << 20, 512 << 10},
	{"EPYC", 8 << 20, 512 << 10},
}

// CopyThreshold is the talk's form of glibc's memcpy non-temporal threshold:
// copies larger than (L3 / cores + L2) × 4 bytes use non-temporal stores and
// PREFETCHNTA (bypassing the cache); smaller ones do not.
func CopyThreshold(l3Bytes, l2Bytes int64, cores int) int64 {
	if cores < 1 {
		cores = 1
	}
	return (l3Bytes/int64(cores) + l2Bytes) * 4
}

// cacheView is the L3/L2 one side (host or guest) sees, with how it knows.
type cacheView struct {
	l3, l2 int64
	cores  int
	how    string
}

func (v cacheView) threshold() int64 { return CopyThreshold(v.l3, v.l2, v.cores) }

func (v cacheView) formula() string {
	return fmt.Sprintf("(%s / %d cores + %s) × 4 = %s", bytesIEC(v.l3), v.cores, bytesIEC(v.l2), bytesIEC(v.threshold()))
}

// hostCacheView is the host's L3 and L2 around cpu, and the physical cores
// sharing that L3.
func hostCacheView(hc *Host, cpu int) (cacheView, bool) {
	l3, ok := hc.Topo.CacheOf(cpu, 3)
	if !ok || l3.SizeBytes == 0 {
		return cacheView{}, false
	}
	l2, ok := hc.Topo.CacheOf(cpu, 2)
	if !ok {
		return cacheView{}, false
	}
	cores := map[string]bool{}
	for _, x := range l3.CPUs.Intersect(hc.Topo.Online).List() {
		cores[hc.siblings(x).String()] = true
	}
	return cacheView{l3: l3.SizeBytes, l2: l2.SizeBytes, cores: len(cores),
		how: fmt.Sprintf("L3 %s shared by %d cores (CPUs %s), L2 %s", bytesIEC(l3.SizeBytes), len(cores), l3.CPUs, bytesIEC(l2.SizeBytes))}, true
}

// guestCacheView is what a guest with the given cache mode sees; cores is
// the cores per virtual die, the ones sharing its L3.
func guestCacheView(hc *Host, d *Domain, mode string, host cacheView, cores int) (cacheView, bool) {
	switch mode {
	case "passthrough":
		return cacheView{l3: host.l3, l2: host.l2, cores: cores,
			how: fmt.Sprintf("<cache mode='passthrough'/>: the host's L3 %s and L2 %s, shared by the %d cores of a virtual die", bytesIEC(host.l3), bytesIEC(host.l2), cores)}, true
	case "disable":
		return cacheView{}, false
	}
	if d.CPUMode == "custom" || d.CPUMode == "host-model" {
		for _, m := range qemuModelCaches {
			if strings.HasPrefix(d.CPUModel, m.prefix) {
				return cacheView{l3: m.l3, l2: m.l2, cores: cores,
					how: fmt.Sprintf("CPU model %s: QEMU's table for it gives L3 %s, L2 %s, shared by the %d cores of a virtual die", d.CPUModel, bytesIEC(m.l3), bytesIEC(m.l2), cores)}, true
			}
		}
	}
	l2, leaf := int64(qemuLegacyL2Intel), "CPUID leaf 4"
	if guestIsAMD(hc, d) {
		l2, leaf = qemuLegacyL2AMD, "CPUID 0x80000006"
	}
	what := "<cache> absent"
	if mode == "emulate" {
		what = "<cache level='3' mode='emulate'/>"
	}
	return cacheView{l3: qemuLegacyL3, l2: l2, cores: cores,
		how: fmt.Sprintf("%s: QEMU's emulated L3 %s per virtual die and L2 %s (%s), shared by the %d cores of a die", what, bytesIEC(qemuLegacyL3), bytesIEC(l2), leaf, cores)}, true
}

func guestIsAMD(hc *Host, d *Domain) bool {
	switch d.CPUMode {
	case "host-passthrough", "maximum", "host-model":
		return hc.Vendor == "AuthenticAMD" || hc.Vendor == "HygonGenuine"
	}
	return strings.HasPrefix(d.CPUModel, "EPYC") || strings.HasPrefix(d.CPUModel, "Opteron") || strings.HasPrefix(d.CPUModel, "phenom")
}

// thresholdRatio is max/min of two thresholds, ≥ 1.
func thresholdRatio(a, b int64) float64 {
	if a <= 0 || b <= 0 {
		return math.Inf(1)
	}
	return float64(max(a, b)) / float64(min(a, b))
}

// copyWarnRatio is how far apart host and guest thresholds may be before the
// check warns: a quarter already covers a wide band of copy sizes.
const copyWarnRatio = 1.25

func checkCopyThreshold(hc *Host, d *Domain) Check {
	c := Check{Why: "glibc's memcpy switches to non-temporal stores with PREFETCHNTA (bypassing the cache) for copies above (L3 / cores + L2) × 4, computed from the cache sizes CPUID reports. In the talk's STREAM case the host's threshold was 6 MB and the VM's 3 MB (QEMU's emulated 16 MB L3 over 64 vCPUs), so the 5.96 MB per-thread copies took the cache-bypassing path only in the VM, and STREAM Copy was faster there than on the host (" + srcTalk + "; sizes: " + srcQEMU + "). The exact formula varies between glibc versions; this check uses the talk's."}
	if d.VCPUs == 0 {
		c.Status, c.Summary = Unknown, "no vCPUs"
		return c
	}
	host, ok := hostCacheView(hc, d.pins(hc, 0).First())
	if !ok {
		c.Status, c.Summary = Unknown, "the host's L2/L3 sizes are not in sysfs"
		return c
	}
	cores := d.Topology.Cores
	c.Evidence = append(c.Evidence,
		Evidence{File: fmt.Sprintf("/sys/devices/system/cpu/cpu%d/cache/index*/{size,shared_cpu_list}", d.pins(hc, 0).First()), Value: host.how},
		Evidence{File: "(computed) host copy threshold", Value: host.formula()})
	guest, ok := guestCacheView(hc, d, d.Cache, host, cores)
	if !ok {
		c.Evidence = append(c.Evidence, Evidence{File: d.Source, Value: "<cache mode='disable'/>"})
		c.Status, c.Summary = Info, "the guest is told it has no cache information: glibc falls back to its built-in default threshold"
		return c
	}
	c.Evidence = append(c.Evidence,
		Evidence{File: d.Source, Value: guest.how},
		Evidence{File: "(computed) guest copy threshold", Value: guest.formula()})
	ht, gt := host.threshold(), guest.threshold()
	r := thresholdRatio(ht, gt)
	if r < copyWarnRatio {
		c.Status, c.Summary = OK, fmt.Sprintf("copy threshold %s in the guest, %s on the host: memcpy picks the same strategy", bytesIEC(gt), bytesIEC(ht))
		return c
	}
	c.Status = Warn
	lo, hi := min(gt, ht), max(gt, ht)
	side, other := "in the guest", "on the host"
	if ht < gt {
		side, other = other, side
	}
	c.Summary = fmt.Sprintf("glibc copy threshold %s in the guest vs %s on the host: copies between %s and %s bypass the cache (PREFETCHNTA) %s but not %s", bytesIEC(gt), bytesIEC(ht), bytesIEC(lo), bytesIEC(hi), side, other)
	c.Advice = copyAdvice(hc, d, host, cores)
	return c
}

func copyAdvice(hc *Host, d *Domain, host cacheView, cores int) string {
	best, bestR := "", math.Inf(1)
	for _, m := range []string{"passthrough", "emulate"} {
		g, _ := guestCacheView(hc, d, m, host, cores)
		if r := thresholdRatio(g.threshold(), host.threshold()); r < bestR {
			best, bestR = m, r
		}
	}
	tun := fmt.Sprintf(" Inside the guest, GLIBC_TUNABLES=glibc.cpu.x86_non_temporal_threshold=%#x pins glibc to the host's value whatever the virtual caches say.", host.threshold())
	if bestR < copyWarnRatio {
		xml := "<cache mode='passthrough'/>"
		if best == "emulate" {
			xml = "<cache level='3' mode='emulate'/>"
		}
		if best == d.Cache {
			return "Keep the cache mode and match the topology instead." + tun
		}
		return fmt.Sprintf("Use %s inside <cpu mode='host-passthrough'>: the guest's threshold then lands within %.0f%% of the host's.%s", xml, (bestR-1)*100, tun)
	}
	total := d.Topology.Sockets * d.Topology.Dies * d.Topology.Cores
	if total >= host.cores && total%host.cores == 0 {
		dies := total / host.cores
		sockets := d.Topology.Sockets
		if dies%sockets != 0 {
			sockets = 1
		}
		return fmt.Sprintf("No cache mode matches with %d cores per virtual die. Give each die as many cores as share a host L3 (%d): <topology sockets='%d' dies='%d' cores='%d' threads='%d'/> with <cache mode='passthrough'/>, each die's vCPUs pinned to one L3.%s",
			cores, host.cores, sockets, dies/sockets, host.cores, d.Topology.Threads, tun)
	}
	return fmt.Sprintf("No cache mode or topology matches: with %d cores the guest cannot see the host's per-core L3 share (%s / %d cores).%s", total, bytesIEC(host.l3), host.cores, tun)
}

// ------------------------------------------------------------- phys bits

// qemuDefaultPhysBits is QEMU's guest physical address width for named CPU
// models when nothing sets it (TCG_PHYS_ADDR_BITS).
const qemuDefaultPhysBits = 40

// guestPhysBits is the guest's address width and how it was decided; 0 when
// it depends on a host width that is unknown.
func guestPhysBits(hc *Host, d *Domain) (int, string) {
	hostBits := hc.PhysBits
	if pa := d.PhysAddr; pa != nil {
		switch pa.Mode {
		case "passthrough":
			b := hostBits
			how := "<maxphysaddr mode='passthrough'/>: the host's width"
			if pa.Limit > 0 && b > int(pa.Limit) {
				b, how = int(pa.Limit), fmt.Sprintf("<maxphysaddr mode='passthrough' limit='%d'/>", pa.Limit)
			}
			return b, how
		case "emulate":
			if pa.Bits > 0 {
				return int(pa.Bits), fmt.Sprintf("<maxphysaddr mode='emulate' bits='%d'/>", pa.Bits)
			}
		}
	}
	if arg := d.QEMUCPUArg; arg != "" {
		for _, f := range strings.Split(arg, ",") {
			switch {
			case f == "host-phys-bits=on" || f == "host-phys-bits=true":
				return hostBits, "<qemu:commandline> -cpu " + arg + ": the host's width"
			case strings.HasPrefix(f, "phys-bits="):
				var b int
				if _, err := fmt.Sscanf(f, "phys-bits=%d", &b); err == nil {
					return b, "<qemu:commandline> -cpu " + arg
				}
			}
		}
	}
	switch d.CPUMode {
	case "host-passthrough", "maximum":
		return hostBits, fmt.Sprintf("<cpu mode='%s'>: QEMU turns host-phys-bits on for -cpu host/max (target/i386/host-cpu.c), the host's width", d.CPUMode)
	}
	return qemuDefaultPhysBits, fmt.Sprintf("CPU mode %q: QEMU's default %d bits for named models (distribution machine types may set host-phys-bits)", d.CPUMode, qemuDefaultPhysBits)
}

// RAMTop is the guest-physical address just past the guest's highest RAM,
// as QEMU lays out PC memory: up to 2 GiB (q35, 2.75 GiB and more of RAM;
// else 2.75 GiB) or 3 GiB (i440fx, 3.5 GiB and more; else 3.5 GiB) below
// 4 GiB, the rest from 4 GiB up, then the memory-hotplug region
// (<maxMemory>), 1 GiB aligned with 1 GiB per slot.
func RAMTop(memKiB, maxMemKiB uint64, slots int, machine string) uint64 {
	mem := memKiB << 10
	var lowmem uint64
	if strings.Contains(machine, "q35") || !strings.Contains(machine, "pc") {
		lowmem = 0xb0000000
		if mem >= 0xb0000000 {
			lowmem = 0x80000000
		}
	} else {
		lowmem = 0xe0000000
		if mem >= 0xe0000000 {
			lowmem = 0xc0000000
		}
	}
	top := mem
	if mem > lowmem {
		top = 1<<32 + (mem - lowmem)
	}
	if maxMemKiB > memKiB {
		top = (top+1<<30-1)&^(1<<30-1) + (maxMemKiB-memKiB)<<10 + uint64(slots)<<30
	}
	return top
}

func checkPhysBits(hc *Host, d *Domain) Check {
	c := Check{Why: "With L1TF, Linux inverts the page-frame bits of non-present PTEs so they point above MAX_PA/2; RAM at or above half the physical address space defeats that, and the guest prints \"L1TF: System has more than MAX_PA/2 memory. L1TF mitigation not effective\" and reports l1tf: Vulnerable (" + srcL1TF + "). The talk's ~2.7 TB guest ended RAM at 0x2b57fffffff with 42 bits (MAX_PA/2 = 2 TiB) on a 46-bit host; the fix is to give the guest the host's width (" + srcTalk + "; " + srcLibvd + ")."}
	bitsN, how := guestPhysBits(hc, d)
	top := RAMTop(d.MemoryKiB, d.MaxMemoryKiB, d.Slots, d.Machine)
	c.Evidence = append(c.Evidence,
		Evidence{File: d.Source, Value: fmt.Sprintf("<memory> %s, <maxMemory> %s, machine %q", kibIEC(d.MemoryKiB), orNone(kibIEC(d.MaxMemoryKiB), d.MaxMemoryKiB == 0), d.Machine)},
		Evidence{File: "(computed) guest RAM ends at", Value: fmt.Sprintf("%#x (%s; needs %d address bits)", top-1, bytesIEC(int64(top)), addrBits(top))},
		Evidence{File: d.Source, Value: how},
		Evidence{File: cpuinfoPath, Value: fmt.Sprintf("address sizes: %d bits physical; l1tf bug: %v", hc.PhysBits, hc.L1TF)})
	if bitsN == 0 {
		c.Status, c.Summary = Unknown, "the guest's address width follows the host's, which /proc/cpuinfo does not give"
		return c
	}
	half := uint64(1) << (bitsN - 1)
	fix := "<cpu mode='host-passthrough'><maxphysaddr mode='passthrough'/></cpu> (libvirt 8.7+), or on older libvirt the talk's <qemu:commandline><qemu:arg value='-cpu'/><qemu:arg value='host,host-phys-bits=on'/></qemu:commandline>"
	switch {
	case top > 1<<bitsN:
		c.Status = Warn
		c.Summary = fmt.Sprintf("guest RAM ends at %#x, beyond what %d address bits can reach", top-1, bitsN)
		c.Advice = "Give the guest more address bits: " + fix + "."
	case top > half && hc.L1TF:
		c.Status = Warn
		c.Summary = fmt.Sprintf("guest RAM ends at %#x, above MAX_PA/2 = %s of its %d address bits: the guest reports L1TF unmitigated", top-1, bytesIEC(int64(half)), bitsN)
		if hc.PhysBits > bitsN {
			c.Advice = fmt.Sprintf("Give the guest the host's %d bits: %s.", hc.PhysBits, fix)
		} else {
			c.Advice = fmt.Sprintf("The host itself has only %d bits: keep the guest's RAM below %s.", hc.PhysBits, bytesIEC(int64(half)))
		}
	case top > half:
		c.Status = OK
		c.Summary = fmt.Sprintf("guest RAM ends above MAX_PA/2 of its %d bits, but this CPU is not affected by L1TF", bitsN)
	default:
		c.Status = OK
		c.Summary = fmt.Sprintf("guest RAM ends at %#x, below MAX_PA/2 = %s of its %d address bits", top-1, bytesIEC(int64(half)), bitsN)
	}
	return c
}

func addrBits(top uint64) int {
	if top <= 1 {
		return 1
	}
	return bits.Len64(top - 1)
}

func orNone(s string, none bool) string {
	if none {
		return "none"
	}
	return s
}

// bytesIEC renders a byte count in the largest binary unit, with up to two
// decimals when it does not divide evenly.
func bytesIEC(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift {
			if n%(1<<u.shift) == 0 {
				return fmt.Sprintf("%d %s", n>>u.shift, u.name)
			}
			s := fmt.Sprintf("%.2f", float64(n)/float64(int64(1)<<u.shift))
			return strings.TrimRight(strings.TrimRight(s, "0"), ".") + " " + u.name
		}
	}
	return fmt.Sprintf("%d B", n)
}

func kibIEC(k uint64) string { return bytesIEC(int64(k) << 10) }
