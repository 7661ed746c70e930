package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// decision is one policy's claim on a lever for a tenant, or its release
// of that claim. Policies only say what they want; the arbiter writes it.
type decision struct {
	// policy is whose claim it is: a policy, or one socket of the power
	// budget (api.PowerSocketPolicy), which claims per socket.
	policy api.Policy
	tenant string
	// lever is a lever of the holds (cpu_quota, clock_modulation, cpufreq)
	// or a resctrl class (cat, mba); "" when no lever can act on the
	// tenant (the reason says why).
	lever   api.Lever
	release bool
	// step of steps on cpus, for the holds' levers (step == steps is full
	// speed: a release). cpuCap, when above 0, is a CPU-quota claim
	// outright, in CPUs.
	step, steps int
	cpus        cpuset.Set
	cpuCap      float64
	// domain is the L3 domain of a resctrl class; ways and slot the CAT
	// allocation, fraction what the class leaves the tenant (of the ways,
	// of the bandwidth), refBytesPerSec the bandwidth MBA's fraction is of.
	domain         int
	ways, slot     int
	fraction       float64
	refBytesPerSec float64
	reason         string
}

// classWriter writes tenants' resctrl classes (act.ResctrlClasses).
type classWriter interface {
	SetCacheWays(t act.ClassTenant, domain, ways, slot int) error
	ReleaseCache(tenantID string, domain int) error
	SetBandwidth(t act.ClassTenant, domain int, fraction, referenceBytesPerSec float64) error
	ReleaseBandwidth(tenantID string, domain int) error
	SyncThreads(t act.ClassTenant) error
	Classed() []string
	RestoreAll() (restored int, err error)
}

// classLever reports whether a lever is a resctrl class rather than a hold.
func classLever(l api.Lever) bool { return l == api.LeverCAT || l == api.LeverMBA }

// actionSink is where the arbiter records actions (state, journal, log,
// hook) and journals what failed: the agent's recorder.
type actionSink interface {
	recordAction(api.ActionRecord)
	journal(act.Event)
}

// writeErrHandler handles a failed cgroup write (a vanished tenant, a
// backoff): the agent's, which knows the throttles and the ledger.
type writeErrHandler interface {
	handleWriteErr(ctx context.Context, t sense.Tenant, err error)
}

// arbiter applies every policy's claims and releases, the probe policy's
// included: it owns the holds (the tightest claim per tenant and lever),
// the resctrl classes, every actuator that writes them, and dry run. It
// records the hardware policies' actions and journals what failed; the
// probe policy records its own (they speak of proofs and duty steps).
type arbiter struct {
	log       *slog.Logger
	sink      actionSink
	writeErrs writeErrHandler
	// period and steps are the CPU-quota grid (Sparsify.Period, .Steps).
	period time.Duration
	steps  int

	// The actuators: in dry run, ones that write nothing (dryrun.go).
	quota   QuotaActuator
	levers  map[judge.Lever]CPULever
	classes classWriter // nil without resctrl

	holds map[string]*tenantHolds // by tenant
	// classed are the tenants with a resctrl class, per policy: the L3
	// domains they are restricted in, with the fraction (of the ways, of
	// the bandwidth) left to them there.
	classed map[api.Policy]map[string]map[int]float64
	warn    *tenantWarnings
}

func newArbiter(cfg Config, d Deps, log *slog.Logger, sink actionSink, writeErrs writeErrHandler) *arbiter {
	sp := cfg.Sparsify()
	ar := &arbiter{log: log, sink: sink, writeErrs: writeErrs, period: sp.Period, steps: sp.Steps, quota: d.Quota,
		levers: map[judge.Lever]CPULever{}, holds: map[string]*tenantHolds{},
		classed: map[api.Policy]map[string]map[int]float64{}, warn: newTenantWarnings(log)}
	if hw := d.Hardware; hw != nil {
		for l, cl := range hw.levers {
			ar.levers[l] = cl
		}
		if hw.classes != nil {
			ar.classes = hw.classes
		}
	}
	if cfg.DryRun {
		// The one place dry run is checked: the holds and classes still
		// say what would be done, and the records say it was not.
		ar.quota, ar.classes = dryQuota{}, dryClasses{}
		for l, cl := range ar.levers {
			ar.levers[l] = dryLever{steps: cl.Steps()}
		}
	}
	return ar
}

