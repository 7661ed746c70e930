package agent

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// The CPI policy's start-up survey. A tenant's CPI baseline is learned
// from what it runs at, so a polluter already running when the agent
// starts is its victims' usual, and no victim ever reads slowed: in the
// simulator, on hosts with a PMU, no LLC thrasher that ran from the start
// was ever convicted (0 of 122 runs), against 19 of 51 that started late.
// Once, at start, each tenant that misses the LLC as a polluter does is
// capped for a moment — one capped slot and one freed, as a proof's trial
// — while its neighbours on the L3 are read; a neighbour whose CPI its
// cap lowered by the CPI threshold or more starts its baseline at its CPI
// with the suspect capped (judge.CPI.Seed). The judge then sees the
// episode at once, and the usual ranking and proof decide who causes it:
// the survey convicts nobody.

// cpiSurveyMax bounds the tenants the survey caps: the heaviest LLC
// missers first.
const cpiSurveyMax = 3

// count adds the window since the neighbours' last snapshots to what each
// counted in the slot's cap state (before proofRatio moves the snapshots
// on).
func (p *proof) count(now map[string]sense.PerfSnapshot) {
	if p.counted == nil {
		p.counted = map[string]*[2]cpiWindow{}
	}
	state := 0
	if p.capped {
		state = 1
	}
	for id, cur := range now {
		prev, ok := p.cpiFrom[id]
		dt := cur.At.Sub(prev.At).Seconds()
		if !ok || dt <= 0 {
			continue
		}
		d := cur.Since(prev)
		w := p.counted[id]
		if w == nil {
			w = &[2]cpiWindow{}
			p.counted[id] = w
		}
		w[state].cycles += d[sense.EventCycles]
		w[state].instructions += d[sense.EventInstructions]
		w[state].seconds += dt
	}
}

// endSurvey frees the surveyed tenant and starts the baselines of the
// neighbours its cap relieved.
func (pr *prover) endSurvey(ctx context.Context, now time.Time, p *proof) {
	pr.uncap(ctx, now, p, "start-up CPI survey done")
	ratio := pr.cpi.cpi.Thresholds().Strong
	var seeded []string
	for _, v := range p.victims {
		w := p.counted[v.ID]
		if w == nil {
			continue
		}
		freed, ok1 := judge.WindowCPI(w[0].cycles, w[0].instructions, w[0].seconds)
		capped, ok2 := judge.WindowCPI(w[1].cycles, w[1].instructions, w[1].seconds)
		if !ok1 || !ok2 || freed < ratio*capped {
			continue
		}
		pr.cpi.cpi.Seed(v.ID, capped)
		seeded = append(seeded, fmt.Sprintf("%s %.2f× (%.2f cycles an instruction with it capped, %.2f free)", v.Name, freed/capped, capped, freed))
	}
	detail := "start-up CPI survey: capping it moved no neighbour's CPI by " + fmt.Sprintf("%.2g×", ratio)
	if len(seeded) > 0 {
		detail = "start-up CPI survey: its cap lowered its neighbours' CPI, whose usual starts there: " + strings.Join(seeded, "; ")
	}
	pr.rec.journal(act.Event{Kind: "survey", Tenant: p.tenant.ID, Name: p.tenant.Name, Detail: detail})
	pr.log.Info("start-up CPI survey", "tenant", p.tenant.Name, "neighbours", len(p.victims), "seeded", len(seeded))
}

// maybeSurvey starts the next tenant's start-up survey, on intervals with
// counters and no proof under way, and reports whether one started.
func (c *cpiPolicy) maybeSurvey(ctx context.Context, now time.Time, views []judge.TenantView, present map[string]sample) bool {
	if !c.surveying {
		return false
	}
	if c.queue == nil {
		var heavy []judge.TenantView
		counted := false
		for _, v := range views {
			m, ok := v.Counters[sense.EventLLCMisses]
			counted = counted || ok
			if ok && m >= minSuspectMisses && v.Usage >= judge.MinUsage && !v.Protected {
				heavy = append(heavy, v)
			}
		}
		if !counted {
			return false // no counters yet
		}
		slices.SortStableFunc(heavy, func(a, b judge.TenantView) int {
			return cmp.Compare(b.Counters[sense.EventLLCMisses], a.Counters[sense.EventLLCMisses])
		})
		c.queue = []string{}
		for _, v := range heavy[:min(len(heavy), cpiSurveyMax)] {
			c.queue = append(c.queue, v.ID)
		}
	}
	for len(c.queue) > 0 {
		id := c.queue[0]
		c.queue = c.queue[1:]
		s, ok := present[id]
		if !ok || c.proofs.capped(id) {
			continue
		}
		near := c.l3Of(s.t.CPUs)
		var vt []sense.Tenant
		for _, v := range views {
			if v.ID != id && v.Usage >= judge.MinUsage && !v.CPUs.Intersect(near).IsEmpty() && !c.proofs.capped(v.ID) {
				vt = append(vt, present[v.ID].t)
			}
		}
		if len(vt) == 0 {
			continue
		}
		reason := fmt.Sprintf("it misses the LLC %.3g times a second, beside %d neighbours on its L3", s.counters[sense.EventLLCMisses], len(vt))
		c.proofs.startProof(ctx, now, &proof{tenant: s.t, reason: reason, signal: signalCPI, survey: true, victims: vt, cpiFrom: c.snapVictims(vt)}, 2)
		return true
	}
	c.surveying = false
	return false
}
