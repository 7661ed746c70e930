package act

import (
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/judge"
)

// Sparsify is the duty grid of bus-lock sparsification as the CPU-quota
// actuator writes it: a proven polluter may run only step/Steps of each
// short Period on its CPUs. Which step it runs at is the judge's
// (judge.DutyController).
type Sparsify struct {
	Period time.Duration // default 16 ms: 1/16 of it is 1 ms, the kernel's minimum quota
	Steps  int           // default judge.DefaultDutySteps
}

// Fill sets defaults.
func (s *Sparsify) Fill() {
	if s.Period == 0 {
		s.Period = 16 * time.Millisecond
	}
	if s.Steps == 0 {
		s.Steps = judge.DefaultDutySteps
	}
}

// Quota is the CFS limit for a duty step on ncpus CPUs.
func (s Sparsify) Quota(step, ncpus int) cgroup.Quota {
	q := time.Duration(int64(s.Period) * int64(step) * int64(max(ncpus, 1)) / int64(s.Steps))
	return cgroup.Quota{Quota: max(q, cgroup.MinQuota), Period: s.Period}
}

// QuotaAt is the CFS limit for a throttle's duty on ncpus CPUs: its
// step's, or on the deep floor the same quota over judge.DeepPeriods
// periods.
func (s Sparsify) QuotaAt(t *judge.DutyThrottle, ncpus int) cgroup.Quota {
	q := s.Quota(t.Step, ncpus)
	if t.Deep {
		q.Period *= judge.DeepPeriods
	}
	return q
}
