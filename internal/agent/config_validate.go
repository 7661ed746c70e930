package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path"
	"reflect"
	"strings"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/prometheus/exporter-toolkit/web"
)

var durationType = reflect.TypeOf(time.Duration(0))

// checkNumbers walks a configuration value and reports, by YAML key, every
// float that is not finite and every negative duration.
func checkNumbers(v reflect.Value, prefix string) []error {
	var errs []error
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			errs = append(errs, checkNumbers(v.Elem(), prefix)...)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			key := name
			if prefix != "" {
				key = prefix + "." + name
			}
			if key == "proof" {
				continue
			}
			errs = append(errs, checkNumbers(v.Field(i), key)...)
		}
	case reflect.Float32, reflect.Float64:
		if x := v.Float(); math.IsNaN(x) || math.IsInf(x, 0) {
			errs = append(errs, fmt.Errorf("%s: %v is not a finite number", prefix, x))
		}
	case reflect.Int64:
		if v.Type() == durationType && v.Int() < 0 {
			errs = append(errs, fmt.Errorf("%s: %s is negative", prefix, time.Duration(v.Int())))
		}
	}
	return errs
}

// Validate checks values and names the offending field.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, a...)))
	}
	if c.Interval < 50*time.Millisecond || c.Interval > time.Minute {
		bad("interval", "%s outside 50ms-1m", c.Interval)
	}
	if err := checkListen(c.Listen); err != nil {
		bad("listen", "%v", err)
	}
	if _, err := ParseLogLevel(c.LogLevel); err != nil {
		bad("log_level", "%v", err)
	}
	if c.WebConfigFile != "" {
		// Its certificates and users are read now, so a typo fails the
		// start rather than the first scrape.
		if err := web.Validate(c.WebConfigFile); err != nil {
			bad("web_config_file", "%s: %v", c.WebConfigFile, err)
		}
	}
	if c.MaxThrottled < 1 || c.MaxThrottled > 1000 {
		bad("max_throttled", "%d outside 1-1000", c.MaxThrottled)
	}
	intIn := func(field string, v, lo, hi int64) {
		if v < lo || v > hi {
			bad(field, "%d outside %d-%d", v, lo, hi)
		}
	}
	// 0 means "sized for this host" for the probe; anything else is a size
	// the probe allocates or a loop it runs every interval.
	if c.Probe.LLCBytes != 0 {
		intIn("probe.llc_bytes", c.Probe.LLCBytes, 64<<10, 256<<20)
	}
	if c.Probe.Chunks != 0 {
		intIn("probe.chunks", int64(c.Probe.Chunks), 1, 64)
	}
	if c.Probe.ProofChunks != 0 {
		intIn("probe.proof_chunks", int64(c.Probe.ProofChunks), 1, 64)
	}
	if c.Probe.CPUsPerDomain != 0 {
		intIn("probe.cpus_per_domain", int64(c.Probe.CPUsPerDomain), 1, 256)
	}
	if c.Probe.Spread != 0 {
		intIn("probe.spread", int64(c.Probe.Spread), 1, 16)
	}
	if c.Probe.ProofReads != 0 {
		intIn("probe.proof_reads", int64(c.Probe.ProofReads), 1, 4)
	}
	intIn("judge.window", int64(c.Judge.Window), 2, 1024)
	intIn("perf.fd_budget", int64(c.Perf.FDBudget), 0, 1<<20)
	intIn("resctrl.max_monitoring_groups", int64(c.Resctrl.MaxMonitoringGroups), 0, 1<<16)
	if t := c.Throttle; t.Hold < 0 || t.Hold > time.Hour || t.MaxHold < 0 || t.MaxHold > 24*time.Hour {
		bad("throttle", "hold %s and max_hold %s must be within 0-1h and 0-24h", t.Hold, t.MaxHold)
	}
	for _, k := range []struct {
		field string
		v     time.Duration
	}{{"kubernetes.uncontained_after", c.Kubernetes.UncontainedAfter}, {"kubernetes.clear_after", c.Kubernetes.ClearAfter}} {
		if k.v > 7*24*time.Hour {
			bad(k.field, "%s above 168h", k.v)
		}
	}
	// Every number anywhere in the configuration (the policies' own
	// sections included) must be finite, and no duration negative: NaN
	// passes every comparison above unnoticed. The proof section checks
	// its own.
	errs = append(errs, checkNumbers(reflect.ValueOf(*c), "")...)
	for i, g := range append(append([]string{}, c.Tenants.Globs...), c.Protect...) {
		if _, err := path.Match(g, ""); err != nil {
			field := "protect"
			if i < len(c.Tenants.Globs) {
				field = "tenants.globs"
			}
			bad(field, "bad pattern %q: %v", g, err)
		}
	}
	if err := c.Proof.ProofConfig.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Proof.Budget < c.Proof.Slot || c.Proof.Budget > time.Minute {
		bad("proof.budget", "%s outside proof.slot (%s) to 1m", c.Proof.Budget, c.Proof.Slot)
	}
	if c.Proof.Backoff < 0 || c.Proof.MaxBackoff < c.Proof.Backoff {
		bad("proof.max_backoff", "must be >= proof.backoff")
	}
	sp, duty := c.Sparsify(), c.DutyController()
	switch {
	case sp.Period < time.Millisecond || sp.Period*judge.DeepPeriods > time.Second:
		// The deep floor spreads the floor's quota over DeepPeriods
		// periods, and the kernel's longest period is 1 s.
		bad("throttle.period", "%s outside 1ms-%s", sp.Period, time.Second/judge.DeepPeriods)
	case sp.Steps < 2 || sp.Steps > 100:
		bad("throttle.steps", "%d outside 2-100", sp.Steps)
	case duty.FloorStep < 1 || duty.FloorStep > sp.Steps:
		bad("throttle.floor_step", "%d outside 1-%d", duty.FloorStep, sp.Steps)
	case duty.StartStep < duty.FloorStep || duty.StartStep > sp.Steps:
		bad("throttle.start_step", "%d outside %d-%d", duty.StartStep, duty.FloorStep, sp.Steps)
	case sp.Quota(duty.FloorStep, 1).Quota < time.Millisecond || time.Duration(int64(sp.Period)*int64(duty.FloorStep)/int64(sp.Steps)) < time.Millisecond:
		bad("throttle.floor_step", "floor %d/%d of %s is under the kernel's 1ms minimum quota", duty.FloorStep, sp.Steps, sp.Period)
	case duty.RelaxBelow >= duty.TightenAbove:
		bad("throttle.relax_below", "must be below throttle.tighten_above")
	case duty.MaxHarm >= 0 && duty.MaxHarm <= 1:
		bad("throttle.max_harm", "%g must be over 1 (a slowdown), or negative for no ceiling", duty.MaxHarm)
	}
	th := c.Thresholds()
	if th.Ratio <= 1 || th.Strong < th.Ratio || th.Tolerance <= 1 || th.Tolerance > th.Ratio {
		bad("judge", "need 1 < tolerance <= ratio <= strong (have %.2f, %.2f, %.2f)", th.Tolerance, th.Ratio, th.Strong)
	}
	if th.LLCRatio <= 1 || th.LLCStrong < th.LLCRatio {
		bad("judge", "need 1 < llc_ratio <= llc_strong (have %.2f, %.2f)", th.LLCRatio, th.LLCStrong)
	}
	if k := c.Kubernetes; k.UncontainedAfter < 10*c.Interval || k.ClearAfter < 10*c.Interval {
		bad("kubernetes", "uncontained_after and clear_after must be at least 10 intervals")
	}
	for _, err := range []error{c.BusLocks.Validate(), c.Permits.Validate(), c.Power.Validate(),
		c.Levers.ClockModulation.Validate(), c.Levers.CPUFreq.Validate()} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if l := c.Resctrl.LLCIsolation; l.ThrottleBC < 0 || l.ThrottleBC > 1 || l.RelaxBC < 0 || l.RelaxBC > 1 || (l.RelaxBC > 0 && l.ThrottleBC > 0 && l.RelaxBC < l.ThrottleBC) {
		bad("resctrl.llc_isolation", "need 0 <= throttle_bc <= relax_bc <= 1")
	}
	if l := c.Resctrl.LLCIsolation; l.BusyFraction < 0 || l.BusyFraction > 1 || l.RelaxPeriod < 0 || l.ReplacePeriod < 0 {
		bad("resctrl.llc_isolation", "busy_fraction outside 0-1 or a negative period")
	}
	if m := c.Resctrl.MBA; m.ThresholdBytesPerSec < 0 || m.RelaxGuardBytesPerSec < 0 || m.Floor < 0 || m.Floor >= 1 ||
		(m.ThresholdBytesPerSec > 0 && m.RelaxGuardBytesPerSec >= m.ThresholdBytesPerSec) {
		bad("resctrl.mba", "need threshold > relax_guard >= 0 and 0 <= floor < 1")
	}
	switch c.Kubernetes.Taint {
	case "", "PreferNoSchedule", "NoSchedule":
	default:
		bad("kubernetes.taint", "%q: want \"\", PreferNoSchedule or NoSchedule", c.Kubernetes.Taint)
	}
	if w := c.CPUWait; w.Ratio <= 1 || w.Strong < w.Ratio {
		bad("cpu_wait", "need 1 < ratio <= strong (have %.2f, %.2f)", w.Ratio, w.Strong)
	}
	if w := c.CPI; w.Ratio <= 1 || w.Strong < w.Ratio {
		bad("cpi", "need 1 < ratio <= strong (have %.2f, %.2f)", w.Ratio, w.Strong)
	}
	switch c.Libvirt.Enabled {
	case "auto", "true", "false":
	default:
		bad("libvirt.enabled", "%q: want auto, true or false", c.Libvirt.Enabled)
	}
	if c.Libvirt.Timeout < 100*time.Millisecond || c.Libvirt.Timeout > time.Minute {
		bad("libvirt.timeout", "%s outside 100ms-1m", c.Libvirt.Timeout)
	}
	return errors.Join(errs...)
}

// ParseLogLevel reads a log level: debug, info, warn or error.
func ParseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	switch strings.ToLower(s) {
	case "debug", "info", "warn", "error":
		return l, l.UnmarshalText([]byte(s))
	}
	return l, fmt.Errorf("%q: want debug, info, warn or error", s)
}
