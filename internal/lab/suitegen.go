package lab

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

// This file draws the suite's scenarios. Each run's scenario comes from its
// own seed alone, so any run of a suite can be replayed by itself.

// Run classes: a polluter among the tenants, or none (a control run, where
// any conviction is a false one).
const (
	ClassPolluter = "polluter"
	ClassControl  = "control"
)

// Polluter timings the generator draws.
const (
	TimingWhole       = "whole"        // runs the whole phase
	TimingLate        = "late"         // starts 0.5-3 s into the phase
	TimingEarlyStop   = "early-stop"   // stops 1.5-3 s before the phase ends
	TimingBurst       = "burst"        // starts late and stops early
	TimingBeforeAgent = "before-agent" // already running when the agent starts
	TimingPause       = "pause"        // stops (SIGSTOP) and comes back (SIGCONT)
)

// Placements of the polluter.
const (
	PlaceAlone         = "alone"          // on a CPU of its own
	PlaceWithBystander = "with-bystander" // sharing its CPU with bystanders
	PlaceWithVictim    = "with-victim"    // sharing the victim's CPU
)

// Programs says which external programs the generator may draw tenants from,
// and which polluter kinds.
type Programs struct {
	StressNG bool // stress-ng
	Redis    bool // redis-server and redis-benchmark
	// Polluters are the polluter kinds to draw from (nil: every kind of
	// DefaultPolluters). Drawing from another list draws other runs from
	// the same seeds.
	Polluters []string
}

// PolluterSplitLockPaced is the built-in split-lock loop paced to 150k,
// 200k or 300k locks a second (drawn): bursts of 256 locks about a
// millisecond apart, shorter than most of the probe's readings, against
// the loop's 800k or so a second unpaced. Only drawn when asked for
// (Programs.Polluters), so that the default draws stay as they were.
const PolluterSplitLockPaced = "splitlock-paced"

// DefaultPolluters is what the generator draws polluters from with progs:
// the built-in split-lock, bandwidth and cache loads, and their stress-ng
// counterparts where installed.
func DefaultPolluters(progs Programs) []string {
	kinds := []string{"splitlock", "stream", "cachethrash"}
	if progs.StressNG {
		kinds = append(kinds, "stress-ng-lockbus", "stress-ng-stream", "stress-ng-cache")
	}
	return kinds
}

// PolluterKinds is every polluter kind the generator can draw: the default
// ones with stress-ng's, and those drawn only when named.
func PolluterKinds() []string {
	return append(DefaultPolluters(Programs{StressNG: true}), PolluterSplitLockPaced)
}

// checkPolluters reports a polluter kind the generator does not know, or
// whose program is not installed here.
func (p Programs) checkPolluters() error {
	known := PolluterKinds()
	for _, k := range p.Polluters {
		if !slices.Contains(known, k) {
			return fmt.Errorf("no polluter kind %q (have %s)", k, strings.Join(known, ", "))
		}
		if strings.HasPrefix(k, "stress-ng-") && !p.StressNG {
			return fmt.Errorf("polluter kind %s: stress-ng is not installed here (or not on PATH)", k)
		}
	}
	return nil
}

// FindPrograms looks the external programs up with lookPath (exec.LookPath).
func FindPrograms(lookPath func(string) (string, error)) Programs {
	has := func(names ...string) bool {
		for _, n := range names {
			if _, err := lookPath(n); err != nil {
				return false
			}
		}
		return true
	}
	return Programs{StressNG: has("stress-ng"), Redis: has("redis-server", "redis-benchmark")}
}

// AllowedCPUs is the CPUs this process may run its tenants on: the online
// CPUs it is allowed on (Cpus_allowed_list of /proc/self/status).
func AllowedCPUs(h *host.Host) (cpuset.Set, error) {
	s, err := h.ReadString("/sys/devices/system/cpu/online")
	if err != nil {
		return cpuset.Set{}, fmt.Errorf("allowed CPUs: %w", err)
	}
	online, err := cpuset.Parse(strings.TrimSpace(s))
	if err != nil || online.IsEmpty() {
		return cpuset.Set{}, fmt.Errorf("allowed CPUs: online CPUs %q: %v", s, err)
	}
	status, err := h.ReadString("/proc/self/status")
	if err != nil {
		return online, nil // no affinity to read: every online CPU
	}
	sc := bufio.NewScanner(strings.NewReader(status))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Cpus_allowed_list:"); ok {
			allowed, err := cpuset.Parse(strings.TrimSpace(v))
			if err != nil {
				return cpuset.Set{}, fmt.Errorf("allowed CPUs: /proc/self/status: %w", err)
			}
			if both := allowed.Intersect(online); !both.IsEmpty() {
				return both, nil
			}
		}
	}
	return online, nil
}

