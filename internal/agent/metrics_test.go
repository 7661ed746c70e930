package agent

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// fakeSource is a StateSource a test can update between scrapes.
type fakeSource struct {
	mu  sync.Mutex
	s   api.State
	ok  bool
	hit int
}

func (f *fakeSource) Latest() (api.State, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hit++
	return f.s, f.ok
}

func (f *fakeSource) set(s api.State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.s, f.ok = s, true
}

// sampleState is a hand-built state: a VM that split-locks, a busy container
// and a protected one; a dry-run proof in progress.
func sampleState() api.State {
	t0 := time.Date(2026, 3, 14, 9, 26, 53, 500_000_000, time.UTC)
	return api.State{
		Time:            t0,
		Interval:        1,
		Host:            "node-7",
		Version:         "v0.4.0",
		DryRun:          true,
		PMU:             true,
		Contention:      true,
		ContentionRatio: 2.5,
		CPUWait:         true,
		CPUWaitRatio:    1.8,
		CPI:             true,
		CPIRatio:        1.6,
		Tenants: []api.TenantState{
			{
				ID: "vm:noisy", Kind: "vm", Name: "noisy", Cgroup: "/machine.slice/machine-qemu\\x2d1\\x2dnoisy.scope", CPUs: "0-3",
				CPU: 3.9, ThrottledRatio: 0, RunDelay: 0.25, PSI: 0.1,
				Counters: map[string]float64{"bus_locks": 250000, "cycles": 9.5e9, "instructions": 2.1e9},
				Quota:    2, Throttled: true, Duty: 0.5, Score: 0.92, CPIRatio: 1.4,
				CPUSeconds: 1234.5, ThrottledSeconds: 61.25, RunDelaySeconds: 80, PSISomeSeconds: ptrTo(12.5),
				PerfEvents:           map[string]float64{"bus_locks": 3.5e6, "cycles": 2e12},
				KernelBusLockReports: 7,
			},
			{
				ID: "pod:web-1/app", Kind: "container", Name: "web-1/app", CPUs: "4-7",
				CPU: 1.5, ThrottledRatio: 0.05, RunDelay: 0.75, PSI: 0.3,
				Counters: map[string]float64{"cycles": 4e9, "instructions": 6e9},
				Duty:     1, Protected: true,
				CPUSeconds: 600, ThrottledSeconds: 0.5, RunDelaySeconds: 2.25,
			},
		},
		Probes: []api.ProbeState{
			{Domain: 0, CPU: 2, Kind: "lock", LatencyNs: 500, BaselineNs: 200, Ratio: 2.5},
			{Domain: 0, CPU: 2, Kind: "llc", LatencyNs: 12, BaselineNs: 10, Ratio: 1.2},
		},
		ProbeCPU: []api.ProbeCPUState{
			{CPU: 2, Reading: "interval", Seconds: 0.25},
			{CPU: 2, Reading: "proof", Seconds: 0.0625},
			{CPU: 2, Reading: "proof", Seconds: 9}, // a duplicate: exported once
		},
		Suspects: []api.Suspect{{Tenant: "vm:noisy", Name: "noisy", Score: 0.92, Reasons: []string{"bus locks 250k/s"}}},
		Proof:    &api.ProofState{Tenant: "vm:noisy", Name: "noisy", Started: t0.Add(-3 * time.Second), Before: 2.4},
		Actions: []api.ActionRecord{
			{Time: t0.Add(-10 * time.Second), Tenant: "vm:noisy", Name: "noisy", Kind: "proof", Quota: 2, Duty: 0.5, Reason: "suspect", DryRun: true},
		},
		ActionsTotal: map[string]uint64{"proof": 3, "throttle": 1},
		ProofsTotal:  map[string]uint64{"polluter": 1, "innocent": 2},
		IntervalCPU:  0.0125,
		PerfFDs:      12,
		Sensors: []api.SensorState{
			{Sensor: "discovery", Success: true, DurationSeconds: 0.0025},
			{Sensor: "perf_counters", Success: false, DurationSeconds: 0.5, Errors: 3, LastError: "read: too many open files", FailingSince: t0.Add(-time.Second)},
		},
	}
}

