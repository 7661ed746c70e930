package sense

// Per-tenant perf counters in cgroup mode.
//
// A cgroup-mode event is opened with perf_event_open(attr, pid = fd of the
// tenant's cgroup directory, cpu, -1, PERF_FLAG_PID_CGROUP): it is a per-CPU
// event that the kernel switches on only while a task of that cgroup (or of a
// cgroup below it, such as a VM's vcpuN groups) runs on that CPU. So one
// tenant costs events × CPUs file descriptors, and hosts with hundreds of
// tenants run out of descriptors unless something bounds them: PerfCounters
// holds at most a budget of descriptors and rotates tenants through it.
//
// Time: the kernel keeps a cgroup event's time_enabled in cgroup time, which
// advances only while the cgroup runs on that CPU (checked live: an idle
// tenant reads value = enabled = running = 0). time_running falls behind
// time_enabled only when the hardware PMU is multiplexed among more events
// than it has counters; software events always run.

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/pmu"
)

// PerfEvent is one event counted per tenant.
type PerfEvent struct {
	Name   string // "cycles", "instructions", "llc_misses", "llc_references", "bus_locks", "task_clock", "context_switches", "cpu_migrations"
	Type   uint32 // unix.PERF_TYPE_HARDWARE / _SOFTWARE / _RAW
	Config uint64
}

// Names of the events PerfEventsFor picks.
const (
	EventCycles          = "cycles"
	EventInstructions    = "instructions"
	EventLLCMisses       = "llc_misses"
	EventLLCReferences   = "llc_references"
	EventBusLocks        = "bus_locks"
	EventTaskClock       = "task_clock"
	EventContextSwitches = "context_switches"
	EventCPUMigrations   = "cpu_migrations"
)

// PerfEventsFor picks the events for this host.
//
// Software events (task_clock, context_switches, cpu_migrations) are always
// there. With a hardware core PMU come cycles, instructions, llc_misses and
// llc_references and, when the CPU model is known, bus_locks.
//
// When the model is known (pmu.Lookup), every hardware event is the model's
// own encoding from the pmu table (PERF_TYPE_RAW, arch.Config): on Intel the
// architectural 0x3c/0xc0 and LONGEST_LAT_CACHE.MISS/REFERENCE, on AMD Zen
// ls_not_halted_cyc, ex_ret_instr and the data-cache fills served from
// beyond / from the L3 (see package pmu for what that does and does not
// count). An event the model has no per-core encoding for is left out
// rather than guessed: Zen 1 has no llc_misses.
//
// When the model is unknown the generic hardware events are used
// (PERF_COUNT_HW_CPU_CYCLES, _INSTRUCTIONS, _CACHE_MISSES,
// _CACHE_REFERENCES). The kernel maps the cache pair to the architectural
// LLC events on Intel but to L2-level events on AMD
// (arch/x86/events/amd/core.c amd_zen*_perfmon_event_map), so on an unknown
// AMD part llc_misses/llc_references are L2 figures: the judge must not
// compare them across vendors.
//
// On hybrid Intel parts (core PMU "cpu_core") the generic hardware events
// without an extended PMU type count on the P-cores only; crosstalk targets
// server parts, which are not hybrid.
func PerfEventsFor(p pmu.Presence, arch pmu.Microarch, archKnown bool) []PerfEvent {
	var ev []PerfEvent
	switch {
	case p.Hardware && archKnown:
		for _, e := range arch.Events() {
			ev = append(ev, PerfEvent{e.Role, unix.PERF_TYPE_RAW, arch.Config(e.Event)})
		}
	case p.Hardware:
		ev = append(ev,
			PerfEvent{EventCycles, unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CPU_CYCLES},
			PerfEvent{EventInstructions, unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_INSTRUCTIONS},
			PerfEvent{EventLLCMisses, unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CACHE_MISSES},
			PerfEvent{EventLLCReferences, unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CACHE_REFERENCES},
		)
	}
	return append(ev,
		PerfEvent{EventTaskClock, unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_TASK_CLOCK},
		PerfEvent{EventContextSwitches, unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_CONTEXT_SWITCHES},
		PerfEvent{EventCPUMigrations, unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_CPU_MIGRATIONS},
	)
}

