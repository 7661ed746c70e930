package sense

// Per-tenant LLC occupancy and memory bandwidth from resctrl monitoring
// (Intel CMT/MBM, AMD PQoS): a monitoring group per tenant, holding the
// tenant's threads, read per L3 domain.
//
// Where a tenant's threads are decides where its monitoring group lives: a
// monitoring group belongs to one control group and only takes that
// group's threads (resctrl.rst, "tasks"). So for every control group that
// holds threads of the tenant:
//
//   - the default group or a crosstalk-owned class (an actuator moved the
//     tenant there): a crosstalk monitoring group in it, named for the
//     tenant. When an actuator moves the tenant into its class, the threads
//     leave the old monitoring group (the kernel does that); the next Sync
//     makes one in the class and removes the empty old one — the monitoring
//     follows the tenant.
//   - a control group someone else made (libvirt cachetune, pqos): crosstalk
//     never writes there. If that group holds only this tenant's threads
//     (libvirt's per-VM group does), its own mon_data is the tenant's; if it
//     holds others' too, that part of the tenant is not measured, and Read
//     says so in Partial.
//
// RMIDs are few (64 on the SKX tree, 256 on Milan) and every monitoring
// group takes one. Tenants are given to Sync most important first; when the
// hardware (or MaxGroups) runs out, the lowest-priority tenants are not
// monitored — a higher-priority tenant takes the RMID of a lower one — and
// Unmonitored lists who and why.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/resctrl"
)

// ResctrlMonitorOptions configure NewResctrlMonitor.
type ResctrlMonitorOptions struct {
	// MaxGroups bounds the monitoring groups crosstalk makes (0: as many as
	// the hardware's RMIDs allow), to leave RMIDs to other tools.
	MaxGroups int
	// Now is the clock for bandwidth rates (default time.Now).
	Now func() time.Time
	// VerifyEvery re-reads each monitoring group's task list every this
	// many Syncs (default 10); in between, only threads not yet written are
	// added, so a Sync costs one read per foreign control group and the
	// writes of new threads.
	VerifyEvery int
	// DomainCPUs maps each L3 domain to its CPUs: a tenant's counters are
	// then read only in the domains its cpuset covers (a VM pinned to one
	// socket has nothing in the other's). Nil reads every domain.
	DomainCPUs map[int]cpuset.Set
	// SkipLocal leaves mbm_local_bytes unread (LocalBytesPerSec stays 0):
	// reads are cross-CPU calls, and only NUMA placement needs it.
	SkipLocal bool
	// Files, when set, keeps the groups' mon_data files open between
	// Reads (one pread each instead of open, read and close).
	Files *host.Rereader
	// MaxNewPerSync bounds the monitoring groups one Sync makes (each a
	// mkdir and a write per thread), so an agent starting on a host with
	// hundreds of tenants spreads the work over its first intervals
	// (0: no bound).
	MaxNewPerSync int
}

// L3Usage is a tenant's use of one L3 domain.
type L3Usage struct {
	Domain         int    `json:"domain"`
	OccupancyBytes uint64 `json:"llc_occupancy_bytes"`
	OccupancyOK    bool   `json:"llc_occupancy_ok"`
	// Memory bandwidth since the previous Read: all of it, and the part to
	// the local NUMA node's memory. BandwidthOK is false for the first Read
	// of a new monitoring group and after a counter reset or "Unavailable".
	TotalBytesPerSec float64 `json:"mbm_total_bytes_per_sec"`
	LocalBytesPerSec float64 `json:"mbm_local_bytes_per_sec"`
	BandwidthOK      bool    `json:"mbm_ok"`
}

// ResctrlUsage is one tenant's monitoring data.
type ResctrlUsage struct {
	Tenant  string    `json:"tenant"`
	Domains []L3Usage `json:"domains"`
	// Partial says which part of the tenant is not in these numbers (threads
	// in a control group shared with other tasks), or is empty.
	Partial string `json:"partial,omitempty"`
}

// Domain returns the usage in an L3 domain.
func (u ResctrlUsage) Domain(id int) (L3Usage, bool) {
	for _, d := range u.Domains {
		if d.Domain == id {
			return d, true
		}
	}
	return L3Usage{}, false
}

// UnmonitoredTenant is a tenant Sync could not give a monitoring group.
type UnmonitoredTenant struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// ResctrlMonitor keeps a resctrl monitoring group per tenant and reads
// them. It is safe for concurrent use.
type ResctrlMonitor struct {
	mu          sync.Mutex
	h           *host.Host
	info        resctrl.Info
	mount       string
	domains     []int
	maxGroups   int
	now         func() time.Time
	domainCPUs  map[int]cpuset.Set
	events      []string
	maxNew      int
	files       *host.Rereader
	verifyEvery int
	seq         int

	tenants     map[string]*monTenant
	unmonitored []UnmonitoredTenant
	unmonIdx    map[string]int // index in unmonitored, rebuilt each Sync
}

