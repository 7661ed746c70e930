package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/humanize"
	"github.com/crosstalk-project/crosstalk/internal/lab"
)

// This file draws the simulated suite's scenarios. Each run's scenario
// comes from its own seed alone, so any run of a suite can be replayed by
// itself (`crosstalk sim suite --seed S --runs 1`).

// Polluter kinds the generator draws.
const (
	PolluterBusLocks = "buslocks" // split or uncacheable locked accesses
	PolluterLLC      = "llc"      // an LLC thrasher: a working set larger than the L3, reused
	PolluterMemBW    = "membw"    // a streamer: memory bandwidth, every reference a miss
)

// Polluter timings the generator draws.
const (
	TimingWhole     = "whole"      // runs the whole run
	TimingLate      = "late"       // starts partway in
	TimingEarlyStop = "early-stop" // stops well before the end
	TimingPause     = "pause"      // goes idle for seconds and comes back
	// TimingBursty is on/off phases of a period of 5-200 ms at a duty of
	// 10-60%: a split-lock storm under the kernel's split-lock mitigation,
	// which puts the locking task to sleep after each lock.
	TimingBursty = "bursty"
)

// Placements of the polluter.
const (
	PlaceAlone         = "alone"          // on CPUs of its own
	PlaceWithBystander = "with-bystander" // sharing its CPUs with a bystander
	PlaceWithVictim    = "with-victim"    // sharing the victim's CPUs
)

// Victim kinds.
const (
	VictimCache  = "cache-sensitive" // a working set that fits the L3 and lives off it
	VictimMemory = "memory-bound"    // a large working set: DRAM latency and bandwidth
)

// Bystander shapes: innocents whose conviction is a false one.
const (
	BystanderSteady = "steady"       // steady CPU use
	BystanderBursty = "bursty"       // CPU in on/off bursts of seconds
	BystanderPhases = "phases"       // busy, quiet, busy again
	BystanderCache  = "cache"        // a small working set: a light cache user
	BystanderLLC    = "llc-moderate" // a moderate LLC user: some pressure, no pollution
)

// Drawn sets, for the generator and its coverage test.
var (
	SuitePolluters  = []string{PolluterBusLocks, PolluterLLC, PolluterMemBW}
	SuiteTimings    = []string{TimingWhole, TimingLate, TimingEarlyStop, TimingPause, TimingBursty}
	SuitePlacements = []string{PlaceAlone, PlaceWithBystander, PlaceWithVictim}
	SuiteVictims    = []string{VictimCache, VictimMemory}
	SuiteBystanders = []string{BystanderSteady, BystanderBursty, BystanderPhases, BystanderCache, BystanderLLC}
)

// SuiteCase is one drawn run and what was drawn, for the report and the
// scoring.
type SuiteCase struct {
	Seed  int64
	Class string // lab.ClassPolluter or lab.ClassControl
	// Victim, Polluter, Timing and Placement are the drawn kinds (the last
	// three empty in a control run); Rate is the polluter's declared
	// strength in words ("bus_locks 320k/s").
	Victim, Polluter, Rate, Timing, Placement string
	// Period and Duty are a bursty polluter's.
	Period time.Duration
	Duty   float64
	// Bystanders are their shapes, in order.
	Bystanders []string
	PMU        bool
	Noise      float64
	Scenario   *Scenario
	// Without is the same scenario with the polluter's pollution left out
	// (nil in a control run): in its place a tenant that uses the same CPU
	// time, when the polluter does, and touches nothing else. The victim's
	// slowdown under none there is what its neighbours' CPU use costs it,
	// and the polluter's harm is measured against it, so that sharing a
	// CPU fairly is not counted as pollution.
	Without *Scenario
	// Events are the polluter's start, stop, pause and resume (seconds
	// from the run's start), for the scoring. A bursty polluter runs from
	// its start to its stop: its off phases are part of its storm.
	Events []lab.TenantEvent
}

// Describe is the draw in one line.
func (c *SuiteCase) Describe() string {
	pmu := "no PMU"
	if c.PMU {
		pmu = "PMU"
	}
	by := "no bystanders"
	if len(c.Bystanders) > 0 {
		by = "bystanders " + strings.Join(c.Bystanders, ",")
	}
	head := fmt.Sprintf("%s, %d CPUs, %s, noise %.3f, %.0fs", c.Scenario.Machine.CPU, c.Scenario.Machine.CPUs(), pmu, c.Noise, c.Scenario.Duration.Seconds())
	if c.Class == lab.ClassControl {
		return fmt.Sprintf("control: %s; victim %s, %s", head, c.Victim, by)
	}
	timing := c.Timing
	if c.Timing == TimingBursty {
		timing += fmt.Sprintf(" (%s period, %.0f%% on)", c.Period, 100*c.Duty)
	}
	return fmt.Sprintf("%s; victim %s, polluter %s %s %s %s, %s", head, c.Victim, c.Polluter, c.Rate, timing, c.Placement, by)
}

