package sense

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

// KmsgPath is the kernel log device the bus-lock reports are read from.
const KmsgPath = "/dev/kmsg"

// BusLockReport is one line in which the kernel names a thread that took a
// split lock or a bus lock.
type BusLockReport struct {
	// TID is the thread's ID (current->pid: a thread, not its process).
	TID int
	// Comm is its command name; a KVM host names a guest's vCPU thread
	// ("CPU 1/KVM").
	Comm string
	// Trap is "split_lock" (#AC) or "bus_lock" (#DB).
	Trap string
}

// busLockRE matches the kernel's reports (arch/x86/kernel/cpu/bus_lock.c,
// formerly intel.c, pr_fmt "x86/split lock detection: "):
//
//	#AC: stress-ng/830 took a split_lock trap at address: 0x4011ae
//	#DB: crosstalk/830 took a bus_lock trap at address: 0xbd6edd
//	#AC: CPU 1/KVM/4242 fatal split_lock trap at address: 0x...  (a guest's, on the host)
//
// The command name may hold '/' and spaces; the ID is the last "/digits "
// before the verb.
var busLockRE = regexp.MustCompile(`#(?:AC|DB): (.+)/(\d+) (?:took a|fatal|bogus) (split_lock|bus_lock) trap`)

// ParseBusLockRecord reads one /dev/kmsg record ("prio,seq,usec,flags;text",
// or a bare dmesg line) and returns the report it holds, if it is one.
// A record another program wrote to /dev/kmsg (a facility other than the
// kernel's) is no report: writing there must not frame a tenant.
func ParseBusLockRecord(rec string) (BusLockReport, bool) {
	if !strings.Contains(rec, "_lock trap") {
		return BusLockReport{}, false
	}
	if head, _, ok := strings.Cut(rec, ";"); ok {
		prio, _, _ := strings.Cut(head, ",")
		if p, err := strconv.Atoi(prio); err == nil && p>>3 != 0 {
			return BusLockReport{}, false // not LOG_KERN
		}
	}
	m := busLockRE.FindStringSubmatch(rec)
	if m == nil {
		return BusLockReport{}, false
	}
	tid, err := strconv.Atoi(m[2])
	if err != nil || tid <= 0 {
		return BusLockReport{}, false
	}
	return BusLockReport{TID: tid, Comm: m[1], Trap: m[3]}, true
}

// KernelBusLocks reads the kernel's own reports of bus-locking threads.
//
// On CPUs with split-lock detection (#AC, cpuinfo flag split_lock_detect)
// or bus-lock detection (#DB, bus_lock_detect), Linux in its default mode
// ("warn") logs the offending thread by name and ID: once per thread for
// #AC, rate limited (ten lines per five seconds for the whole host) for #DB.
// A KVM host logs a guest's split lock under the vCPU thread that took it.
// That names a bus-locking tenant on a host without a PMU, or inside a VM
// whose hypervisor hides the PMU but passes bus-lock detection through.
// The reports are few by design, so they say who, not how much.
//
// Its first reads return what the kernel's ring still holds from before it
// opened the device: #AC names a thread once, when it starts, so a loop
// that began before the agent is named only there.
type KernelBusLocks struct {
	f       *os.File
	buf     []byte
	partial []byte // an unfinished line, where the source is a plain file
	// Records counts the records read; Lost the times the kernel's ring
	// overwrote records before they were read (EPIPE).
	Records, Lost int
}

// OpenKernelBusLocks opens the host's /dev/kmsg, non-blocking, at the
// oldest record the kernel holds.
func OpenKernelBusLocks(h *host.Host) (*KernelBusLocks, error) {
	f, err := h.OpenFile(KmsgPath, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("kernel bus-lock reports: %w", err)
	}
	// A /dev/kmsg read returns one record and fails with EINVAL when the
	// buffer is smaller (records are at most 8 KiB with their dictionary).
	return &KernelBusLocks{f: f, buf: make([]byte, 8192)}, nil
}

