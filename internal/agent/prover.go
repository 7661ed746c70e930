package agent

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// prover runs the perturbation proofs of the probe policy and CPU wait:
// one at a time on the host, since a proof's cap changes what every probe
// and every neighbour's CPU wait reads. It caps and frees the suspect as
// the proof's randomized trials ask, reads the contention the proof
// answers to (the canary probe on its CPU, or the victims' CPU wait), and
// on a verdict books it in the ledger and hands a convicted tenant to the
// agent's throttles.
type prover struct {
	cfg       Config
	ledger    *proofLedger
	cont      *judge.Contention
	wait      *cpuWaitPolicy
	cpi       *cpiPolicy
	caps      proofCaps
	rec       proofRecords
	writeErrs writeErrHandler
	probe     cpuProbe
	// convict hands a convicted suspect to the throttles.
	convict func(ctx context.Context, now time.Time, p *proof, why string)
	log     *slog.Logger
	// proof is the proof in progress (nil: none).
	proof *proof
	// verdicts counts the proofs ended, by verdict.
	verdicts map[string]uint64
	// clock, when set, is the time now (Deps.Now): a slot is planned from
	// when its cap state was written, not from the time the caller
	// passed, which may be a while before (see judge.Proof.Began).
	clock func() time.Time
}

// proofCaps caps a suspect for a trial and frees it (probeHolds).
type proofCaps interface {
	apply(ctx context.Context, t sense.Tenant, q cgroup.Quota, reason string, now time.Time) error
	dropProbeHold(ctx context.Context, t sense.Tenant)
}

// proofRecords records a proof: its start, its slots, its verdict and the
// release that ends it (the recorder).
type proofRecords interface {
	probeRecords
	journal(e act.Event)
	noteAction(r api.ActionRecord)
}

// cpuProbe reads the canary probe on one CPU at a proof's pace, one
// reading a kind (probeSensor.measureOnce).
type cpuProbe interface {
	measureOnce(domain, cpu int, kinds ...string) ([]sense.ProbeReading, error)
}

func newProver(cfg Config, ledger *proofLedger, cont *judge.Contention, wait *cpuWaitPolicy, cpi *cpiPolicy, caps proofCaps, rec proofRecords, writeErrs writeErrHandler, probe cpuProbe, log *slog.Logger) *prover {
	return &prover{cfg: cfg, ledger: ledger, cont: cont, wait: wait, cpi: cpi, caps: caps, rec: rec, writeErrs: writeErrs, probe: probe, log: log, verdicts: map[string]uint64{}}
}

// reconfigure takes what of cfg may change while the agent runs.
func (pr *prover) reconfigure(cfg Config) { pr.cfg = cfg }

// proving reports whether the proof in progress is of tenant id.
func (pr *prover) proving(id string) bool { return pr.proof != nil && pr.proof.tenant.ID == id }

