package agent

import (
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// proof is a perturbation proof in progress (judge.Proof) and what the
// agent needs to run it: whom it caps, where it reads, and the cap state
// it applied last.
type proof struct {
	tenant sense.Tenant
	p      *judge.Proof
	cpu    CPUDomain // where the probe reads
	kind   string    // the probe kind that showed the contention ("" = all)
	reason string
	capped bool // the cap is applied now
	// switched says the cap state changed since the last reading: a
	// CPU-wait reading's window then spans both states.
	switched bool
	since    time.Time // when the cap was last applied
	next     time.Time // the next reading, or the end of a hold (held)
	// held says the cap is kept through a freed slot's settle
	// (judge.ProofPlan.HoldUntil): next is when it is lifted, not a
	// reading.
	held bool
	// signal is the contention being proven: signalProbe (the canary
	// probes on cpu), signalWait (the victims' CPU wait, waitFrom their
	// counters at the previous reading) or signalCPI (the victims' CPI,
	// cpiFrom their cycles and instructions at the previous reading).
	signal string
	// recheck says the proof proves again, early, a suspect acquitted
	// lately (probePolicy.recheck): its own acquittal does not allow
	// another.
	recheck  bool
	victims  []sense.Tenant
	waitFrom map[string]sense.TenantStats
	cpiFrom  map[string]sense.PerfSnapshot
	// survey marks the CPI policy's start-up survey of this suspect (one
	// trial, read on its neighbours' CPI, see cpiPolicy.maybeSurvey);
	// counted is what each neighbour counted in it, freed [0] and
	// capped [1].
	survey  bool
	counted map[string]*[2]cpiWindow
}

// cpiWindow is cycles and instructions counted over seconds.
type cpiWindow struct{ cycles, instructions, seconds float64 }

// proofPeriod is the CFS period of a proof's hard cap (act.ProofPeriod).
const proofPeriod = act.ProofPeriod

// hardCap is the cap of a proof's trial and of the start-up survey: the
// kernel's minimum quota (1 ms) per CPU of the tenant a proofPeriod, so it
// runs in rare 1 ms slots while the probe reads.
func hardCap(t sense.Tenant) cgroup.Quota {
	return cgroup.Quota{Quota: time.Duration(max(1, t.CPUs.Len())) * cgroup.MinQuota, Period: proofPeriod}
}

// CPUDomain is a CPU and its L3 domain.
type CPUDomain struct{ Domain, CPU int }
