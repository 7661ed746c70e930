package sim

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/humanize"
	"github.com/crosstalk-project/crosstalk/internal/judge"
)

// What every built-in scenario must show under the crosstalk policy (the
// simulator's "must hold"): each polluter named, no innocent tenant throttled
// beyond its proofs, nothing left throttled, and the victims within 10% of
// what the scenario allows them with every polluter held as far as its policy
// holds it (its lever at its limit): solo speed where holding the polluters
// gives that back, else the slowdown worked out below from the scenario's
// parameters. The allowance is written here as a number, not computed by the
// model under test, so a change to the model's formulas that costs the
// victims speed fails the test; TestModelHoldsAllowance says which
// allowance moved.
var mustHold = []struct {
	scenario string
	// lever is how the scenario's policy holds a polluter at its limit.
	lever string
	// allows is the worst victim's slowdown with every polluter held at the
	// lever's limit, derived by hand in the comment beside it.
	allows float64
	// skip names what the agent lacks for this scenario (all checks).
	skip string
}{
	// The polluter's 680 k locks/s at the 1/16 floor duty are 42.5 k/s:
	// U = (42.5k/754k)^1.2 = 0.032, so every uncore access waits
	// 1/(1-U) = 1.033×; the victim is 55% memory-bound: 1 + 0.55×0.033 =
	// 1.02×, about 1.03× with the DRAM queueing its own misses cause.
	{scenario: "alita-buslock", lever: leverQuotaFloor, allows: 1.03},
	// The streamer's 85 GB/s at the 1/16 floor is 5.3 GB/s; with the
	// victim's 3.8 GB/s the socket's 100 GB/s is at ρ = 0.09, loaded latency
	// 1 + 0.25×0.09/0.91 = 1.025× on the victim's DRAM time (60% of it
	// memory-bound, nearly all misses): about 1.02-1.03×.
	{scenario: "alita-membw", lever: leverQuotaFloor, allows: 1.03},
	// Bias isolation gives each attacker ceil(11 ways × 4/48 CPUs) + 1 = 2
	// ways (6 MiB), one at each end of the cache. The victim keeps all 11
	// ways and spreads its 10 MiB working set over them: 7/11 of it in the
	// 7 private ways (21 MiB, all hits), 2/11 (1.8 MiB, 29.8 k lines) in
	// each 2-way region shared with an attacker's 1.5e8 refs/s stream over
	// 512 MiB. Che's characteristic time of such a region (98.3 k lines)
	// is about 0.66 ms, so at 0.7 of its speed (2.18e7 × 0.7 refs/s there)
	// the victim's hit ratio in it is 1 - exp(-0.34) = 0.29. Overall
	// 7/11 + 4/11 × 0.29 = 0.74 hits: 0.74×45 + 0.26×180×1.06 (DRAM queueing
	// at ρ ≈ 0.19 from the attackers' 17 GB/s) = 83 cycles per access
	// against 45.3 alone, 1.83×; half of the victim is memory-bound:
	// 0.5 + 0.5×1.83 = 1.42×, consistent with the 0.7 speed assumed.
	{scenario: "alita-llc", lever: leverAlitaCAT, allows: 1.42},
	// At 1000 MHz the virus draws 250 W × (1000/3100)^2.5 = 15 W: the
	// socket (idle share, the victim's 7 W, 15 W) is far under its 150 W
	// budget, so the victim's core runs at 3100 MHz as alone: 1.00×.
	{scenario: "alita-power", lever: leverFreqFloor, allows: 1.00},
	// Alone, lbm misses about 58.5 k and mcf 29.8 k lines per ms of its CPU
	// (6e7 and 3e7 refs/s over working sets 40 and 160 times the 10 MiB L3);
	// permits of 20 k hold them to 0.34 and 0.67 of their CPU, about 2.05e7
	// and 2.0e7 refs/s of streaming misses. The victim's 6 MiB (98.3 k
	// lines) at 4e7 × 0.65 refs/s shares the 163.8 k-line L3 with them: Che's
	// 98.3k × (1 - exp(-265 T)) + 4.1e7 T = 163.8k gives T = 2.75 ms and a
	// hit ratio of 0.52, so 0.52×45 + 0.48×180×1.02 = 112 cycles per access
	// against 45.3 alone, 2.47×; 35% memory-bound: 0.65 + 0.35×2.47 =
	// 1.52×, about 1.55× as its own slowdown lowers its rate further.
	{scenario: "kyoto-permits", lever: leverPermits, allows: 1.55},
	// As alita-buslock: the polluter's 680 k locks/s at the floor give
	// U = 0.032; the victims are 50% and 40% memory-bound: about 1.03×.
	{scenario: "scale", lever: leverQuotaFloor, allows: 1.03},
	// The polluter does 300 k locks/s at its 0.5 CPU alone; the floor
	// (1/16 of its 2 vCPUs, 0.125 CPU) holds it to a quarter of that,
	// 75 k/s: U = (75k/754k)^1.2 = 0.063, every uncore access waits
	// 1/(1-U) = 1.067×; the victim is 50% memory-bound: 1 + 0.5×0.067 =
	// 1.03×. The VMs' 2e6 refs/s each over 4 MiB move little of the DRAM.
	{scenario: "crowd", lever: leverQuotaFloor, allows: 1.03},
}

