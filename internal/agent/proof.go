package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// proof is a perturbation proof in progress (judge.Proof) and what the
// agent needs to run it: whom it caps, where it reads, and the cap state
// it applied last.
type proof struct {
	tenant sense.Tenant
	p      *judge.Proof
	cpu    CPUDomain // where the probe reads
	kind   string    // the probe kind that showed the contention ("" = all)
	reason string
	capped bool // the cap is applied now
	// switched says the cap state changed since the last reading: a
	// CPU-wait reading's window then spans both states.
	switched bool
	since    time.Time // when the cap was last applied
	next     time.Time // the next reading
	// signal is the contention being proven: signalProbe (the canary
	// probes on cpu) or signalWait (the victims' CPU wait, waitFrom their
	// counters at the previous reading).
	signal   string
	victims  []sense.Tenant
	waitFrom map[string]sense.TenantStats
}

// proofPeriod is the CFS period of a proof's hard cap: the longest the
// kernel takes, so that the 1 ms a period the capped suspect may still run
// (right when the cap is set, before a slot's first reading) is refilled in
// a slot once in twenty at most.
const proofPeriod = time.Second

// CPUDomain is a CPU and its L3 domain.
type CPUDomain struct{ Domain, CPU int }

// startProof caps or frees the suspect as the proof's first trial
// asks and schedules its first reading; in dry-run it only says what it
// would do. before is the contention ratio the proof answers to.
func (a *Agent) startProof(ctx context.Context, now time.Time, p *proof, before float64) {
	if a.cfg.DryRun {
		a.record(now, p.tenant, api.KindProof, 0, 1, "dry run: would cap it to prove it: "+p.reason)
		a.ledger.backOff(backoffKey(p.signal, p.tenant.ID), now)
		return
	}
	cfg := a.cfg.Proof.ProofConfig
	if p.signal == signalWait {
		// CPU wait is read over the time between two readings: a few
		// windows a slot, the first of which (it spans the switch) only
		// starts the count.
		cfg.Samples = min(cfg.Samples, 4)
	}
	key := backoffKey(p.signal, p.tenant.ID)
	carry := a.ledger.takeCarry(key, now)
	p.p = judge.NewProofCarry(cfg, before, now, uint64(now.UnixNano()), carry)
	a.proof = p
	a.record(now, p.tenant, api.KindProof, 0, 1, fmt.Sprintf("proving it, %d randomized capped/freed trials at most: %s", a.cfg.Proof.Trials, p.reason))
	a.followPlan(ctx, now, p)
}

// followPlan applies the cap state the proof wants now and sets the
// time of its next reading. A failed write ends the proof.
func (a *Agent) followPlan(ctx context.Context, now time.Time, p *proof) {
	plan := p.p.Plan()
	p.next = plan.SampleAt
	if plan.Capped == p.capped {
		return
	}
	p.switched = true
	if plan.Capped {
		// Capped hard: the kernel's minimum quota (1 ms) per CPU a period,
		// so the suspect runs in rare 1 ms slots while the probe reads.
		q := cgroup.Quota{Quota: time.Duration(max(1, p.tenant.CPUs.Len())) * cgroup.MinQuota, Period: proofPeriod}
		if err := a.apply(ctx, p.tenant, q, "proof", now); err != nil {
			a.handleWriteErr(ctx, p.tenant, err)
			p.p.Abort("could not cap it: " + err.Error())
			a.endProof(ctx, now, p)
			return
		}
		p.capped, p.since = true, now
		a.ledger.capSpent(p.tenant.ID, now, 0)
		a.recordSlot(now, p.tenant, api.KindProof, q.CPUs(), "proof: capped for a trial")
		return
	}
	a.uncap(ctx, now, p, "proof: freed for a trial")
}

// uncap lifts a proof's cap (if on) and books the time it was on.
func (a *Agent) uncap(ctx context.Context, now time.Time, p *proof, why string) {
	if !p.capped {
		return
	}
	a.dropProbeHold(ctx, p.tenant)
	p.capped = false
	a.ledger.capSpent(p.tenant.ID, now, now.Sub(p.since))
	a.recordSlot(now, p.tenant, api.KindProofFree, 0, why)
}

func (a *Agent) currentProof() *proof {
	return a.proof
}

// proofSample takes one reading for the proof in progress and moves it
// on: the cap state of the next slot, or the verdict.
func (a *Agent) proofSample(ctx context.Context, now time.Time) {
	p := a.proof
	if p == nil {
		return
	}
	ratio, ok := -1.0, false
	var waitNow map[string]sense.TenantStats
	if p.signal == signalWait {
		waitNow = a.wait.readVictims(ctx, p.victims)
	} else {
		var kinds []string
		if p.kind != "" {
			kinds = []string{p.kind}
		}
		if rs, err := a.measureCPU(p.cpu.Domain, p.cpu.CPU, kinds...); err == nil && len(rs) > 0 {
			ratio, ok = a.cont.Worst(a.cont.Rate(rs), nil), true
		}
	}

	if a.proof != p {
		return // ended meanwhile (the tenant vanished, the agent stopped)
	}
	if p.signal == signalWait {
		ratio = a.wait.proofRatio(p, waitNow)
		ok = ratio > 0 && !p.switched
	}
	p.switched = false
	a.log.Debug("proof reading", "tenant", p.tenant.Name, "capped", p.capped, "ratio", ratio, "ok", ok, "cpu", p.cpu.CPU, "kind", p.kind)
	if p.p.Observe(now, ratio, ok) {
		a.endProof(ctx, now, p)
		return
	}
	a.followPlan(ctx, now, p)
}

