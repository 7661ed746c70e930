package agent

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// clock is the virtual time of an agent under test and of its fake world:
// Now reads it, Sleep moves it on (a pause in the agent is time passing in
// its world), and the loop below jumps it to whatever is due next.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Sleep(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 {
		c.now = c.now.Add(d)
	}
}

// set moves the clock to t; time never runs backwards (a pass of the
// agent that slept may end after what was due next).
func (c *clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
}

// vloop drives an agent on a clock as Run drives it on the real one: it
// starts it (the leftovers restored), then runs every interval, watch and
// proof reading at the virtual time it is due, with no real sleep between.
type vloop struct {
	a     *Agent
	clock *clock
	log   *actionLog
	next  time.Time // the next interval, as Tick returned it
	// passes counts Tick calls, for the guard against a schedule that
	// does not move on.
	passes int
}

func startLoop(t *testing.T, a *Agent, c *clock, log *actionLog) *vloop {
	a.Start(t.Context())
	return &vloop{a: a, clock: c, log: log}
}

// maxStall is how many passes in a row may find work due at the same
// virtual time before the loop takes the schedule for stuck.
const maxStall = 1000

// advance runs whatever falls due in the next d of virtual time and leaves
// the clock d later; done, if not nil, is checked after every pass and
// stops it early, at the time it first held. It reports whether done held.
func (l *vloop) advance(t *testing.T, d time.Duration, done func() bool) bool {
	t.Helper()
	end := l.clock.Now().Add(d)
	var last time.Time
	stall := 0
	for {
		at := l.a.wakeAt(l.next)
		if at.After(end) {
			l.clock.set(end)
			return false
		}
		l.clock.set(at)
		now := l.clock.Now()
		if now.Equal(last) {
			if stall++; stall > maxStall {
				t.Fatalf("the agent's schedule does not move on: %d passes at %s", stall, now)
			}
		} else {
			last, stall = now, 0
		}
		l.next = l.a.Tick(t.Context(), now, l.next)
		l.passes++
		if done != nil && done() {
			return true
		}
	}
}

// until advances until cond holds, failing the test (with the actions so
// far) if it does not within limit of virtual time; it returns the virtual
// time it took.
func (l *vloop) until(t *testing.T, what string, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := l.clock.Now()
	if cond() {
		return 0
	}
	if !l.advance(t, limit, cond) {
		t.Fatalf("no %s within %s of virtual time; actions:\n%s", what, limit, l.log)
	}
	return l.clock.Now().Sub(start)
}

// stop does what Run does when it ends: restore everything.
func (l *vloop) stop(t *testing.T) { l.a.Stop(t.Context()) }

// String lists the actions, one a line, for a failing test.
func (l *actionLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, r := range l.actions {
		fmt.Fprintf(&b, "%s %s %s (%s)\n", r.Time.Format("15:04:05.000"), r.Kind, r.Name, r.Reason)
	}
	return b.String()
}

// The loop keeps the agent's schedule in virtual time: one interval per
// Interval while nothing is going on, and the leftovers restored first.
func TestVirtualLoopKeepsTheInterval(t *testing.T) {
	w := newWorld(t)
	w.setRunning(false)
	cfg := testConfig(t.TempDir())
	hs := newVirtualHarness(t, w, cfg, nil)
	defer hs.stop(t)
	start := hs.clock.Now()
	hs.advance(t, 10*cfg.Interval, nil)
	st, ok := hs.agent.Latest()
	if !ok {
		t.Fatal("no state published")
	}
	// Intervals at 0; at WatchEvery (or Interval, if sooner), as no tenant
	// had rates at the first (they take two readings); then one per
	// Interval up to 10 × Interval.
	// The probe gaps of an interval are slept on the clock too, so the
	// last one ends a little after.
	if got := hs.clock.Now().Sub(start); got < 10*cfg.Interval || got >= 11*cfg.Interval {
		t.Errorf("clock moved %s, want %s and a last interval's probe gaps", got, 10*cfg.Interval)
	}
	if got, want := st.Time.Sub(start), min(hs.agent.WatchEvery(), cfg.Interval)+9*cfg.Interval; got != want {
		t.Errorf("last state at %s, want %s", got, want)
	}
	if hs.agent.steps != 11 {
		t.Errorf("%d intervals in 10 × Interval, want 11", hs.agent.steps)
	}
}

