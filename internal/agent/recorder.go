package agent

import (
	"context"
	"log/slog"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// recorder keeps the agent's record of what it did: the last actions and
// their totals for the state, the journal, the log and the hook, and when
// a throttle last changed (a new proof waits for the probes to settle).
type recorder struct {
	dryRun   bool
	journalW *act.Journal
	onAction func(api.ActionRecord)
	now      func() time.Time
	log      *slog.Logger

	actions []api.ActionRecord // the last 50
	totals  map[string]uint64  // by kind
	// lastChange is when a throttle was last applied or lifted: caches and
	// probes need a couple of intervals to settle before the next proof.
	lastChange time.Time
}

func newRecorder(cfg Config, d Deps) *recorder {
	return &recorder{dryRun: cfg.DryRun, journalW: d.Journal, onAction: d.OnAction, now: d.Now, log: d.Log, totals: map[string]uint64{}}
}

// record notes an action of the probe policy (through CPU quota).
func (r *recorder) record(now time.Time, t sense.Tenant, kind api.ActionKind, quota, duty float64, reason string) {
	r.recordAction(api.ActionRecord{Time: now, Tenant: t.ID, Name: t.Name, Kind: kind, Policy: api.PolicyProbe, Lever: api.LeverCPUQuota, Quota: quota, Duty: duty, Reason: reason})
}

// recordSlot notes a proof's cap or release for one trial's slot: on
// the timeline and in the journal like any action, at debug level in the log
// (a proof switches a dozen times).
func (r *recorder) recordSlot(now time.Time, t sense.Tenant, kind api.ActionKind, quota float64, reason string) {
	r.recordAction(api.ActionRecord{Time: now, Tenant: t.ID, Name: t.Name, Kind: kind, Policy: api.PolicyProbe, Lever: api.LeverCPUQuota, Quota: quota, Duty: 1, Reason: reason})
}

// recordAction notes an action for the state, the journal and the hook.
func (r *recorder) recordAction(rec api.ActionRecord) {
	// A throttle set or lifted changes what the probes read: the next
	// proof waits for them to settle. Permits are left out: a tenant at
	// its booking flips between OVER and UNDER every few intervals by
	// design, and would otherwise keep every proof waiting; so are a
	// proof's own caps and releases (a suspect capped for tens of
	// milliseconds at a time leaves nothing to settle).
	if rec.Kind != api.KindProof && rec.Kind != api.KindProofFree && rec.Policy != api.PolicyPermits {
		r.lastChange = rec.Time
	}
	r.noteAction(rec)
}

// noteAction records an action for the state, the journal, the log
// and the hook.
func (r *recorder) noteAction(rec api.ActionRecord) {
	rec.DryRun = r.dryRun
	slot := rec.Kind == api.KindProof || rec.Kind == api.KindProofFree
	r.actions = append(r.actions, rec)
	if len(r.actions) > 50 {
		r.actions = r.actions[len(r.actions)-50:]
	}
	r.totals[string(rec.Kind)]++
	q := rec.Quota
	r.journal(act.Event{Time: rec.Time, Kind: string(rec.Kind), Policy: string(rec.Policy), Lever: string(rec.Lever), Tenant: rec.Tenant, Name: rec.Name, Detail: rec.Reason, Quota: &q, DryRun: rec.DryRun})
	level := slog.LevelInfo
	if slot && rec.Quota > 0 || rec.Kind == api.KindProofFree {
		level = slog.LevelDebug
	}
	r.log.Log(context.Background(), level, "action", "kind", rec.Kind, "by", rec.Policy, "lever", rec.Lever, "tenant", rec.Name, "quota_cpus", rec.Quota, "duty", rec.Duty, "reason", rec.Reason)
	if r.onAction != nil {
		r.onAction(rec)
	}
}

// journal writes an event, stamped now if it has no time; a failed
// write is logged, never fatal.
func (r *recorder) journal(e act.Event) {
	if e.Time.IsZero() {
		e.Time = r.now().UTC()
	}
	if err := r.journalW.Write(e); err != nil {
		r.log.Warn("journal", "err", err)
	}
}