const goldenMetrics = `
# HELP crosstalk_actions_total Actions the agent took (or, in dry-run, would have taken) since it started, by kind: throttle, tighten, relax, release, proof, isolate.
# TYPE crosstalk_actions_total counter
crosstalk_actions_total{kind="isolate"} 0
crosstalk_actions_total{kind="proof"} 3
crosstalk_actions_total{kind="relax"} 0
crosstalk_actions_total{kind="release"} 0
crosstalk_actions_total{kind="throttle"} 1
crosstalk_actions_total{kind="tighten"} 0
# HELP crosstalk_agent_interval_seconds Length of the agent's sampling interval, in seconds.
# TYPE crosstalk_agent_interval_seconds gauge
crosstalk_agent_interval_seconds 1
# HELP crosstalk_build_info Always 1; the labels say which crosstalk build is running and the Go version that built it.
# TYPE crosstalk_build_info gauge
crosstalk_build_info{commit="abc123",goversion="GOVERSION",version="v0.4.0"} 1
# HELP crosstalk_contention 1 if the judge found contention on shared hardware in the last interval, else 0.
# TYPE crosstalk_contention gauge
crosstalk_contention 1
# HELP crosstalk_contention_ratio Worst canary probe latency against its quiet baseline in the last interval (1 = quiet).
# TYPE crosstalk_contention_ratio gauge
crosstalk_contention_ratio 2.5
# HELP crosstalk_cpi_contention 1 if some tenant ran at far more cycles per instruction than usual in the last interval (where a PMU counts them), else 0.
# TYPE crosstalk_cpi_contention gauge
crosstalk_cpi_contention 1
# HELP crosstalk_cpi_ratio Worst tenant's cycles per instruction against its usual in the last interval (1 = as usual).
# TYPE crosstalk_cpi_ratio gauge
crosstalk_cpi_ratio 1.6
# HELP crosstalk_cpu_wait_contention 1 if some tenant's work took far longer than usual in the last interval because its threads waited for a CPU, else 0.
# TYPE crosstalk_cpu_wait_contention gauge
crosstalk_cpu_wait_contention 1
# HELP crosstalk_cpu_wait_ratio Worst tenant's stretch ((CPU time + run delay) / CPU time) against its quiet stretch in the last interval (1 = as usual).
# TYPE crosstalk_cpu_wait_ratio gauge
crosstalk_cpu_wait_ratio 1.8
# HELP crosstalk_dry_run 1 if the agent only reports what it would do (dry-run), 0 if it acts.
# TYPE crosstalk_dry_run gauge
crosstalk_dry_run 1
# HELP crosstalk_last_update_timestamp_seconds Unix time (seconds) at which the agent last published its state.
# TYPE crosstalk_last_update_timestamp_seconds gauge
crosstalk_last_update_timestamp_seconds 1.7734804135e+09
# HELP crosstalk_perf_fds Number of perf event file descriptors the agent holds open.
# TYPE crosstalk_perf_fds gauge
crosstalk_perf_fds 12
# HELP crosstalk_pmu 1 if hardware performance counters are in use, 0 if the canary probes are the only contention signal.
# TYPE crosstalk_pmu gauge
crosstalk_pmu 1
# HELP crosstalk_probe_baseline_seconds Quiet baseline latency of the canary probe, in seconds per operation.
# TYPE crosstalk_probe_baseline_seconds gauge
crosstalk_probe_baseline_seconds{domain="0",probe="llc"} 1e-08
crosstalk_probe_baseline_seconds{domain="0",probe="lock"} 2e-07
# HELP crosstalk_probe_cpu_seconds_total CPU time the canary probe took on the CPU since the agent started, by reading: interval, watch (a look between intervals) and proof (a proof's readings, its check and the start-up survey); time taken from the tenants that run there.
# TYPE crosstalk_probe_cpu_seconds_total counter
crosstalk_probe_cpu_seconds_total{cpu="2",reading="interval"} 0.25
crosstalk_probe_cpu_seconds_total{cpu="2",reading="proof"} 0.0625
# HELP crosstalk_probe_latency_seconds Latest latency of a canary probe on an L3 domain, in seconds per operation.
# TYPE crosstalk_probe_latency_seconds gauge
crosstalk_probe_latency_seconds{domain="0",probe="llc"} 1.2e-08
crosstalk_probe_latency_seconds{domain="0",probe="lock"} 5e-07
# HELP crosstalk_probe_ratio Canary probe latency divided by its quiet baseline (1 = quiet; higher = contended).
# TYPE crosstalk_probe_ratio gauge
crosstalk_probe_ratio{domain="0",probe="llc"} 1.2
crosstalk_probe_ratio{domain="0",probe="lock"} 2.5
# HELP crosstalk_proof_in_progress 1 while a perturbation proof is running, else 0.
# TYPE crosstalk_proof_in_progress gauge
crosstalk_proof_in_progress 1
# HELP crosstalk_proofs_total Perturbation proofs the agent finished since it started, by result: polluter, innocent, aborted.
# TYPE crosstalk_proofs_total counter
crosstalk_proofs_total{result="aborted"} 0
crosstalk_proofs_total{result="innocent"} 2
crosstalk_proofs_total{result="polluter"} 1
# HELP crosstalk_sensor_duration_seconds Time the sensor's last attempt took, in seconds.
# TYPE crosstalk_sensor_duration_seconds gauge
crosstalk_sensor_duration_seconds{sensor="discovery"} 0.0025
crosstalk_sensor_duration_seconds{sensor="perf_counters"} 0.5
# HELP crosstalk_sensor_errors_total Failed attempts of the sensor since the agent started.
# TYPE crosstalk_sensor_errors_total counter
crosstalk_sensor_errors_total{sensor="discovery"} 0
crosstalk_sensor_errors_total{sensor="perf_counters"} 3
# HELP crosstalk_sensor_success 1 if the sensor's last attempt worked, 0 if it failed (the log and the state API's sensors say why): discovery, libvirt, tenant_stats, perf_counters, kernel_bus_locks, probe, power, resctrl_sync, resctrl_read.
# TYPE crosstalk_sensor_success gauge
crosstalk_sensor_success{sensor="discovery"} 1
crosstalk_sensor_success{sensor="perf_counters"} 0
# HELP crosstalk_tenant_cpi_ratio The tenant's cycles per instruction against its usual in the last interval (1 = as usual), where a PMU counts them and its usual is learned.
# TYPE crosstalk_tenant_cpi_ratio gauge
crosstalk_tenant_cpi_ratio{kind="vm",name="noisy",tenant="vm:noisy"} 1.4
# HELP crosstalk_tenant_cpu_seconds_total CPU time the tenant's cgroup used since crosstalk first saw it, in seconds (rate() gives cores).
# TYPE crosstalk_tenant_cpu_seconds_total counter
crosstalk_tenant_cpu_seconds_total{kind="container",name="web-1/app",tenant="pod:web-1/app"} 600
crosstalk_tenant_cpu_seconds_total{kind="vm",name="noisy",tenant="vm:noisy"} 1234.5
# HELP crosstalk_tenant_kernel_bus_lock_reports_total The kernel's split-lock (#AC) and bus-lock (#DB) reports that named one of the tenant's threads, since crosstalk first saw it; absent for a tenant never named. The kernel rate-limits them, so this counts reports, not bus locks.
# TYPE crosstalk_tenant_kernel_bus_lock_reports_total counter
crosstalk_tenant_kernel_bus_lock_reports_total{kind="vm",name="noisy",tenant="vm:noisy"} 7
# HELP crosstalk_tenant_duty_ratio Fraction (0-1) of its CPUs crosstalk lets the tenant use (1 = not throttled by crosstalk).
# TYPE crosstalk_tenant_duty_ratio gauge
crosstalk_tenant_duty_ratio{kind="container",name="web-1/app",tenant="pod:web-1/app"} 1
crosstalk_tenant_duty_ratio{kind="vm",name="noisy",tenant="vm:noisy"} 0.5
# HELP crosstalk_tenant_perf_events_total Perf events counted for the tenant (bus_locks, llc_misses, cycles, instructions, context_switches, ...), summed over the intervals it was counted in: where the perf fd budget leaves it uncounted, nothing is added.
# TYPE crosstalk_tenant_perf_events_total counter
crosstalk_tenant_perf_events_total{event="bus_locks",kind="vm",name="noisy",tenant="vm:noisy"} 3.5e+06
crosstalk_tenant_perf_events_total{event="cycles",kind="vm",name="noisy",tenant="vm:noisy"} 2e+12
# HELP crosstalk_tenant_protected 1 if the tenant is protected (crosstalk never throttles it), else 0.
# TYPE crosstalk_tenant_protected gauge
crosstalk_tenant_protected{kind="container",name="web-1/app",tenant="pod:web-1/app"} 1
crosstalk_tenant_protected{kind="vm",name="noisy",tenant="vm:noisy"} 0
# HELP crosstalk_tenant_psi_cpu_some_seconds_total CPU pressure stall time of the tenant's cgroup: time in which at least one of its tasks waited for a CPU (PSI cpu some total), in seconds; absent without PSI.
# TYPE crosstalk_tenant_psi_cpu_some_seconds_total counter
crosstalk_tenant_psi_cpu_some_seconds_total{kind="vm",name="noisy",tenant="vm:noisy"} 12.5
# HELP crosstalk_tenant_quota_cpus The tenant's CPU quota now, in CPUs (0 = unlimited).
# TYPE crosstalk_tenant_quota_cpus gauge
crosstalk_tenant_quota_cpus{kind="container",name="web-1/app",tenant="pod:web-1/app"} 0
crosstalk_tenant_quota_cpus{kind="vm",name="noisy",tenant="vm:noisy"} 2
# HELP crosstalk_tenant_run_delay_seconds_total Time the tenant's threads (vCPUs for VMs) waited runnable for a CPU, summed over its threads, in seconds; its threads are read in turns on a busy host (up to 5 s apart).
# TYPE crosstalk_tenant_run_delay_seconds_total counter
crosstalk_tenant_run_delay_seconds_total{kind="container",name="web-1/app",tenant="pod:web-1/app"} 2.25
crosstalk_tenant_run_delay_seconds_total{kind="vm",name="noisy",tenant="vm:noisy"} 80
# HELP crosstalk_tenant_suspect_score The judge's suspect score for the tenant this interval (0 = not suspected; higher = more likely the polluter).
# TYPE crosstalk_tenant_suspect_score gauge
crosstalk_tenant_suspect_score{kind="container",name="web-1/app",tenant="pod:web-1/app"} 0
crosstalk_tenant_suspect_score{kind="vm",name="noisy",tenant="vm:noisy"} 0.92
# HELP crosstalk_tenant_throttled_by_crosstalk 1 while crosstalk holds the tenant to a reduced duty, else 0.
# TYPE crosstalk_tenant_throttled_by_crosstalk gauge
crosstalk_tenant_throttled_by_crosstalk{kind="container",name="web-1/app",tenant="pod:web-1/app"} 0
crosstalk_tenant_throttled_by_crosstalk{kind="vm",name="noisy",tenant="vm:noisy"} 1
# HELP crosstalk_tenant_throttled_seconds_total Time the tenant's CPU quota held it back (any quota, not only crosstalk's), in seconds, since crosstalk first saw it.
# TYPE crosstalk_tenant_throttled_seconds_total counter
crosstalk_tenant_throttled_seconds_total{kind="container",name="web-1/app",tenant="pod:web-1/app"} 0.5
crosstalk_tenant_throttled_seconds_total{kind="vm",name="noisy",tenant="vm:noisy"} 61.25
# HELP crosstalk_tenants Number of tenants (VMs and containers) the agent watches.
# TYPE crosstalk_tenants gauge
crosstalk_tenants 2
`

