package agent

// The hardware-assisted policies (Alita SC20, Kyoto Middleware 2016), next
// to the probe policy that works everywhere:
//
//   - buslocks: Alita's bus-lock budget, from each tenant's bus-lock count
//     (PMU, cgroup mode): a tenant over its share of the host budget is
//     duty-cycled through clock modulation where it owns its cores, else
//     its CPU quota;
//   - permits: Kyoto's pollution permits, from each tenant's llc_cap_act
//     (LLC misses × nominal kHz / unhalted cycles): a tenant whose credit
//     runs out is OVER and capped through its CPU quota until it is UNDER;
//   - power: Alita's socket power budget, from RAPL attributed to tenants:
//     on a socket over budget the "noise" tenants step down through
//     cpufreq or clock modulation where they own their CPUs, else quota;
//   - llc and mba: Alita's bias isolation, from resctrl monitoring: only
//     the abuser of a busy, unfair L3 gets a small class of ways, and an
//     over-share tenant of a saturated domain has its bandwidth halved.
//
// Each policy is a judge module fed by a sensor; the first three act
// through the agent's holds (the tightest claim per lever wins), the
// resctrl ones through resctrl classes. Sensing runs outside the agent's
// lock, judging and acting inside it. Every policy is off where the host
// lacks what it needs, and says why (State.Hardware.Off).

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/pmu"
	"github.com/crosstalk-project/crosstalk/internal/resctrl"
	"github.com/crosstalk-project/crosstalk/internal/sense"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

// HardwareOptions are what NewHardware needs besides the configuration.
type HardwareOptions struct {
	Host     *host.Host
	Topology *topology.Topology
	Identity topology.Identity
	State    *act.StateFile
	Log      *slog.Logger
	Now      func() time.Time
	// Events are the perf events the agent counts per tenant (bus_locks
	// and the inputs of the pollution rate only where the PMU has them).
	Events []string
	// QuotaSteps is the duty grid of the CPU-quota lever (Sparsify.Steps).
	QuotaSteps int
	// Files keeps hot files open between reads (the agent's re-reader,
	// shared with the cgroup files): the monitoring groups' mon_data.
	Files *host.Rereader
}

// Hardware is the set of hardware-assisted policies that this host can run.
type Hardware struct {
	log  *slog.Logger
	topo *topology.Topology
	now  func() time.Time

	clockmod *act.ClockModulation
	cpufreq  *act.CPUFreq
	// levers are the per-CPU actuators the holds write through (the two
	// above where they are on).
	levers map[judge.Lever]CPULever
	lh     judge.LeverHost
	domsAt time.Time

	busLocks      *judge.BusLockBudget
	busLockLevers []judge.Lever
	permits       *judge.Permits
	nominalKHz    float64
	power         *sense.PowerSensor
	powerBudget   *judge.PowerBudget
	powerLevers   []judge.Lever

	resmon  *sense.ResctrlMonitor
	classes *act.ResctrlClasses
	bias    *judge.BiasIsolation
	mba     *judge.MemBWThrottle
	l3      map[int]l3Domain
	// classed are the tenants with a resctrl class, per policy: the L3
	// domains they are restricted in, with the fraction (of the ways, of
	// the bandwidth) left to them there.
	classed map[api.Policy]map[string]map[int]float64

	// monUse is each tenant's smoothed CPU use, for the monitoring order;
	// monOrder the order last ranked, monAge intervals since.
	monUse   map[string]float64
	monOrder []string
	monAge   int
	// resctrlEvery: the monitoring groups are synced and read every this
	// many intervals (about once a second), resctrlTick counts them.
	resctrlEvery, resctrlTick int

	off     map[string]string
	last    time.Time
	status  api.HardwareState
	warned  map[string]bool
	classOK bool
}

type l3Domain struct {
	size uint64
	ways int
	cpus cpuset.Set
}