// A proof's readings are taken when each is due, between intervals, as
// Run's proof timer takes them: a proof of a few tens of slots ends well
// within an interval of a second.
func TestVirtualLoopTakesProofReadingsWhenDue(t *testing.T) {
	_, cfg, hs := newThrottledHarness(t)
	defer hs.stop(t)
	var proved, throttled time.Time
	hs.mu.Lock()
	for _, r := range hs.actions {
		switch {
		case r.Name != "polluter":
		case r.Kind == api.KindProof && proved.IsZero():
			proved = r.Time
		case r.Kind == api.KindThrottle:
			throttled = r.Time
		}
	}
	hs.mu.Unlock()
	if took := throttled.Sub(proved); proved.IsZero() || took >= cfg.Interval {
		t.Errorf("the proof took %s (from %s), want under an interval (%s)", took, proved, cfg.Interval)
	}
}

// At start no tenant has rates (they take two readings), so the second
// interval comes at the watch's pace instead of a whole interval later:
// a polluter already running is judged within a fraction of a second. The
// third comes an interval after the second.
func TestVirtualLoopJudgesSoonAtStart(t *testing.T) {
	_, cfg, hs := newQuietHarness(t, time.Second)
	defer hs.stop(t)
	start := hs.clock.Now()
	quick := hs.agent.WatchEvery()
	if quick >= cfg.Interval {
		t.Fatalf("watch every %s: the test needs it under the interval %s", quick, cfg.Interval)
	}
	hs.advance(t, quick, nil)
	if hs.agent.steps != 2 {
		t.Fatalf("%d intervals by %s after start, want 2 (the first, and one at the watch's pace)", hs.agent.steps, quick)
	}
	st, _ := hs.agent.Latest()
	if got := st.Time.Sub(start); got != quick {
		t.Errorf("second interval at %s, want %s", got, quick)
	}
	// (The clock runs on through each interval's probe gaps.)
	hs.advance(t, start.Add(quick+cfg.Interval-20*time.Millisecond).Sub(hs.clock.Now()), nil)
	if hs.agent.steps != 2 {
		t.Errorf("%d intervals before %s, want 2: tenants have rates now, the interval is back", hs.agent.steps, quick+cfg.Interval)
	}
	hs.advance(t, start.Add(quick+cfg.Interval).Sub(hs.clock.Now()), nil)
	if hs.agent.steps != 3 {
		t.Errorf("%d intervals at %s, want 3", hs.agent.steps, quick+cfg.Interval)
	}
}

// An interval whose DRAM reading gives the first sign of contention has
// the next one confirm it confirmAfter later, and the proof starts then; a
// first sign in the LLC walk alone is confirmed at the watch's pace.
func TestVirtualLoopConfirmsADRAMSignSoon(t *testing.T) {
	for _, tc := range []struct {
		name string
		dram bool // the polluter's DRAM contention; else the LLC walk's noise
		want func(a *Agent) time.Duration
	}{
		{"DRAM", true, func(*Agent) time.Duration { return confirmAfter }},
		{"LLC alone", false, func(a *Agent) time.Duration { return a.quickAfter() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, cfg, hs := newQuietHarness(t, time.Second)
			defer hs.stop(t)
			w.mu.Lock()
			w.llc = true
			w.mu.Unlock()
			if tc.want(hs.agent) >= hs.agent.WatchEvery() && tc.dram {
				t.Fatalf("confirmAfter %s is not sooner than the watch (%s)", confirmAfter, hs.agent.WatchEvery())
			}
			hs.advance(t, 5*cfg.Interval, nil) // quiet baselines
			// The contention begins just before an interval, which sees
			// it before any watch does.
			at := hs.next
			hs.advance(t, at.Sub(hs.clock.Now())-time.Millisecond, nil)
			if tc.dram {
				w.setRunning(true)
			} else {
				w.mu.Lock()
				w.llcNoise = true
				w.mu.Unlock()
			}
			steps := hs.agent.steps
			hs.advance(t, time.Millisecond, nil)
			if hs.agent.steps != steps+1 {
				t.Fatalf("%d intervals ran at %s, want 1", hs.agent.steps-steps, at)
			}
			if got, want := hs.next.Sub(at), tc.want(hs.agent); got != want {
				t.Errorf("after the first sign the next interval is due %s later, want %s; actions:\n%s", got, want, &hs.actionLog)
			}
			if tc.dram {
				took := hs.until(t, "proof", cfg.Interval, func() bool { return hs.has(api.KindProof, "polluter") })
				if took > confirmAfter+50*time.Millisecond {
					t.Errorf("the polluter was proved %s after the first sign, want about %s", took, confirmAfter)
				}
			}
		})
	}
}

