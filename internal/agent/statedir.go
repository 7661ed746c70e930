package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

// ErrStateLocked says another process (a running agent) holds the state
// directory: restoring behind its back would undo throttles it still
// manages, and two agents on one state file would overwrite each other.
var ErrStateLocked = errors.New("state directory in use")

// ErrHostLocked says another agent already manages this host's tenants.
var ErrHostLocked = errors.New("another crosstalk agent runs on this host")

// ErrInsecureStateDir says the state directory could be changed by someone
// other than the agent's user: whoever can write there can have root
// restore any value into any tenant's cgroup, or plant links the agent
// writes through.
var ErrInsecureStateDir = errors.New("insecure state directory")

// LockPath is the lock file of a state directory.
func LockPath(dir string) string { return filepath.Join(dir, "agent.lock") }

// HostLockPath is the host-wide lock below the host root: one agent per
// host, whatever its state directory. The systemd unit's RuntimeDirectory
// makes its directory writable under ProtectSystem=strict.
const HostLockPath = "/run/crosstalk/agent.lock"

// CheckStateDir refuses a state directory that is not a directory, is not
// owned by this process's user, or is writable by its group or others.
func CheckStateDir(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("state_dir: %w", err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.IsDir():
		return fmt.Errorf("state_dir %s: not a directory", dir)
	case ok && int(sys.Uid) != os.Geteuid():
		return fmt.Errorf("%w: %s is owned by uid %d, not by this process's uid %d (chown it)", ErrInsecureStateDir, dir, sys.Uid, os.Geteuid())
	case st.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%w: %s has mode %o: writable by others than its owner (chmod go-w it)", ErrInsecureStateDir, dir, st.Mode().Perm())
	}
	return nil
}

// StateLock is an exclusive hold on a state directory (flock on
// STATE_DIR/agent.lock). The kernel drops it when the holder dies, so a
// kill -9 never leaves a stale lock behind.
type StateLock struct {
	f *os.File
	// readOnly: the directory could not be written; the lock was taken
	// through a read-only descriptor, or not at all where no lock file
	// exists (no agent can be running there: an agent creates it).
	readOnly bool
}

// LockStateDir takes the state directory for this process, creating it
// (0700) if needed and refusing one that is insecure (CheckStateDir). It
// fails at once with ErrStateLocked, naming the holder's pid, when another
// process holds it. The lock file is opened without following links.
func LockStateDir(dir string) (*StateLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state_dir: %w", err)
	}
	if err := CheckStateDir(dir); err != nil {
		return nil, err
	}
	p := LockPath(dir)
	f, err := act.OpenNoFollow(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state lock: %w", err)
	}
	if err := flock(f, p, "a running crosstalk agent; stop it — it restores everything on SIGTERM", ErrStateLocked); err != nil {
		return nil, err
	}
	writeHolder(f, strconv.Itoa(os.Getpid()))
	return &StateLock{f: f}, nil
}

// lockForRestore takes a state directory for `crosstalk restore`, which
// must work on a read-only one too: there it takes the lock through a
// read-only descriptor (flock needs none other), or goes on without one
// where no lock file exists.
func lockForRestore(dir string) (*StateLock, error) {
	if err := CheckStateDir(dir); err != nil {
		return nil, err
	}
	p := LockPath(dir)
	f, err := act.OpenNoFollow(p, os.O_RDWR|os.O_CREATE, 0o600)
	readOnly := false
	if errors.Is(err, unix.EROFS) || errors.Is(err, fs.ErrPermission) {
		readOnly = true
		f, err = act.OpenNoFollow(p, os.O_RDONLY, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return &StateLock{readOnly: true}, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("state lock: %w", err)
	}
	if err := flock(f, p, "a running crosstalk agent; stop it — it restores everything on SIGTERM", ErrStateLocked); err != nil {
		return nil, err
	}
	if !readOnly {
		writeHolder(f, strconv.Itoa(os.Getpid()))
	}
	return &StateLock{f: f, readOnly: readOnly}, nil
}

// flock takes f's exclusive lock or closes f and says who holds it.
func flock(f *os.File, p, holderIs string, locked error) error {
	var err error
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	if err == nil {
		return nil
	}
	holder, _ := act.ReadNoFollow(p, 4096)
	f.Close()
	if errors.Is(err, unix.EWOULDBLOCK) {
		who := strings.TrimSpace(string(holder))
		if who == "" {
			who = "unknown"
		}
		return fmt.Errorf("%w: %s is held by pid %s (%s)", locked, p, who, holderIs)
	}
	return fmt.Errorf("lock %s: %w", p, err)
}

// writeHolder notes who holds a lock, for the message of the next one to
// try; the flock is the lock.
func writeHolder(f *os.File, who string) {
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(who+"\n"), 0)
	}
}

// Unlock releases the state directory.
func (l *StateLock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the last descriptor drops the flock
	l.f = nil
	return err
}

func (l *StateLock) held() bool { return l != nil && (l.f != nil || l.readOnly) }

// HostLock is the one-agent-per-host lock (a flock on
// /run/crosstalk/agent.lock below the host root): two agents with different state directories would
// each take the other's throttles for originals.
type HostLock struct{ f *os.File }

// LockHost takes the host-wide lock for an agent whose state lives in
// stateDir. On a captured tree (not a live host) there is nothing to
// share, and it takes nothing.
func LockHost(h *host.Host, stateDir string) (*HostLock, error) {
	if !h.IsLive() {
		return &HostLock{}, nil
	}
	p := h.Path(HostLockPath)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, fmt.Errorf("host lock: %w", err)
	}
	f, err := act.OpenNoFollow(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("host lock: %w", err)
	}
	if err := flock(f, p, "one agent per host: stop it, or use its state directory", ErrHostLocked); err != nil {
		return nil, err
	}
	abs, _ := filepath.Abs(stateDir)
	writeHolder(f, fmt.Sprintf("%d, state_dir %s", os.Getpid(), abs))
	return &HostLock{f: f}, nil
}

// Unlock releases the host.
func (l *HostLock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
