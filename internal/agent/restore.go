package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/libvirt"
	"github.com/crosstalk-project/crosstalk/internal/resctrl"
)

// RestoreReport says what RestoreAll undid, and what it left and why.
type RestoreReport struct {
	// StateFile is the state file read.
	StateFile string `json:"state_file"`
	// Restored counts what was put back, by actuator kind ("cpu_quota", and
	// the record kinds of later actuators).
	Restored map[string]int `json:"restored"`
	// Kept lists records of kinds this binary does not know how to undo, by
	// kind: they stay in the state file for a crosstalk that does.
	Kept map[string][]string `json:"kept,omitempty"`
	// Quotas sorts the CPU-quota entries by outcome (cgroup paths):
	// restored, already at their original value, changed by someone else
	// (left as they are), gone, failed.
	Quotas act.RestoreResult `json:"cpu_quota"`
	// Unowned lists crosstalk-shaped throttles that no entry covers (found
	// by an agent, flagged in the state file): left in place unless
	// restore adopts them.
	Unowned []string `json:"unowned,omitempty"`
	// Adopted sorts the unowned throttles an adopting restore dealt with.
	Adopted *act.RestoreResult `json:"adopted,omitempty"`
	// StateNotUpdated says the restore was done on the host but the state
	// file could not be updated (a read-only or full state directory): a
	// later restore finds what it lists already undone.
	StateNotUpdated string `json:"state_not_updated,omitempty"`
	// Warnings are what the restore went on despite (an unreadable
	// configuration, a read-only state directory).
	Warnings []string `json:"warnings,omitempty"`
}

// RestoreOptions change what RestoreWith does.
type RestoreOptions struct {
	// Adopt also lifts the unowned throttles the state file flags.
	Adopt bool
}

// Left reports whether the restore left anything that is not back to the
// original crosstalk recorded: changes by someone else, throttles not
// adopted, records kept for another crosstalk.
func (r RestoreReport) Left() bool {
	return len(r.Quotas.Foreign) > 0 || len(r.Unowned) > 0 || len(r.Kept) > 0 ||
		(r.Adopted != nil && len(r.Adopted.Foreign) > 0)
}

