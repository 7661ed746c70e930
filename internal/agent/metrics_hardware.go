package agent

import (
	"strconv"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/prometheus/client_golang/prometheus"
)

// hardwarePolicies are the hardware-assisted policies, always exported by
// crosstalk_hardware_policy_on (0 where off) so an alert can say which are.
var hardwarePolicies = []api.Policy{api.PolicyBusLocks, api.PolicyPermits, api.PolicyPower, api.PolicyLLC, api.PolicyMBA}

// hardwareCollector exports the hardware policies' state: what each policy
// holds each tenant to, and the measurements they judge by (bus-lock
// budget, permits' credits, package power, LLC fairness, per-tenant
// occupancy, bandwidth, pollution and power).
type hardwareCollector struct {
	src StateSource

	policyOn, holdDuty                                   *prometheus.Desc
	tenantPollution, tenantWatts, tenantLLC, tenantMemBW *prometheus.Desc
	permitCredit, permitBooking, permitOver              *prometheus.Desc
	packageWatts, powerOver                              *prometheus.Desc
	busLockHostRate, busLockShare, busLockDirty          *prometheus.Desc
	llcBC, llcBusy                                       *prometheus.Desc
}

func newHardwareCollector(src StateSource) *hardwareCollector {
	tl := []string{"tenant", "kind", "name"}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("crosstalk_"+name, help, labels, nil)
	}
	return &hardwareCollector{
		src: src,
		policyOn: d("hardware_policy_on",
			"1 if the hardware policy runs on this host, 0 if it is off (the state API's hardware.off says why): buslocks, permits, power, llc, mba.", "policy"),
		holdDuty: d("tenant_hold_duty_ratio",
			"What a policy leaves the tenant (0-1) through a lever, while it holds it back: of its CPU time (cpu_quota), of its clock (clock_modulation, cpufreq), of the LLC ways (cat) or of its memory bandwidth (mba).",
			"tenant", "kind", "name", "policy", "lever"),
		tenantPollution: d("tenant_llc_pollution",
			"Kyoto's llc_cap_act: LLC misses per millisecond of the tenant's unhalted time (where the PMU counts them).", tl...),
		tenantWatts: d("tenant_power_watts",
			"Package (RAPL) power attributed to the tenant, in watts.", tl...),
		tenantLLC: d("tenant_llc_occupancy_bytes",
			"The tenant's LLC occupancy (resctrl CMT), summed over its L3 domains, in bytes.", tl...),
		tenantMemBW: d("tenant_memory_bandwidth_bytes_per_second",
			"The tenant's memory bandwidth (resctrl MBM total), summed over its L3 domains, in bytes per second.", tl...),
		permitCredit: d("permit_credit",
			"A policed tenant's pollution credit (Kyoto), in llc_cap·seconds; below 0 it is OVER.", "tenant", "name"),
		permitBooking: d("permit_llc_cap",
			"A tenant's booked pollution permit (llc_cap, LLC misses per ms of its running time).", "tenant", "name"),
		permitOver: d("permit_over",
			"1 while the tenant is OVER its pollution permit (its CPU capped), else 0.", "tenant", "name"),
		packageWatts: d("package_power_watts",
			"A CPU package's power (RAPL), in watts.", "package"),
		powerOver: d("power_socket_over_budget",
			"1 when the socket's power, averaged over the power policy's period, was at or over its budget, else 0.", "socket"),
		busLockHostRate: d("buslocks_host_per_second",
			"Bus locks per second over the host (the tenants' PMU counts), as the bus-lock budget saw them."),
		busLockShare: d("buslocks_share_per_second",
			"Each dirty tenant's share of the host's bus-lock budget, per second."),
		busLockDirty: d("buslocks_dirty_tenants",
			"Tenants doing bus locks over the dirty threshold, among which the bus-lock budget is shared."),
		llcBC: d("llc_fairness_bc",
			"Bhattacharyya coefficient between the tenants' LLC shares (by CPUs) and their occupancy in an L3 domain, smoothed (1 = fair).", "domain"),
		llcBusy: d("llc_busy",
			"1 if the L3 domain's tenants fill it (bias isolation can act), else 0.", "domain"),
	}
}

// Describe implements prometheus.Collector.
func (c *hardwareCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.policyOn, c.holdDuty, c.tenantPollution, c.tenantWatts, c.tenantLLC, c.tenantMemBW,
		c.permitCredit, c.permitBooking, c.permitOver, c.packageWatts, c.powerOver,
		c.busLockHostRate, c.busLockShare, c.busLockDirty, c.llcBC, c.llcBusy} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *hardwareCollector) Collect(ch chan<- prometheus.Metric) {
	s, ok := c.src.Latest()
	if !ok {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	seen := map[string]bool{}
	for _, t := range s.Tenants {
		if seen[t.ID] {
			continue
		}
		seen[t.ID] = true
		l := []string{label(t.ID), label(t.Kind), label(t.Name)}
		held := map[[2]string]bool{}
		for _, h := range t.Holds {
			k := [2]string{label(string(h.Policy)), label(string(h.Lever))}
			if held[k] {
				continue
			}
			held[k] = true
			gauge(c.holdDuty, h.Duty, append(append([]string{}, l...), k[0], k[1])...)
		}
		if t.Pollution > 0 {
			gauge(c.tenantPollution, t.Pollution, l...)
		}
		if t.Watts > 0 {
			gauge(c.tenantWatts, t.Watts, l...)
		}
		if t.LLCOccupancy > 0 || t.MemBandwidth > 0 {
			gauge(c.tenantLLC, float64(t.LLCOccupancy), l...)
			gauge(c.tenantMemBW, t.MemBandwidth, l...)
		}
	}
	hw := s.Hardware
	if hw == nil {
		return
	}
	for _, p := range hardwarePolicies {
		_, off := hw.Off[string(p)]
		gauge(c.policyOn, b2f(!off), string(p))
	}
	seenPermit := map[string]bool{}
	for _, p := range hw.Permits {
		if seenPermit[p.Tenant] {
			continue
		}
		seenPermit[p.Tenant] = true
		l := []string{label(p.Tenant), label(p.Name)}
		gauge(c.permitCredit, p.Credit, l...)
		gauge(c.permitBooking, p.Booking, l...)
		gauge(c.permitOver, b2f(p.State == "OVER"), l...)
	}
	seenPkg := map[int]bool{}
	for _, p := range hw.Packages {
		if !seenPkg[p.Package] {
			seenPkg[p.Package] = true
			gauge(c.packageWatts, p.Watts, strconv.Itoa(p.Package))
		}
	}
	seenSock := map[int]bool{}
	for _, so := range hw.Power {
		if !seenSock[so.ID] {
			seenSock[so.ID] = true
			gauge(c.powerOver, b2f(so.State == "over"), strconv.Itoa(so.ID))
		}
	}
	if b := hw.BusLocks; b != nil {
		gauge(c.busLockHostRate, b.HostRate)
		gauge(c.busLockShare, b.Share)
		gauge(c.busLockDirty, float64(b.Dirty))
	}
	seenDom := map[int]bool{}
	for _, v := range hw.LLC {
		if !seenDom[v.Domain] {
			seenDom[v.Domain] = true
			gauge(c.llcBC, v.Smoothed, strconv.Itoa(v.Domain))
			gauge(c.llcBusy, b2f(v.Busy), strconv.Itoa(v.Domain))
		}
	}
}
