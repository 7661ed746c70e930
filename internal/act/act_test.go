package act

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/judge"
)

// cgroupTree makes a fake v1 cpu hierarchy with tenants a and b, one with a
// limit of its own.
func cgroupTree(t *testing.T) (*host.Host, cgroup.Layout, string) {
	t.Helper()
	root := t.TempDir()
	for p, c := range map[string]string{
		"cg/cpu/a/cpu.cfs_period_us": "100000\n", "cg/cpu/a/cpu.cfs_quota_us": "-1\n",
		"cg/cpu/b/cpu.cfs_period_us": "100000\n", "cg/cpu/b/cpu.cfs_quota_us": "200000\n",
	} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(root, p), []byte(c), 0o644)
	}
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h, cgroup.Layout{Mode: cgroup.ModeV1, V1: map[string]string{"cpu": "/cg/cpu"}}, root
}

func file(t *testing.T, root, p string) string {
	b, _ := os.ReadFile(filepath.Join(root, p))
	return strings.TrimSpace(string(b))
}

func TestCPUQuotaApplyRestore(t *testing.T) {
	h, l, root := cgroupTree(t)
	state, err := OpenState(filepath.Join(t.TempDir(), "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	a := &CPUQuota{Host: h, Layout: l, State: state}
	sp := Sparsify{}
	sp.Fill()
	if err := a.Apply(t.Context(), "/a", "tenant-a", sp.Quota(1, 1)); err != nil {
		t.Fatal(err)
	}
	// Exact files after each step: period first, then quota.
	if p, q := file(t, root, "cg/cpu/a/cpu.cfs_period_us"), file(t, root, "cg/cpu/a/cpu.cfs_quota_us"); p != "16000" || q != "1000" {
		t.Errorf("after throttle: period %s quota %s", p, q)
	}
	e, ok := state.Get("/a")
	if !ok || e.OriginalQuotaUS != -1 || e.OriginalPeriodUS != 100000 || e.AppliedQuotaUS != -1 || e.NextQuotaUS != 1000 || e.NextPeriodUS != 16000 {
		t.Errorf("state entry %+v", e)
	}
	// A second write keeps the first original.
	if err := a.Apply(t.Context(), "/a", "tenant-a", sp.Quota(3, 1)); err != nil {
		t.Fatal(err)
	}
	// The intent of the second write: the value in place (the first one,
	// read back) and the next.
	if e, _ := state.Get("/a"); e.OriginalQuotaUS != -1 || e.AppliedQuotaUS != 1000 || e.NextQuotaUS != 3000 {
		t.Errorf("after tighten: %+v", e)
	}
	if err := a.Restore(t.Context(), "/a"); err != nil {
		t.Fatal(err)
	}
	if p, q := file(t, root, "cg/cpu/a/cpu.cfs_period_us"), file(t, root, "cg/cpu/a/cpu.cfs_quota_us"); p != "100000" || q != "-1" {
		t.Errorf("after restore: period %s quota %s", p, q)
	}
	if len(state.Entries()) != 0 {
		t.Error("restored entry not forgotten")
	}
	// A tenant with its own limit gets that limit back.
	a.Apply(t.Context(), "/b", "b", sp.Quota(2, 1))
	a.Restore(t.Context(), "/b")
	if q := file(t, root, "cg/cpu/b/cpu.cfs_quota_us"); q != "200000" {
		t.Errorf("b quota after restore = %s", q)
	}
	// A vanished tenant is ErrGone, not a failure, and leaves no entry.
	if err := a.Apply(t.Context(), "/gone", "gone", sp.Quota(1, 1)); !errors.Is(err, ErrGone) {
		t.Errorf("vanished tenant: %v", err)
	}
	if len(state.Entries()) != 0 {
		t.Error("entry left for a vanished tenant")
	}
}

// kill -9 while throttling, then a new agent: the state file lets it restore.
func TestRestoreAllAfterCrash(t *testing.T) {
	h, l, root := cgroupTree(t)
	statePath := filepath.Join(t.TempDir(), "state.json")
	s1, _ := OpenState(statePath)
	a1 := &CPUQuota{Host: h, Layout: l, State: s1}
	sp := Sparsify{}
	sp.Fill()
	a1.Apply(t.Context(), "/a", "a", sp.Quota(1, 1))
	a1.Apply(t.Context(), "/b", "b", sp.Quota(1, 1))
	// Someone else changes b's quota after crosstalk did: leave it alone.
	os.WriteFile(filepath.Join(root, "cg/cpu/b/cpu.cfs_quota_us"), []byte("50000"), 0o644)
	// "Crash": a1 is dropped without restoring. A new instance starts.
	s2, err := OpenState(statePath)
	if err != nil {
		t.Fatal(err)
	}
	if len(s2.Entries()) != 2 {
		t.Fatalf("state after crash: %+v", s2.Entries())
	}
	a2 := &CPUQuota{Host: h, Layout: l, State: s2}
	n, err := a2.RestoreAll(t.Context())
	if err != nil || n != 1 {
		t.Fatalf("RestoreAll = %d, %v", n, err)
	}
	if q := file(t, root, "cg/cpu/a/cpu.cfs_quota_us"); q != "-1" {
		t.Errorf("a not restored: %s", q)
	}
	if q := file(t, root, "cg/cpu/b/cpu.cfs_quota_us"); q != "50000" {
		t.Errorf("b clobbered: %s", q)
	}
	if len(s2.Entries()) != 0 {
		t.Error("state not cleared")
	}
}

func TestCorruptStateRefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	os.WriteFile(p, []byte("{not json"), 0o600)
	if _, err := OpenState(p); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("corrupt state: %v", err)
	}
}

