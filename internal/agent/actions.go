package agent

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// probeHolds are the probe policy's CPU-quota claims, held by the
// arbiter: what the throttles, the prover and the survey write.
type probeHolds struct {
	arb *arbiter
	rec *recorder
	now func() time.Time
}

// apply states the probe policy's CPU-quota claim on a tenant (a proof's
// cap or a proven polluter's duty); the tenant gets the tightest claim of
// all policies. In dry-run nothing is written.
func (h probeHolds) apply(ctx context.Context, t sense.Tenant, q cgroup.Quota, reason string, now time.Time) error {
	return h.arb.hold(ctx, t, api.PolicyProbe, claim{lever: judge.LeverCPUQuota, quota: q, reason: reason, since: now})
}

// intend saves the intents of the caps about to be applied to several
// tenants in one state write, where the quota actuator can (act.Intent).
func (h probeHolds) intend(ts []sense.Tenant, qs []cgroup.Quota) {
	in, ok := h.arb.quota.(quotaIntender)
	if !ok || len(ts) < 2 {
		return
	}
	intents := make([]act.Intent, len(ts))
	for i, t := range ts {
		intents[i] = act.Intent{Cgroup: t.Cgroup, Tenant: t.Name, Quota: qs[i]}
	}
	if err := in.Intend(intents); err != nil {
		// Each Apply saves its own intent then, and reports its error.
		h.arb.log.Debug("saving the intents of several caps at once", "err", err)
	}
}

// quotaIntender saves the intents of several Applies at once
// (act.CPUQuota.Intend).
type quotaIntender interface {
	Intend([]act.Intent) error
}

// held reports whether policy holds tenant id (any policy when
// policy is "").
func (h probeHolds) held(id string, policy api.Policy) bool { return h.arb.held(id, policy) }

// forgetHolds drops a vanished tenant's holds, restoring the CPUs it
// was held on.
func (h probeHolds) forgetHolds(ctx context.Context, id string) { h.arb.forgetHolds(ctx, id) }

// release drops the probe policy's claim on a tenant: it gets its
// original quota back unless another policy still holds it.
func (h probeHolds) release(ctx context.Context, t sense.Tenant, why string) {
	h.dropProbeHold(ctx, t)
	h.rec.record(h.now(), t, api.KindRelease, 0, 1, why)
}

// dropProbeHold drops the probe policy's claim on a tenant (a proof's
// cap, a survey's, a polluter's duty); a failed restore is logged and
// journalled.
func (h probeHolds) dropProbeHold(ctx context.Context, t sense.Tenant) {
	if err := h.arb.releaseHold(ctx, t.ID, api.PolicyProbe); err != nil {
		h.arb.releaseFailed(t, api.PolicyProbe, api.LeverCPUQuota, err)
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
		a.arb.forgetHolds(ctx, t.ID)
		a.log.Info("tenant vanished while acting on it", "tenant", t.ID)
		return
	}
	if errors.Is(err, act.ErrUnavailable) {
		a.unavailable(t, err)
		return
	}
	a.log.Error("cgroup write failed", "tenant", t.ID, "err", err)
	a.rec.journal(act.Event{Kind: "error", Tenant: t.ID, Name: t.Name, Detail: err.Error()})
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EROFS) {
		a.ledger.backOff(t.ID, a.d.Now())
	}
}

// journal writes an event to the journal (recorder.journal), for the
// policies' detections and the agent's own events.
func (a *Agent) journal(e act.Event) { a.rec.journal(e) }

// unavailable handles an actuator that cannot act now (libvirtd
// restarting, a domain libvirt is still starting): the tenant is left alone
// for a few intervals, for every signal, and the journal says why.
func (a *Agent) unavailable(t sense.Tenant, err error) {
	a.log.Warn("cannot act on tenant now; retrying shortly", "tenant", t.Name, "err", err)
	a.rec.journal(act.Event{Kind: "error", Tenant: t.ID, Name: t.Name, Detail: err.Error()})
	until := a.d.Now().Add(max(time.Second, 4*a.cfg.Interval))
	for _, k := range []string{backoffKey(signalProbe, t.ID), backoffKey(signalWait, t.ID), backoffKey(signalCPI, t.ID)} {
		a.ledger.holdOff(k, a.d.Now(), until)
	}
}
