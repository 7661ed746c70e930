package load

import (
	"time"

	"golang.org/x/sys/unix"
)

// preciseTimers makes nanosleep on the calling thread wake on time: the
// default timer slack of 50 µs would be charged to every request's latency.
// The caller must be locked to its thread and must exit without unlocking,
// so the thread (and its setting) dies with it.
func preciseTimers() {
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
}

// preciseSleep blocks the calling (locked) thread for d with nanosleep(2):
// the Go runtime's timers wake late by up to a millisecond, which would be
// the open-loop client's whole latency budget.
func preciseSleep(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	for {
		var left unix.Timespec
		err := unix.Nanosleep(&ts, &left)
		if err != unix.EINTR {
			return
		}
		ts = left
	}
}
