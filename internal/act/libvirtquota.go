package act

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/libvirt"
)

// ErrUnavailable says an actuator cannot act now (its daemon is down); the
// caller should back off rather than retry at once.
var ErrUnavailable = errors.New("actuator unavailable")

// LibvirtScheduler is what LibvirtQuota needs of a libvirt client.
type LibvirtScheduler interface {
	Connected() bool
	DomainByCgroup(cgroupPath string) (libvirt.Domain, bool)
	DomainByUUID(uuid string) (libvirt.Domain, bool)
	Refresh(ctx context.Context) ([]libvirt.Domain, error)
	SchedParams(ctx context.Context, d libvirt.Domain) (libvirt.SchedParams, error)
	SetSchedParams(ctx context.Context, d libvirt.Domain, p libvirt.SchedParams) error
}

// LibvirtRecordKind is LibvirtQuota's section of the state file.
const LibvirtRecordKind = "libvirt_sched"

// Paths a libvirt VM's throttle went through, as recorded.
const (
	// PathLibvirt: set through libvirt (global_quota/global_period, live);
	// restored through libvirt.
	PathLibvirt = "libvirt"
	// PathCgroupFallback: the throttle was lifted by writing the domain's
	// cgroup files while libvirt was unreachable; libvirt's live definition
	// still shows the throttle until Resync sets the original through libvirt.
	PathCgroupFallback = "cgroup-fallback"
)

// LibvirtRecord is what LibvirtQuota keeps per throttled VM (keyed by its
// cgroup): libvirt's global CFS parameters before crosstalk changed them.
type LibvirtRecord struct {
	Cgroup string `json:"cgroup"`
	Tenant string `json:"tenant"`
	Domain string `json:"domain"`
	UUID   string `json:"uuid"`
	ID     int    `json:"id"`
	// global_quota and global_period before crosstalk, in µs as libvirt
	// reports them (quota <= 0: unlimited).
	OriginalQuotaUS  int64 `json:"original_global_quota_us"`
	OriginalPeriodUS int64 `json:"original_global_period_us"`
	AppliedQuotaUS   int64 `json:"applied_global_quota_us"`
	AppliedPeriodUS  int64 `json:"applied_global_period_us"`
	// PreviousQuotaUS and PreviousPeriodUS are the last value libvirt
	// confirmed before the applied one was asked for (period 0: none). The
	// record is written before libvirt is asked, so after a kill between
	// the two the VM may still hold the previous value: the cgroup-file
	// fallback takes either for crosstalk's own (the write-ahead intent CPU
	// quotas have too).
	PreviousQuotaUS  int64 `json:"previous_global_quota_us,omitempty"`
	PreviousPeriodUS int64 `json:"previous_global_period_us,omitempty"`
	// Unconfirmed lists what crosstalk asked libvirt for since the last
	// value libvirt confirmed (Previous) without hearing back: a call cut
	// by a reconnection may or may not have reached the kernel, and while
	// libvirtd restarts several rewrites can fail in a row. Any of them may
	// be in force, so the fallback takes each for crosstalk's own too.
	Unconfirmed []GlobalUS `json:"unconfirmed_global_us,omitempty"`
	Path        string     `json:"path"`
	Since       time.Time  `json:"since"`
}

// GlobalUS is one global_quota/global_period pair, in µs.
type GlobalUS struct {
	QuotaUS  int64 `json:"quota_us"`
	PeriodUS int64 `json:"period_us"`
}

// maxUnconfirmed bounds a record's Unconfirmed list: the oldest go first
// (the confirmed value, the likeliest in force, is kept apart).
const maxUnconfirmed = 16

