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

// counterSnapshots reads a tenant's counters at a proof's pace, apart
// from the interval's rates (sense.PerfCounters).
type counterSnapshots interface {
	Snapshot(id string, events ...string) (sense.PerfSnapshot, bool)
}

// cpiPolicy is the CPI policy, where a PMU counts each tenant's cycles
// and instructions: it judges each tenant's CPI against its own usual
// level (judge.CPI), ranks the tenants on the victims' L3 (by LLC misses,
// activity and correlation), and starts a proof read on the victims' CPI.
// The proof and the throttle that follows are shared with the other
// policies (one proof at a time on the host, one throttle per tenant),
// reached through proofs.
type cpiPolicy struct {
	// enabled: cpi.enabled, and counters that count cycles and
	// instructions; prove: cpi.prove and snapshots to read proofs with.
	enabled, prove bool
	snaps          counterSnapshots
	proofs         waitProofs
	cpi            *judge.CPI
	susp           *judge.Suspects
	// domain is each L3 domain's CPUs (the agent's), cpus the CPUs of the
	// tenants judged this interval, last its verdict.
	domain map[int]cpuset.Set
	cpus   map[string]cpuset.Set
	last   judge.CPIVerdict
	// surveying: the start-up survey is yet to run or under way (see
	// maybeSurvey); queue is the tenants it has yet to cap (nil: not
	// chosen yet).
	surveying bool
	queue     []string
}

func newCPIPolicy(cfg Config, pmu bool, snaps counterSnapshots, domain map[int]cpuset.Set, proofs waitProofs) *cpiPolicy {
	enabled, prove := *cfg.CPI.Enabled && pmu, *cfg.CPI.Prove && snaps != nil
	return &cpiPolicy{
		enabled: enabled, prove: prove, snaps: snaps, proofs: proofs,
		cpi: judge.NewCPI(cfg.CPIThresholds()), susp: judge.NewSuspects(cfg.Judge.Window),
		domain: domain, cpus: map[string]cpuset.Set{}, last: judge.CPIVerdict{Ratio: 1},
		surveying: enabled && prove && *cfg.CPI.Survey && !cfg.DryRun,
	}
}

// reconfigure takes what of cfg may change while the agent runs.
func (c *cpiPolicy) reconfigure(cfg Config) {
	c.cpi.SetThresholds(cfg.CPIThresholds())
	c.prove = *cfg.CPI.Prove && c.snaps != nil
}

// cpiKeyPrefix marks a tenant's CPI baseline among the saved baselines
// (the probes' are "DOMAIN/KIND").
const cpiKeyPrefix = "cpi:"

// baselines are the tenants' CPI baselines, keyed for saving beside the
// probes'.
func (c *cpiPolicy) baselines() map[string]judge.Baseline {
	out := map[string]judge.Baseline{}
	for id, b := range c.cpi.Baselines() {
		out[cpiKeyPrefix+id] = b
	}
	return out
}

// restore imports the CPI baselines among saved ones: an agent restarted
// while a polluter runs judges its victims against their CPI from before,
// not against the polluted one it would learn.
func (c *cpiPolicy) restore(saved map[string]judge.Baseline) {
	mine := map[string]judge.Baseline{}
	for k, b := range saved {
		if id, ok := strings.CutPrefix(k, cpiKeyPrefix); ok {
			mine[id] = b
		}
	}
	c.cpi.Restore(mine)
	if len(mine) > 0 {
		// Baselines from before a restart: the usual is known.
		c.surveying = false
	}
}

// verdict is this interval's CPI verdict.
func (c *cpiPolicy) verdict() judge.CPIVerdict { return c.last }

// observe feeds this interval's counters to the CPI judge. Tenants
// crosstalk is capping are left out: their CPI is its own doing.
func (c *cpiPolicy) observe(samples []sample, views []judge.TenantView) {
	if !c.enabled {
		return
	}
	cs := make([]judge.CPISample, 0, len(samples))
	clear(c.cpus)
	for _, s := range samples {
		// Every present tenant is passed, counted or not yet (its rates
		// take two readings): the judge forgets only those gone, not a
		// baseline restored from before a restart.
		misses, counted := s.counters[sense.EventLLCMisses]
		cs = append(cs, judge.CPISample{ID: s.t.ID, Cycles: s.counters[sense.EventCycles], Instructions: s.counters[sense.EventInstructions],
			Usage: s.usage, LLCMisses: misses, MissesCounted: counted && s.fresh, Exclude: c.proofs.capped(s.t.ID)})
		if !s.fresh {
			cs[len(cs)-1].Cycles = 0 // no rates yet: nothing to judge
		}
		c.cpus[s.t.ID] = s.t.CPUs
	}
	c.last = c.cpi.Update(cs)
	c.susp.Observe(judge.Verdict{Ratio: c.last.Ratio}, views)
}

// suspect reports whether a tenant's counters leave it a CPI suspect:
// one the PMU or the kernel saw take bus locks, whatever its misses; else
// one that misses the LLC at least minSuspectMisses times a second and
// changed with the episode (judge.CPI.Onset). Where the PMU counts no
// LLC misses (Zen 1), nothing tells them apart.
func (c *cpiPolicy) suspect(v judge.TenantView) bool {
	if v.Counters[sense.EventBusLocks] > 0 || v.KernelBusLocks > 0 {
		return true
	}
	m, ok := v.Counters[sense.EventLLCMisses]
	return !ok || m >= minSuspectMisses && c.cpi.Onset(v.ID, m)
}