// suiteGen draws one case.
type suiteGen struct {
	rng  *rand.Rand
	c    *SuiteCase
	sc   *Scenario
	l3   float64 // bytes
	dram float64 // bytes per second
	dur  time.Duration
}

// GenerateSuiteCase draws the case of a seed. The same seed always gives
// the same case.
func GenerateSuiteCase(seed int64) (*SuiteCase, error) {
	g := &suiteGen{rng: rand.New(rand.NewPCG(uint64(seed), 0x73696d7375697465))}
	c, err := g.draw(seed)
	if err != nil {
		return nil, fmt.Errorf("generate seed %d: %w", seed, err)
	}
	return c, nil
}

func (g *suiteGen) pick(options []string) string { return options[g.rng.IntN(len(options))] }

// uniform draws from [lo, hi); logUniform from [lo, hi) evenly over the
// orders of magnitude, so weak and strong rates are drawn alike.
func (g *suiteGen) uniform(lo, hi float64) float64 { return lo + (hi-lo)*g.rng.Float64() }
func (g *suiteGen) logUniform(lo, hi float64) float64 {
	return math.Exp(g.uniform(math.Log(lo), math.Log(hi)))
}

// at draws a time in [lo, hi) on a 100 ms grid.
func (g *suiteGen) at(lo, hi time.Duration) time.Duration {
	steps := int64((hi - lo) / (100 * time.Millisecond))
	if steps <= 0 {
		return lo
	}
	return lo + time.Duration(g.rng.Int64N(steps))*100*time.Millisecond
}

func f64(v float64) *float64 { return &v }

func (g *suiteGen) draw(seed int64) (*SuiteCase, error) {
	g.dur = time.Duration(20+g.rng.IntN(21)) * time.Second
	cores := 4 + g.rng.IntN(13)
	pmu := g.rng.IntN(4) == 0
	cpu := g.pick([]string{"skylakex", "icelakex", "cascadelakex", "zen3"})
	if pmu {
		// The bus-lock budget counts the Intel event.
		cpu = g.pick([]string{"skylakex", "icelakex", "cascadelakex"})
	}
	off := func() *bool { f := false; return &f }
	pmuOn := pmu
	// The quota is the only lever: the hosts a suite models are VMs
	// (no resctrl, RAPL, cpufreq or MSRs), some with a vPMU, so that what
	// is scored is the attribution, not a hardware policy.
	m := Machine{CPU: cpu, Sockets: 1, CoresPerSocket: cores, ThreadsPerCore: 1,
		Features: Features{PMU: &pmuOn, CAT: off(), MBA: off(), MBM: off(), RAPL: off(), CPUFreq: off(), MSR: off(), Hwmon: off()}}
	noise := math.Round(g.uniform(0.01, 0.08)*1000) / 1000
	g.sc = &Scenario{Name: fmt.Sprintf("gen-%d", seed), Duration: g.dur, Seed: uint64(seed), Noise: noise, Machine: m}
	if err := g.sc.Machine.validate(); err != nil { // fills the L3 and DRAM defaults
		return nil, err
	}
	g.l3, g.dram = float64(g.sc.Machine.L3Size), float64(g.sc.Machine.MemoryBandwidth)
	g.c = &SuiteCase{Seed: seed, PMU: pmu, Noise: noise, Bystanders: []string{}}
	c := g.c

	victimCPUs := 1 + g.rng.IntN(2)
	vFirst := cores - victimCPUs
	victim := g.victim(cpuRange(vFirst, cores))
	g.sc.Tenants = append(g.sc.Tenants, victim)

	nBystanders := g.rng.IntN(5)
	// Bystanders go on the CPUs neither the victim nor (when alone) the
	// polluter uses; the last ones may share with them when those are few.
	pool := seq(vFirst)
	if g.rng.IntN(5) == 0 {
		c.Class = lab.ClassControl
	} else {
		c.Class = lab.ClassPolluter
		c.Placement = g.pick(SuitePlacements)
		pcpus := 1 + g.rng.IntN(2)
		var where string
		switch c.Placement {
		case PlaceWithVictim:
			where = cpuRange(vFirst, cores)
		default:
			where = cpuRange(0, pcpus)
			if c.Placement == PlaceAlone {
				pool = pool[pcpus:]
			} else {
				nBystanders = max(nBystanders, 1)
			}
		}
		pol := g.polluter(where)
		c.Timing = g.timing(&pol)
		g.sc.Tenants = append(g.sc.Tenants, pol)
		if c.Placement == PlaceWithBystander {
			g.sc.Tenants = append(g.sc.Tenants, g.bystander(len(c.Bystanders)+1, where))
			nBystanders--
		}
	}
	for ; nBystanders > 0; nBystanders-- {
		where := fmt.Sprint(vFirst + g.rng.IntN(victimCPUs)) // no free CPU: beside the victim
		if len(pool) > 0 {
			where = fmt.Sprint(pool[g.rng.IntN(len(pool))])
		}
		g.sc.Tenants = append(g.sc.Tenants, g.bystander(len(c.Bystanders)+1, where))
	}

	var without *Scenario
	if c.Class == lab.ClassPolluter {
		w := *g.sc
		w.Tenants = nil
		for _, t := range g.sc.Tenants {
			if t.Role == RolePolluter {
				t = cpuOnly(t)
			}
			w.Tenants = append(w.Tenants, t)
		}
		without = &w
	}
	if err := g.sc.validate(); err != nil {
		return nil, err
	}
	if without != nil {
		if err := without.validate(); err != nil {
			return nil, err
		}
	}
	c.Scenario, c.Without = g.sc, without
	return c, nil
}

