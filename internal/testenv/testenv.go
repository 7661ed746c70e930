// Package testenv holds what the tests of several packages share about the
// machine they run on. It is imported only by _test files: none of it is in
// the crosstalk binary.
package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

// LiveCgroups opens this machine's root and its cgroup layout for a test
// that creates real cgroups, and skips the test where it cannot: not root,
// or no writable cpu controller. The host closes with the test.
func LiveCgroups(t testing.TB) (*host.Host, cgroup.Layout) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	h, err := host.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	l, err := cgroup.Detect(h)
	if err != nil || l.CPUControl() == "" {
		t.Skipf("no writable cgroup cpu controller here: %v", err)
	}
	return h, l
}

// LockCPUs holds, for the rest of the test, a machine-wide lock that every
// CPU-heavy live test takes: real tenants pinned to CPUs (the lab), real
// guests (the libvirt e2e). `go test ./...` runs packages in parallel, and on
// a 2-CPU machine a lab tenant pinned to a CPU where two TCG guests run at a
// raised CPU weight cannot even finish its phase in time. The lock is a
// flock, so a test killed while holding it releases it. It waits up to
// wait for the lock, then fails the test.
func LockCPUs(t testing.TB, wait time.Duration) {
	t.Helper()
	unlock, err := lock(filepath.Join(os.TempDir(), "crosstalk-live-tests.lock"), wait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock)
}

// LockAgent holds, for the rest of the test, the lock of tests that run a
// real agent on this host (root "/"): one agent per host holds
// /run/crosstalk/agent.lock, and `go test ./...` runs the packages that
// start one (cli, deploy, monitoring) in parallel. A separate lock from
// LockCPUs, so a test may take both.
func LockAgent(t testing.TB) {
	t.Helper()
	unlock, err := lock(filepath.Join(os.TempDir(), "crosstalk-live-agent.lock"), 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock)
}

// lock takes an exclusive flock on path, polling until wait has passed.
func lock(path string, wait time.Duration) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, fmt.Errorf("live-test lock: %w", err)
	}
	deadline := time.Now().Add(wait)
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing drops the flock
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			f.Close()
			return nil, fmt.Errorf("live-test lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("live-test lock %s: still held by another test after %s", path, wait)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
