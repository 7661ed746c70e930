package judge

// Alita's memory-bandwidth throttling (lib/mem_contention_iso.h,
// throttle_membw/relax_membw), per L3 domain:
//
//   - the domain is under pressure when its tenants' bandwidth together is
//     at or above a threshold (Alita: mba_threshold 50);
//   - then every tenant at or above its share of that bandwidth (the
//     domain's bandwidth per CPU × its CPUs) has its MBA rate halved, down
//     to a floor (Alita: mba_rate_min 20%, raised to the hardware's
//     min_bandwidth), one halving per interval;
//   - when the domain's bandwidth is back under the threshold minus a guard
//     (Alita: 5), throttled tenants are relaxed: their rate doubles per
//     relax step until it is unthrottled again, and then released. Alita
//     relaxes in linear steps (+granularity) or halfway to the maximum;
//     doubling mirrors the halving, so a tenant climbs back in as many
//     steps as it went down. A tenant that stops is released at once.
//
// Relaxing when the tenant is merely "under its share" would oscillate: a
// halved tenant is under its share because it is halved. So, as in Alita,
// relief waits for the domain's pressure to drop.
//
// Rates are fractions of the unthrottled rate (1 = no limit). The MBA
// actuator turns them into the hardware's units: Intel percentages (the
// fraction × 100, rounded up to the bandwidth_gran step), AMD absolute
// limits in 1/8 GB/s (the fraction × ReferenceBytesPerSec, the tenant's
// bandwidth when it was first throttled). Quantum and HardwareMin let the
// judge track the rate the hardware really applies (Intel 0.1 and 0.1).

import (
	"maps"
	"math"
	"slices"
	"sort"
	"time"
)

// MBAConfig are the MBA throttling parameters.
type MBAConfig struct {
	// ThresholdBytesPerSec: a domain whose tenants move at least this much
	// memory traffic is under pressure. Alita's is 50 (GB/s, per socket);
	// scale it to the host's memory system.
	ThresholdBytesPerSec float64
	// RelaxGuardBytesPerSec: relax only below threshold minus this (Alita 5 GB/s).
	RelaxGuardBytesPerSec float64
	// Floor is the lowest rate (Alita 0.2).
	Floor float64
	// HardwareMin is min_bandwidth / max (Intel 10/100); Quantum is
	// bandwidth_gran / max (Intel 10/100; 0 for AMD's fine steps).
	HardwareMin, Quantum float64
	// RelaxPeriod is the least time between one tenant's relax steps (0:
	// every interval, as Alita).
	RelaxPeriod time.Duration
}

// AlitaMBA is Alita's configuration for an Intel host with 10% steps.
func AlitaMBA() MBAConfig {
	return MBAConfig{ThresholdBytesPerSec: 50e9, RelaxGuardBytesPerSec: 5e9, Floor: 0.2, HardwareMin: 0.1, Quantum: 0.1}
}

// MBATenant is one tenant's memory traffic in a domain.
type MBATenant struct {
	ID          string
	CPUs        float64
	BytesPerSec float64
}

// MBADomain is one L3 domain's memory traffic this interval.
type MBADomain struct {
	ID      int
	CPUs    float64
	Tenants []MBATenant
	// TotalBytesPerSec is the domain's traffic; 0 means the tenants' sum.
	TotalBytesPerSec float64
}

// MBAInput is one interval's observation.
type MBAInput struct {
	Now     time.Time
	Domains []MBADomain
}

// MBAAction sets a tenant's memory-bandwidth rate in a domain: Fraction of
// the unthrottled rate, ReferenceBytesPerSec what it moved when first
// throttled (for absolute units). Release gives it the unthrottled rate
// back.
type MBAAction struct {
	Tenant               string  `json:"tenant"`
	Domain               int     `json:"domain"`
	Fraction             float64 `json:"fraction"`
	ReferenceBytesPerSec float64 `json:"reference_bytes_per_sec"`
	Release              bool    `json:"release,omitempty"`
	Reason               string  `json:"reason"`
}

// MemBWThrottle is Alita's MBA halving. Not safe for concurrent use; no I/O.
type MemBWThrottle struct {
	cfg   MBAConfig
	state map[int]map[string]*mbaState
}

type mbaState struct {
	fraction, ref float64
	lastRelax     time.Time
}

