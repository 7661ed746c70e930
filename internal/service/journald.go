// Package service makes the agent a well-behaved system service: systemd's
// notify protocol (readiness, watchdog, status, stopping) and a log format
// fit for journald.
package service

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"
)

// UnderJournal reports whether w is the stream journald connected this
// process to: systemd sets JOURNAL_STREAM to that stream's "device:inode",
// and a process whose stderr was redirected since must not take the
// variable it inherited for its own.
func UnderJournal(getenv func(string) string, w io.Writer) bool {
	want := getenv("JOURNAL_STREAM")
	f, ok := w.(*os.File)
	if want == "" || !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && fmt.Sprintf("%d:%d", st.Dev, st.Ino) == want
}

// LogHandler is the text handler on w; under journald (see UnderJournal) it
// leaves out time=, which journald stamps on every line itself.
func LogHandler(w io.Writer, getenv func(string) string, opts slog.HandlerOptions) slog.Handler {
	if UnderJournal(getenv, w) {
		replace := opts.ReplaceAttr
		opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			if replace != nil {
				return replace(groups, a)
			}
			return a
		}
	}
	return slog.NewTextHandler(w, &opts)
}