type monTenant struct {
	id, name string
	prio     int
	// domains are the L3 domains its counters are read in.
	domains []int
	sources map[string]*monSource // by control group ("" = default)
	partial string
}

// monSource is where a part of a tenant is counted: crosstalk's monitoring
// group in a control group, or a foreign control group read as it is.
type monSource struct {
	group   resctrl.Group
	foreign bool
	written map[int]bool // threads known to be in the group
	prev    []resctrl.MonReading
	prevAt  time.Time
}

// NewResctrlMonitor checks that resctrl monitoring is there (mounted,
// info/L3_MON with llc_occupancy) and returns a monitor for it; the error
// says plainly why not (a *resctrl.UnavailableError), as doctor does.
// hasFlag and amd describe the CPU (topology.Identity.HasFlag / IsAMD).
func NewResctrlMonitor(h *host.Host, hasFlag func(string) bool, amd bool, o ResctrlMonitorOptions) (*ResctrlMonitor, error) {
	in, err := resctrl.Open(h, hasFlag, amd)
	if err != nil {
		return nil, err
	}
	if in.Mon == nil || in.Mon.NumRMIDs == 0 {
		return nil, &resctrl.UnavailableError{Reason: fmt.Sprintf("mounted at %s without monitoring (no info/L3_MON): the CPU or kernel lacks CMT/MBM (on Skylake-SP stepping ≤ 4 the kernel turns them off unless booted with rdt=cmt,mbmtotal,mbmlocal)", in.Mount)}
	}
	if !in.Mon.Has(resctrl.LLCOccupancy) {
		return nil, &resctrl.UnavailableError{Reason: fmt.Sprintf("mounted at %s, but monitoring offers no llc_occupancy (%s)", in.Mount, strings.Join(in.Mon.Features, " "))}
	}
	doms, err := resctrl.MonDomains(h, resctrl.CtrlGroup(in.Mount, ""))
	if err != nil || len(doms) == 0 {
		return nil, &resctrl.UnavailableError{Reason: fmt.Sprintf("mounted at %s, but the default group has no mon_data domains (%v)", in.Mount, err)}
	}
	m := &ResctrlMonitor{
		h: h, info: in, mount: in.Mount, domains: doms,
		maxGroups: o.MaxGroups, now: o.Now, verifyEvery: o.VerifyEvery,
		tenants: map[string]*monTenant{}, domainCPUs: o.DomainCPUs, maxNew: o.MaxNewPerSync, files: o.Files,
		events: []string{resctrl.LLCOccupancy, resctrl.MBMTotalBytes, resctrl.MBMLocalBytes},
	}
	if o.SkipLocal {
		m.events = m.events[:2]
	}
	if m.now == nil {
		m.now = time.Now
	}
	if m.verifyEvery <= 0 {
		m.verifyEvery = 10
	}
	return m, nil
}

// Domains lists the L3 monitoring domains.
func (m *ResctrlMonitor) Domains() []int { return slices.Clone(m.domains) }

// Info is what the mounted resctrl offers.
func (m *ResctrlMonitor) Info() resctrl.Info { return m.info }

// Unmonitored lists the tenants of the last Sync without monitoring, in
// priority order, with the reason.
func (m *ResctrlMonitor) Unmonitored() []UnmonitoredTenant {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.unmonitored)
}

