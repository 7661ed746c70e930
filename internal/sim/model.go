package sim

import (
	"math"
	"math/bits"
	"slices"
	"time"
)

// Constants of the contention model, with where they come from. The
// package documentation explains how they combine.
const (
	// lineSize is a cache line.
	lineSize = 64

	// Bus locks: occupancy of the memory system U = (R/busLockSaturation)^busLockExponent,
	// R the host-wide bus-lock rate, capped at busLockMaxOccupancy; every
	// uncore access (LLC hit or DRAM) of every tenant waits 1/(1-U) as long.
	// Calibrated on FIELD-NOTES §3 (a 4 MiB pointer chase, 18.9 ns solo,
	// against a split-lock loop doing 674-754 k locks/s): unlimited 9×
	// (U = 0.889 at 684 k/s), 50% CFS quota 1.7× (model 1.6×), a quota
	// leaving 0.1 M locks/s 1.0× (model 1.09×), 2% no effect (model 1.00×).
	// The exponent is what makes relief non-linear in the polluter's duty;
	// the cap is the lab's worst reading (18.4×). Alita's 70 k/s host budget
	// gives U = 0.058 (1.06×).
	busLockSaturation   = 7.54e5
	busLockExponent     = 1.2
	busLockMaxOccupancy = 0.95

	// LLC and DRAM latencies in core cycles at the maximum frequency:
	// Kyoto §2.2.4 (lmbench on a Xeon E5 v3: 45 cycles for the LLC, 180 for
	// main memory).
	llcCycles  = 45.0
	dramCycles = 180.0
	// hitCeiling is the best LLC hit ratio (compulsory and coherence misses).
	hitCeiling = 0.998

	// Memory bandwidth: loaded latency grows as 1 + bwQueueing·ρ/(1-ρ) with
	// the socket's utilisation ρ (an M/M/1-like knee, as in Intel MLC
	// loaded-latency curves: about 2× at 80%, 3× at 90%), ρ capped at
	// bwMaxUtilisation; demand beyond it is rate-limited, slowing every
	// memory-bound tenant of the socket in proportion.
	bwQueueing       = 0.25
	bwMaxUtilisation = 0.92
	// coreBandwidth is what one core can pull from DRAM (Skylake-SP about
	// 12-15 GB/s): Intel MBA's percentage throttles a tenant to that
	// fraction of it per core. AMD's MBA values are absolute (1/8 GB/s).
	coreBandwidth = 14e9
	amdMBAUnit    = 0.125e9

	// SMT: a busy sibling thread slows a thread's compute by this fraction
	// of its time (two threads of a core get about 1.25× one thread's work).
	smtPenalty = 0.6

	// Power: dynamic power scales as (f/fmax)^powerExponent (f·V² with V
	// roughly linear in f over the DVFS range, flattened by leakage).
	powerExponent = 2.5
	// Instructions per cycle of the compute part of a workload at the
	// maximum frequency; memory stalls retire next to nothing.
	computeIPC = 2.0
	stallIPC   = 0.1

	// Probe: the canary's locked add (FIELD-NOTES §3: 2.2 ns, about 3 ns
	// under a split-lock storm), its LLC chase (its timed walk is barely
	// longer than the warm-up, so only eviction within a walk costs
	// misses; it feels bus locks at probeLLCLockShare of the victim's
	// 9×: 5-7× measured) and its DRAM chase (every access flushed first).
	probeLockNs       = 2.2
	probeLockBusShare = 0.4
	probeLLCLockShare = 0.75

	// Temperature: ambient plus the package's heat plus the core's own.
	ambientC      = 35.0
	packageCPerW  = 0.12
	coreCPerW     = 2.5
	thermalTauSec = 3.0
)

