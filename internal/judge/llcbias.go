package judge

// Alita's bias LLC isolation (SC20; the released lib/mem_contention_iso.h
// and test_mem_contention_iso.cpp), per L3 domain:
//
//   - each tenant's fair share of the LLC is its part of the domain's CPUs:
//     share = LLC size × tenant CPUs / domain CPUs;
//   - unfairness is the Bhattacharyya coefficient between the share
//     distribution and the occupancy distribution,
//     BC = Σ sqrt(share_i/Σshare × occ_i/Σocc), 1 when occupancy follows the
//     shares exactly, smaller the more it is biased;
//   - both BC and each tenant's occupancy are smoothed over the last six
//     intervals with weights 0.1 0.1 0.1 0.2 0.2 0.3 (newest last);
//   - when the smoothed BC is ≤ 0.95 and the domain is busy (its tenants
//     occupy at least 10% of it), the abuser — the largest smoothed
//     occupancy above its share — alone gets a class with a small
//     contiguous way mask at one end of the cache:
//     ceil(ways × tenant CPUs / domain CPUs) + 1 ways;
//   - there are two such slots, one at each end; with both taken, the
//     holder throttled longer (at least 60 s) is released for the newcomer;
//   - when fairness is back, every isolated tenant gets one way more per
//     relax period (30 s) until it has the whole cache again — then it is
//     released; a tenant that stops (leaves the input) is released at once.
//
// Where miss traffic is measured (resctrl MBM, or PMU LLC misses × 64 B),
// crosstalk refines who is hurt and who is to blame, because occupancy
// alone cannot tell the polluter from its victim: a tenant above its
// share may be using cache nobody else wants, or may have held it first
// while a streamer ramps up (the smoothed occupancies lag), and the
// simulator saw Alita's rule isolate the victim both ways. So, when every
// tenant of the domain has a miss rate:
//
//   - shares are among the tenants present in the domain (their CPUs, at
//     most the domain's): cache that idle CPUs would be entitled to is
//     theirs to share;
//   - the domain is contended when the cache is full (busy) and a tenant is
//     deprived: it holds under DeprivedFraction (75%) of its share and its
//     misses per CPU reach DeprivedMissBytesPerSec, so it would hit more
//     with more cache — unless it misses the most of all: a streamer that
//     has just started is under its share and misses heavily, but lines
//     without reuse are no loss to it; the top misser is the suspect, not
//     the victim. This replaces the BC threshold, which is blind to
//     such cases: a victim holding 4.8 MiB of its 11 MiB share next to two
//     streamers with 14 MiB each is BC 0.975, "fair", at 1.7× its solo
//     time. A full cache that nobody below its share misses is spare
//     capacity in use, not contention;
//   - the abuser is the tenant above its share (now, and smoothed) that
//     misses the most (it inserts the most lines, evicting the others'),
//     not the one with the largest excess;
//   - isolated tenants relax (one way per RelaxPeriod) while nobody is
//     deprived.
//
// BC is still computed and reported either way.
//
// Deviations, on purpose: Alita relaxes when the smoothed BC reaches
// 0.95 + 0.05 = 1.00, which a BC only reaches at perfect fairness (so its
// classes would, in practice, never relax); RelaxBC defaults to 0.98.
// Alita's busy test also asked for socket bandwidth above a threshold, but
// its code fed it the VMs' CPU count instead of a bandwidth; occupancy
// alone decides here. When the tenants' CPUs add up to more than the
// domain's (unpinned containers all see every CPU), shares are divided by
// that sum instead, as Alita's nr_effective_cpu does, so they still add up
// to the LLC.

import (
	"math"
	"slices"
	"sort"
	"time"
)

// BiasConfig are the bias-isolation parameters; AlitaBias gives Alita's.
type BiasConfig struct {
	ThrottleBC    float64       // isolate when the smoothed BC is ≤ this
	RelaxBC       float64       // relax when the smoothed BC is ≥ this
	BusyFraction  float64       // the domain is busy when its tenants occupy ≥ this part of it
	Weights       []float64     // smoothing window, oldest first
	RelaxPeriod   time.Duration // at least this long between one tenant's relax steps
	ReplacePeriod time.Duration // a slot's holder this long isolated may make way for a new abuser
	// DeprivedMissBytesPerSec per CPU: a tenant under its share missing at
	// least this much wants more cache (used where misses are measured;
	// default 50 MB/s per CPU, under what a cache-resident tenant squeezed
	// out of the LLC misses, far over what a compute-bound one does).
	DeprivedMissBytesPerSec float64
	// DeprivedFraction: under this part of its share a missing tenant is
	// deprived (default 0.75).
	DeprivedFraction float64
}

