package sense

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/libvirt"
)

// LibvirtDomains is what LibvirtDiscoverer needs of a libvirt client: its
// list of active domains (kept current by lifecycle events), and whether
// that list is current.
type LibvirtDomains interface {
	Domains() ([]libvirt.Domain, bool)
}

// LibvirtDiscoverer enriches the VMs another Discoverer (the cgroup walk)
// finds with what libvirt knows: the domain's real name (the cgroup name
// carries a sanitised, possibly truncated one), its UUID, its vCPU count, and
// where it really runs — the union of its vcpupin/emulatorpin/iothreadpin
// cpusets when every thread is pinned, since libvirt pins threads in the
// domain's vcpuN/emulator sub-cgroups and leaves the domain's own cpuset
// wide open.
//
// The cgroup walk stays the source of tenants: a tenant is something
// crosstalk can sample and throttle, which takes a cgroup. Mismatches are
// expected for moments and handled:
//
//   - a VM cgroup no listed domain matches (a domain just stopping, one run by
//     another libvirt daemon, or libvirt unreachable) is kept as the walk
//     found it, without UUID;
//   - a domain libvirt runs that no cgroup tenant matches yet (just started:
//     the walk runs every interval, libvirt's event came first) is waited for;
//     after Grace it is reported once, because its cgroup is then somewhere
//     the walk does not look (a custom <partition>: add a tenants.globs
//     pattern).
//
// The walk's results are never delayed by libvirt: Domains() reads the
// client's cached list.
type LibvirtDiscoverer struct {
	Inner   Discoverer
	Libvirt LibvirtDomains
	Log     *slog.Logger
	// Host and Layout, when set, narrow a VM's Threads to its vCPU threads
	// (libvirt's vcpuN cgroups), so its run delay is its vCPUs' wait for a
	// host CPU — what its guest sees as steal — without the wake-up waits of
	// its emulator and I/O threads, which on a busy host blur the signal.
	Host   *host.Host
	Layout cgroup.Layout
	// ThreadsEvery re-reads a VM's vCPU threads every that many calls (they
	// change only with vCPU hotplug); 0 or 1 reads them every call.
	ThreadsEvery int
	// Grace is how long a running domain may lack a cgroup tenant before it
	// is reported (default 10s).
	Grace time.Duration
	// Now replaces time.Now (tests).
	Now func() time.Time

	mu       sync.Mutex
	calls    int
	vcpus    map[string]vcpuThreads // by tenant ID
	missing  map[string]time.Time   // domain UUID -> first Discover without a tenant
	reported map[string]bool        // domain UUIDs reported missing
	orphans  map[string]bool        // VM tenant IDs logged without a domain
	// took and stale are how the last Discover's libvirt part fared (see
	// LibvirtHealth).
	took  time.Duration
	stale bool
}

// ErrLibvirtStale says libvirt's domain list was not current: libvirtd is
// unreachable, or its domains are not listed yet. VMs then keep what the
// cgroup walk found (no UUID, no pinned CPUs), and none is reported missing.
var ErrLibvirtStale = errors.New("libvirt's domain list is not current (libvirtd unreachable, or its domains not listed yet): VMs keep what the cgroup walk found")

// LibvirtHealth says how the libvirt part of the last Discover fared: what
// it took (the cached list and the VMs' vCPU threads), and ErrLibvirtStale
// when the list was not current.
func (d *LibvirtDiscoverer) LibvirtHealth() (time.Duration, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stale {
		return d.took, ErrLibvirtStale
	}
	return d.took, nil
}

