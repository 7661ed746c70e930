package agent

import (
	"context"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
)

// cancellableQuota is a quota actuator that, as one that calls a daemon
// does, refuses every call made under an ended context; it writes through
// the world's cgroup files otherwise.
type cancellableQuota struct{ files *act.CPUQuota }

func (q cancellableQuota) Apply(ctx context.Context, cgroupPath, tenant string, v cgroup.Quota) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return q.files.Apply(ctx, cgroupPath, tenant, v)
}

func (q cancellableQuota) Restore(ctx context.Context, cgroupPath string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return q.files.Restore(ctx, cgroupPath)
}

func (q cancellableQuota) RestoreAll(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return q.files.RestoreAll(ctx)
}

// cancellableWorld is the test world with its quota written through a
// cancellableQuota over the files, and the state file the agent keeps.
func cancellableWorld(t *testing.T) (*world, Config, *act.StateFile, cancellableQuota) {
	t.Helper()
	w := newWorld(t)
	cfg := testConfig(t.TempDir())
	st, err := act.OpenState(StatePath(cfg.StateDir))
	if err != nil {
		t.Fatal(err)
	}
	return w, cfg, st, cancellableQuota{files: &act.CPUQuota{Host: w.h, Layout: w.layout, State: st}}
}

// Stopping under an ended context (Run's, by the time it stops) still
// lifts every throttle: the releases do not inherit its cancellation.
func TestAgentStopReleasesUnderAnEndedContext(t *testing.T) {
	w, cfg, st, q := cancellableWorld(t)
	hs := newVirtualHarness(t, w, cfg, q)
	hs.until(t, "throttle", 5*time.Second, func() bool { return hs.has(api.KindThrottle, "polluter") })
	if w.quota("polluter").Unlimited() {
		t.Fatal("polluter throttled on record but its quota is unlimited")
	}
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	hs.agent.Stop(ended)
	if got := w.quota("polluter"); !got.Unlimited() {
		t.Errorf("polluter left at %v after a stop under an ended context, want unlimited", got)
	}
	if !hs.has(api.KindRelease, "polluter") {
		t.Error("no release of the polluter on record")
	}
	if n := len(st.Entries()); n != 0 {
		t.Errorf("%d quota entries left in the state file, want none", n)
	}
}

// Run's end goes the same way: cancelling its context stops the loop and
// the throttles it put on come off.
func TestAgentRunReleasesAfterItsContextEnds(t *testing.T) {
	w, cfg, _, q := cancellableWorld(t)
	hs := newHarness(t, w, cfg, q)
	stop := hs.run(t)
	hs.waitFor(t, "throttle", 10*time.Second, func() bool { return hs.has(api.KindThrottle, "polluter") })
	stop()
	if got := w.quota("polluter"); !got.Unlimited() {
		t.Errorf("polluter left at %v after Run's context ended, want unlimited", got)
	}
}
