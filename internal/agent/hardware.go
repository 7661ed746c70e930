package agent

// The hardware-assisted policies (Alita SC20, Kyoto Middleware 2016) run
// next to the probe policy that works everywhere, one file each
// (policy_*.go). Hardware holds their sensors and the per-CPU and resctrl
// actuators the host has; sensing runs outside the agent's lock, judging
// inside it, and the arbiter applies what the policies decide. Every
// policy is off where the host lacks what it needs, and says why
// (State.Hardware.Off).

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/pmu"
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

// Hardware is the set of hardware-assisted policies that this host can
// run, with their sensors and actuators.
type Hardware struct {
	log *slog.Logger
	now func() time.Time

	clockmod *act.ClockModulation
	cpufreq  *act.CPUFreq
	// levers are the per-CPU actuators the arbiter's holds write through
	// (the two above where they are on).
	levers map[judge.Lever]CPULever
	lh     judge.LeverHost
	domsAt time.Time

	// policies run in this order each interval.
	policies   []policy
	nominalKHz float64

	resmon  *sense.ResctrlMonitor
	classes *act.ResctrlClasses

	// mon ranks the tenants for the RMIDs, across intervals.
	mon sense.MonitorOrder
	// resctrlEvery: the monitoring groups are synced and read every this
	// many intervals (about once a second), resctrlTick counts them.
	resctrlEvery, resctrlTick int

	off    map[string]string
	last   time.Time
	status api.HardwareState
	warn   *tenantWarnings
}

// NewHardware builds the policies the configuration wants and the host
// allows. It never fails: a policy that cannot run is off, with the reason
// in Off (and the log).
func NewHardware(cfg Config, o HardwareOptions) *Hardware {
	hw := &Hardware{log: o.Log, now: o.Now, off: map[string]string{},
		levers: map[judge.Lever]CPULever{}}
	if hw.log == nil {
		hw.log = slog.New(slog.DiscardHandler)
	}
	hw.warn = newTenantWarnings(hw.log)
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

	env := policyEnv{cfg: cfg, host: h, topo: o.Topology, has: has, log: hw.log}
	hw.startResctrl(cfg, o, &env)
	// The policies, in the order they run each interval: one line each.
	for _, p := range []struct {
		name  api.Policy
		build func(policyEnv) (policy, string)
	}{
		{api.PolicyBusLocks, newBusLockPolicy},
		{api.PolicyPermits, newPermitsPolicy},
		{api.PolicyPower, newPowerPolicy},
		{api.PolicyLLC, newLLCPolicy},
		{api.PolicyMBA, newMBAPolicy},
	} {
		pol, off := p.build(env)
		if pol == nil {
			hw.off[string(p.name)] = off
			continue
		}
		hw.policies = append(hw.policies, pol)
		if pp, ok := pol.(*permitsPolicy); ok {
			// The state shows every tenant's pollution while permits run.
			hw.nominalKHz = pp.nominalKHz
		}
	}
	return hw
}

// startResctrl starts resctrl monitoring where the configuration wants it
// and the host has it, for the LLC and MBA policies (env.resctrl), or says
// why not (env.resctrlOff).
func (hw *Hardware) startResctrl(cfg Config, o HardwareOptions, env *policyEnv) {
	rc := cfg.Resctrl
	if !*rc.Enabled {
		env.resctrlOff = "disabled in the configuration (resctrl.enabled: false)"
		return
	}
	// Counters are read only in the L3 domains a tenant's cpuset covers,
	// and only the events the policies use (each read is a cross-CPU call).
	domCPUs := map[int]cpuset.Set{}
	if o.Topology != nil {
		for _, c := range o.Topology.CacheLevel(3) {
			domCPUs[c.ID] = c.CPUs
		}
	}
	mon, err := sense.NewResctrlMonitor(o.Host, o.Identity.HasFlag, o.Identity.IsAMD(), sense.ResctrlMonitorOptions{
		MaxGroups: rc.MaxMonitoringGroups, Now: hw.now, DomainCPUs: domCPUs, SkipLocal: true, MaxNewPerSync: 8, Files: o.Files})
	if err != nil {
		env.resctrlOff = err.Error()
		return
	}
	hw.resmon = mon
	// LLC and bandwidth move slowly, and their judges smooth over several
	// readings: once a second is enough, and each read is a cross-CPU call.
	hw.resctrlEvery = max(1, int(time.Second/cfg.Interval))
	info := mon.Info()
	hw.classes = &act.ResctrlClasses{Host: o.Host, Info: info, State: o.State, Log: o.Log, Now: hw.now}
	env.resctrl = &info
	env.l3 = map[int]l3Domain{}
	if o.Topology != nil {
		for _, c := range o.Topology.CacheLevel(3) {
			env.l3[c.ID] = l3Domain{size: uint64(max(c.SizeBytes, 0)), cpus: c.CPUs}
		}
	}
}