// apply applies the decisions in order, each on the tenant of o with its
// ID (or one known by its ID alone: a vanished tenant's release).
func (ar *arbiter) apply(ctx context.Context, o *hwObservation, ds []decision) {
	for _, d := range ds {
		t, present := o.tenant(d.tenant)
		switch {
		case classLever(d.lever):
			ar.applyClass(o.now, t, present, d)
		case !present:
			// Its cgroup is gone: only the claim is left to drop, without
			// a record; what the release must still undo (the clock of
			// the CPUs it ran on) may fail like any release.
			if err := ar.releaseHold(ctx, d.tenant, d.policy); err != nil && !errors.Is(err, act.ErrGone) {
				ar.releaseFailed(t, d.policy, d.lever, err)
			}
		default:
			ar.applyHold(ctx, o.now, t, d)
		}
	}
}

// applyHold states or drops a policy's claim in the holds and records it.
func (ar *arbiter) applyHold(ctx context.Context, now time.Time, t sense.Tenant, d decision) {
	held := ar.held(t.ID, d.policy)
	oldDuty, oldLever := 1.0, judge.Lever("")
	if h := ar.holds[t.ID]; h != nil {
		if c, ok := h.claims[d.policy]; ok {
			oldDuty, oldLever = claimDuty(c, t), c.lever
		}
	}
	if d.release || (d.steps > 0 && d.step >= d.steps) {
		if !held {
			return
		}
		ar.releaseHoldRecorded(ctx, now, t, d.policy, d.lever, d.reason)
		return
	}
	if d.lever == "" {
		ar.warn.once(t.ID, "nolever", "no lever can throttle "+t.ID, errors.New(d.reason))
		return
	}
	c := ar.claimFor(t, d, now)
	if err := ar.hold(ctx, t, d.policy, c); err != nil {
		ar.writeErrs.handleWriteErr(ctx, t, err)
		return
	}
	duty := claimDuty(c, t)
	if held && duty == oldDuty && c.lever == oldLever {
		// Nothing changed (a power decision on one socket while another
		// sets the tenant's quota): no action to record, whose reason
		// would speak of a change that did not happen.
		ar.log.Debug("claim unchanged", "policy", d.policy, "tenant", t.ID, "duty", duty, "reason", d.reason)
		return
	}
	ar.record(now, t, d.policy, actionKind(held, oldDuty, duty), api.Lever(c.lever), duty, d.reason)
}

// releaseHoldRecorded drops a policy's claim on t and records the release;
// a release that could not be written is logged and journalled.
func (ar *arbiter) releaseHoldRecorded(ctx context.Context, now time.Time, t sense.Tenant, policy api.Policy, lever api.Lever, reason string) {
	if err := ar.releaseHold(ctx, t.ID, policy); err != nil {
		ar.releaseFailed(t, policy, lever, err)
	}
	ar.record(now, t, policy, api.KindRelease, lever, 1, reason)
}

// releaseFailed logs and journals a release that could not be written, the
// same way for every lever.
func (ar *arbiter) releaseFailed(t sense.Tenant, policy api.Policy, lever api.Lever, err error) {
	ar.log.Error("release", "policy", policy, "lever", lever, "tenant", t.ID, "err", err)
	ar.sink.journal(act.Event{Kind: "error", Policy: string(policy), Lever: string(lever), Tenant: t.ID, Name: t.Name, Detail: "release failed: " + err.Error()})
}

// claimFor turns a decision's step on a lever into the claim the holds
// enforce.
func (ar *arbiter) claimFor(t sense.Tenant, d decision, now time.Time) claim {
	lever := judge.Lever(d.lever)
	c := claim{lever: lever, step: d.step, steps: d.steps, cpus: d.cpus, reason: d.reason, since: now}
	if lever != judge.LeverCPUQuota {
		return c
	}
	ncpus := max(1, t.CPUs.Len())
	switch {
	case d.cpuCap > 0:
		c.quota = cgroup.Quota{Quota: max(cgroup.MinQuota, time.Duration(d.cpuCap*float64(ar.period))), Period: ar.period}
	case d.steps > 0 && d.steps != ar.steps:
		c.quota = cgroup.Quota{Quota: max(cgroup.MinQuota, time.Duration(float64(ar.period)*float64(ncpus)*float64(d.step)/float64(d.steps))), Period: ar.period}
	default:
		c.quota = act.Sparsify{Period: ar.period, Steps: ar.steps}.Quota(d.step, t.CPUs.Len())
	}
	return c
}