// Levers are the throttles in force, as the simulator read them from the
// host tree the actuators write to.
type Levers struct {
	// Quota per tenant in CPUs (+Inf: unlimited).
	Quota []float64
	// Mask per tenant and socket: its L3 way mask (0: every way).
	Mask [][]uint64
	// MBA per tenant and socket: Intel percentage (1-100; 0 or 100: none),
	// or on AMD an absolute limit in 1/8 GB/s units shared by its group.
	MBA [][]float64
	// MBAGroup per tenant and socket: tenants with the same group share an
	// AMD limit (the resctrl group's name; "" for the root group).
	MBAGroup [][]string
	// MaxMHz per CPU (scaling_max_freq; 0 or above the maximum: none).
	MaxMHz []float64
	// Duty per CPU: clock-modulation duty (0 or 1: off).
	Duty []float64
}

// NewLevers returns levers with nothing throttled.
func NewLevers(ntenants, ncpus, sockets int) *Levers {
	lv := &Levers{Quota: make([]float64, ntenants), Mask: make([][]uint64, ntenants), MBA: make([][]float64, ntenants),
		MBAGroup: make([][]string, ntenants), MaxMHz: make([]float64, ncpus), Duty: make([]float64, ncpus)}
	for i := range lv.Quota {
		lv.Quota[i] = math.Inf(1)
		lv.Mask[i] = make([]uint64, sockets)
		lv.MBA[i] = make([]float64, sockets)
		lv.MBAGroup[i] = make([]string, sockets)
	}
	for c := range lv.Duty {
		lv.Duty[c] = 1
	}
	return lv
}

// Rates are a tenant's counters per second.
type Rates struct {
	TaskClock    float64 // CPUs used (seconds per second)
	Cycles       float64 // unhalted core cycles
	RefCycles    float64 // reference cycles (TSC rate while running)
	Instructions float64
	LLCRefs      float64
	LLCMisses    float64
	BusLocks     float64
	ContextSw    float64
}

// TenantState is one tenant's modelled state during a step.
type TenantState struct {
	Active bool
	Phase  int
	// Want and Alloc are CPUs wanted and obtained; Throttled is the
	// fraction of time its quota held it back; Waiting is CPUs' worth of
	// runnable-but-not-running time (run delay).
	Want, Alloc, Throttled, Waiting float64
	// Progress is work per second (1 = one CPU-second of its ideal
	// execution); Solo is what it would do alone on the host; Rel = Progress/Solo.
	Progress, Solo, Rel float64
	Hit                 float64   // LLC hit ratio
	Occupancy           []float64 // bytes per socket
	Traffic             []float64 // DRAM bytes per second per socket
	Power               float64   // watts of its CPUs
	MHz                 float64   // mean effective frequency over its CPU time (clock modulation included)
	Rates               Rates
	// dramLimit per socket is how much longer its DRAM accesses take
	// because MBA throttles it (≥ 1), carried from step to step: the
	// factor at which its bandwidth is the MBA cap.
	dramLimit []float64
}

// HostState is the host's modelled state during a step.
type HostState struct {
	BusOccupancy float64   // U
	SocketMHz    []float64 // the power-limited frequency of each socket
	SocketPower  []float64 // watts
	SocketBW     []float64 // DRAM bytes per second
	BWLatency    []float64 // loaded-latency factor per socket
	CharTime     []float64 // Che characteristic time of the root group's ways, seconds (+Inf: all fits)
	CPUMHz       []float64 // frequency of each CPU (before clock modulation)
	CPUDuty      []float64 // clock-modulation duty of each CPU (1: off)
	CPUBusy      []float64
	CPUPower     []float64
	CPUTemp      []float64 // °C, with thermal lag
}

// State is the model's output for one step.
type State struct {
	At      time.Duration
	Host    HostState
	Tenants []TenantState
}

