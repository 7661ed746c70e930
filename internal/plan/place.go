package plan

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
)

// Placement is where one VM goes, with the libvirt XML that says so and the
// topology checks of that XML.
type Placement struct {
	VM VMSpec `json:"vm"`
	// Pins is each vCPU's host CPUs (one CPU under 1to1).
	Pins     []cpuset.Set `json:"pins"`
	Emulator cpuset.Set   `json:"emulator_pin"`
	Topology VTopology    `json:"topology"`
	Cells    []Cell       `json:"cells,omitempty"`
	// Nodes are the host nodes the vCPUs run on; MemNodes where memory is
	// bound (empty: not bound).
	Nodes    []int      `json:"nodes"`
	MemNodes cpuset.Set `json:"memory_nodes"`
	// IdleSiblings are the SMT siblings a 1to1 VM without SMT keeps idle so
	// no other tenant shares its cores.
	IdleSiblings cpuset.Set `json:"idle_siblings,omitempty"`
	Cache        CacheMode  `json:"cache"`
	PhysAddr     string     `json:"phys_addr,omitempty"` // "", "passthrough", "emulate bits=N"
	Notes        []string   `json:"notes,omitempty"`
	XML          string     `json:"xml"`
	Checks       []Check    `json:"checks"`

	// Domain is the generated XML, parsed back.
	Domain *Domain `json:"-"`
}

// Pool is a set of CPUs shared by the vCPUs of non-1to1 VMs, with how many
// vCPUs are confined to it.
type Pool struct {
	What  string     `json:"what"`
	CPUs  cpuset.Set `json:"cpus"`
	VCPUs int        `json:"vcpus"`
	Ratio float64    `json:"ratio"`
}

// Plan is the placement of a spec's VMs on a host.
type Plan struct {
	Reserved  cpuset.Set   `json:"reserved"`
	Dedicated cpuset.Set   `json:"dedicated"`
	VMs       []*Placement `json:"vms"`
	Pools     []Pool       `json:"pools,omitempty"`
	Warnings  []string     `json:"warnings,omitempty"`
}

// core is one physical core: its online sibling threads.
type core struct {
	cpus cpuset.Set
	node int
	l3   int // index into Host.L3Domains
}

// group is a slice of a VM placed on one cache domain or node: either whole
// cores (1to1) or a pool of CPUs its vCPUs share.
type group struct {
	node  int
	cores []core
	pool  cpuset.Set
	what  string
	vcpus int
}

// placedPool is a pin set and how many vCPUs got it.
type placedPool struct {
	cpus  cpuset.Set
	vcpus int
}

type planner struct {
	hc        *Host
	usable    cpuset.Set // online − reserved
	dedicated map[int]bool
	memFree   map[int]uint64 // KiB, nodes whose memory is known
	placed    []placedPool   // pools given to vCPUs so far
	cores     []core
}

