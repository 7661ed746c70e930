package agent

import (
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// permitsPolicy is Kyoto's pollution permits: from each tenant's
// llc_cap_act (LLC misses × nominal kHz / unhalted cycles), a tenant whose
// credit runs out is OVER and capped through its CPU quota until it is
// UNDER again.
type permitsPolicy struct {
	permits    *judge.Permits
	nominalKHz float64
}

func (p *permitsPolicy) name() api.Policy { return api.PolicyPermits }

func (p *permitsPolicy) observe(o *hwObservation, st *api.HardwareState) []decision {
	in := judge.PermitSample{At: o.now, Duration: o.dt}
	for _, s := range o.samples {
		act, ok := sense.TenantPollution(s.counters, p.nominalKHz)
		in.Tenants = append(in.Tenants, judge.PermitTenant{ID: s.t.ID, Name: s.t.Name, Kind: s.t.Kind, LLCCapAct: act, Measured: ok,
			Usage: s.usage, CPUs: max(1, s.t.CPUs.Len()), Protected: o.protects[s.t.ID]})
	}
	var out []decision
	for _, d := range p.permits.Observe(in) {
		if d.State != judge.PermitOver {
			out = append(out, decision{policy: api.PolicyPermits, tenant: d.Tenant, lever: api.LeverCPUQuota, release: true, reason: "UNDER: " + d.Reason})
			continue
		}
		out = append(out, decision{policy: api.PolicyPermits, tenant: d.Tenant, lever: api.LeverCPUQuota, cpuCap: d.CapCores, reason: "OVER: " + d.Reason})
	}
	st.Permits = p.permits.Status()
	return out
}