func actionKind(held bool, oldDuty, newDuty float64) api.ActionKind {
	switch {
	case !held:
		return api.KindThrottle
	case newDuty < oldDuty:
		return api.KindTighten
	case newDuty > oldDuty:
		return api.KindRelax
	}
	return api.KindThrottle
}

func claimDuty(c claim, t sense.Tenant) float64 {
	if c.lever == judge.LeverCPUQuota {
		return min(1, c.quota.CPUs()/float64(max(1, t.CPUs.Len())))
	}
	return c.duty()
}

// applyClass sets or releases a tenant's resctrl class in one L3 domain
// and records it. A vanished tenant's class is still released (and the
// release recorded): the class outlives its cgroup.
func (ar *arbiter) applyClass(now time.Time, t sense.Tenant, present bool, d decision) {
	if d.release {
		if ar.classes != nil {
			var err error
			if d.lever == api.LeverMBA {
				err = ar.classes.ReleaseBandwidth(d.tenant, d.domain)
			} else {
				err = ar.classes.ReleaseCache(d.tenant, d.domain)
			}
			if err != nil {
				ar.releaseFailed(t, d.policy, d.lever, err)
			}
		}
		ar.unclass(d.policy, d.tenant, d.domain)
		ar.record(now, t, d.policy, api.KindRelease, d.lever, 1, d.reason)
		return
	}
	if !present {
		return
	}
	if ar.classes == nil {
		ar.warn.once(t.ID, "noclasses", "no resctrl classes for "+string(d.lever), errors.New(d.reason))
		return
	}
	ct := act.ClassTenant{ID: t.ID, Name: t.Name, Threads: t.Threads}
	var err error
	if d.lever == api.LeverMBA {
		err = ar.classes.SetBandwidth(ct, d.domain, d.fraction, d.refBytesPerSec)
	} else {
		err = ar.classes.SetCacheWays(ct, d.domain, d.ways, d.slot)
	}
	var full *act.ClassExhaustedError
	switch {
	case errors.As(err, &full):
		// No class of service left: the lever is unavailable for this
		// tenant until another class is released. Say so; do not
		// throttle it some other way on cache evidence alone.
		ar.warn.once(t.ID, "closid", "no resctrl class for "+t.ID, err)
		ar.sink.journal(act.Event{Kind: "error", Policy: string(d.policy), Lever: string(d.lever), Tenant: t.ID, Name: t.Name, Detail: err.Error()})
		return
	case err != nil:
		ar.log.Error("resctrl class", "policy", d.policy, "lever", d.lever, "tenant", t.ID, "err", err)
		ar.sink.journal(act.Event{Kind: "error", Policy: string(d.policy), Lever: string(d.lever), Tenant: t.ID, Name: t.Name, Detail: err.Error()})
		return
	}
	old, classed := ar.classed[d.policy][d.tenant][d.domain]
	kind := actionKind(classed, old, d.fraction)
	if d.lever == api.LeverCAT {
		// CAT isolates; a way given back as fairness returns relaxes.
		kind = api.KindIsolate
		if classed && d.fraction > old {
			kind = api.KindRelax
		}
	}
	ar.class(d.policy, d.tenant, d.domain, d.fraction)
	ar.record(now, t, d.policy, kind, d.lever, d.fraction, d.reason)
}

// syncClasses moves a classed tenant's new threads into its class.
func (ar *arbiter) syncClasses(o *hwObservation) {
	if ar.classes == nil {
		return
	}
	for _, id := range ar.classes.Classed() {
		s, ok := o.byID[id]
		if !ok {
			continue
		}
		if err := ar.classes.SyncThreads(act.ClassTenant{ID: id, Name: s.t.Name, Threads: s.t.Threads}); err != nil {
			ar.warn.once(id, "classsync", "resctrl class threads of "+id, err)
		}
	}
}