// How the policies hold a polluter at their limit.
const (
	// leverQuotaFloor: the CPU quota at the duty controller's floor (the
	// probe policy, the bus-lock budget).
	leverQuotaFloor = "quota-floor"
	// leverAlitaCAT: bias isolation's small class, Alita's
	// ceil(ways × cpus / domain cpus) + 1 ways, one polluter at each end
	// of the cache.
	leverAlitaCAT = "alita-cat"
	// leverFreqFloor: the power budget's lowest step, the polluter's CPUs
	// at the minimum frequency.
	leverFreqFloor = "freq-floor"
	// leverPermits: Kyoto's permits hold each polluter's pollution to its
	// booking on average: its CPU use to llc_cap / llc_cap_act.
	leverPermits = "permits"
)

// victimLimit is the slowest a victim may run under crosstalk: within 10% of
// solo, or of the allowance where holding the polluters cannot give solo
// speed back.
func victimLimit(allows float64) float64 { return 1.10 * max(1, allows) }

func TestScenarioMustHold(t *testing.T) {
	for _, mh := range mustHold {
		t.Run(mh.scenario, func(t *testing.T) {
			if mh.skip != "" {
				t.Skip(mh.skip)
			}
			if mh.scenario == "scale" && testing.Short() {
				t.Skip("scale simulates 1,000 tenants: not in -short")
			}
			sc, err := Load(mh.scenario)
			if err != nil {
				t.Fatal(err)
			}
			policies := []string{PolicyNone, PolicyCrosstalk}
			if mh.scenario == "scale" {
				policies = policies[1:] // a thousand tenants: the agent's run only
			}
			res, err := Run(t.Context(), sc, Options{Policies: policies})
			if err != nil {
				t.Fatal(err)
			}
			none, ok := res.Policy(PolicyNone)
			if !ok {
				none = &PolicyResult{}
			}
			ct, _ := res.Policy(PolicyCrosstalk)
			t.Logf("victim slowdown: none %s, crosstalk %s; first throttle of a polluter at %.2fs; agent CPU per interval max %.1f ms mean %.1f ms",
				humanize.Opt(none.VictimSlowdown, humanize.Ratio), humanize.Opt(ct.VictimSlowdown, humanize.Ratio), fl(ct.FirstAction), ct.Agent.IntervalCPUMaxMs, ct.Agent.IntervalCPUMeanMs)
			for _, tr := range ct.Tenants {
				if tr.Role == RolePolluter {
					if !tr.NamedPolluter {
						t.Errorf("polluter %s was not named (proofs %d)", tr.Name, tr.Proofs)
					}
					continue
				}
				if tr.NamedPolluter {
					t.Errorf("innocent %s (%s) was named a polluter", tr.Name, tr.Role)
				}
				// A proof caps a suspect for its window (300 ms) and frees it.
				if limit := 0.5 * float64(tr.Proofs); tr.ThrottledSeconds > limit+1e-9 {
					t.Errorf("innocent %s (%s) held back %.2fs, more than its %d proof(s) take", tr.Name, tr.Role, tr.ThrottledSeconds, tr.Proofs)
				}
			}
			if len(ct.LeftThrottled) > 0 {
				t.Errorf("left throttled after the agent stopped: %v", ct.LeftThrottled)
			}
			// Every action is on the virtual clock (BuildOptions.Now reaches
			// the agent's releases and journal too).
			for _, a := range ct.Actions {
				if a.T < 0 || a.T > res.Duration {
					t.Errorf("action %s %s at %.2fs, outside the %.0fs run", a.Kind, a.Tenant, a.T, res.Duration)
				}
			}
			t.Run("victims within 10% of solo", func(t *testing.T) {
				limit := victimLimit(mh.allows)
				for _, tr := range ct.Tenants {
					if tr.Role == RoleVictim && (tr.Slowdown == nil || *tr.Slowdown > limit) {
						t.Errorf("victim %s at %s under crosstalk, over %.3f× (the scenario allows %.2f× with the polluters held at the %s limit)", tr.Name, humanize.Opt(tr.Slowdown, humanize.Ratio), limit, mh.allows, mh.lever)
					}
				}
			})
		})
	}
}