// NewHardware builds the policies the configuration wants and the host
// allows. It never fails: a policy that cannot run is off, with the reason
// in Off (and the log).
func NewHardware(cfg Config, o HardwareOptions) *Hardware {
	hw := &Hardware{log: o.Log, topo: o.Topology, now: o.Now, off: map[string]string{}, warned: map[string]bool{}, monUse: map[string]float64{},
		levers:  map[judge.Lever]CPULever{},
		classed: map[api.Policy]map[string]map[int]float64{}}
	if hw.log == nil {
		hw.log = slog.New(slog.DiscardHandler)
	}
	if hw.now == nil {
		hw.now = time.Now
	}
	h := o.Host
	has := func(ev string) bool { return slices.Contains(o.Events, ev) }

	// Per-CPU levers.
	if cm, err := act.NewClockModulation(h, o.State, o.Topology, o.Identity, cfg.Levers.ClockModulation, o.Log); err == nil {
		hw.clockmod = cm
		hw.levers[judge.LeverClockModulation] = cm
	} else {
		hw.off[string(judge.LeverClockModulation)] = err.Error()
	}
	if cf, err := act.NewCPUFreq(h, o.State, o.Topology, cfg.Levers.CPUFreq, o.Log); err == nil {
		hw.cpufreq = cf
		hw.levers[judge.LeverCPUFreq] = cf
	} else {
		hw.off[string(judge.LeverCPUFreq)] = err.Error()
	}
	hw.lh = judge.LeverHost{Siblings: map[int]cpuset.Set{}, QuotaSteps: max(2, o.QuotaSteps),
		ClockModulation: hw.clockmod != nil, CPUFreq: hw.cpufreq != nil,
		ClockModulationWhy: hw.off[string(judge.LeverClockModulation)], CPUFreqWhy: hw.off[string(judge.LeverCPUFreq)]}
	if hw.clockmod != nil {
		hw.lh.ClockModSteps = hw.clockmod.Steps()
	}
	if hw.cpufreq != nil {
		hw.lh.CPUFreqSteps = hw.cpufreq.Steps()
	}
	if o.Topology != nil {
		for _, c := range o.Topology.CPUs {
			hw.lh.Siblings[c.ID] = c.Siblings
		}
	}

	// Bus-lock budget.
	switch {
	case !*cfg.BusLocks.Enabled:
		hw.off[string(api.PolicyBusLocks)] = "disabled in the configuration (buslocks.enabled: false)"
	case !has(sense.EventBusLocks):
		hw.off[string(api.PolicyBusLocks)] = "the PMU does not count bus locks here (no hardware PMU, or no verified bus-lock event for this CPU model: see crosstalk doctor)"
	default:
		hw.busLocks = judge.NewBusLockBudget(cfg.BusLocks)
		hw.busLockLevers, _ = judge.ParseLevers("buslocks.levers", cfg.BusLocks.Levers)
	}

	// Pollution permits.
	switch {
	case !cfg.Permits.Active():
		hw.off[string(api.PolicyPermits)] = "no llc_cap booked (permits.default, permits.classes, permits.tenants)"
	case !has(sense.EventLLCMisses) || !has(sense.EventCycles):
		hw.off[string(api.PolicyPermits)] = "the PMU does not count LLC misses and cycles per tenant here, so pollution (llc_cap_act) cannot be measured"
	default:
		khz, src, err := sense.NominalFreq(h)
		if err != nil || khz <= 0 {
			hw.off[string(api.PolicyPermits)] = fmt.Sprintf("no nominal CPU frequency for llc_cap_act (%v)", err)
			break
		}
		hw.nominalKHz = float64(khz)
		hw.permits = judge.NewPermits(cfg.Permits)
		hw.log.Info("pollution permits on", "nominal_khz", khz, "frequency_source", src)
	}

	// Power budget.
	switch {
	case !cfg.Power.Enabled:
		hw.off[string(api.PolicyPower)] = "disabled (power.enabled: false): a socket budget is a property of the SKU and the rack, set it to turn the policy on"
	default:
		ps, err := sense.NewPowerSensor(h, o.Topology)
		if err != nil {
			hw.off[string(api.PolicyPower)] = err.Error()
			break
		}
		hw.power = ps
		hw.powerBudget = judge.NewPowerBudget(cfg.Power)
		hw.powerLevers, _ = judge.ParseLevers("power.levers", cfg.Power.Levers)
	}

	// resctrl monitoring, LLC isolation, MBA.
	rc := cfg.Resctrl
	if !*rc.Enabled {
		hw.off[string(api.PolicyLLC)] = "disabled in the configuration (resctrl.enabled: false)"
		hw.off[string(api.PolicyMBA)] = hw.off[string(api.PolicyLLC)]
		return hw
	}
	// Counters are read only in the L3 domains a tenant's cpuset covers,
	// and only the events the policies use (each read is a cross-CPU call).
	domCPUs := map[int]cpuset.Set{}
	if o.Topology != nil {
		for _, c := range o.Topology.CacheLevel(3) {
			domCPUs[c.ID] = c.CPUs
		}
	}
	mon, err := sense.NewResctrlMonitor(h, o.Identity.HasFlag, o.Identity.IsAMD(), sense.ResctrlMonitorOptions{
		MaxGroups: rc.MaxMonitoringGroups, Now: hw.now, DomainCPUs: domCPUs, SkipLocal: true, MaxNewPerSync: 8, Files: o.Files})
	if err != nil {
		hw.off[string(api.PolicyLLC)] = err.Error()
		hw.off[string(api.PolicyMBA)] = err.Error()
		return hw
	}
	hw.resmon = mon
	// LLC and bandwidth move slowly, and their judges smooth over several
	// readings: once a second is enough, and each read is a cross-CPU call.
	hw.resctrlEvery = max(1, int(time.Second/cfg.Interval))
	info := mon.Info()
	hw.classes = &act.ResctrlClasses{Host: h, Info: info, State: o.State, Log: o.Log, Now: hw.now}
	hw.l3 = map[int]l3Domain{}
	if o.Topology != nil {
		for _, c := range o.Topology.CacheLevel(3) {
			hw.l3[c.ID] = l3Domain{size: uint64(max(c.SizeBytes, 0)), cpus: c.CPUs}
		}
	}
	switch l := rc.LLCIsolation; {
	case !*l.Enabled:
		hw.off[string(api.PolicyLLC)] = "disabled in the configuration (resctrl.llc_isolation.enabled: false)"
	case info.L3 == nil:
		hw.off[string(api.PolicyLLC)] = fmt.Sprintf("resctrl at %s has no L3 cache allocation (CAT)", info.Mount)
	case len(hw.l3) == 0:
		hw.off[string(api.PolicyLLC)] = "no L3 in the CPU topology"
	default:
		for id, d := range hw.l3 {
			d.ways = info.L3.Ways
			hw.l3[id] = d
		}
		hw.bias = judge.NewBiasIsolation(judge.BiasConfig{ThrottleBC: l.ThrottleBC, RelaxBC: l.RelaxBC, BusyFraction: l.BusyFraction,
			RelaxPeriod: l.RelaxPeriod, ReplacePeriod: l.ReplacePeriod})
	}
	switch m := rc.MBA; {
	case !m.Enabled:
		hw.off[string(api.PolicyMBA)] = "disabled (resctrl.mba.enabled: false): its threshold is the traffic this platform's L3 domain carries before it hurts, set it to turn the policy on"
	case info.MB == nil:
		hw.off[string(api.PolicyMBA)] = fmt.Sprintf("resctrl at %s has no memory-bandwidth allocation (MBA)", info.Mount)
	case info.Mon == nil || !info.Mon.Has(resctrl.MBMTotalBytes):
		hw.off[string(api.PolicyMBA)] = fmt.Sprintf("resctrl at %s has no mbm_total_bytes monitoring", info.Mount)
	default:
		mc := judge.MBAConfig{ThresholdBytesPerSec: m.ThresholdBytesPerSec, RelaxGuardBytesPerSec: m.RelaxGuardBytesPerSec, Floor: m.Floor}
		if info.MB.Max > 0 {
			mc.HardwareMin = float64(info.MB.MinBandwidth) / float64(info.MB.Max)
			if info.MB.Units == "percent" && info.MB.Granularity > 0 {
				mc.Quantum = float64(info.MB.Granularity) / float64(info.MB.Max)
			}
		}
		hw.mba = judge.NewMemBWThrottle(mc)
	}
	return hw
}