// noteUnconfirmed adds the record's applied value to its unconfirmed list.
func (r *LibvirtRecord) noteUnconfirmed() {
	v := GlobalUS{r.AppliedQuotaUS, r.AppliedPeriodUS}
	if v == (GlobalUS{r.PreviousQuotaUS, r.PreviousPeriodUS}) || slices.Contains(r.Unconfirmed, v) {
		return
	}
	r.Unconfirmed = append(r.Unconfirmed, v)
	if len(r.Unconfirmed) > maxUnconfirmed {
		r.Unconfirmed = slices.Delete(r.Unconfirmed, 0, len(r.Unconfirmed)-maxUnconfirmed)
	}
}

// LibvirtQuota throttles libvirt VMs through libvirt and every other tenant
// through CPUQuota. It satisfies the agent's QuotaActuator.
//
// Why through libvirt: the operator of a KVM host manages VMs with libvirt,
// and libvirt owns its domains' cgroups. A quota written behind its back is
// invisible in `virsh schedinfo`/`dumpxml` and silently overwritten by the
// next libvirt operation that touches CPU tuning; set through the scheduler
// parameters API, it is what libvirt shows, emits a tunable event, and is
// what libvirt keeps (live only: the persistent definition is untouched, so
// a restart of the guest never inherits a throttle).
//
// Which parameter: global_quota/global_period, the domain's own cgroup — all
// of its threads together. The agent's quota is in CPUs for the whole tenant
// (the same semantics CPUQuota gives a container), and global_* is exactly
// that. vcpu_quota caps each vCPU cgroup separately: a tenant quota Q over N
// vCPUs becomes Q/N per vCPU, a vCPU cannot use what an idle sibling leaves,
// and the emulator and iothreads stay unthrottled. Tried on real TCG guests
// on the dev machine (one run): a 2-vCPU guest with global_quota=2000 per
// 16000 used 0.133 CPU (target 0.125); with vcpu_quota=1000 per 16000 (the
// same total split per vCPU) 0.147 CPU — its emulator thread ran outside the
// cap. On a 1-vCPU guest both held it to 0.06 CPU.
//
// One path per throttle: a VM is throttled through libvirt whenever libvirt
// is reachable and lists it; the record says which path a throttle took,
// and Restore undoes it the same way. A VM cgroup libvirt does not list
// (another daemon's) goes through the cgroup files, as before.
//
// libvirt down: a throttle is never put on behind libvirt's back (Apply
// returns ErrUnavailable and the agent backs off), but lifting one never
// waits for libvirt: an innocent VM held at a few percent of a CPU while
// libvirtd restarts — seconds, or forever if it crashed — is exactly the
// harm crosstalk must not do. So Restore first asks libvirt (bounded by the
// client's call deadline), and when libvirt is unreachable or refuses, writes
// the recorded original into the domain's cgroup files itself, if they still
// hold what crosstalk set, with an error-level log line; the record stays,
// marked cgroup-fallback, and Resync (run on every reconnection, and at the
// next start) sets the same original through libvirt so its live definition
// agrees with the kernel again.
type LibvirtQuota struct {
	Libvirt LibvirtScheduler
	// Cgroups throttles every other tenant, and its Host and Layout locate
	// a domain's cgroup files for the fallback.
	Cgroups *CPUQuota
	State   *StateFile
	Log     *slog.Logger
	// Timeout bounds each libvirt operation (default 5s; the client's own
	// call deadline applies too).
	Timeout time.Duration

	mu sync.Mutex
	// confirmed says, per VM cgroup, whether libvirt confirmed the last
	// value crosstalk asked for. Unknown after a restart: taken as not.
	confirmed map[string]bool
	// notOurs holds the VM cgroups no domain of this libvirt matches, so
	// each is logged once; an entry goes when its cgroup does (see
	// pruneNotOursLocked), so VM churn under another daemon does not grow it.
	notOurs map[string]bool
}

// callCtx bounds one libvirt operation by Timeout under the caller's ctx.
func (a *LibvirtQuota) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	t := a.Timeout
	if t <= 0 {
		t = 5 * time.Second
	}
	return context.WithTimeout(ctx, t)
}

