package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// resctrlLocked runs bias LLC isolation and MBA on the monitoring data.
func (hw *Hardware) resctrlLocked(a *Agent, o *hwObservation) {
	hw.status.Resctrl = o.resctrl
	if hw.bias != nil {
		hw.biasLocked(a, o)
	}
	if hw.mba != nil {
		hw.mbaLocked(a, o)
	}
	// A classed tenant's new threads join its class.
	if !a.cfg.DryRun && hw.classes != nil {
		for _, id := range hw.classes.Classed() {
			s, ok := o.byID[id]
			if !ok {
				continue
			}
			if err := hw.classes.SyncThreads(act.ClassTenant{ID: id, Name: s.t.Name, Threads: s.t.Threads}); err != nil {
				hw.warnOnce("classsync:"+id, "resctrl class threads of "+id, err)
			}
		}
	}
	for _, u := range hw.resmon.Unmonitored() {
		hw.warnOnce("unmon:"+u.ID, "tenant not monitored by resctrl: "+u.ID, errors.New(u.Reason))
	}
}

func (hw *Hardware) biasLocked(a *Agent, o *hwObservation) {
	in := judge.BiasInput{Now: o.now}
	for _, id := range slices.Sorted(maps.Keys(hw.l3)) {
		d := hw.l3[id]
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
			bt := judge.BiasTenant{ID: s.t.ID, CPUs: float64(on.Len()), OccupancyBytes: l3.OccupancyBytes}
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
	res := hw.bias.Step(in)
	hw.status.LLC = res.Verdicts
	if hw.log.Enabled(nil, slog.LevelDebug) {
		for i, v := range res.Verdicts {
			var ts []string
			for _, t := range in.Domains[i].Tenants {
				ts = append(ts, fmt.Sprintf("%s=%.1fMiB/%.0fMB/s", t.ID, float64(t.OccupancyBytes)/(1<<20), t.MissBytesPerSec/1e6))
			}
			hw.log.Debug("llc bias", "domain", v.Domain, "bc", fmt.Sprintf("%.3f", v.Smoothed), "busy", v.Busy, "abuser", v.Abuser, "tenants", strings.Join(ts, " "))
		}
	}
	for _, c := range res.Actions {
		t, ok := o.tenant(c.Tenant)
		if c.Release {
			if !a.cfg.DryRun {
				if err := hw.classes.ReleaseCache(c.Tenant, c.Domain); err != nil {
					a.log.Error("release LLC class", "tenant", c.Tenant, "domain", c.Domain, "err", err)
					a.journal(act.Event{Kind: "error", Policy: string(api.PolicyLLC), Tenant: t.ID, Name: t.Name, Detail: err.Error()})
				}
			}
			hw.unclass(api.PolicyLLC, c.Tenant, c.Domain)
			a.recordPolicyLocked(o.now, t, api.PolicyLLC, api.KindRelease, api.LeverCAT, 1, fmt.Sprintf("L3 %d: %s", c.Domain, c.Reason))
			continue
		}
		if !ok {
			continue
		}
		if !a.cfg.DryRun {
			err := hw.classes.SetCacheWays(act.ClassTenant{ID: t.ID, Name: t.Name, Threads: t.Threads}, c.Domain, c.Ways, c.Slot)
			var full *act.ClassExhaustedError
			switch {
			case errors.As(err, &full):
				// No class of service left: Alita's lever is unavailable
				// for this tenant until another class is released. Say so;
				// do not throttle it some other way on cache evidence alone.
				hw.warnOnce("closid:"+t.ID, "no resctrl class for the LLC abuser "+t.ID, err)
				a.journal(act.Event{Kind: "error", Policy: string(api.PolicyLLC), Tenant: t.ID, Name: t.Name, Detail: err.Error()})
				continue
			case err != nil:
				a.log.Error("LLC isolation", "tenant", t.ID, "err", err)
				a.journal(act.Event{Kind: "error", Policy: string(api.PolicyLLC), Tenant: t.ID, Name: t.Name, Detail: err.Error()})
				continue
			}
		}
		duty := 1.0
		if d := hw.l3[c.Domain]; d.ways > 0 {
			duty = float64(c.Ways) / float64(d.ways)
		}
		kind := api.KindIsolate
		if old, ok := hw.classed[api.PolicyLLC][c.Tenant][c.Domain]; ok && duty > old {
			kind = api.KindRelax // a way given back as fairness returns
		}
		hw.class(api.PolicyLLC, c.Tenant, c.Domain, duty)
		a.recordPolicyLocked(o.now, t, api.PolicyLLC, kind, api.LeverCAT, duty, fmt.Sprintf("L3 %d: %d of %d ways: %s", c.Domain, c.Ways, hw.l3[c.Domain].ways, c.Reason))
	}
}

func (hw *Hardware) mbaLocked(a *Agent, o *hwObservation) {
	in := judge.MBAInput{Now: o.now}
	for _, id := range slices.Sorted(maps.Keys(hw.l3)) {
		d := hw.l3[id]
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
	for _, m := range hw.mba.Step(in) {
		t, ok := o.tenant(m.Tenant)
		if m.Release {
			if !a.cfg.DryRun {
				if err := hw.classes.ReleaseBandwidth(m.Tenant, m.Domain); err != nil {
					a.log.Error("release MBA", "tenant", m.Tenant, "err", err)
				}
			}
			hw.unclass(api.PolicyMBA, m.Tenant, m.Domain)
			a.recordPolicyLocked(o.now, t, api.PolicyMBA, api.KindRelease, api.LeverMBA, 1, fmt.Sprintf("L3 %d: %s", m.Domain, m.Reason))
			continue
		}
		if !ok {
			continue
		}
		if !a.cfg.DryRun {
			if err := hw.classes.SetBandwidth(act.ClassTenant{ID: t.ID, Name: t.Name, Threads: t.Threads}, m.Domain, m.Fraction, m.ReferenceBytesPerSec); err != nil {
				a.log.Error("MBA", "tenant", t.ID, "err", err)
				a.journal(act.Event{Kind: "error", Policy: string(api.PolicyMBA), Tenant: t.ID, Name: t.Name, Detail: err.Error()})
				continue
			}
		}
		// Per domain: halved is a tighten, doubled ("back under
		// threshold") a relax, a first class on the domain a throttle.
		old, classed := hw.classed[api.PolicyMBA][m.Tenant][m.Domain]
		kind := actionKind(classed, old, m.Fraction)
		hw.class(api.PolicyMBA, m.Tenant, m.Domain, m.Fraction)
		a.recordPolicyLocked(o.now, t, api.PolicyMBA, kind, api.LeverMBA, m.Fraction, fmt.Sprintf("L3 %d: %.0f%% of its bandwidth: %s", m.Domain, 100*m.Fraction, m.Reason))
	}
}

func (hw *Hardware) class(policy api.Policy, tenant string, domain int, fraction float64) {
	m := hw.classed[policy]
	if m == nil {
		m = map[string]map[int]float64{}
		hw.classed[policy] = m
	}
	if m[tenant] == nil {
		m[tenant] = map[int]float64{}
	}
	m[tenant][domain] = fraction
}

func (hw *Hardware) unclass(policy api.Policy, tenant string, domain int) {
	m := hw.classed[policy]
	delete(m[tenant], domain)
	if len(m[tenant]) == 0 {
		delete(m, tenant)
	}
}

// classedDomains lists the L3 domains where a tenant is restricted by a
// resctrl class.
func (hw *Hardware) classedDomains() []int {
	var out []int
	for _, m := range hw.classed {
		for _, ds := range m {
			for d := range ds {
				if !slices.Contains(out, d) {
					out = append(out, d)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// tenantClasses describes a tenant's resctrl classes for the state: the
// lowest fraction left to it over its restricted domains.
func (hw *Hardware) tenantClasses(id string) []api.HoldState {
	var out []api.HoldState
	for _, p := range []api.Policy{api.PolicyLLC, api.PolicyMBA} {
		ds := hw.classed[p][id]
		if len(ds) == 0 {
			continue
		}
		lever := api.LeverCAT
		if p == api.PolicyMBA {
			lever = api.LeverMBA
		}
		doms := make([]int, 0, len(ds))
		frac := 1.0
		for d, f := range ds {
			doms = append(doms, d)
			frac = min(frac, f)
		}
		slices.Sort(doms)
		out = append(out, api.HoldState{Policy: p, Lever: lever, Duty: frac, Reason: fmt.Sprintf("restricted in L3 domain(s) %v", doms)})
	}
	return out
}
