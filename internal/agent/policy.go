package agent

import (
	"context"
	"log/slog"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/resctrl"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

// policy is one hardware-assisted policy: each interval it judges the
// observation with its own judge and state, and says what it wants done
// as decisions (claims on levers, and releases) for the arbiter to apply.
// It writes nothing itself; it reports its part of the hardware state in
// st. A policy that needs a sensor the observation did not read this
// interval decides nothing.
//
// Adding a policy is a file with its type and constructor, and one line
// in NewHardware's list.
type policy interface {
	name() api.Policy
	observe(o *hwObservation, st *api.HardwareState) []decision
}

// sensingPolicy is a policy with a sensor of its own, read each interval
// outside the agent's lock (it does I/O) into the observation, before any
// policy judges it.
type sensingPolicy interface {
	policy
	sense(ctx context.Context, o *hwObservation, health *sensorHealth)
}

// policyEnv is what a policy's constructor may look at to decide whether
// it runs here. A constructor returns its policy, or nil and why it is off.
type policyEnv struct {
	cfg  Config
	host *host.Host
	topo *topology.Topology
	// has reports whether the PMU counts a perf event per tenant here.
	has func(event string) bool
	log *slog.Logger
	// resctrl is the resctrl filesystem where monitoring runs, with the
	// host's L3 domains; resctrlOff says why it does not otherwise.
	resctrl    *resctrl.Info
	resctrlOff string
	l3         map[int]l3Domain
}

// choose picks each observed tenant's lever among prefer, on the levers
// this host has (judge.ChooseLevers), by tenant.
func (o *hwObservation) choose(prefer []judge.Lever) map[string]judge.LeverChoice {
	ts := make([]judge.LeverTenant, 0, len(o.samples))
	for _, s := range o.samples {
		ts = append(ts, judge.LeverTenant{ID: s.t.ID, CPUs: s.t.CPUs})
	}
	out := make(map[string]judge.LeverChoice, len(ts))
	for _, c := range judge.ChooseLevers(ts, o.levers, prefer) {
		out[c.Tenant] = c
	}
	return out
}

// coresOf counts the physical cores a cpuset covers (its CPUs where the
// topology is unknown).
func coresOf(topo *topology.Topology, cpus cpuset.Set) int {
	if topo == nil {
		return cpus.Len()
	}
	seen := map[[2]int]bool{}
	for _, id := range cpus.List() {
		if c, ok := topo.CPU(id); ok {
			seen[[2]int{c.Package, c.Core}] = true
		}
	}
	return max(1, len(seen))
}
