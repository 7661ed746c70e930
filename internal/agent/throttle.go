package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

type throttled struct {
	tenant sense.Tenant
	thr    *judge.DutyThrottle
	signal string // what convicted it: signalProbe or signalWait
	// kind is the probe kind its proof read (signalProbe): its duty
	// controller answers to that kind alone. Another kind's reading says
	// nothing of what holding it down did (the LLC walk reads what the
	// physical host's other tenants do to the cache as well), and read
	// as the contention it would have it released as useless.
	kind   string
	reason string // the conviction, for a re-throttle on its record
	since  time.Time
	// looked is its CPU use at the watch's last look between intervals,
	// and idleLooks how many looks in a row found it idle (see
	// releaseStopped).
	looked    *sense.TenantStats
	idleLooks int
	// returns is how many times it came back after a release because it
	// stopped, absence the longest it stayed away; lingerUntil, when set,
	// is how long a stop of a tenant that came back lingerReturns times is
	// held before it is released (see stopped).
	returns     int
	absence     time.Duration
	lingerUntil time.Time
}

// throttles are the tenants the probe policy and CPU wait convicted and
// hold down on a duty cycle, each under its duty controller, and the
// polluters released because they stopped, whose conviction stands a
// while (convicts).
type throttles struct {
	cfg  Config
	sp   act.Sparsify         // the duty grid the CPU quota is written on
	duty judge.DutyController // the duty controller of the throttled tenants
	// cont and wait are the judges a throttle answers to (the probes',
	// CPU wait's), domain each probe domain's CPUs.
	cont   *judge.Contention
	wait   *cpuWaitPolicy
	cpi    *cpiPolicy
	domain map[int]cpuset.Set
	ledger *proofLedger
	prover *prover
	// holds, rec and writeErrs are what a throttle does to its tenant:
	// its CPU-quota claim, its record, a failed write's handling.
	holds     quotaHolds
	rec       probeRecords
	writeErrs writeErrHandler

	throttled map[string]*throttled
	// convicts are polluters released because they stopped, on record.
	convicts map[string]convict
}

// quotaHolds sets and lifts the probe policy's CPU-quota claims, which
// the arbiter holds (probeHolds): the one way the throttles and the
// prover write to a tenant.
type quotaHolds interface {
	apply(ctx context.Context, t sense.Tenant, q cgroup.Quota, reason string, now time.Time) error
	// dropProbeHold lifts a claim unrecorded (a proof's cap, a survey's);
	// release lifts it and records the release.
	dropProbeHold(ctx context.Context, t sense.Tenant)
	release(ctx context.Context, t sense.Tenant, why string)
	forgetHolds(ctx context.Context, id string)
	held(id string, policy api.Policy) bool
}

// probeRecords records the probe policy's steps: a throttle's, and a
// proof's slots (the recorder).
type probeRecords interface {
	record(now time.Time, t sense.Tenant, kind api.ActionKind, quota, duty float64, reason string)
	recordSlot(now time.Time, t sense.Tenant, kind api.ActionKind, quota float64, reason string)
}

func newThrottles(cfg Config, cont *judge.Contention, wait *cpuWaitPolicy, cpi *cpiPolicy, domain map[int]cpuset.Set, ledger *proofLedger, prover *prover, holds quotaHolds, rec probeRecords, writeErrs writeErrHandler) *throttles {
	return &throttles{
		cfg: cfg, sp: cfg.Sparsify(), duty: cfg.DutyController(), cont: cont, wait: wait, cpi: cpi, domain: domain, ledger: ledger, prover: prover, holds: holds, rec: rec, writeErrs: writeErrs,
		throttled: map[string]*throttled{}, convicts: map[string]convict{},
	}
}

// reconfigure takes what of cfg may change while the agent runs.
func (th *throttles) reconfigure(cfg Config) {
	th.cfg = cfg
	th.sp = cfg.Sparsify()
	th.duty = cfg.DutyController()
}

// domainsOf lists the probe domains a tenant's CPUs touch.
func (th *throttles) domainsOf(cpus cpuset.Set) []int { return domainsIn(th.domain, cpus) }