// newQuietHarness is an agent on virtual time sampling every interval in
// a world whose polluter does not run (yet).
func newQuietHarness(t *testing.T, interval time.Duration) (*world, Config, *harness) {
	t.Helper()
	w := newWorld(t)
	w.setRunning(false)
	cfg := testConfig(t.TempDir())
	cfg.Interval = interval
	return w, cfg, newVirtualHarness(t, w, cfg, nil)
}

// A throttled polluter that stops is released between intervals, at the
// watch's pace: two looks in a row that find it idle, well under the
// interval (whose own rule needs two idle intervals, the first of them
// wholly after the stop). One still running at its duty is not.
func TestVirtualLoopReleasesAStoppedPolluterBetweenIntervals(t *testing.T) {
	w, cfg, hs := newThrottledHarness(t)
	defer hs.stop(t)
	// Past the grace after a throttle begins, still running at its duty.
	hs.advance(t, hs.agent.throttles.idleGrace()+cfg.Interval, nil)
	if hs.has(api.KindRelease, "polluter") || w.quota("polluter").Unlimited() {
		t.Fatalf("released while it ran at its duty:\n%s", hs.log)
	}
	w.setRunning(false)
	took := hs.until(t, "release", 5*time.Second, func() bool { return hs.has(api.KindRelease, "polluter") })
	look := hs.agent.WatchEvery()
	if took > (stoppedLooks+1)*look || took >= cfg.Interval {
		t.Errorf("released %s after it stopped, want within %d looks of %s (and under the interval %s):\n%s", took, stoppedLooks+1, look, cfg.Interval, hs.log)
	}
	if !w.quota("polluter").Unlimited() {
		t.Error("its quota is still set after the release")
	}
	hs.mu.Lock()
	last := hs.actions[len(hs.actions)-1]
	hs.mu.Unlock()
	if last.Kind != api.KindRelease || !strings.Contains(last.Reason, "it stopped") {
		t.Errorf("last action %s (%s), want a release because it stopped", last.Kind, last.Reason)
	}

	// Back, it is throttled again on its record; stopped again a proof's
	// period after that (the interval's rule would still wait a second
	// and two intervals), it is released at the watch's pace again.
	throttles := hs.count(api.KindThrottle, "polluter")
	w.setRunning(true)
	hs.until(t, "throttle again", 5*time.Second, func() bool { return hs.count(api.KindThrottle, "polluter") > throttles })
	hs.advance(t, proofPeriod+look, nil)
	releases := hs.count(api.KindRelease, "polluter")
	w.setRunning(false)
	took = hs.until(t, "second release", 5*time.Second, func() bool { return hs.count(api.KindRelease, "polluter") > releases })
	if took > (stoppedLooks+1)*look {
		t.Errorf("released %s after it stopped a second time, want within %d looks of %s:\n%s", took, stoppedLooks+1, look, hs.log)
	}
}

// A polluter held on the deep floor runs its quota once a long period
// (1 ms in 128 ms), and on a busy host not always in each (here one
// period in three): looks a quarter interval long (125 ms here) may fall
// between its runs twice in a row. Over a window that holds no whole period its threads must say it
// stopped: it stays held while it runs, and is released soon after it
// stops.
func TestVirtualLoopKeepsADeepFloorPolluterThatRunsOnceAPeriod(t *testing.T) {
	w := newWorld(t)
	w.periodic, w.runEvery = true, 3
	holdsOnTheDeepFloorTillItStops(t, w, "released while it ran its quota, one period in three", func(hs *harness, _ Config, period time.Duration) string {
		if look := hs.agent.WatchEvery(); look >= judge.DeepPeriods*period {
			return fmt.Sprintf("a look (%s) spans a whole deep-floor period", look)
		}
		return ""
	})
}

