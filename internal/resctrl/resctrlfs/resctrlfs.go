// Package resctrlfs makes a plain directory tree behave like a mounted
// resctrl filesystem (Documentation/arch/x86/resctrl.rst), as a host.Kernel:
// mkdir of a control or monitoring group allocates its CLOSID and RMID and
// populates its files, rmdir gives its tasks and CPUs back, a write to tasks
// moves one task, and a schemata write is validated and merged the way the
// kernel's rdtgroup_schemata_write() does it. The files are always rendered
// as the kernel would print them, so code under test reads exactly what it
// would read on a real host.
//
// The simulator (crosstalk sim) runs the production sensors and actuators
// against it, and it is the kernel side of the actuator tests, which check
// exact file contents after every step. Behaviour follows the kernel's
// fs/resctrl/rdtgroup.c and ctrlmondata.c (older kernels: arch/x86/kernel/
// cpu/resctrl/); what is not emulated is said where it matters: cache
// pseudo-locking, the mba_MBps software controller's feedback loop (values
// are stored, not enforced), Sub-NUMA-cluster mon_sub directories, BMEC
// event configuration, and multi-PID tasks writes are accepted as on 6.2+.
//
// The counters behind mon_data are the simulator's to set (Account); the
// emulator only keeps them per RMID and sums them the way the kernel does
// for a control group and its monitoring groups.
package resctrlfs

import (
	"fmt"
	"io/fs"
	"math/bits"
	"os"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/resctrl"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

// Options configure the emulation.
type Options struct {
	// Mount is where resctrl is mounted in the tree (default
	// /sys/fs/resctrl). The tree must already hold its info directory and
	// root schemata, as the host trees under testdata/hosts do.
	Mount string
	// Tabular selects the schemata layout of kernels before the data_width
	// removal (zero-padded masks, space-padded MB values: "L3:0=00f",
	// "MB:0=2048;1=  16"); newer kernels print plain values. nil decides
	// from /proc/sys/kernel/osrelease: tabular before 6.14 (by our reading
	// of when "x86/resctrl: Remove data_width and the tabular format"
	// landed; set it when a test depends on it).
	Tabular *bool
	// TaskExists says whether a thread ID exists, for ESRCH. nil: every
	// thread exists until Exit is called for it.
	TaskExists func(tid int) bool
	// Topology gives the cache sizes (for the size files) and online CPUs;
	// nil reads it from the tree.
	Topology *topology.Topology
}

// FS is the emulated kernel side of one resctrl mount. It is safe for
// concurrent use.
type FS struct {
	mu      sync.Mutex
	opts    Options
	h       *host.Host
	mount   string
	mounted bool

	amd        bool
	schemas    []*schema
	nameWidth  int
	dataWidth  int // 0: plain values
	numClosid  int
	monCapable bool
	features   []string
	numRMID    int
	threshold  uint64
	monDomains []int
	cacheSize  map[int]map[int]int64 // cache level → id → bytes
	online     cpuset.Set
	nrCPUIDs   int

	root      *group
	groups    map[string]*group // by path relative to the mount; "" is the default group
	closids   []*group
	rmidOwner []*group
	freeRMIDs []int // the kernel's free list: freed RMIDs go to the tail
	limbo     []int
	tasks     map[int]*task
	exited    map[int]bool
	counters  map[int][]counter // RMID → per monDomains index
	lastCmd   []string
}

type schema struct {
	name      string
	mb        bool
	level     int // cache level of a cache schema
	cbmMask   uint64
	cbmLen    int
	minBits   int
	shareable uint64
	sparse    bool
	numClosid int
	minBW     int
	gran      int
	maxBW     uint64
	linear    bool
	mbps      bool
	domains   []int
}

func (s *schema) def() uint64 {
	if s.mb {
		return s.maxBW
	}
	return s.cbmMask
}

type group struct {
	rel, name string
	ctrl      bool
	parent    *group
	mons      []*group
	closid    int
	rmid      int
	mode      string
	vals      map[string]map[int]uint64 // schema → domain → value (control groups)
	cpus      cpuset.Set
}

type task struct{ ctrl, mon *group }

type counter struct {
	occupancy, total, local uint64
	unavailable             bool
}

// New returns an unmounted emulation; pass it to host.Open with
// host.WithKernel, then call Mount with the Host.
func New(opts Options) *FS {
	if opts.Mount == "" {
		opts.Mount = resctrl.DefaultMount
	}
	return &FS{opts: opts, mount: path.Clean("/" + opts.Mount)}
}

// Mount reads the tree's resctrl as the kernel would find it at mount time:
// resources and limits from info/, domains and the name padding from the
// root schemata, the groups already there (someone else's, like libvirt's
// cachetune groups) with their schemata, tasks and CPUs, and CLOSIDs and
// RMIDs for them in name order. It then renders every file the kernel would
// show (mon_groups, mon_data, cpus, mode, size, last_cmd_status, bit_usage),
// filling in what the tree lacks.
func (f *FS) Mount(h *host.Host) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.h = h
	if err := f.load(); err != nil {
		return fmt.Errorf("resctrlfs: mount %s: %w", h.Path(f.mount), err)
	}
	f.mounted = true
	f.renderAll()
	return nil
}

func (f *FS) p(rel string) string { return path.Join(f.mount, rel) }

func (f *FS) readString(rel string) (string, error) {
	b, err := os.ReadFile(f.h.Path(f.p(rel)))
	return strings.TrimSpace(string(b)), err
}

func (f *FS) readInt(rel string) (int, error) {
	s, err := f.readString(rel)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(s)
}

