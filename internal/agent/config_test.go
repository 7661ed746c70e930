package agent

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestConfig(t *testing.T) {
	c, err := ParseConfig([]byte("interval: 1s\nprotect: [db-*]\nthrottle:\n  start_step: 2\n"), "c.yaml")
	if err != nil || c.Interval != time.Second || c.DutyController().StartStep != 2 || c.Listen != "127.0.0.1:9477" || !*c.Tenants.Builtin {
		t.Fatalf("config = %+v, %v", c, err)
	}
	if d := Defaults(); d.Validate() != nil || d.Sparsify().Period != 16*time.Millisecond {
		t.Errorf("defaults invalid: %v", d.Validate())
	}
	for in, want := range map[string]string{
		"intervall: 1s\n":                      `line 1: unknown key "intervall" (did you mean "interval"?)`,
		"proof:\n  windw: 1s\n":                `line 2: unknown key "windw" (known keys: alpha,`,
		"interval: 10ms\n":                     "interval: 10ms outside",
		"throttle:\n  steps: 1\n":              "throttle.steps",
		"throttle:\n  period: 8ms\n":           "throttle.floor_step",
		"protect: ['[bad']\n":                  "protect: bad pattern",
		"judge:\n  tolerance: 3\n  ratio: 2\n": "judge: need",
		"max_throttled: -1\n":                  "max_throttled",
		"throttle:\n  relax_below: 2\n":        "throttle.relax_below",
		"interval: fast\n":                     "line 1",
		"tenants:\n  globs: ['/a/[']\n":        "tenants.globs",
		"throttle:\n  start_step: 17\n":        "throttle.start_step",
		"throttle:\n  max_harm: 0.9\n":         "throttle.max_harm",
	} {
		_, err := ParseConfig([]byte(in), "c.yaml")
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "c.yaml: ") {
			t.Errorf("%q: error %v, want %q", in, err, want)
		}
	}
	if _, err := ParseConfig(nil, "empty.yaml"); err != nil {
		t.Errorf("empty config: %v", err)
	}
}

// The documented example configuration parses and spells out exactly the
// defaults, so the documentation cannot drift from the code.
func TestExampleConfigIsTheDefaults(t *testing.T) {
	c, err := LoadConfig("../../examples/crosstalk.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := Defaults()
	if c.Interval != d.Interval || c.Listen != d.Listen || c.LogLevel != d.LogLevel || c.StateDir != d.StateDir || c.MaxThrottled != d.MaxThrottled ||
		c.Sparsify() != d.Sparsify() || c.DutyController() != d.DutyController() || c.Thresholds() != d.Thresholds() || c.Proof != d.Proof ||
		c.Judge.Window != d.Judge.Window || *c.Perf.Enabled != *d.Perf.Enabled || c.Perf.FDBudget != d.Perf.FDBudget {
		t.Errorf("example config differs from the defaults:\n%+v\n%+v", c, d)
	}
	// The hardware policies' sections, field for field (they are plain
	// values once filled).
	for _, x := range []struct {
		name      string
		got, want any
	}{
		{"buslocks", c.BusLocks, d.BusLocks}, {"permits", c.Permits, d.Permits}, {"power", c.Power, d.Power},
		{"levers", c.Levers, d.Levers}, {"resctrl", c.Resctrl, d.Resctrl},
	} {
		if fmt.Sprintf("%+v", deref(x.got)) != fmt.Sprintf("%+v", deref(x.want)) {
			t.Errorf("example %s section differs from the defaults:\n%+v\n%+v", x.name, deref(x.got), deref(x.want))
		}
	}
	probe := c.ProbeSettings()
	if probe.CPUsPerDomain != 2 || probe.Chunks != 7 || probe.ProofChunks != 3 {
		t.Errorf("example probe settings %+v; the probe defaults are 2 CPUs per domain, 7 chunks and 3 a proof's DRAM reading", probe)
	}
	if *c.Probe.PreferIdle != *d.Probe.PreferIdle || *c.Probe.Realtime != *d.Probe.Realtime {
		t.Errorf("example probe prefer_idle %v and realtime %v; the defaults are %v and %v", *c.Probe.PreferIdle, *c.Probe.Realtime, *d.Probe.PreferIdle, *d.Probe.Realtime)
	}
}

// deref prints a config section with its pointer fields followed, so two
// equal sections print alike.
func deref(v any) any {
	b, _ := json.Marshal(v)
	var m any
	json.Unmarshal(b, &m)
	return emptyIsNil(m)
}

// emptyIsNil makes an empty list or map print as an absent one (YAML's []
// and {} are what an operator writes for "none").
func emptyIsNil(v any) any {
	switch x := v.(type) {
	case []any:
		if len(x) == 0 {
			return nil
		}
		for i := range x {
			x[i] = emptyIsNil(x[i])
		}
	case map[string]any:
		if len(x) == 0 {
			return nil
		}
		for k := range x {
			x[k] = emptyIsNil(x[k])
		}
	}
	return v
}