// Generated is one drawn scenario and what was drawn, for the report.
type Generated struct {
	Seed       int64     `json:"seed"`
	Class      string    `json:"class"`
	Victim     string    `json:"victim"`              // e.g. "chase-4MiB", "redis"
	Polluter   string    `json:"polluter,omitempty"`  // e.g. "splitlock"; "" in a control run
	Timing     string    `json:"timing,omitempty"`    // the polluter's (or, in a control run, the agent's)
	Placement  string    `json:"placement,omitempty"` // the polluter's
	Bystanders []string  `json:"bystanders"`          // their shapes
	Scenario   *Scenario `json:"-"`
}

// Describe is the draw in one line.
func (g *Generated) Describe() string {
	by := "no bystanders"
	if len(g.Bystanders) > 0 {
		by = "bystanders " + strings.Join(g.Bystanders, ",")
	}
	if g.Class == ClassControl {
		return fmt.Sprintf("control: victim %s, %s, agent %s, %.1fs phase", g.Victim, by, g.Timing, g.Scenario.Phase.Seconds())
	}
	return fmt.Sprintf("victim %s, polluter %s %s %s, %s, %.1fs phase", g.Victim, g.Polluter, g.Timing, g.Placement, by, g.Scenario.Phase.Seconds())
}

// gen draws one scenario.
type gen struct {
	rng   *rand.Rand
	seed  int64
	cpus  []int
	progs Programs
	phase time.Duration
}

// Generate draws the scenario of the given seed for tenants on cpus. The
// same seed, CPUs and programs always give the same scenario.
func Generate(seed int64, cpus cpuset.Set, progs Programs) (*Generated, error) {
	if cpus.IsEmpty() {
		return nil, errors.New("generate: no CPUs to place tenants on")
	}
	g := &gen{rng: rand.New(rand.NewPCG(uint64(seed), 0x63726f737374616c)), seed: seed, cpus: cpus.List(), progs: progs}
	out := g.draw()
	if err := out.Scenario.validate(); err != nil {
		return nil, fmt.Errorf("generate seed %d: %w", seed, err)
	}
	return out, nil
}

// secs draws a duration in [lo, hi] seconds on a 100 ms grid.
func (g *gen) secs(lo, hi float64) time.Duration {
	steps := int((hi-lo)*10 + 0.5)
	return time.Duration(lo*1000+float64(g.rng.IntN(steps+1))*100) * time.Millisecond
}

func (g *gen) pick(options []string) string { return options[g.rng.IntN(len(options))] }

