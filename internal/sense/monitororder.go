package sense

import (
	"slices"
	"strings"
)

// MonitorOrder ranks tenants for resctrl monitoring, most important first:
// RMIDs are few (a few hundred on the largest parts) and a host may have a
// thousand tenants, so the busiest — the ones able to abuse the cache —
// get them. The rank is a smoothed CPU use, and a tenant monitored now
// keeps its RMID unless another is half again as busy: re-ranking noisy
// readings each interval would move monitoring groups back and forth
// (each move a group made and removed and every thread written again),
// and a new group's first bandwidth reading is lost anyway.
//
// Its zero value is ready to use. It reads nothing: the CPU use comes in
// with the tenants, and which of them has no RMID from the monitor
// (ResctrlMonitor.Unmonitored).
type MonitorOrder struct {
	use   map[string]float64 // each tenant's smoothed CPU use, by ID
	order []string           // the order last returned
	age   int                // rankings since the last re-ranking
}

// monitorRerank is how many rankings an order stands.
const monitorRerank = 10

// monitorSmoothing is the weight of a new CPU use reading in the smoothed
// use (an exponential moving average).
const monitorSmoothing = 0.2

// monitorKeep is how much busier than a monitored tenant another must be to
// take its place.
const monitorKeep = 1.5

// TenantUse is a tenant with its CPU use (cores) this interval.
type TenantUse struct {
	Tenant Tenant
	Usage  float64
}

// Rank returns the tenants in monitoring order. Every monitorRerank-th call
// re-ranks them by smoothed CPU use, the monitored (those not in
// unmonitored, that were ranked before) weighted monitorKeep; the calls in
// between keep the last order, with the tenants gone dropped and newcomers
// at its end in the order given: nobody is evicted for a reading's noise.
// Ties rank by ID.
func (o *MonitorOrder) Rank(tenants []TenantUse, unmonitored []UnmonitoredTenant) []Tenant {
	o.age++
	if o.order != nil && o.age < monitorRerank {
		return o.keep(tenants)
	}
	o.age = 0
	if o.use == nil {
		o.use = map[string]float64{}
	}
	unmon := make(map[string]bool, len(unmonitored))
	for _, u := range unmonitored {
		unmon[u.ID] = true
	}
	seen := make(map[string]bool, len(tenants))
	type ranked struct {
		t    Tenant
		rank float64
	}
	rs := make([]ranked, 0, len(tenants))
	for _, tu := range tenants {
		id := tu.Tenant.ID
		seen[id] = true
		u, ok := o.use[id]
		if !ok {
			u = tu.Usage
		}
		u += monitorSmoothing * (tu.Usage - u)
		o.use[id] = u
		r := u
		if ok && !unmon[id] {
			r *= monitorKeep
		}
		rs = append(rs, ranked{tu.Tenant, r})
	}
	for id := range o.use {
		if !seen[id] {
			delete(o.use, id)
		}
	}
	slices.SortStableFunc(rs, func(a, b ranked) int {
		switch {
		case a.rank > b.rank:
			return -1
		case a.rank < b.rank:
			return 1
		}
		return strings.Compare(a.t.ID, b.t.ID)
	})
	ts := make([]Tenant, len(rs))
	o.order = make([]string, len(rs))
	for i, r := range rs {
		ts[i] = r.t
		o.order[i] = r.t.ID
	}
	return ts
}

// keep is the last order over the tenants present, newcomers at its end.
func (o *MonitorOrder) keep(tenants []TenantUse) []Tenant {
	byID := make(map[string]Tenant, len(tenants))
	for _, tu := range tenants {
		byID[tu.Tenant.ID] = tu.Tenant
	}
	ts := make([]Tenant, 0, len(tenants))
	kept := make([]string, 0, len(tenants))
	for _, id := range o.order {
		if t, ok := byID[id]; ok {
			ts = append(ts, t)
			kept = append(kept, id)
			delete(byID, id)
		}
	}
	for _, tu := range tenants {
		if _, ok := byID[tu.Tenant.ID]; ok {
			ts = append(ts, tu.Tenant)
			kept = append(kept, tu.Tenant.ID)
		}
	}
	o.order = kept
	return ts
}
