package act

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

// ErrGone says the tenant's cgroup disappeared: nothing to throttle or restore.
var ErrGone = errors.New("cgroup is gone")

// CPUQuota throttles a tenant through its CFS bandwidth limit (v1
// cpu.cfs_quota_us/cfs_period_us, v2 cpu.max): the one lever every Linux host
// has. Before its first write to a cgroup it records the original limit in the
// state file, and Restore puts it back.
type CPUQuota struct {
	Host   *host.Host
	Layout cgroup.Layout
	State  *StateFile
	Log    *slog.Logger
}

func usecs(d time.Duration) int64 {
	if d <= 0 {
		return -1
	}
	return d.Microseconds()
}

func fromUsecs(q, p int64) cgroup.Quota {
	out := cgroup.Quota{Quota: -1, Period: time.Duration(p) * time.Microsecond}
	if q > 0 {
		out.Quota = time.Duration(q) * time.Microsecond
	}
	return out
}

// Apply sets the tenant's quota, recording the original first.
func (a *CPUQuota) Apply(cgroupPath, tenant string, q cgroup.Quota) error {
	if err := q.Validate(); err != nil {
		return err
	}
	g := cgroup.Open(a.Host, a.Layout, cgroupPath)
	e, known := a.State.Get(cgroupPath)
	if !known {
		orig, err := g.CPUQuota()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return ErrGone
			}
			return fmt.Errorf("read quota of %s: %w", cgroupPath, err)
		}
		e = Entry{Cgroup: cgroupPath, Tenant: tenant, OriginalQuotaUS: usecs(orig.Quota), OriginalPeriodUS: orig.Period.Microseconds(), Since: time.Now().UTC()}
	}
	e.AppliedQuotaUS, e.AppliedPeriodUS = usecs(q.Quota), q.Period.Microseconds()
	if err := a.State.Put(e); err != nil {
		return fmt.Errorf("not throttling %s: cannot record its original quota: %w", cgroupPath, err)
	}
	if err := g.SetCPUQuota(q); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			a.State.Forget(cgroupPath)
			return ErrGone
		}
		return fmt.Errorf("throttle %s: %w", cgroupPath, err)
	}
	return nil
}

// Restore puts the tenant's original quota back and forgets it.
func (a *CPUQuota) Restore(cgroupPath string) error {
	e, ok := a.State.Get(cgroupPath)
	if !ok {
		return nil
	}
	g := cgroup.Open(a.Host, a.Layout, cgroupPath)
	if err := g.SetCPUQuota(fromUsecs(e.OriginalQuotaUS, e.OriginalPeriodUS)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return a.State.Forget(cgroupPath)
		}
		return fmt.Errorf("restore %s: %w", cgroupPath, err)
	}
	return a.State.Forget(cgroupPath)
}

// RestoreAll restores every cgroup in the state file: on a clean stop, and at
// start-up for whatever a killed predecessor left. A cgroup whose quota was
// changed by someone else since crosstalk wrote it is left as it is.
func (a *CPUQuota) RestoreAll() (restored int, err error) {
	var errs []error
	for _, e := range a.State.Entries() {
		g := cgroup.Open(a.Host, a.Layout, e.Cgroup)
		cur, cerr := g.CPUQuota()
		switch {
		case errors.Is(cerr, fs.ErrNotExist):
			a.State.Forget(e.Cgroup)
			continue
		case cerr == nil && (usecs(cur.Quota) != e.AppliedQuotaUS || cur.Period.Microseconds() != e.AppliedPeriodUS):
			if a.Log != nil {
				a.Log.Warn("quota changed by someone else since crosstalk set it; leaving it", "cgroup", e.Cgroup, "now", cur.String())
			}
			a.State.Forget(e.Cgroup)
			continue
		}
		if rerr := a.Restore(e.Cgroup); rerr != nil {
			errs = append(errs, rerr)
			continue
		}
		restored++
	}
	return restored, errors.Join(errs...)
}