// Model is the contention model of one machine and its tenants.
type Model struct {
	m       Machine
	ncpu    int
	socket  []int // socket of each CPU
	sibling []int // SMT sibling of each CPU, -1 without SMT
	cores   []int // CPUs per socket
	tenants []*Tenant
	// per tenant: its CPUs and their share per socket
	cpus    [][]int
	frac    [][]float64
	fmax    float64
	waySize float64 // lines per way
	full    uint64
	amd     bool

	solo  map[[2]int]float64 // (tenant, phase) → solo progress
	ideal map[[2]int]float64 // (tenant, phase) → reference memory stall time per access
}

// NewModel prepares the model of a validated scenario's machine and tenants.
func NewModel(m Machine, tenants []*Tenant) *Model {
	md := &Model{m: m, ncpu: m.CPUs(), tenants: tenants, fmax: float64(m.MaxMHz),
		solo: map[[2]int]float64{}, ideal: map[[2]int]float64{}}
	md.amd = cpuModels[m.CPU].vendor == "AuthenticAMD"
	perThread := m.Sockets * m.CoresPerSocket
	for c := 0; c < md.ncpu; c++ {
		md.socket = append(md.socket, (c%perThread)/m.CoresPerSocket)
		sib := -1
		if m.ThreadsPerCore == 2 {
			sib = (c + perThread) % md.ncpu
		}
		md.sibling = append(md.sibling, sib)
	}
	md.waySize = float64(m.L3Size) / float64(m.L3Ways) / lineSize
	md.full = 1<<uint(m.L3Ways) - 1
	for _, t := range tenants {
		cs := t.CPUSet.List()
		md.cpus = append(md.cpus, cs)
		f := make([]float64, m.Sockets)
		for _, c := range cs {
			f[md.socket[c]] += 1 / float64(len(cs))
		}
		md.frac = append(md.frac, f)
	}
	return md
}

// Socket returns the socket of a CPU.
func (md *Model) Socket(cpu int) int { return md.socket[cpu] }

// Solve computes the state at time at, given the levers in force and the
// previous state (its relative speeds warm-start the fixed point; nil for
// the first step).
func (md *Model) Solve(at time.Duration, lv *Levers, prev *State, dt time.Duration) *State {
	st := &State{At: at, Tenants: make([]TenantState, len(md.tenants))}
	var active []int
	for i, t := range md.tenants {
		ts := &st.Tenants[i]
		ts.Active = t.Active(at)
		if !ts.Active {
			continue
		}
		ts.Phase = t.PhaseAt(at)
		if prev != nil && prev.Tenants[i].Active && prev.Tenants[i].dramLimit != nil {
			ts.dramLimit = append([]float64(nil), prev.Tenants[i].dramLimit...)
		}
		ts.Solo = md.soloProgress(i, ts.Phase)
		ts.Rel = 1
		if ts.Solo == 0 {
			ts.Rel = 0 // it wants no CPU: it does nothing
		} else if prev != nil && prev.Tenants[i].Active && prev.Tenants[i].Rel > 0 {
			ts.Rel = prev.Tenants[i].Rel
		}
		active = append(active, i)
	}
	md.solve(st, active, lv, 12)
	// Thermal lag.
	a := 1.0
	if prev != nil {
		a = 1 - math.Exp(-dt.Seconds()/thermalTauSec)
	}
	for c := range st.Host.CPUTemp {
		target := st.Host.CPUTemp[c]
		if prev != nil {
			st.Host.CPUTemp[c] = prev.Host.CPUTemp[c] + a*(target-prev.Host.CPUTemp[c])
		}
	}
	return st
}

// soloProgress is tenant i's progress in phase k running alone on the host
// with nothing throttled: the reference of its slowdown.
func (md *Model) soloProgress(i, k int) float64 {
	key := [2]int{i, k}
	if p, ok := md.solo[key]; ok {
		return p
	}
	st := &State{Tenants: make([]TenantState, len(md.tenants))}
	// Alone it does exactly its declared rates (that is what they mean):
	// Solo 0 pins Rel at 1.
	st.Tenants[i] = TenantState{Active: true, Phase: k, Rel: 1}
	lv := NewLevers(len(md.tenants), md.ncpu, md.m.Sockets)
	md.solve(st, []int{i}, lv, 1)
	p := st.Tenants[i].Progress
	md.solo[key] = p
	return p
}

