package judge

import (
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The YAML sections proposed for agent.Config decode into the judges'
// configurations with the keys documented on them, and nothing else.
func TestHardwareConfigYAML(t *testing.T) {
	const doc = `
power:
  enabled: true
  budget_watts: 165
  guard_watts: 15
  period: 6s
  busy_threshold: 0.6
  busy_cpus: 0.5
  hot_by: temperature
  levers: [clock_modulation, cpu_quota]
buslocks:
  enabled: true
  budget_per_sec: 50000
  shared_fraction: 0.8
  burst_factor: 3
  relax_below: 0.8
  dirty_per_sec: 125
  window: 15s
  burst_hold: 500ms
  share: cores
  levers: [clock_modulation, cpu_quota]
permits:
  default: 0
  burst: 2s
  floor_duty: 0.0625
  stale: 5s
  classes:
    - {name: hpc, kind: vm, match: "hpc-*", llc_cap: 250000}
  tenants:
    lbm: 50000
`
	var c struct {
		Power    PowerBudgetConfig   `yaml:"power"`
		BusLocks BusLockBudgetConfig `yaml:"buslocks"`
		Permits  PermitsConfig       `yaml:"permits"`
	}
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatal(err)
	}
	c.Power.Fill()
	c.BusLocks.Fill()
	c.Permits.Fill()
	for _, err := range []error{c.Power.Validate(), c.BusLocks.Validate(), c.Permits.Validate()} {
		if err != nil {
			t.Error(err)
		}
	}
	if !c.Power.Enabled || c.Power.BudgetWatts != 165 || c.Power.Period != 6*time.Second || c.Power.HotBy != "temperature" || len(c.Power.Levers) != 2 {
		t.Errorf("power %+v", c.Power)
	}
	if c.BusLocks.BudgetPerSec != 50000 || c.BusLocks.Share != "cores" || c.BusLocks.BurstHold != 500*time.Millisecond {
		t.Errorf("buslocks %+v", c.BusLocks)
	}
	if b, by := c.Permits.Booking("/x", "hpc-3", "vm"); b != 250000 || by != "class hpc" || c.Permits.Tenants["lbm"] != 50000 {
		t.Errorf("permits %+v", c.Permits)
	}
	bad := yaml.NewDecoder(strings.NewReader("power:\n  budget: 150\n"))
	bad.KnownFields(true)
	if err := bad.Decode(&c); err == nil || !strings.Contains(err.Error(), "budget") {
		t.Errorf("unknown key accepted: %v", err)
	}
}
