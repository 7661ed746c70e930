package agent

import (
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// StateSource returns the latest published state (a copy) and whether one exists yet.
type StateSource interface {
	Latest() (api.State, bool)
}

// NewRegistry returns a registry with a collector that renders the latest
// State on each scrape, plus build info and the Go/process collectors. It
// never touches the Prometheus default registry.
func NewRegistry(src StateSource, version, commit string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collectors(src, version, commit)...)
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// Collectors are the collectors of the agent's own crosstalk_ metrics that
// NewRegistry registers (the metrics reference is checked against what
// they describe).
func Collectors(src StateSource, version, commit string) []prometheus.Collector {
	return []prometheus.Collector{newStateCollector(src, version, commit), newHardwareCollector(src)}
}

// stateCollector turns the latest State into const metrics at scrape time:
// a tenant that is gone from the State has no series on the next scrape.
type stateCollector struct {
	src             StateSource
	version, commit string

	buildInfo *prometheus.Desc

	tenantCPU, tenantThrottledTime, tenantRunDelay, tenantPSI *prometheus.Desc
	tenantQuota, tenantDuty, tenantThrottled, tenantProtected *prometheus.Desc
	tenantScore, tenantPerfEvents, tenantKernelBusLocks       *prometheus.Desc
	tenantCPIRatio                                            *prometheus.Desc

	probeLatency, probeBaseline, probeRatio, probeCPU *prometheus.Desc

	contention, contentionRatio, tenants, actionsTotal, proofsTotal *prometheus.Desc
	proofInProgress, perfFDs, interval, lastUpdate                  *prometheus.Desc
	dryRun, pmu                                                     *prometheus.Desc
	cpuWait, cpuWaitRatio                                           *prometheus.Desc
	cpi, cpiRatio                                                   *prometheus.Desc
	sensorSuccess, sensorDuration, sensorErrors                     *prometheus.Desc
}

func newStateCollector(src StateSource, version, commit string) *stateCollector {
	tl := []string{"tenant", "kind", "name"}
	pl := []string{"domain", "probe"}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("crosstalk_"+name, help, labels, nil)
	}
	return &stateCollector{
		src: src, version: version, commit: commit,

		buildInfo: d("build_info", "Always 1; the labels say which crosstalk build is running and the Go version that built it.", "version", "commit", "goversion"),

		tenantCPU: d("tenant_cpu_seconds_total",
			"CPU time the tenant's cgroup used since crosstalk first saw it, in seconds (rate() gives cores).", tl...),
		tenantThrottledTime: d("tenant_throttled_seconds_total",
			"Time the tenant's CPU quota held it back (any quota, not only crosstalk's), in seconds, since crosstalk first saw it.", tl...),
		tenantRunDelay: d("tenant_run_delay_seconds_total",
			"Time the tenant's threads (vCPUs for VMs) waited runnable for a CPU, summed over its threads, in seconds; its threads are read in turns on a busy host (up to 5 s apart).", tl...),
		tenantPSI: d("tenant_psi_cpu_some_seconds_total",
			"CPU pressure stall time of the tenant's cgroup: time in which at least one of its tasks waited for a CPU (PSI cpu some total), in seconds; absent without PSI.", tl...),
		tenantQuota: d("tenant_quota_cpus",
			"The tenant's CPU quota now, in CPUs (0 = unlimited).", tl...),
		tenantDuty: d("tenant_duty_ratio",
			"Fraction (0-1) of its CPUs crosstalk lets the tenant use (1 = not throttled by crosstalk).", tl...),
		tenantThrottled: d("tenant_throttled_by_crosstalk",
			"1 while crosstalk holds the tenant to a reduced duty, else 0.", tl...),
		tenantProtected: d("tenant_protected",
			"1 if the tenant is protected (crosstalk never throttles it), else 0.", tl...),
		tenantScore: d("tenant_suspect_score",
			"The judge's suspect score for the tenant this interval (0 = not suspected; higher = more likely the polluter).", tl...),
		tenantCPIRatio: d("tenant_cpi_ratio",
			"The tenant's cycles per instruction against its usual in the last interval (1 = as usual), where a PMU counts them and its usual is learned.", tl...),
		tenantPerfEvents: d("tenant_perf_events_total",
			"Perf events counted for the tenant (bus_locks, llc_misses, cycles, instructions, context_switches, ...), summed over the intervals it was counted in: where the perf fd budget leaves it uncounted, nothing is added.",
			append(slices.Clone(tl), "event")...),
		tenantKernelBusLocks: d("tenant_kernel_bus_lock_reports_total",
			"The kernel's split-lock (#AC) and bus-lock (#DB) reports that named one of the tenant's threads, since crosstalk first saw it; absent for a tenant never named. The kernel rate-limits them, so this counts reports, not bus locks.", tl...),

		probeLatency: d("probe_latency_seconds",
			"Latest latency of a canary probe on an L3 domain, in seconds per operation.", pl...),
		probeBaseline: d("probe_baseline_seconds",
			"Quiet baseline latency of the canary probe, in seconds per operation.", pl...),
		probeRatio: d("probe_ratio",
			"Canary probe latency divided by its quiet baseline (1 = quiet; higher = contended).", pl...),
		probeCPU: d("probe_cpu_seconds_total",
			"CPU time the canary probe took on the CPU since the agent started, by reading: interval, watch (a look between intervals) and proof (a proof's readings, its check and the start-up survey); time taken from the tenants that run there.", "cpu", "reading"),

		contention: d("contention",
			"1 if the judge found contention on shared hardware in the last interval, else 0."),
		contentionRatio: d("contention_ratio",
			"Worst canary probe latency against its quiet baseline in the last interval (1 = quiet)."),
		cpuWait: d("cpu_wait_contention",
			"1 if some tenant's work took far longer than usual in the last interval because its threads waited for a CPU, else 0."),
		cpuWaitRatio: d("cpu_wait_ratio",
			"Worst tenant's stretch ((CPU time + run delay) / CPU time) against its quiet stretch in the last interval (1 = as usual)."),
		cpi: d("cpi_contention",
			"1 if some tenant ran at far more cycles per instruction than usual in the last interval (where a PMU counts them), else 0."),
		cpiRatio: d("cpi_ratio",
			"Worst tenant's cycles per instruction against its usual in the last interval (1 = as usual)."),
		tenants: d("tenants",
			"Number of tenants (VMs and containers) the agent watches."),
		actionsTotal: d("actions_total",
			"Actions the agent took (or, in dry-run, would have taken) since it started, by kind: throttle, tighten, relax, release, proof, isolate.", "kind"),
		proofsTotal: d("proofs_total",
			"Perturbation proofs the agent finished since it started, by result: polluter, innocent, aborted.", "result"),
		proofInProgress: d("proof_in_progress",
			"1 while a perturbation proof is running, else 0."),
		perfFDs: d("perf_fds",
			"Number of perf event file descriptors the agent holds open."),
		interval: d("agent_interval_seconds",
			"Length of the agent's sampling interval, in seconds."),
		lastUpdate: d("last_update_timestamp_seconds",
			"Unix time (seconds) at which the agent last published its state."),
		dryRun: d("dry_run",
			"1 if the agent only reports what it would do (dry-run), 0 if it acts."),
		pmu: d("pmu",
			"1 if hardware performance counters are in use, 0 if the canary probes are the only contention signal."),

		sensorSuccess: d("sensor_success",
			"1 if the sensor's last attempt worked, 0 if it failed (the log and the state API's sensors say why): discovery, libvirt, tenant_stats, perf_counters, kernel_bus_locks, probe, power, resctrl_sync, resctrl_read.", "sensor"),
		sensorDuration: d("sensor_duration_seconds",
			"Time the sensor's last attempt took, in seconds.", "sensor"),
		sensorErrors: d("sensor_errors_total",
			"Failed attempts of the sensor since the agent started.", "sensor"),
	}
}