// idleGrace is how long after a throttle begins its tenant is not taken
// for idle: the first windows span the proof's cap (1 ms a proofPeriod,
// which may leave it waiting out the period) and the switch to the duty
// cycle, and read almost no CPU from a polluter that never stopped.
func (th *throttles) idleGrace() time.Duration { return proofPeriod + 2*th.cfg.Interval }

// convict is a polluter released because it stopped: should it come back
// while the contention does, it is throttled again at once, on this
// record, without a new proof (a proof then would cost its victims the
// proof's time again, and a polluter that pauses and resumes would run
// free at every resumption).
type convict struct {
	at     time.Time // released
	reason string
	kind   string // the probe kind its proof read
	// returns and absence are its throttle's (throttled.returns): how many
	// times it came back so far, and the longest it stayed away.
	returns int
	absence time.Duration
}

// lingerReturns is how many times a polluter must have come back after a
// release because it stopped for its next stop to linger: one that stops
// and starts again and again (a burst of split locks every second) would
// otherwise run free at the start of each burst, for the reading that
// sees the contention return, and a latency victim's tail sees every one
// of those. A hold on a tenant that does not run costs it nothing.
const lingerReturns = 2

// lingerFor is how long the stop of such a tenant is held before its
// release: twice the longest it stayed away, within 1 s to a minute.
func lingerFor(absence time.Duration) time.Duration {
	return min(max(2*absence, time.Second), time.Minute)
}

// recidivWindow is how long a released polluter's conviction stands.
const recidivWindow = 5 * time.Minute

// rethrottle throttles again, at the start step, a polluter released
// within recidivWindow because it stopped, now busy again on a domain the
// probes read contended. Its duty
// controller then verifies it as after a proof: if the contention stays,
// it is released as useless and its record dropped.
func (th *throttles) rethrottle(ctx context.Context, now time.Time, v judge.Verdict, present map[string]sample) {
	for id, c := range th.convicts {
		if now.Sub(c.at) > recidivWindow {
			delete(th.convicts, id)
			continue
		}
		s, ok := present[id]
		if !ok || s.usage < minBusy || len(th.throttled) >= th.cfg.MaxThrottled || th.holds.held(id, "") || th.cfg.protects(s.t) {
			continue
		}
		if th.prover.proving(id) {
			continue
		}
		hot := false
		for _, d := range th.domainsOf(s.t.CPUs) {
			hot = hot || slices.Contains(v.Domains, d)
		}
		if !hot {
			continue
		}
		thr := th.duty.Start(now, v.Ratio)
		q := th.sp.QuotaAt(thr, s.t.CPUs.Len())
		if err := th.holds.apply(ctx, s.t, q, "convicted polluter busy again", now); err != nil {
			th.writeErrs.handleWriteErr(ctx, s.t, err)
			continue
		}
		delete(th.convicts, id)
		th.throttled[id] = &throttled{tenant: s.t, thr: thr, signal: signalProbe, kind: c.kind, reason: c.reason, since: now,
			returns: c.returns + 1, absence: max(c.absence, now.Sub(c.at))}
		th.rec.record(now, s.t, api.KindThrottle, q.CPUs(), th.duty.Fraction(thr),
			fmt.Sprintf("convicted before and released %.1fs ago when it stopped; busy again (%.2f CPU) as the %.2f× contention returns: %s", now.Sub(c.at).Seconds(), s.usage, v.Ratio, c.reason))
	}
}

type backoff struct {
	until time.Time
	next  time.Duration
	// since is when it was last set: when the proof or the throttle that
	// set it ended.
	since time.Time
}