// AlitaBias is Alita's configuration (test_mem_contention_iso.cpp:
// llc_thrtl_bc 0.95, llc_thrtl_pct 0.1, llc_relax_period 30,
// llc_thrtl_period 60, the six-interval weights), with RelaxBC 0.98.
func AlitaBias() BiasConfig {
	return BiasConfig{
		ThrottleBC: 0.95, RelaxBC: 0.98, BusyFraction: 0.10,
		Weights:     []float64{0.1, 0.1, 0.1, 0.2, 0.2, 0.3},
		RelaxPeriod: 30 * time.Second, ReplacePeriod: 60 * time.Second,
	}
}

// BiasTenant is one tenant's presence in an L3 domain.
type BiasTenant struct {
	ID string
	// CPUs is the tenant's entitlement in the domain: its cpuset's CPUs
	// there (a fraction for a quota-limited tenant is fine).
	CPUs           float64
	OccupancyBytes uint64
	// MissBytesPerSec is the traffic its LLC misses cause (MBM total bytes,
	// or LLC misses × line size); HasMisses says it was measured.
	MissBytesPerSec float64
	HasMisses       bool
}

// BiasDomain is one L3 domain as seen this interval.
type BiasDomain struct {
	ID        int
	SizeBytes uint64
	Ways      int     // ways in cbm_mask
	CPUs      float64 // CPUs sharing the L3
	Tenants   []BiasTenant
}

// BiasInput is one interval's observation.
type BiasInput struct {
	Now     time.Time
	Domains []BiasDomain
}

// CacheAction tells the CAT actuator what a tenant's class should be in a
// domain: Ways ways at the end of slot Slot (0 or 1; the actuator maps slot
// 0 to the end away from other tools' masks, slot 1 to the other end), or,
// with Release, the whole cache again (the actuator removes the class when
// nothing is left restricted).
type CacheAction struct {
	Tenant  string `json:"tenant"`
	Domain  int    `json:"domain"`
	Ways    int    `json:"ways"`
	Slot    int    `json:"slot"`
	Release bool   `json:"release,omitempty"`
	Reason  string `json:"reason"`
}

// BiasVerdict is a domain's state after a Step.
type BiasVerdict struct {
	Domain   int     `json:"domain"`
	BC       float64 `json:"bc"`          // this interval's
	Smoothed float64 `json:"bc_smoothed"` // over the window
	Busy     bool    `json:"busy"`
	Abuser   string  `json:"abuser,omitempty"`
	// Isolated lists the slot holders (slot 0 first; "" for a free slot).
	Isolated [2]string `json:"isolated"`
}

// BiasResult is what a Step decided.
type BiasResult struct {
	Actions  []CacheAction
	Verdicts []BiasVerdict
}

// BiasIsolation is Alita's LLC bias isolation. Not safe for concurrent use;
// no I/O: its state is the smoothing windows and who holds which slot.
type BiasIsolation struct {
	cfg     BiasConfig
	domains map[int]*biasDomain
}

type biasDomain struct {
	bcs   []float64
	usage map[string][]float64
	slots [2]*biasSlot
}

type biasSlot struct {
	tenant    string
	ways      int
	since     time.Time
	lastRelax time.Time
}

// NewBiasIsolation returns the judge; zero fields of cfg take Alita's values.
func NewBiasIsolation(cfg BiasConfig) *BiasIsolation {
	d := AlitaBias()
	if cfg.ThrottleBC == 0 {
		cfg.ThrottleBC = d.ThrottleBC
	}
	if cfg.RelaxBC == 0 {
		cfg.RelaxBC = d.RelaxBC
	}
	if cfg.BusyFraction == 0 {
		cfg.BusyFraction = d.BusyFraction
	}
	if len(cfg.Weights) == 0 {
		cfg.Weights = d.Weights
	}
	if cfg.RelaxPeriod == 0 {
		cfg.RelaxPeriod = d.RelaxPeriod
	}
	if cfg.ReplacePeriod == 0 {
		cfg.ReplacePeriod = d.ReplacePeriod
	}
	if cfg.DeprivedMissBytesPerSec == 0 {
		cfg.DeprivedMissBytesPerSec = 50e6
	}
	if cfg.DeprivedFraction == 0 {
		cfg.DeprivedFraction = 0.75
	}
	return &BiasIsolation{cfg: cfg, domains: map[int]*biasDomain{}}
}

// Shares returns each tenant's fair share of the domain's LLC in bytes.
func (d BiasDomain) Shares() []float64 {
	var sum float64
	for _, t := range d.Tenants {
		sum += t.CPUs
	}
	div := math.Max(d.CPUs, sum)
	out := make([]float64, len(d.Tenants))
	if div <= 0 {
		return out
	}
	for i, t := range d.Tenants {
		out[i] = float64(d.SizeBytes) * t.CPUs / div
	}
	return out
}

