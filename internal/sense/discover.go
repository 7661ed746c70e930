package sense

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/systemdunit"
)

// DefaultMaxDepth bounds how deep below the hierarchy root CgroupDiscoverer
// looks for tenants, and how deep below a tenant it looks for threads.
const DefaultMaxDepth = 8

const onlineCPUsFile = "/sys/devices/system/cpu/online"

// CgroupDiscoverer finds tenants by walking the cgroup hierarchy that holds
// the cpu controller: the one crosstalk throttles through, so every tenant it
// reports can be acted on.
//
// The walk is cheap enough to run every interval: it lists only directories
// that can lead to a tenant (systemd slices, libvirt partitions, the
// cgroupfs parents the runtimes use, prefixes of the configured globs), one
// ReadDir per directory and no Stat, and it reads files only of the tenants
// it finds. A matched cgroup is a tenant and is not searched for further
// tenants: a pod's containers and a VM's vcpuN/emulator cgroups belong to it,
// and their threads are counted as the tenant's.
type CgroupDiscoverer struct {
	Host   *host.Host
	Layout cgroup.Layout
	// Globs are extra cgroup path patterns (path.Match syntax per component,
	// relative to the hierarchy root, e.g. "/crosstalk-lab/*/*/*" or
	// "/batch.slice/*.scope") whose matches are tenants of kind "cgroup".
	// They are tried after the built-in patterns, so a cgroup both match
	// keeps its built-in kind, and nothing below a built-in tenant matches.
	Globs []string
	// Builtin enables the built-in runtime patterns (libvirt VMs, Kubernetes
	// pods, docker, nerdctl/containerd and podman containers). NewCgroupDiscoverer
	// sets it; a zero CgroupDiscoverer has it off and finds only Globs.
	Builtin bool
	// MaxDepth bounds the walk: tenants are looked for at most MaxDepth
	// levels below the hierarchy root, and threads at most MaxDepth levels
	// below a tenant. 0 means DefaultMaxDepth.
	MaxDepth int

	// DetailEvery makes Discover re-read a known tenant's threads and CPUs
	// only once every DetailEvery calls (new tenants are read at once, within
	// MaxNew). The walk that finds tenants coming and going runs every call;
	// threads and cpusets change far less often, and reading them is most of
	// the cost with hundreds of tenants. Each tenant has its own turn in the
	// cycle (by a hash of its ID), so a call re-reads about 1/DetailEvery of
	// the tenants rather than all of them every DetailEvery calls. 0 or 1
	// reads them every call.
	DetailEvery int
	// MaxNew bounds how many tenants not seen before a call reads (their
	// threads and CPUs); the others are left out of that call's result and
	// read by the next calls, in the walk's order. A tenant that appears is
	// read at once unless a thousand appear together, as when the agent
	// starts on a full host: then the first reads spread over a few
	// intervals instead of making one interval cost them all. 0: no bound.
	MaxNew int

	// OnGone, when set, is called with the cgroup of each tenant that is
	// gone since the previous call (within Discover, so keep it short): the
	// agent closes the files it kept open for it.
	OnGone func(cgroup string)

	// listed, when set (tests only), is called after each successful
	// directory listing with the host path listed, so a test can remove a
	// cgroup between listing and reading, as a tenant going away does.
	listed func(dir string)

	mu    sync.Mutex
	calls int
	cache map[string]cachedDetail
	buf   []byte // getdents scratch, reused between listings
	// deferred is how many new tenants the last call left for later (MaxNew).
	deferred int
}

// Deferred is how many tenants the last Discover call found but left for a
// later call, MaxNew new ones having been read already.
func (d *CgroupDiscoverer) Deferred() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.deferred
}

// cachedDetail is a tenant's threads and CPUs as last read.
type cachedDetail struct {
	threads []int
	cpus    cpuset.Set
	read    int // the Discover call that read them
}

