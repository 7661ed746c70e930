package service

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/crosstalk-project/crosstalk/internal/api"
)

// Notifier speaks systemd's notify protocol for the agent (Type=notify):
// READY=1 once the first interval has run, WATCHDOG=1 as the agent's loop
// makes progress, STATUS= lines saying what it watches, and STOPPING=1 on
// the way out. Without NOTIFY_SOCKET it does nothing.
//
// It is not safe for concurrent use: Run drives it from one goroutine.
type Notifier struct {
	log *slog.Logger
	now func() time.Time
	// watchdog is systemd's WatchdogSec (0: no watchdog); the loop's
	// progress is reported every half of it.
	watchdog time.Duration
	enabled  bool
	ready    bool
	pinged   time.Time
	status   string
}

// NewNotifier reads the protocol's environment (NOTIFY_SOCKET,
// WATCHDOG_USEC, WATCHDOG_PID).
func NewNotifier(log *slog.Logger) *Notifier {
	n := &Notifier{log: log, now: time.Now}
	// daemon.SdNotify reads the socket from the environment itself.
	n.enabled = os.Getenv("NOTIFY_SOCKET") != ""
	if wd, err := daemon.SdWatchdogEnabled(false); err != nil {
		log.Warn("systemd watchdog settings unreadable: no watchdog", "err", err)
	} else {
		n.watchdog = wd
	}
	return n
}

// Enabled reports whether systemd listens (NOTIFY_SOCKET is set).
func (n *Notifier) Enabled() bool { return n.enabled }

// Watchdog is systemd's watchdog timeout (0: none).
func (n *Notifier) Watchdog() time.Duration { return n.watchdog }

// Run feeds systemd from the agent's loop until ctx ends, then says the
// agent is stopping: every beat is a pass of the loop, so a loop that hangs
// stops the watchdog pings and systemd restarts the agent. state is the
// agent's latest published state.
func (n *Notifier) Run(ctx context.Context, beats <-chan struct{}, state func() (api.State, bool)) {
	if !n.enabled {
		return
	}
	for {
		select {
		case <-ctx.Done():
			// The agent's Run ends with the same context: it restores now.
			n.Stopping()
			return
		case <-beats:
			n.Beat(state())
		}
	}
}

// Beat reports a pass of the agent's loop and its latest state.
func (n *Notifier) Beat(st api.State, ok bool) {
	if !n.enabled {
		return
	}
	now := n.now()
	var msg string
	if ok {
		if s := Status(st); s != n.status {
			n.status = s
			msg += "STATUS=" + s + "\n"
		}
	}
	if !n.ready && ok {
		n.ready = true
		msg += daemon.SdNotifyReady + "\n"
	}
	if n.watchdog > 0 && now.Sub(n.pinged) >= n.watchdog/2 {
		n.pinged = now
		msg += daemon.SdNotifyWatchdog + "\n"
	}
	n.send(msg)
}

// Status sends a free-form STATUS= line (a reload's outcome).
func (n *Notifier) Status(s string) {
	if n.enabled {
		n.status = s
		n.send("STATUS=" + s + "\n")
	}
}

// Stopping tells systemd the agent is stopping (it restores first).
func (n *Notifier) Stopping() {
	if n.enabled {
		n.send(daemon.SdNotifyStopping + "\nSTATUS=stopping: restoring every tenant\n")
	}
}

func (n *Notifier) send(msg string) {
	if msg == "" {
		return
	}
	if _, err := daemon.SdNotify(false, msg); err != nil {
		n.log.Debug("systemd notify", "err", err)
	}
}

// Status is the one line systemctl status shows for the agent.
func Status(st api.State) string {
	throttled := 0
	for _, t := range st.Tenants {
		if t.Throttled {
			throttled++
		}
	}
	s := fmt.Sprintf("watching %d tenants, %d throttled", len(st.Tenants), throttled)
	if st.Proof != nil {
		s += ", proving " + st.Proof.Name
	}
	if st.DryRun {
		s += " (dry run)"
	}
	return s
}