// NewMemBWThrottle returns the judge; zero Floor and Threshold take Alita's.
func NewMemBWThrottle(cfg MBAConfig) *MemBWThrottle {
	d := AlitaMBA()
	if cfg.ThresholdBytesPerSec == 0 {
		cfg.ThresholdBytesPerSec, cfg.RelaxGuardBytesPerSec = d.ThresholdBytesPerSec, d.RelaxGuardBytesPerSec
	}
	if cfg.Floor == 0 {
		cfg.Floor = d.Floor
	}
	return &MemBWThrottle{cfg: cfg, state: map[int]map[string]*mbaState{}}
}

// quantize rounds a rate up to the hardware's step, within [floor, 1].
func (m *MemBWThrottle) quantize(f float64) float64 {
	if q := m.cfg.Quantum; q > 0 {
		f = math.Ceil(f/q-1e-9) * q
	}
	return math.Min(1, math.Max(f, m.floor()))
}

func (m *MemBWThrottle) floor() float64 {
	f := math.Max(m.cfg.Floor, m.cfg.HardwareMin)
	if q := m.cfg.Quantum; q > 0 {
		f = math.Ceil(f/q-1e-9) * q
	}
	return f
}

// Step feeds one interval and returns the rate changes.
func (m *MemBWThrottle) Step(in MBAInput) []MBAAction {
	var out []MBAAction
	seen := map[int]bool{}
	doms := slices.Clone(in.Domains)
	sort.Slice(doms, func(i, j int) bool { return doms[i].ID < doms[j].ID })
	for _, d := range doms {
		seen[d.ID] = true
		st := m.state[d.ID]
		if st == nil {
			st = map[string]*mbaState{}
			m.state[d.ID] = st
		}
		total := d.TotalBytesPerSec
		present := map[string]bool{}
		for _, t := range d.Tenants {
			present[t.ID] = true
			if d.TotalBytesPerSec == 0 {
				total += t.BytesPerSec
			}
		}
		for _, id := range slices.Sorted(maps.Keys(st)) {
			if !present[id] {
				out = append(out, MBAAction{Tenant: id, Domain: d.ID, Fraction: 1, ReferenceBytesPerSec: st[id].ref, Release: true, Reason: "tenant stopped"})
				delete(st, id)
			}
		}
		switch {
		case total >= m.cfg.ThresholdBytesPerSec:
			perCPU := 0.0
			if d.CPUs > 0 {
				perCPU = total / d.CPUs
			}
			for _, t := range d.Tenants {
				if t.BytesPerSec <= 0 || t.BytesPerSec < perCPU*t.CPUs {
					continue
				}
				s := st[t.ID]
				if s == nil {
					s = &mbaState{fraction: 1, ref: t.BytesPerSec}
				}
				next := m.quantize(s.fraction / 2)
				if next >= s.fraction {
					continue // at the floor already
				}
				s.fraction, s.lastRelax = next, in.Now
				st[t.ID] = s
				out = append(out, MBAAction{Tenant: t.ID, Domain: d.ID, Fraction: next, ReferenceBytesPerSec: s.ref, Reason: "domain bandwidth over threshold and this tenant over its share: rate halved"})
			}
		case total <= m.cfg.ThresholdBytesPerSec-m.cfg.RelaxGuardBytesPerSec:
			for _, id := range slices.Sorted(maps.Keys(st)) {
				s := st[id]
				if in.Now.Sub(s.lastRelax) < m.cfg.RelaxPeriod {
					continue
				}
				s.fraction, s.lastRelax = m.quantize(s.fraction*2), in.Now
				if s.fraction >= 1 {
					out = append(out, MBAAction{Tenant: id, Domain: d.ID, Fraction: 1, ReferenceBytesPerSec: s.ref, Release: true, Reason: "domain bandwidth back under threshold: unthrottled"})
					delete(st, id)
					continue
				}
				out = append(out, MBAAction{Tenant: id, Domain: d.ID, Fraction: s.fraction, ReferenceBytesPerSec: s.ref, Reason: "domain bandwidth back under threshold: rate doubled"})
			}
		}
	}
	for id, st := range m.state {
		if seen[id] {
			continue
		}
		for _, t := range slices.Sorted(maps.Keys(st)) {
			out = append(out, MBAAction{Tenant: t, Domain: id, Fraction: 1, ReferenceBytesPerSec: st[t].ref, Release: true, Reason: "domain no longer observed"})
		}
		delete(m.state, id)
	}
	return out
}

// Throttled lists the tenants throttled now with their rates.
func (m *MemBWThrottle) Throttled() []MBAAction {
	var out []MBAAction
	for d, st := range m.state {
		for _, id := range slices.Sorted(maps.Keys(st)) {
			out = append(out, MBAAction{Tenant: id, Domain: d, Fraction: st[id].fraction, ReferenceBytesPerSec: st[id].ref})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Domain < out[j].Domain })
	return out
}
