package agent

import (
	"fmt"
	"maps"
	"slices"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/judge"
)

// mbaPolicy is Alita's memory-bandwidth throttle, from resctrl
// monitoring: an over-share tenant of a saturated L3 domain has its
// bandwidth halved (MBA), and given back once the domain is under its
// threshold.
type mbaPolicy struct {
	mba *judge.MemBWThrottle
	l3  map[int]l3Domain
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