// The model, with every polluter held at its lever's limit, gives the
// victims what the hand derivations in mustHold say, within 0.05×. When a
// model change moves one, this names the allowance to work out again.
func TestModelHoldsAllowance(t *testing.T) {
	for _, mh := range mustHold {
		t.Run(mh.scenario, func(t *testing.T) {
			if got := heldSlowdown(t, mh.scenario, mh.lever); math.Abs(got-mh.allows) > 0.05 || math.IsNaN(got) {
				t.Errorf("with the polluters held at the %s limit the model puts the worst victim at %.3f×; the scenario's derivation says %.2f×", mh.lever, got, mh.allows)
			}
		})
	}
}

// heldSlowdown is the model's worst victim slowdown, late in the run, with
// every polluter held at the limit of lever.
func heldSlowdown(t *testing.T, name, lever string) float64 {
	sc, err := Load(name)
	if err != nil {
		t.Fatal(err)
	}
	m := sc.Machine
	md := NewModel(m, sc.Resolved())
	lv := NewLevers(len(sc.Resolved()), m.CPUs(), m.Sockets)
	at := time.Duration(0.9 * float64(sc.Duration))
	polluters := func(f func(i int, tn *Tenant)) {
		for i, tn := range sc.Resolved() {
			if tn.Role == RolePolluter {
				f(i, tn)
			}
		}
	}
	switch lever {
	case leverQuotaFloor:
		def := agent.Defaults()
		floor := def.FloorDuty()
		polluters(func(i int, tn *Tenant) { lv.Quota[i] = floor * float64(len(tn.VCPUs)) })
	case leverAlitaCAT:
		// The first isolated polluter of a socket gets the low end, the
		// second the high end (bias isolation's two slots).
		slot := map[int]int{}
		polluters(func(i int, tn *Tenant) {
			for s := range m.Sockets {
				on := m.SocketCPUs(s).Intersect(cpuset.Of(tn.VCPUs...)).Len()
				if on == 0 {
					continue
				}
				ways := judge.IsolationWays(m.L3Ways, float64(on), float64(m.SocketCPUs(s).Len()))
				mask := uint64(1)<<ways - 1
				if slot[s] == 1 {
					mask <<= m.L3Ways - ways
				}
				slot[s]++
				lv.Mask[i][s] = mask
			}
		})
	case leverFreqFloor:
		polluters(func(i int, tn *Tenant) {
			for _, c := range tn.VCPUs {
				lv.MaxMHz[c] = float64(m.MinMHz)
			}
		})
	case leverPermits:
		// Each polluter's CPU held to booking / llc_cap_act, its pollution
		// measured alone (Kyoto's eq. 1 at the machine's maximum frequency).
		cfg, err := sc.agentConfig()
		if err != nil {
			t.Fatal(err)
		}
		free := steady(md, lv, at)
		polluters(func(i int, tn *Tenant) {
			r := free.Tenants[i].Rates
			act := r.LLCMisses * float64(m.MaxMHz) * 1000 / r.Cycles
			booking, _ := cfg.Permits.Booking("", tn.Name, "vm")
			if act > booking && booking > 0 {
				lv.Quota[i] = booking / act * free.Tenants[i].Alloc
			}
		})
	default:
		t.Fatalf("unknown lever %q", lever)
	}
	st := steady(md, lv, at)
	worst := 0.0
	for i, tn := range sc.Resolved() {
		if tn.Role == RoleVictim && st.Tenants[i].Active {
			worst = max(worst, slowdownOf(st, i))
		}
	}
	return worst
}

