package agent

import (
	"context"
	"errors"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// Prober is the canary probe as the agent uses it.
type Prober interface {
	Measure() ([]sense.ProbeReading, error)
	MeasureCPU(domain, cpu int, kinds ...string) ([]sense.ProbeReading, error)
	Targets() []sense.Target
	Domains() []sense.ProbeDomain
}

// probeTimeout bounds how long the agent waits for the probe on one CPU. A
// probe normally takes a millisecond or two; a CPU starved by its tenants (or,
// in a VM, stopped by the host while it does split locks) can hold the probe
// thread for seconds, and the agent must not stall with it.
const probeTimeout = 60 * time.Millisecond

// probeGap separates the probes of two CPUs in one interval.
const probeGap = 5 * time.Millisecond

// probeRun is a probe measurement that may still be running.
type probeRun struct {
	done     chan struct{}
	readings []sense.ProbeReading
	err      error
}

// errProbeBusy says the probe on a CPU did not finish within probeTimeout.
var errProbeBusy = errors.New("probe did not run in time")

// measureCPU runs the probe on one CPU with a timeout. A measurement that
// times out keeps running in its goroutine; until it finishes, that CPU is
// reported busy instead of starting a second probe behind it.
func (a *Agent) measureCPU(domain, cpu int, kinds ...string) ([]sense.ProbeReading, error) {
	return a.measureOn(cpu, func() ([]sense.ProbeReading, error) { return a.d.Probe.MeasureCPU(domain, cpu, kinds...) })
}

// measureOn runs one measurement on cpu with the timeout of measureCPU.
func (a *Agent) measureOn(cpu int, measure func() ([]sense.ProbeReading, error)) ([]sense.ProbeReading, error) {
	if run := a.pending[cpu]; run != nil {
		select {
		case <-run.done:
			delete(a.pending, cpu) // late and stale: discard it
		default:
			return nil, errProbeBusy
		}
	}
	run := &probeRun{done: make(chan struct{})}
	go func() {
		run.readings, run.err = measure()
		close(run.done)
	}()
	timer := time.NewTimer(probeTimeout)
	defer timer.Stop()
	select {
	case <-run.done:
		return run.readings, run.err
	case <-timer.C:
		a.pending[cpu] = run
		return nil, errProbeBusy
	}
}

// Calibrate takes n quiet probe readings into the baselines, one per
// interval: call it before tenants start (the lab does), or rely on saved
// baselines. The spacing matters: back-to-back readings find the probe's
// buffers still warm in the caches and would set a baseline that normal
// operation, one reading per interval, never gets back to.
func (a *Agent) Calibrate(ctx context.Context, n int) error {
	for i := range n {
		if i > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(a.cfg.Interval):
			}
		}
		rs, err := a.d.Probe.Measure()
		if err != nil {
			return err
		}
		a.cont.Calibrate(rs)
	}
	a.survey = 0
	return nil
}

// RestoreBaselines imports saved baselines.
func (a *Agent) RestoreBaselines(b map[string]judge.Baseline) {
	a.cont.Restore(b)
	if len(a.cont.Baselines()) > 0 {
		a.survey = 0
	}
}
