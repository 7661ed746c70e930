package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/libvirt"
	"github.com/crosstalk-project/crosstalk/internal/resctrl"
)

// ErrStateLocked says another process (a running agent) holds the state
// directory: restoring behind its back would undo throttles it still
// manages, and two agents on one state file would overwrite each other.
var ErrStateLocked = errors.New("state directory in use")

// LockPath is the lock file of a state directory.
func LockPath(dir string) string { return filepath.Join(dir, "agent.lock") }

// StateLock is an exclusive hold on a state directory (flock on
// STATE_DIR/agent.lock). The kernel drops it when the holder dies, so a
// kill -9 never leaves a stale lock behind.
type StateLock struct{ f *os.File }

// LockStateDir takes the state directory for this process, creating it
// (0700) if needed. It fails at once with ErrStateLocked, naming the
// holder's pid, when another process holds it.
func LockStateDir(dir string) (*StateLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state_dir: %w", err)
	}
	p := LockPath(dir)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		holder, _ := os.ReadFile(p)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			pid := strings.TrimSpace(string(holder))
			if pid == "" {
				pid = "unknown"
			}
			return nil, fmt.Errorf("%w: %s is held by pid %s (a running crosstalk agent; stop it — it restores everything on SIGTERM)", ErrStateLocked, p, pid)
		}
		return nil, fmt.Errorf("state lock %s: %w", p, err)
	}
	// The pid is only for the message above; the flock is the lock.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &StateLock{f: f}, nil
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

// RestoreReport says what RestoreAll undid.
type RestoreReport struct {
	// StateFile is the state file read.
	StateFile string `json:"state_file"`
	// Restored counts what was put back, by actuator kind ("cpu_quota", and
	// the record kinds of later actuators).
	Restored map[string]int `json:"restored"`
	// Kept lists records of kinds this binary does not know how to undo, by
	// kind: they stay in the state file for a crosstalk that does.
	Kept map[string][]string `json:"kept,omitempty"`
}

// Total is how many changes were undone.
func (r RestoreReport) Total() int {
	n := 0
	for _, c := range r.Restored {
		n += c
	}
	return n
}

// KindCPUQuota names the CPU-quota entries of the state file in a RestoreReport.
const KindCPUQuota = "cpu_quota"

// RestoreContext is what an actuator's restorer needs: the host, its cgroup
// layout and the state file whose records it undoes (and forgets).
type RestoreContext struct {
	Host   *host.Host
	Layout cgroup.Layout
	State  *act.StateFile
	Log    *slog.Logger
	// Config is the agent's configuration (where libvirt's socket is).
	Config Config
}

// recordRestorer undoes every record of one actuator kind that the state
// file holds, forgetting each one it undid (or found moot), and returns how
// many it undid.
type recordRestorer func(rc RestoreContext) (int, error)

// recordRestorers maps each record kind of act.StateFile to its restorer.
// Every actuator that records its changes with StateFile.PutRecord adds its
// kind here, so that `crosstalk restore` (and systemd's ExecStopPost) undo it
// even after the agent was killed with SIGKILL.
func recordRestorers() map[string]recordRestorer {
	return map[string]recordRestorer{
		act.RecordResctrlClass: func(rc RestoreContext) (int, error) {
			// Releasing a class needs only its record (mount, group, each
			// thread's origin); the mount found now also lets RestoreAll
			// remove crosstalk classes whose records were lost.
			c := &act.ResctrlClasses{Host: rc.Host, State: rc.State, Log: rc.Log}
			if mount, _, ok := resctrl.MountPoint(rc.Host); ok {
				c.Info.Mount = mount
			}
			return c.RestoreAll()
		},
		act.RecordClockMod: func(rc RestoreContext) (int, error) {
			return act.RestoreClockModulation(rc.Host, rc.State, rc.Log)
		},
		act.RecordCPUFreq: func(rc RestoreContext) (int, error) {
			return act.RestoreCPUFreq(rc.Host, rc.State, rc.Log)
		},
		act.LibvirtRecordKind: restoreLibvirt,
	}
}

// restoreLibvirt undoes throttles made through libvirt: through libvirt
// when it answers within its timeout, else through the VMs' cgroup files
// (act.LibvirtQuota's fallback, loudly), keeping for the next agent the
// records whose libvirt definition still needs the original back.
func restoreLibvirt(rc RestoreContext) (int, error) {
	cfg := rc.Config
	cfg.fill()
	cq := &act.CPUQuota{Host: rc.Host, Layout: rc.Layout, State: rc.State, Log: rc.Log}
	var sched act.LibvirtScheduler = offline{}
	if cfg.Libvirt.Enabled != "false" {
		client := libvirt.New(libvirt.Options{Socket: libvirt.SocketPath(rc.Host, cfg.Libvirt.Socket), URI: cfg.Libvirt.URI,
			DialTimeout: cfg.Libvirt.Timeout, CallTimeout: cfg.Libvirt.Timeout, Log: rc.Log})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { client.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		wctx, wcancel := context.WithTimeout(ctx, 2*cfg.Libvirt.Timeout)
		err := client.WaitConnected(wctx)
		wcancel()
		if err == nil {
			sched = client
		} else {
			rc.Log.Warn("libvirt not reachable: VM throttles are lifted through their cgroup files", "err", err)
		}
	}
	q := &act.LibvirtQuota{Libvirt: sched, Cgroups: cq, State: rc.State, Log: rc.Log, Timeout: 2 * cfg.Libvirt.Timeout}
	// Its RestoreAll also restores CPU-quota entries: there are none left
	// by now (RestoreAll undid them first). It leaves a VM whose parameters
	// someone changed since alone, and resyncs libvirt for throttles lifted
	// through the cgroup files while it was down.
	return q.RestoreAll()
}

// restoreRecords undoes every record of every kind recordRestorers knows,
// for an agent that already has its state file open (its own start and
// stop); `crosstalk restore` goes through RestoreAll instead.
func restoreRecords(rc RestoreContext) (restored int, err error) {
	var errs []error
	restorers := recordRestorers()
	for _, kind := range rc.State.RecordKinds() {
		restore, ok := restorers[kind]
		if !ok || kind == act.LibvirtRecordKind {
			continue // the agent's libvirt actuator restores its own
		}
		n, err := restore(rc)
		restored += n
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", kind, err))
		}
	}
	return restored, errors.Join(errs...)
}

