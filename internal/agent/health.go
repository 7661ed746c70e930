package agent

import (
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/api"
)

// The sensors the agent runs each interval, as the health metrics name them.
const (
	sensorDiscovery    = "discovery"        // the tenant walk (cgroups)
	sensorLibvirt      = "libvirt"          // libvirt's domain list, where VMs are enriched from it
	sensorTenantStats  = "tenant_stats"     // every tenant's cgroup counters
	sensorPerfCounters = "perf_counters"    // per-tenant perf events (sync and read)
	sensorProbe        = "probe"            // the canary probe, over the CPUs it ran on
	sensorPower        = "power"            // RAPL and its attribution to tenants
	sensorResctrlSync  = "resctrl_sync"     // resctrl monitoring groups kept in step with the tenants
	sensorResctrlRead  = "resctrl_read"     // resctrl monitoring data
	sensorKernelReport = "kernel_bus_locks" // the kernel's bus-lock reports (/dev/kmsg)
)

// libvirtHealth is a discoverer that enriches VMs from libvirt
// (sense.LibvirtDiscoverer): how its libvirt part fared in the last Discover.
type libvirtHealth interface {
	LibvirtHealth() (time.Duration, error)
}

// sensorHealth is how each sensor fared on its last attempt, and how often
// it failed, as node_exporter reports its collectors: a sensor that fails
// quietly would leave a policy blind while every other metric looks normal.
//
// It logs a sensor's first error, and each change of its error text, at
// warn; the same error again only at debug (a sensor broken for good fails
// every interval); and its recovery at info.
//
// It has its own lock rather than the agent's: the hardware sensors are read
// outside the agent's lock, and recording must not wait on a judgement.
type sensorHealth struct {
	log *slog.Logger

	mu      sync.Mutex
	sensors map[string]*sensorRecord
}

type sensorRecord struct {
	success  bool
	duration time.Duration
	errors   uint64
	lastErr  string
	// failing counts the failed attempts in a row, since when they began.
	failing      int
	failingSince time.Time
}

func newSensorHealth(log *slog.Logger) *sensorHealth {
	return &sensorHealth{log: log, sensors: map[string]*sensorRecord{}}
}

// record notes one attempt of a sensor that took took and ended with err.
func (h *sensorHealth) record(sensor string, took time.Duration, err error) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.sensors[sensor]
	if r == nil {
		r = &sensorRecord{}
		h.sensors[sensor] = r
	}
	r.duration = took
	if err == nil {
		if r.failing > 0 {
			h.log.Info("sensor recovered", "sensor", sensor, "failed_attempts", r.failing, "failing_for", now.Sub(r.failingSince).Round(time.Millisecond))
		}
		r.success, r.lastErr, r.failing, r.failingSince = true, "", 0, time.Time{}
		return
	}
	r.errors++
	text := err.Error()
	switch {
	case r.failing == 0:
		h.log.Warn("sensor failing (repeats of the same error are logged at debug level)", "sensor", sensor, "err", text)
		r.failingSince = now
	case text != r.lastErr:
		h.log.Warn("sensor failing with a new error", "sensor", sensor, "err", text, "failed_attempts", r.failing)
	default:
		h.log.Debug("sensor still failing", "sensor", sensor, "err", text, "failed_attempts", r.failing+1)
	}
	r.success, r.lastErr = false, text
	r.failing++
}

// states returns every sensor that ran so far, by name.
func (h *sensorHealth) states() []api.SensorState {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]api.SensorState, 0, len(h.sensors))
	for _, name := range slices.Sorted(maps.Keys(h.sensors)) {
		r := h.sensors[name]
		out = append(out, api.SensorState{Sensor: name, Success: r.success, DurationSeconds: r.duration.Seconds(),
			Errors: r.errors, LastError: r.lastErr, FailingSince: r.failingSince})
	}
	return out
}
