package agent

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The hardware policies' sections of the agent's configuration decode into
// the judges' configurations with the keys documented on them, and nothing
// else: through ParseConfig, as crosstalk run reads its file.
func TestHardwarePolicyConfigYAML(t *testing.T) {
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
	c, err := ParseConfig([]byte(doc), "crosstalk.yaml")
	if err != nil {
		t.Fatal(err)
	}
	wantLevers := []string{"clock_modulation", "cpu_quota"}
	if !c.Power.Enabled || c.Power.BudgetWatts != 165 || c.Power.GuardWatts != 15 || c.Power.Period != 6*time.Second ||
		c.Power.HotBy != "temperature" || !slices.Equal(c.Power.Levers, wantLevers) {
		t.Errorf("power %+v", c.Power)
	}
	if c.BusLocks.Enabled == nil || !*c.BusLocks.Enabled || c.BusLocks.BudgetPerSec != 50000 || c.BusLocks.Share != "cores" ||
		c.BusLocks.Window != 15*time.Second || c.BusLocks.BurstHold != 500*time.Millisecond || !slices.Equal(c.BusLocks.Levers, wantLevers) {
		t.Errorf("buslocks %+v", c.BusLocks)
	}
	if b, by := c.Permits.Booking("/x", "hpc-3", "vm"); b != 250000 || by != "class hpc" || c.Permits.Tenants["lbm"] != 50000 || c.Permits.Burst != 2*time.Second {
		t.Errorf("permits %+v (hpc-3 booked %v by %q)", c.Permits, b, by)
	}

	for _, tt := range []struct{ name, doc, wantErr string }{
		{"unknown power key", "power:\n  budget: 150\n", "budget"},
		{"unknown bus-lock key", "buslocks:\n  budget: 150\n", "budget"},
		{"unknown permit key", "permits:\n  cap: 1\n", "cap"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseConfig([]byte(tt.doc), "crosstalk.yaml"); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseConfig(%q) = %v, want an error naming %q", tt.doc, err, tt.wantErr)
			}
		})
	}
}