func (c *stateCollector) descs() []*prometheus.Desc {
	return []*prometheus.Desc{
		c.buildInfo,
		c.tenantCPU, c.tenantThrottledTime, c.tenantRunDelay, c.tenantPSI,
		c.tenantQuota, c.tenantDuty, c.tenantThrottled, c.tenantProtected,
		c.tenantScore, c.tenantPerfEvents, c.tenantKernelBusLocks, c.tenantCPIRatio,
		c.probeLatency, c.probeBaseline, c.probeRatio, c.probeCPU,
		c.contention, c.contentionRatio, c.tenants, c.actionsTotal, c.proofsTotal,
		c.proofInProgress, c.perfFDs, c.interval, c.lastUpdate,
		c.dryRun, c.pmu, c.cpuWait, c.cpuWaitRatio, c.cpi, c.cpiRatio,
		c.sensorSuccess, c.sensorDuration, c.sensorErrors,
	}
}

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d
	}
}

// Collect implements prometheus.Collector. Before the first State only build
// info is exported.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge(c.buildInfo, 1, label(c.version), label(c.commit), runtime.Version())

	s, ok := c.src.Latest()
	if !ok {
		return
	}

	// A duplicated tenant ID or probe would make the whole scrape fail;
	// export the first and skip the rest.
	seenTenant := make(map[string]bool, len(s.Tenants))
	for _, t := range s.Tenants {
		if seenTenant[t.ID] {
			continue
		}
		seenTenant[t.ID] = true
		l := []string{label(t.ID), label(t.Kind), label(t.Name)}
		counter(c.tenantCPU, t.CPUSeconds, l...)
		counter(c.tenantThrottledTime, t.ThrottledSeconds, l...)
		counter(c.tenantRunDelay, t.RunDelaySeconds, l...)
		if t.PSISomeSeconds != nil {
			counter(c.tenantPSI, *t.PSISomeSeconds, l...)
		}
		gauge(c.tenantQuota, t.Quota, l...)
		gauge(c.tenantDuty, t.Duty, l...)
		gauge(c.tenantThrottled, b2f(t.Throttled), l...)
		gauge(c.tenantProtected, b2f(t.Protected), l...)
		gauge(c.tenantScore, t.Score, l...)
		if t.CPIRatio > 0 {
			gauge(c.tenantCPIRatio, t.CPIRatio, l...)
		}
		if t.KernelBusLockReports > 0 {
			counter(c.tenantKernelBusLocks, t.KernelBusLockReports, l...)
		}
		seenEvent := make(map[string]bool, len(t.PerfEvents))
		for ev, v := range t.PerfEvents {
			// Distinct map keys can collide once invalid UTF-8 is replaced.
			lev := label(ev)
			if seenEvent[lev] {
				continue
			}
			seenEvent[lev] = true
			counter(c.tenantPerfEvents, v, append(l, lev)...)
		}
	}

	seenProbe := make(map[[2]string]bool, len(s.Probes))
	for _, p := range s.Probes {
		l := []string{strconv.Itoa(p.Domain), label(p.Kind)}
		if k := [2]string{l[0], l[1]}; seenProbe[k] {
			continue
		} else {
			seenProbe[k] = true
		}
		gauge(c.probeLatency, p.LatencyNs/1e9, l...)
		gauge(c.probeBaseline, p.BaselineNs/1e9, l...)
		gauge(c.probeRatio, p.Ratio, l...)
	}

	seenCPU := make(map[[2]string]bool, len(s.ProbeCPU))
	for _, p := range s.ProbeCPU {
		k := [2]string{strconv.Itoa(p.CPU), label(p.Reading)}
		if seenCPU[k] {
			continue
		}
		seenCPU[k] = true
		counter(c.probeCPU, p.Seconds, k[0], k[1])
	}

	gauge(c.contention, b2f(s.Contention))
	gauge(c.contentionRatio, s.ContentionRatio)
	gauge(c.cpuWait, b2f(s.CPUWait))
	gauge(c.cpuWaitRatio, max(1, s.CPUWaitRatio))
	gauge(c.cpi, b2f(s.CPI))
	gauge(c.cpiRatio, max(1, s.CPIRatio))
	gauge(c.tenants, float64(len(seenTenant)))
	// The known kinds and results are always exported (0 until they happen),
	// so rate() and increase() work from the first scrape.
	counters(ch, c.actionsTotal, s.ActionsTotal, "throttle", "tighten", "relax", "release", "proof", "isolate")
	counters(ch, c.proofsTotal, s.ProofsTotal, "polluter", "innocent", "aborted")
	gauge(c.proofInProgress, b2f(s.Proof != nil))
	gauge(c.perfFDs, float64(s.PerfFDs))
	gauge(c.interval, s.Interval)
	if !s.Time.IsZero() {
		gauge(c.lastUpdate, float64(s.Time.UnixNano())/1e9)
	}
	gauge(c.dryRun, b2f(s.DryRun))
	gauge(c.pmu, b2f(s.PMU))

	seenSensor := make(map[string]bool, len(s.Sensors))
	for _, h := range s.Sensors {
		l := label(h.Sensor)
		if seenSensor[l] {
			continue
		}
		seenSensor[l] = true
		gauge(c.sensorSuccess, b2f(h.Success), l)
		gauge(c.sensorDuration, h.DurationSeconds, l)
		counter(c.sensorErrors, float64(h.Errors), l)
	}
}

// counters exports one counter per key of totals, plus 0 for each known key
// that has not happened yet.
func counters(ch chan<- prometheus.Metric, d *prometheus.Desc, totals map[string]uint64, known ...string) {
	seen := make(map[string]bool, len(totals)+len(known))
	emit := func(k string, v uint64) {
		k = label(k)
		if seen[k] {
			return
		}
		seen[k] = true
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), k)
	}
	for k, v := range totals {
		emit(k, v)
	}
	for _, k := range known {
		emit(k, 0)
	}
}

// label makes s a valid label value: Prometheus rejects invalid UTF-8, and a
// tenant name comes from outside.
func label(s string) string {
	return strings.ToValidUTF8(s, "\uFFFD")
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
