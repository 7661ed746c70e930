package agent

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/sense"
)

func (hs *harness) reload(t *testing.T, cfg Config) (ConfigChange, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return hs.agent.Reload(ctx, cfg)
}

// A reload that changes thresholds, the proof and the interval keeps the
// polluter's throttle: nothing is released, and the new values are in
// effect. (On virtual time the test is the loop: it reconfigures between
// passes, as Run does for Reload.)
func TestReloadKeepsAThrottle(t *testing.T) {
	w := newWorld(t)
	cfg := testConfig(t.TempDir())
	hs := newVirtualHarness(t, w, cfg, nil)
	hs.until(t, "throttle", 5*time.Second, func() bool { return hs.has("throttle", "polluter") })
	releases := hs.count("release", "polluter")

	next := cfg
	next.Interval = 60 * time.Millisecond
	next.Judge.Ratio = 1.6
	next.Proof.Trials = cfg.Proof.Trials + 2
	next.LogLevel = "debug"
	next.CPI.Ratio, next.CPI.Prove = 1.4, ptrTo(false)
	change, err := hs.agent.Reconfigure(t.Context(), next)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"interval", "judge.ratio", "proof.trials", "log_level", "cpi.ratio", "cpi.prove"} {
		if !slices.Contains(change.Applied, k) {
			t.Errorf("applied %v lacks %s", change.Applied, k)
		}
	}
	if len(change.Restart) != 0 || len(change.Released) != 0 {
		t.Errorf("change %+v: nothing needs a restart and nobody is released", change)
	}
	// A few intervals on the new configuration, at the new interval: two
	// states in a row are one apart.
	var times []time.Time
	hs.advance(t, 5*next.Interval, func() bool {
		if st, _ := hs.agent.Latest(); len(times) == 0 || st.Time.After(times[len(times)-1]) {
			times = append(times, st.Time)
		}
		return false
	})
	if n := len(times); n < 4 || times[n-1].Sub(times[n-2]) != next.Interval {
		t.Errorf("states at %v after the reload, want %s apart", times, next.Interval)
	}
	if q := w.quota("polluter"); q.Unlimited() || q.CPUs() > 0.2 {
		t.Errorf("polluter quota after the reload = %v", q)
	}
	if n := hs.count("release", "polluter"); n != releases {
		t.Errorf("the reload released the polluter (%d releases, were %d)", n, releases)
	}
	hs.stop(t)
	if got := hs.agent.cont.Thresholds().Ratio; got != 1.6 {
		t.Errorf("judge ratio in use %v, want 1.6", got)
	}
	if got := hs.agent.cpi.cpi.Thresholds().Ratio; got != 1.4 || hs.agent.cpi.prove {
		t.Errorf("CPI ratio in use %v, proving %v; want 1.4, not proving", got, hs.agent.cpi.prove)
	}
	if hs.agent.cfg.Interval != 60*time.Millisecond || hs.agent.cfg.Proof.Trials != next.Proof.Trials {
		t.Errorf("config in use: interval %s, trials %d", hs.agent.cfg.Interval, hs.agent.cfg.Proof.Trials)
	}
	b, _ := os.ReadFile(hs.journal)
	if !strings.Contains(string(b), `"kind":"reload"`) || !strings.Contains(string(b), "judge.ratio") {
		t.Errorf("journal lacks the reload:\n%s", b)
	}
}

// A tenant the reloaded configuration protects is released at once, and
// stays free while it keeps polluting.
func TestReloadProtectReleases(t *testing.T) {
	w := newWorld(t)
	cfg := testConfig(t.TempDir())
	hs := newHarness(t, w, cfg, nil)
	stop := hs.run(t)
	defer stop()
	hs.waitFor(t, "a throttle", 5*time.Second, func() bool { return hs.has("throttle", "polluter") })

	next := cfg
	next.Protect = []string{"/lab/poll*"}
	change, err := hs.reload(t, next)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(change.Released, []string{"polluter"}) || !slices.Contains(change.Applied, "protect") {
		t.Errorf("change %+v: the polluter should be released, protect applied", change)
	}
	if q := w.quota("polluter"); !q.Unlimited() {
		t.Errorf("polluter still held at %v when the reload returned", q)
	}
	throttles, proofs := hs.count("throttle", "polluter"), hs.count("proof", "polluter")
	time.Sleep(500 * time.Millisecond)
	if q := w.quota("polluter"); !q.Unlimited() || hs.count("throttle", "polluter") != throttles || hs.count("proof", "polluter") != proofs {
		t.Errorf("protected polluter touched again: quota %v", q)
	}
	if len(hs.state.Entries()) != 0 {
		t.Errorf("state still records %+v", hs.state.Entries())
	}
}

