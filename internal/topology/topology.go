// Package topology reads what the host's CPUs are and how they share things:
// packages, dies, cores, SMT siblings, NUMA nodes and the caches each CPU
// shares with which others. All of it comes from sysfs through a host.Host,
// so a captured tree reads the same as the live machine.
//
// CPU numbers are treated as names, never as positions: 2-socket Intel hosts
// number socket 0's cores 0-7 and their siblings 16-23, and the 8-node AMD
// layout in the KVM Forum topology talk interleaves nodes every CPU.
package topology

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

const cpuDir = "/sys/devices/system/cpu"

// CPU is one online logical CPU.
type CPU struct {
	ID       int        `json:"id"`
	Package  int        `json:"package"`
	Die      int        `json:"die"`
	Core     int        `json:"core"` // core_id: unique only within its package
	Node     int        `json:"node"`
	Siblings cpuset.Set `json:"siblings"` // SMT threads of this core, itself included
}

// Cache is one cache instance and the CPUs sharing it.
type Cache struct {
	Level     int        `json:"level"`
	Type      string     `json:"type"` // Data, Instruction, Unified
	ID        int        `json:"id"`
	CPUs      cpuset.Set `json:"cpus"`
	SizeBytes int64      `json:"size_bytes"`
	Ways      int        `json:"ways"`
	LineSize  int        `json:"line_size"`
	Sets      int        `json:"sets"`
}

// Node is a NUMA node.
type Node struct {
	ID        int        `json:"id"`
	CPUs      cpuset.Set `json:"cpus"`
	Distances []int      `json:"distances,omitempty"`
}

// Package is a physical socket.
type Package struct {
	ID    int        `json:"id"`
	CPUs  cpuset.Set `json:"cpus"`
	Cores int        `json:"cores"`
}

// Topology is the host's CPU layout.
type Topology struct {
	Online   cpuset.Set `json:"online"`
	Possible cpuset.Set `json:"possible"`
	CPUs     []CPU      `json:"-"`
	Packages []Package  `json:"packages"`
	Nodes    []Node     `json:"nodes"`
	Caches   []Cache    `json:"caches"`
	// SMT is the threads per core (1 without SMT), the maximum over cores.
	SMT int `json:"threads_per_core"`
	// Warnings says what was missing or garbled; the rest is still usable.
	Warnings []string `json:"warnings,omitempty"`
}

// CPU returns the online CPU with the given number.
func (t *Topology) CPU(id int) (CPU, bool) {
	i, ok := slices.BinarySearchFunc(t.CPUs, id, func(c CPU, id int) int { return cmp.Compare(c.ID, id) })
	if !ok {
		return CPU{}, false
	}
	return t.CPUs[i], true
}

// Cores is the number of physical cores (distinct SMT sibling groups).
func (t *Topology) Cores() int {
	seen := map[string]bool{}
	for _, c := range t.CPUs {
		seen[c.Siblings.String()] = true
	}
	return len(seen)
}

// CacheLevel returns the unified or data caches of one level (2 or 3), sorted by first CPU.
func (t *Topology) CacheLevel(level int) []Cache {
	var out []Cache
	for _, c := range t.Caches {
		if c.Level == level && c.Type != "Instruction" {
			out = append(out, c)
		}
	}
	return out
}

// CacheOf returns the cache of the given level (data or unified) that cpu uses.
func (t *Topology) CacheOf(cpu, level int) (Cache, bool) {
	for _, c := range t.CacheLevel(level) {
		if c.CPUs.Contains(cpu) {
			return c, true
		}
	}
	return Cache{}, false
}

