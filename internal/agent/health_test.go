package agent

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// logRecords keeps what was logged, for tests that check what an operator
// would see.
type logRecords struct {
	mu   sync.Mutex
	recs []logRecord
}

type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool { rec.attrs[a.Key] = a.Value.String(); return true })
	l.mu.Lock()
	l.recs = append(l.recs, rec)
	l.mu.Unlock()
	return nil
}

// count returns how many records of a level name a sensor.
func (l *logRecords) count(level slog.Level, sensor string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if r.level == level && r.attrs["sensor"] == sensor {
			n++
		}
	}
	return n
}

// brokenCounters are perf counters whose reads fail while err is set.
type brokenCounters struct {
	fakeCounters
	mu  sync.Mutex
	err error
}

func (c *brokenCounters) set(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
}

func (c *brokenCounters) Read(ctx context.Context) (map[string]map[string]float64, error) {
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return c.fakeCounters.Read(ctx)
}

func sensorOf(t *testing.T, a *Agent, name string) api.SensorState {
	t.Helper()
	st, ok := a.Latest()
	if !ok {
		t.Fatal("no state published")
	}
	for _, s := range st.Sensors {
		if s.Sensor == name {
			return s
		}
	}
	t.Fatalf("sensor %s not in the state: %+v", name, st.Sensors)
	return api.SensorState{}
}

