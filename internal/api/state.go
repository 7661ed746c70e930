package api

import (
	"time"

	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// State is what a running agent knows, published after every interval: the
// JSON state API serves it, the Prometheus collector turns it into metrics,
// and `crosstalk top` draws it. It is a value: readers get a copy.
type State struct {
	Time     time.Time `json:"time"`
	Interval float64   `json:"interval_seconds"`
	Host     string    `json:"host"`
	Version  string    `json:"version"`
	DryRun   bool      `json:"dry_run"`
	// PMU says whether hardware counters are in use (else the canary probe
	// is the only contention signal).
	PMU bool `json:"pmu"`
	// Contention is the judge's verdict for this interval, and the worst
	// probe latency against its quiet baseline (1.0 = quiet).
	Contention      bool    `json:"contention"`
	ContentionRatio float64 `json:"contention_ratio"`
	// CPUWait is the CPU-wait verdict: some tenant's work takes far longer
	// than usual because its threads wait for a CPU; CPUWaitRatio is the
	// worst tenant's stretch over its quiet stretch (1.0 = as usual).
	CPUWait      bool    `json:"cpu_wait_contention"`
	CPUWaitRatio float64 `json:"cpu_wait_ratio"`
	// CPI is the CPI verdict, where a PMU counts cycles and instructions:
	// some tenant runs at far more cycles an instruction than usual;
	// CPIRatio is the worst tenant's CPI over its usual CPI.
	CPI      bool    `json:"cpi_contention"`
	CPIRatio float64 `json:"cpi_ratio"`

	Tenants []TenantState `json:"tenants"`
	Probes  []ProbeState  `json:"probes"`
	// ProbeCPU is the CPU time the canary probe has taken on each CPU
	// since the agent started, by the reading that took it (interval,
	// watch, proof): what the probe costs the tenants it reads beside.
	ProbeCPU []ProbeCPUState `json:"probe_cpu,omitempty"`
	Suspects []Suspect       `json:"suspects"`
	Proof    *ProofState     `json:"proof"`
	// Actions are the most recent actions, newest last.
	Actions []ActionRecord `json:"actions"`

	ActionsTotal map[string]uint64 `json:"actions_total"` // by kind: throttle, tighten, relax, release, proof
	ProofsTotal  map[string]uint64 `json:"proofs_total"`  // by result: polluter, innocent, aborted
	// IntervalCPU is the agent's own CPU time over the last interval, in seconds.
	IntervalCPU float64 `json:"interval_cpu_seconds"`
	// PerfFDs is the number of perf file descriptors open (bounded by the budget).
	PerfFDs int `json:"perf_fds"`
	// Hardware is the state of the hardware-assisted policies (bus-lock
	// budget, permits, power budget, LLC/MBA isolation) and why those that
	// do not run here are off.
	Hardware *HardwareState `json:"hardware,omitempty"`
	// Sensors is how each sensor the agent ran fared (see SensorState).
	Sensors []SensorState `json:"sensors,omitempty"`
}

// HoldState is one policy's hold on a tenant.
type HoldState struct {
	Policy Policy `json:"policy"` // probe, buslocks, permits, power, power:SOCKET, llc, mba
	Lever  Lever  `json:"lever"`  // cpu_quota, clock_modulation, cpufreq, cat, mba
	// Duty is the fraction left to the tenant: of its CPU time (quota), of
	// its clock (clock modulation, cpufreq steps), of the LLC ways or of its
	// memory bandwidth (the lowest over its restricted domains).
	Duty float64 `json:"duty"`
	// Quota in CPUs (cpu_quota); Step of Steps on CPUs (per-CPU levers).
	Quota  float64   `json:"quota,omitempty"`
	Step   int       `json:"step,omitempty"`
	Steps  int       `json:"steps,omitempty"`
	CPUs   string    `json:"cpus,omitempty"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since,omitzero"`
}

// TenantState is one tenant as the agent sees it this interval.
type TenantState struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	Name string `json:"name"`
	// UUID is a libvirt VM's domain UUID (omitted for other tenants).
	UUID   string `json:"uuid,omitempty"`
	Cgroup string `json:"cgroup"`
	CPUs   string `json:"cpus"`
	// CPU is the CPU time used per second (1.0 = one full CPU).
	CPU float64 `json:"cpu"`
	// ThrottledRatio is the fraction of the interval its quota held it back.
	ThrottledRatio float64 `json:"throttled_ratio"`
	// RunDelay is the time its threads waited for a CPU per second (vCPU wait
	// time for VMs), summed over threads: a rate over the last window its
	// threads were read in (up to 5 s; they are read in turns).
	RunDelay float64 `json:"run_delay"`
	// PSI is cpu "some" pressure: fraction of time at least one task waited.
	PSI float64 `json:"psi_cpu_some"`
	// CPUSeconds, ThrottledSeconds and RunDelaySeconds are the cumulative
	// CPU time, time held back by its CPU quota (any quota) and time its
	// threads waited for a CPU, in seconds, since crosstalk first saw it;
	// PSISomeSeconds is the cumulative cpu "some" pressure stall time (nil
	// without PSI). The metrics export them as counters.
	CPUSeconds       float64  `json:"cpu_seconds_total"`
	ThrottledSeconds float64  `json:"throttled_seconds_total"`
	RunDelaySeconds  float64  `json:"run_delay_seconds_total"`
	PSISomeSeconds   *float64 `json:"psi_cpu_some_seconds_total,omitempty"`
	// Counters are per-second rates of perf events (cycles, instructions,
	// llc_misses, bus_locks, context_switches, …) when counted this interval.
	Counters map[string]float64 `json:"counters,omitempty"`
	// PerfEvents are the perf events counted for it, summed over the
	// intervals it was counted in (an undercount where the fd budget or
	// multiplexing left it uncounted); task_clock is left out, CPUSeconds
	// has it.
	PerfEvents map[string]float64 `json:"perf_events_total,omitempty"`
	// KernelBusLockReports counts the kernel's split-lock and bus-lock
	// reports that named its threads, since crosstalk first saw it (the
	// kernel rate-limits them: a count of reports, not of bus locks).
	KernelBusLockReports float64 `json:"kernel_bus_lock_reports_total,omitempty"`
	// Quota is the CPU quota in CPUs now (0 = unlimited).
	Quota float64 `json:"quota"`
	// Throttled says crosstalk is holding it to a reduced duty; Duty is the
	// fraction of its CPUs it may use (1 = not throttled).
	Throttled bool    `json:"throttled"`
	Duty      float64 `json:"duty"`
	Protected bool    `json:"protected"`
	// Score is its suspect score (0 = not suspected).
	Score float64 `json:"suspect_score"`
	// Holds lists every policy holding it back now, with the lever.
	Holds []HoldState `json:"holds,omitempty"`
	// Pollution is Kyoto's llc_cap_act (LLC misses per ms of unhalted
	// time), where the PMU counts it.
	Pollution float64 `json:"llc_cap_act,omitempty"`
	// CPIRatio is its cycles per instruction over its usual, where the PMU
	// counts them and its usual is learned (0 = not judged).
	CPIRatio float64 `json:"cpi_ratio,omitempty"`
	// Watts is the power attributed to it (RAPL).
	Watts float64 `json:"watts,omitempty"`
	// LLCOccupancy (bytes) and MemBandwidth (bytes/s, MBM total), summed
	// over L3 domains, where resctrl monitors it.
	LLCOccupancy uint64  `json:"llc_occupancy_bytes,omitempty"`
	MemBandwidth float64 `json:"mbm_bytes_per_sec,omitempty"`
}