// Under "none" every built-in scenario shows the interference it is about:
// a victim at least 1.2× slower than solo.
func TestScenariosInterfere(t *testing.T) {
	for _, name := range Builtins() {
		sc, err := Load(name)
		if err != nil {
			t.Fatal(err)
		}
		md := NewModel(sc.Machine, sc.Resolved())
		st := steady(md, NewLevers(len(sc.Resolved()), sc.Machine.CPUs(), sc.Machine.Sockets), time.Duration(0.9*float64(sc.Duration)))
		worst := 0.0
		for i, tn := range sc.Resolved() {
			if tn.Role == RoleVictim {
				worst = max(worst, slowdownOf(st, i))
			}
		}
		if worst < 1.2 || math.IsNaN(worst) {
			t.Errorf("%s: worst victim slowdown under none %.3f×, want ≥ 1.2×", name, worst)
		}
	}
}

// The static policy caps every tenant to its share through cpu.max and
// restores it; the static shares are the lab's.
func TestStaticPolicy(t *testing.T) {
	sc := mustParse(t, `
name: st
duration: 5s
machine: {cpu: skylakex, sockets: 1, cores_per_socket: 4, tdp: 500W}
tenants:
  - {name: v, role: victim, cpus: "0-1"}
  - {name: p, role: polluter, cpus: "1-3", phases: [{from: 0s, bus_locks: 300k}]}
`)
	res, err := Run(t.Context(), sc, Options{Policies: []string{PolicyStatic}})
	if err != nil {
		t.Fatal(err)
	}
	pr := res.Results[0]
	// CPUs in use 0-3 (4) split by CPU counts 2:3 → 1.6 and 2.4 CPUs.
	want := map[string]float64{"v": 1.6, "p": 2.4}
	for _, a := range pr.Actions {
		if a.Kind != "cap" || math.Abs(a.Quota-want[a.Tenant]) > 1e-9 {
			t.Errorf("static action %+v, want caps %v", a, want)
		}
	}
	if len(pr.Actions) != 2 || len(pr.LeftThrottled) != 0 {
		t.Errorf("actions %v, left throttled %v", pr.Actions, pr.LeftThrottled)
	}
	for _, tr := range pr.Tenants {
		if math.Abs(tr.ThrottledSeconds-5) > 0.06 {
			t.Errorf("%s throttled %.2fs, want the whole 5s run", tr.Name, tr.ThrottledSeconds)
		}
	}
}