// liftCtx bounds one libvirt operation that lifts a throttle. It keeps the
// caller's values but not its cancellation: an agent stopping because its
// context ended must still lift what it put on, and that must go through
// libvirt when libvirt answers, not straight to the cgroup-file fallback.
// Timeout still bounds it.
func (a *LibvirtQuota) liftCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return a.callCtx(context.WithoutCancel(ctx))
}

func (a *LibvirtQuota) log() *slog.Logger {
	if a.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return a.Log
}

func (a *LibvirtQuota) record(cgroupPath string) (LibvirtRecord, bool) {
	var r LibvirtRecord
	ok, err := a.State.GetRecord(LibvirtRecordKind, cgroupPath, &r)
	if err != nil {
		a.log().Error("libvirt throttle record unreadable; ignoring it", "cgroup", cgroupPath, "err", err)
		return r, false
	}
	return r, ok
}

// domainOf finds the domain for a record (by UUID; a record outlives the
// client's list, so it can also address a domain no longer listed).
func (a *LibvirtQuota) domainOf(r LibvirtRecord) libvirt.Domain {
	if d, ok := a.Libvirt.DomainByUUID(r.UUID); ok && d.ID == r.ID {
		return d
	}
	return libvirt.Domain{Name: r.Domain, UUID: r.UUID, ID: r.ID}
}

// Apply throttles a tenant to q: a libvirt VM through libvirt's global
// scheduler parameters, anything else through CPUQuota.
func (a *LibvirtQuota) Apply(ctx context.Context, cgroupPath, tenant string, q cgroup.Quota) error {
	if err := q.Validate(); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, isVM := libvirt.ParseMachineCgroup(cgroupPath); !isVM {
		return a.Cgroups.Apply(ctx, cgroupPath, tenant, q)
	}
	if _, viaFiles := a.Cgroups.State.Get(cgroupPath); viaFiles {
		return a.Cgroups.Apply(ctx, cgroupPath, tenant, q) // the throttle began that way: keep one path
	}
	ctx, cancel := a.callCtx(ctx)
	defer cancel()
	rec, has := a.record(cgroupPath)
	var dom libvirt.Domain
	if has {
		dom = a.domainOf(rec)
	} else {
		d, ok := a.Libvirt.DomainByCgroup(cgroupPath)
		if !ok {
			if !a.Libvirt.Connected() {
				return fmt.Errorf("not throttling VM %s: %w: libvirt is not reachable, and VMs are throttled only through it", tenant, ErrUnavailable)
			}
			// Started since the last listing? Ask once more.
			if _, err := a.Libvirt.Refresh(ctx); err != nil {
				return fmt.Errorf("not throttling VM %s: %w: %v", tenant, ErrUnavailable, err)
			}
			if d, ok = a.Libvirt.DomainByCgroup(cgroupPath); !ok {
				if a.notOurs == nil {
					a.notOurs = map[string]bool{}
				}
				if !a.notOurs[cgroupPath] {
					a.pruneNotOursLocked()
					a.notOurs[cgroupPath] = true
					a.log().Info("VM cgroup matches no domain of this libvirt; throttling it through its cgroup files", "cgroup", cgroupPath)
				}
				return a.Cgroups.Apply(ctx, cgroupPath, tenant, q)
			}
		}
		if !d.Settled {
			// libvirt still holds its start job: a change would wait for it.
			return fmt.Errorf("not throttling VM %s yet: %w: libvirt is still starting it", d.Name, ErrUnavailable)
		}
		dom = d
		orig, err := a.Libvirt.SchedParams(ctx, dom)
		if err != nil {
			return a.libvirtErr(fmt.Sprintf("not throttling VM %s: reading its scheduler parameters", dom.Name), err)
		}
		if orig.GlobalQuota == nil || orig.GlobalPeriod == nil {
			return fmt.Errorf("not throttling VM %s: libvirt reports no global_quota/global_period (%s)", dom.Name, orig)
		}
		rec = LibvirtRecord{Cgroup: cgroupPath, Tenant: tenant, Domain: dom.Name, UUID: dom.UUID, ID: dom.ID,
			OriginalQuotaUS: *orig.GlobalQuota, OriginalPeriodUS: int64(*orig.GlobalPeriod), Since: time.Now().UTC()}
	}
	if has {
		if !a.Libvirt.Connected() {
			// A rewrite now would fail without telling whether it reached
			// the kernel; the throttle in force stays until libvirt is back.
			return fmt.Errorf("not changing VM %s's throttle: %w: libvirt is not reachable", dom.Name, ErrUnavailable)
		}
		if a.confirmed[cgroupPath] {
			rec.PreviousQuotaUS, rec.PreviousPeriodUS = rec.AppliedQuotaUS, rec.AppliedPeriodUS
			rec.Unconfirmed = nil
		} else {
			rec.noteUnconfirmed()
		}
	}
	rec.AppliedQuotaUS, rec.AppliedPeriodUS, rec.Path = usecs(q.Quota), q.Period.Microseconds(), PathLibvirt
	if err := a.State.PutRecord(LibvirtRecordKind, cgroupPath, rec); err != nil {
		return fmt.Errorf("not throttling VM %s: cannot record its original scheduler parameters: %w", dom.Name, err)
	}
	p := libvirt.SchedParams{GlobalPeriod: libvirt.Ptr(uint64(rec.AppliedPeriodUS)), GlobalQuota: libvirt.Ptr(rec.AppliedQuotaUS)}
	if err := a.Libvirt.SetSchedParams(ctx, dom, p); err != nil {
		switch {
		case errors.Is(err, libvirt.ErrDomainGone):
			a.forgetLocked(cgroupPath)
		case !has && !errors.Is(err, libvirt.ErrNotConnected):
			// Refused: nothing of ours is in force.
			a.forgetLocked(cgroupPath)
		default:
			// Not connected, or a rewrite refused: the record stays so
			// Restore or the next start undoes whichever value is in force.
			a.setConfirmedLocked(cgroupPath, false)
		}
		return a.libvirtErr("throttle VM "+dom.Name, err)
	}
	a.setConfirmedLocked(cgroupPath, true)
	return nil
}

