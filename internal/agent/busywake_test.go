package agent

import (
	"errors"
	"testing"
	"time"
)

// busyReads replays CPU busy fractions, one map a read (nil: a first read).
type busyReads struct {
	reads []map[int]float64
	err   error
}

func (b *busyReads) read() (map[int]float64, error) {
	if b.err != nil {
		return nil, b.err
	}
	if len(b.reads) == 0 {
		return map[int]float64{}, nil
	}
	r := b.reads[0]
	b.reads = b.reads[1:]
	return r, nil
}

func TestBusyWake(t *testing.T) {
	const every, interval = 125 * time.Millisecond, 500 * time.Millisecond
	idle := map[int]float64{0: 0.02, 1: 0.05}
	tests := []struct {
		name  string
		reads []map[int]float64
		gaps  []time.Duration // before each look after the first (default every)
		want  []bool          // one a look
	}{
		{"a CPU turns busy", []map[int]float64{nil, idle, {0: 0.6, 1: 0.05}}, nil, []bool{false, false, true}},
		{"idle jitter wakes nobody", []map[int]float64{nil, idle, {0: 0.25, 1: 0.1}, idle}, nil, []bool{false, false, false, false}},
		{"a CPU that stays busy wakes once", []map[int]float64{nil, idle, {0: 1}, {0: 1}, {0: 1}, {0: 1}, {0: 1}}, nil,
			[]bool{false, false, true, false, false, false, false}},
		{"turning busy again wakes again an interval later", []map[int]float64{nil, idle, {0: 1}, idle, {0: 1}, idle, idle, {0: 1}}, nil,
			[]bool{false, false, true, false, false, false, false, true}},
		{"a look after a long gap only primes", []map[int]float64{nil, idle, {0: 0.9}, {0: 0.9}},
			[]time.Duration{every, time.Second, every}, []bool{false, false, false, false}},
		{"a CPU that came online is no rise", []map[int]float64{nil, {0: 0.1}, {0: 0.1, 1: 1}}, nil, []bool{false, false, false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := &busyReads{reads: tc.reads}
			w := busyWake{read: src.read}
			now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			for i, want := range tc.want {
				if i > 0 {
					gap := every
					if tc.gaps != nil {
						gap = tc.gaps[i-1]
					}
					now = now.Add(gap)
				}
				if _, got := w.look(now, every, interval); got != want {
					t.Errorf("look %d: woke %v, want %v", i, got, want)
				}
			}
		})
	}
	t.Run("the first look after the first interval compares with it", func(t *testing.T) {
		src := &busyReads{reads: []map[int]float64{idle, {0: 0.7}}}
		w := busyWake{read: src.read}
		now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		w.prime(now, every)
		if _, woke := w.look(now.Add(every), every, interval); !woke {
			t.Error("a CPU busy since the first interval did not wake the agent at the first look")
		}
	})
	t.Run("an interval between looks leaves the last look's read", func(t *testing.T) {
		// The interval would read CPU 0 busy already: the look after it
		// must still compare with the look before.
		src := &busyReads{reads: []map[int]float64{nil, idle, {0: 0.7}}}
		w := busyWake{read: src.read}
		now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		w.look(now, every, interval)
		w.look(now.Add(every), every, interval)
		w.prime(now.Add(every+every/2), every)
		if _, woke := w.look(now.Add(2*every), every, interval); !woke {
			t.Error("a CPU that turned busy around an interval did not wake the agent")
		}
	})
	t.Run("the CPU that rose most is named", func(t *testing.T) {
		src := &busyReads{reads: []map[int]float64{nil, {0: 0, 1: 0.1, 2: 0}, {0: 0.5, 1: 1, 2: 0.8}}}
		w := busyWake{read: src.read}
		now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		w.look(now, every, interval)
		w.look(now.Add(every), every, interval)
		r, woke := w.look(now.Add(2*every), every, interval)
		if want := (rise{CPU: 1, From: 0.1, To: 1}); !woke || r != want {
			t.Errorf("woke %v for %+v, want %+v", woke, r, want)
		}
	})
	t.Run("no reader, or a failing one, never wakes", func(t *testing.T) {
		var none busyWake
		failing := busyWake{read: (&busyReads{err: errors.New("no /proc/stat")}).read}
		now := time.Now()
		for i := range 4 {
			_, a := none.look(now.Add(time.Duration(i)*every), every, interval)
			_, b := failing.look(now.Add(time.Duration(i)*every), every, interval)
			if a || b {
				t.Fatal("woke")
			}
		}
	})
}

// A tenant that turns busy between intervals of an idle host is looked at
// within a watch, not an interval later: the probe's watch rests while no
// tenant is busy, and a polluter that starts then would run free until the
// next interval.
func TestVirtualLoopWakesWhenACPUTurnsBusy(t *testing.T) {
	for _, wake := range []bool{true, false} {
		w := newWorld(t)
		w.mu.Lock()
		w.idle = true
		w.mu.Unlock()
		cfg := testConfig(t.TempDir())
		cfg.Interval = 2 * time.Second
		var tweak []func(*Deps)
		if wake {
			tweak = append(tweak, func(d *Deps) { d.CPUBusy = w.cpuBusy })
		}
		hs := newVirtualHarnessWith(t, w, cfg, nil, tweak...)
		hs.advance(t, 3*cfg.Interval, nil)
		// Just after an interval, the next a whole interval away.
		steps := hs.agent.steps
		hs.until(t, "an interval", 2*cfg.Interval, func() bool { return hs.agent.steps > steps })
		w.mu.Lock()
		w.idle = false
		w.mu.Unlock()
		steps = hs.agent.steps
		took := hs.until(t, "an interval", 2*cfg.Interval, func() bool { return hs.agent.steps > steps })
		if most := hs.agent.WatchEvery() + 50*time.Millisecond; wake && took > most {
			t.Errorf("the interval came %s after the tenants turned busy, want at most %s (the next look of the watch)", took, most)
		}
		if !wake && took < cfg.Interval*3/4 {
			t.Errorf("without a CPU reader the interval came %s after the tenants turned busy: the test does not show the wake", took)
		}
		hs.stop(t)
	}
}
