package libvirt

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// logBuf is a slog handler target that keeps every line, for tests that
// check what was logged.
type logBuf struct {
	mu    sync.Mutex
	t     testing.TB
	lines []string
}

func (b *logBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := strings.TrimRight(string(p), "\n")
	b.lines = append(b.lines, s)
	b.t.Log(s)
	return len(p), nil
}

// contains reports whether a logged line contains all of the parts.
func (b *logBuf) contains(parts ...string) bool { return b.count(parts...) > 0 }

// count is how many logged lines contain all of the parts.
func (b *logBuf) count(parts ...string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
next:
	for _, l := range b.lines {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		n++
	}
	return n
}

func newLog(t testing.TB) (*slog.Logger, *logBuf) {
	b := &logBuf{t: t}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

func testLogger(t testing.TB) *slog.Logger {
	l, _ := newLog(t)
	return l
}