// Read returns the reports logged since the last Read.
func (k *KernelBusLocks) Read() ([]BusLockReport, error) {
	var out []BusLockReport
	// Bound one call: a host flooding its log must not hold the agent.
	for range 4096 {
		n, err := k.read()
		switch {
		case errors.Is(err, unix.EAGAIN):
			return out, nil
		case errors.Is(err, unix.EPIPE):
			k.Lost++ // overwritten; the next read goes on from the oldest left
			continue
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return out, fmt.Errorf("kernel bus-lock reports: read %s: %w", k.f.Name(), err)
		}
		if n == 0 {
			return out, nil
		}
		data := k.buf[:n]
		if len(k.partial) > 0 {
			data = append(k.partial, data...)
			k.partial = nil
		}
		for len(data) > 0 {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				k.partial = append([]byte(nil), data...)
				break
			}
			line := data[:i]
			data = data[i+1:]
			if len(line) == 0 || line[0] == ' ' { // a record's dictionary
				continue
			}
			k.Records++
			if r, ok := ParseBusLockRecord(string(line)); ok {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// read is one read(2) on the descriptor, which never waits: an *os.File
// opened non-blocking on a pollable device would park in Go's poller until
// the kernel logs something.
func (k *KernelBusLocks) read() (int, error) {
	rc, err := k.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		n, rerr = unix.Read(int(fd), k.buf)
		return true
	}); err != nil {
		return 0, err
	}
	return n, rerr
}

// Close closes the device.
func (k *KernelBusLocks) Close() error { return k.f.Close() }

// KernelReportsBusLocks says whether the kernel logs bus-locking threads
// here, and why not: the CPU must detect split locks (#AC) or bus locks
// (#DB), and split_lock_detect= must not be off. hasFlag reads
// /proc/cpuinfo's flags (topology.Identity.HasFlag).
func KernelReportsBusLocks(h *host.Host, hasFlag func(string) bool) (bool, string) {
	sld, bld := hasFlag("split_lock_detect"), hasFlag("bus_lock_detect")
	if !sld && !bld {
		return false, "the CPU detects neither split locks nor bus locks (no split_lock_detect or bus_lock_detect in /proc/cpuinfo)"
	}
	if cmdline, err := h.ReadString("/proc/cmdline"); err == nil {
		if v, ok := host.ParseCmdline(cmdline).Get("split_lock_detect"); ok && v == "off" {
			return false, "split_lock_detect=off on the kernel command line: the kernel does not report bus locks"
		}
	}
	if !h.Exists(KmsgPath) {
		return false, "no " + KmsgPath + " to read the kernel's reports from"
	}
	if h.IsLive() {
		// A device node can be there and refuse this process: a pod
		// without privileged (its device cgroup), or dmesg_restrict=1
		// without CAP_SYSLOG.
		f, err := h.OpenFile(KmsgPath, os.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			return false, fmt.Sprintf("%s cannot be read (%v): under kernel.dmesg_restrict=1 it needs CAP_SYSLOG, and in a container a privileged one", KmsgPath, host.UnwrapPath(err))
		}
		f.Close()
	}
	// With both, warn mode reports in #DB (every bus lock, rate limited).
	trap := "#AC (split_lock_detect)"
	if bld {
		trap = "#DB (bus_lock_detect)"
	}
	return true, "the kernel names threads that take split or bus locks (" + trap + ")"
}

// ThreadCgroups returns the cgroup paths of a thread, one per hierarchy
// (/proc/TID/cgroup: "0::/path" on cgroup v2, "4:cpu,cpuacct:/path" on v1).
func ThreadCgroups(h *host.Host, tid int) ([]string, error) {
	s, err := h.ReadString(fmt.Sprintf("/proc/%d/cgroup", tid))
	if err != nil {
		return nil, err
	}
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && parts[2] != "" {
			out = append(out, parts[2])
		}
	}
	return out, nil
}
