package sim

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// The traps by which a CPU reports split and bus locks to the kernel.
const (
	trapSplitLock = "split_lock" // #AC (split_lock_detect)
	trapBusLock   = "bus_lock"   // #DB (bus_lock_detect)
)

// busLockTrap is how the machine's CPU reports a split lock, as its
// cpuinfo flags say: #AC on Intel Xeons from Ice Lake on, #DB on AMD from
// Zen 3 on; "" for neither.
func (m Machine) busLockTrap() string {
	cm := cpuModels[m.CPU]
	switch {
	case cm.vendor == "GenuineIntel" && cm.model != 0x3f && cm.model != 0x55:
		return trapSplitLock
	case cm.vendor == "AuthenticAMD" && cm.family >= 0x19:
		return trapBusLock
	}
	return ""
}

// The kernel's printk rate limit for these reports (DEFAULT_RATELIMIT_BURST
// in DEFAULT_RATELIMIT_INTERVAL): ten lines per five seconds, host-wide.
const (
	kmsgBurst    = 10
	kmsgInterval = 5.0 // seconds
)

// kernelLog writes the reports Linux logs in its default warn mode to the
// tree's dev/kmsg, one record a line as /dev/kmsg reads them: for #DB a
// line per bus lock, for #AC one per thread (its first split lock), both
// through the printk rate limit. Which tenant's lock takes a slot of the
// limit is drawn in proportion to the tenants' locks.
type kernelLog struct {
	f        *os.File
	trap     string
	rng      *rand.Rand
	seq      int
	window   float64 // start of the rate limit's interval, seconds
	printed  int     // lines printed in it
	reported map[int]bool
}

func newKernelLog(root string, trap string, seed uint64) (*kernelLog, error) {
	p := filepath.Join(root, "dev", "kmsg")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return &kernelLog{f: f, trap: trap, rng: newRNG(seed, 0xb105), window: -kmsgInterval, reported: map[int]bool{}}, nil
}

// locker is a tenant that took locks in a step: its threads and how many.
type locker struct {
	tids  []int
	comm  []string // per thread
	locks float64
}

// log records the reports of one step ending at now (seconds).
func (k *kernelLog) log(now float64, lockers []locker) error {
	if k.trap == trapSplitLock {
		// #AC: each thread's first split lock, in the order they come.
		for _, l := range lockers {
			for i, tid := range l.tids {
				if k.reported[tid] {
					continue
				}
				if !k.take(now) {
					return nil
				}
				k.reported[tid] = true
				if err := k.write(now, l.comm[i], tid); err != nil {
					return err
				}
			}
		}
		return nil
	}
	// #DB: a line per bus lock, drawn among the tenants in proportion to
	// their locks, as long as the limit lets lines through.
	var total float64
	for _, l := range lockers {
		total += l.locks
	}
	n := int(total)
	if k.rng.Float64() < total-float64(n) {
		n++
	}
	for range n {
		if !k.take(now) {
			return nil
		}
		l := k.pick(lockers, total)
		i := k.rng.IntN(len(l.tids))
		if err := k.write(now, l.comm[i], l.tids[i]); err != nil {
			return err
		}
	}
	return nil
}

// take spends a line of the rate limit at now, if one is left.
func (k *kernelLog) take(now float64) bool {
	if now-k.window >= kmsgInterval {
		k.window, k.printed = now, 0
	}
	if k.printed >= kmsgBurst {
		return false
	}
	k.printed++
	return true
}

func (k *kernelLog) write(now float64, comm string, tid int) error {
	k.seq++
	code := map[string]string{trapSplitLock: "AC", trapBusLock: "DB"}[k.trap]
	_, err := fmt.Fprintf(k.f, "4,%d,%d,-;x86/split lock detection: #%s: %s/%d took a %s trap at address: 0x401a2c\n",
		k.seq, int64(now*1e6), code, comm, tid, k.trap)
	return err
}

// pick draws a locker in proportion to its locks.
func (k *kernelLog) pick(lockers []locker, total float64) locker {
	x := k.rng.Float64() * total
	for _, l := range lockers {
		if x < l.locks {
			return l
		}
		x -= l.locks
	}
	return lockers[len(lockers)-1]
}

func (k *kernelLog) close() { k.f.Close() }