// Discover runs the inner discoverer and enriches its VMs.
func (d *LibvirtDiscoverer) Discover(ctx context.Context) ([]Tenant, error) {
	tenants, err := d.Inner.Discover(ctx)
	if d.Libvirt == nil {
		return tenants, err
	}
	start := time.Now()
	doms, current := d.Libvirt.Domains()
	now := time.Now
	if d.Now != nil {
		now = d.Now
	}
	grace := d.Grace
	if grace <= 0 {
		grace = 10 * time.Second
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer func() { d.took, d.stale = time.Since(start), !current }()
	if d.missing == nil {
		d.missing, d.reported, d.orphans, d.vcpus = map[string]time.Time{}, map[string]bool{}, map[string]bool{}, map[string]vcpuThreads{}
	}
	d.calls++
	matched := map[string]bool{}
	vmIDs := map[string]bool{}
	for i := range tenants {
		t := &tenants[i]
		if t.Kind != KindVM {
			continue
		}
		vmIDs[t.ID] = true
		ref, ok := libvirt.ParseMachineCgroup(t.Cgroup)
		if !ok {
			continue
		}
		var dom *libvirt.Domain
		for j := range doms {
			if ref.Matches(doms[j]) {
				dom = &doms[j]
				break
			}
		}
		if dom == nil {
			// The list may be stale while libvirt is unreachable; a VM it
			// lacks keeps what the walk found.
			if current && !d.orphans[t.ID] {
				d.orphans[t.ID] = true
				d.log().Debug("VM cgroup matches no domain of this libvirt (stopping, or another daemon's)", "tenant", t.ID)
			}
			continue
		}
		delete(d.orphans, t.ID)
		matched[dom.UUID] = true
		enrich(t, *dom)
		if tids := d.vcpuThreadsLocked(t.ID, t.Cgroup, t.VCPUs); len(tids) > 0 {
			t.Threads = tids
		}
	}
	for id := range d.orphans {
		if !vmIDs[id] {
			delete(d.orphans, id)
		}
	}
	for id := range d.vcpus {
		if !vmIDs[id] {
			delete(d.vcpus, id)
		}
	}
	if !current {
		return tenants, err
	}
	present := map[string]bool{}
	for _, dom := range doms {
		present[dom.UUID] = true
		if matched[dom.UUID] {
			delete(d.missing, dom.UUID)
			if d.reported[dom.UUID] {
				delete(d.reported, dom.UUID)
				d.log().Info("libvirt domain now has a cgroup tenant", "domain", dom.Name)
			}
			continue
		}
		since, seen := d.missing[dom.UUID]
		if !seen {
			d.missing[dom.UUID] = now()
			continue
		}
		if !d.reported[dom.UUID] && now().Sub(since) >= grace {
			d.reported[dom.UUID] = true
			d.log().Warn("libvirt runs a domain crosstalk finds no cgroup for: it is not watched; if its <resource><partition> is custom, add a tenants.globs pattern for its cgroup",
				"domain", dom.Name, "uuid", dom.UUID, "id", dom.ID, "expected_cgroup_name", libvirt.MachineName("qemu", dom.ID, dom.Name)+".libvirt-qemu")
		}
	}
	for uuid := range d.missing {
		if !present[uuid] {
			delete(d.missing, uuid)
			delete(d.reported, uuid)
		}
	}
	return tenants, err
}

// vcpuThreads are a VM's vCPU thread IDs as last read.
type vcpuThreads struct {
	tids []int
	read int // the call that read them
}

// vcpuThreadsLocked returns the thread IDs in a VM's vcpuN cgroups (nil
// when there is no host to read, or none was found: the walk's threads stay).
func (d *LibvirtDiscoverer) vcpuThreadsLocked(id, cg string, n int) []int {
	if d.Host == nil || n <= 0 {
		return nil
	}
	if c, ok := d.vcpus[id]; ok && d.ThreadsEvery > 1 && d.calls-c.read < d.ThreadsEvery {
		return c.tids
	}
	vs := make([]libvirt.VCPU, n)
	for i := range vs {
		vs[i].Index = i
	}
	var tids []int
	if err := libvirt.VCPUThreads(d.Host, d.Layout, cg, vs); err == nil {
		for _, v := range vs {
			tids = append(tids, v.Threads...)
		}
	}
	d.vcpus[id] = vcpuThreads{tids: tids, read: d.calls}
	return tids
}

// enrich copies libvirt's view of a domain onto its tenant.
func enrich(t *Tenant, dom libvirt.Domain) {
	t.Name, t.UUID, t.VCPUs = dom.Name, dom.UUID, dom.VCPUs
	if dom.Config == nil {
		return
	}
	pinned, all := dom.Config.PinnedCPUs()
	if !all {
		return
	}
	if !t.CPUs.IsEmpty() {
		pinned = pinned.Intersect(t.CPUs)
	}
	if !pinned.IsEmpty() {
		t.CPUs = pinned
	}
}

func (d *LibvirtDiscoverer) log() *slog.Logger {
	if d.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return d.Log
}