// holdsOnTheDeepFloorTillItStops runs an agent (500 ms intervals) on w
// until it holds the polluter on the deep floor, checks that the world
// tests something (meaningful returns why not, or ""), and that the
// polluter stays held for 10 s while it runs (else failing with held)
// and is released within a second of its stop.
func holdsOnTheDeepFloorTillItStops(t *testing.T, w *world, held string, meaningful func(hs *harness, cfg Config, period time.Duration) string) {
	t.Helper()
	cfg := testConfig(t.TempDir())
	cfg.Interval = 500 * time.Millisecond
	hs := newVirtualHarness(t, w, cfg, nil)
	defer hs.stop(t)
	hs.until(t, "throttle", 20*time.Second, func() bool { return hs.has(api.KindThrottle, "polluter") })
	period := hs.agent.throttles.sp.Period
	if q := w.quota("polluter"); q.Period != judge.DeepPeriods*period {
		t.Fatalf("polluter held at %s, want the deep floor", q)
	}
	if why := meaningful(hs, cfg, period); why != "" {
		t.Fatalf("%s: this would test nothing", why)
	}
	hs.advance(t, 10*time.Second, nil)
	if hs.has(api.KindRelease, "polluter") || w.quota("polluter").Unlimited() {
		t.Fatalf("%s:\n%s", held, hs.log)
	}
	// Stopped, it is still released within a second.
	w.setRunning(false)
	took := hs.until(t, "release", 5*time.Second, func() bool { return hs.has(api.KindRelease, "polluter") })
	if took > time.Second {
		t.Errorf("released %s after it stopped, want within a second:\n%s", took, hs.log)
	}
}

// A run that overruns its quota (a vCPU the host stalled mid-run is
// charged the stall) leaves the tenant throttled, using no CPU, until the
// periods' quota pays it off: on the dev VM a stress-ng --lockbus held to
// 1 ms in 128 ms ran 13 ms at once, then nothing for 1.6 s, throttled in
// every period, and was released as stopped while it ran. Counted
// throttled, it is held; stopped, its threads say so while its group
// still pays the last run off, and it is released within a second.
func TestVirtualLoopKeepsAPolluterPayingOffAnOverrun(t *testing.T) {
	w := newWorld(t)
	w.overrun = 13
	holdsOnTheDeepFloorTillItStops(t, w, "released while it paid off its overruns", func(_ *harness, cfg Config, period time.Duration) string {
		if gap := time.Duration(w.overrun) * judge.DeepPeriods * period; gap < 2*cfg.Interval {
			return fmt.Sprintf("its runs come %s apart, under two intervals", gap)
		}
		return ""
	})
}

// In the first second of its throttle, a polluter that stopped is told
// from one waiting out the proof's CFS period by its threads: none
// runnable, it is released at the watch's pace; runnable, it is held,
// though its CPU counters read idle. Without its threads' states that
// second never reads idle.
func TestVirtualLoopTellsAStoppedPolluterInTheFirstSecond(t *testing.T) {
	for _, tc := range []struct {
		name     string
		stall    bool // it runs, waiting out the period; else it stopped
		runnable bool // the agent reads its threads' states
		release  time.Duration
	}{
		{"stopped", false, true, 0},
		{"waiting out the period", true, true, -1},
		{"stopped, threads unread", false, false, proofPeriod},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tweak []func(*Deps)
			if !tc.runnable {
				tweak = append(tweak, func(d *Deps) { d.Runnable = nil })
			}
			w, cfg, hs := newThrottledHarness(t, tweak...)
			defer hs.stop(t)
			look := hs.agent.WatchEvery()
			w.mu.Lock()
			if tc.stall {
				w.stalled = true
			} else {
				w.running = false
			}
			w.mu.Unlock()
			if tc.release < 0 {
				hs.advance(t, proofPeriod-look, nil)
				if hs.has(api.KindRelease, "polluter") {
					t.Fatalf("released while it waited out the proof's period, its thread runnable:\n%s", hs.log)
				}
				return
			}
			took := hs.until(t, "release", 5*time.Second, func() bool { return hs.has(api.KindRelease, "polluter") })
			if took < tc.release || took > tc.release+(stoppedLooks+1)*look || tc.runnable && took >= cfg.Interval {
				t.Errorf("released %s after it stopped, want within %d looks of %s after %s:\n%s", took, stoppedLooks+1, look, tc.release, hs.log)
			}
		})
	}
}