// control runs the duty controller of every throttled tenant; with
// probed false (no probe readings this interval) only those convicted for
// CPU wait, whose signal does not come from the probes.
//
// It returns true when a throttled tenant used less than its idle share:
// it has likely stopped, and the next interval should come soon to
// release it.
func (th *throttles) control(ctx context.Context, now time.Time, v judge.Verdict, present map[string]sample, probed bool) (idle bool) {
	for id, t := range th.throttled {
		if !probed && t.signal == signalProbe {
			if _, ok := present[id]; ok {
				continue
			}
		}
		s, ok := present[id]
		if !ok {
			// The tenant vanished: nothing to restore, forget it.
			th.holds.forgetHolds(ctx, id)
			delete(th.throttled, id)
			th.rec.record(now, t.tenant, api.KindRelease, 0, 1, "tenant vanished")
			continue
		}
		ratio := th.cont.Worst(t.readings(v.Readings), th.domainsOf(t.tenant.CPUs))
		switch t.signal {
		case signalWait:
			// Convicted for its neighbours' CPU wait: held to that. (The
			// probes' noise must not make it look useless.)
			ratio = th.wait.ratio(t.tenant)
		case signalCPI:
			// Convicted for its neighbours' CPI: held to that.
			ratio = th.cpi.ratio(t.tenant)
		}
		if ratio == 0 {
			ratio = 1
		}
		ncpus := t.tenant.CPUs.Len()
		// A tenant its quota held back in the window wanted more than it
		// got: not idle, whatever it used; nor is one just throttled
		// (idleGrace).
		used := s.usage
		if s.heldBack || now.Sub(t.since) < th.idleGrace() {
			used = max(used, th.duty.Fraction(t.thr)*float64(ncpus))
		}
		d := th.duty.Next(t.thr, now, ratio, used, ncpus)
		// What its duty allows now (after the step Next chose), and whether
		// it used less than its idle share of that.
		allowed := th.duty.Fraction(t.thr) * float64(ncpus)
		underIdle := used < th.duty.IdleFraction*allowed
		if !underIdle {
			t.lingerUntil = time.Time{} // back: its next stop lingers anew
		}
		if d != judge.DutyRelease && d != judge.DutyUseless && underIdle {
			idle = true
		}
		switch d {
		case judge.DutyUseless:
			// Held at the floor and the contention stays: it is not the
			// cause. Free it, and do not suspect it again for a while (nor
			// throttle it again on its record).
			delete(th.convicts, id)
			th.holds.release(ctx, t.tenant, fmt.Sprintf("throttling it does not help: contention stayed at %.2f× while it was held down", ratio))
			delete(th.throttled, id)
			th.ledger.backOff(backoffKey(t.signal, id), now)
		case judge.DutyRelease:
			if underIdle {
				th.stopped(ctx, now, id, t, fmt.Sprintf("it stopped: %.2f CPU used of %.2f allowed, never held back by it", s.usage, allowed))
				continue
			}
			th.release(ctx, now, id, t, fmt.Sprintf("contention %.2f× stayed under %.2f× at full relaxation", ratio, th.duty.RelaxBelow))
		case judge.DutyTighten, judge.DutyRelax:
			q := th.sp.QuotaAt(t.thr, ncpus)
			if err := th.holds.apply(ctx, t.tenant, q, dutyLabel(th.sp, t.thr), now); err != nil {
				th.writeErrs.handleWriteErr(ctx, t.tenant, err)
				continue
			}
			th.rec.record(now, t.tenant, api.ActionKind(d), q.CPUs(), th.duty.Fraction(t.thr), fmt.Sprintf("contention %.2f×", ratio))
		}
	}
	return idle
}

// release lifts a throttle its controller is done with (the contention
// stayed quiet at full relaxation, or the tenant stopped); a polluter
// convicted by the probes stays on record (convicts), so that it is held
// again at once if it comes back with the contention.
func (th *throttles) release(ctx context.Context, now time.Time, id string, t *throttled, why string) {
	th.holds.release(ctx, t.tenant, why)
	delete(th.throttled, id)
	if t.signal == signalProbe {
		th.convicts[id] = convict{at: now, reason: t.reason, kind: t.kind, returns: t.returns, absence: t.absence}
	}
}

// stopped releases a throttled tenant that stopped, why saying how that
// was seen; one that came back lingerReturns times or more is held
// lingerFor its longest absence first, and released only if it has not
// come back by then.
func (th *throttles) stopped(ctx context.Context, now time.Time, id string, t *throttled, why string) {
	if t.returns < lingerReturns {
		th.release(ctx, now, id, t, why)
		return
	}
	linger := lingerFor(t.absence)
	if t.lingerUntil.IsZero() {
		t.lingerUntil = now.Add(linger)
	}
	if now.Before(t.lingerUntil) {
		return
	}
	th.release(ctx, now, id, t, fmt.Sprintf("%s; held %.1fs more, twice the longest it stayed away (%.1fs) in the %d times it stopped and came back",
		why, linger.Seconds(), t.absence.Seconds(), t.returns))
}

