package sense

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

// The simulator runs the sensors on virtual time: samples and rates use
// the clock they are given, not the wall clock.
func TestSensorsUseTheirClock(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "cg2/vm"), 0o755)
	os.WriteFile(filepath.Join(root, "cg2/vm/cpu.stat"), []byte("usage_usec 1000\n"), 0o644)
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	virtual := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := CgroupStats{Host: h, Layout: cgroup.Layout{Mode: cgroup.ModeV2, V2: "/cg2", V2Controllers: []string{"cpu"}}, Now: func() time.Time { return virtual }}
	st, err := c.Read(t.Context(), Tenant{ID: "/vm", Cgroup: "/vm"}, nil)
	if err != nil || !st.At.Equal(virtual) {
		t.Errorf("sample at %v (%v), want the virtual %v", st.At, err, virtual)
	}

	ph, real := perfTree(t, "0", "/sys/fs/cgroup/perf_event", "t")
	f := newFakePerfOpener()
	p, err := NewPerfCounters(ph, v1PerfLayout, []PerfEvent{evTask}, 16, f)
	if err != nil {
		t.Fatal(err)
	}
	now := virtual
	p.SetClock(func() time.Time { return now })
	ten := []Tenant{{ID: "/t", Cgroup: "/t", CPUs: cpuset.Of(0)}}
	if err := p.Sync(t.Context(), ten); err != nil {
		t.Fatal(err)
	}
	p.Read(t.Context())
	f.add(filepath.Join(real, "t"), evTask, 0, uint64(time.Second), uint64(time.Second), uint64(time.Second))
	now = now.Add(4 * time.Second) // four virtual seconds, however long the test took
	rates, err := p.Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := rates["/t"][EventTaskClock]; got != 0.25 {
		t.Errorf("task clock rate %g CPUs, want 1 s over 4 virtual s = 0.25", got)
	}
}
