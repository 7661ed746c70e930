package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
)

// A polluter released because it stopped, that comes back while the
// contention does, is throttled again on its record at once, without a new
// proof; its controller then verifies the throttle helps.
func TestAgentRethrottlesAReturningPolluter(t *testing.T) {
	w := newWorld(t)
	hs := newVirtualHarness(t, w, testConfig(t.TempDir()), nil)
	defer hs.stop(t)
	hs.until(t, "throttle", 5*time.Second, func() bool { return hs.has("throttle", "polluter") })
	w.setRunning(false)
	hs.until(t, "release", 5*time.Second, func() bool {
		return hs.has(api.KindRelease, "polluter") && w.quota("polluter").Unlimited()
	})
	st, _ := hs.agent.Latest()
	proofs := st.ProofsTotal["polluter"] + st.ProofsTotal["innocent"] + st.ProofsTotal["inconclusive"]
	w.setRunning(true)
	hs.until(t, "second throttle", 3*time.Second, func() bool { return hs.count("throttle", "polluter") >= 2 })
	st, _ = hs.agent.Latest()
	if n := st.ProofsTotal["polluter"] + st.ProofsTotal["innocent"] + st.ProofsTotal["inconclusive"]; n != proofs {
		t.Errorf("proofs went from %d to %d: the returning polluter was proved again", proofs, n)
	}
	if q := w.quota("polluter"); q.Unlimited() || q.CPUs() > 0.2 {
		t.Errorf("polluter quota after the second throttle = %v", q)
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	last := ""
	for _, a := range hs.actions {
		if a.Kind == "throttle" && a.Name == "polluter" {
			last = a.Reason
		}
	}
	if !strings.Contains(last, "busy again") || !strings.Contains(last, "proven polluter") {
		t.Errorf("second throttle's reason %q should say it is on its record", last)
	}
}

// A polluter that stops and comes back again and again (bursts) is
// released when it stops and held again when it returns, until it has come
// back lingerReturns times; from then on its stops are held a while, so
// no burst runs free, and it is released only once it stays away twice as
// long as it ever did.
func TestAgentHoldsAPolluterThatKeepsComingBack(t *testing.T) {
	w := newWorld(t)
	cfg := testConfig(t.TempDir())
	cfg.Interval = 250 * time.Millisecond
	hs := newVirtualHarness(t, w, cfg, nil)
	defer hs.stop(t)
	hs.until(t, "throttle", 10*time.Second, func() bool { return hs.has(api.KindThrottle, "polluter") })
	const away, back = 500 * time.Millisecond, 400 * time.Millisecond
	for burst := 1; burst <= 6; burst++ {
		w.setRunning(false)
		hs.advance(t, away, nil)
		w.setRunning(true)
		free := false
		for range back / (25 * time.Millisecond) {
			hs.advance(t, 25*time.Millisecond, nil)
			free = free || w.quota("polluter").Unlimited()
		}
		if burst <= lingerReturns && !free {
			t.Fatalf("burst %d: held throughout before it came back %d times: this would test nothing\n%s", burst, lingerReturns, hs.log)
		}
		if burst > lingerReturns && free {
			t.Errorf("burst %d ran free after it had come back %d times:\n%s", burst, lingerReturns, hs.log)
		}
	}
	w.setRunning(false)
	took := hs.until(t, "release", 10*time.Second, func() bool { return w.quota("polluter").Unlimited() })
	if took < lingerFor(away) || took > lingerFor(away)+time.Second {
		t.Errorf("released %s after it stopped for good, want %s to %s (twice the longest it stayed away, at least 1 s):\n%s",
			took, lingerFor(away), lingerFor(away)+time.Second, hs.log)
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if last := hs.actions[len(hs.actions)-1]; last.Kind != api.KindRelease || !strings.Contains(last.Reason, "stayed away") {
		t.Errorf("last action %s (%s), want a release that says how long it stayed away", last.Kind, last.Reason)
	}
}

// A polluter convicted on the DRAM probe is held to what the DRAM probe
// reads: the LLC walk reading ten times its quiet level from something
// no tenant here does (the physical host's other tenants) neither makes
// its throttle look useless nor releases it.
func TestAgentThrottleAnswersToItsProofsKind(t *testing.T) {
	w := newWorld(t)
	w.llc = true
	hs := newVirtualHarness(t, w, testConfig(t.TempDir()), nil)
	hs.until(t, "throttle", 5*time.Second, func() bool { return hs.has("throttle", "polluter") })
	w.mu.Lock()
	w.llcNoise = true
	w.mu.Unlock()
	hs.advance(t, 4*time.Second, nil)
	if q := w.quota("polluter"); q.Unlimited() || q.CPUs() > 0.2 {
		t.Errorf("polluter at %v after 4 s of LLC noise, want still throttled", q)
	}
	hs.stop(t)
	if n := hs.count("release", "polluter"); n > 1 { // the one at stop
		t.Errorf("polluter released %d times while the DRAM probe it was convicted on stayed quiet: %+v", n, hs.actions)
	}
}

// A polluter that starts just after an interval is caught by the watch
// between intervals: its proof starts within two watches, not after the
// next interval and its confirmation.
func TestAgentWatchCatchesAPolluterBetweenIntervals(t *testing.T) {
	w, _, hs := newQuietHarness(t, time.Second)
	defer hs.stop(t)
	// Quiet intervals at 0, 1, 2 and 3 s: the clock stops just after the
	// last one.
	hs.advance(t, 3*time.Second, nil)
	if hs.has(api.KindProof, "polluter") {
		t.Fatal("a proof before the polluter started")
	}
	w.setRunning(true)
	took := hs.until(t, "proof of the polluter", 5*time.Second, func() bool { return hs.has(api.KindProof, "polluter") })
	if limit := 2*hs.agent.WatchEvery() + 100*time.Millisecond; took > limit {
		t.Errorf("the proof started %s after the polluter, want within %s (two watches)", took, limit)
	}
}

// unavailableOnce refuses the first duty-cycle throttle as libvirt does
// when it does not answer (act.ErrUnavailable); everything else goes
// through.
type unavailableOnce struct {
	QuotaActuator
	mu     sync.Mutex
	failed bool
}

func (u *unavailableOnce) Apply(ctx context.Context, id, cg string, q cgroup.Quota) error {
	u.mu.Lock()
	fail := !u.failed && q.Period != act.ProofPeriod // a throttle, not a proof's cap
	u.failed = u.failed || fail
	u.mu.Unlock()
	if fail {
		return fmt.Errorf("throttle %s: %w", id, act.ErrUnavailable)
	}
	return u.QuotaActuator.Apply(ctx, id, cg, q)
}

// A polluter proven while its actuator does not answer is neither left
// under its proof's cap nor let go: it is throttled on its conviction once
// the actuator answers, with no second proof.
func TestAgentConvictionOutlivesAnUnavailableActuator(t *testing.T) {
	w := newWorld(t)
	st, err := act.OpenState(filepath.Join(t.TempDir(), "inner-state.json"))
	if err != nil {
		t.Fatal(err)
	}
	u := &unavailableOnce{QuotaActuator: &act.CPUQuota{Host: w.h, Layout: w.layout, State: st}}
	hs := newVirtualHarness(t, w, testConfig(t.TempDir()), u)
	hs.until(t, "throttle refused once", 5*time.Second, func() bool { u.mu.Lock(); defer u.mu.Unlock(); return u.failed })
	if q := w.quota("polluter"); !q.Unlimited() && q.Period == act.ProofPeriod {
		t.Errorf("polluter left under its proof's cap (%v) after its throttle was refused", q)
	}
	hs.until(t, "throttle", 5*time.Second, func() bool { return hs.has("throttle", "polluter") })
	hs.stop(t)
	proofs := 0
	for _, a := range hs.actions {
		if a.Name == "polluter" && a.Kind == "proof" && strings.HasPrefix(a.Reason, "proving it") {
			proofs++
		}
	}
	if proofs != 1 {
		t.Errorf("%d proofs of the polluter, want 1 (its conviction stands)", proofs)
	}
	var reason string
	for _, a := range hs.actions {
		if a.Name == "polluter" && a.Kind == "throttle" {
			reason = a.Reason
		}
	}
	if !strings.Contains(reason, "convicted before") {
		t.Errorf("throttle reason %q, want it on its record", reason)
	}
}
