package agent

import (
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
)

// busyRise is how much a CPU's busy fraction must rise from one look of
// the watch to the next to wake the agent for an interval: about four
// USER_HZ ticks of a quarter-second look, more than an idle CPU's jitter,
// less than a tenant that starts halfway through the look adds.
const busyRise = 0.3

// busyWake notices between intervals a CPU that turned busy. While no
// tenant is busy the probe's watch rests, so a tenant that starts (or
// wakes from idle) and pollutes at once would run up to a whole interval
// before anyone looked; one /proc/stat read a look finds it within a
// look instead. It wakes the agent at most once an interval, so a host
// whose CPUs keep turning busy and idle (a service that is not a tenant)
// costs at most one interval more an interval; a CPU that stays busy
// wakes nobody.
type busyWake struct {
	// read is each CPU's busy fraction since its previous call
	// (sense.CPUBusy.Read: nil on the first).
	read   func() (map[int]float64, error)
	prev   map[int]float64
	prevAt time.Time
	wokeAt time.Time
	// span is how long the last read's fractions cover: the time since
	// the read before it (0: the first read).
	span time.Duration
}

// prime reads the CPUs at an interval when no look has read them lately
// (at start, or after a long gap), so that the first look after it
// compares with the interval rather than only priming. It leaves a recent
// look's read alone: the interval in between may have read a CPU that just
// turned busy as busy already, and the next look would see no rise.
func (w *busyWake) prime(now time.Time, every time.Duration) {
	if w.read == nil || w.recent(now, every) {
		return
	}
	cur, err := w.read()
	if err != nil {
		cur = nil
	}
	w.keep(now, cur)
}

// keep stores a read taken at now.
func (w *busyWake) keep(now time.Time, cur map[int]float64) {
	w.span = 0
	if !w.prevAt.IsZero() && cur != nil {
		w.span = now.Sub(w.prevAt)
	}
	w.prev, w.prevAt = cur, now
}

// recent reports whether the last read is at most a few looks old: a
// read after a longer gap spans the gap, and compares with nothing.
func (w *busyWake) recent(now time.Time, every time.Duration) bool {
	return w.prev != nil && now.Sub(w.prevAt) <= 3*every
}

// rise is a CPU whose busy fraction rose from one look to the next.
type rise struct {
	CPU      int
	From, To float64
}

// look reads the CPUs once and reports the CPU whose busy fraction rose
// most since the look before, every apart, if it rose by busyRise or more
// (a look after a longer gap only primes: its fractions span the gap) and
// the agent was not woken in the last interval.
func (w *busyWake) look(now time.Time, every, interval time.Duration) (rise, bool) {
	if w.read == nil {
		return rise{}, false
	}
	prev, recent := w.prev, w.recent(now, every)
	cur, err := w.read()
	w.keep(now, cur)
	if err != nil || !recent {
		return rise{}, false
	}
	if !w.wokeAt.IsZero() && now.Sub(w.wokeAt) < interval {
		return rise{}, false
	}
	var best rise
	found := false
	for cpu, f := range cur {
		p, ok := prev[cpu]
		if !ok || f-p < busyRise {
			continue
		}
		if !found || f-p > best.To-best.From || f-p == best.To-best.From && cpu < best.CPU {
			best, found = rise{cpu, p, f}, true
		}
	}
	if found {
		w.wokeAt = now
	}
	return best, found
}

// idleBusy is the most a CPU's busy fraction may be over the last look
// for the probe to read there rather than on a busy CPU (see idle): three
// USER_HZ ticks of a 125 ms look. The agent's own threads run somewhere,
// and on the dev VM beside a busy latency server they ran on the idle
// CPU, which read 0.07-0.20 busy in 14 looks of 24 (0 in the others); a
// tenant that runs there for more than a quarter of the look does not
// pass.
const idleBusy = 0.25

// idle returns the CPUs the last read found idle (busy at most idleBusy),
// where that read is recent and spans at most a few looks: an older or
// longer one says nothing of now. Empty where none is known.
func (w *busyWake) idle(now time.Time, every time.Duration) cpuset.Set {
	if !w.recent(now, every) || w.span <= 0 || w.span > 3*every {
		return cpuset.Set{}
	}
	var cpus []int
	for cpu, f := range w.prev {
		if f <= idleBusy {
			cpus = append(cpus, cpu)
		}
	}
	return cpuset.Of(cpus...)
}
