package service

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/api"
)

// fakeSystemd is a notify socket, as systemd listens on for a Type=notify
// service.
type fakeSystemd struct {
	t    *testing.T
	conn *net.UnixConn
}

func newFakeSystemd(t *testing.T, watchdog time.Duration) *fakeSystemd {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_USEC", "")
	t.Setenv("WATCHDOG_PID", "")
	if watchdog > 0 {
		t.Setenv("WATCHDOG_USEC", fmt.Sprint(watchdog.Microseconds()))
		t.Setenv("WATCHDOG_PID", fmt.Sprint(os.Getpid()))
	}
	return &fakeSystemd{t: t, conn: conn}
}

// messages reads what arrives within wait, one datagram a string.
func (f *fakeSystemd) messages(wait time.Duration) []string {
	var out []string
	buf := make([]byte, 4096)
	for {
		f.conn.SetReadDeadline(time.Now().Add(wait))
		n, err := f.conn.Read(buf)
		if err != nil {
			return out
		}
		out = append(out, string(buf[:n]))
	}
}

func state(tenants, throttled int) api.State {
	var st api.State
	for i := range tenants {
		st.Tenants = append(st.Tenants, api.TenantState{ID: fmt.Sprint(i), Throttled: i < throttled})
	}
	return st
}

// READY=1 comes with the first published state, not before; the status
// line follows the state and is sent when it changes; STOPPING=1 at the end.
func TestNotifierReadyStatusStopping(t *testing.T) {
	sd := newFakeSystemd(t, 0)
	n := NewNotifier(slog.New(slog.DiscardHandler))
	if !n.Enabled() || n.Watchdog() != 0 {
		t.Fatalf("enabled %v, watchdog %s", n.Enabled(), n.Watchdog())
	}
	n.Beat(api.State{}, false) // the loop ran, nothing published yet
	if got := sd.messages(50 * time.Millisecond); len(got) != 0 {
		t.Fatalf("before the first state: %q", got)
	}
	n.Beat(state(3, 1), true)
	got := sd.messages(50 * time.Millisecond)
	if len(got) != 1 || !strings.Contains(got[0], "READY=1") || !strings.Contains(got[0], "STATUS=watching 3 tenants, 1 throttled\n") {
		t.Fatalf("first state: %q", got)
	}
	n.Beat(state(3, 1), true)
	if got := sd.messages(50 * time.Millisecond); len(got) != 0 {
		t.Errorf("an unchanged state sent %q", got)
	}
	st := state(4, 2)
	st.Proof = &api.ProofState{Name: "noisy"}
	n.Beat(st, true)
	if got := sd.messages(50 * time.Millisecond); len(got) != 1 || got[0] != "STATUS=watching 4 tenants, 2 throttled, proving noisy\n" {
		t.Errorf("changed state: %q", got)
	}
	n.Stopping()
	if got := sd.messages(50 * time.Millisecond); len(got) != 1 || !strings.HasPrefix(got[0], "STOPPING=1\n") {
		t.Errorf("stopping: %q", got)
	}
}

// Watchdog pings follow the loop's beats, at most one per half of
// WATCHDOG_USEC: a loop that stops beating stops the pings.
func TestNotifierWatchdogFollowsTheLoop(t *testing.T) {
	sd := newFakeSystemd(t, 200*time.Millisecond)
	n := NewNotifier(slog.New(slog.DiscardHandler))
	if n.Watchdog() != 200*time.Millisecond {
		t.Fatalf("watchdog %s", n.Watchdog())
	}
	beats := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.Run(ctx, beats, func() (api.State, bool) { return state(1, 0), true }); close(done) }()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()

	pings := func(within time.Duration, beating bool) int {
		end := time.Now().Add(within)
		count := 0
		for time.Now().Before(end) {
			if beating {
				select {
				case beats <- struct{}{}:
				default:
				}
			}
			for _, m := range sd.messages(10 * time.Millisecond) {
				count += strings.Count(m, "WATCHDOG=1")
			}
		}
		return count
	}
	// Beating every ~10 ms for 450 ms: a ping at once, then one every 100 ms.
	if got := pings(450*time.Millisecond, true); got < 3 || got > 6 {
		t.Errorf("%d pings in 450 ms of a beating loop, want about 5", got)
	}
	if got := pings(400*time.Millisecond, false); got != 0 {
		t.Errorf("%d pings while the loop was stuck", got)
	}
	if got := pings(150*time.Millisecond, true); got < 1 {
		t.Error("no ping once the loop beats again")
	}
	cancel()
	<-done
	stopped = true
	if got := sd.messages(50 * time.Millisecond); len(got) != 1 || !strings.HasPrefix(got[0], "STOPPING=1\n") {
		t.Errorf("when the context ends: %q, want STOPPING=1", got)
	}
}

// Without NOTIFY_SOCKET nothing is sent and Run returns at once.
func TestNotifierWithoutSystemd(t *testing.T) {
	sd := newFakeSystemd(t, 0)
	t.Setenv("NOTIFY_SOCKET", "")
	n := NewNotifier(slog.New(slog.DiscardHandler))
	if n.Enabled() {
		t.Fatal("enabled without NOTIFY_SOCKET")
	}
	n.Beat(state(1, 0), true)
	n.Status("x")
	n.Stopping()
	done := make(chan struct{})
	go func() { n.Run(context.Background(), nil, nil); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("Run waits without systemd")
	}
	if got := sd.messages(50 * time.Millisecond); len(got) != 0 {
		t.Errorf("sent %q", got)
	}
}

// Under journald (JOURNAL_STREAM names stderr) lines carry no time=;
// elsewhere they do.
func TestLogHandlerUnderJournal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	st := fi.Sys().(*syscall.Stat_t)
	self := fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	other := fmt.Sprintf("%d:%d", st.Dev, st.Ino+1)
	for _, tc := range []struct {
		name    string
		stream  string
		w       func() *bytes.Buffer // nil: the file
		journal bool
	}{
		{"no JOURNAL_STREAM", "", nil, false},
		{"stderr is the journal's stream", self, nil, true},
		{"stderr redirected since", other, nil, false},
		{"not a file", self, func() *bytes.Buffer { return &bytes.Buffer{} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := func(k string) string {
				if k == "JOURNAL_STREAM" {
					return tc.stream
				}
				return ""
			}
			f.Truncate(0)
			f.Seek(0, 0)
			var out string
			if tc.w != nil {
				b := tc.w()
				if UnderJournal(env, b) {
					t.Error("a buffer taken for the journal")
				}
				slog.New(LogHandler(b, env, slog.HandlerOptions{})).Info("hello", "k", 1)
				out = b.String()
			} else {
				if got := UnderJournal(env, f); got != tc.journal {
					t.Errorf("UnderJournal = %v, want %v", got, tc.journal)
				}
				slog.New(LogHandler(f, env, slog.HandlerOptions{})).Info("hello", "k", 1)
				b, _ := os.ReadFile(f.Name())
				out = string(b)
			}
			if !strings.Contains(out, "level=INFO msg=hello k=1") {
				t.Errorf("log line %q", out)
			}
			if hasTime := strings.Contains(out, "time="); hasTime == tc.journal {
				t.Errorf("journal %v, log line %q", tc.journal, out)
			}
		})
	}
}
