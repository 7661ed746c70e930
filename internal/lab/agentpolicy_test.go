package lab

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/testenv"
)

// The agent as the lab's "crosstalk" policy, on benign neighbours only (no
// polluter): it may probe and even test a suspect, but it must throttle no
// one, and the phase must end with every cgroup gone.
func TestAgentPolicyLeavesBenignTenantsAlone(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for cgroups")
	}
	testenv.LockCPUs(t, 10*time.Minute)
	h, err := host.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	online, _ := h.ReadString("/sys/devices/system/cpu/online")
	if online == "0" {
		t.Skip("needs two CPUs")
	}
	s, err := Parse([]byte(`name: benign
phase: 2s
tenants:
  - {name: victim, role: victim, load: chase, args: ["--size", "4MiB"], cpus: "1"}
  - {name: busy, role: bystander, load: cpu, cpus: "0"}
`), "benign")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Preflight(h, s); err != nil {
		t.Skipf("host cannot run the lab: %v", err)
	}
	cfg := agent.Defaults()
	cfg.Interval = 250 * time.Millisecond
	pols := DefaultPolicies()
	pols["crosstalk"] = AgentPolicy(cfg)
	journals := t.TempDir()
	res, err := Run(context.Background(), s, Options{Host: h, Self: crosstalkBin, Policies: []string{"crosstalk"}, Registry: pols, Interval: 100 * time.Millisecond,
		JournalDir: journals})
	if err != nil {
		t.Fatal(err)
	}
	// The phase's journal is kept where the result says, whole: from the
	// agent's start to its stop, each event on a line of its own.
	if want := filepath.Join(journals, "r1-crosstalk.jsonl"); res.Results[0].Journal != want {
		t.Errorf("journal kept at %q, want %q", res.Results[0].Journal, want)
	}
	if b, err := os.ReadFile(res.Results[0].Journal); err != nil {
		t.Errorf("kept journal: %v", err)
	} else if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); !strings.Contains(lines[0], `"kind":"start"`) || !strings.Contains(lines[len(lines)-1], `"kind":"stop"`) {
		t.Errorf("kept journal runs from %.80q to %.80q, want the agent's start to its stop", lines[0], lines[len(lines)-1])
	}
	for _, a := range res.Results[0].Actions {
		if a.Kind == "throttle" {
			t.Errorf("benign tenant throttled: %+v", a)
		}
	}
	for n, tr := range res.Results[0].Tenants {
		if tr.ThrottledSeconds > 0.5 {
			t.Errorf("%s throttled %.2fs", n, tr.ThrottledSeconds)
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/cpu/crosstalk-lab"); err == nil {
		if ents, _ := os.ReadDir("/sys/fs/cgroup/cpu/crosstalk-lab"); len(ents) > 0 {
			// Other packages' lab tests may be running now: only ours count.
			mine := fmt.Sprintf("run-%d-", os.Getpid())
			for _, e := range ents {
				if e.IsDir() && strings.HasPrefix(e.Name(), mine) {
					t.Errorf("lab cgroup left: %s", e.Name())
				}
			}
		}
	}
}

// End stops the agent and releases what Build opened only once the agent's
// Run has returned (its shutdown restores throttles through them). An agent
// that does not stop in time is reported, and its dependencies stay open
// until it does stop.
func TestAgentPolicyEndNeverReleasesUnderARunningAgent(t *testing.T) {
	type world struct {
		p        *agentPolicy
		released chan struct{} // closed when Build's close function runs
		unblock  chan struct{} // lets the fake Run return after its cancel
		dir      string
	}
	newWorld := func(t *testing.T) *world {
		w := &world{released: make(chan struct{}), unblock: make(chan struct{}), dir: t.TempDir()}
		w.p = &agentPolicy{dir: w.dir, close: func() { close(w.released) }, stopWait: 50 * time.Millisecond}
		w.p.start(t.Context(), func(ctx context.Context) error {
			<-ctx.Done()
			<-w.unblock // the shutdown's restores
			select {
			case <-w.released:
				t.Error("the agent's dependencies were released while it was still shutting down")
			default:
			}
			return nil
		})
		return w
	}
	isReleased := func(w *world) bool {
		select {
		case <-w.released:
			return true
		default:
			return false
		}
	}

	t.Run("stops in time", func(t *testing.T) {
		w := newWorld(t)
		// Its journal, rotated once, is kept whole and in order.
		w.p.journal = filepath.Join(t.TempDir(), "run", "r1-crosstalk.jsonl")
		os.WriteFile(agent.JournalPath(w.dir)+".1", []byte("{\"n\":1}\n"), 0o644)
		os.WriteFile(agent.JournalPath(w.dir), []byte("{\"n\":2}\n"), 0o644)
		close(w.unblock)
		if err := w.p.End(t.Context()); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(w.p.journal); err != nil || string(b) != "{\"n\":1}\n{\"n\":2}\n" {
			t.Errorf("kept journal = %q, %v; want the rotated part, then the current one", b, err)
		}
		if !isReleased(w) {
			t.Error("End returned before releasing the stopped agent's dependencies")
		}
		if _, err := os.Stat(w.dir); !os.IsNotExist(err) {
			t.Errorf("state directory left: %v", err)
		}
		if err := w.p.End(t.Context()); err != nil {
			t.Errorf("a second End: %v", err)
		}
	})
	for _, tt := range []struct {
		name string
		ctx  func(t *testing.T) context.Context
	}{
		{"past its own wait", func(t *testing.T) context.Context { return t.Context() }},
		{"past the caller's deadline", func(t *testing.T) context.Context {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return ctx
		}},
	} {
		t.Run("still running "+tt.name, func(t *testing.T) {
			w := newWorld(t)
			if err := w.p.End(tt.ctx(t)); err == nil || !strings.Contains(err.Error(), "did not stop") {
				t.Fatalf("End = %v, want the agent reported as not stopped", err)
			}
			if isReleased(w) {
				t.Fatal("dependencies released under a running agent")
			}
			if _, err := os.Stat(w.dir); err != nil {
				t.Fatalf("state directory removed under a running agent: %v", err)
			}
			close(w.unblock)
			select {
			case <-w.released:
			case <-time.After(5 * time.Second):
				t.Fatal("dependencies never released after the agent stopped")
			}
		})
	}
}

// End logs what the agent's probe cost each CPU, by reading, from the
// agent's last state.
func TestAgentPolicyEndLogsTheProbesCPU(t *testing.T) {
	var buf bytes.Buffer
	p := &agentPolicy{dir: t.TempDir(), close: func() {}, stopWait: time.Second,
		log: slog.New(slog.NewTextHandler(&buf, nil)),
		latest: func() (api.State, bool) {
			return api.State{ProbeCPU: []api.ProbeCPUState{{CPU: 1, Reading: "proof", Seconds: 0.125}}}, true
		}}
	p.start(t.Context(), func(ctx context.Context) error { <-ctx.Done(); return nil })
	if err := p.End(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); !strings.Contains(got, "cpu=1 reading=proof seconds=0.125") {
		t.Errorf("End logged %q, want the probe's CPU time on CPU 1 for proofs", got)
	}
}