// Read reads the topology. It fails only when no CPU can be found at all;
// anything less is reported in Warnings.
func Read(h *host.Host) (*Topology, error) {
	t := &Topology{}
	warn := func(format string, a ...any) { t.Warnings = append(t.Warnings, fmt.Sprintf(format, a...)) }

	cpuDirs, _ := h.Glob(cpuDir + "/cpu[0-9]*")
	present := map[int]bool{}
	for _, d := range cpuDirs {
		if n, err := strconv.Atoi(strings.TrimPrefix(path.Base(d), "cpu")); err == nil {
			present[n] = true
		}
	}

	if s, err := h.ReadString(cpuDir + "/online"); err == nil {
		if t.Online, err = cpuset.Parse(s); err != nil {
			warn("%s: %v", cpuDir+"/online", err)
		}
	}
	if t.Online.IsEmpty() {
		ids := make([]int, 0, len(present))
		for n := range present {
			ids = append(ids, n)
		}
		t.Online = cpuset.Of(ids...)
		if !t.Online.IsEmpty() {
			warn("%s/online unreadable; taking every cpuN directory as online", cpuDir)
		}
	}
	if t.Online.IsEmpty() {
		return nil, fmt.Errorf("topology: no CPUs found under %s", h.Path(cpuDir))
	}
	if s, err := h.ReadString(cpuDir + "/possible"); err == nil {
		t.Possible, _ = cpuset.Parse(s)
	}

	nodeOf := readNodes(h, t, warn)

	caches := map[string]*Cache{}
	for _, id := range t.Online.List() {
		base := fmt.Sprintf("%s/cpu%d", cpuDir, id)
		c := CPU{ID: id, Node: nodeOf[id]}
		topo := base + "/topology"
		var err error
		if c.Package, err = readSmallInt(h, topo+"/physical_package_id"); err != nil {
			warn("cpu%d: %v", id, err)
			continue // without a package the CPU cannot be placed
		}
		if c.Die, err = readSmallInt(h, topo+"/die_id"); err != nil {
			c.Die = 0 // die_id appeared in 5.3; one die per package before
		}
		if c.Core, err = readSmallInt(h, topo+"/core_id"); err != nil {
			warn("cpu%d: %v", id, err)
		}
		if s, err := h.ReadString(topo + "/thread_siblings_list"); err == nil {
			c.Siblings, err = cpuset.Parse(s)
			if err != nil {
				warn("cpu%d thread_siblings_list: %v", id, err)
			}
		}
		if c.Siblings.IsEmpty() || !c.Siblings.Contains(id) {
			c.Siblings = c.Siblings.Union(cpuset.Of(id))
		}
		t.CPUs = append(t.CPUs, c)
		readCaches(h, base+"/cache", id, caches, warn)
	}
	if len(t.CPUs) == 0 {
		return nil, fmt.Errorf("topology: no readable CPU topology under %s (%s)", h.Path(cpuDir), strings.Join(t.Warnings, "; "))
	}

	pkgs := map[int]*Package{}
	pkgCores := map[int]map[string]bool{}
	for _, c := range t.CPUs {
		p := pkgs[c.Package]
		if p == nil {
			p = &Package{ID: c.Package}
			pkgs[c.Package] = p
			pkgCores[c.Package] = map[string]bool{}
		}
		p.CPUs = p.CPUs.Union(cpuset.Of(c.ID))
		pkgCores[c.Package][c.Siblings.String()] = true
		t.SMT = max(t.SMT, c.Siblings.Len())
	}
	for id, p := range pkgs {
		p.Cores = len(pkgCores[id])
		t.Packages = append(t.Packages, *p)
	}
	slices.SortFunc(t.Packages, func(a, b Package) int { return cmp.Compare(a.ID, b.ID) })

	for _, c := range caches {
		t.Caches = append(t.Caches, *c)
	}
	slices.SortFunc(t.Caches, func(a, b Cache) int {
		return cmp.Or(cmp.Compare(a.Level, b.Level), strings.Compare(a.Type, b.Type), cmp.Compare(a.CPUs.First(), b.CPUs.First()))
	})
	return t, nil
}