// idealStall is tenant i's memory time per access in phase k in its ideal
// reference: alone, its working set against the whole LLC, no bandwidth
// load, no bus locks. MemoryBound is defined against it.
func (md *Model) idealStall(i, k int) float64 {
	key := [2]int{i, k}
	if s, ok := md.ideal[key]; ok {
		return s
	}
	b := md.tenants[i].Phases[k]
	h := hitCeiling
	if b.WorkingSet > 0 && b.LLCRefs > 0 {
		capLines := md.waySize * float64(md.m.L3Ways)
		ws := b.WorkingSet / lineSize
		if ws > capLines {
			// Alone, its whole reference stream competes with itself only:
			// the characteristic time fills the cache with its own lines.
			T := cheTime([]cheUser{{a: b.LLCRefs, ws: ws}}, capLines, 0)
			h = hitRatio(b.LLCRefs, ws, T)
		}
	}
	s := h*llcCycles + (1-h)*dramCycles
	md.ideal[key] = s
	return s
}

type cheUser struct {
	a, ws float64 // accesses per second, working set in lines
}

// cheTime solves Che's approximation for an LRU-like cache of capacity
// lines shared by users: the characteristic time T at which the distinct
// lines the users touch, Σ ws·(1-exp(-a·T/ws)), fill the cache. +Inf when
// every working set fits. warm is a starting guess (0: none).
func cheTime(us []cheUser, capacity, warm float64) float64 {
	total := 0.0
	rate := 0.0
	for _, u := range us {
		if u.a > 0 && u.ws > 0 {
			total += u.ws
			rate += u.a
		}
	}
	if total <= capacity || rate == 0 {
		return math.Inf(1)
	}
	f := func(T float64) (v, d float64) {
		for _, u := range us {
			if u.a <= 0 || u.ws <= 0 {
				continue
			}
			e := math.Exp(-u.a * T / u.ws)
			v += u.ws * (1 - e)
			d += u.a * e
		}
		return v - capacity, d
	}
	// F is increasing and concave in T; bracket, then safeguarded Newton.
	lo, hi := 0.0, capacity/rate
	for {
		v, _ := f(hi)
		if v >= 0 {
			break
		}
		lo, hi = hi, hi*4
		if hi > 1e9 {
			return math.Inf(1)
		}
	}
	T := hi / 2
	if warm > lo && warm < hi && !math.IsInf(warm, 0) {
		T = warm
	}
	for range 60 {
		v, d := f(T)
		if math.Abs(v) <= 1e-6*capacity {
			return T
		}
		if v > 0 {
			hi = T
		} else {
			lo = T
		}
		next := T - v/d
		if d <= 0 || next <= lo || next >= hi {
			next = (lo + hi) / 2
		}
		T = next
	}
	return T
}

// hitRatio of a user with a accesses/s over ws lines at characteristic time T.
func hitRatio(a, ws, T float64) float64 {
	if ws <= 0 || a <= 0 || math.IsInf(T, 1) {
		return hitCeiling
	}
	return min(hitCeiling, 1-math.Exp(-a*T/ws))
}

