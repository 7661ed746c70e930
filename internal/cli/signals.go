package cli

import (
	"context"
	"os"
	"os/signal"
	"slices"
	"syscall"
)

// terminatingSignals are the signals whose default action ends the process
// and that a process can catch: the agent catches every one and restores
// before it exits (but SIGHUP, which reloads), so no signal strands a
// throttle. SIGKILL and SIGSTOP
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

// notifyAgent ignores SIGPIPE — `crosstalk run 2>&1 | head` must not kill
// the agent when head exits: its log writes fail instead — and returns a
// context cancelled by any terminating signal but SIGHUP: by the daemon
// convention that reloads the configuration, and arrives on reload. It is
// caught from here on, so a SIGHUP during start-up waits for the agent
// rather than killing it.
func notifyAgent(parent context.Context) (ctx context.Context, reload <-chan os.Signal, stop context.CancelFunc) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	signal.Ignore(syscall.SIGPIPE)
	sigs := slices.DeleteFunc(terminatingSignals(), func(s os.Signal) bool { return s == syscall.SIGHUP })
	ctx, cancel := signal.NotifyContext(parent, sigs...)
	return ctx, hup, func() { cancel(); signal.Stop(hup) }
}
