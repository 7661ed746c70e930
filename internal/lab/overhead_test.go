package lab

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

// The reference wakes for its whole span and stops when asked to, reading
// through the host (a captured tree here, where a missing file is no error).
func TestWakeEveryRunsItsSpanAndStopsWhenAsked(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc/stat"), []byte("cpu  1 0 0 1 0 0 0 0 0 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	start := time.Now()
	if err := wakeEvery(context.Background(), h, 10*time.Millisecond, 60*time.Millisecond); err != nil {
		t.Fatalf("wakeEvery: %v", err)
	}
	if d := time.Since(start); d < 60*time.Millisecond {
		t.Errorf("returned after %s, before its 60ms span", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := wakeEvery(ctx, h, 10*time.Millisecond, time.Hour); err != context.Canceled {
		t.Errorf("cancelled: got %v, want context.Canceled", err)
	}
}

// procSwitches counts this process's own switches: a thread that sleeps
// is switched out and back in.
func TestProcSwitchesCountsAProcessThatSleeps(t *testing.T) {
	before := procSwitches(os.Getpid())
	for range 5 {
		time.Sleep(2 * time.Millisecond)
	}
	after := procSwitches(os.Getpid())
	if before <= 0 || after <= before {
		t.Errorf("switches %d then %d: want a positive count that grows across five sleeps", before, after)
	}
	if n := procSwitches(-1); n != 0 {
		t.Errorf("no such process: %d switches, want 0", n)
	}
	// The same status files give the memory.
	if rss, peak := procRSS(os.Getpid()); !(rss > 0 && peak >= rss) {
		t.Errorf("this process's memory: RSS %v MiB, peak %v MiB", rss, peak)
	}
}