// NewCgroupDiscoverer returns a discoverer with the built-in patterns on and
// MaxDepth at its default, after checking every glob.
func NewCgroupDiscoverer(h *host.Host, l cgroup.Layout, globs []string) (*CgroupDiscoverer, error) {
	if h == nil {
		return nil, errors.New("cgroup discovery: no host")
	}
	if _, err := compileGlobs(globs, DefaultMaxDepth); err != nil {
		return nil, err
	}
	return &CgroupDiscoverer{Host: h, Layout: l, Globs: slices.Clone(globs), Builtin: true, MaxDepth: DefaultMaxDepth}, nil
}

// compileGlobs splits each glob into its components and checks them: a
// pattern must name a cgroup below the root, each component must be a valid
// path.Match pattern, and it must not be deeper than the walk goes.
func compileGlobs(globs []string, maxDepth int) ([][]string, error) {
	out := make([][]string, 0, len(globs))
	for _, g := range globs {
		parts, err := compileGlob(g, maxDepth)
		if err != nil {
			return nil, fmt.Errorf("cgroup glob %q: %w", g, err)
		}
		out = append(out, parts)
	}
	return out, nil
}

func compileGlob(g string, maxDepth int) ([]string, error) {
	s := strings.TrimSpace(g)
	if s == "" {
		return nil, errors.New("empty pattern")
	}
	for _, c := range strings.Split(strings.Trim(s, "/"), "/") {
		if c == ".." {
			return nil, errors.New(`".." is not allowed`)
		}
	}
	s = path.Clean("/" + s)
	if s == "/" {
		return nil, errors.New("matches the hierarchy root, which is not a tenant")
	}
	parts := strings.Split(s[1:], "/")
	for _, p := range parts {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("component %q: %w", p, err)
		}
	}
	if len(parts) > maxDepth {
		return nil, fmt.Errorf("%d levels deep, more than the walk's limit of %d", len(parts), maxDepth)
	}
	return parts, nil
}