func TestSparsifyQuota(t *testing.T) {
	sp := Sparsify{}
	sp.Fill()
	for _, tc := range []struct {
		step, ncpus int
		want        time.Duration
	}{
		{1, 1, time.Millisecond},
		{1, 2, 2 * time.Millisecond},
		{1, 0, time.Millisecond}, // no CPUs known: one
		{8, 4, 32 * time.Millisecond},
		{16, 1, 16 * time.Millisecond},
	} {
		if q := sp.Quota(tc.step, tc.ncpus); q.Quota != tc.want || q.Period != 16*time.Millisecond {
			t.Errorf("Quota(%d, %d) = %v, want %v a 16ms period", tc.step, tc.ncpus, q, tc.want)
		}
	}
	// A grid finer than the kernel's minimum quota is held at that minimum.
	fine := Sparsify{Period: 16 * time.Millisecond, Steps: 64}
	if q := fine.Quota(1, 1); q.Quota != cgroup.MinQuota {
		t.Errorf("1/64 of 16ms = %v, want the kernel's minimum %v", q.Quota, cgroup.MinQuota)
	}
	// The deep floor runs the floor step's quota over eight periods.
	deep := &judge.DutyThrottle{Step: 1, Deep: true}
	if q := sp.QuotaAt(deep, 2); q.Quota != 2*time.Millisecond || q.Period != 128*time.Millisecond {
		t.Errorf("QuotaAt(deep floor, 2 CPUs) = %v, want 2ms a 128ms period", q)
	}
	if q := sp.QuotaAt(&judge.DutyThrottle{Step: 3}, 1); q != sp.Quota(3, 1) {
		t.Errorf("QuotaAt(step 3) = %v, want Quota(3, 1) = %v", q, sp.Quota(3, 1))
	}
}

func TestJournal(t *testing.T) {
	p := filepath.Join(t.TempDir(), "journal.jsonl")
	j, err := OpenJournal(p)
	if err != nil {
		t.Fatal(err)
	}
	j.MaxBytes = 300
	q := 0.06
	for i := 0; i < 5; i++ {
		if err := j.Write(Event{Kind: "throttle", Tenant: "t", Quota: &q, Detail: strings.Repeat("x", 50)}); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	f, _ := os.Open(p)
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Kind != "throttle" || e.Time.IsZero() {
			t.Errorf("line %q: %v", sc.Text(), err)
		}
		n++
	}
	if n == 0 || n >= 5 {
		t.Errorf("lines after rotation = %d", n)
	}
	if _, err := os.Stat(p + ".1"); err != nil {
		t.Error("no rotated journal")
	}
}