// An invalid configuration changes nothing; one that changes what only a
// restart applies keeps the running values and says which.
func TestReloadRefusesAndDefers(t *testing.T) {
	w := newWorld(t)
	cfg := testConfig(t.TempDir())
	hs := newHarness(t, w, cfg, nil)
	a := hs.agent
	for name, bad := range map[string]func(c *Config){
		"thresholds":        func(c *Config) { c.Judge.Ratio, c.Judge.Tolerance = 0.5, 0.4 },
		"steps":             func(c *Config) { c.Throttle.Steps = 1 },
		"glob":              func(c *Config) { c.Protect = []string{"[bad"} },
		"log level":         func(c *Config) { c.LogLevel = "loud" },
		"with what is kept": func(c *Config) { c.Interval = time.Minute }, // kubernetes timings need 10 intervals
	} {
		next := cfg
		next.Protect = nil
		bad(&next)
		if _, err := a.Reconfigure(t.Context(), next); err == nil {
			t.Errorf("%s: invalid configuration accepted", name)
		}
		if a.cfg.Judge.Ratio != cfg.Judge.Ratio || a.cfg.Interval != cfg.Interval || a.throttles.sp.Steps != cfg.Sparsify().Steps || a.cfg.LogLevel != "info" {
			t.Fatalf("%s: a refused configuration changed the running one: %+v", name, a.cfg)
		}
	}

	next := cfg
	next.Listen = "127.0.0.1:9999"
	next.StateDir = "/elsewhere"
	next.Throttle.Steps = 8
	next.MaxThrottled = 3
	change, err := a.Reconfigure(t.Context(), next)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"listen", "state_dir", "throttle.steps"}; !slices.Equal(change.Restart, want) {
		t.Errorf("restart %v, want %v", change.Restart, want)
	}
	if !slices.Equal(change.Applied, []string{"max_throttled"}) {
		t.Errorf("applied %v, want [max_throttled]", change.Applied)
	}
	if a.cfg.Listen != cfg.Listen || a.cfg.StateDir != cfg.StateDir || a.throttles.sp.Steps != 16 || a.cfg.MaxThrottled != 3 {
		t.Errorf("running config: listen %s, state_dir %s, steps %d, max_throttled %d", a.cfg.Listen, a.cfg.StateDir, a.throttles.sp.Steps, a.cfg.MaxThrottled)
	}
	if s := change.String(); !strings.Contains(s, "applied: max_throttled") || !strings.Contains(s, "listen, state_dir, throttle.steps") {
		t.Errorf("change says %q", s)
	}
}

func TestChangedKeys(t *testing.T) {
	base := Defaults()
	for _, tc := range []struct {
		name   string
		change func(c *Config)
		want   []string
	}{
		{"nothing", func(*Config) {}, nil},
		{"an empty list is an absent one", func(c *Config) { c.Protect = []string{} }, nil},
		{"top level", func(c *Config) { c.Interval = time.Second }, []string{"interval"}},
		{"nested", func(c *Config) { c.Throttle.Hold = time.Second }, []string{"throttle.hold"}},
		{"inline", func(c *Config) { c.Proof.Alpha = 0.05 }, []string{"proof.alpha"}},
		{"pointer", func(c *Config) { c.Perf.Enabled = ptrTo(false) }, []string{"perf.enabled"}},
		{"list", func(c *Config) { c.Tenants.Globs = []string{"/a/*"} }, []string{"tenants.globs"}},
		{"several, in file order", func(c *Config) { c.Protect = []string{"x"}; c.Listen = "off" }, []string{"listen", "protect"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			tc.change(&c)
			if got := changedKeys(base, c); !slices.Equal(got, tc.want) {
				t.Errorf("changedKeys = %v, want %v", got, tc.want)
			}
		})
	}
}

// blockingDiscoverer hangs while blocked: a loop stuck in a sensor.
type blockingDiscoverer struct {
	sense.Discoverer
	mu      sync.Mutex
	blocked chan struct{} // non-nil: Discover waits for it to close
}

func (b *blockingDiscoverer) Discover(ctx context.Context) ([]sense.Tenant, error) {
	b.mu.Lock()
	gate := b.blocked
	b.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return b.Discoverer.Discover(ctx)
}

// The loop beats after its passes, and stops beating while it is stuck.
func TestBeatsFollowTheLoop(t *testing.T) {
	w := newWorld(t)
	hs := newHarness(t, w, testConfig(t.TempDir()), nil)
	bd := &blockingDiscoverer{Discoverer: w}
	hs.agent.d.Discoverer = bd
	beats := hs.agent.Beats()
	select {
	case <-beats:
		t.Fatal("a beat before Run")
	default:
	}
	stop := hs.run(t)
	defer stop()
	select {
	case <-beats:
	case <-time.After(2 * time.Second):
		t.Fatal("no beat from a running loop")
	}
	gate := make(chan struct{})
	bd.mu.Lock()
	bd.blocked = gate
	bd.mu.Unlock()
	time.Sleep(150 * time.Millisecond) // the loop reaches the next interval and hangs there
	for len(beats) > 0 {
		<-beats
	}
	select {
	case <-beats:
		t.Error("a stuck loop beat")
	case <-time.After(300 * time.Millisecond):
	}
	bd.mu.Lock()
	bd.blocked = nil
	bd.mu.Unlock()
	close(gate)
	select {
	case <-beats:
	case <-time.After(2 * time.Second):
		t.Error("no beat once the loop is free again")
	}
}
