package sim

import (
	"context"
	"testing"
	"time"
)

// Progress is told of every simulated second, and of nothing more: its
// sum is what Planned said the run would take, a fractional duration
// included.
func TestProgressSumsToPlanned(t *testing.T) {
	sc := mustParse(t, `
name: tiny
duration: 2500ms
machine: {cpu: zen3, sockets: 1, cores_per_socket: 4}
tenants:
  - {name: v, role: victim, cpus: "0", phases: [{from: 0s, memory_bound: 0.5}]}
`)
	var told time.Duration
	o := Options{Policies: []string{PolicyNone, PolicyStatic}, Progress: func(d time.Duration) { told += d }}
	if _, err := Run(context.Background(), sc, o); err != nil {
		t.Fatal(err)
	}
	if want := Planned(sc, o); told != want || want != 5*time.Second {
		t.Errorf("progress told %s, planned %s; want 5s both", told, want)
	}
	if got := Planned(sc, Options{Duration: time.Second}); got != time.Duration(len(PolicyNames))*time.Second {
		t.Errorf("Planned with every policy and a 1s duration = %s", got)
	}
}
