package host

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tasksKernel is a minimal simulated kernel: a new directory gets a tasks
// file, writes to tasks append, and rmdir removes the directory with it.
type tasksKernel struct{ mkdirs, removes []string }

func (k *tasksKernel) Mkdir(h *Host, p string) error {
	k.mkdirs = append(k.mkdirs, p)
	return os.WriteFile(h.Path(p+"/tasks"), nil, 0o644)
}

func (k *tasksKernel) Write(h *Host, p string, data []byte) (bool, error) {
	if filepath.Base(p) != "tasks" {
		return false, nil
	}
	f, err := os.OpenFile(h.Path(p), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return true, err
	}
	defer f.Close()
	_, err = f.Write(append(data, '\n'))
	return true, err
}

func (k *tasksKernel) Remove(h *Host, p string) (bool, error) {
	k.removes = append(k.removes, p)
	return true, os.RemoveAll(h.Path(p))
}

func TestKernelHooks(t *testing.T) {
	root := t.TempDir()
	k := &tasksKernel{}
	h, err := Open(root, WithKernel(k))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Mkdir("/grp", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []string{"10", "11"} {
		if err := h.WriteFile("/grp/tasks", []byte(pid)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := h.ReadString("/grp/tasks")
	if err != nil || got != "10\n11" {
		t.Fatalf("tasks = %q, %v; want the two writes appended", got, err)
	}
	// A plain file is written as usual.
	if err := os.WriteFile(filepath.Join(root, "grp", "schemata"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.WriteFile("/grp/schemata", []byte("L3:0=f")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "grp", "schemata")); string(b) != "L3:0=f" {
		t.Fatalf("schemata = %q", b)
	}
	// rmdir of a non-empty group succeeds through the kernel.
	if err := h.Remove("/grp"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "grp")); !os.IsNotExist(err) {
		t.Fatalf("group still there: %v", err)
	}
	if strings.Join(k.mkdirs, ",") != "/grp" || strings.Join(k.removes, ",") != "/grp" {
		t.Fatalf("hooks saw mkdir %v remove %v", k.mkdirs, k.removes)
	}
}