// cpuOnly is a polluter's CPU use without its pollution: the same CPU
// phases, no bus locks, a small working set and few LLC references.
func cpuOnly(t TenantSpec) TenantSpec {
	ws, refs, locks := Bytes(64<<10), Rate(1e6), Rate(0)
	t.Phases = slices.Clone(t.Phases)
	for i := range t.Phases {
		p := &t.Phases[i]
		p.WorkingSet, p.LLCRefs, p.BusLocks, p.MemoryBandwidth, p.MemoryBound = nil, nil, nil, nil, nil
		if i == 0 {
			p.WorkingSet, p.LLCRefs, p.BusLocks, p.MemoryBound = &ws, &refs, &locks, f64(0.05)
		}
	}
	return t
}

// cpuRange is the cpu list [from, to).
func cpuRange(from, to int) string {
	if to-from == 1 {
		return fmt.Sprint(from)
	}
	return fmt.Sprintf("%d-%d", from, to-1)
}

// kind draws how a tenant appears: mostly a VM, sometimes a container.
func (g *suiteGen) kind() string {
	if g.rng.IntN(4) == 0 {
		return KindContainer
	}
	return KindVM
}

func (g *suiteGen) victim(cpus string) TenantSpec {
	t := TenantSpec{Name: "victim", Kind: g.kind(), Role: RoleVictim, CPUs: cpus}
	nv := float64(strings.Count(cpus, "-") + 1) // 1 or 2 CPUs
	g.c.Victim = g.pick(SuiteVictims)
	p := Phase{CPU: f64(1)}
	switch g.c.Victim {
	case VictimCache:
		ws := Bytes(g.uniform(0.2, 0.6) * g.l3)
		refs := Rate(g.logUniform(3e7, 1e8) * nv)
		p.MemoryBound, p.WorkingSet, p.LLCRefs = f64(g.uniform(0.3, 0.6)), &ws, &refs
	default:
		ws := Bytes(g.logUniform(256<<20, 1<<30))
		refs := Rate(g.logUniform(2e7, 8e7) * nv)
		p.MemoryBound, p.WorkingSet, p.LLCRefs = f64(g.uniform(0.5, 0.8)), &ws, &refs
	}
	t.Phases = []Phase{p}
	return t
}

func (g *suiteGen) polluter(cpus string) TenantSpec {
	t := TenantSpec{Name: "polluter", Kind: g.kind(), Role: RolePolluter, CPUs: cpus}
	g.c.Polluter = g.pick(SuitePolluters)
	p := Phase{CPU: f64(1)}
	switch g.c.Polluter {
	case PolluterBusLocks:
		// From a trickle the memory system hardly feels to the lab's
		// split-lock loop (674-754 k/s).
		locks := Rate(g.logUniform(2e4, 8e5))
		ws, refs := Bytes(64<<10), Rate(1e6)
		p.MemoryBound, p.WorkingSet, p.LLCRefs, p.BusLocks = f64(0.05), &ws, &refs, &locks
		g.c.Rate = "bus_locks " + humanize.SI(float64(locks), "/s")
	case PolluterLLC:
		ws := Bytes(g.uniform(2, 8) * g.l3)
		refs := Rate(g.logUniform(2e7, 3e8))
		p.MemoryBound, p.WorkingSet, p.LLCRefs = f64(0.6), &ws, &refs
		g.c.Rate = fmt.Sprintf("llc_refs %s over %s", humanize.SI(float64(refs), "/s"), humanize.Bytes(float64(ws)))
	default:
		// From a tenth of the socket's DRAM bandwidth to all of it.
		bw := ByteRate(g.logUniform(0.1, 1) * g.dram)
		ws := Bytes(1 << 30)
		p.MemoryBound, p.WorkingSet, p.MemoryBandwidth = f64(0.8), &ws, &bw
		g.c.Rate = "memory_bandwidth " + humanize.SI(float64(bw), "B/s")
	}
	t.Phases = []Phase{p}
	return t
}