// Off says, per policy and lever, why it is not running here.
func (hw *Hardware) Off() map[string]string {
	out := make(map[string]string, len(hw.off))
	for k, v := range hw.off {
		out[k] = v
	}
	return out
}

// active reports whether any policy runs (nothing to do otherwise).
func (hw *Hardware) active() bool {
	return len(hw.policies) > 0 || hw.resmon != nil
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
	// levers are the levers this host has, for the policies' choice.
	levers judge.LeverHost
}

// tenant is the tenant of this observation with that ID, and true; or
// one known by its ID alone, and false (gone since: its release still
// needs a name).
func (o *hwObservation) tenant(id string) (sense.Tenant, bool) {
	if s, ok := o.byID[id]; ok {
		return s.t, true
	}
	return sense.Tenant{ID: id, Name: id}, false
}

// sense reads the hardware sensors for this interval (outside the agent's
// lock: it does I/O).
func (hw *Hardware) sense(ctx context.Context, now time.Time, samples []sample, protected func(sense.Tenant) bool, health *sensorHealth) *hwObservation {
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
	for _, p := range hw.policies {
		if sp, ok := p.(sensingPolicy); ok {
			sp.sense(ctx, o, health)
		}
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
			err := hw.resmon.Sync(ctx, ts)
			health.record(sensorResctrlSync, time.Since(start), err)
		}
		if phase == min(1, every-1) {
			start := time.Now()
			u, err := hw.resmon.Read(ctx)
			health.record(sensorResctrlRead, time.Since(start), err)
			o.resctrl = u
			o.resctrlRead = true
		}
		hw.resctrlTick++
	}
	return o
}

// monitorOrder is the tenants in resctrl monitoring order (sense.MonitorOrder).
func (hw *Hardware) monitorOrder(samples []sample) []sense.Tenant {
	use := make([]sense.TenantUse, len(samples))
	for i, s := range samples {
		use[i] = sense.TenantUse{Tenant: s.t, Usage: s.usage}
	}
	return hw.mon.Rank(use, hw.resmon.Unmonitored())
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
		hw.warn.once("", "cpufreq-domains", "cpufreq policies", err)
		return
	}
	hw.lh.FreqDomains = hw.lh.FreqDomains[:0]
	for _, d := range doms {
		hw.lh.FreqDomains = append(hw.lh.FreqDomains, d.CPUs)
	}
}

// decide runs every policy on the observation, in order, and returns
// their decisions for the arbiter (under the agent's lock).
func (hw *Hardware) decide(o *hwObservation) []decision {
	hw.refreshLeverHost(o.now)
	o.levers = hw.lh
	if o.resctrlRead {
		hw.status.Resctrl = o.resctrl
		for _, u := range hw.resmon.Unmonitored() {
			hw.warn.once(u.ID, "unmon", "tenant not monitored by resctrl: "+u.ID, errors.New(u.Reason))
		}
	}
	var out []decision
	for _, p := range hw.policies {
		ds := p.observe(o, &hw.status)
		if len(ds) > 0 {
			hw.log.Debug("policy decided", "policy", p.name(), "decisions", len(ds))
		}
		out = append(out, ds...)
	}
	return out
}

// prune forgets the warnings about tenants no longer present.
func (hw *Hardware) prune(present func(id string) bool) { hw.warn.prune(present) }

// stop removes the resctrl monitoring groups; the arbiter releases what
// the policies hold.
func (hw *Hardware) stop() {
	if hw.resmon != nil {
		if err := hw.resmon.Close(); err != nil {
			hw.log.Warn("removing resctrl monitoring groups", "err", err)
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