// stoppedLooks is how many looks in a row must find a throttled tenant
// idle before the watch releases it.
const stoppedLooks = 2

// minLook is the shortest window a look judges a tenant's CPU use over:
// several periods of the duty grid (16 ms by default), so that a tenant
// still running at its duty shows its share in every window.
const minLook = 50 * time.Millisecond

// lookPeriods is how many of its throttle's quota periods a look's window
// must span to tell by its CPU counters alone that a tenant stopped: a
// tenant on the deep floor runs its 1 ms once in 128 ms, and a window of
// a quarter interval (125 ms by default) may fall between two of its runs
// (on the dev VM a lockbus loop held there read 0.00 CPU over 0.13 s). Two
// periods always hold a whole one.
const lookPeriods = 2

// lookWindow is the shortest window whose CPU counters alone tell that t
// stopped.
func (th *throttles) lookWindow(t *throttled) time.Duration {
	return max(minLook, lookPeriods*th.sp.QuotaAt(t.thr, t.tenant.CPUs.Len()).Period)
}

// releaseStopped looks, between intervals, at the CPU use of each
// throttled tenant and releases one that used less than its idle share
// of what its duty allows, never held back by its quota, over
// stoppedLooks looks in a row (a quarter-interval each by default): it
// has stopped or exited. The interval's own rule takes two idle intervals,
// the first of them wholly after the stop, so a polluter that stopped
// would stay throttled for one to one and a half intervals; a look is one
// read of its cgroup's CPU counters.
//
// Where those counters cannot tell, a look also needs runnable (when set)
// to find none of its threads runnable (a tenant its quota holds back is
// runnable while it waits); without it such a look never reads idle. They
// cannot tell in the first proofPeriod of a throttle — the switch from a
// proof's cap may leave it waiting out the cap's period, running not at
// all and never held back anew —, over a window shorter than
// lookWindow, which may fall between two runs of a long period, nor while
// its quota holds it back: a run that overran the quota leaves it
// throttled, using nothing, until the periods pay it off (see
// sense.TenantStats.NrThrottled).
func (th *throttles) releaseStopped(ctx context.Context, now time.Time, stats StatsReader, runnable RunnableReader) {
	for id, t := range th.throttled {
		st, err := stats.Read(ctx, t.tenant, t.looked)
		if err != nil {
			// Gone, or unreadable for now: the interval decides.
			t.looked, t.idleLooks = nil, 0
			continue
		}
		prev := t.looked
		lookWindow := th.lookWindow(t)
		// With no threads to read, a window too short for the counters
		// to tell grows to the next look instead.
		if prev == nil || st.At.Sub(prev.At) < minLook || runnable == nil && st.At.Sub(prev.At) < lookWindow {
			if prev == nil {
				t.looked = &st
			}
			continue
		}
		t.looked = &st
		window := st.At.Sub(prev.At)
		used := (st.Usage - prev.Usage).Seconds() / window.Seconds()
		ncpus := t.tenant.CPUs.Len()
		// Its windows begin after the throttle did, so none spans the
		// switch from a proof's cap.
		// A tenant whose threads say none is runnable has stopped, even
		// while its group, throttled, still pays off its last run.
		countersTell := now.Sub(t.since) >= proofPeriod && window >= lookWindow &&
			st.Throttled == prev.Throttled && st.NrThrottled == prev.NrThrottled
		idle := !prev.At.Before(t.since) && th.duty.Idle(t.thr, used, ncpus) &&
			(countersTell || noneRunnable(ctx, runnable, t.tenant))
		if !idle {
			t.idleLooks = 0
			if !th.duty.Idle(t.thr, used, ncpus) {
				t.lingerUntil = time.Time{} // it ran: its next stop lingers anew
			}
			continue
		}
		t.idleLooks++
		if t.idleLooks < stoppedLooks {
			continue
		}
		why := "never held back by it"
		if !countersTell {
			why = "none of its threads runnable"
		}
		th.stopped(ctx, now, id, t, fmt.Sprintf("it stopped: %.2f CPU used of %.2f allowed over the last %.2fs, %s",
			used, th.duty.AllowedTo(t.thr, ncpus), window.Seconds(), why))
	}
}