// newThrottledHarness is an agent on virtual time, sampling every second,
// run until it has proved and throttled the world's polluter; tweak
// changes its parts.
func newThrottledHarness(t *testing.T, tweak ...func(*Deps)) (*world, Config, *harness) {
	t.Helper()
	w := newWorld(t)
	cfg := testConfig(t.TempDir())
	cfg.Interval = time.Second
	hs := newVirtualHarnessWith(t, w, cfg, nil, tweak...)
	hs.until(t, "throttle", 20*time.Second, func() bool { return hs.has(api.KindThrottle, "polluter") })
	return w, cfg, hs
}

// While no tenant uses the CPU, the probe runs one interval in four (the
// state keeps showing its last readings); a tenant that turns busy is
// probed in the interval that first sees it busy.
func TestVirtualLoopProbeRestsWhileNoTenantIsBusy(t *testing.T) {
	w := newWorld(t)
	w.setRunning(false)
	w.mu.Lock()
	w.idle = true
	w.mu.Unlock()
	cfg := testConfig(t.TempDir())
	cfg.Interval = time.Second
	hs := newVirtualHarness(t, w, cfg, nil)
	defer hs.stop(t)
	probed := func() int { w.mu.Lock(); defer w.mu.Unlock(); return w.probed }
	hs.advance(t, 2*cfg.Interval, nil) // the first intervals, before rates
	before, steps := probed(), hs.agent.steps
	hs.advance(t, 12*cfg.Interval, nil)
	intervals := hs.agent.steps - steps
	if got, most := probed()-before, (intervals/4+1)*2; got > most || got == 0 {
		t.Errorf("%d probe measurements in %d idle intervals, want 1..%d (one interval in 4, 2 CPUs)", got, intervals, most)
	}
	if st, _ := hs.agent.Latest(); len(st.Probes) == 0 {
		t.Error("the state shows no probe readings while the probe rests")
	}
	// Busy again: the next interval probes.
	w.mu.Lock()
	w.idle = false
	w.mu.Unlock()
	w.setRunning(true)
	before, steps = probed(), hs.agent.steps
	hs.until(t, "an interval", 3*time.Second, func() bool { return hs.agent.steps > steps })
	if probed() == before {
		t.Error("the interval that found tenants busy did not probe")
	}
	hs.until(t, "throttle", 10*time.Second, func() bool { return hs.has(api.KindThrottle, "polluter") })
}

// capsOnDisk counts the state file's saves and, at each, how many of the
// world's tenants hold a quota in their cgroup files.
type capsOnDisk struct {
	w     *world
	saves []int // capped tenants at each save, before it is written
}

func watchSaves(hs *harness) *capsOnDisk {
	c := &capsOnDisk{w: hs.w}
	hs.state.SetSaveHook(func(saved bool) error {
		if !saved {
			n := 0
			for _, name := range []string{"victim", "polluter", "bystander"} {
				if !c.w.quota(name).Unlimited() {
					n++
				}
			}
			c.saves = append(c.saves, n)
		}
		return nil
	})
	return c
}

// The start-up survey caps every busy tenant with one state save before
// the first cap, not one per tenant between caps, and frees them with no
// save at all: each save is an fsync, milliseconds on a busy host's disk,
// that every tenant capped before it would wait out. The entries are
// dropped from disk after the survey, once.
func TestSurveySavesTheStateOnceARound(t *testing.T) {
	w := newWorld(t)
	w.setRunning(false) // no proof between the rounds: one flush each
	cfg := testConfig(t.TempDir())
	cfg.Interval = time.Second
	hs := newVirtualHarness(t, w, cfg, nil)
	defer hs.stop(t)
	hs.agent.sensor.survey = surveyRounds
	disk := watchSaves(hs)
	hs.until(t, "the survey", 10*time.Second, func() bool { return hs.agent.sensor.survey == 0 })
	surveyed := 0
	for _, r := range hs.actions {
		if strings.HasPrefix(r.Reason, "start-up survey: capped") {
			surveyed++
		}
	}
	if surveyed != 2*surveyRounds {
		t.Fatalf("%d survey caps, want the 2 busy tenants (the polluter idles) in each of %d rounds:\n%s", surveyed, surveyRounds, hs.log)
	}
	// Each round: the intents, saved with nobody capped yet; then the
	// flush of the releases, with nobody capped any more.
	if want := []int{0, 0, 0, 0}; !slices.Equal(disk.saves, want) {
		t.Errorf("saves (tenants capped at each) = %v, want %v", disk.saves, want)
	}
	if st, _ := act.OpenState(StatePath(cfg.StateDir)); len(st.Entries()) != 0 {
		t.Errorf("entries left on disk after the survey: %+v", st.Entries())
	}
}

