package agent

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// l3Domain is one L3 cache of the host, as the resctrl policies see it.
type l3Domain struct {
	size uint64
	ways int
	cpus cpuset.Set
}

// llcPolicy is Alita's bias isolation, from resctrl monitoring: only the
// abuser of a busy, unfair L3 gets a small class of ways (CAT).
type llcPolicy struct {
	bias *judge.BiasIsolation
	l3   map[int]l3Domain
	log  *slog.Logger
}

func newLLCPolicy(env policyEnv) (policy, string) {
	l := env.cfg.Resctrl.LLCIsolation
	switch {
	case env.resctrl == nil:
		return nil, env.resctrlOff
	case !*l.Enabled:
		return nil, "disabled in the configuration (resctrl.llc_isolation.enabled: false)"
	case env.resctrl.L3 == nil:
		return nil, fmt.Sprintf("resctrl at %s has no L3 cache allocation (CAT)", env.resctrl.Mount)
	case len(env.l3) == 0:
		return nil, "no L3 in the CPU topology"
	}
	l3 := make(map[int]l3Domain, len(env.l3))
	for id, d := range env.l3 {
		d.ways = env.resctrl.L3.Ways
		l3[id] = d
	}
	return &llcPolicy{l3: l3, log: env.log,
		bias: judge.NewBiasIsolation(judge.BiasConfig{ThrottleBC: l.ThrottleBC, RelaxBC: l.RelaxBC, BusyFraction: l.BusyFraction,
			RelaxPeriod: l.RelaxPeriod, ReplacePeriod: l.ReplacePeriod})}, ""
}

func (p *llcPolicy) name() api.Policy { return api.PolicyLLC }

func (p *llcPolicy) observe(o *hwObservation, st *api.HardwareState) []decision {
	if !o.resctrlRead {
		return nil
	}
	in := judge.BiasInput{Now: o.now}
	for _, id := range slices.Sorted(maps.Keys(p.l3)) {
		d := p.l3[id]
		bd := judge.BiasDomain{ID: id, SizeBytes: d.size, Ways: d.ways, CPUs: float64(d.cpus.Len())}
		for _, s := range o.samples {
			on := s.t.CPUs.Intersect(d.cpus)
			if on.IsEmpty() || o.protects[s.t.ID] {
				continue
			}
			u, ok := o.resctrl[s.t.ID]
			if !ok {
				continue
			}
			l3, ok := u.Domain(id)
			if !ok || !l3.OccupancyOK {
				continue
			}
			bt := judge.BiasTenant{ID: s.t.ID, CPUs: entitledCPUs(s, on.Len()), OccupancyBytes: l3.OccupancyBytes}
			// The traffic its misses cause here: MBM where the hardware
			// counts it, else the PMU's LLC misses × the line size, split
			// by its CPUs in this domain.
			if l3.BandwidthOK {
				bt.MissBytesPerSec, bt.HasMisses = l3.TotalBytesPerSec, true
			} else if m, ok := s.counters[sense.EventLLCMisses]; ok && s.t.CPUs.Len() > 0 {
				bt.MissBytesPerSec, bt.HasMisses = 64*m*float64(on.Len())/float64(s.t.CPUs.Len()), true
			}
			bd.Tenants = append(bd.Tenants, bt)
		}
		in.Domains = append(in.Domains, bd)
	}
	res := p.bias.Step(in)
	st.LLC = res.Verdicts
	if p.log.Enabled(context.Background(), slog.LevelDebug) {
		for i, v := range res.Verdicts {
			var ts []string
			for _, t := range in.Domains[i].Tenants {
				ts = append(ts, fmt.Sprintf("%s=%.1fMiB/%.0fMB/s", t.ID, float64(t.OccupancyBytes)/(1<<20), t.MissBytesPerSec/1e6))
			}
			p.log.Debug("llc bias", "domain", v.Domain, "bc", fmt.Sprintf("%.3f", v.Smoothed), "busy", v.Busy, "abuser", v.Abuser, "tenants", strings.Join(ts, " "))
		}
	}
	out := make([]decision, 0, len(res.Actions))
	for _, c := range res.Actions {
		d := decision{policy: api.PolicyLLC, tenant: c.Tenant, lever: api.LeverCAT, domain: c.Domain}
		if c.Release {
			d.release, d.reason = true, fmt.Sprintf("L3 %d: %s", c.Domain, c.Reason)
			out = append(out, d)
			continue
		}
		ways := p.l3[c.Domain].ways
		d.ways, d.slot, d.fraction = c.Ways, c.Slot, 1
		if ways > 0 {
			d.fraction = float64(c.Ways) / float64(ways)
		}
		d.reason = fmt.Sprintf("L3 %d: %d of %d ways: %s", c.Domain, c.Ways, ways, c.Reason)
		out = append(out, d)
	}
	return out
}

// entitledCPUs is what of its cpus in a domain a tenant is entitled to
// for its share of the cache: all of them, or, while its CPU quota held
// it back this interval, the part it could use. A polluter throttled to
// 1/128 of its CPUs holds little of the cache because it hardly runs; on
// its whole CPUs' share it would read as deprived (under its share and
// missing heavily per CPU) and the tenant that does run — its victim —
// as the abuser above its share.
func entitledCPUs(s sample, cpus int) float64 {
	all := float64(cpus)
	if !s.heldBack || s.t.CPUs.Len() == 0 {
		return all
	}
	return min(all, s.usage*all/float64(s.t.CPUs.Len()))
}
