package act

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
)

// A disk that fills in the middle of a journal line: the part written is
// cut back off, the error says so, and the next event starts a line of its
// own — every line of the file decodes.
func TestJournalWritesWholeLinesOnFullDisk(t *testing.T) {
	p := filepath.Join(t.TempDir(), "journal.jsonl")
	j, err := OpenJournal(p)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := j.Write(Event{Kind: "start"}); err != nil {
		t.Fatal(err)
	}
	f := j.f
	j.write = func(b []byte) (int, error) {
		n, _ := f.Write(b[:len(b)/2])
		return n, syscall.ENOSPC
	}
	if err := j.Write(Event{Kind: "throttle", Detail: strings.Repeat("x", 200)}); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("write on a full disk: %v", err)
	}
	j.write = f.Write
	if err := j.Write(Event{Kind: "stop"}); err != nil {
		t.Fatal(err)
	}
	fh, _ := os.Open(p)
	defer fh.Close()
	var kinds []string
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Errorf("torn line %q: %v", sc.Text(), err)
		}
		kinds = append(kinds, e.Kind)
	}
	if strings.Join(kinds, ",") != "start,stop" {
		t.Errorf("journal = %v", kinds)
	}
}

// A save that does not reach the disk leaves the state in memory as it
// was: it never claims an entry the file lacks, nor forgets one the file
// still has.
func TestStateInMemoryFollowsTheDisk(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	s, _ := OpenState(p)
	full := false
	s.SetSaveHook(func(saved bool) error {
		if full && !saved {
			return syscall.ENOSPC
		}
		return nil
	})
	if err := s.Put(Entry{Cgroup: "/a", OriginalQuotaUS: -1, OriginalPeriodUS: 100000}); err != nil {
		t.Fatal(err)
	}
	s.PutRecord("cpufreq", "cpu1", 1)
	full = true
	if err := s.Put(Entry{Cgroup: "/b"}); !errors.Is(err, ErrStateNotSaved) {
		t.Errorf("Put on a full disk: %v", err)
	}
	if err := s.Put(Entry{Cgroup: "/a", OriginalQuotaUS: 7, OriginalPeriodUS: 100000}); err == nil {
		t.Error("replacing put on a full disk succeeded")
	}
	if err := s.Forget("/a"); err == nil {
		t.Error("Forget on a full disk succeeded")
	}
	if err := s.PutRecord("cpufreq", "cpu2", 2); err == nil {
		t.Error("PutRecord on a full disk succeeded")
	}
	if err := s.ForgetRecord("cpufreq", "cpu1"); err == nil {
		t.Error("ForgetRecord on a full disk succeeded")
	}
	disk, _ := OpenState(p)
	for name, st := range map[string]*StateFile{"memory": s, "disk": disk} {
		if e := st.Entries(); len(e) != 1 || e[0].Cgroup != "/a" || e[0].OriginalQuotaUS != -1 {
			t.Errorf("%s entries = %+v", name, e)
		}
		if k := st.RecordKeys("cpufreq"); len(k) != 1 || k[0] != "cpu1" {
			t.Errorf("%s records = %v", name, k)
		}
	}
	if s.SaveFailures() != 5 {
		t.Errorf("SaveFailures = %d", s.SaveFailures())
	}
}

