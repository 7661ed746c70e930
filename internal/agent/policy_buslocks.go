package agent

import (
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

// busLockPolicy is Alita's bus-lock budget: from each tenant's bus-lock
// count, a tenant over its share of the host budget is duty-cycled through
// clock modulation where it owns its cores, else its CPU quota.
type busLockPolicy struct {
	budget *judge.BusLockBudget
	levers []judge.Lever // preferred, in order
	topo   *topology.Topology
}

func newBusLockPolicy(env policyEnv) (policy, string) {
	switch {
	case !*env.cfg.BusLocks.Enabled:
		return nil, "disabled in the configuration (buslocks.enabled: false)"
	case !env.has(sense.EventBusLocks):
		return nil, "the PMU does not count bus locks here (no hardware PMU, or no verified bus-lock event for this CPU model: see crosstalk doctor)"
	}
	// Validate checked the names: the error cannot happen here.
	levers, _ := judge.ParseLevers("buslocks.levers", env.cfg.BusLocks.Levers)
	return &busLockPolicy{budget: judge.NewBusLockBudget(env.cfg.BusLocks), levers: levers, topo: env.topo}, ""
}

func (p *busLockPolicy) name() api.Policy { return api.PolicyBusLocks }

func (p *busLockPolicy) observe(o *hwObservation, st *api.HardwareState) []decision {
	levers := o.choose(p.levers)
	in := judge.BusLockSample{At: o.now, Duration: o.dt}
	for _, s := range o.samples {
		rate, measured := s.counters[sense.EventBusLocks]
		l := levers[s.t.ID]
		in.Tenants = append(in.Tenants, judge.BusLockTenant{ID: s.t.ID, Name: s.t.Name, Rate: rate, Measured: measured,
			Cores: coresOf(p.topo, s.t.CPUs), Protected: o.protects[s.t.ID], Lever: l.Lever, Steps: l.Steps})
	}
	var out []decision
	for _, d := range p.budget.Observe(in) {
		out = append(out, decision{policy: api.PolicyBusLocks, tenant: d.Tenant, lever: api.Lever(d.Lever), release: d.Action == judge.BusLockRelease,
			step: d.Step, steps: d.Steps, cpus: levers[d.Tenant].CPUs, reason: d.Reason})
	}
	status := p.budget.Status()
	st.BusLocks = &status
	return out
}