// readNodes fills t.Nodes and returns each CPU's node. A kernel without NUMA
// has no node directories: then everything is node 0.
func readNodes(h *host.Host, t *Topology, warn func(string, ...any)) map[int]int {
	nodeOf := map[int]int{}
	dirs, _ := h.Glob("/sys/devices/system/node/node[0-9]*")
	for _, d := range dirs {
		id, err := strconv.Atoi(strings.TrimPrefix(path.Base(d), "node"))
		if err != nil {
			continue
		}
		cpus, err := readNodeCPUs(h, d)
		if err != nil {
			warn("node%d: %v", id, err)
			continue
		}
		n := Node{ID: id, CPUs: cpus}
		if s, err := h.ReadString(d + "/distance"); err == nil {
			for _, f := range strings.Fields(s) {
				v, err := strconv.Atoi(f)
				if err != nil {
					n.Distances = nil
					warn("node%d distance: bad value %q", id, f)
					break
				}
				n.Distances = append(n.Distances, v)
			}
		}
		for _, c := range cpus.List() {
			nodeOf[c] = id
		}
		t.Nodes = append(t.Nodes, n)
	}
	if len(t.Nodes) == 0 {
		t.Nodes = []Node{{ID: 0, CPUs: t.Online}}
	}
	slices.SortFunc(t.Nodes, func(a, b Node) int { return cmp.Compare(a.ID, b.ID) })
	return nodeOf
}

// readNodeCPUs reads a node directory's CPUs from cpulist or, where the
// kernel or a capture has no cpulist, from the cpumap hex mask that every
// kernel with NUMA sysfs writes (lscpu's own dumps keep only cpumap).
func readNodeCPUs(h *host.Host, dir string) (cpuset.Set, error) {
	s, err := h.ReadString(dir + "/cpulist")
	if err == nil {
		cpus, err := cpuset.Parse(s)
		if err != nil {
			return cpuset.Set{}, fmt.Errorf("cpulist: %w", err)
		}
		return cpus, nil
	}
	listErr := err
	s, err = h.ReadString(dir + "/cpumap")
	if err != nil {
		return cpuset.Set{}, fmt.Errorf("no cpulist (%v) and no cpumap (%w)", listErr, err)
	}
	cpus, err := cpuset.ParseMask(s)
	if err != nil {
		return cpuset.Set{}, fmt.Errorf("cpumap: %w", err)
	}
	return cpus, nil
}

// readCaches adds cpu's caches to the set of cache instances, keyed by level,
// type and sharing CPUs (the id file is missing on kernels before 4.14).
func readCaches(h *host.Host, dir string, cpu int, caches map[string]*Cache, warn func(string, ...any)) {
	idx, _ := h.Glob(dir + "/index[0-9]*")
	for _, d := range idx {
		level, err := readSmallInt(h, d+"/level")
		if err != nil {
			warn("cpu%d %s: %v", cpu, path.Base(d), err)
			continue
		}
		typ, _ := h.ReadString(d + "/type")
		s, err := h.ReadString(d + "/shared_cpu_list")
		if err != nil {
			warn("cpu%d %s: %v", cpu, path.Base(d), err)
			continue
		}
		shared, err := cpuset.Parse(s)
		if err != nil || !shared.Contains(cpu) {
			warn("cpu%d %s shared_cpu_list %q unusable", cpu, path.Base(d), s)
			continue
		}
		key := fmt.Sprintf("%d/%s/%s", level, typ, shared)
		if _, ok := caches[key]; ok {
			continue
		}
		c := &Cache{Level: level, Type: typ, CPUs: shared, ID: -1}
		if id, err := readSmallInt(h, d+"/id"); err == nil {
			c.ID = id
		}
		if s, err := h.ReadString(d + "/size"); err == nil {
			if c.SizeBytes, err = ParseSize(s); err != nil {
				warn("cpu%d %s: %v", cpu, path.Base(d), err)
			}
		}
		c.Ways, _ = readSmallInt(h, d+"/ways_of_associativity")
		c.LineSize, _ = readSmallInt(h, d+"/coherency_line_size")
		c.Sets, _ = readSmallInt(h, d+"/number_of_sets")
		caches[key] = c
	}
}

func readSmallInt(h *host.Host, p string) (int, error) {
	n, err := h.ReadInt(p)
	if err != nil {
		return 0, err
	}
	if n < 0 || n > 1<<30 {
		return 0, fmt.Errorf("%s: value %d out of range", h.Path(p), n)
	}
	return int(n), nil
}

// ParseSize reads a sysfs cache size such as "32768K" into bytes.
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > 1<<40/mult {
		return 0, fmt.Errorf("bad cache size %q", s)
	}
	return n * mult, nil
}
