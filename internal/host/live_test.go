package host

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// A root other than "/" is the live machine only when its proc/self names
// this process, as the node's procfs mounted at /host/proc does in a
// DaemonSet with host PID.
func TestIsLiveUnderARoot(t *testing.T) {
	for _, tc := range []struct {
		name string
		self string // proc/self link target ("" = none)
		live bool
	}{
		{"captured tree", "", false},
		{"another pid", "1", false},
		{"this process", strconv.Itoa(os.Getpid()), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			os.MkdirAll(filepath.Join(root, "proc"), 0o755)
			if tc.self != "" {
				if err := os.Symlink(tc.self, filepath.Join(root, "proc", "self")); err != nil {
					t.Fatal(err)
				}
			}
			h, err := Open(root)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			if h.IsLive() != tc.live {
				t.Errorf("IsLive = %v, want %v", h.IsLive(), tc.live)
			}
		})
	}
	h, err := Open("/")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if !h.IsLive() {
		t.Error("/ is not live")
	}
}