// start caps or frees the suspect as the proof's first trial
// asks and schedules its first reading; in dry-run it only says what it
// would do. before is the contention ratio the proof answers to.
func (pr *prover) start(ctx context.Context, now time.Time, p *proof, before float64) {
	if pr.cfg.DryRun {
		pr.rec.record(now, p.tenant, api.KindProof, 0, 1, "dry run: would cap it to prove it: "+p.reason)
		pr.ledger.backOff(backoffKey(p.signal, p.tenant.ID), now)
		return
	}
	cfg := pr.cfg.Proof.ProofConfig
	if slices.Contains(victimSignals, p.signal) {
		// CPU wait and CPI are read over the time between two readings:
		// a few windows a slot, the first of which (it spans the switch)
		// only starts the count. They move at the scheduler's pace
		// (slices of a few milliseconds), so their slots are no shorter
		// than waitSlot.
		cfg.Samples = min(cfg.Samples, 4)
		cfg.Slot = max(cfg.Slot, waitSlot)
		if cfg.Settle == 0 {
			// Read over windows, not at instants, as they were measured.
			cfg.Settle = cfg.WindowSettle()
		}
		// A window counts from the reading before it: a freed slot is
		// free throughout, as it was measured.
		cfg.FreeLead = cfg.Slot
	}
	key := backoffKey(p.signal, p.tenant.ID)
	carry := 1.0
	if p.survey {
		// One capped slot and one freed: a measurement, not a proof.
		cfg.Trials = 1
	} else {
		carry = pr.ledger.takeCarry(key, now)
	}
	p.p = judge.NewProofCarry(cfg, before, now, uint64(now.UnixNano()), carry)
	switch p.signal {
	case signalWait:
		p.p.ReadsOn("its neighbours' CPU wait")
	case signalCPI:
		p.p.ReadsOn("the victims' CPI")
	}
	pr.proof = p
	what := fmt.Sprintf("proving it, %d randomized capped/freed trials at most, %d near conviction: ", pr.cfg.Proof.Trials, pr.cfg.Proof.MostTrials())
	if p.survey {
		what = "start-up CPI survey: capped for a moment to read its neighbours' CPI without it: "
	}
	pr.rec.record(now, p.tenant, api.KindProof, 0, 1, what+p.reason)
	pr.followPlan(ctx, now, p)
}

// waitSlot is the shortest slot of a proof on CPU wait: four windows of
// about 4 ms, each a scheduler slice or more.
const waitSlot = 25 * time.Millisecond

// precheckReadings is how many readings at the proof's pace a probe
// proof takes, with nobody capped, before it starts.
const precheckReadings = 4

// readable reports whether the LLC contention a probe proof answers to
// shows where and how the proof reads: a few readings of its kind on its CPU,
// back to back as a slot takes them (after one that warms the buffer), with nobody capped, whose level (the
// mean of their log-ratios, as a slot's) is not quiet. The LLC walk read
// once an interval (its buffer cold) can read several times its quiet
// level while the same walk read every few milliseconds (its buffer warm)
// reads quiet: a proof started there would cap its suspect only to read
// three quiet trials. Deciding whether to prove from readings taken before
// the proof leaves its bound as it is.
func (pr *prover) readable(p *proof, before float64) bool {
	if p.kind != sense.ProbeLLC {
		// The DRAM chase's buffer is far beyond the caches, cold at
		// any pace; and a split-lock storm in a VM comes in bursts that
		// a few milliseconds of readings can miss, where a proof's
		// trials, spread over a second, do not.
		return true
	}
	ratios := make([]float64, 0, precheckReadings)
	// One reading more, the first, to warm the probe's buffer as a
	// proof's readings keep it warm: that first reading is the interval's
	// kind of reading again, not the proof's.
	for i := range precheckReadings + 1 {
		rs, err := pr.probe.measureOnce(p.cpu.Domain, p.cpu.CPU, p.kind)
		if err != nil || len(rs) == 0 {
			return true // the proof will say what the probe can read
		}
		if i > 0 {
			ratios = append(ratios, pr.cont.Worst(pr.cont.Rate(rs), nil))
		}
	}
	level, quiet := judge.SlotLevel(before, ratios), judge.QuietLevel(before)
	if level >= quiet {
		return true
	}
	pr.log.Debug("proof not started: the contention does not show at the proof's pace", "tenant", p.tenant.Name,
		"cpu", p.cpu.CPU, "kind", p.kind, "before", before, "level", level, "quiet", quiet)
	return false
}

