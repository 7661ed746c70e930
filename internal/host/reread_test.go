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
	// The bound holds: b is read, a is still held.
	if s, err := r.ReadString("/b/cpu.stat"); err != nil || s != "usage_usec 20" {
		t.Errorf("b beyond the bound: %q %v", s, err)
	}
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
	if s, err := r.ReadOnce("/b/cpu.stat"); err != nil || s != "usage_usec 20" {
		t.Errorf("ReadOnce: %q %v", s, err)
	}
	if s, err := r.ReadOnce("/a/cpu.stat"); err != nil || s != big {
		t.Errorf("ReadOnce of a large file: %d bytes, %v", len(s), err)
	}
	if _, err := r.ReadOnce("/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadOnce missing: %v", err)
	}
	if r.Open() != 1 {
		t.Errorf("ReadOnce kept a descriptor: %d open", r.Open())
	}
	r.Forget("/a")
	if r.Open() != 0 {
		t.Errorf("after Forget: %d open", r.Open())
	}
}

// Files read in a cycle larger than the bound: the held ones stay held (each
// is re-read with one pread), the others are read correctly through a
// descriptor of their own, and the bound holds.
func TestRereaderCycleBeyondBound(t *testing.T) {
	files := map[string]string{}
	for _, n := range []string{"a", "b", "c", "d"} {
		files[n+"/cpu.stat"] = "usage_usec 1"
	}
	root := tree(t, files)
	h := openT(t, root)
	r := h.NewRereader(2)
	defer r.Close()
	for round := range 5 {
		for _, n := range []string{"a", "b", "c", "d"} {
			want := fmt.Sprintf("usage_usec %d", round)
			if err := os.WriteFile(filepath.Join(root, n, "cpu.stat"), []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			if s, err := r.ReadString("/" + n + "/cpu.stat"); err != nil || s != want {
				t.Fatalf("round %d %s: %q %v, want %q", round, n, s, err, want)
			}
			if r.Open() > 2 {
				t.Fatalf("%d descriptors held, bound 2", r.Open())
			}
		}
	}
	// a and b were held all along: unlinked, they still read through their
	// descriptors; c was not held, so it reads as gone.
	for _, n := range []string{"a", "c"} {
		os.Remove(filepath.Join(root, n, "cpu.stat"))
	}
	if _, err := r.ReadString("/a/cpu.stat"); err != nil {
		t.Errorf("a was not held: %v", err)
	}
	if _, err := r.ReadString("/c/cpu.stat"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("c: %v, want ErrNotExist", err)
	}
}

// A held file not read for 4 × the bound reads (its tenant went away) gives
// its place to a new one.
func TestRereaderStaleGivesWay(t *testing.T) {
	root := tree(t, map[string]string{"old/cpu.stat": "old", "keep/cpu.stat": "keep", "new/cpu.stat": "new"})
	h := openT(t, root)
	r := h.NewRereader(2)
	defer r.Close()
	r.ReadString("/old/cpu.stat")
	for range 9 {
		r.ReadString("/keep/cpu.stat") // keeps "keep" fresh; "old" goes stale
	}
	if s, err := r.ReadString("/new/cpu.stat"); err != nil || s != "new" {
		t.Fatalf("new: %q %v", s, err)
	}
	if r.Open() != 2 {
		t.Fatalf("%d held, want 2", r.Open())
	}
	// "new" took old's place: held, it survives an unlink; old does not.
	os.Remove(filepath.Join(root, "new/cpu.stat"))
	os.Remove(filepath.Join(root, "old/cpu.stat"))
	if s, err := r.ReadString("/new/cpu.stat"); err != nil || s != "new" {
		t.Errorf("new not held: %q %v", s, err)
	}
	if _, err := r.ReadString("/old/cpu.stat"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("old still held: %v", err)
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
