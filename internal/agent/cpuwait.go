package agent

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// The contention a proof or a throttle answers to.
const (
	signalProbe = ""         // the canary probes (memory bus, LLC, DRAM)
	signalWait  = "cpu-wait" // tenants waiting for a CPU a neighbour keeps busy
	signalCPI   = "cpi"      // tenants whose cycles per instruction rose (a PMU counts them)
)

// victimSignals are the signals read on the victims themselves rather than
// on the probes: their proofs read windows between readings, and their
// throttles follow them with no ceiling.
var victimSignals = []string{signalWait, signalCPI}

// backoffKey keeps acquittals per signal: a tenant acquitted of polluting
// the memory bus may still be the one keeping its neighbour's CPU busy.
func backoffKey(signal, id string) string {
	if signal == signalProbe {
		return id
	}
	return signal + ":" + id
}

// cpuWaitPolicy is the CPU-wait policy: it judges each interval's CPU
// use and run delay (a tenant whose work takes longer because a neighbour
// keeps its CPUs busy), ranks the suspects, and starts a proof read on the
// victims' CPU wait. The proof and the throttle that follows are shared
// with the probe policy (one proof at a time on the host, one throttle per
// tenant), reached through proofs.
type cpuWaitPolicy struct {
	enabled bool
	// prove: proofs and throttles for CPU wait (cpu_wait.prove); without
	// it the policy judges and ranks, and reports.
	prove  bool
	stats  StatsReader
	proofs waitProofs
	wait   *judge.CPUWait
	susp   *judge.Suspects
	// last is this interval's verdict, cpus the CPUs of the tenants it
	// judged.
	last judge.WaitVerdict
	cpus map[string]cpuset.Set
	// fair is each busy tenant's fair share of its CPUs this interval
	// (fairShares): what a victim must lack and a suspect exceed.
	fair map[string]float64
}

// waitProofs is what the CPU-wait policy needs of the proofs and
// throttles it shares with the probe policy.
type waitProofs interface {
	// capped reports whether crosstalk is capping a tenant now (a
	// throttle, a proof, another policy's hold): its waits and its CPU use
	// are crosstalk's doing.
	capped(id string) bool
	// resting reports whether a tenant may not be proved for signal now:
	// acquitted lately, or capped for proofs as much as the budget allows.
	resting(signal, id string, now time.Time) bool
	// mayProve reports whether a new proof may start: room for another
	// throttle, and the last change has settled.
	mayProve(now time.Time) bool
	// tightening reports whether a tenant throttled for signal on cpus
	// can still be held tighter: its controller's business, not a new
	// proof's.
	tightening(signal string, cpus cpuset.Set) bool
	startProof(ctx context.Context, now time.Time, p *proof, before float64)
	journal(e act.Event)
}

func newCPUWaitPolicy(cfg Config, stats StatsReader, proofs waitProofs) *cpuWaitPolicy {
	return &cpuWaitPolicy{
		enabled: *cfg.CPUWait.Enabled, prove: *cfg.CPUWait.Prove, stats: stats, proofs: proofs,
		wait: judge.NewCPUWait(cfg.WaitThresholds()), susp: judge.NewSuspects(cfg.Judge.Window),
		cpus: map[string]cpuset.Set{},
	}
}

// reconfigure takes what of cfg may change while the agent runs.
func (w *cpuWaitPolicy) reconfigure(cfg Config) {
	w.wait.SetThresholds(cfg.WaitThresholds())
	w.prove = *cfg.CPUWait.Prove
}

// verdict is this interval's CPU-wait verdict.
func (w *cpuWaitPolicy) verdict() judge.WaitVerdict { return w.last }

// observe feeds this interval's CPU use and run delay to the
// CPU-wait judge. Tenants crosstalk is capping are left out: their waits
// are its own doing.
func (w *cpuWaitPolicy) observe(samples []sample, views []judge.TenantView) {
	if !w.enabled {
		return
	}
	ws := make([]judge.WaitSample, 0, len(samples))
	clear(w.cpus)
	fair := fairShares(samples)
	w.fair = fair
	for _, s := range samples {
		if !s.fresh {
			continue
		}
		ws = append(ws, judge.WaitSample{ID: s.t.ID, Usage: s.waitUsage, Delay: s.waitDelay, Exclude: w.proofs.capped(s.t.ID), Stale: !s.waitFresh, Fair: fair[s.t.ID]})
		w.cpus[s.t.ID] = s.t.CPUs
	}
	w.last = w.wait.Update(ws)
	w.susp.Observe(judge.Verdict{Ratio: w.last.Ratio}, views)
}