// followPlan applies the cap state the proof wants now and sets the
// time of its next reading, or of the end of a freed slot's hold. A
// failed write ends the proof.
func (pr *prover) followPlan(ctx context.Context, now time.Time, p *proof) {
	capped, next, held := planNow(p.p.Plan(), now)
	// The end of a hold frees the suspect within a slot that began at the
	// hold: the slot's readings stay planned from then.
	freeing := p.held && !held
	p.next, p.held = next, held
	if capped != p.capped && !pr.switchCap(ctx, now, p, capped) {
		return
	}
	if pr.clock != nil {
		if freeing {
			// Its readings start a lead after the release lands.
			p.p.Freed(pr.clock())
		} else {
			// The slot begins when its cap state is in force.
			p.p.Began(pr.clock())
		}
		plan := p.p.Plan()
		p.next = plan.SampleAt
		if p.held {
			p.next = plan.HoldUntil
		}
	}
}

// planNow is the cap state a proof's plan wants at now, when the prover
// next has to act, and whether the suspect is held through a freed slot's
// settle (next is then the hold's end, not a reading).
func planNow(plan judge.ProofPlan, now time.Time) (capped bool, next time.Time, held bool) {
	if !plan.Capped && now.Before(plan.HoldUntil) {
		return true, plan.HoldUntil, true
	}
	return plan.Capped, plan.SampleAt, false
}

// switchCap caps or frees the suspect for the slot that begins; false
// when the cap could not be written (the proof is ended).
func (pr *prover) switchCap(ctx context.Context, now time.Time, p *proof, capped bool) bool {
	p.switched = true
	if capped {
		q := hardCap(p.tenant)
		if err := pr.caps.apply(ctx, p.tenant, q, "proof", now); err != nil {
			pr.writeErrs.handleWriteErr(ctx, p.tenant, err)
			p.p.Abort("could not cap it: " + err.Error())
			pr.endProof(ctx, now, p)
			return false
		}
		p.capped, p.since = true, now
		pr.ledger.capSpent(p.tenant.ID, now, 0)
		pr.rec.recordSlot(now, p.tenant, api.KindProof, q.CPUs(), "proof: capped for a trial")
		return true
	}
	pr.uncap(ctx, now, p, "proof: freed for a trial")
	return true
}

// uncap lifts a proof's cap (if on) and books the time it was on.
func (pr *prover) uncap(ctx context.Context, now time.Time, p *proof, why string) {
	if !p.capped {
		return
	}
	pr.caps.dropProbeHold(ctx, p.tenant)
	p.capped = false
	pr.ledger.capSpent(p.tenant.ID, now, now.Sub(p.since))
	pr.rec.recordSlot(now, p.tenant, api.KindProofFree, 0, why)
}

// sample takes one reading for the proof in progress and moves it
// on: the cap state of the next slot, or the verdict.
func (pr *prover) sample(ctx context.Context, now time.Time) {
	p := pr.proof
	if p == nil {
		return
	}
	if p.held {
		// Not a reading: the freed slot's hold ends.
		pr.followPlan(ctx, now, p)
		return
	}
	ratio, ok := -1.0, false
	var waitNow map[string]sense.TenantStats
	var cpiNow map[string]sense.PerfSnapshot
	switch p.signal {
	case signalWait:
		waitNow = pr.wait.readVictims(ctx, p.victims)
	case signalCPI:
		cpiNow = pr.cpi.snapVictims(p.victims)
	default:
		var kinds []string
		if p.kind != "" {
			kinds = []string{p.kind}
		}
		if rs, err := pr.probe.measureOnce(p.cpu.Domain, p.cpu.CPU, kinds...); err == nil && len(rs) > 0 {
			ratio, ok = pr.cont.Worst(pr.cont.Rate(rs), nil), true
		}
	}

	if pr.proof != p {
		return // ended meanwhile (the tenant vanished, the agent stopped)
	}
	switch p.signal {
	case signalWait:
		ratio = pr.wait.proofRatio(p, waitNow)
		ok = ratio > 0 && !p.switched
	case signalCPI:
		if p.survey && !p.switched {
			p.count(cpiNow)
		}
		ratio = pr.cpi.proofRatio(p, cpiNow)
		ok = ratio > 0 && !p.switched
	}
	p.switched = false
	pr.log.Debug("proof reading", "tenant", p.tenant.Name, "capped", p.capped, "ratio", ratio, "ok", ok, "cpu", p.cpu.CPU, "kind", p.kind)
	if p.p.Observe(now, ratio, ok) {
		pr.endProof(ctx, now, p)
		return
	}
	pr.followPlan(ctx, now, p)
}

