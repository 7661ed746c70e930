package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/sense"
)

func mustParse(t testing.TB, y string) *Scenario {
	t.Helper()
	sc, err := Parse([]byte(y), "test")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// steady solves the model at t until it settles and returns the state.
func steady(md *Model, lv *Levers, at time.Duration) *State {
	var st *State
	for range 30 {
		st = md.Solve(at, lv, st, 50*time.Millisecond)
	}
	return st
}

func slowdownOf(st *State, i int) float64 {
	ts := st.Tenants[i]
	return ts.Solo / ts.Progress
}

// busLockHost: a cache-resident pointer chase (almost all memory time) and a
// split-lock loop on four other cores — FIELD-NOTES §3's experiment.
func busLockHost(t testing.TB, locks string) (*Scenario, *Model) {
	sc := mustParse(t, `
name: cal
machine: {cpu: skylakex, sockets: 1, cores_per_socket: 8, l3_size: 32MiB, l3_ways: 16, memory_bandwidth: 50GB/s, tdp: 500W}
tenants:
  - name: chase
    role: victim
    cpus: "0"
    phases: [{from: 0s, memory_bound: 0.99, working_set: 4MiB, llc_refs: 5e7}]
  - name: splitlock
    role: polluter
    cpus: "1-4"
    phases: [{from: 0s, memory_bound: 0, working_set: 64KiB, llc_refs: 1e5, bus_locks: `+locks+`}]
`)
	return sc, NewModel(sc.Machine, sc.Resolved())
}

// The calibration points of the bus-lock model (FIELD-NOTES §3): the
// split-lock loop unlimited, at 50% CFS quota, at a quota leaving 0.1 M
// locks/s, and at 2%.
func TestBusLockCalibration(t *testing.T) {
	sc, md := busLockHost(t, "684k")
	lv := NewLevers(len(sc.Resolved()), sc.Machine.CPUs(), 1)
	cases := []struct {
		name   string
		quota  float64 // of the polluter's 4 CPUs; +Inf = unlimited
		lo, hi float64
	}{
		{"unlimited: 9x measured", math.Inf(1), 8.0, 9.8},
		{"50% quota: 1.7x measured", 2, 1.45, 1.9},
		{"quota leaving 0.1M locks/s: 1.0x measured", 4 * 1e5 / 684e3, 1.0, 1.12},
		{"2% quota: no effect measured", 0.08, 1.0, 1.01},
	}
	for _, c := range cases {
		lv.Quota[1] = c.quota
		st := steady(md, lv, 0)
		got := slowdownOf(st, 0)
		if got < c.lo || got > c.hi {
			t.Errorf("%s: victim slowdown %.3f, want %.2f-%.2f (bus occupancy %.3f, %.0f locks/s)", c.name, got, c.lo, c.hi, st.Host.BusOccupancy, st.Tenants[1].Rates.BusLocks)
		}
	}
	// Relief is non-linear in the duty: halving the polluter's CPU removes
	// most of the slowdown, and the second half of the way removes the rest.
	lv.Quota[1] = math.Inf(1)
	full := slowdownOf(steady(md, lv, 0), 0)
	lv.Quota[1] = 2
	half := slowdownOf(steady(md, lv, 0), 0)
	if (full-half)/(full-1) < 0.85 {
		t.Errorf("halving the polluter's duty relieved only %.0f%% of the slowdown (%.2fx -> %.2fx)", 100*(full-half)/(full-1), full, half)
	}
}

// The storm the dev machines measured (674-754 k locks/s, one loop
// bound by the bus: about 1.3 µs a lock) gives the 5-10x victim slowdowns
// measured there; the curve saturates, so a few hundred thousand locks/s
// less is mild, and Alita's 70 k/s host budget costs about nothing.
func TestBusLockRates(t *testing.T) {
	for _, c := range []struct {
		locks  string
		lo, hi float64
	}{{"650k", 5, 10}, {"684k", 8, 10}, {"300k", 1.4, 2}, {"70k", 1.0, 1.08}, {"0", 1, 1.0001}} {
		sc, md := busLockHost(t, c.locks)
		st := steady(md, NewLevers(len(sc.Resolved()), sc.Machine.CPUs(), 1), 0)
		if got := slowdownOf(st, 0); got < c.lo || got > c.hi {
			t.Errorf("%s locks/s: victim slowdown %.3f, want %.2f-%.2f", c.locks, got, c.lo, c.hi)
		}
	}
}

// Each lever and each pressure moves the victim the right way.
func TestMonotonicity(t *testing.T) {
	type knob struct {
		name string
		// set configures step k of the sweep (the scenario YAML or the levers)
		yaml  func(k int) string
		lever func(k int, lv *Levers)
		// worse says the victim's slowdown must grow along the sweep (else shrink)
		worse bool
	}
	const base = `
name: mono
machine: {cpu: skylakex, sockets: 1, cores_per_socket: 8, max_mhz: 3000, min_mhz: 800, l3_size: 16MiB, l3_ways: 16, memory_bandwidth: 40GB/s, tdp: %s, idle_power: 20W}
tenants:
  - name: victim
    role: victim
    cpus: "0-1"
    phases: [{from: 0s, memory_bound: %s, working_set: %s, llc_refs: 6e7, power: 8W}]
  - name: other
    role: polluter
    cpus: "2-7"
    phases: [{from: 0s, memory_bound: 0.8, working_set: %s, %s}]
`
	knobs := []knob{
		{name: "bus locks", worse: true, yaml: func(k int) string {
			return fmt.Sprintf(base, "400W", "0.5", "4MiB", "1MiB", fmt.Sprintf("llc_refs: 1e5, bus_locks: %d", []int{0, 50000, 200000, 500000}[k]))
		}},
		{name: "polluter quota", worse: false, yaml: func(int) string {
			return fmt.Sprintf(base, "400W", "0.5", "4MiB", "1MiB", "llc_refs: 1e5, bus_locks: 600k")
		}, lever: func(k int, lv *Levers) { lv.Quota[1] = []float64{6, 3, 1, 0.1}[k] }},
		{name: "LLC insertion pressure", worse: true, yaml: func(k int) string {
			return fmt.Sprintf(base, "400W", "0.6", "8MiB", "512MiB", fmt.Sprintf("llc_refs: %g", []float64{1e6, 3e7, 1e8, 3e8}[k]))
		}},
		{name: "CAT ways of the polluter", worse: false, yaml: func(int) string {
			return fmt.Sprintf(base, "400W", "0.6", "8MiB", "512MiB", "llc_refs: 2e8")
		}, lever: func(k int, lv *Levers) { lv.Mask[1][0] = []uint64{0xffff, 0xff, 0xf, 0x3}[k] }},
		{name: "memory bandwidth demand", worse: true, yaml: func(k int) string {
			return fmt.Sprintf(base, "400W", "0.6", "1GiB", "1GiB", fmt.Sprintf("memory_bandwidth: %s", []string{"2GB/s", "15GB/s", "30GB/s", "60GB/s"}[k]))
		}},
		{name: "MBA of the polluter", worse: false, yaml: func(int) string {
			return fmt.Sprintf(base, "400W", "0.6", "1GiB", "1GiB", "memory_bandwidth: 60GB/s")
		}, lever: func(k int, lv *Levers) { lv.MBA[1][0] = []float64{100, 50, 30, 10}[k] }},
		{name: "power of the neighbour", worse: true, yaml: func(k int) string {
			return fmt.Sprintf(base, "120W", "0.1", "1MiB", "1MiB", fmt.Sprintf("llc_refs: 1e6, power: %dW", []int{150, 200, 250, 300}[k]))
		}},
		{name: "scaling_max_freq of the neighbour", worse: false, yaml: func(int) string {
			return fmt.Sprintf(base, "120W", "0.1", "1MiB", "1MiB", "llc_refs: 1e6, power: 250W")
		}, lever: func(k int, lv *Levers) {
			for c := 2; c < 8; c++ {
				lv.MaxMHz[c] = []float64{3000, 2000, 1500, 1000}[k]
			}
		}},
		{name: "clock modulation of the neighbour", worse: false, yaml: func(int) string {
			return fmt.Sprintf(base, "120W", "0.1", "1MiB", "1MiB", "llc_refs: 1e6, power: 250W")
		}, lever: func(k int, lv *Levers) {
			for c := 2; c < 8; c++ {
				lv.Duty[c] = []float64{1, 0.75, 0.5, 0.25}[k]
			}
		}},
	}
	for _, kn := range knobs {
		t.Run(kn.name, func(t *testing.T) {
			var got []float64
			for k := 0; k < 4; k++ {
				sc := mustParse(t, kn.yaml(k))
				md := NewModel(sc.Machine, sc.Resolved())
				lv := NewLevers(2, sc.Machine.CPUs(), 1)
				if kn.lever != nil {
					kn.lever(k, lv)
				}
				got = append(got, slowdownOf(steady(md, lv, 0), 0))
			}
			for k := 1; k < len(got); k++ {
				if kn.worse && !(got[k] > got[k-1]) || !kn.worse && !(got[k] < got[k-1]) {
					t.Errorf("victim slowdown along the sweep %v: not strictly %s", fmtList(got), map[bool]string{true: "increasing", false: "decreasing"}[kn.worse])
				}
			}
			if got[0] < 0.999 || math.Abs(got[0]-got[len(got)-1]) < 0.02 {
				t.Errorf("sweep %v: the knob barely matters", fmtList(got))
			}
		})
	}
}

func fmtList(v []float64) string {
	var s []string
	for _, x := range v {
		s = append(s, fmt.Sprintf("%.3f", x))
	}
	return strings.Join(s, " ")
}

// A tenant alone runs at its solo speed, and two busy tenants pinned to one
// CPU each get half of it.
func TestCPUSharing(t *testing.T) {
	sc := mustParse(t, `
name: cpu
machine: {cpu: icelakex, sockets: 1, cores_per_socket: 4, tdp: 500W}
tenants:
  - {name: a, role: victim, cpus: "0", phases: [{from: 0s, memory_bound: 0.2}]}
  - {name: b, role: bystander, cpus: "0", phases: [{from: 0s, memory_bound: 0.2}]}
  - {name: c, role: bystander, cpus: "1", start: 10s, phases: [{from: 0s, memory_bound: 0.2}]}
`)
	md := NewModel(sc.Machine, sc.Resolved())
	lv := NewLevers(3, sc.Machine.CPUs(), 1)
	st := steady(md, lv, 0)
	if got := slowdownOf(st, 0); math.Abs(got-2) > 0.01 {
		t.Errorf("two busy tenants on one CPU: slowdown %.3f, want 2", got)
	}
	if st.Tenants[0].Waiting < 0.49 || st.Tenants[2].Active {
		t.Errorf("waiting %.2f CPUs (want 0.5); c active before its start: %v", st.Tenants[0].Waiting, st.Tenants[2].Active)
	}
	st = steady(md, lv, 10*time.Second)
	if got := slowdownOf(st, 2); math.Abs(got-1) > 0.001 {
		t.Errorf("a tenant alone on its CPU: slowdown %.4f, want 1", got)
	}
}

// Che's approximation: everything that fits hits; a streaming neighbour
// takes the cache in proportion to its insertions.
func TestCheTime(t *testing.T) {
	if T := cheTime([]cheUser{{a: 1e8, ws: 1000}, {a: 1e6, ws: 2000}}, 4000, 0); !math.IsInf(T, 1) {
		t.Errorf("fitting working sets: T = %g, want +Inf", T)
	}
	us := []cheUser{{a: 1e8, ws: 50000}, {a: 4e8, ws: 1e8}}
	T := cheTime(us, 100000, 0)
	fill := 0.0
	for _, u := range us {
		fill += u.ws * (1 - math.Exp(-u.a*T/u.ws))
	}
	if math.Abs(fill-100000) > 1 {
		t.Errorf("T = %g fills %g lines, want 100000", T, fill)
	}
	if h := hitRatio(1e8, 50000, T); h < 0.3 || h > 0.8 {
		t.Errorf("a 50k-line working set against a 4e8/s stream in 100k lines hits %.2f, want between", h)
	}
	if T2 := cheTime(us, 100000, T*0.9); math.Abs(T2-T) > 1e-9*T+1e-12 {
		t.Errorf("warm start changed the answer: %g vs %g", T2, T)
	}
}

// The model is a pure function of its inputs, and a run is reproducible
// for its seed.
func TestDeterminism(t *testing.T) {
	sc, md := busLockHost(t, "300k")
	lv := NewLevers(2, sc.Machine.CPUs(), 1)
	a, b := steady(md, lv, 0), steady(md, lv, 0)
	if !reflect.DeepEqual(a, b) {
		t.Error("two solves of the same inputs differ")
	}
	run := func(seed uint64) string {
		sc, err := Load("alita-buslock")
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(t.Context(), sc, Options{Policies: []string{PolicyNone}, Duration: 15 * time.Second, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(res)
		return string(b)
	}
	if x, y := run(7), run(7); x != y {
		t.Errorf("same seed, different results:\n%s\n%s", x, y)
	}
}

// Probe readings follow the model and differ by seed only in their noise.
func TestProbeReadings(t *testing.T) {
	sc := mustParse(t, `
name: probe
noise_off: true
machine: {cpu: skylakex, sockets: 2, cores_per_socket: 4, max_mhz: 3000}
tenants:
  - {name: p, role: polluter, cpus: "0", phases: [{from: 0s, memory_bound: 0, bus_locks: 684k}]}
`)
	s, err := newSimHost(sc, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	s.setState(s.model.quietState())
	pr := newSimProber(s, sense.ProbeConfig{CPUsPerDomain: 2})
	quiet, _ := pr.MeasureCPU(1, 4)
	s.setState(steady(s.model, s.levers, 0))
	loud, _ := pr.MeasureCPU(1, 4)
	want := map[string][2]float64{"lock": {1.2, 1.5}, "llc": {5, 8}, "dram": {8, 10}}
	for k := range quiet {
		r := loud[k].Ns / quiet[k].Ns
		if w := want[quiet[k].Kind]; r < w[0] || r > w[1] {
			t.Errorf("%s probe on the other socket: %.2fx under a 684k/s split-lock storm, want %.1f-%.1fx", quiet[k].Kind, r, w[0], w[1])
		}
	}
	if n := len(pr.Targets()); n != 4 {
		t.Errorf("%d probe targets, want 2 per domain", n)
	}
}

// A proof's DRAM reading times fewer chunks than an interval's
// (probe.proof_chunks): it scatters more, by the square root of their
// ratio, and its level is the same; the other kinds read alike.
func TestProofReadingsScatterMore(t *testing.T) {
	sc := mustParse(t, `
name: probe-noise
noise: 0.05
machine: {cpu: skylakex, sockets: 1, cores_per_socket: 4, max_mhz: 3000}
tenants:
  - {name: p, role: polluter, cpus: "0", phases: [{from: 0s, memory_bound: 0, bus_locks: 0}]}
`)
	s, err := newSimHost(sc, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	s.setState(s.model.quietState())
	pr := newSimProber(s, sense.ProbeConfig{CPUsPerDomain: 2}) // 7 chunks, 3 in a proof
	spread := func(read func(domain, cpu int, kinds ...string) ([]sense.ProbeReading, error), kind string) (mean, sd float64) {
		const n = 4000
		var xs []float64
		for range n {
			rs, _ := read(0, 1, kind)
			xs = append(xs, math.Log(rs[0].Ns))
		}
		for _, x := range xs {
			mean += x / n
		}
		for _, x := range xs {
			sd += (x - mean) * (x - mean) / n
		}
		return mean, math.Sqrt(sd)
	}
	im, isd := spread(pr.MeasureCPU, sense.ProbeDRAM)
	pm, psd := spread(pr.MeasureOnce, sense.ProbeDRAM)
	if r := psd / isd; r < 1.4 || r > 1.66 {
		t.Errorf("a proof's DRAM reading scatters %.2f× an interval's, want about √(7/3) = 1.53", r)
	}
	if math.Abs(pm-im) > 0.01 {
		t.Errorf("a proof's DRAM level %.3f, an interval's %.3f: want the same", pm, im)
	}
	_, llc := spread(pr.MeasureCPU, sense.ProbeLLC)
	_, pllc := spread(pr.MeasureOnce, sense.ProbeLLC)
	if r := pllc / llc; r < 0.9 || r > 1.1 {
		t.Errorf("a proof's LLC reading scatters %.2f× an interval's, want the same", r)
	}
}

// A CPU is shared max-min fairly, as CFS shares it among tenants of equal
// weight: a demand under an equal share is met in full, the others split
// the rest equally.
func TestWaterLevel(t *testing.T) {
	for _, c := range []struct {
		demands []float64
		want    float64
	}{
		{[]float64{0.3, 0.5}, math.Inf(1)},                   // fits
		{[]float64{1, 1}, 0.5},                               // equal split
		{[]float64{0.1, 1, 1}, 0.45},                         // the small one in full
		{[]float64{0.404, 0.637, 1}, 1.0 / 3},                // all over an equal share
		{[]float64{0.2, 0.3, 0.9, 0.9}, 0.8 / 3},             // 0.2 met, the rest split 0.8
		{[]float64{0.05, 0.1, 0.2, 2}, 1 - 0.05 - 0.1 - 0.2}, // one takes what is left
	} {
		got := waterLevel(c.demands, 1)
		if math.Abs(got-c.want) > 1e-9 && !(math.IsInf(got, 1) && math.IsInf(c.want, 1)) {
			t.Errorf("waterLevel(%v) = %v, want %v", c.demands, got, c.want)
		}
		if !math.IsInf(got, 1) {
			var sum float64
			for _, d := range c.demands {
				sum += min(d, got)
			}
			if math.Abs(sum-1) > 1e-9 {
				t.Errorf("waterLevel(%v) = %v hands out %v of 1", c.demands, got, sum)
			}
		}
	}
}