// PerfOpener is the syscall seam: the real one calls unix.PerfEventOpen;
// tests use a fake. Errors are returned as the bare errno (unix.Errno).
type PerfOpener interface {
	Open(attr *unix.PerfEventAttr, pid, cpu, groupFD int, flags int) (PerfFD, error)
}

// PerfFD is one open counter, read as (value, time_enabled, time_running).
type PerfFD interface {
	Read() (value, enabled, running uint64, err error)
	Close() error
}

// SystemPerfOpener opens real counters with perf_event_open(2).
func SystemPerfOpener() PerfOpener { return sysPerfOpener{} }

type sysPerfOpener struct{}

func (sysPerfOpener) Open(attr *unix.PerfEventAttr, pid, cpu, groupFD int, flags int) (PerfFD, error) {
	fd, err := unix.PerfEventOpen(attr, pid, cpu, groupFD, flags)
	if err != nil {
		return nil, err
	}
	return &sysPerfFD{fd: fd}, nil
}

// sysPerfFD reads with PERF_FORMAT_TOTAL_TIME_ENABLED|TOTAL_TIME_RUNNING and no
// PERF_FORMAT_GROUP: { u64 value; u64 time_enabled; u64 time_running; }.
type sysPerfFD struct {
	fd  int
	buf [24]byte
}

func (f *sysPerfFD) Read() (value, enabled, running uint64, err error) {
	var n int
	for {
		n, err = unix.Read(f.fd, f.buf[:])
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return 0, 0, 0, fmt.Errorf("read perf counter: %w", err)
	}
	if n != len(f.buf) {
		return 0, 0, 0, fmt.Errorf("read perf counter: %d bytes, want %d", n, len(f.buf))
	}
	// The kernel writes host-endian u64s: little-endian on amd64 and arm64,
	// and NativeEndian keeps big-endian hosts right too.
	e := binary.NativeEndian
	return e.Uint64(f.buf[0:]), e.Uint64(f.buf[8:]), e.Uint64(f.buf[16:]), nil
}

func (f *sysPerfFD) Close() error {
	if f.fd < 0 {
		return nil
	}
	err := unix.Close(f.fd)
	f.fd = -1
	return err
}

// PerfEventDisabledError says an event cannot be counted on this host (no
// hardware PMU, a raw encoding this CPU rejects, no cgroup support in its
// PMU). It is reported once, by the Sync that disabled the event; the other
// events go on.
type PerfEventDisabledError struct {
	Event string
	Err   error
}

func (e *PerfEventDisabledError) Error() string {
	return fmt.Sprintf("perf event %s disabled for all tenants: %v", e.Event, e.Err)
}

func (e *PerfEventDisabledError) Unwrap() error { return e.Err }

// perfFDReserve is how many descriptors below RLIMIT_NOFILE the budget stays,
// for the rest of the agent (cgroupfs, resctrl and sysfs files, sockets).
const perfFDReserve = 256

// perfMaxDwell is how many Syncs a rotating tenant may hold its descriptors
// without producing a rate (Read not called, or failing) before it yields.
const perfMaxDwell = 4

type perfEventState uint8

const (
	perfEventUnprobed perfEventState = iota
	perfEventOK
	perfEventDisabled
)

type perfSample struct{ value, enabled, running uint64 }

// perfTenantCounters are one tenant's open descriptors and its last reading.
type perfTenantCounters struct {
	id        string
	dir       string // its directory in the perf_event hierarchy
	cpus      []int
	fds       [][]PerfFD     // [event][cpu]; nil row for a disabled event
	prev      [][]perfSample // last reading, same shape
	valid     []bool         // per event: prev is a baseline to subtract
	prevAt    time.Time
	reads     int    // Reads since opened
	openedSeq uint64 // the Sync that opened it
}

