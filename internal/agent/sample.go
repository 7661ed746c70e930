package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// sample is one interval's view of one tenant.
type sample struct {
	t        sense.Tenant
	usage    float64
	thrRatio float64
	heldBack bool // its CFS quota held it back (sense.TenantRates.HeldBack)
	psi      float64
	delay    float64
	counters map[string]float64
	fresh    bool // has rates (seen before)
	// dt is the seconds the rates cover (since the tenant's last sample);
	// stats are its cumulative readings, which the metrics export as counters.
	dt    float64
	stats sense.TenantStats
	// waitUsage and waitDelay are CPU use and run delay over one window
	// (since the run delay was last read: an interval, or a turn of up to
	// 5 s on a busy host), for the CPU-wait judge's stretch; waitFresh says
	// the window ended this interval.
	waitUsage, waitDelay float64
	waitFresh            bool
	// kernelBusLocks is how many of the kernel's bus-lock reports named
	// its threads in the last kernelReportWindow; kernelBusLocksTotal
	// since it was first seen (kernelbuslocks.go).
	kernelBusLocks      int
	kernelBusLocksTotal float64
}

// busyOrNew says the tenant used judge.MinUsage of a CPU or more over its
// last rates, or is new (no rates yet): it may pollute now.
func (s sample) busyOrNew() bool { return !s.fresh || s.usage >= judge.MinUsage }

// runDelayBudget is how many threads' run delay (a /proc/TID/schedstat
// each) the agent reads per interval before it reads tenants in turns.
const runDelayBudget = 400

// maxRunDelayEvery bounds the turn: every tenant's run delay at least this often.
const maxRunDelayEvery = 5 * time.Second

// budgetRunDelay sets how often each tenant's run delay is read: every
// interval while the host's threads fit in the budget (a few VMs: the CPU-
// wait signal stays an interval's), else in turns long enough to stay
// within it, up to every 5 s (a thousand tenants).
func (a *Agent) budgetRunDelay(tenants []sense.Tenant) {
	r, ok := a.d.Stats.(interface{ SetRunDelayEvery(time.Duration) })
	if !ok {
		return
	}
	n := 0
	for _, t := range tenants {
		n += len(t.Threads)
	}
	every := time.Duration(0) // every read
	if n > runDelayBudget {
		every = min(maxRunDelayEvery, time.Duration(int64(a.cfg.Interval)*int64(n)/runDelayBudget))
	}
	r.SetRunDelayEvery(every)
}

// viewsOf is what the judges see of the tenants with rates this interval.
func (a *Agent) viewsOf(samples []sample) []judge.TenantView {
	views := make([]judge.TenantView, 0, len(samples))
	for _, s := range samples {
		if !s.fresh {
			continue
		}
		views = append(views, judge.TenantView{ID: s.t.ID, Name: s.t.Name, CPUs: s.t.CPUs, Usage: s.usage, Counters: s.counters, KernelBusLocks: s.kernelBusLocks, Protected: a.cfg.protects(s.t)})
	}
	return views
}

func presentOf(samples []sample) map[string]sample {
	present := make(map[string]sample, len(samples))
	for _, s := range samples {
		present[s.t.ID] = s
	}
	return present
}

// sampleTenants reads every tenant's counters and turns them into rates.
func (a *Agent) sampleTenants(ctx context.Context, tenants []sense.Tenant) []sample {
	out := make([]sample, 0, len(tenants))
	seen := map[string]bool{}
	// One attempt over all tenants: it fails with the first tenant that
	// could not be read for any reason but having vanished.
	start := time.Now()
	var failed error
	defer func() { a.health.record(sensorTenantStats, time.Since(start), failed) }()
	for _, t := range tenants {
		var prev *sense.TenantStats
		if p, ok := a.prev[t.ID]; ok {
			prev = &p
		}
		st, err := a.d.Stats.Read(ctx, t, prev)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) && failed == nil {
				failed = fmt.Errorf("tenant %s: %w", t.ID, err)
			}
			continue // vanished mid-sample, or unreadable this time
		}
		seen[t.ID] = true
		s := sample{t: t, stats: st}
		if p, ok := a.prev[t.ID]; ok {
			if r, ok := sense.Rates(p, st); ok {
				s.fresh, s.dt = true, r.Span
				s.usage, s.thrRatio, s.delay, s.psi = r.Usage, r.Throttled, r.RunDelay, r.PSI
				s.heldBack = r.HeldBack
			}
		}
		if st.EndsWaitWindow() {
			if m, ok := a.marks[t.ID]; ok {
				if w, ok := sense.WaitSince(m, st); ok {
					s.waitUsage, s.waitDelay, s.waitFresh = w.Usage, w.Delay, true
				}
			}
			a.marks[t.ID] = st.Mark()
		}
		a.prev[t.ID] = st
		out = append(out, s)
	}
	for id := range a.prev {
		if !seen[id] {
			delete(a.prev, id)
		}
	}
	for id := range a.marks {
		if !seen[id] {
			delete(a.marks, id)
		}
	}
	return out
}

// priority orders tenants for the perf fd budget: throttled and suspected
// first, then by CPU use.
func (a *Agent) priority(samples []sample) []sense.Tenant {
	s := slices.Clone(samples)
	rank := func(x sample) int {
		if _, ok := a.throttles.throttled[x.t.ID]; ok {
			return 0
		}
		if a.prover.proof != nil && a.prover.proof.tenant.ID == x.t.ID {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(s, func(x, y sample) int {
		return cmp.Or(cmp.Compare(rank(x), rank(y)), cmp.Compare(y.usage, x.usage))
	})
	out := make([]sense.Tenant, len(s))
	for i := range s {
		out[i] = s[i].t
	}
	return out
}