func (g *gen) draw() *Generated {
	g.phase = g.secs(6, 8)
	s := &Scenario{Name: fmt.Sprintf("gen-%d", g.seed), Phase: g.phase, Repetitions: 1}
	out := &Generated{Seed: g.seed, Scenario: s, Bystanders: []string{}}

	victimCPU := g.cpus[len(g.cpus)-1]
	victim, vlabel := g.victim()
	victim.CPUs = fmt.Sprint(victimCPU)
	out.Victim = vlabel
	s.Tenants = append(s.Tenants, victim)

	nBystanders := g.rng.IntN(4)
	// CPUs for bystanders: any, except the polluter's when it is alone.
	byCPUs := g.cpus
	if g.rng.IntN(5) == 0 {
		out.Class = ClassControl
		out.Timing = TimingWhole
		if g.rng.IntN(3) == 0 {
			out.Timing = TimingBeforeAgent
			s.PolicyStart = g.secs(1.5, 3)
		}
	} else {
		out.Class = ClassPolluter
		placements := []string{PlaceWithVictim}
		if len(g.cpus) > 1 {
			placements = []string{PlaceAlone, PlaceWithBystander, PlaceWithVictim}
		}
		out.Placement = g.pick(placements)
		pcpu := victimCPU
		switch out.Placement {
		case PlaceAlone:
			pcpu = g.cpus[0]
			byCPUs = g.cpus[1:]
		case PlaceWithBystander:
			pcpu = g.cpus[0]
			nBystanders = max(nBystanders, 1)
		}
		pol, plabel := g.polluter()
		pol.CPUs = fmt.Sprint(pcpu)
		out.Polluter = plabel
		out.Timing = g.timing(&pol, s)
		s.Tenants = append(s.Tenants, pol)
		if out.Placement == PlaceWithBystander {
			// The first bystander shares the polluter's CPU; the rest go anywhere.
			b, shape := g.bystander(1)
			b.CPUs = fmt.Sprint(pcpu)
			s.Tenants = append(s.Tenants, b)
			out.Bystanders = append(out.Bystanders, shape)
			nBystanders--
		}
	}
	for i := len(out.Bystanders) + 1; nBystanders > 0; i, nBystanders = i+1, nBystanders-1 {
		b, shape := g.bystander(i)
		b.CPUs = fmt.Sprint(byCPUs[g.rng.IntN(len(byCPUs))])
		s.Tenants = append(s.Tenants, b)
		out.Bystanders = append(out.Bystanders, shape)
	}
	return out
}

// victim draws the victim: a pointer chase of an LLC-sensitive size, the
// latency server, or an external benchmark where one is installed.
func (g *gen) victim() (Tenant, string) {
	kinds := []string{"chase", "server"}
	if g.progs.Redis {
		kinds = append(kinds, "redis")
	}
	if g.progs.StressNG {
		kinds = append(kinds, "stress-ng")
	}
	t := Tenant{Name: "victim", Role: RoleVictim}
	switch g.pick(kinds) {
	case "server":
		t.Load, t.Args = "server", []string{"--rate", "2000", "--size", "2MiB"}
		return t, "server"
	case "redis":
		t.Command = redisCommand(g.redisPort(0), true)
		t.Metric = &Metric{Name: "get_rps", Regex: `GET: ([0-9.]+) requests per second`, Direction: "higher", Unit: "req/s", Aggregate: "mean"}
		return t, "redis"
	case "stress-ng":
		// Each run of a second prints its metric; the loop keeps the victim
		// busy for the whole phase and the mean is its throughput.
		st := g.pick([]string{"matrix", "memcpy"})
		t.Command = []string{"sh", "-c", fmt.Sprintf("while :; do stress-ng --%s 1 --timeout 1 --metrics-brief; done", st)}
		t.Metric = &Metric{Name: st + "_bogo_ops", Regex: `\] ` + st + `\s+\d+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+([0-9.]+)`, Direction: "higher", Unit: "ops/s", Aggregate: "mean"}
		return t, "stress-ng-" + st
	}
	size := g.pick([]string{"256KiB", "1MiB", "4MiB", "16MiB"})
	t.Load, t.Args = "chase", []string{"--size", size}
	return t, "chase-" + size
}

// redisPort spreads the runs' redis servers over ports 20000-32003, four
// a seed, so that runs of different seeds (or two suites at once) rarely
// meet. The ports stay below Linux's ephemeral range (32768-60999 by
// default): every redis-benchmark run leaves its 50 client connections in
// TIME_WAIT on ephemeral local ports for a minute, and a server cannot bind
// a port that one of them holds ("Address already in use"). Above it, a
// run after one with three redis tenants often finds its server's port
// taken that way, and its victim reports nothing.
func (g *gen) redisPort(tenant int) int {
	return 20000 + int(uint64(g.seed)%3000)*4 + tenant
}

// redisCommand runs a redis server and redis-benchmark against it in a
// loop, each benchmark short enough to report several times a phase. The
// server's log goes to stderr, so that a server that could not start says
// why in the lab's report of the tenant.
func redisCommand(port int, quietOutput bool) []string {
	bench := fmt.Sprintf("redis-benchmark -p %d -q -t get -n 5000", port)
	if !quietOutput {
		bench += " >/dev/null"
	}
	return []string{"sh", "-c", fmt.Sprintf("redis-server --port %d --save '' --appendonly no --loglevel warning >&2 & sleep 0.3; while :; do %s; done", port, bench)}
}