// endProof records a proof's verdict, with every trial's evidence,
// and acts on it: a polluter is throttled at the start step; anyone else is
// left free and not tested again for a while.
func (a *Agent) endProof(ctx context.Context, now time.Time, p *proof) {
	a.proof = nil
	verdict, why := p.p.Verdict()
	a.proofs[verdict]++
	a.journal(act.Event{Kind: "proof", Tenant: p.tenant.ID, Name: p.tenant.Name, Detail: verdict + ": " + why,
		Evidence: ProofEvidence{Before: p.p.Before(), CPU: p.cpu.CPU, Kind: p.kind, Signal: p.signal, Trials: p.p.Trials(),
			FalseConvictionBound: a.cfg.Proof.FalseConviction()}})
	key := backoffKey(p.signal, p.tenant.ID)
	if verdict != judge.ProofGuilty {
		a.uncap(ctx, now, p, verdict+": "+why)
		if verdict == judge.ProofInconclusive {
			// Not acquitted: proved again soon, within the budget, with
			// the backoff it had, continuing this proof's evidence.
			a.ledger.keepCarry(key, p.p.Carry(), now)
			// A longer backoff stands (a write that failed and aborted
			// the proof set one that doubles).
			a.ledger.holdOff(key, now.Add(a.retryAfter(p.p.Carry())))
		} else {
			a.ledger.backOff(key, now)
		}
		a.noteAction(api.ActionRecord{Time: now, Tenant: p.tenant.ID, Name: p.tenant.Name, Kind: api.KindRelease, Policy: api.PolicyProbe,
			Lever: api.LeverCPUQuota, Duty: 1, Reason: verdict + ": " + why})
		a.log.Info("proof", "tenant", p.tenant.Name, "verdict", verdict, "trials", p.p.Summary(), "why", why)
		return
	}
	if p.capped {
		a.ledger.capSpent(p.tenant.ID, now, now.Sub(p.since))
	}
	a.log.Info("proof", "tenant", p.tenant.Name, "verdict", verdict, "trials", p.p.Summary(), "why", why)
	thr := a.duty.Start(now, p.p.Before())
	q := a.sp.Quota(thr.Step, p.tenant.CPUs.Len())
	if err := a.apply(ctx, p.tenant, q, "proven polluter", now); err != nil {
		a.handleWriteErr(ctx, p.tenant, err)
		// Its proof's cap, if on, would stay held with no proof and no
		// throttle to end it: lift it (a VM's through its cgroup files
		// while libvirt does not answer, whatever that call left). The
		// conviction stands: busy again while the contention is, it is
		// throttled on this record once the actuator answers, with no new
		// proof (rethrottle).
		if p.capped {
			a.dropProbeHold(ctx, p.tenant)
			p.capped = false
			a.recordSlot(now, p.tenant, api.KindProofFree, 0, "proven, but its throttle could not be set: "+err.Error())
		}
		if !errors.Is(err, act.ErrGone) && p.signal == signalProbe {
			a.convicts[p.tenant.ID] = convict{at: now, reason: "proven polluter: " + why, kind: p.kind}
		}
		return
	}
	a.throttled[p.tenant.ID] = &throttled{tenant: p.tenant, thr: thr, signal: p.signal, kind: p.kind, reason: "proven polluter: " + why, since: now}
	a.ledger.forgive(key)
	a.record(now, p.tenant, api.KindThrottle, q.CPUs(), a.sp.Duty(thr.Step), "proven polluter: "+why+"; "+p.reason)
}

// inconclusiveRetry is how soon a suspect whose proof was inconclusive
// may be proved again, when its evidence so far is against it.
const inconclusiveRetry = time.Second

// retryAfter is how soon a suspect whose proof ended inconclusive with
// this evidence may be proved again: one interval when the evidence leans
// towards guilt (leanEvidence: its cap lowered the contention more often
// than not), inconclusiveRetry otherwise. A polluter that shows in few readings
// (a split-lock storm the host itself slows in bursts) often ends a proof
// by going quiet for three trials; its next proof continues the same
// evidence, so looking again soon costs its victims less and changes no
// bound: when the next proof starts is decided from past trials only, and
// each trial's order is still a fresh coin.
func (a *Agent) retryAfter(evidence float64) time.Duration {
	if evidence >= leanEvidence {
		return min(a.cfg.Interval, inconclusiveRetry)
	}
	return inconclusiveRetry
}

// carried is the evidence an inconclusive proof ended with.
type carried struct {
	evidence float64
	at       time.Time
}

// carryWindow is how long an inconclusive proof's evidence waits for the
// next proof of its suspect: a proof started later begins a new chain at 1
// (each chain convicts a tenant whose cap does nothing with probability at
// most Alpha; a chain is one martingale whichever way its proofs ended).
const carryWindow = 30 * time.Second

// resting reports whether a tenant may not be proved for signal now: it
// was acquitted of it lately, or is over its proof budget.
func (a *Agent) resting(signal, id string, now time.Time) bool {
	return a.ledger.resting(signal, id, now)
}

// capSlot is a stretch of proof cap time on a tenant.
type capSlot struct {
	at time.Time
	d  time.Duration
}