// ProbeState is one canary probe's latest reading.
type ProbeState struct {
	Domain     int     `json:"domain"` // L3 domain id
	CPU        int     `json:"cpu"`    // where it ran this interval
	Kind       string  `json:"kind"`   // lock, llc, dram
	LatencyNs  float64 `json:"latency_ns"`
	BaselineNs float64 `json:"baseline_ns"`
	Ratio      float64 `json:"ratio"` // latency / baseline
}

// ProbeCPUState is the CPU time the probe took on one CPU for one kind of
// reading.
type ProbeCPUState struct {
	CPU     int     `json:"cpu"`
	Reading string  `json:"reading"` // interval, watch, proof (a proof's readings, its check and the start-up survey)
	Seconds float64 `json:"seconds"`
}

// Suspect is a tenant the judge suspects, with why.
type Suspect struct {
	Tenant  string   `json:"tenant"`
	Name    string   `json:"name"`
	Score   float64  `json:"score"`
	Reasons []string `json:"reasons"`
}

// ProofState is the perturbation proof in progress, if any.
type ProofState struct {
	Tenant  string    `json:"tenant"`
	Name    string    `json:"name"`
	Started time.Time `json:"started"`
	// Before is the contention ratio when the proof began.
	Before float64 `json:"before"`
	// Trials are the proof's randomized capped/freed trials so far.
	Trials []judge.Trial `json:"trials"`
}

