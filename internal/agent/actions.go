package agent

import (
	"context"
	"errors"
	"log/slog"
	"syscall"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// apply states the probe policy's CPU-quota claim on a tenant (a proof's
// cap or a proven polluter's duty); the tenant gets the tightest claim of
// all policies. In dry-run nothing is written.
func (a *Agent) apply(ctx context.Context, t sense.Tenant, q cgroup.Quota, reason string, now time.Time) error {
	return a.arb.hold(ctx, t, api.PolicyProbe, claim{lever: judge.LeverCPUQuota, quota: q, reason: reason, since: now})
}

// held reports whether policy holds tenant id (any policy when
// policy is "").
func (a *Agent) held(id string, policy api.Policy) bool { return a.arb.held(id, policy) }

// forgetHolds drops a vanished tenant's holds, restoring the CPUs it
// was held on.
func (a *Agent) forgetHolds(ctx context.Context, id string) { a.arb.forgetHolds(ctx, id) }

// release drops the probe policy's claim on a tenant: it gets its
// original quota back unless another policy still holds it.
func (a *Agent) release(ctx context.Context, t sense.Tenant, why string) {
	a.dropProbeHold(ctx, t)
	a.record(a.d.Now(), t, api.KindRelease, 0, 1, why)
}

// dropProbeHold drops the probe policy's claim on a tenant (a proof's
// cap, a survey's, a polluter's duty); a failed restore is logged and
// journalled.
func (a *Agent) dropProbeHold(ctx context.Context, t sense.Tenant) {
	if err := a.arb.releaseHold(ctx, t.ID, api.PolicyProbe); err != nil {
		a.arb.releaseFailed(t, api.PolicyProbe, api.LeverCPUQuota, err)
	}
}

// hardware has the hardware policies judge this interval's
// observation (nil: none runs) and the arbiter apply their decisions.
// When discovery succeeded, it then forgets what is kept per tenant for
// the tenants it no longer found: holds, resctrl classes, warnings and
// backoffs. (Not on a failed discovery: every tenant would look gone.)
func (a *Agent) hardware(ctx context.Context, now time.Time, o *hwObservation, tenants []sense.Tenant, discovered bool) {
	if a.d.Hardware != nil && o != nil {
		a.arb.apply(ctx, o, a.d.Hardware.decide(o))
		if o.resctrlRead {
			a.arb.syncClasses(o)
		}
	}
	if !discovered {
		return
	}
	known := make(map[string]bool, len(tenants))
	for _, t := range tenants {
		known[t.ID] = true
	}
	present := func(id string) bool { return known[id] }
	a.arb.prune(ctx, now, present)
	if a.d.Hardware != nil {
		a.d.Hardware.prune(present)
	}
	a.ledger.prune(present)
}

// handleWriteErr deals with a failed cgroup write: a vanished tenant is
// forgotten; anything else is logged and journalled, and the tenant left
// alone until the next decision.
func (a *Agent) handleWriteErr(ctx context.Context, t sense.Tenant, err error) {
	if errors.Is(err, act.ErrGone) {
		delete(a.throttles.throttled, t.ID)
		a.forgetHolds(ctx, t.ID)
		a.log.Info("tenant vanished while acting on it", "tenant", t.ID)
		return
	}
	if errors.Is(err, act.ErrUnavailable) {
		a.unavailable(t, err)
		return
	}
	a.log.Error("cgroup write failed", "tenant", t.ID, "err", err)
	a.journal(act.Event{Kind: "error", Tenant: t.ID, Name: t.Name, Detail: err.Error()})
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EROFS) {
		a.ledger.backOff(t.ID, a.d.Now())
	}
}

// record notes an action of the probe policy (through CPU quota).
func (a *Agent) record(now time.Time, t sense.Tenant, kind api.ActionKind, quota, duty float64, reason string) {
	a.recordAction(api.ActionRecord{Time: now, Tenant: t.ID, Name: t.Name, Kind: kind, Policy: api.PolicyProbe, Lever: api.LeverCPUQuota, Quota: quota, Duty: duty, Reason: reason})
}

// recordSlot notes a proof's cap or release for one trial's slot: on
// the timeline and in the journal like any action, at debug level in the log
// (a proof switches a dozen times).
func (a *Agent) recordSlot(now time.Time, t sense.Tenant, kind api.ActionKind, quota float64, reason string) {
	a.recordAction(api.ActionRecord{Time: now, Tenant: t.ID, Name: t.Name, Kind: kind, Policy: api.PolicyProbe, Lever: api.LeverCPUQuota, Quota: quota, Duty: 1, Reason: reason})
}

// recordAction notes an action for the state, the journal and the hook.
func (a *Agent) recordAction(r api.ActionRecord) {
	// A throttle set or lifted changes what the probes read: the next
	// proof waits for them to settle. Permits are left out: a tenant at
	// its booking flips between OVER and UNDER every few intervals by
	// design, and would otherwise keep every proof waiting; so are a
	// proof's own caps and releases (a suspect capped for tens of
	// milliseconds at a time leaves nothing to settle).
	if r.Kind != api.KindProof && r.Kind != api.KindProofFree && r.Policy != api.PolicyPermits {
		a.lastChange = r.Time
	}
	a.noteAction(r)
}

// noteAction records an action for the state, the journal, the log
// and the hook.
func (a *Agent) noteAction(r api.ActionRecord) {
	r.DryRun = a.cfg.DryRun
	slot := r.Kind == api.KindProof || r.Kind == api.KindProofFree
	a.actions = append(a.actions, r)
	if len(a.actions) > 50 {
		a.actions = a.actions[len(a.actions)-50:]
	}
	a.totals[string(r.Kind)]++
	q := r.Quota
	a.journal(act.Event{Time: r.Time, Kind: string(r.Kind), Policy: string(r.Policy), Lever: string(r.Lever), Tenant: r.Tenant, Name: r.Name, Detail: r.Reason, Quota: &q, DryRun: r.DryRun})
	level := slog.LevelInfo
	if slot && r.Quota > 0 || r.Kind == api.KindProofFree {
		level = slog.LevelDebug
	}
	a.log.Log(context.Background(), level, "action", "kind", r.Kind, "by", r.Policy, "lever", r.Lever, "tenant", r.Name, "quota_cpus", r.Quota, "duty", r.Duty, "reason", r.Reason)
	if a.d.OnAction != nil {
		a.d.OnAction(r)
	}
}

func (a *Agent) journal(e act.Event) {
	if e.Time.IsZero() {
		e.Time = a.d.Now().UTC()
	}
	if err := a.d.Journal.Write(e); err != nil {
		a.log.Warn("journal", "err", err)
	}
}

// unavailable handles an actuator that cannot act now (libvirtd
// restarting, a domain libvirt is still starting): the tenant is left alone
// for a few intervals, for every signal, and the journal says why.
func (a *Agent) unavailable(t sense.Tenant, err error) {
	a.log.Warn("cannot act on tenant now; retrying shortly", "tenant", t.Name, "err", err)
	a.journal(act.Event{Kind: "error", Tenant: t.ID, Name: t.Name, Detail: err.Error()})
	until := a.d.Now().Add(max(time.Second, 4*a.cfg.Interval))
	for _, k := range []string{backoffKey(signalProbe, t.ID), backoffKey(signalWait, t.ID)} {
		a.ledger.holdOff(k, until)
	}
}
