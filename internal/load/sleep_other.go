//go:build !linux

package load

import "time"

func preciseTimers() {}

// preciseSleep falls back to the runtime's timers outside Linux.
func preciseSleep(d time.Duration) { time.Sleep(d) }