// PerfCounters counts perf events per tenant in cgroup mode, holding at most
// budget descriptors. It is safe for concurrent use.
//
// Descriptor accounting: one descriptor per (tenant, event, CPU); a tenant
// costs enabled events × its CPUs. FDs() is the number of perf descriptors
// open, which never exceeds the budget; descriptors are always closed before
// others are opened. During Sync one more descriptor (the cgroup directory of
// the tenant being opened) is open for a moment; the kernel keeps its own
// reference to the cgroup, so it is closed right away.
type PerfCounters struct {
	mu     sync.Mutex
	h      *host.Host
	root   string // perf_event hierarchy mount on the host
	opener PerfOpener
	events []PerfEvent
	state  []perfEventState
	budget int
	now    func() time.Time // injectable clock (tests)

	open      map[string]*perfTenantCounters
	lastRated map[string]uint64 // tenant ID → the Sync during which it last produced a rate
	fds       int
	seq       uint64
	online    cpuset.Set
	warned    map[string]bool
	pending   []error // warnings from NewPerfCounters, returned by the first Sync
	closed    bool
}

// NewPerfCounters prepares counting of events for the tenants Sync will be
// given. The cgroup directories are taken from the perf_event hierarchy: the
// v1 perf_event mount if there is one, else the cgroup2 mount (where the
// perf_event controller is always implicitly enabled). budget is the most
// perf descriptors held at once; it is lowered to stay perfFDReserve below
// the process's RLIMIT_NOFILE (Go raises the soft limit to the hard one at
// start-up), with a warning returned by the first Sync.
func NewPerfCounters(h *host.Host, l cgroup.Layout, events []PerfEvent, budget int, opener PerfOpener) (*PerfCounters, error) {
	if h == nil || opener == nil {
		return nil, errors.New("perf counters: nil host or opener")
	}
	root := l.V1["perf_event"]
	if root == "" {
		root = l.V2
	}
	if root == "" {
		return nil, errors.New("perf counters: no perf_event cgroup hierarchy (neither a v1 perf_event mount nor cgroup2)")
	}
	if budget <= 0 {
		return nil, fmt.Errorf("perf counters: budget %d: must be positive", budget)
	}
	if len(events) == 0 {
		return nil, errors.New("perf counters: no events")
	}
	seen := map[string]bool{}
	for _, e := range events {
		if e.Name == "" || seen[e.Name] {
			return nil, fmt.Errorf("perf counters: event name %q empty or repeated", e.Name)
		}
		seen[e.Name] = true
	}
	p := &PerfCounters{
		h: h, root: root, opener: opener,
		events:    slices.Clone(events),
		state:     make([]perfEventState, len(events)),
		budget:    budget,
		now:       time.Now,
		open:      map[string]*perfTenantCounters{},
		lastRated: map[string]uint64{},
		warned:    map[string]bool{},
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil && rl.Cur != unix.RLIM_INFINITY {
		limit := int(rl.Cur) - perfFDReserve
		if rl.Cur <= 2*perfFDReserve {
			limit = int(rl.Cur) / 2
		}
		if budget > limit {
			p.budget = max(limit, 1)
			p.pending = append(p.pending, fmt.Errorf("perf counters: budget %d lowered to %d: RLIMIT_NOFILE is %d (raise it with ulimit -n / LimitNOFILE=)", budget, p.budget, rl.Cur))
		}
	}
	return p, nil
}

// SetClock replaces the clock that times rates between Reads (default
// time.Now); the simulator's is virtual.
func (p *PerfCounters) SetClock(now func() time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.now = now
}

// Budget is the most perf descriptors held at once.
func (p *PerfCounters) Budget() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.budget
}

// FDs is the number of perf descriptors open now.
func (p *PerfCounters) FDs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fds
}

// Events lists the events still counted (those not disabled).
func (p *PerfCounters) Events() []PerfEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []PerfEvent
	for i, e := range p.events {
		if p.state[i] != perfEventDisabled {
			out = append(out, e)
		}
	}
	return out
}

// Counted lists the tenants with open counters now, sorted.
func (p *PerfCounters) Counted() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.open))
}

// perfCandidate is a tenant Sync may count.
type perfCandidate struct {
	t    Tenant
	cpus []int
	cost int
	prio int
}