// timing draws when the polluter runs and records its events.
func (g *suiteGen) timing(t *TenantSpec) string {
	k := g.pick(SuiteTimings)
	d := g.dur
	sec := time.Second
	switch k {
	case TimingLate:
		t.Start = g.at(3*sec, d/2)
	case TimingEarlyStop:
		t.Stop = g.at(d/2, d-5*sec)
	case TimingPause:
		pause := g.at(d/4, d/2)
		resume := pause + g.at(3*sec, 8*sec)
		t.Phases = append(t.Phases, Phase{From: pause, CPU: f64(0)}, Phase{From: resume, CPU: f64(1)})
		g.c.Events = append(g.c.Events, lab.TenantEvent{T: pause.Seconds(), Tenant: t.Name, Role: RolePolluter, Kind: "pause"},
			lab.TenantEvent{T: resume.Seconds(), Tenant: t.Name, Role: RolePolluter, Kind: "resume"})
	case TimingBursty:
		// A period on a microsecond grid is almost never a divisor of the
		// model's step, which samples the storm: a burst faster than the
		// step shows in a step with the odds of its duty, as it would to
		// a probe reading at a random moment.
		g.c.Period = time.Duration(g.logUniform(5e3, 200e3)) * time.Microsecond
		g.c.Duty = math.Round(g.uniform(0.1, 0.6)*100) / 100
		onFor := time.Duration(float64(g.c.Period) * g.c.Duty)
		var phases []Phase
		for from := time.Duration(0); from < d; from += g.c.Period {
			phases = append(phases, Phase{From: from, CPU: f64(1)}, Phase{From: from + onFor, CPU: f64(0)})
		}
		first := t.Phases[0]
		first.From = 0
		phases[0] = first
		t.Phases = phases
	}
	start := t.Start.Seconds()
	g.c.Events = append([]lab.TenantEvent{{T: start, Tenant: t.Name, Role: RolePolluter, Kind: "start"}}, g.c.Events...)
	if t.Stop > 0 {
		g.c.Events = append(g.c.Events, lab.TenantEvent{T: t.Stop.Seconds(), Tenant: t.Name, Role: RolePolluter, Kind: "stop"})
	}
	return k
}

// bystander draws an innocent tenant of the ith bystander on cpus.
func (g *suiteGen) bystander(i int, cpus string) TenantSpec {
	shape := g.pick(SuiteBystanders)
	g.c.Bystanders = append(g.c.Bystanders, shape)
	t := TenantSpec{Name: fmt.Sprintf("%s-%d", shape, i), Kind: g.kind(), Role: RoleBystander, CPUs: cpus}
	small := Bytes(1 << 20)
	refs := Rate(2e6)
	p := Phase{CPU: f64(1), MemoryBound: f64(0.05), WorkingSet: &small, LLCRefs: &refs}
	switch shape {
	case BystanderSteady:
		p.CPU = f64(g.uniform(0.3, 1))
		t.Phases = []Phase{p}
	case BystanderBursty:
		// Bursts of all the CPU it can get, seconds long.
		period := g.at(time.Second, 4*time.Second) + time.Second
		onFor := time.Duration(float64(period) * g.uniform(0.2, 0.7))
		for from := time.Duration(0); from < g.dur; from += period {
			on, idle := p, Phase{From: from + onFor, CPU: f64(0.05)}
			on.From = from
			if from > 0 {
				on = Phase{From: from, CPU: f64(1)}
			}
			t.Phases = append(t.Phases, on, idle)
		}
	case BystanderPhases:
		quiet := g.at(g.dur/5, g.dur/2)
		busy := quiet + g.at(2*time.Second, g.dur/3)
		t.Phases = []Phase{p, {From: quiet, CPU: f64(0.1)}, {From: busy, CPU: f64(1)}}
	case BystanderCache:
		ws := Bytes(256 << 10)
		r := Rate(g.logUniform(1e6, 1e7))
		p.MemoryBound, p.WorkingSet, p.LLCRefs = f64(0.3), &ws, &r
		t.Phases = []Phase{p}
	default: // BystanderLLC
		ws := Bytes(g.uniform(0.1, 0.3) * g.l3)
		r := Rate(g.logUniform(5e6, 2e7))
		p.MemoryBound, p.WorkingSet, p.LLCRefs = f64(0.3), &ws, &r
		t.Phases = []Phase{p}
	}
	return t
}