// StressNGOnset matches the line a stress-ng stressor prints (with
// --verbose) as it begins: "stress-ng: debug: [9] lockbus: started [9]
// (instance 0)".
const StressNGOnset = `: started \[\d+\]`

// polluter draws the polluter: the built-in split-lock, bandwidth and
// cache loads, or their stress-ng counterparts where installed (see
// DefaultPolluters), or the kinds asked for.
func (g *gen) polluter() (Tenant, string) {
	kinds := g.progs.Polluters
	if len(kinds) == 0 {
		kinds = DefaultPolluters(g.progs)
	}
	t := Tenant{Name: "polluter", Role: RolePolluter}
	k := g.pick(kinds)
	if k == PolluterSplitLockPaced {
		t.Load, t.Args = "splitlock", []string{"--rate", g.pick([]string{"150000", "200000", "300000"})}
		return t, k
	}
	if st, ok := strings.CutPrefix(k, "stress-ng-"); ok {
		// The lab stops it at its stop offset; the timeout only bounds it
		// should the lab itself die. Verbose, for the line its stressor
		// prints as it begins: its onset, from which the reaction counts.
		t.Command = []string{"stress-ng", "--" + st, "1", "--timeout", "20", "--verbose"}
		t.Onset = StressNGOnset
	} else {
		t.Load = k
	}
	return t, k
}

// timing draws when the polluter runs.
func (g *gen) timing(t *Tenant, s *Scenario) string {
	p := g.phase.Seconds()
	k := g.pick([]string{TimingWhole, TimingLate, TimingEarlyStop, TimingBurst, TimingBeforeAgent, TimingPause})
	switch k {
	case TimingLate:
		t.Start = g.secs(0.5, 3)
	case TimingEarlyStop:
		t.Stop = g.phase - g.secs(1.5, 3)
	case TimingBurst:
		t.Start = g.secs(0.5, 2)
		t.Stop = g.phase - g.secs(1.5, 2.5)
	case TimingBeforeAgent:
		s.PolicyStart = g.secs(1.5, 3)
	case TimingPause:
		t.Pause = g.secs(1.5, 2.5)
		t.Resume = t.Pause + g.secs(1, min(2, p-t.Pause.Seconds()-1.5))
	}
	return k
}

// bystander draws an innocent tenant: steady or bursty CPU use, a service
// with phases, a small cache user that stays in its own caches, or redis.
func (g *gen) bystander(i int) (Tenant, string) {
	shapes := []string{"steady", "bursty", "phases", "cache"}
	if g.progs.Redis {
		shapes = append(shapes, "redis")
	}
	shape := g.pick(shapes)
	t := Tenant{Name: fmt.Sprintf("%s-%d", shape, i), Role: RoleBystander}
	switch shape {
	case "steady":
		t.Load, t.Args = "cpu", []string{"--rate", g.pick([]string{"3e7", "1e8", "2e8"})}
	case "bursty":
		// One burst of all the CPU it can get, somewhere in the phase.
		t.Load = "cpu"
		t.Start = g.secs(0.5, 2.5)
		t.Stop = t.Start + g.secs(1, 2.5)
	case "phases":
		// Busy, quiet, busy again.
		t.Load, t.Args = "cpu", []string{"--rate", "3e8"}
		t.Pause = g.secs(1, 2.5)
		t.Resume = t.Pause + g.secs(1, 2)
	case "cache":
		// Working sets that fit a core's own L2: busy on memory, harmless
		// to everyone else's LLC lines and to the bus.
		if g.rng.IntN(2) == 0 {
			t.Load, t.Args = "chase", []string{"--size", "256KiB"}
			return t, "cache-chase"
		}
		t.Load, t.Args = "cachethrash", []string{"--size", "256KiB"}
		return t, "cache-thrash"
	case "redis":
		t.Command = redisCommand(g.redisPort(i), false)
	}
	return t, shape
}