// Sync makes the counted set follow the tenants, given most important first
// (suspects, then by CPU use). It closes the counters of tenants that are
// gone (or whose CPUs changed), then opens counters for the tenants it
// chooses, never holding more than the budget:
//
//   - when every tenant fits, all are counted;
//   - otherwise the head — the longest prefix of tenants that fits in half
//     the budget — is counted every interval, and the others take turns in
//     the remaining descriptors (a watchlist): a rotating tenant keeps its
//     counters until it has produced one rate (two Reads), then yields to the
//     tenants counted longest ago (never-counted first, in priority order).
//     With R descriptors left to rotation, k = R / cost tenants rotate at a
//     time, so each of n rotating tenants is counted every 2·⌈n/k⌉ intervals.
//
// The returned error lists warnings (errors.Join); counting goes on with what
// could be opened. An event the host cannot count is disabled for all
// tenants, reported once as a *PerfEventDisabledError. A tenant whose cgroup
// vanished is dropped quietly.
//
// Sync and Read make only perf_event syscalls and cgroupfs reads, which do
// not block, so they do not consult ctx.
func (p *PerfCounters) Sync(_ context.Context, tenants []Tenant) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("perf counters: closed")
	}
	p.seq++
	warn := p.pending
	p.pending = nil

	if s, err := p.h.ReadString("/sys/devices/system/cpu/online"); err == nil {
		if set, err := cpuset.Parse(s); err == nil && !set.IsEmpty() {
			p.online = set
		}
	}
	if stop, err := p.probe(); err != nil {
		warn = append(warn, err)
		if stop {
			return errors.Join(warn...)
		}
	}
	nEvents := 0
	for _, s := range p.state {
		if s != perfEventDisabled {
			nEvents++
		}
	}

	// Who could be counted, and at what cost.
	cands := make([]perfCandidate, 0, len(tenants))
	alive := make(map[string]bool, len(tenants))
	for i, t := range tenants {
		if t.ID == "" || alive[t.ID] {
			continue
		}
		alive[t.ID] = true
		cpus := t.CPUs
		if cpus.IsEmpty() {
			cpus = p.online
		} else if !p.online.IsEmpty() {
			cpus = cpus.Intersect(p.online)
		}
		if cpus.IsEmpty() {
			if p.online.IsEmpty() {
				warn = p.warnOnce(warn, "online", fmt.Errorf("perf counters: tenant %s has no cpuset and %s is unreadable", t.ID, p.h.Path("/sys/devices/system/cpu/online")))
			}
			continue
		}
		c := perfCandidate{t: t, cpus: cpus.List(), prio: i}
		c.cost = nEvents * len(c.cpus)
		if c.cost > p.budget {
			warn = p.warnOnce(warn, "cost:"+t.ID, fmt.Errorf("perf counters: tenant %s needs %d descriptors (%d events × %d CPUs), more than the budget of %d: not counted", t.ID, c.cost, nEvents, len(c.cpus), p.budget))
			continue
		}
		cands = append(cands, c)
	}
	for id := range p.lastRated {
		if !alive[id] {
			delete(p.lastRated, id)
		}
	}
	for id, tc := range p.open {
		c := findPerfCandidate(cands, id)
		if c == nil || !slices.Equal(c.cpus, tc.cpus) || tc.dir != p.dir(c.t) {
			p.closeTenant(tc)
		}
	}
	if nEvents == 0 { // every event disabled: nothing left to count
		for _, tc := range p.open {
			p.closeTenant(tc)
		}
		return errors.Join(warn...)
	}

	want := p.plan(cands)
	wanted := make(map[string]bool, len(want))
	for _, c := range want {
		wanted[c.t.ID] = true
	}
	for id, tc := range p.open {
		if !wanted[id] {
			p.closeTenant(tc)
		}
	}
	for _, c := range want {
		if p.open[c.t.ID] != nil {
			continue
		}
		cost := p.cost(len(c.cpus)) // events may have been disabled meanwhile
		if cost == 0 {
			break
		}
		if p.fds+cost > p.budget {
			continue
		}
		stop, err := p.openTenant(c)
		if err != nil {
			warn = append(warn, err)
		}
		if stop {
			break
		}
	}
	return errors.Join(warn...)
}

