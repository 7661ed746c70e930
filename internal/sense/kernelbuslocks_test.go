package sense

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

func TestParseBusLockRecord(t *testing.T) {
	for _, tc := range []struct {
		name, rec string
		want      BusLockReport
		ok        bool
	}{
		// As dmesg printed it on an Emerald Rapids KVM guest (bus_lock_detect).
		{"dmesg #DB", "[   75.188015] x86/split lock detection: #DB: crosstalk/830 took a bus_lock trap at address: 0xbd6edd",
			BusLockReport{TID: 830, Comm: "crosstalk", Trap: "bus_lock"}, true},
		{"kmsg #DB", "4,1187,75188015,-,caller=T830;x86/split lock detection: #DB: crosstalk/830 took a bus_lock trap at address: 0xbd6edd",
			BusLockReport{TID: 830, Comm: "crosstalk", Trap: "bus_lock"}, true},
		{"kmsg #AC", "4,2001,9120001,-;x86/split lock detection: #AC: stress-ng-lockb/4354 took a split_lock trap at address: 0x401231",
			BusLockReport{TID: 4354, Comm: "stress-ng-lockb", Trap: "split_lock"}, true},
		// A KVM host reports a guest's split lock under its vCPU thread.
		{"vCPU thread", "4,77,5000,-;x86/split lock detection: #AC: CPU 1/KVM/4242 took a split_lock trap at address: 0x7f3c2a1b4d20",
			BusLockReport{TID: 4242, Comm: "CPU 1/KVM", Trap: "split_lock"}, true},
		{"guest, fatal", "x86/split lock detection: #AC: CPU 0/KVM/99 fatal split_lock trap at address: 0x1",
			BusLockReport{TID: 99, Comm: "CPU 0/KVM", Trap: "split_lock"}, true},
		// Written to /dev/kmsg by a program (facility user): not the kernel's.
		{"user facility", "12,88,6000,-;x86/split lock detection: #DB: victim/77 took a bus_lock trap at address: 0x1", BusLockReport{}, false},
		{"mode line", "6,3,0,-;x86/split lock detection: #DB: warning on user-space bus_locks", BusLockReport{}, false},
		{"other", "4,5,1,-;perf: interrupt took too long (2503 > 2500)", BusLockReport{}, false},
		{"no id", "x86/split lock detection: #DB: crosstalk took a bus_lock trap at address: 0x1", BusLockReport{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseBusLockRecord(tc.rec)
			if ok != tc.ok || got != tc.want {
				t.Errorf("ParseBusLockRecord(%q) = %+v, %v; want %+v, %v", tc.rec, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// A plain file stands in for /dev/kmsg: the reader returns what the ring
// held when it opened (a thread reported before the agent started), then
// what is appended, line by line, a half-written line once it is finished.
func TestKernelBusLocksReadsTheRingThenWhatIsLogged(t *testing.T) {
	root := t.TempDir()
	kmsg := filepath.Join(root, "dev/kmsg")
	os.MkdirAll(filepath.Dir(kmsg), 0o755)
	old := "4,1,100,-;x86/split lock detection: #DB: old/1 took a bus_lock trap at address: 0x1\n"
	if err := os.WriteFile(kmsg, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	k, err := OpenKernelBusLocks(h)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if got, err := k.Read(); err != nil || len(got) != 1 || got[0].TID != 1 {
		t.Fatalf("first Read = %+v, %v; want the report logged before the open", got, err)
	}
	if got, err := k.Read(); err != nil || len(got) != 0 {
		t.Fatalf("second Read = %+v, %v; want nothing new", got, err)
	}
	f, err := os.OpenFile(kmsg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fmt.Fprint(f, "4,2,200,-;x86/split lock detection: #DB: splitlock/830 took a bus_lock trap at address: 0x2\n"+
		" SUBSYSTEM=cpu\n"+
		"6,3,210,-;eth0: link up\n"+
		"4,4,220,-;x86/split lock detection: #AC: CPU 1/KVM/42")
	got, err := k.Read()
	if err != nil || len(got) != 1 || got[0].TID != 830 {
		t.Fatalf("Read = %+v, %v; want the report of 830 (the half-written one held back)", got, err)
	}
	fmt.Fprint(f, "42 took a split_lock trap at address: 0x3\n")
	got, err = k.Read()
	if err != nil || len(got) != 1 || got[0].TID != 4242 || got[0].Comm != "CPU 1/KVM" {
		t.Fatalf("Read = %+v, %v; want the finished report of 4242", got, err)
	}
	if k.Records != 4 {
		t.Errorf("Records = %d, want 4 (the dictionary line is no record)", k.Records)
	}
}

func TestKernelReportsBusLocks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		flags   []string
		files   map[string]string
		want    bool
		whyPart string
	}{
		{"bus lock detect", []string{"bus_lock_detect"}, map[string]string{"dev/kmsg": "", "proc/cmdline": "quiet\n"}, true, "#DB"},
		{"split lock detect", []string{"split_lock_detect"}, map[string]string{"dev/kmsg": "", "proc/cmdline": "quiet\n"}, true, "#AC"},
		{"both: warn reports in #DB", []string{"split_lock_detect", "bus_lock_detect"}, map[string]string{"dev/kmsg": ""}, true, "#DB"},
		{"neither", nil, map[string]string{"dev/kmsg": ""}, false, "detects neither"},
		{"off on the command line", []string{"bus_lock_detect"}, map[string]string{"dev/kmsg": "", "proc/cmdline": "split_lock_detect=off\n"}, false, "split_lock_detect=off"},
		{"no kmsg", []string{"bus_lock_detect"}, map[string]string{"proc/cmdline": "quiet\n"}, false, "no /dev/kmsg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := host.Open(cgTree(t, tc.files))
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			has := func(f string) bool { return strings.Contains(" "+strings.Join(tc.flags, " ")+" ", " "+f+" ") }
			ok, why := KernelReportsBusLocks(h, has)
			if ok != tc.want || !strings.Contains(why, tc.whyPart) {
				t.Errorf("KernelReportsBusLocks = %v, %q; want %v and %q", ok, why, tc.want, tc.whyPart)
			}
		})
	}
}

func TestThreadCgroups(t *testing.T) {
	h, err := host.Open(cgTree(t, map[string]string{
		"proc/830/cgroup":  "0::/machine.slice/machine-qemu\\x2d1\\x2dvm1.scope/libvirt/vcpu1\n",
		"proc/4242/cgroup": "12:cpu,cpuacct:/kubepods/pod1/c1\n11:cpuset:/kubepods/pod1/c1\n1:name=systemd:/kubepods/pod1/c1\n",
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	got, err := ThreadCgroups(h, 830)
	if err != nil || len(got) != 1 || got[0] != "/machine.slice/machine-qemu\\x2d1\\x2dvm1.scope/libvirt/vcpu1" {
		t.Errorf("ThreadCgroups(830) = %q, %v", got, err)
	}
	got, err = ThreadCgroups(h, 4242)
	if err != nil || len(got) != 3 || got[0] != "/kubepods/pod1/c1" {
		t.Errorf("ThreadCgroups(4242) = %q, %v", got, err)
	}
	if _, err := ThreadCgroups(h, 1); err == nil {
		t.Error("ThreadCgroups of a thread that is gone: no error")
	}
}

// The real /dev/kmsg: non-blocking (Read returns at once once the ring is
// read), one record a read. A record this test writes there (facility
// user) is read and is no report.
func TestLiveKernelBusLocks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to read and write /dev/kmsg")
	}
	h, err := host.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	k, err := OpenKernelBusLocks(h)
	if err != nil {
		t.Skipf("no /dev/kmsg here: %v", err)
	}
	defer k.Close()
	for { // the ring, up to 4096 records a Read
		before := k.Records
		if _, err := k.Read(); err != nil {
			t.Fatal(err)
		}
		if k.Records == before {
			break
		}
	}
	before := k.Records
	w, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("cannot write /dev/kmsg: %v", err)
	}
	msg := fmt.Sprintf("<14>crosstalk test (not the kernel): x86/split lock detection: #DB: crosstalk-test/%d took a bus_lock trap at address: 0x0\n", os.Getpid())
	_, err = w.WriteString(msg)
	w.Close()
	if err != nil {
		t.Skipf("cannot write /dev/kmsg: %v", err)
	}
	got, err := k.Read()
	if err != nil {
		t.Fatal(err)
	}
	if k.Records <= before {
		t.Fatal("the record written to /dev/kmsg was not read")
	}
	for _, r := range got {
		if r.Comm == "crosstalk-test" {
			t.Errorf("a user-space record was taken for the kernel's report: %+v", r)
		}
	}
}
