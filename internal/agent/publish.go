package agent

import (
	"maps"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// publish builds and publishes the State.
func (a *Agent) publish(now time.Time, v judge.Verdict, samples []sample, ranked []judge.Suspect, readings []sense.ProbeReading, cpuBefore time.Duration) {
	st := &api.State{
		Time: now, Interval: a.cfg.Interval.Seconds(), Host: a.d.Host, Version: a.d.Version, DryRun: a.cfg.DryRun,
		PMU: a.d.PMU, Contention: v.Contended, ContentionRatio: v.Ratio,
		CPUWait: a.wait.verdict().Contended, CPUWaitRatio: a.wait.verdict().Ratio,
		CPI: a.cpi.verdict().Contended, CPIRatio: a.cpi.verdict().Ratio,
		Tenants: []api.TenantState{}, Probes: []api.ProbeState{}, Suspects: []api.Suspect{},
		Actions: slices.Clone(a.rec.actions), ActionsTotal: map[string]uint64{}, ProofsTotal: map[string]uint64{},
	}
	if st.Actions == nil {
		st.Actions = []api.ActionRecord{}
	}
	for k, n := range a.rec.totals {
		st.ActionsTotal[k] = n
	}
	for k, n := range a.prover.verdicts {
		st.ProofsTotal[k] = n
	}
	present := presentOf(samples)
	cpiRatio := map[string]float64{}
	for _, r := range a.cpi.verdict().Ratings {
		cpiRatio[r.ID] = r.Ratio
	}
	scores := map[string]float64{}
	for _, r := range ranked {
		scores[r.ID] = r.Score
		st.Suspects = append(st.Suspects, api.Suspect{Tenant: r.ID, Name: r.Name, Score: r.Score, Reasons: r.Reasons})
	}
	for _, s := range samples {
		ts := api.TenantState{ID: s.t.ID, Kind: s.t.Kind, Name: s.t.Name, UUID: s.t.UUID, Cgroup: s.t.Cgroup, CPUs: s.t.CPUs.String(),
			CPU: s.usage, ThrottledRatio: s.thrRatio, RunDelay: s.delay, PSI: s.psi, Counters: s.counters,
			Duty: 1, Protected: a.cfg.protects(s.t), Score: scores[s.t.ID], CPIRatio: cpiRatio[s.t.ID]}
		if h := a.arb.holds[s.t.ID]; h != nil && len(h.claims) > 0 {
			ts.Throttled, ts.Duty, ts.Holds = true, h.duty(), h.describe()
			if h.quota.Period > 0 {
				ts.Quota = h.quota.CPUs()
			}
		}
		if cl := a.arb.tenantClasses(s.t.ID); len(cl) > 0 {
			ts.Throttled, ts.Holds = true, append(ts.Holds, cl...)
		}
		if hw := a.d.Hardware; hw != nil {
			if khz := hw.nominalKHz; khz > 0 {
				ts.Pollution, _ = sense.TenantPollution(s.counters, khz)
			}
			ts.Watts = hw.status.TenantWatts[s.t.ID]
			if u, ok := hw.status.Resctrl[s.t.ID]; ok {
				for _, d := range u.Domains {
					ts.LLCOccupancy += d.OccupancyBytes
					ts.MemBandwidth += d.TotalBytesPerSec
				}
			}
		}
		ts.CPUSeconds, ts.ThrottledSeconds, ts.RunDelaySeconds = s.stats.Usage.Seconds(), s.stats.Throttled.Seconds(), s.stats.RunDelay.Seconds()
		if s.stats.HasPSI {
			psi := s.stats.PSISome.Seconds()
			ts.PSISomeSeconds = &psi
		}
		ts.PerfEvents = a.countPerfEvents(s)
		ts.KernelBusLockReports = s.kernelBusLocksTotal
		st.Tenants = append(st.Tenants, ts)
	}
	for id := range a.perfTotals {
		if _, ok := present[id]; !ok {
			delete(a.perfTotals, id)
		}
	}
	for _, r := range a.cont.Rate(readings) {
		st.Probes = append(st.Probes, api.ProbeState{Domain: r.Domain, CPU: r.CPU, Kind: r.Kind, LatencyNs: r.Latency, BaselineNs: r.Baseline, Ratio: r.Ratio})
	}
	st.ProbeCPU = probeCPU(a.d.Probe)
	if a.prover.proof != nil {
		st.Proof = &api.ProofState{Tenant: a.prover.proof.tenant.ID, Name: a.prover.proof.tenant.Name, Started: a.prover.proof.p.Started(), Before: a.prover.proof.p.Before(), Trials: a.prover.proof.p.Trials()}
	}
	if a.d.Counters != nil {
		st.PerfFDs = a.d.Counters.FDs()
	}
	if a.d.Hardware != nil {
		hs := a.d.Hardware.State()
		st.Hardware = &hs
	}
	st.Sensors = a.health.states()
	st.IntervalCPU = (selfCPU() - cpuBefore).Seconds()
	a.latest.Store(st)
}

// selfCPU is this process's CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// countPerfEvents adds the tenant's perf event rates over the interval they
// cover to its running totals and returns a copy of the totals (nil if it
// was never counted). task_clock is CPU time, which the cgroup's usage
// counts already.
func (a *Agent) countPerfEvents(s sample) map[string]float64 {
	tot := a.perfTotals[s.t.ID]
	if len(s.counters) > 0 && s.dt > 0 {
		if tot == nil {
			tot = make(map[string]float64, len(s.counters))
			if a.perfTotals == nil {
				a.perfTotals = map[string]map[string]float64{}
			}
			a.perfTotals[s.t.ID] = tot
		}
		for ev, rate := range s.counters {
			if ev != sense.EventTaskClock && rate > 0 {
				tot[ev] += rate * s.dt
			}
		}
	}
	if len(tot) == 0 {
		return nil
	}
	return maps.Clone(tot)
}

// spentProber is a probe that books its CPU time (sense.Probe.Spent).
type spentProber interface {
	Spent() map[sense.ProbeSpent]time.Duration
}

// probeCPU is the probe's CPU time by CPU and reading, in order; nil for
// a probe that does not book it.
func probeCPU(p Prober) []api.ProbeCPUState {
	sp, ok := p.(spentProber)
	if !ok {
		return nil
	}
	spent := sp.Spent()
	out := make([]api.ProbeCPUState, 0, len(spent))
	for k, d := range spent {
		out = append(out, api.ProbeCPUState{CPU: k.CPU, Reading: k.Reading, Seconds: d.Seconds()})
	}
	slices.SortFunc(out, func(a, b api.ProbeCPUState) int {
		if a.CPU != b.CPU {
			return a.CPU - b.CPU
		}
		return strings.Compare(a.Reading, b.Reading)
	})
	return out
}