func findPerfCandidate(cands []perfCandidate, id string) *perfCandidate {
	for i := range cands {
		if cands[i].t.ID == id {
			return &cands[i]
		}
	}
	return nil
}

func (p *PerfCounters) cost(ncpu int) int {
	n := 0
	for _, s := range p.state {
		if s != perfEventDisabled {
			n++
		}
	}
	return n * ncpu
}

// plan chooses the tenants to count this interval, in opening order.
func (p *PerfCounters) plan(cands []perfCandidate) []perfCandidate {
	total := 0
	for _, c := range cands {
		total += c.cost
	}
	if total <= p.budget {
		return cands
	}
	var want []perfCandidate
	used, i := 0, 0
	for ; i < len(cands) && used+cands[i].cost <= p.budget/2; i++ {
		used += cands[i].cost
		want = append(want, cands[i])
	}
	rest := cands[i:]
	left := p.budget - used
	chosen := map[string]bool{}
	// Rotating tenants that have not produced their rate yet keep their turn.
	for _, c := range rest {
		tc := p.open[c.t.ID]
		if tc != nil && tc.reads < 2 && p.seq-tc.openedSeq < perfMaxDwell && c.cost <= left {
			want = append(want, c)
			chosen[c.t.ID] = true
			left -= c.cost
		}
	}
	// Then those counted longest ago; never counted (0) first, in priority order.
	order := slices.Clone(rest)
	slices.SortStableFunc(order, func(a, b perfCandidate) int {
		return cmp.Compare(p.lastRated[a.t.ID], p.lastRated[b.t.ID])
	})
	for _, c := range order {
		if !chosen[c.t.ID] && c.cost <= left {
			want = append(want, c)
			chosen[c.t.ID] = true
			left -= c.cost
		}
	}
	return want
}

func (p *PerfCounters) dir(t Tenant) string {
	cg := t.Cgroup
	if cg == "" {
		cg = t.ID
	}
	return path.Join(p.root, path.Clean("/"+cg))
}

// attr is the perf_event_attr for a cgroup-mode counter. Enabled at open (not
// PerfBitDisabled), so a freshly opened counter starts at zero. exclude_hv is
// set (it only means something on PowerPC and s390). The kernel and the guest
// are NOT excluded: a tenant's system calls, page faults and network stack
// are work it makes the host do, and a VM tenant's vCPU threads run guest
// code, which is precisely what pollutes the caches and the bus. Excluding
// the kernel would only be needed for an unprivileged agent with
// perf_event_paranoid ≥ 2 — but cgroup mode is CPU-wide and needs
// CAP_PERFMON (or paranoid ≤ 0) anyway, and the agent runs as root.
func (e PerfEvent) attr() unix.PerfEventAttr {
	return unix.PerfEventAttr{
		Type:        e.Type,
		Config:      e.Config,
		Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Read_format: unix.PERF_FORMAT_TOTAL_TIME_ENABLED | unix.PERF_FORMAT_TOTAL_TIME_RUNNING,
		Bits:        unix.PerfBitExcludeHv,
	}
}

// Open flags of a cgroup-mode counter.
const perfCgroupFlags = unix.PERF_FLAG_PID_CGROUP | unix.PERF_FLAG_FD_CLOEXEC

// probe decides, once per event, whether the host can count it at all by
// opening it CPU-wide (pid -1) on the first online CPU and closing it again.
// This tells "event unsupported" (ENOENT from a missing PMU, EOPNOTSUPP,
// EINVAL from a raw code the CPU rejects) apart from "cgroup gone", which
// perf_event_open also reports as ENOENT. stop is true when nothing can be
// opened now (no privilege, no descriptors).
func (p *PerfCounters) probe() (stop bool, err error) {
	cpu := 0
	if !p.online.IsEmpty() {
		cpu = p.online.First()
	}
	var warn []error
	for i, e := range p.events {
		if p.state[i] != perfEventUnprobed {
			continue
		}
		a := e.attr()
		fd, err := p.opener.Open(&a, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err == nil {
			fd.Close()
			p.state[i] = perfEventOK
			continue
		}
		switch {
		case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
			return true, fmt.Errorf("perf counters: not allowed to open %s CPU-wide (needs root or CAP_PERFMON, or perf_event_paranoid ≤ 0): %w", e.Name, err)
		case errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE):
			return true, fmt.Errorf("perf counters: probing %s: %w", e.Name, err)
		default:
			p.state[i] = perfEventDisabled
			warn = append(warn, &PerfEventDisabledError{Event: e.Name, Err: err})
		}
	}
	return false, errors.Join(warn...)
}