// Links and special files planted where crosstalk keeps its files are
// refused, never written through.
func TestOwnFilesRefuseLinks(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	os.WriteFile(target, []byte("precious\n"), 0o644)
	os.Symlink(target, filepath.Join(dir, "journal.jsonl"))
	if _, err := OpenJournal(filepath.Join(dir, "journal.jsonl")); !errors.Is(err, ErrNotRegular) {
		t.Errorf("journal through a symlink: %v", err)
	}
	os.Symlink(target, filepath.Join(dir, "state.json"))
	if _, err := OpenState(filepath.Join(dir, "state.json")); !errors.Is(err, ErrNotRegular) {
		t.Errorf("state through a symlink: %v", err)
	}
	syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600)
	if _, err := OpenNoFollow(filepath.Join(dir, "fifo"), os.O_RDWR, 0); !errors.Is(err, ErrNotRegular) {
		t.Errorf("fifo: %v", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "precious\n" {
		t.Errorf("target written through: %q", b)
	}
}

// A corrupt state file is a typed error, and MoveAside keeps it for a
// person to read.
func TestCorruptStateMovedAside(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	os.WriteFile(p, []byte(`{"entries":{"/a":{"cgroup":"/../../etc"}}}`), 0o600)
	_, err := OpenState(p)
	var c *CorruptStateError
	if !errors.As(err, &c) {
		t.Fatalf("state with a climbing cgroup path: %v", err)
	}
	moved, err := MoveAside(p, time.Unix(0, 0))
	if err != nil || !strings.HasPrefix(moved, p+".corrupt-") {
		t.Fatalf("MoveAside = %q, %v", moved, err)
	}
	if s, err := OpenState(p); err != nil || len(s.Entries()) != 0 {
		t.Errorf("after MoveAside: %v", err)
	}
}

// A quota shaped like crosstalk's that no entry covers is flagged once and
// never adopted as an original; AdoptUnowned lifts it unless someone
// changed it since.
func TestUnownedThrottleFlaggedNotAdopted(t *testing.T) {
	h, l, root := cgroupTree(t)
	os.WriteFile(filepath.Join(root, "cg/cpu/a/cpu.cfs_period_us"), []byte("16000\n"), 0o644)
	os.WriteFile(filepath.Join(root, "cg/cpu/a/cpu.cfs_quota_us"), []byte("3000\n"), 0o644)
	jp := filepath.Join(t.TempDir(), "journal.jsonl")
	j, _ := OpenJournal(jp)
	defer j.Close()
	s, _ := OpenState(filepath.Join(t.TempDir(), "state.json"))
	a := &CPUQuota{Host: h, Layout: l, State: s, Journal: j, Shapes: DefaultQuotaShapes()}
	for range 3 {
		if err := a.Apply(t.Context(), "/a", "a", cgroup.Quota{Quota: time.Millisecond, Period: 16 * time.Millisecond}); !errors.Is(err, ErrUnowned) || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Apply on an unowned throttle: %v", err)
		}
	}
	if _, ok := s.Get("/a"); ok {
		t.Error("the throttle left behind was adopted as the original")
	}
	if q := file(t, root, "cg/cpu/a/cpu.cfs_quota_us"); q != "3000" {
		t.Errorf("quota written: %s", q)
	}
	if keys := s.RecordKeys(RecordUnownedQuota); len(keys) != 1 || keys[0] != "/a" {
		t.Errorf("unowned records = %v", keys)
	}
	jb, _ := os.ReadFile(jp)
	if n := strings.Count(string(jb), `"kind":"unowned"`); n != 1 {
		t.Errorf("journalled %d times, want once:\n%s", n, jb)
	}
	// An ordinary limit is not crosstalk-shaped: b is throttled as usual.
	if a.FlagIfUnowned("/b", "b") {
		t.Error("b's 2-CPU limit flagged")
	}
	res, err := a.AdoptUnowned()
	if err != nil || len(res.Restored) != 1 {
		t.Fatalf("AdoptUnowned = %+v, %v", res, err)
	}
	if q, p := file(t, root, "cg/cpu/a/cpu.cfs_quota_us"), file(t, root, "cg/cpu/a/cpu.cfs_period_us"); q != "-1" || p != "100000" {
		t.Errorf("after adopt: %s/%s", q, p)
	}
	if len(s.RecordKeys(RecordUnownedQuota)) != 0 {
		t.Error("record kept after adopt")
	}
}

