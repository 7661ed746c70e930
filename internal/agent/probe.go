package agent

import (
	"context"
	"errors"
	"log/slog"
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

// probeSensor reads the canary probe for the agent: every reading under
// probeTimeout, the probes still running past it, and the start-up survey
// of the probes' quiet level (watch.go). It writes the quiet level into
// cont, the probe judge it shares with the policies.
type probeSensor struct {
	probe Prober
	cont  *judge.Contention
	// pending are, per CPU, the probes that outlived their timeout.
	pending map[int]*probeRun
	// survey is how many start-up surveys of the quiet probe level are
	// left (see surveyQuiet); none once baselines were calibrated or
	// restored.
	survey int
	// ledger books the survey's caps as proof cap time; now, sleep and
	// log are the agent's (Deps).
	ledger *proofLedger
	now    func() time.Time
	sleep  func(time.Duration)
	log    *slog.Logger
}

func newProbeSensor(d Deps, cont *judge.Contention, ledger *proofLedger) *probeSensor {
	return &probeSensor{probe: d.Probe, cont: cont, pending: map[int]*probeRun{}, survey: surveyRounds,
		ledger: ledger, now: d.Now, sleep: d.Sleep, log: d.Log}
}

// measureCPU runs the probe on one CPU with a timeout. A measurement that
// times out keeps running in its goroutine; until it finishes, that CPU is
// reported busy instead of starting a second probe behind it.
func (ps *probeSensor) measureCPU(domain, cpu int, kinds ...string) ([]sense.ProbeReading, error) {
	return ps.measureOn(cpu, func() ([]sense.ProbeReading, error) { return ps.probe.MeasureCPU(domain, cpu, kinds...) })
}

// onceProber is a probe that can take one reading of each kind where
// MeasureCPU takes a spread (sense.Probe.MeasureOnce).
type onceProber interface {
	MeasureOnce(domain, cpu int, kinds ...string) ([]sense.ProbeReading, error)
}

// measureOnce is measureCPU at a proof's pace: one reading of each kind
// where the probe can, else measureCPU.
func (ps *probeSensor) measureOnce(domain, cpu int, kinds ...string) ([]sense.ProbeReading, error) {
	if o, ok := ps.probe.(onceProber); ok {
		return ps.measureOn(cpu, func() ([]sense.ProbeReading, error) { return o.MeasureOnce(domain, cpu, kinds...) })
	}
	return ps.measureCPU(domain, cpu, kinds...)
}

// measureOn runs one measurement on cpu with the timeout of measureCPU.
func (ps *probeSensor) measureOn(cpu int, measure func() ([]sense.ProbeReading, error)) ([]sense.ProbeReading, error) {
	if run := ps.pending[cpu]; run != nil {
		select {
		case <-run.done:
			delete(ps.pending, cpu) // late and stale: discard it
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
		ps.pending[cpu] = run
		return nil, errProbeBusy
	}
}

// calibrate takes n quiet probe readings into the baselines, one every
// interval (see Agent.Calibrate); baselines so taken need no survey.
func (ps *probeSensor) calibrate(ctx context.Context, n int, interval time.Duration) error {
	for i := range n {
		if i > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(interval):
			}
		}
		rs, err := ps.probe.Measure()
		if err != nil {
			return err
		}
		ps.cont.Calibrate(rs)
	}
	ps.survey = 0
	return nil
}

// restore imports saved baselines; any at all make the survey needless.
func (ps *probeSensor) restore(b map[string]judge.Baseline) {
	ps.cont.Restore(b)
	if len(ps.cont.Baselines()) > 0 {
		ps.survey = 0
	}
}

// Calibrate takes n quiet probe readings into the baselines, one per
// interval: call it before tenants start (the lab does), or rely on saved
// baselines. The spacing matters: back-to-back readings find the probe's
// buffers still warm in the caches and would set a baseline that normal
// operation, one reading per interval, never gets back to.
func (a *Agent) Calibrate(ctx context.Context, n int) error {
	return a.sensor.calibrate(ctx, n, a.cfg.Interval)
}

// RestoreBaselines imports saved baselines.
func (a *Agent) RestoreBaselines(b map[string]judge.Baseline) {
	a.sensor.restore(b)
	a.cpi.restore(b)
}