func (f *FS) load() error {
	if _, err := os.Stat(f.h.Path(f.p("info"))); err != nil {
		return fmt.Errorf("no info directory: %w", err)
	}
	if b, err := os.ReadFile(f.h.Path("/proc/cpuinfo")); err == nil {
		if id, err := topology.IdentityFromCPUInfo(string(b)); err == nil {
			f.amd = id.IsAMD()
		}
	}
	mbps := false
	if _, opts, ok := resctrl.MountPoint(f.h); ok {
		mbps = slices.Contains(opts, "mba_MBps")
	}
	rootSchemata, err := f.readString("schemata")
	if err != nil {
		return fmt.Errorf("root schemata: %w", err)
	}
	for _, raw := range strings.Split(rootSchemata, "\n") {
		name, rest, ok := strings.Cut(raw, ":")
		if !ok {
			continue
		}
		f.nameWidth = max(f.nameWidth, len(name))
		s := &schema{name: strings.TrimSpace(name)}
		for _, d := range strings.Split(rest, ";") {
			id, _, _ := strings.Cut(d, "=")
			n, err := strconv.Atoi(strings.TrimSpace(id))
			if err != nil {
				return fmt.Errorf("root schemata line %q: bad domain %q", raw, d)
			}
			s.domains = append(s.domains, n)
		}
		info := path.Join("info", s.name)
		switch {
		case s.name == "MB" || s.name == "SMBA":
			s.mb, s.mbps = true, mbps && s.name == "MB"
			s.minBW, _ = f.readInt(path.Join(info, "min_bandwidth"))
			s.gran, _ = f.readInt(path.Join(info, "bandwidth_gran"))
			lin, _ := f.readInt(path.Join(info, "delay_linear"))
			s.linear = lin == 1
			switch {
			case s.mbps:
				s.maxBW = 1<<32 - 1
			case f.amd:
				s.maxBW = 2048
			default:
				s.maxBW = 100
			}
		default:
			mask, err := f.readString(path.Join(info, "cbm_mask"))
			if err != nil {
				return fmt.Errorf("resource %s: %w", s.name, err)
			}
			if s.cbmMask, err = strconv.ParseUint(mask, 16, 64); err != nil || s.cbmMask == 0 {
				return fmt.Errorf("resource %s: bad cbm_mask %q", s.name, mask)
			}
			s.cbmLen = bits.Len64(s.cbmMask)
			s.minBits, _ = f.readInt(path.Join(info, "min_cbm_bits"))
			if v, err := f.readString(path.Join(info, "shareable_bits")); err == nil {
				s.shareable, _ = strconv.ParseUint(v, 16, 64)
			}
			sp, err := f.readInt(path.Join(info, "sparse_masks"))
			s.sparse = err == nil && sp == 1
			s.level = 3
			if strings.HasPrefix(s.name, "L2") {
				s.level = 2
			}
		}
		if s.numClosid, err = f.readInt(path.Join(info, "num_closids")); err != nil || s.numClosid <= 0 {
			return fmt.Errorf("resource %s: num_closids unreadable", s.name)
		}
		f.schemas = append(f.schemas, s)
	}
	if len(f.schemas) > 0 {
		f.numClosid = f.schemas[0].numClosid
		for _, s := range f.schemas {
			f.numClosid = min(f.numClosid, s.numClosid)
		}
	}
	if tabular := f.opts.Tabular; tabular != nil && *tabular || tabular == nil && tabularKernel(f.h) {
		for _, s := range f.schemas {
			w := 3 // MBA percentages
			switch {
			case !s.mb:
				w = (s.cbmLen + 3) / 4
			case f.amd:
				w = 4
			}
			f.dataWidth = max(f.dataWidth, w)
		}
	}

	if n, err := f.readInt("info/L3_MON/num_rmids"); err == nil && n > 0 {
		f.monCapable, f.numRMID = true, n
		feats, _ := f.readString("info/L3_MON/mon_features")
		f.features = strings.Fields(feats)
		th, _ := f.readInt("info/L3_MON/max_threshold_occupancy")
		f.threshold = uint64(th)
	}
	topo := f.opts.Topology
	if topo == nil {
		topo, _ = topology.Read(f.h)
	}
	f.cacheSize = map[int]map[int]int64{}
	if topo != nil {
		for _, c := range topo.Caches {
			if c.Type == "Instruction" {
				continue
			}
			if f.cacheSize[c.Level] == nil {
				f.cacheSize[c.Level] = map[int]int64{}
			}
			f.cacheSize[c.Level][c.ID] = c.SizeBytes
		}
		f.online = topo.Online
		if !topo.Possible.IsEmpty() {
			f.nrCPUIDs = topo.Possible.List()[topo.Possible.Len()-1] + 1
		}
	}
	if f.online.IsEmpty() {
		if s, err := os.ReadFile(f.h.Path("/sys/devices/system/cpu/online")); err == nil {
			f.online, _ = cpuset.Parse(strings.TrimSpace(string(s)))
		}
	}
	if f.nrCPUIDs == 0 && !f.online.IsEmpty() {
		l := f.online.List()
		f.nrCPUIDs = l[len(l)-1] + 1
	}
	for _, s := range f.schemas {
		if s.name == "L3" || s.name == "L3DATA" || s.name == "MB" {
			f.monDomains = s.domains
			break
		}
	}
	if len(f.monDomains) == 0 && topo != nil {
		for _, c := range topo.CacheLevel(3) {
			f.monDomains = append(f.monDomains, c.ID)
		}
	}

	// Groups: the default one, then the control groups and monitoring groups
	// in the tree, each given the next CLOSID / RMID in name order.
	f.groups = map[string]*group{}
	f.tasks = map[int]*task{}
	f.exited = map[int]bool{}
	f.counters = map[int][]counter{}
	f.closids = make([]*group, max(f.numClosid, 1))
	if f.monCapable {
		f.rmidOwner = make([]*group, f.numRMID)
		for i := 1; i < f.numRMID; i++ {
			f.freeRMIDs = append(f.freeRMIDs, i)
		}
	}
	f.root = &group{rel: "", ctrl: true, mode: "shareable"}
	f.groups[""] = f.root
	f.closids[0] = f.root
	if f.monCapable {
		f.rmidOwner[0] = f.root
		f.counters[0] = make([]counter, len(f.monDomains))
	}
	if err := f.loadGroup(f.root); err != nil {
		return err
	}
	ents, err := os.ReadDir(f.h.Path(f.mount))
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.IsDir() || e.Name() == "info" || e.Name() == "mon_groups" || e.Name() == "mon_data" {
			continue
		}
		if len(f.schemas) == 0 {
			return fmt.Errorf("control group %s on a host without allocation", e.Name())
		}
		g := &group{rel: e.Name(), name: e.Name(), ctrl: true, mode: "shareable"}
		closid := slices.Index(f.closids, nil)
		if closid < 0 {
			return fmt.Errorf("more control groups than the %d CLOSIDs", f.numClosid)
		}
		g.closid = closid
		f.closids[closid] = g
		if err := f.assignRMID(g); err != nil {
			return fmt.Errorf("group %s: %w", g.name, err)
		}
		f.groups[g.rel] = g
		if err := f.loadGroup(g); err != nil {
			return err
		}
	}
	// The default group owns every online CPU nobody else claimed.
	others := cpuset.Set{}
	for _, g := range f.groups {
		if g.ctrl && g != f.root {
			others = others.Union(g.cpus)
		}
	}
	f.root.cpus = f.online.Difference(others)
	return nil
}