// Discover lists the tenants present now, sorted by ID. A cgroup that
// vanishes while it is read is left out without error; any other read error
// is returned (joined) together with every tenant found, so the caller can
// log it and go on.
// The walk reads only cgroupfs, which does not block, so it does not consult
// ctx.
func (d *CgroupDiscoverer) Discover(_ context.Context) ([]Tenant, error) {
	if d.Host == nil {
		return nil, errors.New("cgroup discovery: no host")
	}
	maxDepth := d.maxDepth()
	globs, err := compileGlobs(d.Globs, maxDepth)
	if err != nil {
		return nil, err
	}
	w := cgroupWalk{d: d, h: d.Host, globs: globs, maxDepth: maxDepth}
	if err := w.threadsIn(d.Layout); err != nil {
		return nil, err
	}
	switch {
	case d.Layout.V1["cpuset"] != "":
		w.cpusetRoot, w.effectiveFile = d.Layout.V1["cpuset"], "cpuset.effective_cpus"
	case d.Layout.HasV2Controller("cpuset"):
		w.cpusetRoot, w.effectiveFile, w.cpusetV2 = d.Layout.V2, "cpuset.cpus.effective", true
	}
	var live []int
	if len(globs) > 0 {
		live = make([]int, len(globs))
		for i := range live {
			live[i] = i
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ents, err := w.list("")
	if err != nil {
		// The root itself is no tenant that came and went: always an error.
		return nil, fmt.Errorf("cgroup discovery: %w", err)
	}
	d.calls++
	if d.cache == nil {
		d.cache = map[string]cachedDetail{}
	}
	w.walk("", nil, ents, live)
	d.deferred = w.deferred
	slices.SortFunc(w.tenants, func(a, b Tenant) int { return strings.Compare(a.ID, b.ID) })
	// Forget tenants that are gone.
	seen := make(map[string]bool, len(w.tenants))
	for _, t := range w.tenants {
		seen[t.ID] = true
	}
	for id := range d.cache {
		if !seen[id] {
			delete(d.cache, id)
			if d.OnGone != nil {
				d.OnGone(id) // a tenant's ID is its cgroup
			}
		}
	}
	return w.tenants, errors.Join(w.errs...)
}

// cgroupWalk is the state of one Discover call.
type cgroupWalk struct {
	d           *CgroupDiscoverer
	h           *host.Host
	root        string // mount point of the hierarchy with the cpu controller
	threadsFile string // "cgroup.threads" (v2) or "tasks" (v1)
	cpusetRoot  string // mount point holding the cpuset controller, "" if none
	// effectiveFile is "cpuset.effective_cpus" (v1) or "cpuset.cpus.effective" (v2).
	effectiveFile string
	cpusetV2      bool
	ancestorCpus  map[string]cpuset.Set // v2: CPUs of the tenants' ancestors, "" for the root
	globs         [][]string
	maxDepth      int

	online     cpuset.Set
	onlineRead bool

	tenants  []Tenant
	errs     []error
	newRead  int // tenants not seen before whose details this call read
	deferred int // new tenants left for a later call (MaxNew)
}

// list returns the subdirectories of the cgroup directory rel (below the
// hierarchy root).
func (w *cgroupWalk) list(rel string) ([]string, error) {
	dir := w.root + rel
	if w.d.buf == nil {
		w.d.buf = make([]byte, 16<<10)
	}
	names, err := w.h.SubDirs(dir, w.d.buf)
	if err == nil && w.d.listed != nil {
		w.d.listed(dir)
	}
	return names, err
}

// walk looks at the subdirectories of rel, whose ancestors' names are anc
// (root first) and which matches the first len(anc) components of the
// globs listed in live.
func (w *cgroupWalk) walk(rel string, anc []string, names []string, live []int) {
	depth := len(anc) + 1 // depth of the children
	for _, name := range names {
		child := rel + "/" + name
		var childLive []int
		for _, gi := range live {
			if ok, _ := path.Match(w.globs[gi][depth-1], name); ok {
				childLive = append(childLive, gi)
			}
		}
		if w.d.Builtin {
			if kind, tname, ok := matchBuiltin(anc, name); ok {
				w.add(child, kind, tname)
				continue
			}
		}
		globMatch, globPrefix := false, false
		for _, gi := range childLive {
			if len(w.globs[gi]) == depth {
				globMatch = true
			} else {
				globPrefix = true
			}
		}
		if globMatch {
			w.add(child, KindCgroup, name)
			continue
		}
		if depth >= w.maxDepth || !(globPrefix || (w.d.Builtin && descendBuiltin(anc, name))) {
			continue
		}
		sub, err := w.list(child)
		if err != nil {
			w.fail(err)
			continue
		}
		w.walk(child, append(anc, name), sub, childLive)
	}
}

// maxDepth is MaxDepth, or DefaultMaxDepth where it is not set.
func (d *CgroupDiscoverer) maxDepth() int {
	if d.MaxDepth <= 0 {
		return DefaultMaxDepth
	}
	return d.MaxDepth
}

// threadsIn sets where the walk reads threads: the hierarchy with the cpu
// controller.
func (w *cgroupWalk) threadsIn(l cgroup.Layout) error {
	switch l.CPUControl() {
	case "v2":
		w.root, w.threadsFile = l.V2, "cgroup.threads"
	case "v1":
		w.root, w.threadsFile = l.V1["cpu"], "tasks"
	default:
		return fmt.Errorf("cgroup discovery: no cgroup hierarchy with the cpu controller (layout %q)", l.Mode)
	}
	return nil
}

// Threads reads the threads of t's cgroup and its descendants now, sorted,
// rather than the list Discover kept from its last detailed read of t
// (see DetailEvery): a tenant whose processes joined its cgroup after that
// read has none there. A cgroup that is gone is an error wrapping
// fs.ErrNotExist.
func (d *CgroupDiscoverer) Threads(t Tenant) ([]int, error) {
	if d.Host == nil {
		return nil, errors.New("cgroup discovery: no host")
	}
	w := cgroupWalk{d: d, h: d.Host, maxDepth: d.maxDepth()}
	if err := w.threadsIn(d.Layout); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	tids, ok := w.threads(t.Cgroup, 0, nil)
	if !ok {
		return nil, fmt.Errorf("tenant %s: cgroup %s: %w", t.ID, t.Cgroup, fs.ErrNotExist)
	}
	slices.Sort(tids)
	return slices.Compact(tids), errors.Join(w.errs...)
}

// fail records a read error unless it says the cgroup went away.
func (w *cgroupWalk) fail(err error) {
	if !cgroupGone(err) {
		w.errs = append(w.errs, err)
	}
}

// cgroupGone reports whether err means the cgroup no longer exists: ENOENT when
// opening, ENODEV when reading a file of a cgroup removed after the open.
func cgroupGone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV)
}

