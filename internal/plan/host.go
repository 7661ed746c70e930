package plan

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

// Host is what planning and the topology checks know about the machine.
type Host struct {
	Hostname string
	Topo     *topology.Topology
	// NodeMemKiB is each node's MemTotal; nil or a missing node means unknown.
	NodeMemKiB map[int]uint64
	// PhysBits is the CPU's physical address width ("address sizes"), 0 unknown.
	PhysBits int
	// Vendor is cpuinfo's vendor_id ("GenuineIntel", "AuthenticAMD").
	Vendor string
	// L1TF says the CPU is affected by L1 Terminal Fault (cpuinfo "bugs").
	L1TF bool
	// Warnings says what could not be read.
	Warnings []string

	l3Once sync.Once
	l3     []topology.Cache
	l3Idx  map[int]int // CPU → index into l3
}

// Paths read by ReadHost; evidence in checks names them.
const (
	cpuinfoPath = "/proc/cpuinfo"
	nodeDir     = "/sys/devices/system/node"
)

// ReadHost reads the topology, per-node memory and the CPU's address width
// and bugs through h. Only a missing topology is an error.
func ReadHost(h *host.Host) (*Host, error) {
	topo, err := topology.Read(h)
	if err != nil {
		return nil, err
	}
	hc := &Host{Topo: topo, NodeMemKiB: map[int]uint64{}}
	hc.Hostname, _ = h.ReadString("/proc/sys/kernel/hostname")
	for _, n := range topo.Nodes {
		p := fmt.Sprintf("%s/node%d/meminfo", nodeDir, n.ID)
		s, err := h.ReadString(p)
		if err != nil {
			continue // older captures lack it; memory is then not checked
		}
		if kib, ok := parseNodeMemTotal(s); ok {
			hc.NodeMemKiB[n.ID] = kib
		} else {
			hc.Warnings = append(hc.Warnings, p+": no MemTotal line")
		}
	}
	if data, err := h.ReadString(cpuinfoPath); err != nil {
		hc.Warnings = append(hc.Warnings, fmt.Sprintf("%s: %v", cpuinfoPath, err))
	} else {
		hc.applyCPUInfo(data)
	}
	return hc, nil
}

var addrSizesRE = regexp.MustCompile(`^([0-9]+) bits physical`)

// applyCPUInfo takes the address width, vendor and bugs of the first CPU.
func (hc *Host) applyCPUInfo(data string) {
	st, err := topology.ParseCPUInfo(data)
	if err != nil {
		hc.Warnings = append(hc.Warnings, fmt.Sprintf("%s: %v", cpuinfoPath, err))
		return
	}
	s := st[0]
	hc.Vendor = s["vendor_id"]
	if m := addrSizesRE.FindStringSubmatch(s["address sizes"]); m != nil {
		hc.PhysBits, _ = strconv.Atoi(m[1])
	}
	hc.L1TF = slices.Contains(strings.Fields(s["bugs"]), "l1tf")
}

func parseNodeMemTotal(s string) (uint64, bool) {
	for _, l := range strings.Split(s, "\n") {
		f := strings.Fields(l)
		// "Node 0 MemTotal:       263856036 kB"
		if len(f) == 5 && f[0] == "Node" && f[2] == "MemTotal:" && f[4] == "kB" {
			v, err := strconv.ParseUint(f[3], 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// NodeOf returns the NUMA node of an online CPU.
func (hc *Host) NodeOf(cpu int) (int, bool) {
	c, ok := hc.Topo.CPU(cpu)
	return c.Node, ok
}

// NodesOf returns the nodes the given CPUs belong to, ascending.
func (hc *Host) NodesOf(cpus cpuset.Set) []int {
	seen := map[int]bool{}
	for _, c := range cpus.List() {
		if n, ok := hc.NodeOf(c); ok {
			seen[n] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// Node returns node id.
func (hc *Host) Node(id int) (topology.Node, bool) {
	for _, n := range hc.Topo.Nodes {
		if n.ID == id {
			return n, true
		}
	}
	return topology.Node{}, false
}

// Distance is the SLIT distance between two nodes (10 for itself, 0 unknown).
func (hc *Host) Distance(a, b int) int {
	n, ok := hc.Node(a)
	if !ok {
		return 0
	}
	i := slices.IndexFunc(hc.Topo.Nodes, func(x topology.Node) bool { return x.ID == b })
	if i < 0 || i >= len(n.Distances) {
		if a == b {
			return 10
		}
		return 0
	}
	return n.Distances[i]
}

// L3Domains returns the L3 caches, or, on a host whose sysfs shows none, one
// pseudo-domain per NUMA node so placement still has a cache level to use.
func (hc *Host) L3Domains() []topology.Cache {
	hc.indexL3()
	return hc.l3
}

func (hc *Host) indexL3() {
	hc.l3Once.Do(func() {
		hc.l3 = hc.Topo.CacheLevel(3)
		if len(hc.l3) == 0 {
			for _, n := range hc.Topo.Nodes {
				hc.l3 = append(hc.l3, topology.Cache{Level: 3, Type: "Unified", ID: -1, CPUs: n.CPUs.Intersect(hc.Topo.Online)})
			}
		}
		hc.l3Idx = map[int]int{}
		for i, c := range hc.l3 {
			for _, cpu := range c.CPUs.List() {
				if _, dup := hc.l3Idx[cpu]; !dup {
					hc.l3Idx[cpu] = i
				}
			}
		}
	})
}

// L3Of returns the L3 domain a CPU uses (see L3Domains).
func (hc *Host) L3Of(cpu int) (topology.Cache, int, bool) {
	hc.indexL3()
	i, ok := hc.l3Idx[cpu]
	if !ok {
		return topology.Cache{}, -1, false
	}
	return hc.l3[i], i, true
}

// siblings is an online CPU's SMT siblings that are online, itself included.
func (hc *Host) siblings(cpu int) cpuset.Set {
	c, ok := hc.Topo.CPU(cpu)
	if !ok {
		return cpuset.Set{}
	}
	return c.Siblings.Intersect(hc.Topo.Online)
}
