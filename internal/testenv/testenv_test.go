package testenv

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The lock excludes a second holder (another open of the file, as another
// test binary would make) until the first lets go.
func TestLockExcludesUntilReleased(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	unlock, err := lock(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock(path, 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "still held") {
		t.Fatalf("second lock while held: err = %v, want still held", err)
	}
	unlock()
	unlock2, err := lock(path, time.Second)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	unlock2()
}