// Sync makes the monitoring groups follow the tenants, given most important
// first: a group for each tenant in each control group that holds its
// threads (or the foreign group itself, read-only), the tenant's new
// threads written in, groups of tenants that are gone removed — including
// crosstalk groups a killed predecessor left. Other tools' monitoring
// groups are never touched. The error joins what went wrong; the rest is
// still done.
//
// Sync and Read touch only the resctrl filesystem, which does not block,
// so they do not consult ctx.
func (m *ResctrlMonitor) Sync(_ context.Context, tenants []Tenant) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	verify := m.seq%m.verifyEvery == 0
	var errs []error

	ctrls, err := resctrl.CtrlGroups(m.h, m.mount)
	if err != nil {
		return err
	}
	// Where every thread in a non-default control group is.
	where := map[int]string{}
	ctrlMembers := map[string][]int{}
	for _, c := range ctrls {
		tids, err := resctrl.ReadTasks(m.h, resctrl.CtrlGroup(m.mount, c))
		if err != nil {
			continue // removed meanwhile
		}
		ctrlMembers[c] = tids
		for _, t := range tids {
			where[t] = c
		}
	}
	// Our monitoring groups now, and other tools' monitoring groups, in the
	// control groups we may write in (the default group and our classes).
	// A thread in another tool's monitoring group stays there.
	ours := map[resctrl.Group]bool{}
	theirs := map[int]resctrl.Group{}
	theirMembers := map[resctrl.Group][]int{}
	for _, c := range append([]string{""}, ctrls...) {
		if c != "" && !resctrl.IsOwned(c) {
			continue
		}
		mons, _ := resctrl.MonGroups(m.h, m.mount, c)
		for _, name := range mons {
			g := resctrl.MonGroup(m.mount, c, name)
			if strings.HasPrefix(name, resctrl.OwnedPrefix+"mon-") {
				ours[g] = true
				continue
			}
			tids, err := resctrl.ReadTasks(m.h, g)
			if err != nil {
				continue
			}
			theirMembers[g] = tids
			for _, t := range tids {
				theirs[t] = g
			}
		}
	}

	m.unmonitored = nil
	clear(m.unmonIdx)
	alive := map[string]bool{}
	wanted := map[resctrl.Group]bool{}
	var order []*monTenant
	for i, t := range tenants {
		if t.ID == "" || alive[t.ID] {
			continue
		}
		alive[t.ID] = true
		mt := m.tenants[t.ID]
		if mt == nil {
			mt = &monTenant{id: t.ID, sources: map[string]*monSource{}}
			m.tenants[t.ID] = mt
		}
		mt.name, mt.prio, mt.partial = t.Name, i, ""
		mt.domains = m.domainsFor(t.CPUs)
		order = append(order, mt)
	}
	for id, mt := range m.tenants {
		if !alive[id] {
			for _, s := range mt.sources {
				if !s.foreign {
					errs = append(errs, m.remove(s.group))
					delete(ours, s.group)
				}
			}
			delete(m.tenants, id)
		}
	}

	byID := map[string]Tenant{}
	for _, t := range tenants {
		byID[t.ID] = t
	}
	// full is set once a group could not be made with nobody of lower
	// priority to give up theirs: every later tenant (lower still) would
	// fail the same way, so they are not tried (a thousand tenants would
	// otherwise cost a failing mkdir each, every interval).
	var full error
	made := 0
	for _, mt := range order {
		t := byID[mt.id]
		if len(t.Threads) == 0 {
			m.dropSources(mt, nil, ours, &errs)
			m.setUnmonitored(mt.id, "no threads found in its cgroup")
			continue
		}
		// Where the tenant's threads are: a control group, or another
		// tool's monitoring group (keyed by its path).
		parts := map[string][]int{}
		place := map[string]resctrl.Group{}
		for _, tid := range t.Threads {
			key, g := where[tid], resctrl.CtrlGroup(m.mount, where[tid])
			if mg, ok := theirs[tid]; ok {
				key, g = mg.Path(), mg
			}
			parts[key] = append(parts[key], tid)
			place[key] = g
		}
		m.dropSources(mt, parts, ours, &errs)
		var notMeasured []string
		for _, key := range slices.Sorted(maps.Keys(parts)) {
			tids, pg := parts[key], place[key]
			if pg.Mon != "" || (pg.Ctrl != "" && !resctrl.IsOwned(pg.Ctrl)) {
				// Another tool's group: read it if it holds only this tenant.
				members := theirMembers[pg]
				if pg.Mon == "" {
					members = ctrlMembers[pg.Ctrl]
				}
				if sameSet(members, tids) {
					if s := mt.sources[key]; s == nil || !s.foreign {
						mt.sources[key] = &monSource{group: pg, foreign: true}
					}
				} else {
					delete(mt.sources, key)
					notMeasured = append(notMeasured, fmt.Sprintf("%d threads in %s, which another tool made and shares with other tasks (crosstalk does not write into groups it did not create)", len(tids), pg))
				}
				continue
			}
			g := resctrl.MonGroup(m.mount, pg.Ctrl, resctrl.GroupName("mon", mt.id, mt.name))
			wanted[g] = true
			s := mt.sources[key]
			if s == nil || s.group != g {
				s = &monSource{group: g, written: map[int]bool{}}
			}
			if !ours[g] {
				err := full
				if err == nil && m.maxNew > 0 && made >= m.maxNew {
					err = fmt.Errorf("not monitored yet: %d monitoring groups are made per interval", m.maxNew)
				}
				if err == nil {
					made++
					err = m.create(g, mt, order, ours)
					if errors.Is(err, errNoRMIDLeft) {
						full = err
					}
				}
				if err != nil {
					m.setUnmonitored(mt.id, err.Error())
					delete(mt.sources, key)
					continue
				}
				ours[g] = true
				s.written, s.prev = map[int]bool{}, nil
			}
			mt.sources[key] = s
			if verify || len(s.written) == 0 {
				in, err := resctrl.ReadTasks(m.h, g)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				s.written = map[int]bool{}
				for _, x := range in {
					s.written[x] = true
				}
			}
			var todo []int
			for _, x := range tids {
				if !s.written[x] {
					todo = append(todo, x)
				}
			}
			// Threads that exited between discovery and now (ESRCH) have
			// nothing left to count: not an error.
			moved, gone, err := resctrl.MoveTasks(m.h, g, todo)
			for _, x := range moved {
				s.written[x] = true
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("tenant %s: %w", mt.id, err))
			}
			// Forget threads that left the tenant (exited, moved elsewhere).
			if len(s.written) > len(tids) || len(gone) > 0 {
				keep := make(map[int]bool, len(tids))
				for _, x := range tids {
					keep[x] = true
				}
				for x := range s.written {
					if !keep[x] {
						delete(s.written, x)
					}
				}
			}
		}
		if len(notMeasured) > 0 {
			mt.partial = strings.Join(notMeasured, "; ")
			if len(mt.sources) == 0 {
				m.setUnmonitored(mt.id, "not measured: "+mt.partial)
			}
		}
	}
	sort.SliceStable(m.unmonitored, func(i, j int) bool {
		return m.tenants[m.unmonitored[i].ID].prio < m.tenants[m.unmonitored[j].ID].prio
	})
	// Our groups nobody wants: tenants gone, threads moved elsewhere,
	// groups a killed predecessor left.
	for g := range ours {
		if !wanted[g] {
			errs = append(errs, m.remove(g))
		}
	}
	return errors.Join(errs...)
}

