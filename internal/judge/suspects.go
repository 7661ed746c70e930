package judge

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/humanize"
)

// TenantView is what the judge needs to know about a tenant this interval.
type TenantView struct {
	ID       string
	Name     string
	CPUs     cpuset.Set
	Usage    float64            // CPU time per second (cores)
	Counters map[string]float64 // perf event rates per second; nil when not counted
	// KernelBusLocks is how many of the kernel's bus-lock reports named its
	// threads lately (split_lock_detect/bus_lock_detect in warn mode).
	KernelBusLocks int
	Protected      bool
}

// Suspect is a tenant ranked as a possible polluter, with the evidence.
type Suspect struct {
	ID      string
	Name    string
	Score   float64
	Reasons []string
	// Evidence says something beyond its CPU use points at it: its use
	// tracks the contention, a PMU counts a large share of the host's bus
	// locks or LLC misses, or the kernel reported its bus locks.
	Evidence bool `json:",omitempty"`
}

// Suspects ranks tenants by how likely they are to cause the contention:
// by counters where a PMU counts them (bus locks, LLC misses against the
// host's total, as in Alita and Kyoto), and everywhere by two kinds of
// evidence a PMU-less host still has:
//
//   - activity: a tenant must use CPU on the contended L3 to pollute it;
//   - correlation: its CPU use rises and falls with the contention (CPI²),
//     which singles out a polluter that starts after its neighbours.
//
// Ranking only orders the perturbation proofs; it never convicts anyone.
// (Which CPU's probe reads worst is no evidence: on bare metal the polluter's
// own CPU reads quiet while the probe pauses it, but in a VM the host's
// split-lock mitigation stalls the polluter's vCPU and its probe reads worst.)
type Suspects struct {
	window int
	usage  map[string][]float64
	ratio  []float64
}

// NewSuspects keeps window intervals of history for the correlation.
func NewSuspects(window int) *Suspects {
	if window < 4 {
		window = 16
	}
	return &Suspects{window: window, usage: map[string][]float64{}}
}

// Observe records an interval: every tenant's CPU use and the probes' ratios.
func (s *Suspects) Observe(v Verdict, tenants []TenantView) {
	s.ratio = appendWindow(s.ratio, v.Ratio, s.window)
	seen := map[string]bool{}
	for _, t := range tenants {
		seen[t.ID] = true
		h := s.usage[t.ID]
		// A tenant seen for the first time had no use before: that is its onset.
		if h == nil && len(s.ratio) > 1 {
			h = make([]float64, len(s.ratio)-1)
		}
		s.usage[t.ID] = appendWindow(h, t.Usage, s.window)
	}
	for id := range s.usage {
		if !seen[id] {
			delete(s.usage, id)
		}
	}
}

func appendWindow(h []float64, x float64, n int) []float64 {
	h = append(h, x)
	if len(h) > n {
		h = h[len(h)-n:]
	}
	return h
}

// kernelReportScore is what the kernel naming a tenant's thread for a bus
// lock adds to its score: as much as a PMU counting all the host's bus
// locks against it, and more than activity and correlation give a tenant
// on fewer than three busy CPUs.
const kernelReportScore = 3

// MinUsage is the CPU use (cores) below which a tenant cannot be the
// polluter.
const MinUsage = 0.05

// Rank scores the candidates for the contended domains of v, best first.
// skip excludes tenants (protected, in backoff, already throttled).
func (s *Suspects) Rank(v Verdict, tenants []TenantView, domainCPUs map[int]cpuset.Set, skip func(id string) bool) []Suspect {
	var contended cpuset.Set
	for _, d := range v.Domains {
		contended = contended.Union(domainCPUs[d])
	}
	return s.RankOn(contended, tenants, skip)
}

// RankOn scores the candidates active on the contended CPUs, best first:
// Rank for the probes' L3 domains, and for CPU-wait contention the CPUs of
// the tenants that wait.
func (s *Suspects) RankOn(contended cpuset.Set, tenants []TenantView, skip func(id string) bool) []Suspect {
	totals := map[string]float64{}
	for _, t := range tenants {
		for k, x := range t.Counters {
			totals[k] += x
		}
	}
	var out []Suspect
	for _, t := range tenants {
		if t.Protected || (skip != nil && skip(t.ID)) {
			continue
		}
		on := t.CPUs.Intersect(contended)
		if on.IsEmpty() || t.CPUs.IsEmpty() {
			continue
		}
		active := t.Usage * float64(on.Len()) / float64(t.CPUs.Len())
		if active < MinUsage {
			continue
		}
		var reasons []string
		reasons = append(reasons, fmt.Sprintf("uses %.2f CPU on the contended CPUs", active))
		evidence := 0.1
		marked := false

		if c := correlation(s.usage[t.ID], s.ratio); c > 0 {
			evidence += c
			if c > 0.5 {
				marked = true
				reasons = append(reasons, fmt.Sprintf("its CPU use tracks the contention (r=%.2f)", c))
			}
		}
		score := active * evidence
		for _, ev := range []struct {
			name, what string
			min        float64
		}{{"bus_locks", "bus locks", 1000}, {"llc_misses", "LLC misses", 1e6}} {
			x, tot := t.Counters[ev.name], totals[ev.name]
			if tot >= ev.min && x > 0 {
				share := x / tot
				score += 3 * share
				if share > 0.3 {
					marked = true
					reasons = append(reasons, fmt.Sprintf("%s %s/s, %.0f%% of the host's", ev.what, humanize.SI(x, ""), 100*share))
				}
			}
		}
		if t.KernelBusLocks > 0 {
			// The kernel saw its threads take bus locks: no other tenant's
			// CPU use or correlation outweighs that. It orders the proofs
			// only; the proof still decides.
			score += kernelReportScore
			marked = true
			reasons = append(reasons, fmt.Sprintf("the kernel reported %d bus lock(s) by its threads lately", t.KernelBusLocks))
		}
		out = append(out, Suspect{ID: t.ID, Name: t.Name, Score: score, Reasons: reasons, Evidence: marked})
	}
	slices.SortStableFunc(out, func(a, b Suspect) int {
		switch {
		case a.Score > b.Score:
			return -1
		case a.Score < b.Score:
			return 1
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// correlation is Pearson's r of two equally long series (aligned at their
// ends); 0 when either is flat or too short.
func correlation(a, b []float64) float64 {
	n := min(len(a), len(b))
	if n < 2 {
		return 0
	}
	a, b = a[len(a)-n:], b[len(b)-n:]
	var ma, mb float64
	for i := range n {
		ma += a[i]
		mb += b[i]
	}
	ma /= float64(n)
	mb /= float64(n)
	var cov, va, vb float64
	for i := range n {
		da, db := a[i]-ma, b[i]-mb
		cov += da * db
		va += da * da
		vb += db * db
	}
	if va < 1e-9 || vb < 1e-9 {
		return 0
	}
	return cov / math.Sqrt(va*vb)
}