// endProof records a proof's verdict, with every trial's evidence,
// and acts on it: a polluter is throttled at the start step; anyone else is
// left free and not tested again for a while.
func (pr *prover) endProof(ctx context.Context, now time.Time, p *proof) {
	pr.proof = nil
	if p.survey {
		pr.endSurvey(ctx, now, p)
		return
	}
	verdict, why := p.p.Verdict()
	pr.verdicts[verdict]++
	pr.rec.journal(act.Event{Kind: "proof", Tenant: p.tenant.ID, Name: p.tenant.Name, Detail: verdict + ": " + why,
		Evidence: ProofEvidence{Before: p.p.Before(), CPU: p.cpu.CPU, Kind: p.kind, Signal: p.signal, Carry: p.p.Carried(), Trials: p.p.Trials(),
			FalseConvictionBound: pr.cfg.Proof.FalseConviction()}})
	key := backoffKey(p.signal, p.tenant.ID)
	if verdict != judge.ProofGuilty {
		pr.uncap(ctx, now, p, verdict+": "+why)
		if verdict == judge.ProofInconclusive {
			// Not acquitted: proved again soon, within the budget, with
			// the backoff it had, continuing this proof's evidence.
			pr.ledger.keepCarry(key, p.p.Carry(), now)
			// A longer backoff stands (a write that failed and aborted
			// the proof set one that doubles).
			pr.ledger.holdOff(key, now, now.Add(pr.retryAfter(p.p.Carry())))
		} else {
			pr.ledger.backOff(key, now)
			if p.signal == signalProbe && !p.recheck {
				pr.ledger.noteAcquittal(key, p.p.Carry(), now)
			}
		}
		pr.rec.noteAction(api.ActionRecord{Time: now, Tenant: p.tenant.ID, Name: p.tenant.Name, Kind: api.KindRelease, Policy: api.PolicyProbe,
			Lever: api.LeverCPUQuota, Duty: 1, Reason: verdict + ": " + why})
		pr.log.Info("proof", "tenant", p.tenant.Name, "verdict", verdict, "trials", p.p.Summary(), "why", why)
		return
	}
	if p.capped {
		pr.ledger.capSpent(p.tenant.ID, now, now.Sub(p.since))
	}
	pr.log.Info("proof", "tenant", p.tenant.Name, "verdict", verdict, "trials", p.p.Summary(), "why", why)
	pr.convict(ctx, now, p, why)
}

// inconclusiveRetry is how soon a suspect whose proof was inconclusive
// may be proved again, when its evidence so far is against it.
const inconclusiveRetry = time.Second

// retryAfter is how soon a suspect whose proof ended inconclusive with
// this evidence may be proved again: a watch (WatchPace) when the
// evidence leans towards guilt (leanEvidence: its cap lowered the
// contention more often than not), inconclusiveRetry otherwise. A polluter that shows in few readings (a split-lock storm the
// host itself slows in bursts) often ends a proof by going quiet; its next
// proof continues the same evidence, so looking again soon costs its
// victims less and changes no bound: when the next proof starts is decided
// from past trials only, and each trial's order is still a fresh coin. A
// proof waits for the contention to come back all the same. On the dev
// VM, a stress-ng --lockbus in 0.3 s bursts every 0.8 s was proved at
// every other burst with a whole interval's wait: its proof ended after
// the burst's quiet tail, and the next burst was over before the interval
// had passed.
func (pr *prover) retryAfter(evidence float64) time.Duration {
	if evidence >= leanEvidence {
		return min(WatchPace(pr.cfg.Interval), inconclusiveRetry)
	}
	return inconclusiveRetry
}