// The agent's CPU per interval on the scale scenario (1,000 tenants on 224
// CPUs) must stay under 50 ms. CPU time on a shared machine is
// noisy and the race detector multiplies it, so this runs only when asked:
// CROSSTALK_SIM_PERF=1 go test ./internal/sim -run TestScaleAgentCPU.
// `crosstalk sim run scale --policy crosstalk` prints the same numbers.
func TestScaleAgentCPU(t *testing.T) {
	if testing.Short() || !perfTestsWanted() {
		t.Skip("set CROSSTALK_SIM_PERF=1 to measure the agent's CPU per interval on 1,000 simulated tenants")
	}
	sc, err := Load("scale")
	if err != nil {
		t.Fatal(err)
	}
	// As `crosstalk run` (and `crosstalk sim run`) runs the agent: the
	// agent's heap is small and steady, so it collects less often.
	defer debug.SetGCPercent(debug.SetGCPercent(200))
	res, err := Run(t.Context(), sc, Options{Policies: []string{PolicyCrosstalk}})
	if err != nil {
		t.Fatal(err)
	}
	a := res.Results[0].Agent
	t.Logf("agent CPU per interval over %d intervals: max %.1f ms, mean %.1f ms (process CPU around Tick: max %.1f ms, mean %.1f ms); perf fds up to %d",
		a.Intervals, a.IntervalCPUMaxMs, a.IntervalCPUMeanMs, a.TickCPUMaxMs, a.TickCPUMeanMs, a.PerfFDsMax)
	if a.IntervalCPUMaxMs >= 50 {
		t.Errorf("an agent interval took %.1f ms of CPU, want < 50 ms", a.IntervalCPUMaxMs)
	}
}

func ExampleWriteText() {
	r := &Result{Scenario: "x", Duration: 10, Seed: 1, Tenants: 1, Machine: "m",
		Results: []PolicyResult{{Policy: "none", Tenants: []TenantResult{{Name: "v", Role: RoleVictim, Slowdown: ptrF(2), SteadySlowdown: ptrF(2.5)}}}}}
	var b fmtBuffer
	WriteText(&b, r)
	fmt.Print(b.lines(7))
	// Output:
	// scenario x: 10s simulated, seed 1, 1 tenants
	// machine: m
	//
	// POLICY  TENANT  ROLE    SLOWDOWN  STEADY  THROTTLED  NAMED  PROOFS
	// none    v       victim  2.00×     2.50×   0.0s              0
	//
	// none       worst victim slowdown –
}

func perfTestsWanted() bool { return os.Getenv("CROSSTALK_SIM_PERF") == "1" }

func ptrF(x float64) *float64 { return &x }

type fmtBuffer struct{ strings.Builder }

func (b *fmtBuffer) lines(n int) string {
	ls := strings.SplitAfter(b.String(), "\n")
	return strings.Join(ls[:min(n, len(ls))], "")
}

// On a crowded host where nothing but CPU use ranks the suspects, the
// polluter, using less CPU than any of them, is proved within the first
// round: no innocent is proved a second time (after its backoff ran out)
// before the polluter's own proof has begun.
func TestCrowdReachesThePolluterWithinOneRound(t *testing.T) {
	sc, err := Load("crowd")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(t.Context(), sc, Options{Policies: []string{PolicyCrosstalk}})
	if err != nil {
		t.Fatal(err)
	}
	ct, _ := res.Policy(PolicyCrosstalk)
	proofs := map[string]int{}
	reached := false
	for _, a := range ct.Actions {
		if a.Kind != "proof" || a.Quota != 0 {
			continue // a trial's cap, or another action
		}
		if a.Tenant == "polluter" {
			reached = true
			break
		}
		if proofs[a.Tenant]++; proofs[a.Tenant] > 1 {
			t.Fatalf("%s proved again at %.2fs before the polluter was proved at all (%d tenants proved so far)", a.Tenant, a.T, len(proofs))
		}
	}
	if !reached {
		t.Fatalf("the polluter was never proved; proofs: %v", proofs)
	}
	if len(proofs) < 20 {
		// Not this test's world any more: the ranking found the polluter
		// without a round, and the order is not exercised.
		t.Errorf("only %d tenants were proved before the polluter: the scenario no longer tests the order", len(proofs))
	}
}
