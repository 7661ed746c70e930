package agent

import (
	"fmt"
	"maps"
	"slices"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/resctrl"
)

// mbaPolicy is Alita's memory-bandwidth throttle, from resctrl
// monitoring: an over-share tenant of a saturated L3 domain has its
// bandwidth halved (MBA), and given back once the domain is under its
// threshold.
type mbaPolicy struct {
	mba *judge.MemBWThrottle
	l3  map[int]l3Domain
}

func newMBAPolicy(env policyEnv) (policy, string) {
	m, info := env.cfg.Resctrl.MBA, env.resctrl
	switch {
	case info == nil:
		return nil, env.resctrlOff
	case !m.Enabled:
		return nil, "disabled (resctrl.mba.enabled: false): its threshold is the traffic this platform's L3 domain carries before it hurts, set it to turn the policy on"
	case info.MB == nil:
		return nil, fmt.Sprintf("resctrl at %s has no memory-bandwidth allocation (MBA)", info.Mount)
	case info.Mon == nil || !info.Mon.Has(resctrl.MBMTotalBytes):
		return nil, fmt.Sprintf("resctrl at %s has no mbm_total_bytes monitoring", info.Mount)
	}
	mc := judge.MBAConfig{ThresholdBytesPerSec: m.ThresholdBytesPerSec, RelaxGuardBytesPerSec: m.RelaxGuardBytesPerSec, Floor: m.Floor}
	if info.MB.Max > 0 {
		mc.HardwareMin = float64(info.MB.MinBandwidth) / float64(info.MB.Max)
		if info.MB.Units == "percent" && info.MB.Granularity > 0 {
			mc.Quantum = float64(info.MB.Granularity) / float64(info.MB.Max)
		}
	}
	return &mbaPolicy{mba: judge.NewMemBWThrottle(mc), l3: env.l3}, ""
}

func (p *mbaPolicy) name() api.Policy { return api.PolicyMBA }

func (p *mbaPolicy) observe(o *hwObservation, _ *api.HardwareState) []decision {
	if !o.resctrlRead {
		return nil
	}
	in := judge.MBAInput{Now: o.now}
	for _, id := range slices.Sorted(maps.Keys(p.l3)) {
		d := p.l3[id]
		md := judge.MBADomain{ID: id, CPUs: float64(d.cpus.Len())}
		for _, s := range o.samples {
			on := s.t.CPUs.Intersect(d.cpus)
			u, ok := o.resctrl[s.t.ID]
			if on.IsEmpty() || !ok || o.protects[s.t.ID] {
				continue
			}
			if l3, ok := u.Domain(id); ok && l3.BandwidthOK {
				md.Tenants = append(md.Tenants, judge.MBATenant{ID: s.t.ID, CPUs: float64(on.Len()), BytesPerSec: l3.TotalBytesPerSec})
			}
		}
		in.Domains = append(in.Domains, md)
	}
	steps := p.mba.Step(in)
	out := make([]decision, 0, len(steps))
	for _, m := range steps {
		d := decision{policy: api.PolicyMBA, tenant: m.Tenant, lever: api.LeverMBA, domain: m.Domain}
		if m.Release {
			d.release, d.reason = true, fmt.Sprintf("L3 %d: %s", m.Domain, m.Reason)
		} else {
			// Per domain: halved is a tighten, doubled ("back under
			// threshold") a relax, a first class on the domain a throttle.
			d.fraction, d.refBytesPerSec = m.Fraction, m.ReferenceBytesPerSec
			d.reason = fmt.Sprintf("L3 %d: %.0f%% of its bandwidth: %s", m.Domain, 100*m.Fraction, m.Reason)
		}
		out = append(out, d)
	}
	return out
}