// Off says, per policy and lever, why it is not running here.
func (hw *Hardware) Off() map[string]string {
	out := make(map[string]string, len(hw.off))
	for k, v := range hw.off {
		out[k] = v
	}
	return out
}

func (hw *Hardware) lever(l judge.Lever) CPULever { return hw.levers[l] }

// active reports whether any policy runs (nothing to do otherwise).
func (hw *Hardware) active() bool {
	return hw.busLocks != nil || hw.permits != nil || hw.powerBudget != nil || hw.resmon != nil
}

// hwObservation is what the sense half read for the act half.
type hwObservation struct {
	now     time.Time
	dt      time.Duration
	samples []sample
	byID    map[string]sample
	power   sense.PowerReading
	powerOK bool
	resctrl map[string]sense.ResctrlUsage
	// resctrlRead says the monitoring data was read this interval (the
	// resctrl policies step only then).
	resctrlRead bool
	protects    map[string]bool
}

// sense reads the hardware sensors for this interval (outside the agent's
// lock: it does I/O).
func (hw *Hardware) sense(now time.Time, samples []sample, protected func(sense.Tenant) bool, health *sensorHealth) *hwObservation {
	if !hw.active() {
		return nil
	}
	o := &hwObservation{now: now, samples: samples, byID: make(map[string]sample, len(samples)), protects: map[string]bool{}}
	if !hw.last.IsZero() {
		o.dt = now.Sub(hw.last)
	}
	hw.last = now
	for _, s := range samples {
		o.byID[s.t.ID] = s
		if protected(s.t) {
			o.protects[s.t.ID] = true
		}
	}
	if hw.power != nil {
		in := make([]sense.PowerTenantInput, 0, len(samples))
		for _, s := range samples {
			in = append(in, sense.PowerTenantInput{ID: s.t.ID, CPUs: s.t.CPUs, Usage: s.usage})
		}
		start := time.Now()
		r, ok, err := hw.power.Read(now, in)
		health.record(sensorPower, time.Since(start), err)
		o.power, o.powerOK = r, ok
	}
	if hw.resmon != nil {
		// Groups are synced on one interval of each period and read on the
		// next (with a 500 ms interval: once a second each), so their costs
		// do not add up in one interval.
		every := max(1, hw.resctrlEvery)
		phase := hw.resctrlTick % every
		if phase == 0 {
			ts := hw.monitorOrder(samples)
			start := time.Now()
			err := hw.resmon.Sync(ts)
			health.record(sensorResctrlSync, time.Since(start), err)
		}
		if phase == min(1, every-1) {
			start := time.Now()
			u, err := hw.resmon.Read()
			health.record(sensorResctrlRead, time.Since(start), err)
			o.resctrl = u
			o.resctrlRead = true
		}
		hw.resctrlTick++
	}
	return o
}

