package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRereader(t *testing.T) {
	root := tree(t, map[string]string{"a/cpu.stat": "usage_usec 10\n", "b/cpu.stat": "usage_usec 20\n"})
	h := openT(t, root)
	r := h.NewRereader(1)
	defer r.Close()
	if s, err := r.ReadString("/a/cpu.stat"); err != nil || s != "usage_usec 10" {
		t.Fatalf("first read %q %v", s, err)
	}
	// The content changes under the open descriptor: pread sees the new one.
	os.WriteFile(filepath.Join(root, "a/cpu.stat"), []byte("usage_usec 11\n"), 0o644)
	if s, _ := r.ReadString("/a/cpu.stat"); s != "usage_usec 11" {
		t.Errorf("re-read %q", s)
	}
	// The bound holds: reading b evicts a.
	r.ReadString("/b/cpu.stat")
	if r.Open() != 1 {
		t.Errorf("open = %d, want the bound 1", r.Open())
	}
	big := strings.Repeat("x", 10000)
	os.WriteFile(filepath.Join(root, "a/cpu.stat"), []byte(big), 0o644)
	if s, err := r.ReadString("/a/cpu.stat"); err != nil || s != big {
		t.Errorf("large file: %d bytes, %v", len(s), err)
	}
	if _, err := r.ReadString("/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
	r.Forget("/a")
	if r.Open() != 0 {
		t.Errorf("after Forget: %d open", r.Open())
	}
}

// On the real cgroupfs: a removed cgroup's kept descriptor reads as gone.
func TestRereaderRemovedCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := fmt.Sprintf("/sys/fs/cgroup/unified/crosstalk-test-reread-%d", os.Getpid())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("no writable cgroup2 here: %v", err)
	}
	defer os.Remove(dir)
	h := openT(t, "/")
	r := h.NewRereader(0)
	defer r.Close()
	if _, err := r.ReadString(dir + "/cpu.stat"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadString(dir + "/cpu.stat"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read after rmdir: %v, want ErrNotExist", err)
	}
	if r.Open() != 0 {
		t.Error("descriptor of a removed cgroup kept")
	}
}