// BhattacharyyaCoefficient is Σ sqrt(p_i × q_i) over two distributions given
// as non-negative weights (normalised here). It is 1 when they are equal, 0
// when disjoint; with nothing to compare (either sums to zero) it is 1.
func BhattacharyyaCoefficient(p, q []float64) float64 {
	var sp, sq float64
	for i := range p {
		sp += p[i]
		sq += q[i]
	}
	if sp <= 0 || sq <= 0 {
		return 1
	}
	var bc float64
	for i := range p {
		bc += math.Sqrt(p[i] / sp * q[i] / sq)
	}
	return math.Min(bc, 1)
}

// IsolationWays is Alita's way count for an abuser: ceil(ways × tenant
// CPUs / domain CPUs) + 1.
func IsolationWays(ways int, tenantCPUs, domainCPUs float64) int {
	if domainCPUs <= 0 {
		return ways
	}
	return int(math.Ceil(float64(ways)*tenantCPUs/domainCPUs-1e-9)) + 1
}

func (b *BiasIsolation) push(w []float64, x float64, fill float64) []float64 {
	n := len(b.cfg.Weights)
	for len(w) < n {
		w = append(w, fill)
	}
	return append(w[1:], x)
}

func (b *BiasIsolation) smooth(w []float64) float64 {
	var s float64
	for i, x := range w {
		s += b.cfg.Weights[i] * x
	}
	return s
}

// Step feeds one interval and returns the actions for the CAT actuator.
func (b *BiasIsolation) Step(in BiasInput) BiasResult {
	var res BiasResult
	seen := map[int]bool{}
	doms := slices.Clone(in.Domains)
	sort.Slice(doms, func(i, j int) bool { return doms[i].ID < doms[j].ID })
	for _, d := range doms {
		seen[d.ID] = true
		st := b.domains[d.ID]
		if st == nil {
			st = &biasDomain{usage: map[string][]float64{}}
			b.domains[d.ID] = st
		}
		shares := d.Shares()
		occ := make([]float64, len(d.Tenants))
		var total float64
		present := map[string]int{}
		for i, t := range d.Tenants {
			occ[i] = float64(t.OccupancyBytes)
			total += occ[i]
			present[t.ID] = i
		}
		bc := BhattacharyyaCoefficient(shares, occ)
		st.bcs = b.push(st.bcs, bc, 1)
		for i, t := range d.Tenants {
			st.usage[t.ID] = b.push(st.usage[t.ID], occ[i], 0)
		}
		for id := range st.usage {
			if _, ok := present[id]; !ok {
				delete(st.usage, id)
			}
		}
		v := BiasVerdict{Domain: d.ID, BC: bc, Smoothed: b.smooth(st.bcs), Busy: total >= b.cfg.BusyFraction*float64(d.SizeBytes) && total > 0}

		// A tenant that stopped gives its slot back at once.
		for s, h := range st.slots {
			if h != nil {
				if _, ok := present[h.tenant]; !ok {
					res.Actions = append(res.Actions, CacheAction{Tenant: h.tenant, Domain: d.ID, Slot: s, Release: true, Reason: "tenant stopped"})
					st.slots[s] = nil
				}
			}
		}

		contended, calm, abuser := b.judgeDomain(st, d, shares, v)
		if contended {
			v.Abuser = abuser
			if abuser != "" {
				t := d.Tenants[present[abuser]]
				ways := IsolationWays(d.Ways, t.CPUs, d.CPUs)
				if ways < d.Ways {
					res.Actions = append(res.Actions, b.isolate(st, d, abuser, ways, in.Now, v.Smoothed)...)
				}
			}
		} else if calm {
			for s, h := range st.slots {
				if h == nil || in.Now.Sub(h.lastRelax) < b.cfg.RelaxPeriod {
					continue
				}
				h.ways++
				h.lastRelax = in.Now
				if h.ways >= d.Ways {
					res.Actions = append(res.Actions, CacheAction{Tenant: h.tenant, Domain: d.ID, Slot: s, Release: true, Reason: "fairness is back: whole cache again"})
					st.slots[s] = nil
					continue
				}
				res.Actions = append(res.Actions, CacheAction{Tenant: h.tenant, Domain: d.ID, Ways: h.ways, Slot: s, Reason: "fairness is back: one way more"})
			}
		}
		for s, h := range st.slots {
			if h != nil {
				v.Isolated[s] = h.tenant
			}
		}
		res.Verdicts = append(res.Verdicts, v)
	}
	// Domains that vanished from the input: release their holders.
	for id, st := range b.domains {
		if seen[id] {
			continue
		}
		for s, h := range st.slots {
			if h != nil {
				res.Actions = append(res.Actions, CacheAction{Tenant: h.tenant, Domain: id, Slot: s, Release: true, Reason: "domain no longer observed"})
			}
		}
		delete(b.domains, id)
	}
	return res
}