// An operator's change made while crosstalk held the tenant survives the
// agent's own release, as it survives `crosstalk restore`.
func TestReleaseLeavesAnOperatorsChange(t *testing.T) {
	h, l, root := cgroupTree(t)
	s, _ := OpenState(filepath.Join(t.TempDir(), "state.json"))
	a := &CPUQuota{Host: h, Layout: l, State: s}
	if err := a.Apply(t.Context(), "/a", "a", cgroup.Quota{Quota: time.Millisecond, Period: 16 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "cg/cpu/a/cpu.cfs_quota_us"), []byte("8000\n"), 0o644)
	if err := a.Restore(t.Context(), "/a"); err != nil {
		t.Fatal(err)
	}
	if q := file(t, root, "cg/cpu/a/cpu.cfs_quota_us"); q != "8000" {
		t.Errorf("operator's quota overwritten on release: %s", q)
	}
	if len(s.Entries()) != 0 {
		t.Error("entry kept")
	}
}

// A VM throttled through libvirt has a crosstalk-shaped quota in its
// cgroups and a libvirt record, not a CPU-quota entry: it is crosstalk's,
// and not flagged (the libvirt actuator restores it); the same quota with
// no record anywhere is.
func TestUnownedSkipsOtherActuatorsRecords(t *testing.T) {
	h, l, root := cgroupTree(t)
	os.WriteFile(filepath.Join(root, "cg/cpu/a/cpu.cfs_period_us"), []byte("16000\n"), 0o644)
	os.WriteFile(filepath.Join(root, "cg/cpu/a/cpu.cfs_quota_us"), []byte("1000\n"), 0o644)
	s, _ := OpenState(filepath.Join(t.TempDir(), "state.json"))
	a := &CPUQuota{Host: h, Layout: l, State: s, Shapes: DefaultQuotaShapes()}
	if err := s.PutRecord(LibvirtRecordKind, "/a", map[string]string{"domain": "vm-a"}); err != nil {
		t.Fatal(err)
	}
	if a.FlagIfUnowned("/a", "a") {
		t.Error("a VM's libvirt throttle flagged as unowned")
	}
	if err := s.ForgetRecord(LibvirtRecordKind, "/a"); err != nil {
		t.Fatal(err)
	}
	if !a.FlagIfUnowned("/a", "a") {
		t.Error("the same quota with no record anywhere not flagged")
	}
}

// The default shapes are the agent's: its duty cycles (the deep floor's
// among them) and its proof caps
// (1 ms per CPU a ProofPeriod) are crosstalk's, an operator's limits are not.
func TestDefaultQuotaShapesMatchTheAgentsQuotas(t *testing.T) {
	s := DefaultQuotaShapes()
	for _, tc := range []struct {
		q    cgroup.Quota
		want bool
	}{
		{cgroup.Quota{Quota: time.Millisecond, Period: 16 * time.Millisecond}, true},
		{cgroup.Quota{Quota: 5 * time.Millisecond, Period: 16 * time.Millisecond}, true},
		{cgroup.Quota{Quota: time.Millisecond, Period: 128 * time.Millisecond}, true}, // the deep floor
		{cgroup.Quota{Quota: time.Millisecond, Period: 32 * time.Millisecond}, true},  // one of fewer periods
		{cgroup.Quota{Quota: time.Millisecond, Period: 48 * time.Millisecond}, false},
		{cgroup.Quota{Quota: time.Millisecond, Period: 256 * time.Millisecond}, false},
		{cgroup.Quota{Quota: time.Millisecond, Period: ProofPeriod}, true},
		{cgroup.Quota{Quota: 2 * time.Millisecond, Period: ProofPeriod}, s.ProofMaxQuota >= 2*time.Millisecond},
		{cgroup.Quota{Quota: 1500 * time.Microsecond, Period: ProofPeriod}, false},
		{cgroup.Quota{Quota: 200 * time.Millisecond, Period: 100 * time.Millisecond}, false},
		{cgroup.Quota{Quota: 50 * time.Millisecond, Period: 100 * time.Millisecond}, false},
		{cgroup.Quota{Quota: -1, Period: 16 * time.Millisecond}, false},
	} {
		if got := s.Match(tc.q); got != tc.want {
			t.Errorf("Match(%s) = %v, want %v", tc.q, got, tc.want)
		}
	}
}
