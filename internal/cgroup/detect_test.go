package cgroup

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

func open(t *testing.T, root string) *host.Host {
	t.Helper()
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		os.WriteFile(full, []byte(c), 0o644)
	}
	return root
}

func TestDetectTrees(t *testing.T) {
	tests := []struct {
		tree       string
		mode       Mode
		v2         string
		cpuControl string
		cpuMount   string
	}{
		{"dev-epyc-vm", ModeHybrid, "/sys/fs/cgroup/unified", "v1", "/sys/fs/cgroup/cpu"},
		{"intel-skx-2s", ModeV2, "/sys/fs/cgroup", "v2", ""},
		{"intel-emr-vm", ModeV2, "/sys/fs/cgroup", "v2", ""},
		{"amd-milan-1s", ModeV1, "", "v1", "/sys/fs/cgroup/cpu,cpuacct"},
	}
	for _, tc := range tests {
		l, err := Detect(open(t, filepath.Join("..", "..", "testdata", "hosts", tc.tree)))
		if err != nil {
			t.Fatalf("%s: %v", tc.tree, err)
		}
		if l.Mode != tc.mode || l.V2 != tc.v2 || l.CPUControl() != tc.cpuControl || l.V1["cpu"] != tc.cpuMount {
			t.Errorf("%s: %+v (cpu control %q)", tc.tree, l, l.CPUControl())
		}
		if l.Evidence != "/proc/1/mountinfo" {
			t.Errorf("%s: evidence %q", tc.tree, l.Evidence)
		}
	}
}

// Without a readable mount table the layout of /sys/fs/cgroup decides.
func TestDetectFromPaths(t *testing.T) {
	tests := []struct {
		files map[string]string
		mode  Mode
		ctrl  []string
	}{
		{map[string]string{"sys/fs/cgroup/cgroup.controllers": "cpu io memory\n"}, ModeV2, []string{"cpu", "io", "memory"}},
		{map[string]string{
			"sys/fs/cgroup/unified/cgroup.controllers": "\n",
			"sys/fs/cgroup/cpu,cpuacct/cgroup.procs":   "1\n",
			"sys/fs/cgroup/cpuset/cgroup.procs":        "1\n",
			"sys/fs/cgroup/systemd/cgroup.procs":       "1\n", // named hierarchy, not a controller
		}, ModeHybrid, []string{"cpu", "cpuacct", "cpuset"}},
		{map[string]string{"sys/fs/cgroup/memory/cgroup.procs": "1\n"}, ModeV1, []string{"memory"}},
	}
	for _, tc := range tests {
		l, err := Detect(open(t, tree(t, tc.files)))
		if err != nil {
			t.Fatal(err)
		}
		if l.Mode != tc.mode || !slices.Equal(l.Controllers(), tc.ctrl) {
			t.Errorf("%v: mode %s controllers %v; want %s %v", tc.files, l.Mode, l.Controllers(), tc.mode, tc.ctrl)
		}
	}
	if _, err := Detect(open(t, t.TempDir())); err == nil {
		t.Error("no cgroups at all: want an error")
	}
}

func TestDetectMountinfo(t *testing.T) {
	root := tree(t, map[string]string{
		"proc/1/mountinfo": `31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
33 31 0:30 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd
34 31 0:31 / /sys/fs/cgroup/perf_event rw - cgroup cgroup rw,perf_event
`,
	})
	l, err := Detect(open(t, root))
	if err != nil {
		t.Fatal(err)
	}
	if l.Mode != ModeV1 || l.V1["cpuacct"] != "/sys/fs/cgroup/cpu,cpuacct" || l.V1["perf_event"] == "" || len(l.V1) != 3 {
		t.Errorf("layout %+v", l)
	}
}
