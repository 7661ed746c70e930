package agent

import (
	"fmt"

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

func newPermitsPolicy(env policyEnv) (policy, string) {
	switch {
	case !env.cfg.Permits.Active():
		return nil, "no llc_cap booked (permits.default, permits.classes, permits.tenants)"
	case !env.has(sense.EventLLCMisses) || !env.has(sense.EventCycles):
		return nil, "the PMU does not count LLC misses and cycles per tenant here, so pollution (llc_cap_act) cannot be measured"
	}
	khz, src, err := sense.NominalFreq(env.host)
	if err != nil || khz <= 0 {
		return nil, fmt.Sprintf("no nominal CPU frequency for llc_cap_act (%v)", err)
	}
	env.log.Info("pollution permits on", "nominal_khz", khz, "frequency_source", src)
	return &permitsPolicy{permits: judge.NewPermits(env.cfg.Permits), nominalKHz: float64(khz)}, ""
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