// tabularKernel reports whether the tree's kernel prints the tabular
// schemata (before 6.14).
func tabularKernel(h *host.Host) bool {
	b, err := os.ReadFile(h.Path("/proc/sys/kernel/osrelease"))
	if err != nil {
		return false
	}
	var major, minor int
	if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major < 6 || major == 6 && minor < 14
}

func (f *FS) assignRMID(g *group) error {
	if !f.monCapable {
		return nil
	}
	f.reclaimLimbo()
	if len(f.freeRMIDs) == 0 {
		if len(f.limbo) > 0 {
			return unix.EBUSY
		}
		return unix.ENOSPC
	}
	g.rmid = f.freeRMIDs[0]
	f.freeRMIDs = f.freeRMIDs[1:]
	f.rmidOwner[g.rmid] = g
	// A new group's MBM counts start from zero (the kernel takes its first
	// reading as the baseline); the occupancy is whatever lines the RMID's
	// previous owner left behind.
	cs := f.counters[g.rmid]
	if cs == nil {
		cs = make([]counter, len(f.monDomains))
	}
	for i := range cs {
		cs[i].total, cs[i].local, cs[i].unavailable = 0, 0, false
	}
	f.counters[g.rmid] = cs
	return nil
}

// freeRMID puts an RMID on the limbo list while lines tagged with it occupy
// more than max_threshold_occupancy in any domain, else back on the free list.
func (f *FS) freeRMID(rmid int) {
	if !f.monCapable || rmid == 0 {
		return
	}
	f.rmidOwner[rmid] = nil
	if f.busy(rmid) {
		f.limbo = append(f.limbo, rmid)
		return
	}
	f.freeRMIDs = append(f.freeRMIDs, rmid)
}

func (f *FS) busy(rmid int) bool {
	for _, c := range f.counters[rmid] {
		if c.occupancy > f.threshold {
			return true
		}
	}
	return false
}

func (f *FS) reclaimLimbo() {
	kept := f.limbo[:0]
	for _, r := range f.limbo {
		if f.busy(r) {
			kept = append(kept, r)
		} else {
			f.freeRMIDs = append(f.freeRMIDs, r)
		}
	}
	f.limbo = kept
}

// loadGroup reads a control group found in the tree and its monitoring groups.
func (f *FS) loadGroup(g *group) error {
	g.vals = map[string]map[int]uint64{}
	for _, s := range f.schemas {
		g.vals[s.name] = map[int]uint64{}
		for _, d := range s.domains {
			g.vals[s.name][d] = s.def()
		}
	}
	if text, err := f.readString(path.Join(g.rel, "schemata")); err == nil {
		sch, err := resctrl.ParseSchemata(text)
		if err != nil {
			return fmt.Errorf("%s: %w", g.rel, err)
		}
		for _, l := range sch {
			s := f.schema(l.Resource)
			if s == nil {
				continue
			}
			for _, d := range l.Domains {
				base := 10
				if !s.mb {
					base = 16
				}
				v, err := strconv.ParseUint(d.Value, base, 64)
				if err == nil && slices.Contains(s.domains, d.ID) {
					g.vals[s.name][d.ID] = v
				}
			}
		}
	}
	if m, err := f.readString(path.Join(g.rel, "mode")); err == nil && m != "" {
		g.mode = m
	}
	g.cpus = f.readCPUs(g.rel)
	for _, tid := range f.readTasks(g.rel) {
		f.tasks[tid] = &task{ctrl: g}
	}
	if !f.monCapable {
		return nil
	}
	ents, _ := os.ReadDir(f.h.Path(f.p(path.Join(g.rel, "mon_groups"))))
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		m := &group{rel: path.Join(g.rel, "mon_groups", e.Name()), name: e.Name(), parent: g, closid: g.closid}
		if err := f.assignRMID(m); err != nil {
			return fmt.Errorf("monitoring group %s: %w", m.rel, err)
		}
		g.mons = append(g.mons, m)
		f.groups[m.rel] = m
		m.cpus = f.readCPUs(m.rel).Intersect(g.cpus)
		for _, tid := range f.readTasks(m.rel) {
			f.tasks[tid] = &task{ctrl: g, mon: m}
		}
	}
	return nil
}

func (f *FS) readCPUs(rel string) cpuset.Set {
	if s, err := f.readString(path.Join(rel, "cpus_list")); err == nil {
		if set, err := cpuset.Parse(s); err == nil {
			return set
		}
	}
	if s, err := f.readString(path.Join(rel, "cpus")); err == nil && s != "" {
		if set, err := cpuset.ParseMask(s); err == nil {
			return set
		}
	}
	return cpuset.Set{}
}