// l3Of is the CPUs of the L3 domains cpus touch.
func (c *cpiPolicy) l3Of(cpus cpuset.Set) cpuset.Set {
	var out cpuset.Set
	for _, d := range domainsIn(c.domain, cpus) {
		out = out.Union(c.domain[d])
	}
	return out
}

// ratio is the worst CPI ratio this interval among the other tenants on
// t's L3: what a throttle on t answers to.
func (c *cpiPolicy) ratio(t sense.Tenant) float64 {
	near := c.l3Of(t.CPUs)
	worst := 1.0
	for _, r := range c.last.Ratings {
		if r.ID != t.ID && !c.cpus[r.ID].Intersect(near).IsEmpty() {
			worst = max(worst, r.Ratio)
		}
	}
	return worst
}

// minSuspectMisses is the LLC misses per second below which a tenant is
// no CPI suspect where the PMU counts them: ten million lines a second
// (640 MB/s) replace a few-MiB L3 share in milliseconds, what evicting a
// neighbour's working set between its reuses takes; fewer take nobody's
// cache or bandwidth (a cache-friendly busy loop misses thousands a
// second, a streamer a hundred million). In the simulator a victim freed
// of its polluter, missing 1.5 million a second, raised a light cache
// user's CPI 1.3×, and capping it lowered that 1.2×: a real effect, but
// of a tenant running its own working set, not of a polluter. A tenant
// the PMU or the kernel saw take bus locks is a suspect whatever its
// misses.
const minSuspectMisses = 1e7

// maybeProve ranks the suspects for the CPI victims (tenants on their L3,
// not themselves victims) and, when the contention is persistent, starts
// a randomized proof of the top one, read on the victims' CPI. It returns
// the ranking for the state.
func (c *cpiPolicy) maybeProve(ctx context.Context, now time.Time, views []judge.TenantView, present map[string]sample) []judge.Suspect {
	if c.maybeSurvey(ctx, now, views, present) {
		return nil
	}
	v := c.last
	if !c.enabled || !v.Contended {
		return nil
	}
	victim := map[string]bool{}
	var near cpuset.Set
	for _, r := range v.Victims {
		victim[r.ID] = true
		near = near.Union(c.l3Of(c.cpus[r.ID]))
	}
	byID := make(map[string]judge.TenantView, len(views))
	for _, tv := range views {
		byID[tv.ID] = tv
	}
	ranked := c.susp.RankOn(near, views, func(id string) bool {
		// A victim is not its own suspect (its misses are its loss); a
		// capped tenant's CPI and misses are crosstalk's doing.
		return victim[id] || !c.suspect(byID[id]) || c.proofs.capped(id) || c.proofs.resting(signalCPI, id, now)
	})
	if !c.prove || !v.Persistent || len(ranked) == 0 || !c.proofs.mayProve(now) {
		return ranked
	}
	// A throttled tenant on this L3 that can still be held tighter is its
	// controller's business.
	if c.proofs.tightening(signalCPI, near) {
		return ranked
	}
	victims := make([]victimRatio, 0, len(v.Victims))
	for _, r := range v.Victims {
		victims = append(victims, victimRatio{r.ID, r.Ratio})
	}
	top, s, vt, before := firstNear(ranked, present, victims, func(suspect, victim sense.Tenant) bool {
		return !victim.CPUs.Intersect(c.l3Of(suspect.CPUs)).IsEmpty()
	})
	if len(vt) == 0 {
		return ranked
	}
	w := v.Victims[0]
	name := w.ID
	if p, ok := present[w.ID]; ok {
		name = p.t.Name
	}
	reason := fmt.Sprintf("CPI: %s runs at %.2f cycles an instruction, %.1f× its usual %.2f; suspect score %.2f: %s",
		name, w.CPI, w.Ratio, w.Baseline, top.Score, strings.Join(top.Reasons, "; "))
	c.proofs.journal(act.Event{Kind: "detection", Tenant: top.ID, Name: top.Name, Detail: reason,
		Evidence: DetectionEvidence{CPIRatio: v.Ratio, CPIVictims: v.Victims, Suspects: ranked}})
	c.proofs.startProof(ctx, now, &proof{tenant: s.t, reason: reason, signal: signalCPI, victims: vt, cpiFrom: c.snapVictims(vt)}, before)
	return ranked
}

// cpiEvents are the counters a proof reads.
var cpiEvents = []string{sense.EventCycles, sense.EventInstructions}

// snapVictims reads the victims' cycles and instructions now.
func (c *cpiPolicy) snapVictims(vt []sense.Tenant) map[string]sense.PerfSnapshot {
	out := make(map[string]sense.PerfSnapshot, len(vt))
	if c.snaps == nil {
		return out
	}
	for _, t := range vt {
		if snap, ok := c.snaps.Snapshot(t.ID, cpiEvents...); ok {
			out[t.ID] = snap
		}
	}
	return out
}

// proofRatio is the worst victim's CPI ratio since the proof's previous
// reading, or -1 when no victim did enough work in between to tell.
func (c *cpiPolicy) proofRatio(p *proof, now map[string]sense.PerfSnapshot) float64 {
	at := func(s sense.PerfSnapshot) time.Time { return s.At }
	return worstWindow(now, p.cpiFrom, at, func(id string, from, snap sense.PerfSnapshot, dt float64) (float64, bool) {
		d := snap.Since(from)
		cpi, ok := judge.WindowCPI(d[sense.EventCycles], d[sense.EventInstructions], dt)
		if !ok {
			return 0, false
		}
		return c.cpi.Ratio(id, cpi), true
	})
}