// fairShares is each busy tenant's share of its CPUs when every busy
// tenant wants more: for each of its CPUs, one over the busy tenants that
// may run there.
func fairShares(samples []sample) map[string]float64 {
	perCPU := map[int]int{}
	for _, s := range samples {
		if s.fresh && s.usage >= minBusy {
			for _, c := range s.t.CPUs.List() {
				perCPU[c]++
			}
		}
	}
	out := make(map[string]float64, len(samples))
	for _, s := range samples {
		if !s.fresh || s.usage < minBusy {
			continue
		}
		for _, c := range s.t.CPUs.List() {
			out[s.t.ID] += 1 / float64(perCPU[c])
		}
	}
	return out
}

// ratio is the worst CPU-wait ratio this interval among the
// tenants sharing CPUs with t: what a throttle on t answers to.
func (w *cpuWaitPolicy) ratio(t sense.Tenant) float64 {
	worst := 1.0
	for _, r := range w.last.Ratings {
		if r.ID != t.ID && !w.cpus[r.ID].Intersect(t.CPUs).IsEmpty() {
			worst = max(worst, r.Ratio)
		}
	}
	return worst
}

// maybeProve ranks suspects for CPU-wait contention (tenants
// active on the waiting tenants' CPUs, by activity and by how their CPU use
// tracks the waits) and, when the contention is persistent, starts a
// randomized proof on the top one, read on the victims' CPU wait. It
// returns the ranking for the state.
func (w *cpuWaitPolicy) maybeProve(ctx context.Context, now time.Time, views []judge.TenantView, present map[string]sample) []judge.Suspect {
	wv := w.last
	if !wv.Contended {
		return nil
	}
	var cpus cpuset.Set
	for _, v := range wv.Victims {
		cpus = cpus.Union(w.cpus[v.ID])
	}
	usage := make(map[string]float64, len(views))
	for _, v := range views {
		usage[v.ID] = v.Usage
	}
	fair := w.fair
	// A suspect must have taken more CPU than before the waits began (a
	// tenant that waits may still be one, for its neighbours' waits), and
	// more than its fair share, as its victim must have had less: one that
	// takes no more than the scheduler would give it with everyone busy is
	// sharing, not crowding anyone out (capping it would relieve the
	// waiting tenant all the same, and a proof would convict it for a real
	// effect).
	ranked := w.susp.RankOn(cpus, views, func(id string) bool {
		if f := fair[id]; f > 0 && usage[id] <= suspectExcess*f {
			return true
		}
		// Throttled, or held by another policy: its cap, not its doing.
		if w.proofs.capped(id) {
			return true
		}
		if w.wait.Gain(id, usage[id]) < minWaitGain {
			return true
		}
		return w.proofs.resting(signalWait, id, now)
	})
	for i := range ranked {
		ranked[i].Reasons = append(ranked[i].Reasons, fmt.Sprintf("uses %.2f CPU more than before the waits began", w.wait.Gain(ranked[i].ID, usage[ranked[i].ID])))
	}
	if !w.prove || !wv.Persistent || len(ranked) == 0 || !w.proofs.mayProve(now) {
		return ranked
	}
	// A throttled tenant on these CPUs that can still be held tighter is
	// its controller's business, as with the probes.
	if w.proofs.tightening(signalWait, cpus) {
		return ranked
	}
	// The best suspect with someone else waiting on its CPUs.
	victims := make([]victimRatio, 0, len(wv.Victims))
	for _, v := range wv.Victims {
		victims = append(victims, victimRatio{v.ID, v.Ratio})
	}
	top, s, vt, before := firstNear(ranked, present, victims, func(suspect, victim sense.Tenant) bool {
		return victim.ID != suspect.ID && !victim.CPUs.Intersect(suspect.CPUs).IsEmpty()
	})
	if len(vt) == 0 {
		return ranked
	}
	reason := fmt.Sprintf("%s; suspect score %.2f: %s", waitReason(wv, vt, present), top.Score, strings.Join(top.Reasons, "; "))
	w.proofs.journal(act.Event{Kind: "detection", Tenant: top.ID, Name: top.Name, Detail: reason, Evidence: DetectionEvidence{CPUWaitRatio: wv.Ratio, Victims: wv.Victims, Suspects: ranked}})
	w.proofs.startProof(ctx, now, &proof{tenant: s.t, reason: reason, signal: signalWait, victims: vt, waitFrom: w.readVictims(ctx, vt)}, before)
	return ranked
}