// Records of other actuators live beside the quota entries, survive a
// reopen (what a restart after kill -9 sees), and vanish when forgotten.
func TestStateRecords(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state.json")
	s, err := OpenState(file)
	if err != nil {
		t.Fatal(err)
	}
	type freq struct{ OriginalKHz int }
	if err := s.PutRecord("cpufreq", "cpu3", freq{2400000}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutRecord("cpufreq", "cpu1", freq{1800000}); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(Entry{Cgroup: "/a", OriginalQuotaUS: -1}); err != nil {
		t.Fatal(err)
	}
	again, err := OpenState(file)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(again.RecordKeys("cpufreq"), ","); got != "cpu1,cpu3" {
		t.Errorf("keys after reopen = %q", got)
	}
	var f freq
	if ok, err := again.GetRecord("cpufreq", "cpu3", &f); !ok || err != nil || f.OriginalKHz != 2400000 {
		t.Errorf("cpu3 = %+v %v %v", f, ok, err)
	}
	if ok, _ := again.GetRecord("resctrl", "cpu3", &f); ok {
		t.Error("record found under another kind")
	}
	if _, ok := again.Get("/a"); !ok {
		t.Error("quota entry lost beside records")
	}
	for _, k := range []string{"cpu1", "cpu3"} {
		if err := again.ForgetRecord("cpufreq", k); err != nil {
			t.Fatal(err)
		}
	}
	third, _ := OpenState(file)
	if keys := third.RecordKeys("cpufreq"); len(keys) != 0 {
		t.Errorf("forgotten records still there: %v", keys)
	}
	b, _ := os.ReadFile(file)
	if strings.Contains(string(b), "cpufreq") {
		t.Errorf("empty section kept in the file:\n%s", b)
	}
}

// countedQuota is a CPUQuota on cgroupTree whose state file counts its
// saves.
func countedQuota(t *testing.T) (a *CPUQuota, root, statePath string, saves *int) {
	t.Helper()
	h, l, root := cgroupTree(t)
	statePath = filepath.Join(t.TempDir(), "state.json")
	state, err := OpenState(statePath)
	if err != nil {
		t.Fatal(err)
	}
	return &CPUQuota{Host: h, Layout: l, State: state}, root, statePath, saveCounter(state)
}

// saveCounter counts a state file's saves that reach the disk.
func saveCounter(s *StateFile) *int {
	n := new(int)
	s.SetSaveHook(func(saved bool) error {
		if saved {
			*n++
		}
		return nil
	})
	return n
}

// A proof's trials cap and free the same tenant again and again: its
// intent is saved before the first cap only, a release saves nothing (the
// entry lingers on disk, harmless at the original value) and Flush drops
// it. The disk never lacks the intent of a cap in force.
func TestProofTrialsSaveTheIntentOnce(t *testing.T) {
	a, root, statePath, saves := countedQuota(t)
	state, h, l := a.State, a.Host, a.Layout
	capQ := cgroup.Quota{Quota: time.Millisecond, Period: ProofPeriod}
	onDisk := func() []Entry {
		t.Helper()
		s, err := OpenState(statePath)
		if err != nil {
			t.Fatal(err)
		}
		return s.Entries()
	}
	for trial := range 4 {
		if err := a.Apply(t.Context(), "/a", "a", capQ); err != nil {
			t.Fatal(err)
		}
		if q := file(t, root, "cg/cpu/a/cpu.cfs_quota_us"); q != "1000" {
			t.Fatalf("trial %d: capped quota %s", trial, q)
		}
		if d := onDisk(); len(d) != 1 || d[0].NextQuotaUS != 1000 || d[0].OriginalQuotaUS != -1 {
			t.Fatalf("trial %d: a cap in force without its intent on disk: %+v", trial, d)
		}
		if err := a.Restore(t.Context(), "/a"); err != nil {
			t.Fatal(err)
		}
		if q := file(t, root, "cg/cpu/a/cpu.cfs_quota_us"); q != "-1" {
			t.Fatalf("trial %d: released quota %s", trial, q)
		}
		if len(state.Entries()) != 0 {
			t.Fatalf("trial %d: released tenant still in memory", trial)
		}
	}
	if *saves != 1 {
		t.Errorf("4 trials saved the state %d times, want 1", *saves)
	}
	// A kill now leaves the lingering entry: restore finds the tenant at
	// its original and leaves it.
	s2, _ := OpenState(statePath)
	res, err := (&CPUQuota{Host: h, Layout: l, State: s2}).RestoreEach()
	if err != nil || len(res.Unchanged) != 1 || len(res.Restored) != 0 {
		t.Errorf("restore of a lingering entry: %+v, %v", res, err)
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	if d := onDisk(); len(d) != 0 || *saves != 2 {
		t.Errorf("after Flush: disk %+v, %d saves", d, *saves)
	}
	if err := a.Flush(); err != nil || *saves != 2 {
		t.Errorf("a second Flush saved again: %d saves, %v", *saves, err)
	}

	// Someone changes the quota after a release: the lingering intent is
	// not reused, the new value is the original.
	a.Apply(t.Context(), "/a", "a", capQ)
	a.Restore(t.Context(), "/a")
	os.WriteFile(filepath.Join(root, "cg/cpu/a/cpu.cfs_quota_us"), []byte("50000"), 0o644)
	before := *saves
	if err := a.Apply(t.Context(), "/a", "a", capQ); err != nil {
		t.Fatal(err)
	}
	if e, _ := state.Get("/a"); e.OriginalQuotaUS != 50000 || *saves != before+1 {
		t.Errorf("after a foreign change: %+v, %d saves", e, *saves-before)
	}
	a.Restore(t.Context(), "/a")
	if q := file(t, root, "cg/cpu/a/cpu.cfs_quota_us"); q != "50000" {
		t.Errorf("restored to %s, want the operator's 50000", q)
	}
}

// Intend saves the intents of several caps in one write; the Applies that
// follow write only the cgroups.
func TestIntendSavesOnceForMany(t *testing.T) {
	a, root, statePath, saves := countedQuota(t)
	h, l := a.Host, a.Layout
	capQ := cgroup.Quota{Quota: time.Millisecond, Period: ProofPeriod}
	in := []Intent{{Cgroup: "/a", Tenant: "a", Quota: capQ}, {Cgroup: "/b", Tenant: "b", Quota: capQ}, {Cgroup: "/gone", Tenant: "gone", Quota: capQ}}
	if err := a.Intend(in); err != nil {
		t.Fatal(err)
	}
	if *saves != 1 {
		t.Fatalf("Intend saved %d times", *saves)
	}
	disk, _ := OpenState(statePath)
	if e := disk.Entries(); len(e) != 2 || e[0].NextQuotaUS != 1000 || e[1].OriginalQuotaUS != 200000 {
		t.Errorf("intents on disk: %+v", e)
	}
	for _, x := range in[:2] {
		if err := a.Apply(t.Context(), x.Cgroup, x.Tenant, x.Quota); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Apply(t.Context(), "/gone", "gone", capQ); !errors.Is(err, ErrGone) {
		t.Errorf("a gone cgroup's Apply after Intend: %v", err)
	}
	if *saves != 1 {
		t.Errorf("Applies after Intend saved %d more times", *saves-1)
	}
	if a1, b1 := file(t, root, "cg/cpu/a/cpu.cfs_quota_us"), file(t, root, "cg/cpu/b/cpu.cfs_quota_us"); a1 != "1000" || b1 != "1000" {
		t.Errorf("caps: a %s, b %s", a1, b1)
	}
	// A full disk: Intend fails and records nothing; Apply then saves (and
	// fails) on its own.
	state2, _ := OpenState(filepath.Join(t.TempDir(), "state.json"))
	state2.SetSaveHook(func(saved bool) error {
		if !saved {
			return errors.New("disk full")
		}
		return nil
	})
	a2 := &CPUQuota{Host: h, Layout: l, State: state2}
	os.WriteFile(filepath.Join(root, "cg/cpu/a/cpu.cfs_quota_us"), []byte("-1"), 0o644)
	if err := a2.Intend(in[:1]); !errors.Is(err, ErrStateNotSaved) || len(state2.Entries()) != 0 {
		t.Errorf("Intend on a full disk: %v, entries %+v", err, state2.Entries())
	}
	if err := a2.Apply(t.Context(), "/a", "a", capQ); !errors.Is(err, ErrStateNotSaved) || file(t, root, "cg/cpu/a/cpu.cfs_quota_us") != "-1" {
		t.Errorf("Apply on a full disk: %v", err)
	}
}