// noneRunnable reports whether t's threads, read now, say it is not
// running nor waiting to: none is runnable, and the reading tells (some
// could be read, or its cgroup holds none). A reading that tells nothing
// or a failed read says no.
func noneRunnable(ctx context.Context, runnable RunnableReader, t sense.Tenant) bool {
	if runnable == nil {
		return false
	}
	r, known, err := runnable.Runnable(ctx, t)
	return err == nil && known && !r
}

// readings are the readings its controller answers to: those of the kind
// its proof read, where this interval has some; all of them otherwise.
func (t *throttled) readings(rs []judge.RatedReading) []judge.RatedReading {
	if t.kind == "" {
		return rs
	}
	var out []judge.RatedReading
	for _, r := range rs {
		if r.Kind == t.kind {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return rs
	}
	return out
}

// tightening reports whether a tenant throttled for signal on cpus can
// still be held tighter.
func (th *throttles) tightening(signal string, cpus cpuset.Set) bool {
	for _, t := range th.throttled {
		if t.signal == signal && !t.tenant.CPUs.Intersect(cpus).IsEmpty() && th.duty.CanTighten(t.thr) {
			return true
		}
	}
	return false
}

// tighteningOn reports whether a throttled tenant on one of domains can
// still be held tighter.
func (th *throttles) tighteningOn(domains []int) bool {
	for _, t := range th.throttled {
		for _, d := range th.domainsOf(t.tenant.CPUs) {
			if slices.Contains(domains, d) && th.duty.CanTighten(t.thr) {
				return true
			}
		}
	}
	return false
}

// heldSince is when the latest throttle on a probe proof's kind began among
// the tenants held on domains (zero if none): the contended readings of
// that kind before it were the held polluter's.
func (th *throttles) heldSince(domains []int, kind string) time.Time {
	var at time.Time
	for _, t := range th.throttled {
		if t.signal != signalProbe || t.kind != kind || !t.since.After(at) {
			continue
		}
		for _, d := range th.domainsOf(t.tenant.CPUs) {
			if slices.Contains(domains, d) {
				at = t.since
				break
			}
		}
	}
	return at
}

// convicted throttles a tenant its proof found guilty (why) at the
// duty controller's start step.
func (th *throttles) convicted(ctx context.Context, now time.Time, p *proof, why string) {
	key := backoffKey(p.signal, p.tenant.ID)
	start := th.duty.Start
	if slices.Contains(victimSignals, p.signal) {
		start = th.duty.StartContinuous
	}
	thr := start(now, p.p.Before())
	q := th.sp.QuotaAt(thr, p.tenant.CPUs.Len())
	if err := th.holds.apply(ctx, p.tenant, q, "proven polluter", now); err != nil {
		th.writeErrs.handleWriteErr(ctx, p.tenant, err)
		// Its proof's cap, if on, would stay held with no proof and no
		// throttle to end it: lift it (a VM's through its cgroup files
		// while libvirt does not answer, whatever that call left). The
		// conviction stands: busy again while the contention is, it is
		// throttled on this record once the actuator answers, with no new
		// proof (rethrottle).
		if p.capped {
			th.holds.dropProbeHold(ctx, p.tenant)
			p.capped = false
			th.rec.recordSlot(now, p.tenant, api.KindProofFree, 0, "proven, but its throttle could not be set: "+err.Error())
		}
		if !errors.Is(err, act.ErrGone) && p.signal == signalProbe {
			th.convicts[p.tenant.ID] = convict{at: now, reason: "proven polluter: " + why, kind: p.kind}
		}
		return
	}
	th.throttled[p.tenant.ID] = &throttled{tenant: p.tenant, thr: thr, signal: p.signal, kind: p.kind, reason: "proven polluter: " + why, since: now}
	th.ledger.forgive(key)
	th.rec.record(now, p.tenant, api.KindThrottle, q.CPUs(), th.duty.Fraction(thr), "proven polluter: "+why+"; "+p.reason)
}

// dutyLabel names a throttle's duty for its hold: "duty 3/16", or "duty
// 1/32" on the deep floor.
func dutyLabel(sp act.Sparsify, t *judge.DutyThrottle) string {
	if t.Deep {
		return fmt.Sprintf("duty %d/%d", t.Step, sp.Steps*judge.DeepPeriods)
	}
	return fmt.Sprintf("duty %d/%d", t.Step, sp.Steps)
}
