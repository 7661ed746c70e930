package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestSubDirs(t *testing.T) {
	root := tree(t, map[string]string{
		"cg/cpu.stat":          "",
		"cg/cgroup.threads":    "",
		"cg/b.scope/tasks":     "",
		"cg/a.slice/x/tasks":   "",
		"cg/empty/" + KeepName: "",
	})
	if err := os.Symlink(filepath.Join(root, "cg/a.slice"), filepath.Join(root, "cg/link")); err != nil {
		t.Fatal(err)
	}
	h := openT(t, root)
	for _, buf := range [][]byte{nil, make([]byte, 1024)} {
		got, err := h.SubDirs("/cg", buf)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"a.slice", "b.scope", "empty"}; !slices.Equal(got, want) {
			t.Errorf("SubDirs = %q, want %q", got, want)
		}
	}
	if _, err := h.SubDirs("/missing", nil); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
	if _, err := h.SubDirs("/cg/cpu.stat", nil); err == nil {
		t.Error("a file listed as a directory")
	}
}

// A directory larger than the buffer takes several getdents calls; every
// subdirectory is found, and the files among them are not.
func TestSubDirsLarge(t *testing.T) {
	root := t.TempDir()
	var want []string
	for i := range 600 {
		name := fmt.Sprintf("docker-%060d.scope", i)
		want = append(want, name)
		if err := os.Mkdir(filepath.Join(root, name), 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(root, fmt.Sprintf("file-%d", i)), nil, 0o644)
	}
	h := openT(t, root)
	got, err := h.SubDirs("/", make([]byte, 1024))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %d names, want %d (first %q)", len(got), len(want), got[:min(3, len(got))])
	}
}
