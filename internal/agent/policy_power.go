package agent

import (
	"context"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// powerPolicy is Alita's socket power budget: from RAPL attributed to
// tenants, on a socket over budget the "noise" tenants step down through
// cpufreq or clock modulation where they own their CPUs, else CPU quota.
// A per-CPU lever claims per socket (api.PowerSocketPolicy); quota cannot
// act per socket, so a quota claim is the tenant's lowest step on any.
type powerPolicy struct {
	sensor *sense.PowerSensor
	budget *judge.PowerBudget
	levers []judge.Lever // preferred, in order
}

func newPowerPolicy(env policyEnv) (policy, string) {
	if !env.cfg.Power.Enabled {
		return nil, "disabled (power.enabled: false): a socket budget is a property of the SKU and the rack, set it to turn the policy on"
	}
	ps, err := sense.NewPowerSensor(env.host, env.topo)
	if err != nil {
		return nil, err.Error()
	}
	// Validate checked the names: the error cannot happen here.
	levers, _ := judge.ParseLevers("power.levers", env.cfg.Power.Levers)
	return &powerPolicy{sensor: ps, budget: judge.NewPowerBudget(env.cfg.Power), levers: levers}, ""
}

func (p *powerPolicy) name() api.Policy { return api.PolicyPower }

// sense reads RAPL and attributes it to the tenants by their CPU use.
func (p *powerPolicy) sense(ctx context.Context, o *hwObservation, health *sensorHealth) {
	in := make([]sense.PowerTenantInput, 0, len(o.samples))
	for _, s := range o.samples {
		in = append(in, sense.PowerTenantInput{ID: s.t.ID, CPUs: s.t.CPUs, Usage: s.usage})
	}
	start := time.Now()
	r, ok, err := p.sensor.Read(ctx, o.now, in)
	health.record(sensorPower, time.Since(start), err)
	o.power, o.powerOK = r, ok
}

func (p *powerPolicy) observe(o *hwObservation, st *api.HardwareState) []decision {
	if !o.powerOK {
		return nil
	}
	levers := o.choose(p.levers)
	r := o.power
	in := judge.PowerSample{At: o.now, Duration: o.dt, CPUBusy: r.CPUBusy}
	for _, pk := range r.Packages {
		in.Sockets = append(in.Sockets, judge.PowerSocket{ID: pk.Package, Watts: pk.Watts, CPUs: pk.CPUs,
			AvgTemp: pk.AvgTemp, HasTemp: pk.HasTemp, PerCoreTemps: pk.PerCoreTemps})
	}
	watts := map[string]float64{}
	for _, tp := range r.Tenants {
		s, ok := o.byID[tp.ID]
		if !ok {
			continue
		}
		watts[tp.ID] += tp.Watts
		l := levers[tp.ID]
		in.Tenants = append(in.Tenants, judge.PowerTenant{ID: tp.ID, Name: s.t.Name, Socket: tp.Package, CPUs: tp.CPUs,
			Watts: tp.Watts, Temp: tp.Temp, HasTemp: tp.HasTemp, Protected: o.protects[tp.ID], Lever: l.Lever, Steps: l.Steps})
	}
	st.TenantWatts = watts
	st.Packages = r.Packages
	var out []decision
	for _, d := range p.budget.Observe(in) {
		out = append(out, p.decisionsFor(o, d)...)
	}
	st.Power = p.budget.Sockets()
	return out
}

// decisionsFor turns one of the budget's decisions into claims: a per-CPU
// lever's on its socket, CPU quota's on the whole tenant at its lowest
// step on any socket; a vanished tenant loses both.
func (p *powerPolicy) decisionsFor(o *hwObservation, d judge.PowerDecision) []decision {
	release := d.Action == judge.PowerRelease
	s, ok := o.byID[d.Tenant]
	switch {
	case !ok:
		return []decision{
			{policy: api.PolicyPower, tenant: d.Tenant, lever: api.Lever(d.Lever), release: true, reason: d.Reason},
			{policy: api.PowerSocketPolicy(d.Socket), tenant: d.Tenant, lever: api.Lever(d.Lever), release: true, reason: d.Reason},
		}
	case d.Lever == judge.LeverCPUQuota:
		step, steps, held := p.budget.TenantStep(d.Tenant)
		return []decision{{policy: api.PolicyPower, tenant: d.Tenant, lever: api.Lever(d.Lever), release: release && !held,
			step: step, steps: steps, cpus: s.t.CPUs, reason: d.Reason}}
	}
	return []decision{{policy: api.PowerSocketPolicy(d.Socket), tenant: d.Tenant, lever: api.Lever(d.Lever), release: release,
		step: d.Step, steps: d.Steps, cpus: d.CPUs, reason: d.Reason}}
}