// solve runs the fixed point for the active tenants of st (Rel and Solo
// set) under the levers.
func (md *Model) solve(st *State, active []int, lv *Levers, iters int) {
	m := md.m
	S := m.Sockets
	h := &st.Host
	h.SocketMHz = make([]float64, S)
	h.SocketPower = make([]float64, S)
	h.SocketBW = make([]float64, S)
	h.BWLatency = make([]float64, S)
	h.CharTime = make([]float64, S)
	h.CPUMHz = make([]float64, md.ncpu)
	h.CPUDuty = make([]float64, md.ncpu)
	for c := range h.CPUDuty {
		h.CPUDuty[c] = duty(lv.Duty[c])
	}
	h.CPUBusy = make([]float64, md.ncpu)
	h.CPUPower = make([]float64, md.ncpu)
	h.CPUTemp = make([]float64, md.ncpu)

	// 1. CPU time: each tenant's demand (capped by its quota) is spread
	// over its CPUs; an oversubscribed CPU is shared as CFS shares it
	// among tenants of equal weight, max-min fairly: a tenant that wants
	// less than an equal share gets all it wants, and those that want more
	// split the rest equally (level: see waterLevel).
	load := make([]float64, md.ncpu)
	demands := make([][]float64, md.ncpu)
	for _, i := range active {
		ts := &st.Tenants[i]
		b := md.tenants[i].Phases[ts.Phase]
		ts.Want = b.CPU * float64(len(md.tenants[i].VCPUs))
		eff := min(ts.Want, lv.Quota[i])
		if ts.Want > 0 && lv.Quota[i] < ts.Want {
			ts.Throttled = 1 - lv.Quota[i]/ts.Want
		}
		per := eff / float64(len(md.cpus[i]))
		for _, c := range md.cpus[i] {
			load[c] += per
			demands[c] = append(demands[c], per)
		}
	}
	level := make([]float64, md.ncpu)
	for c := range level {
		level[c] = waterLevel(demands[c], 1)
	}
	// got is the CPU time a tenant wanting per of CPU c gets there.
	got := func(per float64, c int) float64 { return min(per, level[c]) }
	for c := range load {
		h.CPUBusy[c] = min(1, load[c])
	}
	// Power at the maximum frequency per CPU (clock modulation gates the clock).
	pw := make([]float64, md.ncpu)
	for _, i := range active {
		ts := &st.Tenants[i]
		b := md.tenants[i].Phases[ts.Phase]
		eff := min(ts.Want, lv.Quota[i])
		per := eff / float64(len(md.cpus[i]))
		perW := b.Power / float64(len(md.tenants[i].VCPUs))
		for _, c := range md.cpus[i] {
			g := got(per, c)
			ts.Alloc += g
			ts.Waiting += per - g
			pw[c] += g * perW * duty(lv.Duty[c])
		}
	}

	// 2. Frequency: a socket over its TDP lowers every core's frequency
	// until it fits; scaling_max_freq caps single CPUs below that.
	fmin := float64(m.MinMHz)
	capOf := func(c int) float64 {
		if x := lv.MaxMHz[c]; x > 0 && x < md.fmax {
			return max(x, fmin)
		}
		return md.fmax
	}
	socketPower := func(s int, f float64) float64 {
		p := float64(m.IdlePower)
		for c := 0; c < md.ncpu; c++ {
			if md.socket[c] == s && pw[c] > 0 {
				p += pw[c] * math.Pow(min(f, capOf(c))/md.fmax, powerExponent)
			}
		}
		return p
	}
	for s := 0; s < S; s++ {
		f := md.fmax
		if socketPower(s, f) > float64(m.TDP) {
			lo, hi := fmin, md.fmax
			for range 40 {
				mid := (lo + hi) / 2
				if socketPower(s, mid) > float64(m.TDP) {
					hi = mid
				} else {
					lo = mid
				}
			}
			f = lo
		}
		h.SocketMHz[s] = f
		h.SocketPower[s] = socketPower(s, f)
	}
	for c := 0; c < md.ncpu; c++ {
		h.CPUMHz[c] = min(h.SocketMHz[md.socket[c]], capOf(c))
		h.CPUPower[c] = pw[c] * math.Pow(h.CPUMHz[c]/md.fmax, powerExponent)
	}
	for c := 0; c < md.ncpu; c++ {
		h.CPUTemp[c] = ambientC + packageCPerW*h.SocketPower[md.socket[c]] + coreCPerW*(h.CPUPower[c]+cpuPowerOfSibling(h, md.sibling, c))
	}

	// Compute-time factor per tenant: frequency, clock modulation and SMT,
	// weighted by where its CPU time goes. Fixed for the memory iterations.
	compute := make([]float64, len(md.tenants))
	for _, i := range active {
		ts := &st.Tenants[i]
		if ts.Alloc <= 0 {
			compute[i] = 1
			ts.MHz = h.CPUMHz[md.cpus[i][0]]
			continue
		}
		eff := min(ts.Want, lv.Quota[i])
		per := eff / float64(len(md.cpus[i]))
		var num, mhz float64
		for _, c := range md.cpus[i] {
			w := got(per, c) / ts.Alloc
			f := h.CPUMHz[c] * duty(lv.Duty[c])
			smt := 1.0
			if sib := md.sibling[c]; sib >= 0 {
				smt += smtPenalty * h.CPUBusy[sib]
			}
			num += w * md.fmax / f * smt
			mhz += w * f
		}
		compute[i] = num
		ts.MHz = mhz
	}

	// 3. Memory: LLC by ways (CAT), DRAM bandwidth (MBA), bus locks —
	// a fixed point over the tenants' relative speeds.
	type regionUser struct {
		i int
		w float64 // share of its stream in this region
	}
	type region struct {
		lines float64
		users []regionUser
		T     float64
		root  bool // the root group's (full) mask covers it
	}
	regions := make([][]region, S)
	for s := 0; s < S; s++ {
		var masks []uint64
		idx := map[uint64]int{}
		for _, i := range active {
			if md.frac[i][s] == 0 {
				continue
			}
			mk := lv.Mask[i][s] & md.full
			if mk == 0 {
				mk = md.full
			}
			if _, ok := idx[mk]; !ok {
				idx[mk] = len(masks)
				masks = append(masks, mk)
			}
		}
		if _, ok := idx[md.full]; !ok {
			idx[md.full] = len(masks)
			masks = append(masks, md.full)
		}
		keyWays := map[uint64]int{}
		var keys []uint64
		for w := 0; w < m.L3Ways; w++ {
			var key uint64
			for k, mk := range masks {
				if mk&(1<<uint(w)) != 0 && k < 64 {
					key |= 1 << uint(k)
				}
			}
			if _, ok := keyWays[key]; !ok {
				keys = append(keys, key)
			}
			keyWays[key]++
		}
		for _, key := range keys {
			r := region{lines: float64(keyWays[key]) * md.waySize, root: key&(1<<uint(idx[md.full])) != 0}
			for _, i := range active {
				if md.frac[i][s] == 0 {
					continue
				}
				mk := lv.Mask[i][s] & md.full
				if mk == 0 {
					mk = md.full
				}
				if key&(1<<uint(idx[mk])) != 0 {
					r.users = append(r.users, regionUser{i: i, w: float64(keyWays[key]) / float64(bits.OnesCount64(mk))})
				}
			}
			regions[s] = append(regions[s], r)
		}
	}

	hit := make([][]float64, len(md.tenants))
	occ := make([][]float64, len(md.tenants))
	traffic := make([][]float64, len(md.tenants))
	limit := make([][]float64, len(md.tenants)) // MBA slow-down factor on DRAM time
	for _, i := range active {
		hit[i] = make([]float64, S)
		occ[i] = make([]float64, S)
		traffic[i] = make([]float64, S)
		if st.Tenants[i].dramLimit == nil {
			st.Tenants[i].dramLimit = make([]float64, S)
			for s := range st.Tenants[i].dramLimit {
				st.Tenants[i].dramLimit[s] = 1
			}
		}
		limit[i] = st.Tenants[i].dramLimit
	}
	capFactor := make([]float64, S)
	var us []cheUser
	damp := make([]float64, len(md.tenants))
	lastStep := make([]float64, len(md.tenants))
	for _, i := range active {
		damp[i] = 0.6
	}
	for it := 0; it < iters; it++ {
		worst := 0.0
		// LLC.
		for s := 0; s < S; s++ {
			for ri := range regions[s] {
				r := &regions[s][ri]
				us = us[:0]
				for _, u := range r.users {
					b := md.tenants[u.i].Phases[st.Tenants[u.i].Phase]
					a := b.LLCRefs * st.Tenants[u.i].Rel * md.frac[u.i][s] * u.w
					us = append(us, cheUser{a: a, ws: b.WorkingSet / lineSize * md.frac[u.i][s] * u.w})
				}
				r.T = cheTime(us, r.lines, r.T)
			}
			for _, i := range active {
				hit[i][s], occ[i][s] = 0, 0
			}
			for ri := range regions[s] {
				r := &regions[s][ri]
				for _, u := range r.users {
					b := md.tenants[u.i].Phases[st.Tenants[u.i].Phase]
					a := b.LLCRefs * st.Tenants[u.i].Rel * md.frac[u.i][s] * u.w
					ws := b.WorkingSet / lineSize * md.frac[u.i][s] * u.w
					hr := hitRatio(a, ws, r.T)
					hit[u.i][s] += u.w * hr
					if a > 0 {
						occ[u.i][s] += ws * min(1, hr/hitCeiling) * lineSize
					}
				}
			}
		}
		// DRAM bandwidth, with MBA limits.
		for s := 0; s < S; s++ {
			total := 0.0
			groupDemand := map[string]float64{}
			for _, i := range active {
				if md.frac[i][s] == 0 {
					continue
				}
				b := md.tenants[i].Phases[st.Tenants[i].Phase]
				traffic[i][s] = b.LLCRefs * st.Tenants[i].Rel * md.frac[i][s] * (1 - hit[i][s]) * lineSize
				if md.amd {
					groupDemand[lv.MBAGroup[i][s]] += traffic[i][s]
				}
			}
			for _, i := range active {
				if md.frac[i][s] == 0 {
					continue
				}
				v := lv.MBA[i][s]
				var capBW float64
				switch {
				case v <= 0:
				case md.amd:
					if g := groupDemand[lv.MBAGroup[i][s]]; g > 0 {
						capBW = v * amdMBAUnit * traffic[i][s] / g
					}
				case v < 100:
					n := float64(len(md.cpus[i])) * md.frac[i][s]
					capBW = v / 100 * coreBandwidth * n
				}
				got := traffic[i][s]
				switch {
				case capBW <= 0:
					limit[i][s] = 1
				case got > 0:
					// MBA delays its requests until it moves no more than
					// the cap: the factor on its DRAM time grows while its
					// bandwidth (which falls as it slows) is over the cap,
					// and shrinks back while it is under. Half-gain steps
					// keep the fixed point stable.
					limit[i][s] = max(1, limit[i][s]*math.Sqrt(got/capBW))
					got = min(got, capBW)
				}
				total += got
			}
			bw := float64(m.MemoryBandwidth)
			rho := total / bw
			capFactor[s] = max(1, rho/bwMaxUtilisation)
			rho = min(rho, bwMaxUtilisation)
			h.SocketBW[s] = min(total, bw*bwMaxUtilisation)
			h.BWLatency[s] = 1 + bwQueueing*rho/(1-rho)
		}
		// Bus locks, host-wide.
		locks := 0.0
		for _, i := range active {
			locks += md.tenants[i].Phases[st.Tenants[i].Phase].BusLocks * st.Tenants[i].Rel
		}
		h.BusOccupancy = busOccupancy(locks)
		stall := 1 / (1 - h.BusOccupancy)
		// Progress.
		for _, i := range active {
			ts := &st.Tenants[i]
			b := md.tenants[i].Phases[ts.Phase]
			mem := 0.0
			hitAvg := 0.0
			for s := 0; s < S; s++ {
				f := md.frac[i][s]
				if f == 0 {
					continue
				}
				hr := hit[i][s]
				dram := dramCycles * h.BWLatency[s] * max(limit[i][s], capFactor[s])
				mem += f * (hr*llcCycles + (1-hr)*dram) * stall
				hitAvg += f * hr
			}
			ts.Hit = hitAvg
			tm := (1-b.MemoryBound)*compute[i] + b.MemoryBound*mem/md.idealStall(i, ts.Phase)
			ts.Progress = ts.Alloc / tm
			if ts.Solo > 0 {
				// Damped update; a tenant whose speed feeds back on itself
				// strongly (a bus-locking tenant stalls on its own locks)
				// oscillates, so its step halves whenever it changes direction.
				d := ts.Progress/ts.Solo - ts.Rel
				if d*lastStep[i] < 0 {
					damp[i] *= 0.5
				}
				lastStep[i] = d
				ts.Rel += damp[i] * d
				worst = max(worst, math.Abs(d))
			}
		}
		if worst < 1e-5 {
			break
		}
	}

	// Outputs.
	for s := 0; s < S; s++ {
		h.CharTime[s] = math.Inf(1)
		for _, r := range regions[s] {
			if r.root {
				h.CharTime[s] = min(h.CharTime[s], r.T)
			}
		}
	}
	for _, i := range active {
		ts := &st.Tenants[i]
		b := md.tenants[i].Phases[ts.Phase]
		ts.Occupancy, ts.Traffic = occ[i], traffic[i]
		perW := b.Power / float64(len(md.tenants[i].VCPUs))
		per := min(ts.Want, lv.Quota[i]) / float64(len(md.cpus[i]))
		for _, c := range md.cpus[i] {
			if pw[c] > 0 {
				ts.Power += h.CPUPower[c] * got(per, c) * perW * duty(lv.Duty[c]) / pw[c]
			}
		}
		work := ts.Progress
		ts.Rates = Rates{
			TaskClock:    ts.Alloc,
			Cycles:       ts.Alloc * ts.MHz * 1e6,
			RefCycles:    ts.Alloc * md.fmax * 1e6,
			Instructions: work * md.fmax * 1e6 * (computeIPC*(1-b.MemoryBound) + stallIPC*b.MemoryBound),
			LLCRefs:      b.LLCRefs * ts.Rel,
			LLCMisses:    b.LLCRefs * ts.Rel * (1 - ts.Hit),
			BusLocks:     b.BusLocks * ts.Rel,
			ContextSw:    250 * ts.Alloc,
		}
	}
}

// waterLevel is the most CPU time any one demand gets when capacity is
// shared max-min fairly: every demand under it is met in full, and every
// demand over it gets it (+Inf when all demands fit).
func waterLevel(demands []float64, capacity float64) float64 {
	var total float64
	for _, d := range demands {
		total += d
	}
	if total <= capacity {
		return math.Inf(1)
	}
	ds := slices.Clone(demands)
	slices.Sort(ds)
	left := capacity
	for k, d := range ds {
		share := left / float64(len(ds)-k)
		if d >= share {
			return share
		}
		left -= d
	}
	return left // not reached: the demands exceed the capacity
}

// busOccupancy is the fraction of time bus locks hold the memory system at
// a host-wide rate of locks per second.
func busOccupancy(locks float64) float64 {
	if locks <= 0 {
		return 0
	}
	return min(busLockMaxOccupancy, math.Pow(locks/busLockSaturation, busLockExponent))
}

func duty(d float64) float64 {
	if d <= 0 || d > 1 {
		return 1
	}
	return d
}

func cpuPowerOfSibling(h *HostState, sibling []int, c int) float64 {
	if s := sibling[c]; s >= 0 {
		return h.CPUPower[s]
	}
	return 0
}