// monitorOrder ranks tenants for resctrl monitoring, most important first:
// RMIDs are few (a few hundred on the largest parts) and a host may have a
// thousand tenants, so the busiest — the ones able to abuse the cache —
// get them. The rank is a smoothed CPU use, and a tenant monitored now
// keeps its RMID unless another is half again as busy: re-ranking noisy
// readings each interval would move monitoring groups back and forth
// (each move a group made and removed and every thread written again),
// and a new group's first bandwidth reading is lost anyway.
func (hw *Hardware) monitorOrder(samples []sample) []sense.Tenant {
	// Between re-rankings (every monitorRerank intervals) the order stands,
	// newcomers at its end: nobody is evicted for a reading's noise.
	hw.monAge++
	if hw.monOrder != nil && hw.monAge < monitorRerank {
		byID := make(map[string]sense.Tenant, len(samples))
		for _, s := range samples {
			byID[s.t.ID] = s.t
		}
		ts := make([]sense.Tenant, 0, len(samples))
		kept := make([]string, 0, len(samples))
		for _, id := range hw.monOrder {
			if t, ok := byID[id]; ok {
				ts = append(ts, t)
				kept = append(kept, id)
				delete(byID, id)
			}
		}
		for _, s := range samples {
			if _, ok := byID[s.t.ID]; ok {
				ts = append(ts, s.t)
				kept = append(kept, s.t.ID)
			}
		}
		hw.monOrder = kept
		return ts
	}
	hw.monAge = 0
	unmon := map[string]bool{}
	for _, u := range hw.resmon.Unmonitored() {
		unmon[u.ID] = true
	}
	seen := make(map[string]bool, len(samples))
	type ranked struct {
		t    sense.Tenant
		rank float64
	}
	rs := make([]ranked, 0, len(samples))
	for _, s := range samples {
		seen[s.t.ID] = true
		u, ok := hw.monUse[s.t.ID]
		if !ok {
			u = s.usage
		}
		u += 0.2 * (s.usage - u)
		hw.monUse[s.t.ID] = u
		r := u
		if ok && !unmon[s.t.ID] {
			r *= 1.5
		}
		rs = append(rs, ranked{s.t, r})
	}
	for id := range hw.monUse {
		if !seen[id] {
			delete(hw.monUse, id)
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
	ts := make([]sense.Tenant, len(rs))
	hw.monOrder = make([]string, len(rs))
	for i, r := range rs {
		ts[i] = r.t
		hw.monOrder[i] = r.t.ID
	}
	return ts
}

// monitorRerank is how many intervals the monitoring order stands.
const monitorRerank = 10

func (hw *Hardware) warnOnce(key, what string, err error) {
	if hw.warned[key] {
		hw.log.Debug(what, "err", err)
		return
	}
	hw.warned[key] = true
	hw.log.Warn(what+" (further errors at debug level)", "err", err)
}

// refreshLeverHost re-reads the cpufreq policies now and then (CPUs go
// online and offline).
func (hw *Hardware) refreshLeverHost(now time.Time) {
	if hw.cpufreq == nil || (!hw.domsAt.IsZero() && now.Sub(hw.domsAt) < 30*time.Second) {
		return
	}
	hw.domsAt = now
	doms, err := hw.cpufreq.Domains()
	if err != nil {
		hw.warnOnce("cpufreq-domains", "cpufreq policies", err)
		return
	}
	hw.lh.FreqDomains = hw.lh.FreqDomains[:0]
	for _, d := range doms {
		hw.lh.FreqDomains = append(hw.lh.FreqDomains, d.CPUs)
	}
}

// actLocked judges the interval and acts, under the agent's lock.
func (hw *Hardware) actLocked(a *Agent, o *hwObservation) {
	if o == nil {
		return
	}
	hw.refreshLeverHost(o.now)
	lt := make([]judge.LeverTenant, 0, len(o.samples))
	for _, s := range o.samples {
		lt = append(lt, judge.LeverTenant{ID: s.t.ID, CPUs: s.t.CPUs})
	}
	if hw.busLocks != nil {
		hw.busLocksLocked(a, o, hw.choose(lt, hw.busLockLevers))
	}
	if hw.permits != nil {
		hw.permitsLocked(a, o)
	}
	if hw.powerBudget != nil && o.powerOK {
		hw.powerLocked(a, o, hw.choose(lt, hw.powerLevers))
	}
	if hw.resmon != nil && o.resctrlRead {
		hw.resctrlLocked(a, o)
	}
}

func (hw *Hardware) choose(ts []judge.LeverTenant, prefer []judge.Lever) map[string]judge.LeverChoice {
	out := make(map[string]judge.LeverChoice, len(ts))
	for _, c := range judge.ChooseLevers(ts, hw.lh, prefer) {
		out[c.Tenant] = c
	}
	return out
}

// cores counts the physical cores a cpuset covers.
func (hw *Hardware) cores(cpus cpuset.Set) int {
	if hw.topo == nil {
		return cpus.Len()
	}
	seen := map[[2]int]bool{}
	for _, id := range cpus.List() {
		if c, ok := hw.topo.CPU(id); ok {
			seen[[2]int{c.Package, c.Core}] = true
		}
	}
	return max(1, len(seen))
}

// claimFor turns a policy's step on a lever into the claim the holds enforce.
func (a *Agent) claimFor(t sense.Tenant, lever judge.Lever, step, steps int, cpus cpuset.Set, reason string, now time.Time) claim {
	c := claim{lever: lever, step: step, steps: steps, cpus: cpus, reason: reason, since: now}
	if lever == judge.LeverCPUQuota {
		q := a.sp.Quota(step, t.CPUs.Len())
		if steps > 0 && steps != a.sp.Steps {
			q = cgroup.Quota{Quota: max(cgroup.MinQuota, time.Duration(float64(a.sp.Period)*float64(max(1, t.CPUs.Len()))*float64(step)/float64(steps))), Period: a.sp.Period}
		}
		c.quota = q
	}
	return c
}

func actionKind(held bool, oldDuty, newDuty float64) api.ActionKind {
	switch {
	case !held:
		return api.KindThrottle
	case newDuty < oldDuty:
		return api.KindTighten
	case newDuty > oldDuty:
		return api.KindRelax
	}
	return api.KindThrottle
}

// busLocksLocked runs Alita's bus-lock budget.
func (hw *Hardware) busLocksLocked(a *Agent, o *hwObservation, levers map[string]judge.LeverChoice) {
	in := judge.BusLockSample{At: o.now, Duration: o.dt}
	for _, s := range o.samples {
		rate, measured := s.counters[sense.EventBusLocks]
		l := levers[s.t.ID]
		in.Tenants = append(in.Tenants, judge.BusLockTenant{ID: s.t.ID, Name: s.t.Name, Rate: rate, Measured: measured,
			Cores: hw.cores(s.t.CPUs), Protected: o.protects[s.t.ID], Lever: l.Lever, Steps: l.Steps})
	}
	for _, d := range hw.busLocks.Observe(in) {
		s, ok := o.byID[d.Tenant]
		if !ok { // gone
			a.releaseHoldLocked(d.Tenant, api.PolicyBusLocks)
			continue
		}
		hw.applyStep(a, o.now, s.t, api.PolicyBusLocks, d.Lever, d.Action == judge.BusLockRelease, d.Step, d.Steps, levers[d.Tenant].CPUs, d.Reason)
	}
	st := hw.busLocks.Status()
	hw.status.BusLocks = &st
}

// applyStep applies one policy decision (a step on a lever, or a release)
// through the holds and records it.
func (hw *Hardware) applyStep(a *Agent, now time.Time, t sense.Tenant, policy api.Policy, lever judge.Lever, release bool, step, steps int, cpus cpuset.Set, reason string) {
	held := a.heldLocked(t.ID, policy)
	var oldDuty float64 = 1
	var oldLever judge.Lever
	if h := a.holds[t.ID]; h != nil {
		if c, ok := h.claims[policy]; ok {
			oldDuty, oldLever = claimDuty(c, t), c.lever
		}
	}
	if release || (steps > 0 && step >= steps) {
		if !held {
			return
		}
		if err := a.releaseHoldLocked(t.ID, policy); err != nil {
			a.log.Error("release", "policy", policy, "tenant", t.ID, "err", err)
			a.journal(act.Event{Kind: "error", Policy: string(policy), Tenant: t.ID, Name: t.Name, Detail: "release failed: " + err.Error()})
		}
		a.recordPolicyLocked(now, t, policy, api.KindRelease, api.Lever(lever), 1, reason)
		return
	}
	if lever == "" {
		hw.warnOnce("nolever:"+t.ID, "no lever can throttle "+t.ID, errors.New(reason))
		return
	}
	c := a.claimFor(t, lever, step, steps, cpus, reason, now)
	if err := a.holdLocked(t, policy, c); err != nil {
		a.handleWriteErr(t, err)
		return
	}
	d := claimDuty(c, t)
	if held && d == oldDuty && c.lever == oldLever {
		// Nothing changed (a power decision on one socket while another
		// sets the tenant's quota): no action to record, whose reason
		// would speak of a change that did not happen.
		a.log.Debug("claim unchanged", "policy", policy, "tenant", t.ID, "duty", d, "reason", reason)
		return
	}
	a.recordPolicyLocked(now, t, policy, actionKind(held, oldDuty, d), api.Lever(lever), d, reason)
}

func claimDuty(c claim, t sense.Tenant) float64 {
	if c.lever == judge.LeverCPUQuota {
		return min(1, c.quota.CPUs()/float64(max(1, t.CPUs.Len())))
	}
	return c.duty()
}

// permitsLocked runs Kyoto's pollution permits.
func (hw *Hardware) permitsLocked(a *Agent, o *hwObservation) {
	in := judge.PermitSample{At: o.now, Duration: o.dt}
	for _, s := range o.samples {
		act, ok := sense.TenantPollution(s.counters, hw.nominalKHz)
		in.Tenants = append(in.Tenants, judge.PermitTenant{ID: s.t.ID, Name: s.t.Name, Kind: s.t.Kind, LLCCapAct: act, Measured: ok,
			Usage: s.usage, CPUs: max(1, s.t.CPUs.Len()), Protected: o.protects[s.t.ID]})
	}
	for _, d := range hw.permits.Observe(in) {
		s, ok := o.byID[d.Tenant]
		if !ok {
			a.releaseHoldLocked(d.Tenant, api.PolicyPermits)
			continue
		}
		t := s.t
		if d.State != judge.PermitOver {
			if a.heldLocked(t.ID, api.PolicyPermits) {
				if err := a.releaseHoldLocked(t.ID, api.PolicyPermits); err != nil {
					a.log.Error("release", "policy", api.PolicyPermits, "tenant", t.ID, "err", err)
				}
				a.recordPolicyLocked(o.now, t, api.PolicyPermits, api.KindRelease, api.LeverCPUQuota, 1, "UNDER: "+d.Reason)
			}
			continue
		}
		q := cgroup.Quota{Quota: max(cgroup.MinQuota, time.Duration(d.CapCores*float64(a.sp.Period))), Period: a.sp.Period}
		held := a.heldLocked(t.ID, api.PolicyPermits)
		oldDuty := 1.0
		if h := a.holds[t.ID]; held && h != nil {
			oldDuty = claimDuty(h.claims[api.PolicyPermits], t)
		}
		if err := a.holdQuotaLocked(t, api.PolicyPermits, q, "OVER: "+d.Reason, o.now); err != nil {
			a.handleWriteErr(t, err)
			continue
		}
		kind := actionKind(held, oldDuty, claimDuty(claim{lever: judge.LeverCPUQuota, quota: q}, t))
		a.recordPolicyLocked(o.now, t, api.PolicyPermits, kind, api.LeverCPUQuota, d.Duty, "OVER: "+d.Reason)
	}
	hw.status.Permits = hw.permits.Status()
}

// powerLocked runs Alita's socket power budget.
func (hw *Hardware) powerLocked(a *Agent, o *hwObservation, levers map[string]judge.LeverChoice) {
	r := o.power
	in := judge.PowerSample{At: o.now, Duration: o.dt, CPUBusy: r.CPUBusy}
	for _, p := range r.Packages {
		in.Sockets = append(in.Sockets, judge.PowerSocket{ID: p.Package, Watts: p.Watts, CPUs: p.CPUs,
			AvgTemp: p.AvgTemp, HasTemp: p.HasTemp, PerCoreTemps: p.PerCoreTemps})
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
	hw.status.TenantWatts = watts
	hw.status.Packages = r.Packages
	for _, d := range hw.powerBudget.Observe(in) {
		s, ok := o.byID[d.Tenant]
		if !ok {
			a.releaseHoldLocked(d.Tenant, api.PolicyPower)
			a.releaseHoldLocked(d.Tenant, api.PowerSocketPolicy(d.Socket))
			continue
		}
		release := d.Action == judge.PowerRelease
		if d.Lever == judge.LeverCPUQuota {
			// Quota cannot act per socket: the tenant's lowest step on any
			// socket applies to all of it.
			step, steps, ok := hw.powerBudget.TenantStep(d.Tenant)
			hw.applyStep(a, o.now, s.t, api.PolicyPower, d.Lever, release && !ok, step, steps, s.t.CPUs, d.Reason)
			continue
		}
		hw.applyStep(a, o.now, s.t, api.PowerSocketPolicy(d.Socket), d.Lever, release, d.Step, d.Steps, d.CPUs, d.Reason)
	}
	hw.status.Power = hw.powerBudget.Sockets()
}

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
		s, ok := o.byID[c.Tenant]
		t := sense.Tenant{ID: c.Tenant, Name: c.Tenant}
		if ok {
			t = s.t
		}
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
		s, ok := o.byID[m.Tenant]
		t := sense.Tenant{ID: m.Tenant, Name: m.Tenant}
		if ok {
			t = s.t
		}
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

// stop releases what only the hardware policies hold (resctrl classes and
// monitoring groups); the holds release the rest.
func (hw *Hardware) stop(a *Agent) {
	if hw.classes != nil && !a.cfg.DryRun {
		if n, err := hw.classes.RestoreAll(); err != nil || n > 0 {
			a.log.Info("released resctrl classes", "released", n, "err", err)
		}
	}
	for p, m := range hw.classed {
		lever := api.LeverCAT
		if p == api.PolicyMBA {
			lever = api.LeverMBA
		}
		for id := range m {
			a.recordPolicyLocked(a.d.Now(), sense.Tenant{ID: id, Name: id}, p, api.KindRelease, lever, 1, "agent stopping")
		}
	}
	hw.classed = map[api.Policy]map[string]map[int]float64{}
	if hw.resmon != nil {
		if err := hw.resmon.Close(); err != nil {
			a.log.Warn("removing resctrl monitoring groups", "err", err)
		}
	}
}

// State returns a copy of the state for publishing.
func (hw *Hardware) State() api.HardwareState {
	s := hw.status
	s.Off = hw.Off()
	return s
}

// PolicyAvailability says whether a hardware policy or lever runs on a host.
type PolicyAvailability struct {
	Name string
	On   bool
	Why  string
}

// HardwareAvailability builds the hardware policies as the agent would on
// h with cfg — reading only: nothing is made or written — and says which
// would run and why the others would not, for crosstalk doctor. Perf events
// are those the host's PMU offers (on any root, so a captured tree says
// what its machine would do).
func HardwareAvailability(cfg Config, h *host.Host) []PolicyAvailability {
	cfg.fill()
	topo, _ := topology.Read(h)
	var id topology.Identity
	if data, err := h.ReadFile("/proc/cpuinfo"); err == nil {
		id, _ = topology.IdentityFromCPUInfo(string(data))
	}
	var events []string
	if pres := pmu.Detect(h); *cfg.Perf.Enabled && pres.Hardware {
		arch, known := pmu.Lookup(id.Vendor, id.Family, id.Model, id.Stepping)
		for _, e := range sense.PerfEventsFor(pres, arch, known) {
			events = append(events, e.Name)
		}
	}
	// A state file no one writes: the actuators only read their devices here.
	st, err := act.OpenState(filepath.Join(os.TempDir(), "crosstalk-doctor-never-written", "state.json"))
	if err != nil {
		return []PolicyAvailability{{Name: "hardware", Why: err.Error()}}
	}
	hw := NewHardware(cfg, HardwareOptions{Host: h, Topology: topo, Identity: id, State: st, Events: events, QuotaSteps: cfg.Sparsify().Steps})
	if hw.resmon != nil {
		hw.resmon.Close() // made no group: Sync never ran
	}
	off := hw.Off()
	var out []PolicyAvailability
	for _, name := range []string{string(api.PolicyBusLocks), string(api.PolicyPermits), string(api.PolicyPower), string(api.PolicyLLC), string(api.PolicyMBA),
		string(judge.LeverClockModulation), string(judge.LeverCPUFreq)} {
		why, isOff := off[name]
		out = append(out, PolicyAvailability{Name: name, On: !isOff, Why: why})
	}
	return out
}