// RestoreAll undoes everything the state file in cfg.StateDir records —
// throttled CPU quotas, and every record kind an actuator registered in
// recordRestorers — as a stopping agent does, but from the file alone: it is
// what `crosstalk restore` runs, by hand or as the systemd unit's
// ExecStopPost after the agent died without restoring (SIGKILL, OOM kill, a
// crash). A quota someone else changed since crosstalk wrote it is left as
// it is. It refuses (ErrStateLocked) while a running agent holds the state
// directory. A missing state directory or file means there is nothing to
// restore.
func RestoreAll(cfg Config, h *host.Host, log *slog.Logger) (RestoreReport, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.StateDir == "" {
		cfg.StateDir = Defaults().StateDir
	}
	rep := RestoreReport{StateFile: StatePath(cfg.StateDir), Restored: map[string]int{}}
	if _, err := os.Stat(rep.StateFile); errors.Is(err, fs.ErrNotExist) {
		return rep, nil
	} else if err != nil {
		return rep, fmt.Errorf("state file: %w", err)
	}
	lock, err := LockStateDir(cfg.StateDir)
	if err != nil {
		return rep, err
	}
	defer lock.Unlock()
	return lock.RestoreAll(cfg, h, log)
}

// RestoreAll is the package's RestoreAll for a process that already holds
// the state directory: `crosstalk run` calls it at start, before the agent
// is built, so what a killed predecessor left — of every actuator kind — is
// undone in the one place `crosstalk restore` uses too.
func (l *StateLock) RestoreAll(cfg Config, h *host.Host, log *slog.Logger) (RestoreReport, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.StateDir == "" {
		cfg.StateDir = Defaults().StateDir
	}
	rep := RestoreReport{StateFile: StatePath(cfg.StateDir), Restored: map[string]int{}}
	if l == nil || l.f == nil {
		return rep, errors.New("restore: the state directory is not locked")
	}
	if _, err := os.Stat(rep.StateFile); errors.Is(err, fs.ErrNotExist) {
		return rep, nil
	}
	state, err := act.OpenState(rep.StateFile)
	if err != nil {
		return rep, err
	}
	kinds := state.RecordKinds()
	if len(state.Entries()) == 0 && len(kinds) == 0 {
		return rep, nil
	}
	layout, lerr := cgroup.Detect(h)
	rc := RestoreContext{Host: h, Layout: layout, State: state, Log: log, Config: cfg}

	var errs []error
	if len(state.Entries()) > 0 {
		if lerr != nil {
			errs = append(errs, fmt.Errorf("cpu quotas: cgroup layout: %w", lerr))
		} else {
			n, err := (&act.CPUQuota{Host: h, Layout: layout, State: state, Log: log}).RestoreAll()
			rep.Restored[KindCPUQuota] = n
			if err != nil {
				errs = append(errs, fmt.Errorf("cpu quotas: %w", err))
			}
		}
	}
	restorers := recordRestorers()
	for _, kind := range kinds {
		restore, ok := restorers[kind]
		if !ok {
			if rep.Kept == nil {
				rep.Kept = map[string][]string{}
			}
			rep.Kept[kind] = state.RecordKeys(kind)
			log.Warn("state file has records this crosstalk cannot undo; kept for one that can", "kind", kind, "keys", rep.Kept[kind])
			continue
		}
		n, err := restore(rc)
		rep.Restored[kind] = n
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", kind, err))
		}
	}
	err = errors.Join(errs...)

	if rep.Total() > 0 || err != nil {
		detail := fmt.Sprintf("crosstalk restore: undid %d change(s) a stopped agent left (%s)", rep.Total(), rep.summary())
		if err != nil {
			detail += "; errors: " + err.Error()
		}
		log.Info("restored", "restored", rep.Restored, "err", err)
		if j, jerr := act.OpenJournal(JournalPath(cfg.StateDir)); jerr == nil {
			j.Write(act.Event{Kind: "restore", Detail: detail, Evidence: rep})
			j.Close()
		}
	}
	return rep, err
}

func (r RestoreReport) summary() string {
	kinds := make([]string, 0, len(r.Restored))
	for k := range r.Restored {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, r.Restored[k]))
	}
	return strings.Join(parts, ", ")
}
