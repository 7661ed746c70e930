package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// terminatingSignals are the signals whose default action ends the process
// and that a process can catch: the agent catches every one and restores
// before it exits, so no signal strands a throttle. SIGKILL and SIGSTOP
// cannot be caught (restore after a SIGKILL is `crosstalk restore`'s job,
// the systemd unit's ExecStopPost); the faults the Go runtime raises on
// itself (SIGSEGV, SIGBUS, SIGFPE) are crashes, not requests to stop.
// SIGPROF is left to the runtime's profiler, SIGPIPE is ignored.
func terminatingSignals() []os.Signal {
	sigs := []os.Signal{
		syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGVTALRM,
		syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGPWR, syscall.SIGSTKFLT,
		syscall.SIGIO, syscall.SIGABRT, syscall.SIGTRAP, syscall.SIGSYS,
	}
	// The real-time signals end a process by default too (SIGRTMIN is 34
	// for a static Go binary: there is no libc to reserve 32 and 33).
	for s := 34; s <= 64; s++ {
		sigs = append(sigs, syscall.Signal(s))
	}
	return sigs
}

// notifyTerminating ignores SIGPIPE — `crosstalk run 2>&1 | head` must not
// kill the agent when head exits: its log writes fail instead — and returns
// a context cancelled by any terminating signal.
func notifyTerminating(parent context.Context) (context.Context, context.CancelFunc) {
	signal.Ignore(syscall.SIGPIPE)
	return signal.NotifyContext(parent, terminatingSignals()...)
}