// add records a tenant, reading its threads and CPUs when it is new (within
// MaxNew) or its turn has come, unless it vanished.
func (w *cgroupWalk) add(rel, kind, name string) {
	t := Tenant{ID: rel, Kind: kind, Name: name, Cgroup: rel}
	d := w.d
	c, known := d.cache[rel]
	if known && !detailDue(rel, c.read, d.calls, d.DetailEvery) {
		t.Threads, t.CPUs = c.threads, c.cpus
		w.tenants = append(w.tenants, t)
		return
	}
	if !known {
		if d.MaxNew > 0 && w.newRead >= d.MaxNew {
			w.deferred++
			return
		}
		w.newRead++
	}
	threads, ok := w.threads(rel, 0, nil)
	if !ok {
		return
	}
	slices.Sort(threads)
	t.Threads = slices.Compact(threads)
	t.CPUs = w.cpus(rel)
	d.cache[rel] = cachedDetail{threads: t.Threads, cpus: t.CPUs, read: d.calls}
	w.tenants = append(w.tenants, t)
}

// detailDue says whether a known tenant's threads and CPUs, last read on
// call read, are to be read again on call calls. Each tenant's turn is the
// call whose number modulo every is its slot, a hash of its ID: tenants found
// together (all of them, when the agent starts) are re-read spread over the
// cycle, not all in one call.
func detailDue(id string, read, calls, every int) bool {
	if every <= 1 || calls-read >= every {
		return true
	}
	return calls != read && calls%every == detailSlot(id, every)
}

// detailSlot is a tenant's turn in a cycle of every calls.
func detailSlot(id string, every int) int { return int(spread(id) % uint64(every)) }

// threads appends the TIDs of cgroup rel and its descendants to tids. It
// returns false when rel itself has vanished; a vanished descendant is
// skipped.
func (w *cgroupWalk) threads(rel string, below int, tids []int) ([]int, bool) {
	p := w.root + rel + "/" + w.threadsFile
	b, err := w.h.ReadFile(p)
	if err != nil {
		if cgroupGone(err) {
			return tids, false
		}
		w.errs = append(w.errs, err)
	} else {
		var perr error
		tids, perr = parseTIDs(b, tids)
		if perr != nil {
			w.errs = append(w.errs, fmt.Errorf("%s: %w", w.h.Path(p), perr))
		}
	}
	subs, err := w.list(rel)
	if err != nil {
		if cgroupGone(err) {
			return tids, false
		}
		w.errs = append(w.errs, err)
		return tids, true
	}
	for _, sub := range subs {
		child := rel + "/" + sub
		if below+1 > w.maxDepth {
			w.errs = append(w.errs, fmt.Errorf("%s: cgroups nested more than %d levels below the tenant; their threads are not counted", w.h.Path(w.root+child), w.maxDepth))
			break
		}
		tids, _ = w.threads(child, below+1, tids)
	}
	return tids, true
}

// parseTIDs appends the decimal numbers of a tasks/cgroup.threads file.
func parseTIDs(b []byte, tids []int) ([]int, error) {
	n, digits := 0, 0
	for i := 0; i <= len(b); i++ {
		if i == len(b) || b[i] == '\n' {
			if digits > 0 {
				tids = append(tids, n)
			}
			n, digits = 0, 0
			continue
		}
		c := b[i]
		if c < '0' || c > '9' || digits >= 10 {
			end := strings.IndexByte(string(b[i:]), '\n')
			if end < 0 {
				end = len(b) - i
			}
			if end > 20 {
				end = 20
			}
			return tids, fmt.Errorf("not a thread ID list: %q", b[i:i+end])
		}
		n = n*10 + int(c-'0')
		digits++
	}
	return tids, nil
}