// Make places the spec's VMs. reserve (may be empty) is kept for the host.
// 1to1 VMs are placed first, then per-llc, per-node and shared ones, each
// group in spec order; the result lists VMs in spec order.
func Make(hc *Host, spec *Spec, reserve cpuset.Set) (*Plan, error) {
	if !reserve.IsSubsetOf(hc.Topo.Online) {
		return nil, fmt.Errorf("reserve %s: CPUs %s are not online", reserve, reserve.Difference(hc.Topo.Online))
	}
	p := &planner{hc: hc, usable: hc.Topo.Online.Difference(reserve), dedicated: map[int]bool{},
		memFree: map[int]uint64{}}
	if p.usable.IsEmpty() {
		return nil, fmt.Errorf("reserve %s leaves no CPU for guests", reserve)
	}
	for n, kib := range hc.NodeMemKiB {
		p.memFree[n] = kib
	}
	seen := map[string]bool{}
	for _, c := range hc.Topo.CPUs {
		sib := hc.siblings(c.ID)
		if seen[sib.String()] {
			continue
		}
		seen[sib.String()] = true
		_, l3, _ := hc.L3Of(sib.First())
		p.cores = append(p.cores, core{cpus: sib, node: c.Node, l3: l3})
	}
	slices.SortFunc(p.cores, func(a, b core) int { return cmp.Compare(a.cpus.First(), b.cpus.First()) })

	out := &Plan{Reserved: reserve, VMs: make([]*Placement, len(spec.VMs))}
	for _, pol := range Policies {
		for i := range spec.VMs {
			vm := spec.VMs[i]
			if vm.Policy != pol {
				continue
			}
			pl, err := p.place(vm, reserve)
			if err != nil {
				where := ""
				if vm.Line > 0 {
					where = fmt.Sprintf("line %d: ", vm.Line)
				}
				return nil, fmt.Errorf("%svm %q (%s, %d vCPUs, %s): %w", where, vm.Name, vm.Policy, vm.VCPUs, vm.Memory, err)
			}
			out.VMs[i] = pl
		}
	}
	var ded []int
	for c := range p.dedicated {
		ded = append(ded, c)
	}
	out.Dedicated = cpuset.Of(ded...)
	out.Pools = p.pools(out)
	for _, pool := range out.Pools {
		if pool.Ratio > 1 {
			out.Warnings = append(out.Warnings, fmt.Sprintf("over-commit: %d vCPUs confined to the %d CPUs of %s (%.2f vCPUs per CPU)", pool.VCPUs, pool.CPUs.Len(), pool.What, pool.Ratio))
		}
	}
	for _, pl := range out.VMs {
		if err := finish(hc, pl); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (p *planner) place(vm VMSpec, reserve cpuset.Set) (*Placement, error) {
	pl := &Placement{VM: vm}
	var groups []group
	var err error
	threads := 1
	switch vm.Policy {
	case OneToOne:
		if vm.SMT {
			if p.hc.Topo.SMT > 1 {
				threads = p.hc.Topo.SMT
			} else {
				pl.Notes = append(pl.Notes, "smt: the host has no SMT; the guest gets one thread per core")
			}
		}
		if vm.VCPUs%threads != 0 {
			return nil, fmt.Errorf("smt: %d vCPUs cannot be split into cores of %d threads; use a multiple of %d or smt: false", vm.VCPUs, threads, threads)
		}
		groups, err = p.placeCores(vm, threads)
	case PerLLC, PerNode, Shared:
		if vm.SMT {
			pl.Notes = append(pl.Notes, "smt: virtual threads need 1to1 pinning onto sibling pairs; "+string(vm.Policy)+" exposes cores only (threads=1)")
		}
		groups, err = p.placePools(vm)
	}
	if err != nil {
		return nil, err
	}

	// Pins in QEMU's vCPU order: groups (node by node, cache by cache), then
	// cores, then threads.
	var idle []int
	nodes := map[int]bool{}
	for _, g := range groups {
		nodes[g.node] = true
		if g.cores != nil {
			for _, c := range g.cores {
				l := c.cpus.List()
				for _, cpu := range l[:threads] {
					pl.Pins = append(pl.Pins, cpuset.Of(cpu))
				}
				idle = append(idle, l[threads:]...)
				for _, cpu := range l {
					p.dedicated[cpu] = true
				}
			}
			continue
		}
		for range g.vcpus {
			pl.Pins = append(pl.Pins, g.pool)
		}
	}
	pl.Nodes = slices.Sorted(maps.Keys(nodes))
	pl.IdleSiblings = cpuset.Of(idle...)
	pl.Topology, pl.Cells = virtualTopology(groups, threads, vm.Memory)
	if vm.Policy == Shared {
		// One pool over several caches: claim no sharing (every vCPU its own
		// socket, libvirt's default) unless the pool is one L3.
		if _, single := p.singleL3(groups[0].pool); !single {
			pl.Topology = VTopology{Sockets: vm.VCPUs, Dies: 1, Cores: 1, Threads: 1}
		}
		pl.Cells = nil
		pl.Nodes = p.hc.NodesOf(groups[0].pool)
	} else {
		pl.MemNodes = cpuset.Of(pl.Nodes...)
		if err := p.takeMemory(pl); err != nil {
			return nil, err
		}
	}

	switch {
	case !reserve.IsEmpty():
		pl.Emulator = reserve
	case !pl.IdleSiblings.IsEmpty():
		pl.Emulator = pl.IdleSiblings
	default:
		var all cpuset.Set
		for _, s := range pl.Pins {
			all = all.Union(s)
		}
		pl.Emulator = all
	}
	return pl, nil
}

// placeCores finds whole free cores for a 1to1 VM: n cores split evenly over
// k nodes and d L3 domains per node, preferring one L3, then one node, then
// as few nodes as possible; nodes nearest each other; within them the
// tightest-fitting domains.
func (p *planner) placeCores(vm VMSpec, threads int) ([]group, error) {
	n := vm.VCPUs / threads
	// Free whole cores, by node and L3.
	free := map[int]map[int][]core{}
	for _, c := range p.cores {
		if threads > 1 && c.cpus.Len() != threads {
			continue
		}
		ok := c.cpus.IsSubsetOf(p.usable)
		for _, cpu := range c.cpus.List() {
			if p.dedicated[cpu] {
				ok = false
			}
		}
		if !ok {
			continue
		}
		if free[c.node] == nil {
			free[c.node] = map[int][]core{}
		}
		free[c.node][c.l3] = append(free[c.node][c.l3], c)
	}
	maxL3 := 0
	for _, byL3 := range free {
		maxL3 = max(maxL3, len(byL3))
	}
	nodeIDs := slices.Sorted(maps.Keys(boolKeys(free)))
	for k := 1; k <= len(nodeIDs); k++ {
		for d := 1; d <= maxL3; d++ {
			if n%(k*d) != 0 {
				continue
			}
			c := n / (k * d)
			var eligible []int
			slack := map[int]int{}
			for _, node := range nodeIDs {
				fits := 0
				total := 0
				for _, cs := range free[node] {
					if len(cs) >= c {
						fits++
						total += len(cs)
					}
				}
				if fits >= d && p.memFits(node, uint64(vm.Memory)/uint64(k)) {
					eligible = append(eligible, node)
					slack[node] = total - c*d
				}
			}
			if len(eligible) < k {
				continue
			}
			chosen := p.nearest(eligible, k, func(n int) int { return slack[n] })
			var groups []group
			for _, node := range chosen {
				var l3s []int
				for l3, cs := range free[node] {
					if len(cs) >= c {
						l3s = append(l3s, l3)
					}
				}
				// Tightest fit first, then lowest CPU; keep d, in CPU order.
				slices.SortFunc(l3s, func(a, b int) int {
					return cmp.Or(cmp.Compare(len(free[node][a]), len(free[node][b])), cmp.Compare(free[node][a][0].cpus.First(), free[node][b][0].cpus.First()))
				})
				l3s = l3s[:d]
				slices.SortFunc(l3s, func(a, b int) int { return cmp.Compare(free[node][a][0].cpus.First(), free[node][b][0].cpus.First()) })
				for _, l3 := range l3s {
					groups = append(groups, group{node: node, cores: free[node][l3][:c], vcpus: c * threads})
				}
			}
			return groups, nil
		}
	}
	var have []string
	for _, node := range nodeIDs {
		cnt := 0
		for _, cs := range free[node] {
			cnt += len(cs)
		}
		have = append(have, fmt.Sprintf("node%d %d", node, cnt))
	}
	if len(have) == 0 {
		have = []string{"none"}
	}
	what := "whole cores"
	if threads > 1 {
		what = fmt.Sprintf("whole cores with %d threads", threads)
	}
	return nil, fmt.Errorf("needs %d free %s split evenly over nodes and L3 domains (and %s of node memory); free: %s", n, what, vm.Memory, strings.Join(have, ", "))
}

// placePools finds, for a per-llc, per-node or shared VM, k equal shares of
// its vCPUs on k cache domains or nodes, k as small as possible, each share
// no larger than its pool (a VM never over-commits itself).
func (p *planner) placePools(vm VMSpec) ([]group, error) {
	type cand struct{ g group }
	var cands []cand
	switch vm.Policy {
	case PerLLC:
		for i, l3 := range p.hc.L3Domains() {
			pool := p.free(l3.CPUs)
			if pool.IsEmpty() {
				continue
			}
			node, _ := p.hc.NodeOf(pool.First())
			cands = append(cands, cand{group{node: node, pool: pool, what: fmt.Sprintf("L3 #%d (CPUs %s)", i, l3.CPUs)}})
		}
	case PerNode:
		for _, n := range p.hc.Topo.Nodes {
			pool := p.free(n.CPUs)
			if pool.IsEmpty() {
				continue
			}
			cands = append(cands, cand{group{node: n.ID, pool: pool, what: fmt.Sprintf("node %d", n.ID)}})
		}
	case Shared:
		pool := p.free(p.hc.Topo.Online)
		if pool.Len() < vm.VCPUs {
			return nil, fmt.Errorf("%d vCPUs but only %d CPUs are neither reserved nor dedicated to 1to1 VMs (%s): a VM never gets more vCPUs than CPUs to run them", vm.VCPUs, pool.Len(), pool)
		}
		p.placed = append(p.placed, placedPool{pool, vm.VCPUs})
		node, _ := p.hc.NodeOf(pool.First())
		return []group{{node: node, pool: pool, what: "shared", vcpus: vm.VCPUs}}, nil
	}
	// A pool's load counts every vCPU already confined to its CPUs, from
	// whichever policy.
	load := func(c cand, add int) float64 {
		n := add
		for _, pp := range p.placed {
			if pp.cpus.IsSubsetOf(c.g.pool) {
				n += pp.vcpus
			}
		}
		return float64(n) / float64(c.g.pool.Len())
	}
	for k := 1; k <= len(cands); k++ {
		if vm.VCPUs%k != 0 {
			continue
		}
		per := vm.VCPUs / k
		var eligible []int
		for i, c := range cands {
			if c.g.pool.Len() >= per && p.memFits(c.g.node, uint64(vm.Memory)/uint64(k)) {
				eligible = append(eligible, i)
			}
		}
		if len(eligible) < k {
			continue
		}
		// Least loaded first; the others as near as possible.
		chosen := pickNear(eligible, k,
			func(a, b int) int { return p.hc.Distance(cands[a].g.node, cands[b].g.node) },
			func(a, b int) int { return cmp.Compare(load(cands[a], per), load(cands[b], per)) })
		slices.SortFunc(chosen, func(a, b int) int {
			return cmp.Or(cmp.Compare(cands[a].g.node, cands[b].g.node), cmp.Compare(cands[a].g.pool.First(), cands[b].g.pool.First()))
		})
		var groups []group
		for _, i := range chosen {
			g := cands[i].g
			g.vcpus = per
			p.placed = append(p.placed, placedPool{g.pool, per})
			groups = append(groups, g)
		}
		return groups, nil
	}
	var have []string
	for _, c := range cands {
		have = append(have, fmt.Sprintf("%s: %d CPUs", c.g.what, c.g.pool.Len()))
	}
	return nil, fmt.Errorf("no %s has room: its vCPUs must split evenly over domains each at least as large as its share (and memory must fit); candidates: %s", map[Policy]string{PerLLC: "L3 domain", PerNode: "node"}[vm.Policy], strings.Join(have, "; "))
}

// free is cpus minus reserved, offline and 1to1-dedicated CPUs.
func (p *planner) free(cpus cpuset.Set) cpuset.Set {
	var out []int
	for _, c := range cpus.Intersect(p.usable).List() {
		if !p.dedicated[c] {
			out = append(out, c)
		}
	}
	return cpuset.Of(out...)
}

func (p *planner) memFits(node int, kib uint64) bool {
	free, known := p.memFree[node]
	return !known || kib <= free
}

// nearest picks k of the eligible nodes as close together (SLIT) as
// possible: from each seed, in order of least slack, it adds the node
// closest to those chosen, and keeps the cheapest set; returned ascending.
func (p *planner) nearest(eligible []int, k int, slack func(int) int) []int {
	return pickNear(eligible, k, p.hc.Distance, func(a, b int) int { return cmp.Or(cmp.Compare(slack(a), slack(b)), cmp.Compare(a, b)) })
}

// pickNear chooses k of items minimising the sum of pairwise distances,
// greedily from every seed (seeds and ties in the order of pref).
func pickNear(items []int, k int, dist func(a, b int) int, pref func(a, b int) int) []int {
	order := slices.Clone(items)
	slices.SortStableFunc(order, pref)
	var best []int
	bestCost := 0
	for _, seed := range order {
		chosen := []int{seed}
		cost := 0
		for len(chosen) < k {
			next, nextD := -1, 0
			for _, e := range order {
				if slices.Contains(chosen, e) {
					continue
				}
				d := 0
				for _, c := range chosen {
					d += dist(c, e)
				}
				if next < 0 || d < nextD {
					next, nextD = e, d
				}
			}
			chosen = append(chosen, next)
			cost += nextD
		}
		if best == nil || cost < bestCost {
			best, bestCost = chosen, cost
		}
	}
	slices.Sort(best)
	return best
}

// takeMemory books the VM's memory on its nodes, cell by cell.
func (p *planner) takeMemory(pl *Placement) error {
	per := map[int]uint64{}
	if len(pl.Cells) > 0 {
		for _, c := range pl.Cells {
			per[c.HostNodes.First()] += c.MemoryKiB
		}
	} else {
		for i, n := range pl.Nodes {
			share := uint64(pl.VM.Memory) / uint64(len(pl.Nodes))
			if i == 0 {
				share += uint64(pl.VM.Memory) % uint64(len(pl.Nodes))
			}
			per[n] += share
		}
	}
	for n, kib := range per {
		if free, known := p.memFree[n]; known {
			if kib > free {
				return fmt.Errorf("node %d has %s of memory left, the VM needs %s there", n, kibIEC(free), kibIEC(kib))
			}
			p.memFree[n] = free - kib
		}
	}
	return nil
}

func (p *planner) singleL3(pool cpuset.Set) (int, bool) {
	idx := -1
	for _, cpu := range pool.List() {
		_, i, ok := p.hc.L3Of(cpu)
		if !ok || (idx >= 0 && i != idx) {
			return -1, false
		}
		idx = i
	}
	return idx, idx >= 0
}

// virtualTopology mirrors the groups: a socket per host node, a die per
// group within it when every node has the same number of equal groups;
// otherwise a socket per group. Several nodes get a cell each.
func virtualTopology(groups []group, threads int, mem Size) (VTopology, []Cell) {
	total := 0
	for _, g := range groups {
		total += g.vcpus
	}
	perNode := map[int]int{}
	var nodes []int
	equal := true
	for _, g := range groups {
		if perNode[g.node] == 0 {
			nodes = append(nodes, g.node)
		}
		perNode[g.node]++
		if g.vcpus != groups[0].vcpus {
			equal = false
		}
	}
	sameCount := true
	for _, n := range nodes {
		if perNode[n] != perNode[nodes[0]] {
			sameCount = false
		}
	}
	var t VTopology
	switch {
	case equal && sameCount:
		t = VTopology{Sockets: len(nodes), Dies: perNode[nodes[0]], Cores: groups[0].vcpus / threads, Threads: threads}
	case equal:
		t = VTopology{Sockets: len(groups), Dies: 1, Cores: groups[0].vcpus / threads, Threads: threads}
	default:
		t = VTopology{Sockets: 1, Dies: 1, Cores: total / threads, Threads: threads}
	}
	if len(nodes) < 2 {
		return t, nil
	}
	var cells []Cell
	v := 0
	memMiB := uint64(mem) >> 10
	for i, n := range nodes {
		cnt := 0
		for _, g := range groups {
			if g.node == n {
				cnt += g.vcpus
			}
		}
		share := memMiB / uint64(len(nodes))
		if uint64(i) < memMiB%uint64(len(nodes)) {
			share++
		}
		kib := share << 10
		if memMiB == 0 || i == len(nodes)-1 {
			// Sub-MiB remainders go to the last cell so cells sum to <memory>.
			var sum uint64
			for _, c := range cells {
				sum += c.MemoryKiB
			}
			kib = uint64(mem) - sum
		}
		cells = append(cells, Cell{ID: i, VCPUs: cpuset.Range(v, v+cnt-1), MemoryKiB: kib, HostNodes: cpuset.Of(n)})
		v += cnt
	}
	return t, cells
}

// pools lists the CPU pools non-1to1 VMs share and how many vCPUs each
// confines.
func (p *planner) pools(pl *Plan) []Pool {
	var out []Pool
	seen := map[string]bool{}
	add := func(what string, cpus cpuset.Set) {
		if cpus.IsEmpty() || seen[cpus.String()] {
			return
		}
		seen[cpus.String()] = true
		n := 0
		for _, vm := range pl.VMs {
			if vm.VM.Policy == OneToOne {
				continue
			}
			for _, pin := range vm.Pins {
				if pin.IsSubsetOf(cpus) {
					n++
				}
			}
		}
		out = append(out, Pool{What: what, CPUs: cpus, VCPUs: n, Ratio: float64(n) / float64(cpus.Len())})
	}
	shared := false
	for _, vm := range pl.VMs {
		if vm.VM.Policy == OneToOne {
			continue
		}
		shared = true
		for _, pin := range vm.Pins {
			what := "shared"
			if vm.VM.Policy != Shared {
				what = "node " + nodeList(p.hc.NodesOf(pin))
				if vm.VM.Policy == PerLLC {
					if _, idx, ok := p.hc.L3Of(pin.First()); ok {
						what = fmt.Sprintf("L3 #%d on %s", idx, what)
					}
				}
			}
			add(what, pin)
		}
	}
	if shared {
		add("all CPUs not reserved or dedicated", p.free(p.hc.Topo.Online))
	}
	return out
}

// finish resolves the cache and address-width choices, writes the XML,
// parses it back and runs the topology checks on what was parsed.
func finish(hc *Host, pl *Placement) error {
	pl.Cache = pl.VM.Cache
	if pl.Cache == CacheAuto {
		pl.Cache = CachePassthrough
		if host, ok := hostCacheView(hc, pl.Pins[0].First()); ok {
			d := &Domain{CPUMode: "host-passthrough", Topology: pl.Topology}
			best := 0.0
			for i, m := range []CacheMode{CachePassthrough, CacheEmulate} {
				g, _ := guestCacheView(hc, d, string(m), host, pl.Topology.Cores)
				r := thresholdRatio(g.threshold(), host.threshold())
				if i == 0 || r < best {
					pl.Cache, best = m, r
				}
			}
			pl.Notes = append(pl.Notes, fmt.Sprintf("cache: %s puts the guest's glibc copy threshold nearest the host's", pl.Cache))
		}
	}
	switch pl.VM.PhysBits.Mode {
	case "host":
		pl.PhysAddr = "passthrough"
	case "bits":
		pl.PhysAddr = fmt.Sprintf("emulate bits=%d", pl.VM.PhysBits.Bits)
	case "auto", "":
		// host-passthrough already gets the host's width from QEMU; say so
		// explicitly for guests big enough for it to matter.
		if RAMTop(uint64(pl.VM.Memory), 0, 0, "q35") > 1<<(qemuDefaultPhysBits-1) {
			pl.PhysAddr = "passthrough"
			pl.Notes = append(pl.Notes, "phys_bits: <maxphysaddr mode='passthrough'/> so the guest keeps the host's address width (its RAM ends above 512 GiB)")
		}
	}
	x := pl.libvirtXML()
	frag, err := Fragments(x)
	if err != nil {
		return fmt.Errorf("vm %q: writing XML: %w", pl.VM.Name, err)
	}
	pl.XML = frag
	back, err := ParseFragments(pl.VM.Name, frag)
	if err != nil {
		return fmt.Errorf("vm %q: the generated XML does not parse back: %w", pl.VM.Name, err)
	}
	pl.Domain = back
	pl.Checks = CheckDomain(hc, back)
	return nil
}

// libvirtXML is the placement as libvirt elements.
func (pl *Placement) libvirtXML() *libvirtxml.Domain {
	x := &libvirtxml.Domain{
		Memory: &libvirtxml.DomainMemory{Value: uint(pl.VM.Memory), Unit: "KiB"},
		VCPU:   &libvirtxml.DomainVCPU{Placement: "static", Value: uint(len(pl.Pins))},
		CPUTune: &libvirtxml.DomainCPUTune{
			EmulatorPin: &libvirtxml.DomainCPUTuneEmulatorPin{CPUSet: pl.Emulator.String()},
		},
		CPU: &libvirtxml.DomainCPU{
			Mode:  "host-passthrough",
			Check: "none",
			Topology: &libvirtxml.DomainCPUTopology{Sockets: pl.Topology.Sockets, Dies: pl.Topology.Dies,
				Cores: pl.Topology.Cores, Threads: pl.Topology.Threads},
		},
	}
	for i, s := range pl.Pins {
		x.CPUTune.VCPUPin = append(x.CPUTune.VCPUPin, libvirtxml.DomainCPUTuneVCPUPin{VCPU: uint(i), CPUSet: s.String()})
	}
	switch pl.Cache {
	case CachePassthrough:
		x.CPU.Cache = &libvirtxml.DomainCPUCache{Mode: "passthrough"}
	case CacheEmulate:
		x.CPU.Cache = &libvirtxml.DomainCPUCache{Level: 3, Mode: "emulate"}
	}
	switch {
	case pl.PhysAddr == "passthrough":
		x.CPU.MaxPhysAddr = &libvirtxml.DomainCPUMaxPhysAddr{Mode: "passthrough"}
	case strings.HasPrefix(pl.PhysAddr, "emulate"):
		x.CPU.MaxPhysAddr = &libvirtxml.DomainCPUMaxPhysAddr{Mode: "emulate", Bits: uint(pl.VM.PhysBits.Bits)}
	}
	if !pl.MemNodes.IsEmpty() {
		x.NUMATune = &libvirtxml.DomainNUMATune{Memory: &libvirtxml.DomainNUMATuneMemory{Mode: "strict", Nodeset: pl.MemNodes.String()}}
	}
	if len(pl.Cells) > 0 {
		x.CPU.Numa = &libvirtxml.DomainNuma{}
		for _, c := range pl.Cells {
			id := uint(c.ID)
			x.CPU.Numa.Cell = append(x.CPU.Numa.Cell, libvirtxml.DomainCell{ID: &id, CPUs: c.VCPUs.String(), Memory: uint(c.MemoryKiB), Unit: "KiB"})
			x.NUMATune.MemNodes = append(x.NUMATune.MemNodes, libvirtxml.DomainNUMATuneMemNode{CellID: id, Mode: "strict", Nodeset: c.HostNodes.String()})
		}
	}
	return x
}