func (ar *arbiter) class(policy api.Policy, tenant string, domain int, fraction float64) {
	m := ar.classed[policy]
	if m == nil {
		m = map[string]map[int]float64{}
		ar.classed[policy] = m
	}
	if m[tenant] == nil {
		m[tenant] = map[int]float64{}
	}
	m[tenant][domain] = fraction
}

func (ar *arbiter) unclass(policy api.Policy, tenant string, domain int) {
	m := ar.classed[policy]
	delete(m[tenant], domain)
	if len(m[tenant]) == 0 {
		delete(m, tenant)
	}
}

// classedDomains lists the L3 domains where a tenant is restricted by a
// resctrl class.
func (ar *arbiter) classedDomains() []int {
	var out []int
	for _, m := range ar.classed {
		for _, ds := range m {
			for d := range ds {
				if !slices.Contains(out, d) {
					out = append(out, d)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// classLeverOf is the lever of a resctrl policy's classes.
func classLeverOf(p api.Policy) api.Lever {
	if p == api.PolicyMBA {
		return api.LeverMBA
	}
	return api.LeverCAT
}

// tenantClasses describes a tenant's resctrl classes for the state: the
// lowest fraction left to it over its restricted domains.
func (ar *arbiter) tenantClasses(id string) []api.HoldState {
	var out []api.HoldState
	for _, p := range []api.Policy{api.PolicyLLC, api.PolicyMBA} {
		ds := ar.classed[p][id]
		if len(ds) == 0 {
			continue
		}
		doms := make([]int, 0, len(ds))
		frac := 1.0
		for d, f := range ds {
			doms = append(doms, d)
			frac = min(frac, f)
		}
		slices.Sort(doms)
		out = append(out, api.HoldState{Policy: p, Lever: classLeverOf(p), Duty: frac, Reason: fmt.Sprintf("restricted in L3 domain(s) %v", doms)})
	}
	return out
}

// record notes an action of a policy, with the CPU quota the tenant is
// held to now.
func (ar *arbiter) record(now time.Time, t sense.Tenant, policy api.Policy, kind api.ActionKind, lever api.Lever, duty float64, reason string) {
	var quota float64
	if h := ar.holds[t.ID]; h != nil && h.quota.Period > 0 {
		quota = h.quota.CPUs()
	}
	ar.sink.recordAction(api.ActionRecord{Time: now, Tenant: t.ID, Name: t.Name, Kind: kind, Policy: policy, Lever: lever, Quota: quota, Duty: duty, Reason: reason})
}

// prune forgets what the arbiter keeps per tenant for the tenants no longer
// present: their holds (restoring the CPUs they were held on), classes
// (released) and warnings. Call it after the policies' decisions, which
// release a vanished tenant's claims with their own reasons first.
func (ar *arbiter) prune(ctx context.Context, now time.Time, present func(id string) bool) {
	for id := range ar.holds {
		if !present(id) {
			ar.forgetHolds(ctx, id)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(ar.classed)) {
		for _, id := range slices.Sorted(maps.Keys(ar.classed[p])) {
			if present(id) {
				continue
			}
			for _, dom := range slices.Sorted(maps.Keys(ar.classed[p][id])) {
				ar.applyClass(now, sense.Tenant{ID: id, Name: id}, false, decision{policy: p, tenant: id, lever: classLeverOf(p), release: true, domain: dom, reason: "tenant vanished"})
			}
		}
	}
	ar.warn.prune(present)
}

// stop releases every hold and resctrl class, recording each release.
func (ar *arbiter) stop(ctx context.Context, now time.Time) {
	for _, id := range slices.Sorted(maps.Keys(ar.holds)) {
		h := ar.holds[id]
		claims := h.claims
		ar.forgetHolds(ctx, id)
		for _, p := range slices.Sorted(maps.Keys(claims)) {
			ar.record(now, h.tenant, p, api.KindRelease, api.Lever(claims[p].lever), 1, "agent stopping")
		}
	}
	if ar.classes != nil {
		if n, err := ar.classes.RestoreAll(); err != nil || n > 0 {
			ar.log.Info("released resctrl classes", "released", n, "err", err)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(ar.classed)) {
		for _, id := range slices.Sorted(maps.Keys(ar.classed[p])) {
			ar.record(now, sense.Tenant{ID: id, Name: id}, p, api.KindRelease, classLeverOf(p), 1, "agent stopping")
		}
	}
	clear(ar.classed)
}
