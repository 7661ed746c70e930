package sense

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

// Thousands of tenants come and go while discovery and sampling run, as
// the agent wires them (the discoverer's OnGone closes a gone tenant's
// files): the descriptors held stay at what the tenants present need,
// where without OnGone they would grow with every tenant ever seen, up to
// the re-reader's bound.
func TestChurnKeepsDescriptorsFlat(t *testing.T) {
	root := t.TempDir()
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l := cgroup.Layout{Mode: cgroup.ModeV2, V2: "/cg2", V2Controllers: []string{"cpu", "cpuset"}}
	os.MkdirAll(filepath.Join(root, "cg2"), 0o755)
	os.WriteFile(filepath.Join(root, "cg2/cgroup.controllers"), []byte("cpu cpuset\n"), 0o644)
	os.MkdirAll(filepath.Join(root, "sys/devices/system/cpu"), 0o755)
	os.WriteFile(filepath.Join(root, "sys/devices/system/cpu/online"), []byte("0-1\n"), 0o644)
	add := func(i int) {
		dir := filepath.Join(root, "cg2/churn", fmt.Sprintf("t%05d", i))
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "cgroup.threads"), nil, 0o644)
		os.WriteFile(filepath.Join(dir, "cpu.stat"), []byte(fmt.Sprintf("usage_usec %d\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n", 1000+i)), 0o644)
		os.WriteFile(filepath.Join(dir, "cpu.pressure"), []byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n"), 0o644)
	}
	remove := func(i int) { os.RemoveAll(filepath.Join(root, "cg2/churn", fmt.Sprintf("t%05d", i))) }

	for _, forget := range []bool{true, false} {
		t.Run(fmt.Sprintf("forget=%v", forget), func(t *testing.T) {
			os.RemoveAll(filepath.Join(root, "cg2/churn"))
			fdsBefore := processFDs(t)
			files := h.NewRereader(1 << 20)
			defer files.Close()
			stats := CgroupStats{Host: h, Layout: l, Files: files}
			d, err := NewCgroupDiscoverer(h, l, []string{"/churn/*"})
			if err != nil {
				t.Fatal(err)
			}
			d.Builtin = false
			if forget {
				d.OnGone = stats.Forget
			}
			const live, rounds, perRound = 40, 60, 40 // 2,400 tenants come and go
			next := 0
			for ; next < live; next++ {
				add(next)
			}
			for r := range rounds {
				for range perRound {
					remove(next - live)
					add(next)
					next++
				}
				tenants, err := d.Discover(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				if len(tenants) != live {
					t.Fatalf("round %d: %d tenants, want %d", r, len(tenants), live)
				}
				for _, ten := range tenants {
					if _, err := stats.Read(t.Context(), ten, nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			open := files.Open()
			if grew := processFDs(t) - fdsBefore; forget && grew > 2*live+8 {
				t.Errorf("the process holds %d more descriptors after the churn, want at most %d", grew, 2*live+8)
			}
			t.Logf("%d tenants came and went; %d descriptors held for %d present", next-live, open, live)
			switch {
			case forget && open > 2*live:
				t.Errorf("descriptors held = %d, want at most %d (2 files for each of %d tenants present)", open, 2*live, live)
			case !forget && open <= 2*live:
				t.Errorf("without OnGone the descriptors did not grow (%d): the test does not reproduce the leak", open)
			}
		})
	}
}

func processFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count descriptors: %v", err)
	}
	return len(ents)
}