// A proof caps and frees its suspect trial after trial with one state
// save, before its first cap; the conviction's throttle saves its own.
func TestProofSavesTheStateOnce(t *testing.T) {
	w := newWorld(t)
	cfg := testConfig(t.TempDir())
	cfg.Interval = time.Second
	hs := newVirtualHarness(t, w, cfg, nil)
	defer hs.stop(t)
	proving := 0
	hs.state.SetSaveHook(func(saved bool) error {
		if !saved && hs.agent.prover.proof != nil {
			proving++
		}
		return nil
	})
	hs.until(t, "throttle", 20*time.Second, func() bool { return hs.has(api.KindThrottle, "polluter") })
	caps := 0
	for _, r := range hs.actions {
		if r.Reason == "proof: capped for a trial" {
			caps++
		}
	}
	proofs := 0
	for _, r := range hs.actions {
		if strings.HasPrefix(r.Reason, "proving it") {
			proofs++
		}
	}
	if caps < 2 {
		t.Fatalf("%d capped trials: the test needs a proof of several:\n%s", caps, hs.log)
	}
	if proving != proofs {
		t.Errorf("%d state saves during %d proof(s) of %d capped trials, want one a proof:\n%s", proving, proofs, caps, hs.log)
	}
}

// blindWatchProbe is the world's probe whose watch readings miss the
// storm: on a VM a split-lock storm comes in bursts that a look's two
// cheap readings can miss, where an interval's spread does not.
type blindWatchProbe struct{ fakeProbe }

func (blindWatchProbe) MeasureQuick(domain, cpu int, kind string) ([]sense.ProbeReading, error) {
	return []sense.ProbeReading{{Domain: domain, CPU: cpu, Kind: sense.ProbeDRAM, Ns: 300}}, nil
}

// A proof that ends without a conviction brings the next interval forward
// to within a watch: the contention is still there, and the next suspect
// is chosen by an interval. Here the bystander and the victim, busier than
// the polluter, are proved first and acquitted, and the watch misses the
// storm; the polluter's proof begins within a watch of the last
// acquittal, not an interval later.
func TestVirtualLoopProvesTheNextSuspectSoonAfterAnAcquittal(t *testing.T) {
	w := newWorld(t)
	w.rates = map[string]float64{"bystander": 0.9, "polluter": 0.3}
	cfg := testConfig(t.TempDir())
	cfg.Interval = time.Second
	hs := newVirtualHarnessWith(t, w, cfg, nil, func(d *Deps) { d.Probe = blindWatchProbe{fakeProbe{w}} })
	defer hs.stop(t)
	hs.until(t, "throttle", 20*time.Second, func() bool { return hs.has(api.KindThrottle, "polluter") })
	var acquitted, proved time.Time
	hs.mu.Lock()
	for _, r := range hs.actions {
		switch {
		case r.Name != "polluter" && r.Kind == api.KindRelease && proved.IsZero():
			acquitted = r.Time
		case r.Name == "polluter" && r.Kind == api.KindProof && proved.IsZero():
			proved = r.Time
		}
	}
	hs.mu.Unlock()
	if acquitted.IsZero() || !proved.After(acquitted) {
		t.Fatalf("no innocent was proved and acquitted before the polluter's proof:\n%s", hs.log)
	}
	if gap := proved.Sub(acquitted); gap > hs.agent.WatchEvery()+50*time.Millisecond {
		t.Errorf("the polluter's proof began %s after the last acquittal, want within a watch (%s):\n%s", gap, hs.agent.WatchEvery(), hs.log)
	}
}
