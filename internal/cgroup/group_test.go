package cgroup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

func TestQuotaFilesV1AndV2(t *testing.T) {
	v1 := tree(t, map[string]string{
		"cg/cpu/t/cpu.cfs_period_us": "100000\n",
		"cg/cpu/t/cpu.cfs_quota_us":  "-1\n",
		"cg/cpu/t/cpu.stat":          "nr_periods 10\nnr_throttled 4\nthrottled_time 25000000\n",
		"cg/cpuacct/t/cpuacct.usage": "1500000000\n",
	})
	v2 := tree(t, map[string]string{
		"cg2/t/cpu.max":  "max 100000\n",
		"cg2/t/cpu.stat": "usage_usec 2000000\nuser_usec 1\nsystem_usec 1\nnr_periods 7\nnr_throttled 3\nthrottled_usec 40000\n",
	})
	tests := []struct {
		name      string
		root      string
		layout    Layout
		file      string
		afterSet  string
		usage     time.Duration
		throttled time.Duration
	}{
		{"v1", v1, Layout{Mode: ModeV1, V1: map[string]string{"cpu": "/cg/cpu", "cpuacct": "/cg/cpuacct"}}, "cg/cpu/t/cpu.cfs_quota_us", "10000", 1500 * time.Millisecond, 25 * time.Millisecond},
		{"v2", v2, Layout{Mode: ModeV2, V2: "/cg2", V2Controllers: []string{"cpu"}}, "cg2/t/cpu.max", "10000 50000", 2 * time.Second, 40 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := Open(open(t, tc.root), tc.layout, "t")
			q, err := g.CPUQuota()
			if err != nil || !q.Unlimited() || q.Period != 100*time.Millisecond {
				t.Fatalf("initial quota = %v, %v", q, err)
			}
			want := Quota{Quota: 10 * time.Millisecond, Period: 50 * time.Millisecond}
			if tc.name == "v1" {
				want.Period = 100 * time.Millisecond
			}
			if err := g.SetCPUQuota(want); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(filepath.Join(tc.root, tc.file))
			if string(b) != tc.afterSet {
				t.Errorf("%s = %q, want %q", tc.file, b, tc.afterSet)
			}
			if got, _ := g.CPUQuota(); got != want {
				t.Errorf("read back %v, want %v", got, want)
			}
			if err := g.SetCPUQuota(Quota{Quota: -1, Period: 100 * time.Millisecond}); err != nil {
				t.Fatal(err)
			}
			if got, _ := g.CPUQuota(); !got.Unlimited() {
				t.Errorf("after release: %v", got)
			}
			st, err := g.CPUStat()
			if err != nil || st.Usage != tc.usage || st.Throttled != tc.throttled {
				t.Errorf("stat = %+v, %v; want usage %v throttled %v", st, err, tc.usage, tc.throttled)
			}
		})
	}
}

func TestQuotaValidate(t *testing.T) {
	for _, q := range []Quota{{Quota: time.Millisecond, Period: 500 * time.Microsecond}, {Quota: time.Millisecond, Period: 2 * time.Second}, {Quota: 500 * time.Microsecond, Period: 10 * time.Millisecond}} {
		if err := q.Validate(); err == nil {
			t.Errorf("%v accepted", q)
		}
	}
	if err := (Quota{Quota: -1, Period: 10 * time.Millisecond}).Validate(); err != nil {
		t.Error(err)
	}
	if c := (Quota{Quota: 25 * time.Millisecond, Period: 100 * time.Millisecond}).CPUs(); c != 0.25 {
		t.Errorf("CPUs = %v", c)
	}
}

func TestParseCPUMax(t *testing.T) {
	for in, want := range map[string]Quota{
		"max 100000":   {Quota: -1 * 0, Period: 100 * time.Millisecond},
		"50000 100000": {Quota: 50 * time.Millisecond, Period: 100 * time.Millisecond},
		"max":          {Period: 100 * time.Millisecond},
	} {
		got, err := ParseCPUMax(in)
		if err != nil || got.Period != want.Period || got.Unlimited() != want.Unlimited() || (!want.Unlimited() && got.Quota != want.Quota) {
			t.Errorf("ParseCPUMax(%q) = %v, %v", in, got, err)
		}
		if back, _ := ParseCPUMax(FormatCPUMax(got)); back.Period != got.Period || back.Unlimited() != got.Unlimited() {
			t.Errorf("round trip of %q", in)
		}
	}
	for _, bad := range []string{"", "a b", "1 2 3", "-5 100", "max 0"} {
		if _, err := ParseCPUMax(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// liveLayout returns the real host's layout, skipping when cgroups cannot be
// written here (not root, or no cgroupfs).
func liveLayout(t *testing.T) (*host.Host, Layout) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	h, err := host.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	l, err := Detect(h)
	if err != nil || l.CPUControl() == "" {
		t.Skipf("no writable cpu cgroup controller here: %v", err)
	}
	return h, l
}

// On the real cgroupfs: create a group, pin and cap a process in it, read
// the accounting back, then remove everything.
func TestLiveGroupLifecycle(t *testing.T) {
	h, l := liveLayout(t)
	name := fmt.Sprintf("/crosstalk-test/group-%d", os.Getpid())
	cpus := cpuset.Of(0)
	g, err := Create(h, l, name, cpus)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { RemoveTree(h, l, "/crosstalk-test", time.Second) })

	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if err := g.AddProc(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	pids, err := g.Procs()
	if err != nil || len(pids) != 1 || pids[0] != cmd.Process.Pid {
		t.Fatalf("procs = %v, %v", pids, err)
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)); err == nil && !strings.Contains(string(b), "Cpus_allowed_list:\t0\n") {
		t.Errorf("process not pinned to CPU 0:\n%s", b)
	}
	q := Quota{Quota: 5 * time.Millisecond, Period: 50 * time.Millisecond}
	if err := g.SetCPUQuota(q); err != nil {
		t.Fatal(err)
	}
	if got, err := g.CPUQuota(); err != nil || got != q {
		t.Errorf("quota = %v, %v", got, err)
	}
	time.Sleep(300 * time.Millisecond)
	st, err := g.CPUStat()
	if err != nil {
		t.Fatal(err)
	}
	// 10% of one CPU for 0.3 s is about 30 ms; allow scheduler slack.
	if st.Usage <= 0 || st.Usage > 120*time.Millisecond || st.Throttled <= 0 || st.NrThrottled == 0 {
		t.Errorf("stat under a 10%% cap = %+v", st)
	}
	if err := RemoveTree(h, l, name, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if g.Exists() {
		t.Error("group still exists after RemoveTree")
	}
	cmd.Wait()
}