func TestMetricsGolden(t *testing.T) {
	src := &fakeSource{}
	src.set(sampleState())
	c := newStateCollector(src, "v0.4.0", "abc123")
	want := strings.ReplaceAll(goldenMetrics, "GOVERSION", runtime.Version())
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

func TestMetricsBeforeFirstState(t *testing.T) {
	src := &fakeSource{}
	c := newStateCollector(src, "dev", "unknown")
	const want = `
# HELP crosstalk_build_info Always 1; the labels say which crosstalk build is running and the Go version that built it.
# TYPE crosstalk_build_info gauge
crosstalk_build_info{commit="unknown",goversion="GOVERSION",version="dev"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(strings.ReplaceAll(want, "GOVERSION", runtime.Version()))); err != nil {
		t.Fatal(err)
	}
}

// A tenant present in one state and gone in the next has no series after.
func TestMetricsVanishedTenant(t *testing.T) {
	src := &fakeSource{}
	s := sampleState()
	src.set(s)
	reg := NewRegistry(src, "v0.4.0", "abc123")

	count := func(tenant string) int {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "tenant" && lp.GetValue() == tenant {
						n++
					}
				}
			}
		}
		return n
	}
	if n := count("vm:noisy"); n != 9+2+1+1 { // 9 per-tenant series (PSI among them) + 2 perf events + kernel reports + CPI ratio
		t.Fatalf("vm:noisy before: %d series, want 13", n)
	}

	s2 := sampleState()
	s2.Tenants = s2.Tenants[1:]
	src.set(s2)
	if n := count("vm:noisy"); n != 0 {
		t.Errorf("vm:noisy after it left: %d series, want 0", n)
	}
	if n := count("pod:web-1/app"); n != 8 { // no PSI, no perf events
		t.Errorf("pod:web-1/app: %d series, want 8", n)
	}
	if got := testutil.CollectAndCount(newStateCollector(src, "", ""), "crosstalk_tenants"); got != 1 {
		t.Errorf("crosstalk_tenants: %d series", got)
	}
}

func TestMetricsRegistry(t *testing.T) {
	src := &fakeSource{}
	src.set(sampleState())
	reg := NewRegistry(src, "v0.4.0", "abc123")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, want := range []string{"crosstalk_build_info", "crosstalk_tenant_cpu_seconds_total", "go_goroutines", "process_cpu_seconds_total"} {
		if !names[want] {
			t.Errorf("registry lacks %s", want)
		}
	}
	// Lint: names, units and help strings follow Prometheus conventions.
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "crosstalk_") {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
}

// Bad input from tenants or a buggy publisher must not break the scrape.
func TestMetricsDuplicatesAndBadUTF8(t *testing.T) {
	src := &fakeSource{}
	s := sampleState()
	dup := s.Tenants[0]
	dup.Name = "noisy again"
	s.Tenants = append(s.Tenants, dup, api.TenantState{ID: "ct:\xff", Kind: "container", Name: "bad\xfename", PerfEvents: map[string]float64{"a\xff": 1, "a\xfe": 2}})
	s.Probes = append(s.Probes, s.Probes[0])
	s.ActionsTotal["throttle\xff"] = 4
	s.ActionsTotal["throttle\xfe"] = 5
	src.set(s)
	reg := NewRegistry(src, "v\xff", "c")
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
	if got := testutil.CollectAndCount(newStateCollector(src, "", ""), "crosstalk_tenants"); got != 1 {
		t.Errorf("crosstalk_tenants: %d series", got)
	}
	if got := testutil.CollectAndCount(newStateCollector(src, "", ""), "crosstalk_tenant_cpu_seconds_total"); got != 3 {
		t.Errorf("crosstalk_tenant_cpu_seconds_total: %d series, want 3", got)
	}
}

// The hardware policies' metrics: holds per policy and lever, per-tenant
// measurements, permits, power, the bus-lock budget and LLC fairness, and
// every policy's on/off state.
func TestHardwareMetricsGolden(t *testing.T) {
	s := sampleState()
	s.Tenants[0].Holds = []api.HoldState{
		{Policy: "buslocks", Lever: "clock_modulation", Duty: 0.125},
		{Policy: "permits", Lever: "cpu_quota", Duty: 0.0625},
	}
	s.Tenants[0].Pollution, s.Tenants[0].Watts = 58000, 212.5
	s.Tenants[0].LLCOccupancy, s.Tenants[0].MemBandwidth = 14<<20, 8.5e9
	s.Hardware = &api.HardwareState{
		Off:      map[string]string{"power": "disabled", "mba": "disabled"},
		BusLocks: &judge.BusLockStatus{HostRate: 120000, Share: 56000, Dirty: 1},
		Permits:  []judge.PermitStatus{{Tenant: "vm:noisy", Name: "noisy", Booking: 20000, Credit: -1500, State: "OVER"}},
		Power:    []judge.PowerSocketStatus{{ID: 0, Watts: 160, State: "over"}, {ID: 1, Watts: 90, State: "under"}},
		Packages: []sense.PackageAttribution{{PackagePower: sense.PackagePower{Package: 0, Watts: 160}}},
		LLC:      []judge.BiasVerdict{{Domain: 0, Smoothed: 0.91, Busy: true}},
	}
	src := &fakeSource{}
	src.set(s)
	const want = `
# HELP crosstalk_buslocks_dirty_tenants Tenants doing bus locks over the dirty threshold, among which the bus-lock budget is shared.
# TYPE crosstalk_buslocks_dirty_tenants gauge
crosstalk_buslocks_dirty_tenants 1
# HELP crosstalk_buslocks_host_per_second Bus locks per second over the host (the tenants' PMU counts), as the bus-lock budget saw them.
# TYPE crosstalk_buslocks_host_per_second gauge
crosstalk_buslocks_host_per_second 120000
# HELP crosstalk_buslocks_share_per_second Each dirty tenant's share of the host's bus-lock budget, per second.
# TYPE crosstalk_buslocks_share_per_second gauge
crosstalk_buslocks_share_per_second 56000
# HELP crosstalk_hardware_policy_on 1 if the hardware policy runs on this host, 0 if it is off (the state API's hardware.off says why): buslocks, permits, power, llc, mba.
# TYPE crosstalk_hardware_policy_on gauge
crosstalk_hardware_policy_on{policy="buslocks"} 1
crosstalk_hardware_policy_on{policy="llc"} 1
crosstalk_hardware_policy_on{policy="mba"} 0
crosstalk_hardware_policy_on{policy="permits"} 1
crosstalk_hardware_policy_on{policy="power"} 0
# HELP crosstalk_llc_busy 1 if the L3 domain's tenants fill it (bias isolation can act), else 0.
# TYPE crosstalk_llc_busy gauge
crosstalk_llc_busy{domain="0"} 1
# HELP crosstalk_llc_fairness_bc Bhattacharyya coefficient between the tenants' LLC shares (by CPUs) and their occupancy in an L3 domain, smoothed (1 = fair).
# TYPE crosstalk_llc_fairness_bc gauge
crosstalk_llc_fairness_bc{domain="0"} 0.91
# HELP crosstalk_package_power_watts A CPU package's power (RAPL), in watts.
# TYPE crosstalk_package_power_watts gauge
crosstalk_package_power_watts{package="0"} 160
# HELP crosstalk_permit_credit A policed tenant's pollution credit (Kyoto), in llc_cap·seconds; below 0 it is OVER.
# TYPE crosstalk_permit_credit gauge
crosstalk_permit_credit{name="noisy",tenant="vm:noisy"} -1500
# HELP crosstalk_permit_llc_cap A tenant's booked pollution permit (llc_cap, LLC misses per ms of its running time).
# TYPE crosstalk_permit_llc_cap gauge
crosstalk_permit_llc_cap{name="noisy",tenant="vm:noisy"} 20000
# HELP crosstalk_permit_over 1 while the tenant is OVER its pollution permit (its CPU capped), else 0.
# TYPE crosstalk_permit_over gauge
crosstalk_permit_over{name="noisy",tenant="vm:noisy"} 1
# HELP crosstalk_power_socket_over_budget 1 when the socket's power, averaged over the power policy's period, was at or over its budget, else 0.
# TYPE crosstalk_power_socket_over_budget gauge
crosstalk_power_socket_over_budget{socket="0"} 1
crosstalk_power_socket_over_budget{socket="1"} 0
# HELP crosstalk_tenant_hold_duty_ratio What a policy leaves the tenant (0-1) through a lever, while it holds it back: of its CPU time (cpu_quota), of its clock (clock_modulation, cpufreq), of the LLC ways (cat) or of its memory bandwidth (mba).
# TYPE crosstalk_tenant_hold_duty_ratio gauge
crosstalk_tenant_hold_duty_ratio{kind="vm",lever="clock_modulation",name="noisy",policy="buslocks",tenant="vm:noisy"} 0.125
crosstalk_tenant_hold_duty_ratio{kind="vm",lever="cpu_quota",name="noisy",policy="permits",tenant="vm:noisy"} 0.0625
# HELP crosstalk_tenant_llc_occupancy_bytes The tenant's LLC occupancy (resctrl CMT), summed over its L3 domains, in bytes.
# TYPE crosstalk_tenant_llc_occupancy_bytes gauge
crosstalk_tenant_llc_occupancy_bytes{kind="vm",name="noisy",tenant="vm:noisy"} 1.4680064e+07
# HELP crosstalk_tenant_llc_pollution Kyoto's llc_cap_act: LLC misses per millisecond of the tenant's unhalted time (where the PMU counts them).
# TYPE crosstalk_tenant_llc_pollution gauge
crosstalk_tenant_llc_pollution{kind="vm",name="noisy",tenant="vm:noisy"} 58000
# HELP crosstalk_tenant_memory_bandwidth_bytes_per_second The tenant's memory bandwidth (resctrl MBM total), summed over its L3 domains, in bytes per second.
# TYPE crosstalk_tenant_memory_bandwidth_bytes_per_second gauge
crosstalk_tenant_memory_bandwidth_bytes_per_second{kind="vm",name="noisy",tenant="vm:noisy"} 8.5e+09
# HELP crosstalk_tenant_power_watts Package (RAPL) power attributed to the tenant, in watts.
# TYPE crosstalk_tenant_power_watts gauge
crosstalk_tenant_power_watts{kind="vm",name="noisy",tenant="vm:noisy"} 212.5
`
	if err := testutil.CollectAndCompare(newHardwareCollector(src), strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