// cpus returns where a tenant may run: its effective cpuset (v1
// cpuset.effective_cpus, v2 cpuset.cpus.effective), else its configured
// cpuset.cpus; on v2, a cgroup without the cpuset controller enabled runs on
// its nearest cpuset-enabled ancestor's CPUs; else every online CPU (no
// cpuset controller, or no cgroup in the v1 cpuset hierarchy, as for
// systemd units on v1 hosts).
func (w *cgroupWalk) cpus(rel string) cpuset.Set {
	if w.cpusetRoot == "" {
		return w.onlineCPUs()
	}
	if set, ok := w.cpusetOf(rel); ok {
		return set
	}
	if w.cpusetV2 {
		for p := path.Dir(rel); ; p = path.Dir(p) {
			if p == "/" {
				p = ""
			}
			set, seen := w.ancestorCpus[p]
			if !seen {
				set, _ = w.cpusetOf(p)
				if w.ancestorCpus == nil {
					w.ancestorCpus = map[string]cpuset.Set{}
				}
				w.ancestorCpus[p] = set // the empty set when none: keeps looking above
			}
			if !set.IsEmpty() {
				return set
			}
			if p == "" {
				break
			}
		}
	}
	return w.onlineCPUs()
}

// cpusetOf reads the CPUs of one cgroup in the cpuset hierarchy.
func (w *cgroupWalk) cpusetOf(rel string) (cpuset.Set, bool) {
	for _, f := range [2]string{w.effectiveFile, "cpuset.cpus"} {
		p := w.cpusetRoot + rel + "/" + f
		s, err := w.h.ReadString(p)
		if err != nil {
			if cgroupGone(err) && w.cpusetV2 {
				// v2 has both files or neither (no cpuset controller here).
				// Old v1 kernels (before 3.14) have no cpuset.effective_cpus.
				break
			}
			w.fail(err)
			continue
		}
		set, err := cpuset.Parse(s)
		if err != nil {
			w.errs = append(w.errs, fmt.Errorf("%s: %w", w.h.Path(p), err))
			continue
		}
		if !set.IsEmpty() {
			return set, true
		}
	}
	return cpuset.Set{}, false
}

func (w *cgroupWalk) onlineCPUs() cpuset.Set {
	if !w.onlineRead {
		w.onlineRead = true
		s, err := w.h.ReadString(onlineCPUsFile)
		if err == nil {
			w.online, err = cpuset.Parse(s)
		}
		if err != nil {
			w.errs = append(w.errs, fmt.Errorf("online CPUs: %w", err))
		}
	}
	return w.online
}