// ActionRecord is one thing the agent did (or, in dry-run, would have done).
type ActionRecord struct {
	Time   time.Time  `json:"time"`
	Tenant string     `json:"tenant"`
	Name   string     `json:"name"`
	Kind   ActionKind `json:"kind"` // proof, proof-free, throttle, tighten, relax, release, isolate
	// Policy is what decided it: probe (the perturbation proof and the duty
	// controller), buslocks, permits, power, llc or mba; Lever what it
	// acted through: cpu_quota, clock_modulation, cpufreq, cat or mba.
	Policy Policy `json:"policy"`
	Lever  Lever  `json:"lever,omitempty"`
	// Quota is the CPU quota after the action, in CPUs (0 = unlimited).
	Quota  float64 `json:"quota"`
	Duty   float64 `json:"duty"`
	Reason string  `json:"reason"`
	DryRun bool    `json:"dry_run,omitempty"`
}

// SensorState is how one sensor fared: on its last attempt, and in all.
type SensorState struct {
	// Sensor names it: discovery, libvirt, tenant_stats, perf_counters,
	// kernel_bus_locks, probe, power, resctrl_sync, resctrl_read.
	Sensor string `json:"sensor"`
	// Success says its last attempt worked; DurationSeconds is what that
	// attempt took.
	Success         bool    `json:"success"`
	DurationSeconds float64 `json:"duration_seconds"`
	// Errors counts its failed attempts since the agent started.
	Errors uint64 `json:"errors_total"`
	// LastError is the error of its last attempt, and FailingSince when
	// its current run of failures began (both empty while it works).
	LastError    string    `json:"last_error,omitempty"`
	FailingSince time.Time `json:"failing_since,omitzero"`
}

// HardwareState is the hardware policies' state after the last interval.
type HardwareState struct {
	// Off says, per policy and lever, why it does not run here.
	Off      map[string]string          `json:"off,omitempty"`
	BusLocks *judge.BusLockStatus       `json:"buslocks,omitempty"`
	Permits  []judge.PermitStatus       `json:"permits,omitempty"`
	Power    []judge.PowerSocketStatus  `json:"power,omitempty"`
	Packages []sense.PackageAttribution `json:"packages,omitempty"`
	// TenantWatts is each tenant's attributed power (watts).
	TenantWatts map[string]float64  `json:"tenant_watts,omitempty"`
	LLC         []judge.BiasVerdict `json:"llc,omitempty"`
	// Resctrl is each monitored tenant's LLC occupancy and bandwidth.
	Resctrl map[string]sense.ResctrlUsage `json:"resctrl,omitempty"`
}