// openTenant opens every enabled event on every CPU of the tenant. stop says
// to open nothing more in this Sync.
func (p *PerfCounters) openTenant(c perfCandidate) (stop bool, err error) {
	tc := &perfTenantCounters{
		id:        c.t.ID,
		dir:       p.dir(c.t),
		cpus:      c.cpus,
		fds:       make([][]PerfFD, len(p.events)),
		prev:      make([][]perfSample, len(p.events)),
		valid:     make([]bool, len(p.events)),
		openedSeq: p.seq,
	}
	f, err := p.h.OpenFile(tc.dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
			return false, nil // vanished between discovery and now
		}
		return false, fmt.Errorf("perf counters: tenant %s: %w", c.t.ID, err)
	}
	defer f.Close()
	cgfd := int(f.Fd())
	// Register first so that disabling an event also closes this tenant's row.
	p.open[tc.id] = tc
	for i, e := range p.events {
		if p.state[i] == perfEventDisabled {
			continue
		}
		a := e.attr()
		row := make([]PerfFD, len(tc.cpus))
		for ci, cpu := range tc.cpus {
			fd, oerr := p.opener.Open(&a, cgfd, cpu, -1, perfCgroupFlags)
			if oerr == nil {
				row[ci] = fd
				p.fds++
				tc.fds[i] = row // keep partial rows accounted for closing
				continue
			}
			for _, fd := range row[:ci] {
				if fd != nil {
					fd.Close()
					p.fds--
				}
			}
			tc.fds[i] = nil
			switch {
			case errors.Is(oerr, unix.ENOENT) || errors.Is(oerr, unix.EBADF):
				// The event opened CPU-wide, so this is the cgroup: removed
				// (its css is offline), or a directory outside the perf_event
				// hierarchy (which would be a layout bug: say so once).
				p.closeTenant(tc)
				if _, serr := p.h.Stat(tc.dir); serr != nil {
					return false, err
				}
				return false, joinPerfErr(err, p.warnErr("hierarchy", fmt.Errorf("perf counters: %s is not a cgroup of the perf_event hierarchy (%w); tenants there are not counted", p.h.Path(tc.dir), oerr)))
			case errors.Is(oerr, unix.EOPNOTSUPP) || errors.Is(oerr, unix.ENOSPC) || errors.Is(oerr, unix.EINVAL):
				// Countable CPU-wide but not per cgroup here (or the PMU cannot
				// schedule it): disable for everyone, keep the other events.
				err = joinPerfErr(err, p.disable(i, oerr))
			case errors.Is(oerr, unix.EMFILE) || errors.Is(oerr, unix.ENFILE):
				// Out of descriptors: a property of the process, not of the
				// event, so the budget shrinks to what is open now instead.
				p.closeTenant(tc)
				p.budget = max(p.fds, 1)
				return true, joinPerfErr(err, fmt.Errorf("perf counters: %w opening %s for %s: budget lowered to %d descriptors", oerr, e.Name, c.t.ID, p.budget))
			case errors.Is(oerr, unix.EACCES) || errors.Is(oerr, unix.EPERM):
				p.closeTenant(tc)
				return true, joinPerfErr(err, fmt.Errorf("perf counters: not allowed to open cgroup-mode %s (needs root or CAP_PERFMON): %w", e.Name, oerr))
			default:
				// ENODEV (the CPU went offline) and the unexpected: skip the
				// tenant this time, retry at the next Sync.
				p.closeTenant(tc)
				return false, joinPerfErr(err, fmt.Errorf("perf counters: tenant %s, %s on CPU %d: %w", c.t.ID, e.Name, cpu, oerr))
			}
			break
		}
		if tc.fds[i] != nil {
			tc.prev[i] = make([]perfSample, len(tc.cpus))
		}
	}
	return false, err
}

