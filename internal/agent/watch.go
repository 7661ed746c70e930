package agent

import (
	"context"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// WatchEvery is how often the agent looks for a first sign of contention
// between intervals, and how soon it confirms one: a quarter of an interval,
// at least quickInterval. (Each look reads a DRAM spread on two CPUs,
// about 1.3 ms of CPU on the dev VM: eight looks a second at the default
// 500 ms interval, while some tenant is busy.)
func (a *Agent) WatchEvery() time.Duration { return WatchPace(a.cfg.Interval) }

// WatchPace is how often an agent running at interval looks between its
// intervals: its watch, and the look for a CPU that turned busy.
func WatchPace(interval time.Duration) time.Duration { return max(interval/4, quickInterval) }

// minBusy is the CPU use (cores) of a busy tenant, for the watch.
const minBusy = 0.05

// quickInterval is the shortest watch: the probes' own cost bounds it.
const quickInterval = 100 * time.Millisecond

// surveyRounds is how many intervals at start survey the quiet level.
const surveyRounds = 2

// surveyMax bounds the tenants a survey caps at once.
const surveyMax = 16

// surveyCaps caps a busy tenant for the survey and frees it (probeHolds).
type surveyCaps interface {
	intend(ts []sense.Tenant, qs []cgroup.Quota)
	apply(ctx context.Context, t sense.Tenant, q cgroup.Quota, reason string, now time.Time) error
	held(id string, policy api.Policy) bool
	dropProbeHold(ctx context.Context, t sense.Tenant)
}

// slotRecorder records a survey's cap and its release (the recorder).
type slotRecorder interface {
	recordSlot(now time.Time, t sense.Tenant, kind api.ActionKind, quota float64, reason string)
}

// SurveyCapReason is the reason recorded with each cap of the start-up
// survey. It caps every busy tenant at once, suspected or not, so it is no
// action against any of them: the lab's suite does not count it as a
// reaction to a polluter.
const SurveyCapReason = "start-up survey: capped for a moment to read the probes' quiet level"

// surveyQuiet learns what the probes read when no tenant runs, for an
// agent that starts with no baselines (none saved, none calibrated) on a
// host that may already be contended: whatever the probes read first would
// otherwise become "quiet", and a polluter already running would never
// show. Every busy tenant is capped hard at once for a few milliseconds
// while the probes read; those readings only ever lower the baselines.
// It runs surveyRounds times, on intervals where tenants have rates, and
// costs each busy tenant a few tens of milliseconds of CPU once, booked in
// the proof ledger; in dry-run it is skipped (nothing may be written).
func (ps *probeSensor) surveyQuiet(ctx context.Context, now time.Time, samples []sample, cfg Config, caps surveyCaps, rec slotRecorder, writeErrs writeErrHandler) {
	if cfg.DryRun {
		ps.survey = 0
		return
	}
	var busy []sense.Tenant
	fresh := false
	for _, s := range samples {
		fresh = fresh || s.fresh
		if s.fresh && s.usage >= judge.MinUsage && !cfg.protects(s.t) && len(busy) < surveyMax {
			busy = append(busy, s.t)
		}
	}
	if !fresh {
		return // no rates yet: who is busy is not known
	}
	ps.survey--
	if len(busy) == 0 {
		return
	}
	var free []sense.Tenant
	var qs []cgroup.Quota
	for _, t := range busy {
		if !caps.held(t.ID, "") {
			free = append(free, t)
			qs = append(qs, hardCap(t))
		}
	}
	// One state write for all the caps, then the caps back to back: the
	// first capped does not wait out a save per tenant after it.
	caps.intend(free, qs)
	var capped []sense.Tenant
	for i, t := range free {
		q := qs[i]
		if err := caps.apply(ctx, t, q, "survey", now); err != nil {
			writeErrs.handleWriteErr(ctx, t, err)
			continue
		}
		capped = append(capped, t)
		rec.recordSlot(now, t, api.KindProof, q.CPUs(), SurveyCapReason)
	}
	start := ps.now()
	ps.sleep(cfg.Proof.Slot / 4)
	var readings []sense.ProbeReading
	for range 2 {
		for _, t := range ps.probe.Targets() {
			// One reading of each kind, not the interval's DRAM spread:
			// every busy tenant is capped while the survey reads, and the
			// spread's pauses lengthen that (on a 16-vCPU guest a control
			// run's survey caps came to 0.21 s, against 0.11 s with one
			// reading in an earlier sitting).
			if rs, err := ps.measureOnce(t.Domain, t.CPU, t.Kinds...); err == nil {
				readings = append(readings, rs...)
			}
		}
	}
	ps.cont.Lower(readings)
	end := ps.now()
	for _, t := range capped {
		caps.dropProbeHold(ctx, t)
		ps.ledger.capSpent(t.ID, end, end.Sub(start))
		rec.recordSlot(end, t, api.KindProofFree, 0, "start-up survey done")
	}
	ps.log.Info("surveyed the probes' quiet level with busy tenants capped", "tenants", len(capped), "readings", len(readings))
}

// quickProber is a probe with a cheap reading for the watch.
type quickProber interface {
	MeasureQuick(domain, cpu int, kind string) ([]sense.ProbeReading, error)
}

// measureQuick is the watch's reading: the probe's cheap one where it has
// one, else a whole reading of the kind.
func (ps *probeSensor) measureQuick(domain, cpu int, kind string) ([]sense.ProbeReading, error) {
	if q, ok := ps.probe.(quickProber); ok {
		return ps.measureOn(cpu, func() ([]sense.ProbeReading, error) { return q.MeasureQuick(domain, cpu, kind) })
	}
	return ps.measureCPU(domain, cpu, kind)
}