// victimRatio is a victim and how contended it is.
type victimRatio struct {
	id    string
	ratio float64
}

// firstNear is the first ranked suspect present with a victim near it
// (near), the victims near it and the worst of their ratios (1 when none
// is: then no suspect qualifies and vt is empty).
func firstNear(ranked []judge.Suspect, present map[string]sample, victims []victimRatio, near func(suspect, victim sense.Tenant) bool) (top judge.Suspect, s sample, vt []sense.Tenant, before float64) {
	before = 1
	for _, cand := range ranked {
		c, ok := present[cand.ID]
		if !ok {
			continue
		}
		for _, v := range victims {
			if p, ok := present[v.id]; ok && near(c.t, p.t) {
				vt = append(vt, p.t)
				before = max(before, v.ratio)
			}
		}
		if len(vt) > 0 {
			return cand, c, vt, before
		}
	}
	return judge.Suspect{}, sample{}, nil, 1
}

// suspectExcess is how far over its fair share a CPU-wait suspect must be:
// half again. The scheduler keeps tenants of equal weight fair over its
// own periods, not over every interval: a service that wakes often is let
// in ahead of a CPU-bound neighbour (wake-up preemption) and took 0.63 of a
// shared CPU against a fair half in a lab run, where the neighbour waited
// three times its usual. That is the price of sharing a CPU with a busy
// service, not crowding out: a tenant whose weight or threads take a CPU
// from its neighbours takes far more than that.
const suspectExcess = 1.5

// minWaitGain is the CPU a CPU-wait suspect must have gained since the
// waits began.
const minWaitGain = 0.1

// waitReason names the (worst) waiting tenant by name rather than cgroup.
func waitReason(wv judge.WaitVerdict, vt []sense.Tenant, present map[string]sample) string {
	w := wv.Victims[0]
	for _, v := range wv.Victims {
		if len(vt) > 0 && v.ID == vt[0].ID {
			w = v
			break
		}
	}
	name := w.ID
	if p, ok := present[w.ID]; ok {
		name = p.t.Name
	}
	return fmt.Sprintf("CPU wait: %s's work takes %.1f× its usual time (stretch %.2f, quiet %.2f)", name, w.Ratio, w.Stretch, w.Baseline)
}

// readVictims samples the victims' counters.
func (w *cpuWaitPolicy) readVictims(ctx context.Context, vt []sense.Tenant) map[string]sense.TenantStats {
	out := make(map[string]sense.TenantStats, len(vt))
	for _, t := range vt {
		if st, err := w.stats.Read(ctx, t, nil); err == nil {
			out[t.ID] = st
		}
	}
	return out
}

// proofRatio is the worst victim's CPU-wait ratio since the
// proof's previous sample, or -1 when no victim ran enough to tell.
func (w *cpuWaitPolicy) proofRatio(p *proof, now map[string]sense.TenantStats) float64 {
	at := func(st sense.TenantStats) time.Time { return st.At }
	return worstWindow(now, p.waitFrom, at, func(id string, from, st sense.TenantStats, dt float64) (float64, bool) {
		usage := (st.Usage - from.Usage).Seconds() / dt
		delay := (st.RunDelay - from.RunDelay).Seconds() / dt
		if _, ok := judge.Stretch(usage, delay); !ok {
			return 0, false
		}
		return w.wait.Ratio(id, usage, delay), true
	})
}

// worstWindow is the worst of the victims' ratios over the window since
// each one's previous reading (from, which it moves on to now), rated by
// rate; -1 when none could tell.
func worstWindow[T any](now, from map[string]T, at func(T) time.Time, rate func(id string, from, now T, seconds float64) (float64, bool)) float64 {
	worst := -1.0
	for id, cur := range now {
		prev, ok := from[id]
		from[id] = cur
		dt := at(cur).Sub(at(prev)).Seconds()
		if !ok || dt <= 0 {
			continue
		}
		if r, ok := rate(id, prev, cur, dt); ok {
			worst = max(worst, r)
		}
	}
	return worst
}