// disable stops counting event i for every tenant, closing its descriptors.
func (p *PerfCounters) disable(i int, cause error) error {
	if p.state[i] == perfEventDisabled {
		return nil
	}
	p.state[i] = perfEventDisabled
	for _, tc := range p.open {
		p.closeRow(tc, i)
	}
	return &PerfEventDisabledError{Event: p.events[i].Name, Err: cause}
}

func (p *PerfCounters) closeRow(tc *perfTenantCounters, i int) {
	for _, fd := range tc.fds[i] {
		if fd != nil {
			fd.Close()
			p.fds--
		}
	}
	tc.fds[i], tc.prev[i], tc.valid[i] = nil, nil, false
}

func (p *PerfCounters) closeTenant(tc *perfTenantCounters) {
	for i := range tc.fds {
		p.closeRow(tc, i)
	}
	delete(p.open, tc.id)
}

// joinPerfErr is errors.Join that keeps a lone error as it is (so that
// errors.As finds a *PerfEventDisabledError without unwrapping a join).
func joinPerfErr(a, b error) error {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return errors.Join(a, b)
}

func (p *PerfCounters) warnErr(key string, err error) error {
	if p.warned[key] {
		return nil
	}
	p.warned[key] = true
	return err
}

func (p *PerfCounters) warnOnce(warn []error, key string, err error) []error {
	if e := p.warnErr(key, err); e != nil {
		warn = append(warn, e)
	}
	return warn
}

// Read returns, for each counted tenant that has a previous reading, the
// per-second rate of each event since that reading:
// map[tenantID]map[eventName]rate. A tenant counted for the first time gets
// its baseline now and a rate at the next Read.
//
// Per CPU, the delta is corrected for multiplexing: Δvalue·Δenabled/Δrunning.
// A CPU where Δenabled is 0 is one the tenant did not run on (cgroup time
// stands still there) and adds nothing. A CPU where the event was enabled but
// never running (Δrunning = 0: multiplexed out for the whole interval) is
// not measured; it is estimated from the tenant's measured CPUs at their
// per-enabled-time rate, and when no CPU was measured the event is omitted.
// The CPUs are then summed. task_clock is reported in seconds per second
// (CPUs used); every other event in events per second.
//
// Read errors are returned joined, the rates that could be read with them;
// the event concerned is omitted and re-baselined.
func (p *PerfCounters) Read(_ context.Context) (map[string]map[string]float64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("perf counters: closed")
	}
	now := p.now()
	out := make(map[string]map[string]float64)
	var errs []error
	var cur []perfSample
	for id, tc := range p.open {
		tc.reads++
		dt := now.Sub(tc.prevAt).Seconds()
		var rates map[string]float64
		for i, row := range tc.fds {
			if row == nil {
				continue
			}
			cur = cur[:0]
			var rerr error
			for ci, fd := range row {
				v, en, run, err := fd.Read()
				if err != nil {
					rerr = fmt.Errorf("perf counters: tenant %s, %s on CPU %d: %w", id, p.events[i].Name, tc.cpus[ci], err)
					break
				}
				cur = append(cur, perfSample{v, en, run})
			}
			if rerr != nil {
				errs = append(errs, rerr)
				tc.valid[i] = false
				continue
			}
			if tc.valid[i] && dt > 0 {
				if total, ok := perfCorrectedDelta(tc.prev[i], cur); ok {
					r := total / dt
					if e := p.events[i]; e.Type == unix.PERF_TYPE_SOFTWARE && (e.Config == unix.PERF_COUNT_SW_TASK_CLOCK || e.Config == unix.PERF_COUNT_SW_CPU_CLOCK) {
						r /= 1e9 // ns per second → CPUs
					}
					if rates == nil {
						rates = make(map[string]float64, len(tc.fds))
					}
					rates[p.events[i].Name] = r
				}
			}
			copy(tc.prev[i], cur)
			tc.valid[i] = true
		}
		if tc.reads >= 2 {
			p.lastRated[id] = p.seq
		}
		tc.prevAt = now
		if rates != nil {
			out[id] = rates
		}
	}
	return out, errors.Join(errs...)
}