// judgeDomain decides whether the domain is contended (and who the abuser
// is, "" for none) or calm enough to relax: Alita's BC thresholds and
// largest excess, or — where every tenant's misses are measured — a
// deprived tenant and the heaviest misser above its share (see the package
// comment above).
func (b *BiasIsolation) judgeDomain(st *biasDomain, d BiasDomain, shares []float64, v BiasVerdict) (contended, calm bool, abuser string) {
	measured := len(d.Tenants) > 0
	for _, t := range d.Tenants {
		measured = measured && t.HasMisses
	}
	if !measured {
		if v.Busy && v.Smoothed <= b.cfg.ThrottleBC {
			excess := 0.0
			for i, t := range d.Tenants {
				if e := b.smooth(st.usage[t.ID]) - shares[i]; e > excess {
					abuser, excess = t.ID, e
				}
			}
			return true, false, abuser
		}
		return false, v.Smoothed >= b.cfg.RelaxBC, ""
	}
	var sum float64
	for _, t := range d.Tenants {
		sum += t.CPUs
	}
	div := math.Min(d.CPUs, sum)
	if div <= 0 {
		div = sum
	}
	present := make([]float64, len(d.Tenants))
	top := 0
	for i, t := range d.Tenants {
		if div > 0 {
			present[i] = float64(d.SizeBytes) * t.CPUs / div
		}
		if t.MissBytesPerSec > d.Tenants[top].MissBytesPerSec {
			top = i
		}
	}
	deprived := false
	for i, t := range d.Tenants {
		if i != top && b.smooth(st.usage[t.ID]) < b.cfg.DeprivedFraction*present[i] && t.CPUs > 0 && t.MissBytesPerSec/t.CPUs >= b.cfg.DeprivedMissBytesPerSec {
			deprived = true
		}
	}
	if !v.Busy || !deprived {
		return false, true, ""
	}
	// The abuser holds more than its share now and over the window: the
	// window alone lags, and would blame the tenant that held the cache
	// before a streamer took it.
	misses := 0.0
	for i, t := range d.Tenants {
		if b.smooth(st.usage[t.ID]) > present[i] && float64(t.OccupancyBytes) > present[i] && t.MissBytesPerSec > misses {
			abuser, misses = t.ID, t.MissBytesPerSec
		}
	}
	return true, false, abuser
}

// isolate puts the abuser in a slot (or resets its class to the small mask
// if it is isolated already and had relaxed since).
func (b *BiasIsolation) isolate(st *biasDomain, d BiasDomain, abuser string, ways int, now time.Time, bc float64) []CacheAction {
	reason := "LLC occupancy biased (BC ≤ threshold) and this tenant is furthest above its share"
	for s, h := range st.slots {
		if h != nil && h.tenant == abuser {
			h.since, h.lastRelax = now, now
			if h.ways == ways {
				return nil
			}
			h.ways = ways
			return []CacheAction{{Tenant: abuser, Domain: d.ID, Ways: ways, Slot: s, Reason: reason + " again"}}
		}
	}
	var out []CacheAction
	slot := -1
	for s, h := range st.slots {
		if h == nil {
			slot = s
			break
		}
	}
	if slot < 0 {
		// Both ends taken: the holder isolated longer makes way, if long enough.
		victim := 0
		if st.slots[1].since.Before(st.slots[0].since) {
			victim = 1
		}
		if now.Sub(st.slots[victim].since) < b.cfg.ReplacePeriod {
			return nil
		}
		out = append(out, CacheAction{Tenant: st.slots[victim].tenant, Domain: d.ID, Slot: victim, Release: true, Reason: "slot given to a new abuser"})
		slot = victim
	}
	st.slots[slot] = &biasSlot{tenant: abuser, ways: ways, since: now, lastRelax: now}
	return append(out, CacheAction{Tenant: abuser, Domain: d.ID, Ways: ways, Slot: slot, Reason: reason})
}

// Isolated lists who holds which slot in which domain now.
func (b *BiasIsolation) Isolated() []CacheAction {
	var out []CacheAction
	for id, st := range b.domains {
		for s, h := range st.slots {
			if h != nil {
				out = append(out, CacheAction{Tenant: h.tenant, Domain: id, Ways: h.ways, Slot: s})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Domain != out[j].Domain {
			return out[i].Domain < out[j].Domain
		}
		return out[i].Slot < out[j].Slot
	})
	return out
}