// A sensor that fails shows it at once: success 0 and an error count that
// grows each interval, one warning and then quiet while the same error
// repeats, a new warning when the error changes, and an info line when it
// recovers, after which the count stays.
func TestSensorHealthFailingSensor(t *testing.T) {
	w := newWorld(t)
	w.running = false // a quiet host: nothing to prove, only sensing
	hs := newHarness(t, w, testConfig(t.TempDir()), nil)
	logs := &logRecords{}
	pc := &brokenCounters{fakeCounters: fakeCounters{w}}
	hs.agent.d.Counters, hs.agent.d.PMU = pc, true
	hs.agent.health = newSensorHealth(slog.New(logs))
	a := hs.agent

	a.step(t.Context(), time.Now())
	if s := sensorOf(t, a, sensorPerfCounters); !s.Success || s.Errors != 0 || s.LastError != "" {
		t.Fatalf("working counters: %+v", s)
	}

	pc.set(errors.New("too many open files"))
	for i := 1; i <= 3; i++ {
		a.step(t.Context(), time.Now())
		s := sensorOf(t, a, sensorPerfCounters)
		if s.Success || s.Errors != uint64(i) || !strings.Contains(s.LastError, "too many open files") || s.FailingSince.IsZero() {
			t.Fatalf("failing counters, interval %d: %+v", i, s)
		}
	}
	if n := logs.count(slog.LevelWarn, sensorPerfCounters); n != 1 {
		t.Errorf("%d warnings for three failures with one error; want 1", n)
	}
	if n := logs.count(slog.LevelDebug, sensorPerfCounters); n != 2 {
		t.Errorf("%d debug lines for the two repeats; want 2", n)
	}
	// The other sensors worked all along.
	for _, name := range []string{sensorDiscovery, sensorTenantStats, sensorProbe} {
		if s := sensorOf(t, a, name); !s.Success || s.Errors != 0 {
			t.Errorf("%s: %+v", name, s)
		}
	}

	// What a scrape shows.
	c := newStateCollector(hs.agent, "", "")
	const want = `
# HELP crosstalk_sensor_errors_total Failed attempts of the sensor since the agent started.
# TYPE crosstalk_sensor_errors_total counter
crosstalk_sensor_errors_total{sensor="discovery"} 0
crosstalk_sensor_errors_total{sensor="perf_counters"} 3
crosstalk_sensor_errors_total{sensor="probe"} 0
crosstalk_sensor_errors_total{sensor="tenant_stats"} 0
# HELP crosstalk_sensor_success 1 if the sensor's last attempt worked, 0 if it failed (the log and the state API's sensors say why): discovery, libvirt, tenant_stats, perf_counters, kernel_bus_locks, probe, power, resctrl_sync, resctrl_read.
# TYPE crosstalk_sensor_success gauge
crosstalk_sensor_success{sensor="discovery"} 1
crosstalk_sensor_success{sensor="perf_counters"} 0
crosstalk_sensor_success{sensor="probe"} 1
crosstalk_sensor_success{sensor="tenant_stats"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "crosstalk_sensor_success", "crosstalk_sensor_errors_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c, "crosstalk_sensor_duration_seconds"); n != 4 {
		t.Errorf("%d duration series; want one per sensor (4)", n)
	}

	// A different error is news.
	pc.set(errors.New("no such device"))
	a.step(t.Context(), time.Now())
	if n := logs.count(slog.LevelWarn, sensorPerfCounters); n != 2 {
		t.Errorf("%d warnings after the error changed; want 2", n)
	}

	pc.set(nil)
	a.step(t.Context(), time.Now())
	s := sensorOf(t, a, sensorPerfCounters)
	if !s.Success || s.Errors != 4 || s.LastError != "" || !s.FailingSince.IsZero() {
		t.Errorf("recovered counters: %+v", s)
	}
	if n := logs.count(slog.LevelInfo, sensorPerfCounters); n != 1 {
		t.Errorf("%d info lines on recovery; want 1", n)
	}
	a.step(t.Context(), time.Now())
	if n := logs.count(slog.LevelInfo, sensorPerfCounters) + logs.count(slog.LevelWarn, sensorPerfCounters); n != 3 {
		t.Errorf("a working sensor logged again: %d info and warn lines; want 3 in all", n)
	}
}

// failingStats fails one tenant's reads as a permission problem would, and
// another's as a tenant that vanished mid-sample.
type failingStats struct {
	StatsReader
	broken, gone string
}

func (f failingStats) Read(ctx context.Context, t sense.Tenant, prev *sense.TenantStats) (sense.TenantStats, error) {
	switch t.Name {
	case f.broken:
		return sense.TenantStats{}, errors.New("cpuacct.usage: permission denied")
	case f.gone:
		return f.StatsReader.Read(ctx, sense.Tenant{ID: "/lab/gone"}, prev)
	}
	return f.StatsReader.Read(ctx, t, prev)
}

// A vanished tenant is no sensor failure; a tenant that cannot be read is,
// and the error names it.
func TestSensorHealthTenantStats(t *testing.T) {
	w := newWorld(t)
	w.running = false
	w.gone["/lab/gone"] = true
	hs := newHarness(t, w, testConfig(t.TempDir()), nil)
	a := hs.agent
	stats := failingStats{StatsReader: a.d.Stats, gone: "bystander"}
	a.d.Stats = stats
	a.step(t.Context(), time.Now())
	if s := sensorOf(t, a, sensorTenantStats); !s.Success || s.Errors != 0 {
		t.Errorf("a vanished tenant counted as a failure: %+v", s)
	}
	stats.broken = "victim"
	a.d.Stats = stats
	a.step(t.Context(), time.Now())
	if s := sensorOf(t, a, sensorTenantStats); s.Success || s.Errors != 1 || !strings.Contains(s.LastError, "/lab/victim") {
		t.Errorf("an unreadable tenant: %+v", s)
	}
}

// libvirtWorld is the world's discovery enriched by a libvirt whose domain
// list may be stale.
type libvirtWorld struct {
	*world
	stale error
}

func (l *libvirtWorld) LibvirtHealth() (time.Duration, error) { return time.Millisecond, l.stale }

// Where VMs are enriched from libvirt, a stale domain list is a failing
// sensor; without libvirt there is no such sensor.
func TestSensorHealthLibvirt(t *testing.T) {
	w := newWorld(t)
	w.running = false
	hs := newHarness(t, w, testConfig(t.TempDir()), nil)
	a := hs.agent
	a.step(t.Context(), time.Now())
	st, _ := a.Latest()
	for _, s := range st.Sensors {
		if s.Sensor == sensorLibvirt {
			t.Fatalf("a libvirt sensor without libvirt: %+v", s)
		}
	}
	lw := &libvirtWorld{world: w, stale: sense.ErrLibvirtStale}
	a.d.Discoverer = lw
	a.step(t.Context(), time.Now())
	if s := sensorOf(t, a, sensorLibvirt); s.Success || s.Errors != 1 || s.DurationSeconds != 0.001 || s.LastError != sense.ErrLibvirtStale.Error() {
		t.Errorf("stale libvirt: %+v", s)
	}
	if s := sensorOf(t, a, sensorDiscovery); !s.Success {
		t.Errorf("the cgroup walk failed with libvirt: %+v", s)
	}
	lw.stale = nil
	a.step(t.Context(), time.Now())
	if s := sensorOf(t, a, sensorLibvirt); !s.Success || s.Errors != 1 {
		t.Errorf("libvirt back: %+v", s)
	}
}