// The built-in patterns. Each takes the names of a cgroup's ancestors (root
// first) and its own name, so matching needs nothing but the listing.
//
// Sources for the path shapes:
//
//   - libvirt with systemd-machined: the machine name is
//     "<driver>-<id>-<name>" (virDomainDriverGenerateMachineName in
//     src/hypervisor/domain_driver.c; the name reduced to hostname characters
//     and the whole cut at 64 bytes, e.g. "qemu-7-1234…567"), its scope
//     "machine-" + systemd-escaped name + ".scope", so "qemu-3-demo" becomes
//     "machine-qemu\x2d3\x2ddemo.scope" (virSystemdMakeScopeName, checked in
//     tests/virsystemdtest.c), under machine.slice or the domain's
//     <partition> slice. Older libvirt named it "machine-qemu\x2d<name>.scope".
//     On cgroup v2 libvirt puts the threads in a nested "libvirt" cgroup
//     (virCgroupNewNested) with vcpuN, emulator and iothreadN below it
//     (virCgroupNewThread).
//   - libvirt without systemd: "<partition>/<machine name>.libvirt-<driver>"
//     (virCgroupNewDomainPartition in src/util/vircgroup.c), the default
//     partition "/machine"; other partitions get a ".partition" suffix
//     (virCgroupSetPartitionSuffix). Older libvirt used the bare domain name
//     ("/machine/<name>.libvirt-qemu"); a leading "_" is
//     virCgroupPartitionEscape's.
//   - Kubernetes (pkg/kubelet/cm): the pod cgroup is "pod"+UID
//     (GetPodCgroupNameSuffix) under "kubepods" for Guaranteed pods and under
//     "kubepods/burstable" or "kubepods/besteffort" otherwise
//     (qos_container_manager_linux.go). The cgroupfs driver uses those names
//     as they are; the systemd driver (CgroupName.ToSystemd in
//     cgroup_manager_linux.go) turns "-" into "_" in each part and joins the
//     parts with "-": "/kubepods.slice/kubepods-burstable.slice/
//     kubepods-burstable-pod1234_abcd.slice". With --cgroup-root the root's
//     parts come first ("foo-kubepods-pod….slice").
//   - docker (moby daemon/oci_linux.go WithCgroups): systemd driver
//     "system.slice:docker:<id>", which runc turns into
//     "/system.slice/docker-<id>.scope"; cgroupfs "/docker/<id>". <id> is 64
//     hex digits; docker shows its first 12.
//   - containerd outside Kubernetes: nerdctl
//     (pkg/cmd/container/run_cgroup_linux.go generateCgroupPath) uses
//     "system.slice:nerdctl:<id>" with systemd, "/system.slice/nerdctl-<id>.scope";
//     with cgroupfs it leaves the path to containerd, whose default spec
//     (oci/spec.go populateDefaultUnixSpec) is "/<namespace>/<id>", and
//     nerdctl's and ctr's namespace is "default". containerd itself creates
//     no "containerd-<id>.scope"; "cri-containerd-<id>.scope" only appears
//     inside Kubernetes pods.
//   - podman (libpod/container_internal_linux.go getOCICgroupPath): with
//     systemd "<parent>:libpod:<id>", so "libpod-<id>.scope" under
//     machine.slice (SystemdDefaultCgroupParent), or under
//     "machine.slice/machine-libpod_pod_<podid>.slice" for a pod's
//     containers; with cgroupfs "<parent>/libpod-<id>", the parent
//     "/libpod_parent" (CgroupfsDefaultCgroupParent) or a pod's
//     "/libpod_parent/<podid>". Its conmon monitor runs in
//     "libpod-conmon-<id>.scope" (cgroupfs: "/libpod_parent/conmon"), which
//     is not the container and fails the 64-hex check.

// matchBuiltin says whether the cgroup name (below ancestors anc) is a tenant
// of a known runtime, and its kind and name.
func matchBuiltin(anc []string, name string) (kind, tname string, ok bool) {
	parent, grand := "", ""
	if len(anc) > 0 {
		parent = anc[len(anc)-1]
	}
	if len(anc) > 1 {
		grand = anc[len(anc)-2]
	}
	switch {
	case strings.HasSuffix(name, ".scope"):
		base := strings.TrimSuffix(name, ".scope")
		if m, ok := strings.CutPrefix(base, "machine-"); ok {
			if vm, ok := machinedVM(systemdunit.Unescape(m)); ok {
				return KindVM, vm, true
			}
			return "", "", false
		}
		for _, prefix := range []string{"docker-", "libpod-"} {
			if id, ok := strings.CutPrefix(base, prefix); ok && isContainerID(id) {
				return KindContainer, id[:12], true
			}
		}
		if id, ok := strings.CutPrefix(base, "nerdctl-"); ok && id != "" {
			return KindContainer, shortContainerID(id), true
		}
	case strings.HasSuffix(name, ".slice"):
		if uid, ok := kubeSystemdPod(strings.TrimSuffix(name, ".slice")); ok {
			return KindPod, uid, true
		}
	case strings.HasSuffix(name, ".libvirt-qemu"):
		if vm := libvirtVM(strings.TrimSuffix(name, ".libvirt-qemu"), "qemu"); vm != "" {
			return KindVM, vm, true
		}
	case strings.HasSuffix(name, ".libvirt-ch"):
		if vm := libvirtVM(strings.TrimSuffix(name, ".libvirt-ch"), "ch"); vm != "" {
			return KindVM, vm, true
		}
	}
	// cgroupfs drivers: the parent's name says whose cgroup it is.
	switch {
	case strings.HasPrefix(name, "pod") && (parent == "kubepods" ||
		(grand == "kubepods" && (parent == "burstable" || parent == "besteffort"))):
		if uid := name[3:]; validUID(uid) {
			return KindPod, uid, true
		}
	case parent == "docker" && isContainerID(name):
		return KindContainer, name[:12], true
	case (len(anc) == 1 || len(anc) == 2) && anc[0] == "libpod_parent": // a container, or a pod's
		if id, ok := strings.CutPrefix(name, "libpod-"); ok && isContainerID(id) {
			return KindContainer, id[:12], true
		}
	case parent == "default" && len(anc) == 1:
		return KindContainer, shortContainerID(name), true
	}
	return "", "", false
}