func (f *FS) readTasks(rel string) []int {
	s, _ := f.readString(path.Join(rel, "tasks"))
	var out []int
	for _, w := range strings.Fields(s) {
		if n, err := strconv.Atoi(w); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

func (f *FS) schema(name string) *schema {
	for _, s := range f.schemas {
		if s.name == name {
			return s
		}
	}
	return nil
}

// rel maps a host path to the path inside the mount.
func (f *FS) rel(p string) (string, bool) {
	if p == f.mount {
		return "", true
	}
	r, ok := strings.CutPrefix(p, f.mount+"/")
	return r, ok
}

func (f *FS) cmd(format string, a ...any) { f.lastCmd = append(f.lastCmd, fmt.Sprintf(format, a...)) }

func (f *FS) fail(op, p string, errno unix.Errno) error {
	f.renderLastCmd()
	return &fs.PathError{Op: op, Path: f.h.Path(p), Err: errno}
}

// Mkdir implements host.Kernel: the directory was just made; make it a
// control group (in the root) or a monitoring group (in a mon_groups
// directory), or undo it with the kernel's error.
func (f *FS) Mkdir(h *host.Host, p string) error {
	rel, ok := f.rel(p)
	if !ok || rel == "" {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.mounted {
		return nil
	}
	f.lastCmd = nil
	parent, name := path.Split(rel)
	parent = strings.TrimSuffix(parent, "/")
	errno := f.mkdir(parent, name)
	if errno != 0 {
		os.RemoveAll(h.Path(p))
		return f.fail("mkdir", p, errno)
	}
	f.renderLastCmd()
	return nil
}

func (f *FS) mkdir(parent, name string) unix.Errno {
	if strings.Contains(name, "\n") {
		return unix.EINVAL
	}
	if parent == "" && len(f.schemas) > 0 {
		g := &group{rel: name, name: name, ctrl: true, mode: "shareable"}
		closid := slices.Index(f.closids, nil)
		if closid < 0 {
			f.cmd("Out of CLOSIDs")
			return unix.ENOSPC
		}
		g.closid = closid
		if err := f.assignRMID(g); err != nil {
			f.cmd("Out of RMIDs")
			return err.(unix.Errno)
		}
		if errno := f.initAlloc(g); errno != 0 {
			f.freeRMID(g.rmid)
			return errno
		}
		f.closids[closid] = g
		f.groups[g.rel] = g
		f.renderGroup(g)
		f.renderInfo()
		return 0
	}
	ctrlRel, ok := strings.CutSuffix(parent, "mon_groups")
	ctrlRel = strings.TrimSuffix(ctrlRel, "/")
	ctrl := f.groups[ctrlRel]
	if !f.monCapable || !ok || name == "mon_groups" || ctrl == nil || !ctrl.ctrl {
		return unix.EPERM
	}
	m := &group{rel: path.Join(parent, name), name: name, parent: ctrl, closid: ctrl.closid}
	if err := f.assignRMID(m); err != nil {
		f.cmd("Out of RMIDs")
		return err.(unix.Errno)
	}
	ctrl.mons = append(ctrl.mons, m)
	f.groups[m.rel] = m
	f.renderGroup(m)
	return 0
}

// initAlloc gives a new control group the kernel's initial allocation
// (rdtgroup_init_alloc): for each cache domain, every bit that is unused or
// used by shareable groups (never an exclusive group's), cut to its first
// contiguous block; the maximum bandwidth for MB.
func (f *FS) initAlloc(g *group) unix.Errno {
	g.vals = map[string]map[int]uint64{}
	for _, s := range f.schemas {
		g.vals[s.name] = map[int]uint64{}
		for _, d := range s.domains {
			if s.mb {
				g.vals[s.name][d] = s.maxBW
				continue
			}
			newCtrl, used := s.shareable, s.shareable
			for _, o := range f.closids {
				if o == nil || o == g {
					continue
				}
				v := o.vals[s.name][d] | f.peerValue(o, s, d)
				used |= v
				if o.mode == "shareable" {
					newCtrl |= v
				}
			}
			newCtrl |= ^used & s.cbmMask
			newCtrl = firstBlock(newCtrl)
			if bits.OnesCount64(newCtrl) < s.minBits {
				f.cmd("No space on %s:%d", s.name, d)
				return unix.ENOSPC
			}
			g.vals[s.name][d] = newCtrl
		}
	}
	return 0
}

// peerValue is the CDP peer's value (L3CODE for L3DATA and back), which
// shares the hardware.
func (f *FS) peerValue(g *group, s *schema, d int) uint64 {
	var peer string
	switch {
	case strings.HasSuffix(s.name, "CODE"):
		peer = strings.TrimSuffix(s.name, "CODE") + "DATA"
	case strings.HasSuffix(s.name, "DATA"):
		peer = strings.TrimSuffix(s.name, "DATA") + "CODE"
	default:
		return 0
	}
	return g.vals[peer][d]
}

func firstBlock(v uint64) uint64 {
	if v == 0 {
		return 0
	}
	lo := bits.TrailingZeros64(v)
	run := bits.TrailingZeros64(^(v >> lo))
	return (uint64(1)<<run - 1) << lo
}

// Remove implements host.Kernel: rmdir of a group gives its tasks and CPUs
// to its parent (the default group for a control group, whose monitoring
// groups go with it) and frees its IDs; nothing else under the mount can be
// removed.
func (f *FS) Remove(h *host.Host, p string) (bool, error) {
	rel, ok := f.rel(p)
	if !ok {
		return false, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.mounted {
		return false, nil
	}
	f.lastCmd = nil
	g := f.groups[rel]
	if g == nil || g == f.root {
		if _, err := os.Lstat(h.Path(p)); err != nil {
			return true, f.fail("remove", p, unix.ENOENT)
		}
		return true, f.fail("remove", p, unix.EPERM)
	}
	if g.ctrl {
		for _, t := range f.tasks {
			if t.ctrl == g {
				t.ctrl, t.mon = f.root, nil
			}
		}
		f.root.cpus = f.root.cpus.Union(g.cpus)
		for _, m := range g.mons {
			f.freeRMID(m.rmid)
			delete(f.groups, m.rel)
		}
		f.freeRMID(g.rmid)
		f.closids[g.closid] = nil
		delete(f.groups, g.rel)
		if err := os.RemoveAll(h.Path(p)); err != nil {
			return true, err
		}
		f.renderTasksAndCPUs(f.root)
		f.renderInfo()
	} else {
		par := g.parent
		for _, t := range f.tasks {
			if t.mon == g {
				t.mon = nil
			}
		}
		par.cpus = par.cpus.Union(g.cpus)
		par.mons = slices.DeleteFunc(par.mons, func(m *group) bool { return m == g })
		f.freeRMID(g.rmid)
		delete(f.groups, g.rel)
		if err := os.RemoveAll(h.Path(p)); err != nil {
			return true, err
		}
		f.renderTasksAndCPUs(par)
		f.renderMonData(par)
	}
	f.renderLastCmd()
	return true, nil
}

// Write implements host.Kernel for the writable files: tasks, schemata,
// cpus, cpus_list, mode and info/L3_MON/max_threshold_occupancy. Every
// other file under the mount is read-only (EACCES, as kernfs answers).
func (f *FS) Write(h *host.Host, p string, data []byte) (bool, error) {
	rel, ok := f.rel(p)
	if !ok {
		return false, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.mounted {
		return false, nil
	}
	if _, err := os.Stat(h.Path(p)); err != nil {
		return true, &fs.PathError{Op: "open", Path: h.Path(p), Err: unix.ENOENT}
	}
	dir, file := path.Split(rel)
	g := f.groups[strings.TrimSuffix(dir, "/")]
	if rel == "info/L3_MON/max_threshold_occupancy" {
		return true, f.writeThreshold(p, data)
	}
	if g == nil {
		return true, &fs.PathError{Op: "open", Path: h.Path(p), Err: unix.EACCES}
	}
	f.lastCmd = nil
	var errno unix.Errno
	switch file {
	case "tasks":
		errno = f.writeTasks(g, string(data))
	case "schemata":
		if !g.ctrl {
			return true, &fs.PathError{Op: "open", Path: h.Path(p), Err: unix.EACCES}
		}
		errno = f.writeSchemata(g, data)
	case "cpus", "cpus_list":
		errno = f.writeCPUs(g, string(data), file == "cpus_list")
	case "mode":
		if !g.ctrl {
			return true, &fs.PathError{Op: "open", Path: h.Path(p), Err: unix.EACCES}
		}
		errno = f.writeMode(g, data)
	default:
		return true, &fs.PathError{Op: "open", Path: h.Path(p), Err: unix.EACCES}
	}
	if errno != 0 {
		return true, f.fail("write", p, errno)
	}
	f.renderLastCmd()
	return true, nil
}

func (f *FS) alive(tid int) bool {
	if f.exited[tid] {
		return false
	}
	return f.opts.TaskExists == nil || f.opts.TaskExists(tid)
}

// writeTasks moves the listed threads (comma separated, as 6.2+ accepts;
// one per write works everywhere) into g, stopping at the first failure as
// the kernel does.
func (f *FS) writeTasks(g *group, s string) unix.Errno {
	touched := map[*group]bool{g: true}
	defer func() {
		for t := range touched {
			f.renderTasks(t)
		}
	}()
	for _, w := range strings.Split(strings.TrimRight(s, "\n"), ",") {
		w = strings.TrimSpace(w)
		if w == "" {
			break
		}
		tid, err := strconv.ParseInt(w, 0, 32)
		if err != nil {
			f.cmd("Task list parsing error pid %s", w)
			return unix.EINVAL
		}
		if tid <= 0 {
			// pid 0 means "the writer itself", which the emulation has not.
			f.cmd("Invalid pid %d", tid)
			return unix.EINVAL
		}
		if !f.alive(int(tid)) {
			f.cmd("No task %d", tid)
			f.cmd("Error while processing task %d", tid)
			return unix.ESRCH
		}
		t := f.tasks[int(tid)]
		if t == nil {
			t = &task{ctrl: f.root}
			f.tasks[int(tid)] = t
		}
		touched[t.ctrl] = true
		if t.mon != nil {
			touched[t.mon] = true
		}
		if g.ctrl {
			t.ctrl, t.mon = g, nil
			continue
		}
		if t.ctrl != g.parent {
			f.cmd("Can't move task to different control group")
			f.cmd("Error while processing task %d", tid)
			return unix.EINVAL
		}
		t.mon = g
	}
	return 0
}

// writeSchemata parses and validates every line first and applies nothing
// unless all are valid, like rdtgroup_schemata_write(): a trailing newline
// is required, only known resources and domains, each domain once.
func (f *FS) writeSchemata(g *group, data []byte) unix.Errno {
	if len(data) == 0 || data[len(data)-1] != '\n' {
		return unix.EINVAL
	}
	staged := map[string]map[int]uint64{}
	for _, tok := range strings.Split(string(data[:len(data)-1]), "\n") {
		resname, vals, ok := strings.Cut(tok, ":")
		resname = strings.TrimSpace(resname)
		if !ok {
			f.cmd("Missing ':'")
			return unix.EINVAL
		}
		if vals == "" {
			f.cmd("Missing '%s' value", resname)
			return unix.EINVAL
		}
		s := f.schema(resname)
		if s == nil || g.closid >= s.numClosid {
			f.cmd("Unknown or unsupported resource name '%s'", resname)
			return unix.EINVAL
		}
		if staged[s.name] == nil {
			staged[s.name] = map[int]uint64{}
		}
		for _, dom := range strings.Split(vals, ";") {
			if dom == "" {
				break // a trailing ';' ends the line
			}
			id, val, ok := strings.Cut(dom, "=")
			d, err := strconv.ParseUint(id, 10, 32)
			if !ok || err != nil {
				f.cmd("Missing '=' or non-numeric domain")
				return unix.EINVAL
			}
			if !slices.Contains(s.domains, int(d)) {
				return unix.EINVAL // the kernel says nothing for an unknown domain
			}
			if _, dup := staged[s.name][int(d)]; dup {
				f.cmd("Duplicate domain %d", d)
				return unix.EINVAL
			}
			v, errno := f.parseValue(g, s, int(d), strings.TrimSpace(val))
			if errno != 0 {
				return errno
			}
			staged[s.name][int(d)] = v
		}
	}
	for name, doms := range staged {
		for d, v := range doms {
			g.vals[name][d] = v
		}
	}
	f.renderSchemata(g)
	f.renderInfo()
	return 0
}

func (f *FS) parseValue(g *group, s *schema, d int, val string) (uint64, unix.Errno) {
	if s.mb {
		if !s.linear && !f.amd && !s.mbps {
			f.cmd("No support for non-linear MB domains")
			return 0, unix.EINVAL
		}
		bw, err := strconv.ParseUint(val, 10, 32)
		if err != nil {
			f.cmd("Invalid MB value %s", val)
			return 0, unix.EINVAL
		}
		if s.mbps {
			return bw, 0
		}
		if bw < uint64(s.minBW) || bw > s.maxBW {
			f.cmd("MB value %d out of range [%d,%d]", bw, s.minBW, s.maxBW)
			return 0, unix.EINVAL
		}
		if gran := uint64(s.gran); gran > 1 {
			bw = (bw + gran - 1) / gran * gran
		}
		return bw, 0
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimPrefix(val, "0x"), "0X"), 16, 64)
	if err != nil {
		f.cmd("Non-hex character in the mask %s", val)
		return 0, unix.EINVAL
	}
	if (s.minBits > 0 && v == 0) || v > s.cbmMask {
		f.cmd("Mask out of range")
		return 0, unix.EINVAL
	}
	if v != 0 {
		first := bits.TrailingZeros64(v)
		run := bits.TrailingZeros64(^(v >> first))
		if !s.sparse && v>>(first+run) != 0 {
			f.cmd("The mask %x has non-consecutive 1-bits", v)
			return 0, unix.EINVAL
		}
		if run < s.minBits {
			f.cmd("Need at least %d bits in the mask", s.minBits)
			return 0, unix.EINVAL
		}
	}
	for _, o := range f.closids {
		if o == nil || o == g || (o.vals[s.name][d]|f.peerValue(o, s, d))&v == 0 {
			continue
		}
		if o.mode == "exclusive" {
			f.cmd("Overlaps with exclusive group")
			return 0, unix.EINVAL
		}
		if g.mode == "exclusive" {
			f.cmd("Overlaps with other group")
			return 0, unix.EINVAL
		}
	}
	return v, 0
}

func (f *FS) writeCPUs(g *group, s string, list bool) unix.Errno {
	s = strings.TrimSpace(s)
	var set cpuset.Set
	var err error
	switch {
	case s == "":
	case list:
		set, err = cpuset.Parse(s)
	default:
		set, err = cpuset.ParseMask(s)
	}
	if err != nil {
		f.cmd("Bad CPU list/mask")
		return unix.EINVAL
	}
	if !set.IsSubsetOf(f.online) {
		f.cmd("Can only assign online CPUs")
		return unix.EINVAL
	}
	touched := []*group{g}
	if g.ctrl {
		dropped := g.cpus.Difference(set)
		if !dropped.IsEmpty() {
			if g == f.root {
				f.cmd("Can't drop CPUs from default group")
				return unix.EINVAL
			}
			f.root.cpus = f.root.cpus.Union(dropped)
			touched = append(touched, f.root)
		}
		added := set.Difference(g.cpus)
		if !added.IsEmpty() {
			for _, o := range f.groups {
				if o != g && !o.cpus.Intersect(added).IsEmpty() {
					o.cpus = o.cpus.Difference(added)
					touched = append(touched, o)
				}
			}
		}
		g.cpus = set
		for _, m := range g.mons {
			m.cpus = cpuset.Set{}
			touched = append(touched, m)
		}
	} else {
		par := g.parent
		if !set.IsSubsetOf(par.cpus) {
			f.cmd("Can only add CPUs to mongroup that belong to parent")
			return unix.EINVAL
		}
		par.cpus = par.cpus.Union(g.cpus.Difference(set))
		for _, m := range par.mons {
			if m != g {
				m.cpus = m.cpus.Difference(set)
				touched = append(touched, m)
			}
		}
		g.cpus = set
	}
	for _, t := range touched {
		f.renderCPUs(t)
	}
	return 0
}

func (f *FS) writeMode(g *group, data []byte) unix.Errno {
	if len(data) == 0 || data[len(data)-1] != '\n' {
		return unix.EINVAL
	}
	switch m := string(data[:len(data)-1]); m {
	case g.mode:
	case "shareable":
		g.mode = m
	case "exclusive":
		hasCache := false
		for _, s := range f.schemas {
			if s.mb {
				continue
			}
			hasCache = true
			for _, d := range s.domains {
				v := g.vals[s.name][d]
				if v&s.shareable != 0 {
					f.cmd("Schemata overlaps")
					return unix.EINVAL
				}
				for _, o := range f.closids {
					if o != nil && o != g && (o.vals[s.name][d]|f.peerValue(o, s, d))&v != 0 {
						f.cmd("Schemata overlaps")
						return unix.EINVAL
					}
				}
			}
		}
		if !hasCache {
			f.cmd("Cannot be exclusive without CAT/CDP")
			return unix.EINVAL
		}
		g.mode = m
	default:
		f.cmd("Unknown or unsupported mode")
		return unix.EINVAL
	}
	f.writeFile(path.Join(g.rel, "mode"), g.mode+"\n")
	f.renderInfo()
	return 0
}

func (f *FS) writeThreshold(p string, data []byte) error {
	v, err := strconv.ParseUint(strings.TrimSpace(string(data)), 0, 32)
	if err != nil || !f.monCapable {
		return &fs.PathError{Op: "write", Path: f.h.Path(p), Err: unix.EINVAL}
	}
	f.threshold = v
	f.writeFile("info/L3_MON/max_threshold_occupancy", strconv.FormatUint(v, 10)+"\n")
	return nil
}

// ---- rendering ------------------------------------------------------------

func (f *FS) writeFile(rel, content string) {
	p := f.h.Path(f.p(rel))
	os.MkdirAll(path.Dir(p), 0o755)
	os.WriteFile(p, []byte(content), 0o644)
}

func (f *FS) renderAll() {
	for _, g := range f.sortedGroups() {
		f.renderGroup(g)
	}
	f.renderInfo()
	f.renderLastCmd()
}

func (f *FS) sortedGroups() []*group {
	out := make([]*group, 0, len(f.groups))
	for _, g := range f.groups {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rel < out[j].rel })
	return out
}

func (f *FS) renderGroup(g *group) {
	if g.ctrl {
		f.renderSchemata(g)
		f.writeFile(path.Join(g.rel, "mode"), g.mode+"\n")
		if f.monCapable {
			os.MkdirAll(f.h.Path(f.p(path.Join(g.rel, "mon_groups"))), 0o755)
		}
	}
	f.renderTasksAndCPUs(g)
	f.renderMonData(g)
}

func (f *FS) renderTasksAndCPUs(g *group) {
	f.renderTasks(g)
	f.renderCPUs(g)
}

func (f *FS) renderTasks(g *group) {
	var tids []int
	for tid, t := range f.tasks {
		if t.ctrl == g || t.mon == g {
			tids = append(tids, tid)
		}
	}
	slices.Sort(tids)
	var b strings.Builder
	for _, t := range tids {
		b.WriteString(strconv.Itoa(t))
		b.WriteByte('\n')
	}
	f.writeFile(path.Join(g.rel, "tasks"), b.String())
}

func (f *FS) renderCPUs(g *group) {
	f.writeFile(path.Join(g.rel, "cpus"), cpuMask(g.cpus, f.nrCPUIDs)+"\n")
	f.writeFile(path.Join(g.rel, "cpus_list"), g.cpus.String()+"\n")
}

// cpuMask prints a CPU set as the kernel's %*pb does for nbits CPUs: 32-bit
// words, most significant first, comma separated, the first one only as wide
// as its bits need.
func cpuMask(s cpuset.Set, nbits int) string {
	if nbits <= 0 {
		nbits = 1
	}
	words := (nbits + 31) / 32
	w := make([]uint32, words)
	for _, c := range s.List() {
		if c < nbits {
			w[c/32] |= 1 << (c % 32)
		}
	}
	var b strings.Builder
	for i := words - 1; i >= 0; i-- {
		width := 8
		if i == words-1 {
			width = (nbits - 32*(words-1) + 3) / 4
		}
		if i != words-1 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%0*x", width, w[i])
	}
	return b.String()
}

func (f *FS) renderSchemata(g *group) {
	var sch, size strings.Builder
	for _, s := range f.schemas {
		fmt.Fprintf(&sch, "%*s:", f.nameWidth, s.name)
		fmt.Fprintf(&size, "%*s:", f.nameWidth, s.name)
		for i, d := range s.domains {
			if i > 0 {
				sch.WriteByte(';')
				size.WriteByte(';')
			}
			v := g.vals[s.name][d]
			switch {
			case s.mb && f.dataWidth > 0:
				fmt.Fprintf(&sch, "%d=%*d", d, f.dataWidth, v)
			case s.mb:
				fmt.Fprintf(&sch, "%d=%d", d, v)
			case f.dataWidth > 0:
				fmt.Fprintf(&sch, "%d=%0*x", d, f.dataWidth, v)
			default:
				fmt.Fprintf(&sch, "%d=%x", d, v)
			}
			sz := v
			if !s.mb {
				sz = uint64(f.cacheSize[s.level][d]) / uint64(s.cbmLen) * uint64(bits.OnesCount64(v))
			}
			fmt.Fprintf(&size, "%d=%d", d, sz)
		}
		sch.WriteByte('\n')
		size.WriteByte('\n')
	}
	f.writeFile(path.Join(g.rel, "schemata"), sch.String())
	f.writeFile(path.Join(g.rel, "size"), size.String())
}

// renderMonData writes a group's mon_data: a monitoring group's own RMID,
// a control group's own plus its monitoring groups'.
func (f *FS) renderMonData(g *group) {
	if !f.monCapable {
		return
	}
	rmids := []int{g.rmid}
	if g.ctrl {
		for _, m := range g.mons {
			rmids = append(rmids, m.rmid)
		}
	}
	for i, d := range f.monDomains {
		var sum counter
		for _, r := range rmids {
			c := f.counters[r][i]
			sum.occupancy += c.occupancy
			sum.total += c.total
			sum.local += c.local
			sum.unavailable = sum.unavailable || c.unavailable
		}
		dir := path.Join(g.rel, "mon_data", fmt.Sprintf("mon_L3_%02d", d))
		for _, feat := range f.features {
			var v uint64
			switch feat {
			case resctrl.LLCOccupancy:
				v = sum.occupancy
			case resctrl.MBMTotalBytes:
				v = sum.total
			case resctrl.MBMLocalBytes:
				v = sum.local
			default:
				continue
			}
			text := strconv.FormatUint(v, 10)
			if sum.unavailable && feat != resctrl.LLCOccupancy {
				text = "Unavailable"
			}
			f.writeFile(path.Join(dir, feat), text+"\n")
		}
	}
}

func (f *FS) renderInfo() {
	for _, s := range f.schemas {
		if s.mb {
			continue
		}
		var b strings.Builder
		for i, d := range s.domains {
			if i > 0 {
				b.WriteByte(';')
			}
			var sw, excl uint64
			for _, o := range f.closids {
				if o == nil {
					continue
				}
				switch o.mode {
				case "shareable":
					sw |= o.vals[s.name][d]
				case "exclusive":
					excl |= o.vals[s.name][d]
				}
			}
			fmt.Fprintf(&b, "%d=", d)
			for bit := s.cbmLen - 1; bit >= 0; bit-- {
				m := uint64(1) << bit
				hw, swb := s.shareable&m != 0, sw&m != 0
				switch {
				case hw && swb:
					b.WriteByte('X')
				case hw:
					b.WriteByte('H')
				case swb:
					b.WriteByte('S')
				case excl&m != 0:
					b.WriteByte('E')
				default:
					b.WriteByte('0')
				}
			}
		}
		b.WriteByte('\n')
		f.writeFile(path.Join("info", s.name, "bit_usage"), b.String())
	}
}

func (f *FS) renderLastCmd() {
	if len(f.lastCmd) == 0 {
		f.writeFile("info/last_cmd_status", "ok\n")
		return
	}
	f.writeFile("info/last_cmd_status", strings.Join(f.lastCmd, "\n")+"\n")
}

// ---- the simulator's side ---------------------------------------------------

// TaskInfo is where a thread is: its control group and monitoring group
// (paths relative to the mount, "" for the default group and for none) and
// the IDs the hardware sees.
type TaskInfo struct {
	Ctrl, Mon    string
	CLOSID, RMID int
}

// Task says which groups a thread is in. A live thread nobody moved is in
// the default group; ok is false for a thread that exited.
func (f *FS) Task(tid int) (TaskInfo, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.alive(tid) {
		return TaskInfo{}, false
	}
	t := f.tasks[tid]
	if t == nil {
		return TaskInfo{CLOSID: 0, RMID: 0}, true
	}
	ti := TaskInfo{Ctrl: t.ctrl.rel, CLOSID: t.ctrl.closid, RMID: t.ctrl.rmid}
	if t.mon != nil {
		ti.Mon, ti.RMID = t.mon.rel, t.mon.rmid
	}
	return ti, true
}

// Value is the control value (cache mask or MB value) class closid has for
// a resource in a domain.
func (f *FS) Value(closid int, resource string, domain int) (uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if closid < 0 || closid >= len(f.closids) || f.closids[closid] == nil {
		return 0, false
	}
	v, ok := f.closids[closid].vals[resource][domain]
	return v, ok
}

// GroupIDs returns a group's CLOSID and RMID (path relative to the mount).
func (f *FS) GroupIDs(rel string) (closid, rmid int, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.groups[rel]
	if g == nil {
		return 0, 0, false
	}
	return g.closid, g.rmid, true
}

// Groups lists every group's path relative to the mount, sorted ("" first).
func (f *FS) Groups() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, g := range f.sortedGroups() {
		out = append(out, g.rel)
	}
	return out
}

// RMIDs reports how many RMIDs are free and how many wait in limbo.
func (f *FS) RMIDs() (free, limbo int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reclaimLimbo()
	return len(f.freeRMIDs), len(f.limbo)
}

// Sample is what one RMID did in one L3 domain over a simulated interval:
// the cache it occupies now and the bytes it moved to memory (total) and to
// its local node's memory (local) since the last sample.
type Sample struct {
	RMID, Domain           int
	OccupancyBytes         uint64
	TotalBytes, LocalBytes uint64 // added to the running counters
}

// Account applies samples and re-renders the mon_data files that show them.
func (f *FS) Account(samples ...Sample) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	dirty := map[*group]bool{}
	for _, s := range samples {
		i := slices.Index(f.monDomains, s.Domain)
		cs := f.counters[s.RMID]
		if i < 0 || cs == nil {
			return fmt.Errorf("resctrlfs: no RMID %d or L3 domain %d", s.RMID, s.Domain)
		}
		c := &cs[i]
		c.occupancy = s.OccupancyBytes
		c.total += s.TotalBytes
		c.local += s.LocalBytes
		if s.RMID < len(f.rmidOwner) {
			if g := f.rmidOwner[s.RMID]; g != nil {
				dirty[g] = true
				if g.parent != nil {
					dirty[g.parent] = true
				}
			}
		}
	}
	for g := range dirty {
		f.renderMonData(g)
	}
	return nil
}

// SetUnavailable makes an RMID's bandwidth counters in a domain read
// "Unavailable" (as after a bandwidth-event reconfiguration) or valid again.
func (f *FS) SetUnavailable(rmid, domain int, unavailable bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.Index(f.monDomains, domain)
	if i < 0 || f.counters[rmid] == nil {
		return
	}
	f.counters[rmid][i].unavailable = unavailable
	if rmid < len(f.rmidOwner) {
		if g := f.rmidOwner[rmid]; g != nil {
			f.renderMonData(g)
			if g.parent != nil {
				f.renderMonData(g.parent)
			}
		}
	}
}

// Exit ends threads: they leave every group, and later writes of their IDs
// fail with ESRCH.
func (f *FS) Exit(tids ...int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	touched := map[*group]bool{}
	for _, tid := range tids {
		f.exited[tid] = true
		if t := f.tasks[tid]; t != nil {
			touched[t.ctrl] = true
			if t.mon != nil {
				touched[t.mon] = true
			}
			delete(f.tasks, tid)
		}
	}
	for g := range touched {
		f.renderTasks(g)
	}
}