func (a *LibvirtQuota) setConfirmedLocked(cgroupPath string, ok bool) {
	if a.confirmed == nil {
		a.confirmed = map[string]bool{}
	}
	a.confirmed[cgroupPath] = ok
}

// forgetLocked drops a VM's record: its throttle is lifted or gone.
func (a *LibvirtQuota) forgetLocked(cgroupPath string) error {
	delete(a.confirmed, cgroupPath)
	return a.State.ForgetRecord(LibvirtRecordKind, cgroupPath)
}

// libvirtErr maps the client's errors onto the actuator's.
func (a *LibvirtQuota) libvirtErr(what string, err error) error {
	switch {
	case errors.Is(err, libvirt.ErrDomainGone):
		return fmt.Errorf("%s: %w (%v)", what, ErrGone, err)
	case errors.Is(err, libvirt.ErrNotConnected):
		return fmt.Errorf("%s: %w: %v", what, ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// pruneNotOursLocked forgets the not-ours VM cgroups that are gone: their
// domains were destroyed, and a new one under the same name is logged anew.
func (a *LibvirtQuota) pruneNotOursLocked() {
	for cg := range a.notOurs {
		if _, err := cgroup.Open(a.Cgroups.Host, a.Cgroups.Layout, cg).CPUQuota(); errors.Is(err, fs.ErrNotExist) {
			delete(a.notOurs, cg)
		}
	}
}

// Intend saves the intents of Applies to come in one write (CPUQuota.Intend)
// for the tenants throttled through their cgroup files; a VM's goes through
// libvirt, and its Apply records it.
func (a *LibvirtQuota) Intend(intents []Intent) error {
	var files []Intent
	for _, in := range intents {
		if _, isVM := libvirt.ParseMachineCgroup(in.Cgroup); !isVM {
			files = append(files, in)
		}
	}
	return a.Cgroups.Intend(files)
}

// Flush saves the removals the cgroup path's Restore left unsaved
// (CPUQuota.Flush).
func (a *LibvirtQuota) Flush() error { return a.Cgroups.Flush() }

// Restore lifts a tenant's throttle the way it was put on.
func (a *LibvirtQuota) Restore(ctx context.Context, cgroupPath string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	rec, has := a.record(cgroupPath)
	if !has {
		if a.notOurs[cgroupPath] {
			a.pruneNotOursLocked()
		}
		return a.Cgroups.Restore(ctx, cgroupPath)
	}
	_, err := a.restoreLocked(ctx, rec)
	return err
}

// restoreLocked puts a VM's original parameters back: through libvirt, or
// through its cgroup files when libvirt cannot. It reports whether a
// throttle was lifted.
func (a *LibvirtQuota) restoreLocked(ctx context.Context, rec LibvirtRecord) (bool, error) {
	if rec.Path == PathCgroupFallback {
		return false, nil // lifted already; Resync tells libvirt
	}
	ctx, cancel := a.liftCtx(ctx)
	defer cancel()
	orig := libvirt.SchedParams{GlobalPeriod: libvirt.Ptr(uint64(rec.OriginalPeriodUS)), GlobalQuota: libvirt.Ptr(rec.OriginalQuotaUS)}
	err := a.Libvirt.SetSchedParams(ctx, a.domainOf(rec), orig)
	switch {
	case err == nil:
		return true, a.forgetLocked(rec.Cgroup)
	case errors.Is(err, libvirt.ErrDomainGone):
		return false, a.forgetLocked(rec.Cgroup)
	}
	return a.fallbackLocked(rec, err)
}

// fallbackLocked lifts a VM's throttle through its cgroup files (libvirt
// could not: why). Only files that still hold what crosstalk set are
// written: anything else was changed by someone since, and is theirs.
func (a *LibvirtQuota) fallbackLocked(rec LibvirtRecord, why error) (bool, error) {
	orig := fromUsecs(rec.OriginalQuotaUS, rec.OriginalPeriodUS)
	// Crosstalk's own: what it applied last, or before that if a kill came
	// between recording the last and writing it.
	ours := func(cur cgroup.Quota) bool {
		q, p := usecs(cur.Quota), cur.Period.Microseconds()
		return q == rec.AppliedQuotaUS && p == rec.AppliedPeriodUS ||
			rec.PreviousPeriodUS != 0 && q == rec.PreviousQuotaUS && p == rec.PreviousPeriodUS ||
			slices.Contains(rec.Unconfirmed, GlobalUS{q, p})
	}
	// libvirt sets global_* on the domain's cgroup; on cgroup v2 hosts it
	// may use the nested "libvirt" cgroup below it.
	lifted, found := 0, 0
	var errs []error
	for _, dir := range []string{rec.Cgroup, path.Join(rec.Cgroup, "libvirt")} {
		g := cgroup.Open(a.Cgroups.Host, a.Cgroups.Layout, dir)
		cur, err := g.CPUQuota()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		found++
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ours(cur) {
			continue
		}
		if err := g.SetCPUQuota(orig); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		lifted++
	}
	if found == 0 {
		// The domain's cgroup is gone: so is the domain, and its throttle.
		return false, a.forgetLocked(rec.Cgroup)
	}
	if len(errs) > 0 && lifted == 0 {
		return false, fmt.Errorf("restore VM %s: libvirt could not (%v) and neither could its cgroup files: %w", rec.Domain, why, errors.Join(errs...))
	}
	if lifted == 0 {
		a.log().Warn("VM throttle not found in its cgroup files (changed since by someone else?); leaving them", "domain", rec.Domain, "cgroup", rec.Cgroup, "libvirt_err", why)
		return false, a.forgetLocked(rec.Cgroup)
	}
	a.log().Error("LIBVIRT UNREACHABLE: lifted a VM's throttle by writing its cgroup files directly; libvirt's live definition still shows the throttle until crosstalk resyncs it when libvirt is back",
		"domain", rec.Domain, "cgroup", rec.Cgroup, "restored", orig.String(), "libvirt_err", why)
	rec.Path = PathCgroupFallback
	return true, a.State.PutRecord(LibvirtRecordKind, rec.Cgroup, rec)
}

// RestoreAll restores every tenant in the state file (a clean stop, or a
// start after kill -9): VMs the way their throttle was put on, the rest
// through CPUQuota. A VM whose parameters were changed by someone else
// since is left as it is.
func (a *LibvirtQuota) RestoreAll(ctx context.Context) (int, error) {
	n, err := a.Cgroups.RestoreAll(ctx)
	errs := []error{err}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, key := range a.State.RecordKeys(LibvirtRecordKind) {
		rec, ok := a.record(key)
		if !ok {
			a.forgetLocked(key)
			continue
		}
		if rec.Path == PathCgroupFallback {
			a.resyncLocked(ctx, rec)
			continue
		}
		if a.Libvirt.Connected() {
			cctx, cancel := a.liftCtx(ctx)
			cur, err := a.Libvirt.SchedParams(cctx, a.domainOf(rec))
			cancel()
			switch {
			case errors.Is(err, libvirt.ErrDomainGone):
				a.forgetLocked(key)
				continue
			case err == nil && cur.GlobalQuota != nil && cur.GlobalPeriod != nil &&
				(*cur.GlobalQuota != rec.AppliedQuotaUS || int64(*cur.GlobalPeriod) != rec.AppliedPeriodUS):
				a.log().Warn("VM scheduler parameters changed by someone else since crosstalk set them; leaving them", "domain", rec.Domain, "now", cur.String())
				a.forgetLocked(key)
				continue
			}
		}
		lifted, err := a.restoreLocked(ctx, rec)
		if err != nil {
			errs = append(errs, err)
		}
		if lifted {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// Resync tells libvirt the original parameters of every VM whose throttle
// was lifted through its cgroup files while libvirt was unreachable. The
// libvirt client runs it on every (re)connection.
func (a *LibvirtQuota) Resync(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, key := range a.State.RecordKeys(LibvirtRecordKind) {
		if rec, ok := a.record(key); ok && rec.Path == PathCgroupFallback {
			a.resyncLocked(ctx, rec)
		}
	}
}

func (a *LibvirtQuota) resyncLocked(ctx context.Context, rec LibvirtRecord) {
	if !a.Libvirt.Connected() {
		return
	}
	ctx, cancel := a.liftCtx(ctx)
	defer cancel()
	orig := libvirt.SchedParams{GlobalPeriod: libvirt.Ptr(uint64(rec.OriginalPeriodUS)), GlobalQuota: libvirt.Ptr(rec.OriginalQuotaUS)}
	err := a.Libvirt.SetSchedParams(ctx, a.domainOf(rec), orig)
	switch {
	case errors.Is(err, libvirt.ErrNotConnected):
		return // next time
	case err == nil:
		a.log().Info("libvirt reachable again: its live definition of the VM agrees with the restored quota", "domain", rec.Domain, "restored", orig.String())
	case errors.Is(err, libvirt.ErrDomainGone):
	default:
		a.log().Warn("libvirt refused the VM's original scheduler parameters; its cgroup files hold them already", "domain", rec.Domain, "err", err)
	}
	a.forgetLocked(rec.Cgroup)
}
