package host

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// tree writes files (path -> content) under a new temp dir and returns it.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func openT(t *testing.T, root string, opts ...Option) *Host {
	t.Helper()
	h, err := Open(root, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func TestOpenRejectsBadRoot(t *testing.T) {
	if _, err := Open(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing root accepted")
	}
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o644)
	if _, err := Open(f); err == nil {
		t.Error("file as root accepted")
	}
}

func TestReads(t *testing.T) {
	root := tree(t, map[string]string{
		"proc/sys/kernel/numa_balancing":            "1\n",
		"proc/sys/kernel/garbage":                   "abc\n",
		"sys/class/powercap/intel-rapl:0/energy_uj": "18446744073709551000\n",
		"sys/devices/system/cpu/cpu0/online":        "1\n",
		"sys/devices/system/cpu/cpu12/online":       "1\n",
		"sys/devices/system/cpu/cpufreq/x":          "",
	})
	h := openT(t, root)
	if n, err := h.ReadInt("/proc/sys/kernel/numa_balancing"); err != nil || n != 1 {
		t.Errorf("ReadInt = %d, %v", n, err)
	}
	if _, err := h.ReadInt("/proc/sys/kernel/garbage"); err == nil {
		t.Error("garbage integer accepted")
	}
	if n, err := h.ReadUint("sys/class/powercap/intel-rapl:0/energy_uj"); err != nil || n != 18446744073709551000 {
		t.Errorf("ReadUint = %d, %v", n, err)
	}
	_, err := h.ReadFile("/proc/missing")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Path != filepath.Join(root, "proc/missing") {
		t.Errorf("error should name the real path: %v", err)
	}
	got, err := h.Glob("/sys/devices/system/cpu/cpu[0-9]*/online")
	want := []string{"/sys/devices/system/cpu/cpu0/online", "/sys/devices/system/cpu/cpu12/online"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("Glob = %v, %v; want %v", got, err, want)
	}
	if _, err := h.Glob("/sys/[/x"); err == nil {
		t.Error("bad pattern accepted")
	}
	if !h.Exists("/sys/devices/system/cpu") || h.Exists("/sys/nope") {
		t.Error("Exists wrong")
	}
	if h.IsLive() {
		t.Error("temp tree reported live")
	}
}

// An absolute symlink inside the root (like /var/run -> /run on Debian) must
// resolve inside the root, not on the agent's own filesystem.
func TestAbsoluteSymlinkStaysInRoot(t *testing.T) {
	root := tree(t, map[string]string{"run/libvirt/marker": "inside\n"})
	if err := os.Symlink("/run", filepath.Join(root, "var-run")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	h := openT(t, root)
	if h.rootFD < 0 {
		t.Skip("openat2 RESOLVE_IN_ROOT unavailable on this kernel")
	}
	s, err := h.ReadString("/var-run/libvirt/marker")
	if err != nil || s != "inside" {
		t.Errorf("read through absolute symlink = %q, %v", s, err)
	}
	if _, err := h.ReadFile("/escape"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("symlink escaped the root: %v", err)
	}
	if _, err := h.ReadFile("/../../etc/hostname"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("dot-dot escaped the root: %v", err)
	}
}

func TestWriteMkdirRemove(t *testing.T) {
	root := tree(t, map[string]string{"sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n"})
	h := openT(t, root)
	if err := h.WriteFile("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", []byte("50000")); err != nil {
		t.Fatal(err)
	}
	if s, _ := h.ReadString("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); s != "50000" {
		t.Errorf("after write: %q", s)
	}
	if err := h.WriteFile("/sys/fs/cgroup/cpu/absent", []byte("1")); err == nil {
		t.Error("write created a file; cgroupfs writes must not create")
	}
	if err := h.Mkdir("/sys/fs/cgroup/cpu/tenant", 0o755); err != nil {
		t.Fatal(err)
	}
	if !h.Exists("/sys/fs/cgroup/cpu/tenant") {
		t.Error("mkdir did not create")
	}
	if err := h.Remove("/sys/fs/cgroup/cpu/tenant"); err != nil {
		t.Fatal(err)
	}
	if h.Exists("/sys/fs/cgroup/cpu/tenant") {
		t.Error("remove did not remove")
	}
}

func TestRecorderAndCapture(t *testing.T) {
	root := tree(t, map[string]string{
		"proc/cpuinfo":                  "processor\t: 0\n",
		"sys/devices/system/cpu/online": "0\n",
		"sys/kernel/mm/ksm/run":         "0\n",
		"sys/other/unused":              "x\n",
	})
	// A socket stands in for /run/libvirt/libvirt-sock.
	sock := filepath.Join(root, "run", "libvirt", "libvirt-sock")
	os.MkdirAll(filepath.Dir(sock), 0o755)
	os.MkdirAll(filepath.Join(root, "sys/module"), 0o755)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	var rec Recorder
	h := openT(t, root, WithRecorder(&rec))
	h.ReadFile("/proc/cpuinfo")
	h.ReadDir("/sys/devices/system/cpu")
	h.ReadString("/sys/devices/system/cpu/online")
	h.Exists("/run/libvirt/libvirt-sock")
	h.Exists("/dev/kvm")    // absent: must stay absent
	h.Exists("/sys/module") // present and empty
	h.ReadInt("/sys/kernel/mm/ksm/run")

	dst := t.TempDir()
	m, err := Capture(h, rec.Touched(), dst)
	if err != nil {
		t.Fatal(err)
	}
	if m.Files != 3 || m.Dirs < 2 || len(m.StandIns) != 1 || m.StandIns[0] != "/run/libvirt/libvirt-sock" {
		t.Errorf("manifest = %+v", m)
	}
	for p, want := range map[string]string{
		"proc/cpuinfo":                  "processor\t: 0\n",
		"sys/devices/system/cpu/online": "0\n",
		"run/libvirt/libvirt-sock":      "",
	} {
		b, err := os.ReadFile(filepath.Join(dst, p))
		if err != nil || string(b) != want {
			t.Errorf("captured %s = %q, %v; want %q", p, b, err, want)
		}
	}
	for _, p := range []string{"dev/kvm", "sys/other/unused"} {
		if _, err := os.Stat(filepath.Join(dst, p)); err == nil {
			t.Errorf("%s captured but was absent or unused", p)
		}
	}
	var back CaptureManifest
	b, _ := os.ReadFile(filepath.Join(dst, ManifestName))
	if err := json.Unmarshal(b, &back); err != nil || back.Files != 3 {
		t.Errorf("manifest file: %v %+v", err, back)
	}
	// An empty directory survives git through its keep file, which the host
	// layer never lists.
	if _, err := os.Stat(filepath.Join(dst, "sys/module", KeepName)); err != nil {
		t.Errorf("empty listed directory has no keep file: %v", err)
	}
	// The captured tree is itself a usable root.
	h2 := openT(t, dst)
	if s, _ := h2.ReadString("/sys/devices/system/cpu/online"); s != "0" {
		t.Errorf("captured tree read = %q", s)
	}
	if ents, _ := h2.ReadDir("/run/libvirt"); len(ents) != 1 || ents[0].Name() != "libvirt-sock" {
		t.Errorf("listing of a captured dir: %v", ents)
	}
}