// descendBuiltin says whether a cgroup that is no tenant may hold tenants of
// the built-in patterns below it.
func descendBuiltin(anc []string, name string) bool {
	switch {
	case strings.HasSuffix(name, ".slice"), strings.HasSuffix(name, ".partition"):
		return true // systemd slices; libvirt partitions
	case name == "kubepods", name == "docker":
		return true
	case name == "burstable" || name == "besteffort":
		return len(anc) > 0 && anc[len(anc)-1] == "kubepods"
	case len(anc) == 0:
		return name == "machine" || name == "default" || name == "libpod_parent"
	case len(anc) == 1:
		return anc[0] == "libpod_parent" // podman pods (cgroupfs)
	}
	return false
}

// machinedVM takes an unescaped machined machine name ("qemu-1-vm1") and
// returns the libvirt domain name when it is a VM's.
func machinedVM(m string) (string, bool) {
	for _, driver := range []string{"qemu", "ch"} {
		rest, ok := strings.CutPrefix(m, driver+"-")
		if !ok {
			continue
		}
		rest = cutEmbed(rest)
		if r, ok := cutDomainID(rest); ok {
			rest = r
		}
		return rest, rest != ""
	}
	return "", false
}

// libvirtVM returns the domain name in a non-systemd libvirt cgroup name
// (without ".libvirt-<driver>"): "qemu-1-vm1", or "vm1" from older libvirt.
func libvirtVM(base, driver string) string {
	if b, ok := strings.CutPrefix(base, "_"); ok && b != "" {
		base = b // virCgroupPartitionEscape
	}
	if rest, ok := strings.CutPrefix(base, driver+"-"); ok {
		if r, ok := cutDomainID(cutEmbed(rest)); ok && r != "" {
			return r
		}
	}
	return base
}

// cutEmbed removes the "embed-<8 hex>-" of an embedded driver's machine name.
func cutEmbed(s string) string {
	if r, ok := strings.CutPrefix(s, "embed-"); ok && len(r) > 9 && r[8] == '-' && isLowerHex(r[:8]) {
		return r[9:]
	}
	return s
}

// cutDomainID removes a leading "<domain id>-".
func cutDomainID(s string) (string, bool) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || i >= len(s) || s[i] != '-' {
		return s, false
	}
	return s[i+1:], true
}

// kubeSystemdPod recognises a systemd-driver pod slice name (without
// ".slice"): "[root-]kubepods[-burstable|-besteffort]-pod<uid>", returning the
// UID with its dashes back.
func kubeSystemdPod(base string) (string, bool) {
	i := strings.LastIndexByte(base, '-')
	if i < 0 {
		return "", false
	}
	prefix, last := base[:i], base[i+1:]
	uid, ok := strings.CutPrefix(last, "pod")
	if !ok || !validUID(uid) {
		return "", false
	}
	prefix = strings.TrimSuffix(strings.TrimSuffix(prefix, "-burstable"), "-besteffort")
	if prefix != "kubepods" && !strings.HasSuffix(prefix, "-kubepods") {
		return "", false
	}
	return strings.ReplaceAll(uid, "_", "-"), true
}

// validUID accepts what a pod UID can be: a UUID, or for static pods a hex
// hash, with "_" for "-" under the systemd driver.
func validUID(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return s != ""
}

func isContainerID(s string) bool { return len(s) == 64 && isLowerHex(s) }

// shortContainerID is the 12-digit short form of a 64-hex container ID, else the ID.
func shortContainerID(id string) string {
	if isContainerID(id) {
		return id[:12]
	}
	return id
}