// dropSources forgets the sources of control groups where the tenant no
// longer has threads, removing crosstalk's monitoring groups there.
func (m *ResctrlMonitor) dropSources(mt *monTenant, parts map[string][]int, ours map[resctrl.Group]bool, errs *[]error) {
	for c, s := range mt.sources {
		if _, still := parts[c]; still {
			continue
		}
		if !s.foreign && ours[s.group] {
			*errs = append(*errs, m.remove(s.group))
			delete(ours, s.group)
		}
		delete(mt.sources, c)
	}
}

// create makes a monitoring group for mt, taking the RMID of a tenant of
// lower priority when there is none left (or MaxGroups is reached).
func (m *ResctrlMonitor) create(g resctrl.Group, mt *monTenant, order []*monTenant, ours map[resctrl.Group]bool) error {
	for {
		var err error
		if m.maxGroups > 0 && len(ours) >= m.maxGroups {
			err = fmt.Errorf("crosstalk's limit of %d monitoring groups is reached", m.maxGroups)
		} else if err = resctrl.Create(m.h, g); err == nil {
			return nil
		}
		var ns *resctrl.NoSpaceError
		limit := m.maxGroups > 0 && len(ours) >= m.maxGroups
		if !limit && !errors.As(err, &ns) {
			return err
		}
		if ns != nil && ns.Limbo {
			// Freed RMIDs are still counting old lines: none for anyone
			// this interval.
			return fmt.Errorf("%w this interval: %v", errNoRMIDLeft, ns)
		}
		// Evict the lowest-priority tenant holding a group, if any is lower.
		var victim *monTenant
		for i := len(order) - 1; i >= 0 && order[i].prio > mt.prio; i-- {
			if hasOwnSource(order[i]) {
				victim = order[i]
				break
			}
		}
		if victim == nil {
			if ns != nil {
				return fmt.Errorf("%w: %v, and every monitoring group belongs to a tenant of higher priority or to another tool", errNoRMIDLeft, ns)
			}
			return fmt.Errorf("%w: %v", errNoRMIDLeft, err)
		}
		for c, s := range victim.sources {
			if s.foreign {
				continue
			}
			if rerr := m.remove(s.group); rerr != nil {
				return rerr
			}
			delete(ours, s.group)
			delete(victim.sources, c)
		}
		m.setUnmonitored(victim.id, "monitoring group given to higher-priority tenant "+mt.id)
	}
}

// errNoRMIDLeft says a monitoring group cannot be had by this tenant nor by
// any of lower priority.
var errNoRMIDLeft = errors.New("not monitored")

