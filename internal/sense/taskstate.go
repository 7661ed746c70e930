package sense

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"syscall"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

// TaskStates reads the scheduler state of a tenant's threads
// (/proc/TID/stat), through the host.
//
// A tenant's CPU counters cannot tell a tenant that stopped from one
// waiting out a CFS period: a busy loop switched from a 1 ms in 1 s cap to
// 1 ms in 16 ms may not run at all until the old period ends (up to the
// whole period), and neither its usage nor its cgroup's throttling counters move
// meanwhile. Its threads stay runnable (state R) throughout, while those of
// a tenant that stopped sleep (S), are stopped (T) or are gone.
type TaskStates struct {
	Host *host.Host
	// Threads, when set, reads a tenant's threads afresh for each call
	// (CgroupDiscoverer.Threads); where it fails, or is not set, the
	// tenant's own list is read.
	Threads func(Tenant) ([]int, error)
}

// Runnable reports whether any of t's threads is runnable now: on a CPU,
// waiting for one, or held back by its cgroup's CPU quota. known says the
// answer tells something: some of its threads could be read, or its
// cgroup, read afresh (Threads), holds none at all — everything in it
// exited. Threads that exited are skipped, so a kept list whose threads
// are all gone tells nothing (they may have been replaced by ones not yet
// discovered), nor does a host with no /proc for them.
func (s TaskStates) Runnable(_ context.Context, t Tenant) (runnable, known bool, err error) {
	tids := t.Threads
	if s.Threads != nil {
		if fresh, err := s.Threads(t); err == nil {
			if len(fresh) == 0 {
				return false, true, nil
			}
			tids = fresh
		}
	}
	for _, tid := range tids {
		stat, err := s.Host.ReadString("/proc/" + strconv.Itoa(tid) + "/stat")
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
				continue // exited
			}
			return false, known, fmt.Errorf("tenant %s: %w", t.ID, err)
		}
		state, ok := taskState(stat)
		if !ok {
			return false, known, fmt.Errorf("tenant %s: thread %d: unreadable /proc stat %q", t.ID, tid, stat)
		}
		known = true
		if state == 'R' {
			return true, true, nil
		}
	}
	return false, known, nil
}

// taskState is the state letter of a /proc/TID/stat line.
func taskState(stat string) (byte, bool) {
	f, err := host.ProcStatFields(stat)
	if err != nil {
		return 0, false
	}
	return f[0][0], true
}