// PerfSnapshot is the raw state of some of a tenant's counters at one
// moment (Snapshot): two of them give what it counted in between (Since),
// at any pace, without touching the interval's own rates.
type PerfSnapshot struct {
	At     time.Time
	events map[string][]perfSample // per event name, per CPU
}

// Snapshot reads the named events of tenant id now. ok is false when the
// tenant is not counted or none of the events could be read.
func (p *PerfCounters) Snapshot(id string, events ...string) (PerfSnapshot, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	tc := p.open[id]
	if p.closed || tc == nil {
		return PerfSnapshot{}, false
	}
	snap := PerfSnapshot{At: p.now(), events: make(map[string][]perfSample, len(events))}
	for i, row := range tc.fds {
		if row == nil || !slices.Contains(events, p.events[i].Name) {
			continue
		}
		cur := make([]perfSample, 0, len(row))
		for _, fd := range row {
			v, en, run, err := fd.Read()
			if err != nil {
				cur = nil
				break
			}
			cur = append(cur, perfSample{v, en, run})
		}
		if cur != nil {
			snap.events[p.events[i].Name] = cur
		}
	}
	return snap, len(snap.events) > 0
}

// Since is what each event counted between prev and s (corrected for
// multiplexing, summed over the CPUs), for the events both read.
func (s PerfSnapshot) Since(prev PerfSnapshot) map[string]float64 {
	out := map[string]float64{}
	for name, cur := range s.events {
		old, ok := prev.events[name]
		if !ok || len(old) != len(cur) {
			continue
		}
		if d, ok := perfCorrectedDelta(old, cur); ok {
			out[name] = d
		}
	}
	return out
}

// perfCorrectedDelta sums one event's multiplexing-corrected delta over the CPUs.
// ok is false when the event was not measured at all, or a counter went
// backwards (never expected: counters only grow).
func perfCorrectedDelta(prev, cur []perfSample) (float64, bool) {
	var sum, measuredEnabled, unmeasuredEnabled float64
	for ci := range cur {
		a, b := prev[ci], cur[ci]
		if b.value < a.value || b.enabled < a.enabled || b.running < a.running {
			return 0, false
		}
		dv := float64(b.value - a.value)
		de := float64(b.enabled - a.enabled)
		dr := float64(b.running - a.running)
		switch {
		case dr > 0:
			if de > dr {
				dv = dv * de / dr
			}
			sum += dv
			measuredEnabled += de
		case de > 0:
			unmeasuredEnabled += de
		default:
			sum += dv // did not run there: nothing to scale (dv is 0 in practice)
		}
	}
	if unmeasuredEnabled > 0 {
		if measuredEnabled == 0 {
			return 0, false
		}
		sum += sum / measuredEnabled * unmeasuredEnabled
	}
	return sum, true
}

// Close closes every counter. The PerfCounters cannot be used afterwards.
func (p *PerfCounters) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, tc := range p.open {
		for i, row := range tc.fds {
			for _, fd := range row {
				if fd != nil {
					if err := fd.Close(); err != nil {
						errs = append(errs, err)
					}
					p.fds--
				}
			}
			tc.fds[i] = nil
		}
	}
	p.open = map[string]*perfTenantCounters{}
	p.closed = true
	if len(errs) > 0 {
		return fmt.Errorf("perf counters: close: %w", errors.Join(errs...))
	}
	return nil
}

// String describes the counter set for logs.
func (p *PerfCounters) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var names []string
	for i, e := range p.events {
		if p.state[i] != perfEventDisabled {
			names = append(names, e.Name)
		}
	}
	return fmt.Sprintf("perf counters in %s: %d tenants, %d/%d fds, events %s", p.root, len(p.open), p.fds, p.budget, strings.Join(names, ","))
}