// remove removes one of crosstalk's monitoring groups and forgets its open
// files: a group made again under the same name is a new one (the kernel
// answers the old descriptors ENODEV; a plain tree would keep serving the
// removed files' last content).
func (m *ResctrlMonitor) remove(g resctrl.Group) error {
	if m.files != nil {
		m.files.Forget(g.Path() + "/")
	}
	return resctrl.Remove(m.h, g)
}

// setUnmonitored records why a tenant is not monitored (the latest reason).
func (m *ResctrlMonitor) setUnmonitored(id, reason string) {
	if i, ok := m.unmonIdx[id]; ok && i < len(m.unmonitored) && m.unmonitored[i].ID == id {
		m.unmonitored[i].Reason = reason
		return
	}
	if m.unmonIdx == nil {
		m.unmonIdx = map[string]int{}
	}
	m.unmonIdx[id] = len(m.unmonitored)
	m.unmonitored = append(m.unmonitored, UnmonitoredTenant{ID: id, Reason: reason})
}

func hasOwnSource(mt *monTenant) bool {
	for _, s := range mt.sources {
		if !s.foreign {
			return true
		}
	}
	return false
}

// domainsFor lists the monitoring domains a cpuset covers (every domain
// without DomainCPUs, or for an unconfined or empty cpuset).
func (m *ResctrlMonitor) domainsFor(cpus cpuset.Set) []int {
	if m.domainCPUs == nil || cpus.IsEmpty() {
		return m.domains
	}
	var out []int
	for _, d := range m.domains {
		dc, ok := m.domainCPUs[d]
		if !ok || !dc.Intersect(cpus).IsEmpty() {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		return m.domains
	}
	return out
}

// Read returns each monitored tenant's occupancy in the L3 domains its
// cpuset covers and its memory bandwidth since the previous Read. Tenants whose groups vanished
// are left out until the next Sync; the error joins read failures.
func (m *ResctrlMonitor) Read(_ context.Context) (map[string]ResctrlUsage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	out := map[string]ResctrlUsage{}
	var errs []error
	for id, mt := range m.tenants {
		if len(mt.sources) == 0 {
			continue
		}
		u := ResctrlUsage{Tenant: id, Partial: mt.partial}
		doms := mt.domains
		if doms == nil {
			doms = m.domains
		}
		sum := make([]L3Usage, len(doms))
		for i, d := range doms {
			sum[i] = L3Usage{Domain: d, OccupancyOK: true, BandwidthOK: true}
		}
		ok := true
		for _, s := range mt.sources {
			var reader resctrl.StringReader = m.h
			if m.files != nil {
				reader = m.files
			}
			cur, err := resctrl.ReadMonEventsFrom(m.h, reader, s.group, doms, m.events...)
			if err != nil {
				errs = append(errs, fmt.Errorf("tenant %s: %w", id, err))
				ok = false
				break
			}
			dt := now.Sub(s.prevAt).Seconds()
			for i, r := range cur {
				sum[i].OccupancyBytes += r.Occupancy.Value
				sum[i].OccupancyOK = sum[i].OccupancyOK && r.Occupancy.OK
				var tot, loc uint64
				okT, okL := false, false
				if s.prev != nil && len(s.prev) == len(cur) && s.prev[i].Domain == r.Domain && dt > 0 {
					tot, okT = r.Total.Since(s.prev[i].Total)
					loc, okL = r.Local.Since(s.prev[i].Local)
					if r.Local.Status == "not read" {
						okL = true // not wanted: no reason to distrust the total
					}
				}
				sum[i].BandwidthOK = sum[i].BandwidthOK && okT && okL
				if okT && okL {
					sum[i].TotalBytesPerSec += float64(tot) / dt
					sum[i].LocalBytesPerSec += float64(loc) / dt
				}
			}
			s.prev, s.prevAt = cur, now
		}
		if !ok {
			continue
		}
		for i := range sum {
			if !sum[i].BandwidthOK {
				sum[i].TotalBytesPerSec, sum[i].LocalBytesPerSec = 0, 0
			}
		}
		u.Domains = sum
		out[id] = u
	}
	return out, errors.Join(errs...)
}

// Close removes every monitoring group the monitor made (their threads stay
// in their control groups; nothing about allocation changes).
func (m *ResctrlMonitor) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for _, mt := range m.tenants {
		for _, s := range mt.sources {
			if !s.foreign {
				errs = append(errs, m.remove(s.group))
			}
		}
	}
	m.tenants = map[string]*monTenant{}
	return errors.Join(errs...)
}

// sameSet reports whether a and b hold the same thread IDs.
func sameSet(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}