// Empty reports whether the state file recorded nothing at all.
func (r RestoreReport) Empty() bool {
	q := r.Quotas
	return r.Total() == 0 && len(q.Unchanged)+len(q.Foreign)+len(q.Gone)+len(q.Failed) == 0 &&
		len(r.Unowned) == 0 && len(r.Kept) == 0 && r.Adopted == nil
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
// many it undid. One that waits on a service (libvirt) stops waiting when ctx
// ends.
type recordRestorer func(ctx context.Context, rc RestoreContext) (int, error)

// recordRestorers maps each record kind of act.StateFile to its restorer.
// Every actuator that records its changes with StateFile.PutRecord adds its
// kind here, so that `crosstalk restore` (and systemd's ExecStopPost) undo it
// even after the agent was killed with SIGKILL.
func recordRestorers() map[string]recordRestorer {
	return map[string]recordRestorer{
		act.RecordResctrlClass: func(_ context.Context, rc RestoreContext) (int, error) {
			// Releasing a class needs only its record (mount, group, each
			// thread's origin); the mount found now also lets RestoreAll
			// remove crosstalk classes whose records were lost.
			c := &act.ResctrlClasses{Host: rc.Host, State: rc.State, Log: rc.Log}
			if mount, _, ok := resctrl.MountPoint(rc.Host); ok {
				c.Info.Mount = mount
			}
			return c.RestoreAll()
		},
		act.RecordClockMod: func(_ context.Context, rc RestoreContext) (int, error) {
			return act.RestoreClockModulation(rc.Host, rc.State, rc.Log)
		},
		act.RecordCPUFreq: func(_ context.Context, rc RestoreContext) (int, error) {
			return act.RestoreCPUFreq(rc.Host, rc.State, rc.Log)
		},
		act.LibvirtRecordKind: restoreLibvirt,
	}
}

// restoreLibvirt undoes throttles made through libvirt: through libvirt
// when it answers within its timeout, else through the VMs' cgroup files
// (act.LibvirtQuota's fallback, loudly), keeping for the next agent the
// records whose libvirt definition still needs the original back. An
// ended ctx stops the wait for libvirt: the VMs' cgroup files are written
// instead, at once.
func restoreLibvirt(ctx context.Context, rc RestoreContext) (int, error) {
	cfg := rc.Config
	cfg.fill()
	cq := &act.CPUQuota{Host: rc.Host, Layout: rc.Layout, State: rc.State, Log: rc.Log}
	var sched act.LibvirtScheduler = offline{}
	// The restore's lifetime: the client runs, and the actuator calls
	// libvirt, under it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.Libvirt.Enabled != "false" {
		client := libvirt.New(libvirt.Options{Socket: libvirt.SocketPath(rc.Host, cfg.Libvirt.Socket), URI: cfg.Libvirt.URI,
			DialTimeout: cfg.Libvirt.Timeout, CallTimeout: cfg.Libvirt.Timeout, Log: rc.Log})
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
	return q.RestoreAll(ctx)
}

// restoreRecords undoes every record of every kind recordRestorers knows,
// for an agent that already has its state file open (its own start and
// stop); `crosstalk restore` goes through RestoreAll instead.
func restoreRecords(ctx context.Context, rc RestoreContext) (restored int, err error) {
	var errs []error
	restorers := recordRestorers()
	for _, kind := range rc.State.RecordKinds() {
		restore, ok := restorers[kind]
		if !ok || kind == act.LibvirtRecordKind {
			continue // the agent's libvirt actuator restores its own
		}
		n, err := restore(ctx, rc)
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
// crash). It needs only cfg.StateDir (and the libvirt settings, whose
// defaults do). A quota someone else changed since crosstalk wrote it is
// left as it is. It refuses (ErrStateLocked) while a running agent holds
// the state directory, and a directory others may write
// (ErrInsecureStateDir). A missing state directory or file means there is
// nothing to restore. On a read-only state directory it restores, and says
// in StateNotUpdated that the file still lists what it undid.
func RestoreAll(ctx context.Context, cfg Config, h *host.Host, log *slog.Logger) (RestoreReport, error) {
	return RestoreWith(ctx, cfg, h, log, RestoreOptions{})
}

// RestoreWith is RestoreAll with options.
func RestoreWith(ctx context.Context, cfg Config, h *host.Host, log *slog.Logger, opts RestoreOptions) (RestoreReport, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.StateDir == "" {
		cfg.StateDir = Defaults().StateDir
	}
	rep := RestoreReport{StateFile: StatePath(cfg.StateDir), Restored: map[string]int{}}
	if _, err := os.Lstat(rep.StateFile); errors.Is(err, fs.ErrNotExist) {
		return rep, nil
	} else if err != nil {
		return rep, fmt.Errorf("state file: %w", err)
	}
	lock, err := lockForRestore(cfg.StateDir)
	if err != nil {
		return rep, err
	}
	defer lock.Unlock()
	return lock.restore(ctx, cfg, h, log, opts)
}

// RestoreAll is the package's RestoreAll for a process that already holds
// the state directory: `crosstalk run` calls it at start, before the agent
// is built, so what a killed predecessor left — of every actuator kind — is
// undone in the one place `crosstalk restore` uses too.
func (l *StateLock) RestoreAll(ctx context.Context, cfg Config, h *host.Host, log *slog.Logger) (RestoreReport, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.StateDir == "" {
		cfg.StateDir = Defaults().StateDir
	}
	return l.restore(ctx, cfg, h, log, RestoreOptions{})
}

func (l *StateLock) restore(ctx context.Context, cfg Config, h *host.Host, log *slog.Logger, opts RestoreOptions) (RestoreReport, error) {
	rep := RestoreReport{StateFile: StatePath(cfg.StateDir), Restored: map[string]int{}}
	if !l.held() {
		return rep, errors.New("restore: the state directory is not locked")
	}
	if l.readOnly {
		rep.Warnings = append(rep.Warnings, "state directory is read-only: restoring, but the state file cannot be updated")
	}
	if _, err := os.Lstat(rep.StateFile); errors.Is(err, fs.ErrNotExist) {
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
	cq := &act.CPUQuota{Host: h, Layout: layout, State: state, Log: log}
	if len(state.Entries()) > 0 {
		if lerr != nil {
			errs = append(errs, fmt.Errorf("cpu quotas: cgroup layout: %w", lerr))
		} else {
			res, err := cq.RestoreEach()
			rep.Quotas = res
			rep.Restored[KindCPUQuota] = len(res.Restored)
			if err != nil {
				errs = append(errs, fmt.Errorf("cpu quotas: %w", err))
			}
		}
	}
	restorers := recordRestorers()
	for _, kind := range kinds {
		if kind == act.RecordUnownedQuota {
			if !opts.Adopt || lerr != nil {
				rep.Unowned = state.RecordKeys(kind)
				continue
			}
			res, err := cq.AdoptUnowned()
			rep.Adopted = &res
			rep.Restored[kind] = len(res.Restored)
			if err != nil {
				errs = append(errs, fmt.Errorf("adopting unowned throttles: %w", err))
			}
			continue
		}
		restore, ok := restorers[kind]
		if !ok {
			if rep.Kept == nil {
				rep.Kept = map[string][]string{}
			}
			rep.Kept[kind] = state.RecordKeys(kind)
			log.Warn("state file has records this crosstalk cannot undo; kept for one that can", "kind", kind, "keys", rep.Kept[kind])
			continue
		}
		n, err := restore(ctx, rc)
		rep.Restored[kind] = n
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", kind, err))
		}
	}
	err = errors.Join(errs...)
	if err != nil && errors.Is(err, act.ErrStateNotSaved) {
		rep.StateNotUpdated = fmt.Sprintf("%s still lists what was restored (a later restore finds it done)", rep.StateFile)
		if onlyUnsaved(err) {
			// The host is restored; the file is what is behind.
			err = fmt.Errorf("%w: %w", ErrStateNotUpdated, err)
		}
	}

	if rep.Total() > 0 || err != nil || len(rep.Quotas.Foreign) > 0 {
		detail := fmt.Sprintf("crosstalk restore: undid %d change(s) a stopped agent left (%s)", rep.Total(), rep.summary())
		if n := len(rep.Quotas.Foreign); n > 0 {
			detail += fmt.Sprintf("; left %d quota(s) someone else changed: %v", n, rep.Quotas.Foreign)
		}
		if err != nil {
			detail += "; errors: " + err.Error()
		}
		log.Info("restored", "restored", rep.Restored, "foreign", rep.Quotas.Foreign, "err", err)
		if !l.readOnly {
			if j, jerr := act.OpenJournal(JournalPath(cfg.StateDir)); jerr == nil {
				j.Write(act.Event{Kind: "restore", Detail: detail, Evidence: rep})
				j.Close()
			}
		}
	}
	return rep, err
}

// ErrStateNotUpdated says a restore put everything back on the host but
// could not update the state file.
var ErrStateNotUpdated = errors.New("restored, but the state file could not be updated")

// onlyUnsaved reports whether every error joined in err is a failed state
// save.
func onlyUnsaved(err error) bool {
	switch x := err.(type) {
	case nil:
		return false
	case interface{ Unwrap() []error }:
		errs := x.Unwrap()
		if slices.Contains(errs, act.ErrStateNotSaved) {
			return true
		}
		for _, e := range errs {
			if !onlyUnsaved(e) {
				return false
			}
		}
		return len(errs) > 0
	case interface{ Unwrap() error }:
		return onlyUnsaved(x.Unwrap())
	}
	return err == act.ErrStateNotSaved
}

func (r RestoreReport) summary() string {
	kinds := slices.Sorted(maps.Keys(r.Restored))
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, r.Restored[k]))
	}
	return strings.Join(parts, ", ")
}
