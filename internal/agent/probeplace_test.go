package agent

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

func TestOnIdle(t *testing.T) {
	const lock, llc, dram = sense.ProbeLock, sense.ProbeLLC, sense.ProbeDRAM
	cheap, all := []string{lock, dram}, []string{lock, llc, dram}
	domains := map[int]cpuset.Set{0: cpuset.Range(0, 3), 1: cpuset.Range(4, 7)}
	// Two targets a domain, the LLC walk on one of them, as
	// sense.Probe.Targets gives them.
	targets := []sense.Target{
		{Domain: 0, CPU: 0, Kinds: all}, {Domain: 0, CPU: 1, Kinds: cheap},
		{Domain: 1, CPU: 4, Kinds: cheap}, {Domain: 1, CPU: 5, Kinds: all},
	}
	tests := []struct {
		name string
		idle string
		turn int
		want []sense.Target
	}{
		{"none idle: as they were", "", 0, targets},
		{"idle CPUs of no domain: as they were", "9", 0, targets},
		{"one idle CPU takes both targets of its domain, every kind once, in the probe's order", "2", 0, []sense.Target{
			{Domain: 0, CPU: 2, Kinds: all},
			{Domain: 1, CPU: 4, Kinds: cheap}, {Domain: 1, CPU: 5, Kinds: all},
		}},
		{"two idle CPUs take one target each", "2-3,7", 0, []sense.Target{
			{Domain: 0, CPU: 2, Kinds: all}, {Domain: 0, CPU: 3, Kinds: cheap},
			{Domain: 1, CPU: 7, Kinds: all},
		}},
		{"the turn rotates among the idle CPUs", "1-3", 1, []sense.Target{
			{Domain: 0, CPU: 2, Kinds: all}, {Domain: 0, CPU: 3, Kinds: cheap},
			{Domain: 1, CPU: 4, Kinds: cheap}, {Domain: 1, CPU: 5, Kinds: all},
		}},
		{"the turn wraps", "1-3", 2, []sense.Target{
			{Domain: 0, CPU: 3, Kinds: all}, {Domain: 0, CPU: 1, Kinds: cheap},
			{Domain: 1, CPU: 4, Kinds: cheap}, {Domain: 1, CPU: 5, Kinds: all},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := onIdle(targets, domains, cpuset.MustParse(tc.idle), tc.turn)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
	t.Run("a target with no kinds reads them all", func(t *testing.T) {
		got := onIdle([]sense.Target{{Domain: 0, CPU: 0}, {Domain: 0, CPU: 1, Kinds: cheap}}, domains, cpuset.Of(3), 0)
		want := []sense.Target{{Domain: 0, CPU: 3}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
}

func TestBusyWakeIdle(t *testing.T) {
	const every = 125 * time.Millisecond
	now := time.Unix(1000, 0)
	tests := []struct {
		name  string
		reads []map[int]float64
		gaps  []time.Duration // between reads, then from the last read to the question (default every)
		want  string
	}{
		{"no read", nil, nil, ""},
		{"only a first read: no fractions", []map[int]float64{nil}, nil, ""},
		{"idle and nearly idle CPUs", []map[int]float64{nil, {0: 0, 1: 0.25, 2: 0.26, 3: 1}}, nil, "0-1"},
		{"a read that spans a long gap says nothing of now", []map[int]float64{nil, {0: 0, 1: 1}}, []time.Duration{4 * every, 0}, ""},
		{"nor does an old one", []map[int]float64{nil, {0: 0, 1: 1}}, []time.Duration{every, 4 * every}, ""},
		{"a read with no fractions", []map[int]float64{nil, {0: 0}, nil}, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := &busyReads{reads: tc.reads}
			w := &busyWake{read: b.read}
			at := now
			gap := func(i int) time.Duration {
				if i < len(tc.gaps) {
					return tc.gaps[i]
				}
				return every
			}
			for i := range tc.reads {
				if i > 0 {
					at = at.Add(gap(i - 1))
				}
				w.look(at, every, time.Second)
			}
			if len(tc.reads) > 0 {
				at = at.Add(gap(len(tc.reads) - 1))
			}
			want := cpuset.MustParse(tc.want)
			if got := w.idle(at, every); !got.Equal(want) {
				t.Errorf("idle = %s, want %s", got, want)
			}
		})
	}
}

func TestBusyTenantCPUs(t *testing.T) {
	all := cpuset.Range(0, 3)
	tenant := func(cpus string) sense.Tenant { return sense.Tenant{CPUs: cpuset.MustParse(cpus)} }
	samples := []sample{
		{t: tenant("0"), usage: 0.9, fresh: true},  // busy
		{t: tenant("1"), usage: 0.01, fresh: true}, // idle
		{t: tenant("2"), fresh: false},             // new: its use not known
	}
	if got, want := busyTenantCPUs(samples, all), cpuset.Of(0, 2); !got.Equal(want) {
		t.Errorf("got %s, want %s", got, want)
	}
	unknown := append(samples, sample{t: sense.Tenant{}, usage: 0.5, fresh: true})
	if got := busyTenantCPUs(unknown, all); !got.Equal(all) {
		t.Errorf("a busy tenant whose CPUs are not known: got %s, want every CPU %s", got, all)
	}
}

// The probe reads on a CPU no tenant keeps busy while there is one, and
// the busy victim's CPU is left alone; a polluter that starts there
// makes it busy, and the probe reads on the victim's CPU again and
// catches it. With prefer_idle off it reads on both CPUs all along.
func TestAgentProbeReadsOnAnIdleCPU(t *testing.T) {
	for _, prefer := range []bool{true, false} {
		w := newWorld(t) // the victim on CPU 1, the polluter and the bystander on CPU 0
		w.setRunning(false)
		w.mu.Lock()
		w.rates = map[string]float64{"bystander": 0}
		w.mu.Unlock()
		busy := func() (map[int]float64, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.running {
				return map[int]float64{0: 1, 1: 1}, nil
			}
			return map[int]float64{0: 0.02, 1: 1}, nil
		}
		cfg := testConfig(t.TempDir())
		cfg.Interval = 500 * time.Millisecond // looks between intervals, which read the CPUs
		cfg.Probe.PreferIdle = &prefer
		hs := newVirtualHarnessWith(t, w, cfg, nil, func(d *Deps) { d.CPUBusy = busy })
		hs.advance(t, 4*cfg.Interval, nil)
		w.mu.Lock()
		w.probedOn = nil
		w.mu.Unlock()
		hs.advance(t, 10*cfg.Interval, nil)
		w.mu.Lock()
		quiet := slices.Clone(w.probedOn)
		w.mu.Unlock()
		if len(quiet) == 0 {
			t.Fatalf("prefer_idle %v: no probe reading in ten intervals", prefer)
		}
		if onVictims := slices.Contains(quiet, 1); onVictims == prefer {
			t.Errorf("prefer_idle %v: the probe read on CPUs %v, on the busy victim's CPU 1: %v", prefer, quiet, onVictims)
		}
		w.setRunning(true)
		hs.until(t, "throttle of the polluter", 5*time.Second, func() bool { return hs.has(api.KindThrottle, "polluter") })
		hs.stop(t)
		w.mu.Lock()
		caught := slices.Clone(w.probedOn[len(quiet):])
		w.mu.Unlock()
		if !slices.Contains(caught, 1) {
			t.Errorf("prefer_idle %v: the probe read on %v once the polluter ran on CPU 0, never on CPU 1", prefer, caught)
		}
	}
}
