package sense

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

// writeTestFile writes content to path p under root, making its
// directories.
func writeTestFile(t *testing.T, root, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCgroupStatsRead(t *testing.T) {
	root := t.TempDir()
	write := func(p, c string) { t.Helper(); writeTestFile(t, root, p, c) }
	// A hybrid host: usage and PSI from cgroup2, throttling from v1 cpu.
	write("cg2/vm/cpu.stat", "usage_usec 2000000\nuser_usec 1\nsystem_usec 1\n")
	write("cg2/vm/cpu.pressure", "some avg10=1.00 avg60=0.50 avg300=0.10 total=150000\nfull avg10=0 avg60=0 avg300=0 total=0\n")
	write("cg/cpu/vm/cpu.stat", "nr_periods 10\nnr_throttled 2\nthrottled_time 30000000\n")
	write("proc/101/schedstat", "5000 7000000 12\n")
	write("proc/102/schedstat", "5000 3000000 12\n")
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l := cgroup.Layout{Mode: cgroup.ModeHybrid, V1: map[string]string{"cpu": "/cg/cpu"}, V2: "/cg2"}
	ten := Tenant{ID: "/vm", Cgroup: "/vm", Threads: []int{101, 102, 103}} // 103 exited
	for _, files := range []*host.Rereader{nil, h.NewRereader(8)} {
		c := CgroupStats{Host: h, Layout: l, Files: files}
		st, err := c.Read(t.Context(), ten, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st.Usage != 2*time.Second || st.Throttled != 30*time.Millisecond || !st.HasPSI || st.PSISome != 150*time.Millisecond || st.RunDelay != 10*time.Millisecond {
			t.Errorf("stats = %+v", st)
		}
		// Idle since: one read, the rest carried over (even with PSI gone).
		os.Remove(filepath.Join(root, "cg2/vm/cpu.pressure"))
		idle, err := c.Read(t.Context(), ten, &st)
		if err != nil || idle.PSISome != st.PSISome || idle.Throttled != st.Throttled || !idle.At.After(st.At) {
			t.Errorf("idle read = %+v, %v", idle, err)
		}
		write("cg2/vm/cpu.pressure", "some avg10=1.00 avg60=0.50 avg300=0.10 total=150000\n")
	}
	// A vanished tenant reads as not existing.
	os.RemoveAll(filepath.Join(root, "cg2/vm"))
	os.RemoveAll(filepath.Join(root, "cg/cpu/vm"))
	if _, err := (CgroupStats{Host: h, Layout: l}).Read(t.Context(), ten, nil); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("vanished tenant: %v", err)
	}
	if d, ok := PSITotal("some avg10=0 total=42\n", "some"); !ok || d != 42*time.Microsecond {
		t.Errorf("PSITotal = %v %v", d, ok)
	}
	if _, ok := PSITotal("some avg10=0 total=x\n", "some"); ok {
		t.Error("bad total accepted")
	}
}

// A run that overran its CFS quota leaves the tenant throttled, using no
// CPU, until the periods pay it off: its throttling is read afresh though
// its usage did not move (on cgroup v1 the throttled time grows only when
// a throttle ends, so only the throttled periods show it). An idle tenant
// never throttled, and idle in the window before, costs one read.
func TestCgroupStatsReadsAnIdleTenantsThrottling(t *testing.T) {
	root := t.TempDir()
	write := func(p, c string) { t.Helper(); writeTestFile(t, root, p, c) }
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l := cgroup.Layout{Mode: cgroup.ModeV1, V1: map[string]string{"cpu": "/cg/cpu", "cpuacct": "/cg/cpuacct"}}
	c := CgroupStats{Host: h, Layout: l}
	read := func(ten Tenant, prev *TenantStats) TenantStats {
		t.Helper()
		st, err := c.Read(t.Context(), ten, prev)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	held := Tenant{ID: "/held", Cgroup: "/held"}
	write("cg/cpuacct/held/cpuacct.usage", "10000000\n")
	write("cg/cpu/held/cpu.stat", "nr_periods 4\nnr_throttled 0\nthrottled_time 0\n")
	s0 := read(held, nil)
	// It ran 13 ms at once and was throttled (no period has counted it
	// yet).
	write("cg/cpuacct/held/cpuacct.usage", "23000000\n")
	write("cg/cpu/held/cpu.stat", "nr_periods 5\nnr_throttled 0\nthrottled_time 0\n")
	s1 := read(held, &s0)
	// It pays the overrun off: no CPU, throttled in two periods.
	write("cg/cpu/held/cpu.stat", "nr_periods 7\nnr_throttled 2\nthrottled_time 0\n")
	s2 := read(held, &s1)
	if s2.Usage != s1.Usage || s2.NrThrottled != 2 {
		t.Fatalf("paying off: usage %s (was %s), %d periods throttled, want 2", s2.Usage, s1.Usage, s2.NrThrottled)
	}
	if r, _ := Rates(s1, s2); !r.HeldBack || r.Usage != 0 {
		t.Errorf("paying off: rates %+v, want held back and no CPU", r)
	}
	// And again, idle in the window before but throttled before.
	write("cg/cpu/held/cpu.stat", "nr_periods 9\nnr_throttled 4\nthrottled_time 0\n")
	if s3 := read(held, &s2); s3.NrThrottled != 4 {
		t.Errorf("still paying off: %d periods throttled, want 4", s3.NrThrottled)
	}
	// Paid off, it ran again; then it stopped, and its throttle's time is
	// added as the throttle ended.
	write("cg/cpuacct/held/cpuacct.usage", "24000000\n")
	write("cg/cpu/held/cpu.stat", "nr_periods 10\nnr_throttled 4\nthrottled_time 600000000\n")
	s4 := read(held, &s2)
	s5 := read(held, &s4)
	if r, _ := Rates(s4, s5); r.HeldBack {
		t.Errorf("stopped: rates %+v, want not held back", r)
	}

	// Never throttled, idle: its cpu.stat is not read (here it cannot be).
	quiet := Tenant{ID: "/quiet", Cgroup: "/quiet"}
	write("cg/cpuacct/quiet/cpuacct.usage", "5000000\n")
	write("cg/cpu/quiet/cpu.stat", "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n")
	q0 := read(quiet, nil)
	if err := os.Remove(filepath.Join(root, "cg/cpu/quiet/cpu.stat")); err != nil {
		t.Fatal(err)
	}
	q1 := read(quiet, &q0)
	read(quiet, &q1)
	// Once it ran, the read after is a whole one.
	write("cg/cpuacct/quiet/cpuacct.usage", "6000000\n")
	if _, err := c.Read(t.Context(), quiet, &q1); err == nil {
		t.Error("a tenant that ran read without its cpu.stat")
	}
}

// On pure cgroup2 the hot path parses cpu.stat itself; it must read what
// cgroup.Group.CPUStatFrom reads from the same file.
func TestCgroupStatsV2MatchesCgroupPackage(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "cg2/ct"), 0o755)
	os.WriteFile(filepath.Join(root, "cg2/ct/cpu.stat"), []byte("usage_usec 7000123\nuser_usec 5000000\nsystem_usec 2000123\n"+
		"core_sched.force_idle_usec 0\nnr_periods 420\nnr_throttled 17\nthrottled_usec 123456\nnr_bursts 0\nburst_usec 0\n"), 0o644)
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l := cgroup.Layout{Mode: cgroup.ModeV2, V2: "/cg2", V2Controllers: []string{"cpu"}}
	want, err := cgroup.Open(h, l, "/ct").CPUStatFrom(h)
	if err != nil {
		t.Fatal(err)
	}
	for _, cg := range []string{"/ct", "ct", "/ct/", "//ct"} {
		got, err := (CgroupStats{Host: h, Layout: l}).cpuStatV2(cg)
		if err != nil || got != want {
			t.Errorf("cpuStatV2(%q) = %+v, %v; cgroup package reads %+v", cg, got, err, want)
		}
	}
	os.WriteFile(filepath.Join(root, "cg2/ct/cpu.stat"), []byte("user_usec 5\n"), 0o644)
	if _, err := (CgroupStats{Host: h, Layout: l}).cpuStatV2("/ct"); err == nil {
		t.Error("cpu.stat without usage_usec accepted")
	}
}

func TestPSITotal(t *testing.T) {
	for _, tc := range []struct {
		in, which string
		want      time.Duration
		ok        bool
	}{
		{"some avg10=0.00 avg60=0.00 avg300=0.00 total=1234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=99\n", "some", 1234 * time.Microsecond, true},
		{"some avg10=0.00 avg60=0.00 avg300=0.00 total=1234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=99\n", "full", 99 * time.Microsecond, true},
		{"some avg10=0.00 total=5", "some", 5 * time.Microsecond, true},
		{"something total=5\nsome total=6\n", "some", 6 * time.Microsecond, true},
		{"full total=5\n", "some", 0, false},
		{"some avg10=0.00\n", "some", 0, false},
		{"some total=-1\n", "some", 0, false},
		{"", "some", 0, false},
	} {
		if got, ok := PSITotal(tc.in, tc.which); got != tc.want || ok != tc.ok {
			t.Errorf("PSITotal(%q, %q) = %v %v, want %v %v", tc.in, tc.which, got, ok, tc.want, tc.ok)
		}
	}
}
