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
)

// backoffKey keeps acquittals per signal: a tenant acquitted of polluting
// the memory bus may still be the one keeping its neighbour's CPU busy.
func backoffKey(signal, id string) string {
	if signal == signalProbe {
		return id
	}
	return signal + ":" + id
}

// judgeWait feeds this interval's CPU use and run delay to the
// CPU-wait judge. Tenants crosstalk is capping are left out: their waits
// are its own doing.
func (a *Agent) judgeWait(samples []sample, views []judge.TenantView) {
	if !*a.cfg.CPUWait.Enabled {
		return
	}
	ws := make([]judge.WaitSample, 0, len(samples))
	if a.waitCPUs == nil {
		a.waitCPUs = map[string]cpuset.Set{}
	}
	clear(a.waitCPUs)
	fair := fairShares(samples)
	a.waitFair = fair
	for _, s := range samples {
		if !s.fresh {
			continue
		}
		_, capped := a.throttled[s.t.ID]
		capped = capped || a.proof != nil && a.proof.tenant.ID == s.t.ID || a.held(s.t.ID, "")
		ws = append(ws, judge.WaitSample{ID: s.t.ID, Usage: s.waitUsage, Delay: s.waitDelay, Exclude: capped, Stale: !s.waitFresh, Fair: fair[s.t.ID]})
		a.waitCPUs[s.t.ID] = s.t.CPUs
	}
	a.lastWait = a.wait.Update(ws)
	a.waitSusp.Observe(judge.Verdict{Ratio: a.lastWait.Ratio}, views)
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

// waitRatio is the worst CPU-wait ratio this interval among the
// tenants sharing CPUs with t: what a throttle on t answers to.
func (a *Agent) waitRatio(t sense.Tenant) float64 {
	worst := 1.0
	for _, r := range a.lastWait.Ratings {
		if r.ID != t.ID && !a.waitCPUs[r.ID].Intersect(t.CPUs).IsEmpty() {
			worst = max(worst, r.Ratio)
		}
	}
	return worst
}

// maybeProveWait ranks suspects for CPU-wait contention (tenants
// active on the waiting tenants' CPUs, by activity and by how their CPU use
// tracks the waits) and, when the contention is persistent, starts a
// randomized proof on the top one, read on the victims' CPU wait. It
// returns the ranking for the state.
func (a *Agent) maybeProveWait(ctx context.Context, now time.Time, views []judge.TenantView, present map[string]sample) []judge.Suspect {
	wv := a.lastWait
	if !wv.Contended {
		return nil
	}
	var cpus cpuset.Set
	for _, v := range wv.Victims {
		cpus = cpus.Union(a.waitCPUs[v.ID])
	}
	usage := make(map[string]float64, len(views))
	for _, v := range views {
		usage[v.ID] = v.Usage
	}
	fair := a.waitFair
	// A suspect must have taken more CPU than before the waits began (a
	// tenant that waits may still be one, for its neighbours' waits), and
	// more than its fair share, as its victim must have had less: one that
	// takes no more than the scheduler would give it with everyone busy is
	// sharing, not crowding anyone out (capping it would relieve the
	// waiting tenant all the same, and a proof would convict it for a real
	// effect).
	ranked := a.waitSusp.RankOn(cpus, views, func(id string) bool {
		if f := fair[id]; f > 0 && usage[id] <= f {
			return true
		}
		if _, ok := a.throttled[id]; ok {
			return true
		}
		if a.held(id, "") { // held by another policy: its cap, not its doing
			return true
		}
		if a.wait.Gain(id, usage[id]) < minWaitGain {
			return true
		}
		return now.Before(a.backoff[backoffKey(signalWait, id)].until) || a.overBudget(id, now)
	})
	for i := range ranked {
		ranked[i].Reasons = append(ranked[i].Reasons, fmt.Sprintf("uses %.2f CPU more than before the waits began", a.wait.Gain(ranked[i].ID, usage[ranked[i].ID])))
	}
	if !wv.Persistent || len(ranked) == 0 || len(a.throttled) >= a.cfg.MaxThrottled || now.Sub(a.lastChange) < 2*a.cfg.Interval {
		return ranked
	}
	// A throttled tenant on these CPUs that can still be held tighter is
	// its controller's business, as with the probes.
	for _, t := range a.throttled {
		if t.signal == signalWait && !t.tenant.CPUs.Intersect(cpus).IsEmpty() && t.thr.Step > a.duty.FloorStep {
			return ranked
		}
	}
	// The best suspect with someone else waiting on its CPUs.
	var top judge.Suspect
	var s sample
	var vt []sense.Tenant
	before := 1.0
	for _, cand := range ranked {
		c, ok := present[cand.ID]
		if !ok {
			continue
		}
		for _, v := range wv.Victims {
			if p, ok := present[v.ID]; ok && v.ID != c.t.ID && !p.t.CPUs.Intersect(c.t.CPUs).IsEmpty() {
				vt = append(vt, p.t)
				before = max(before, v.Ratio)
			}
		}
		if len(vt) > 0 {
			top, s = cand, c
			break
		}
	}
	if len(vt) == 0 {
		return ranked
	}
	reason := fmt.Sprintf("%s; suspect score %.2f: %s", waitReason(wv, vt, present), top.Score, strings.Join(top.Reasons, "; "))
	a.journal(act.Event{Kind: "detection", Tenant: top.ID, Name: top.Name, Detail: reason, Evidence: DetectionEvidence{CPUWaitRatio: wv.Ratio, Victims: wv.Victims, Suspects: ranked}})
	a.startProof(ctx, now, &proof{tenant: s.t, reason: reason, signal: signalWait, victims: vt, waitFrom: a.readVictims(ctx, vt)}, before)
	return ranked
}

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
func (a *Agent) readVictims(ctx context.Context, vt []sense.Tenant) map[string]sense.TenantStats {
	out := make(map[string]sense.TenantStats, len(vt))
	for _, t := range vt {
		if st, err := a.d.Stats.Read(ctx, t, nil); err == nil {
			out[t.ID] = st
		}
	}
	return out
}

// waitProofRatio is the worst victim's CPU-wait ratio since the
// proof's previous sample, or -1 when no victim ran enough to tell.
func (a *Agent) waitProofRatio(p *proof, now map[string]sense.TenantStats) float64 {
	worst := -1.0
	for id, st := range now {
		from, ok := p.waitFrom[id]
		p.waitFrom[id] = st
		dt := st.At.Sub(from.At).Seconds()
		if !ok || dt <= 0 {
			continue
		}
		usage := (st.Usage - from.Usage).Seconds() / dt
		delay := (st.RunDelay - from.RunDelay).Seconds() / dt
		if _, ok := judge.Stretch(usage, delay); !ok {
			continue
		}
		worst = max(worst, a.wait.Ratio(id, usage, delay))
	}
	return worst
}

// unavailable handles an actuator that cannot act now (libvirtd
// restarting, a domain libvirt is still starting): the tenant is left alone
// for a few intervals, for every signal, and the journal says why.
func (a *Agent) unavailable(t sense.Tenant, err error) {
	a.log.Warn("cannot act on tenant now; retrying shortly", "tenant", t.Name, "err", err)
	a.journal(act.Event{Kind: "error", Tenant: t.ID, Name: t.Name, Detail: err.Error()})
	until := a.d.Now().Add(max(time.Second, 4*a.cfg.Interval))
	for _, k := range []string{backoffKey(signalProbe, t.ID), backoffKey(signalWait, t.ID)} {
		b := a.backoff[k]
		if b.until.Before(until) {
			b.until = until
		}
		a.backoff[k] = b
	}
}
