package lab

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/load"
)

func TestBuiltinsParse(t *testing.T) {
	names := Builtins()
	for _, want := range []string{"buslock", "membw", "llc", "power", "latency", "buslock-burst"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("built-in %s missing from %v", want, names)
		}
	}
	for _, n := range names {
		s, err := Load(n)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		if s.Name != n || s.Victim().Name == "" || s.Phase <= 0 {
			t.Errorf("%s: %+v", n, s)
		}
	}
	s, _ := Load("buslock-burst")
	for _, ten := range s.Tenants {
		if ten.Role == RolePolluter && (ten.Start != time.Second || ten.Stop != 4*time.Second || ten.RunLength(s.Phase) != 3*time.Second) {
			t.Errorf("burst polluter = %+v", ten)
		}
	}
}

// The example scenario files, whose innocents run programs the suite does
// not draw, load; a control file has no polluter, and every other file has
// one, whose program or option the file's name begins with.
func TestExampleScenarioFiles(t *testing.T) {
	files, err := filepath.Glob("../../examples/lab/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example scenarios: %v", err)
	}
	for _, f := range files {
		s, err := Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		var polluters []Tenant
		for _, ten := range s.Tenants {
			if ten.Role == RolePolluter {
				polluters = append(polluters, ten)
			}
		}
		base := strings.TrimSuffix(filepath.Base(f), ".yaml")
		switch {
		case s.Name != base || s.Description == "" || s.Victim().Name == "":
			t.Errorf("%s: name %q, description %q, victim %q", f, s.Name, s.Description, s.Victim().Name)
		case strings.HasPrefix(base, "control-") != (len(polluters) == 0):
			t.Errorf("%s: %d polluters", f, len(polluters))
		case len(polluters) == 1:
			kind, _, _ := strings.Cut(base, "-")
			if runs := strings.Join(append([]string{polluters[0].Program()}, polluters[0].Command...), " "); !strings.Contains(runs, kind) {
				t.Errorf("%s: its polluter runs %q, not %s", f, runs, kind)
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown top field", "name: x\nphase: 1s\nflavour: spicy\ntenants: []\n", `line 3: unknown key "flavour"`},
		{"unknown tenant field", "name: x\nphase: 1s\ntenants:\n  - name: v\n    role: victim\n    load: chase\n    cpus: \"0\"\n    colour: red\n", `line 8: unknown key "colour"`},
		{"bad role", "name: x\nphase: 1s\ntenants:\n  - name: v\n    role: victim\n    load: chase\n    cpus: \"0\"\n  - name: p\n    role: villain\n    load: cpu\n    cpus: \"0\"\n", "line 8: tenant \"p\": role \"villain\""},
		{"unknown load", "name: x\nphase: 1s\ntenants:\n  - name: v\n    role: victim\n    load: chess\n    cpus: \"0\"\n", "line 4: tenant \"v\": load \"chess\": built-in loads are"},
		{"no victim", "name: x\nphase: 1s\ntenants:\n  - name: p\n    role: polluter\n    load: cpu\n    cpus: \"0\"\n", "exactly one victim"},
		{"two victims", "name: x\nphase: 1s\ntenants:\n  - {name: a, role: victim, load: cpu, cpus: \"0\"}\n  - {name: b, role: victim, load: cpu, cpus: \"1\"}\n", "exactly one victim is needed, found 2"},
		{"bad cpus", "name: x\nphase: 1s\ntenants:\n  - {name: v, role: victim, load: cpu, cpus: \"3-1\"}\n", "line 4: tenant \"v\": cpus:"},
		{"no cpus", "name: x\nphase: 1s\ntenants:\n  - {name: v, role: victim, load: cpu}\n", "cpus: give the CPUs"},
		{"victim command without metric", "name: x\nphase: 1s\ntenants:\n  - {name: v, role: victim, command: [redis-benchmark], cpus: \"0\"}\n", "needs a metric regex"},
		{"regex without group", "name: x\nphase: 1s\ntenants:\n  - name: v\n    role: victim\n    command: [x]\n    metric: {regex: 'ops', direction: higher}\n    cpus: \"0\"\n", "capture group"},
		{"bad direction", "name: x\nphase: 1s\ntenants:\n  - name: v\n    role: victim\n    command: [x]\n    metric: {regex: '(\\d+)', direction: up}\n    cpus: \"0\"\n", "direction \"up\""},
		{"both load and command", "name: x\nphase: 1s\ntenants:\n  - {name: v, role: victim, load: cpu, command: [x], cpus: \"0\"}\n", "not both"},
		{"onset on a built-in load", "name: x\nphase: 1s\ntenants:\n  - {name: v, role: victim, load: cpu, onset: go, cpus: \"0\"}\n", "built-in loads say when their work begins"},
		{"bad onset regex", "name: x\nphase: 1s\ntenants:\n  - {name: v, role: bystander, command: [x], onset: \"(\", cpus: \"0\"}\n", "onset: error parsing regexp"},
		{"duration in args", "name: x\nphase: 1s\ntenants:\n  - {name: v, role: victim, load: cpu, args: [--duration, 9s], cpus: \"0\"}\n", "sets --duration"},
		{"stop before start", "name: x\nphase: 5s\ntenants:\n  - {name: v, role: victim, load: chase, cpus: \"1\"}\n  - {name: p, role: polluter, load: cpu, cpus: \"0\", start: 3s, stop: 2s}\n", "must come after start"},
		{"start after phase", "name: x\nphase: 5s\ntenants:\n  - {name: v, role: victim, load: chase, cpus: \"1\"}\n  - {name: p, role: polluter, load: cpu, cpus: \"0\", start: 6s}\n", "not before the phase ends"},
		{"long split locks", "name: x\nphase: 20s\ntenants:\n  - {name: v, role: victim, load: chase, cpus: \"1\"}\n  - {name: p, role: polluter, load: splitlock, cpus: \"0\"}\n", "at most 15s"},
		{"duplicate names", "name: x\nphase: 1s\ntenants:\n  - {name: v, role: victim, load: chase, cpus: \"1\"}\n  - {name: v, role: polluter, load: cpu, cpus: \"0\"}\n", "used twice"},
		{"bad phase", "name: x\nphase: soon\ntenants: []\n", "line 2"},
		{"empty", "", "empty scenario"},
		{"bad name", "name: Hello World\nphase: 1s\ntenants: []\n", "scenario name"},
		{"policy start after phase", "name: x\nphase: 5s\npolicy_start: 5s\ntenants:\n  - {name: v, role: victim, load: chase, cpus: \"1\"}\n", "policy_start 5s: must be within the phase"},
		{"pause without resume", "name: x\nphase: 5s\ntenants:\n  - {name: v, role: victim, load: chase, cpus: \"1\"}\n  - {name: p, role: polluter, load: cpu, cpus: \"0\", pause: 2s}\n", "resume 0s: must come after pause 2s"},
		{"pause before start", "name: x\nphase: 5s\ntenants:\n  - {name: v, role: victim, load: chase, cpus: \"1\"}\n  - {name: p, role: polluter, load: cpu, cpus: \"0\", start: 2s, pause: 1s, resume: 3s}\n", "pause 1s: must come after start 2s"},
		{"resume after stop", "name: x\nphase: 5s\ntenants:\n  - {name: v, role: victim, load: chase, cpus: \"1\"}\n  - {name: p, role: polluter, load: cpu, cpus: \"0\", stop: 3s, pause: 1s, resume: 3s}\n", "must come before the tenant stops (3s)"},
		{"victim paused", "name: x\nphase: 5s\ntenants:\n  - {name: v, role: victim, load: chase, cpus: \"1\", pause: 1s, resume: 2s}\n", "the victim runs the whole phase"},
		{"long stress-ng bus locks", "name: x\nphase: 20s\ntenants:\n  - {name: v, role: victim, load: chase, cpus: \"1\"}\n  - {name: p, role: polluter, command: [stress-ng, --lockbus, \"1\"], cpus: \"0\"}\n", "at most 15s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "test.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want it to contain %q", err, tc.want)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "test.yaml: ") {
				t.Errorf("error does not name the file: %v", err)
			}
		})
	}
}

func TestExternalCommandScenario(t *testing.T) {
	s, err := Parse([]byte(`name: redis
phase: 4s
repetitions: 2
tenants:
  - name: redis
    role: victim
    command: ["redis-benchmark", "-q"]
    metric: {name: get_rps, regex: 'GET: ([0-9.,]+) requests per second', direction: higher, unit: req/s, aggregate: mean}
    cpus: "1"
  - name: noise
    role: polluter
    load: splitlock
    args: ["--rate", "1000"]
    cpus: "0"
    start: 1s
    stop: 3s
`), "t")
	if err != nil {
		t.Fatal(err)
	}
	v := s.Victim()
	if name, unit, dir := v.MetricInfo(); name != "get_rps" || unit != "req/s" || dir != "higher" {
		t.Errorf("metric info = %s %s %s", name, unit, dir)
	}
	if got := strings.Join(v.argv("/x", time.Second, time.Second, time.Now()), " "); got != "redis-benchmark -q" {
		t.Errorf("argv = %q", got)
	}
	p := s.Tenants[1]
	at := time.Date(2026, 11, 27, 8, 30, 0, 0, time.UTC)
	if got := strings.Join(p.argv("/bin/ct", 2*time.Second, 250*time.Millisecond, at), " "); got != "/bin/ct load splitlock --duration 2s --interval 250ms --until 2026-11-27T08:30:02Z --rate 1000" {
		t.Errorf("load argv = %q", got)
	}
	if name, _, dir := p.MetricInfo(); name != "locks_per_sec" || dir != "higher" {
		t.Errorf("splitlock metric = %s %s", name, dir)
	}
	s2, err := s.WithPhase(8 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if s2.Tenants[1].Start != 2*time.Second || s2.Tenants[1].Stop != 6*time.Second || s.Tenants[1].Start != time.Second {
		t.Errorf("WithPhase scaled to %v-%v (original now %v)", s2.Tenants[1].Start, s2.Tenants[1].Stop, s.Tenants[1].Start)
	}
	if _, err := s.WithPhase(40 * time.Second); err == nil {
		t.Error("WithPhase let split locks run 20 s")
	}
}

// Every offset scales with the phase, the policy's start and a pause window
// included, and a scaled scenario still validates.
func TestWithPhaseScalesEveryOffset(t *testing.T) {
	s, err := Parse([]byte(`name: late
phase: 8s
policy_start: 2s
tenants:
  - {name: v, role: victim, load: chase, cpus: "1"}
  - {name: p, role: polluter, load: splitlock, cpus: "0", stop: 6s, pause: 2s, resume: 4s}
`), "t")
	if err != nil {
		t.Fatal(err)
	}
	s2, err := s.WithPhase(2 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p := s2.Tenants[1]
	if s2.PolicyStart != 500*time.Millisecond || p.Pause != 500*time.Millisecond || p.Resume != time.Second || p.Stop != 1500*time.Millisecond {
		t.Errorf("scaled: policy_start %v, pause %v, resume %v, stop %v", s2.PolicyStart, p.Pause, p.Resume, p.Stop)
	}
}

// A command the lab had to stop before it printed its metric is an error
// that says what to change; one that printed, exited by itself, or has no
// metric is not.
func TestNoMetricExplainsStoppedCommand(t *testing.T) {
	s, err := Parse([]byte(`name: slow
phase: 4s
tenants:
  - name: v
    role: victim
    command: ["redis-benchmark", "-n", "100000000"]
    metric: {regex: 'GET: ([0-9.]+) requests per second', direction: higher}
    cpus: "0"
`), "t")
	if err != nil {
		t.Fatal(err)
	}
	v := s.Victim()
	tests := []struct {
		name    string
		p       *proc
		wantErr string
	}{
		{"stopped before its metric", &proc{t: v, killed: true}, "stopped at the end of its 4s run before it printed a line matching its metric regex"},
		{"stopped before its metric, with stderr", &proc{t: v, killed: true, tail: []string{"Could not connect to Redis at 127.0.0.1:6379: Connection refused"}},
			"its last output on stderr:\n  Could not connect to Redis at 127.0.0.1:6379: Connection refused"},
		{"stopped after a metric", &proc{t: v, killed: true, matches: []float64{1}}, ""},
		{"exited by itself", &proc{t: v}, ""},
		{"built-in load", &proc{t: Tenant{Name: "c", Load: "chase"}, killed: true}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.noMetric(s.Phase)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "run it in a loop")):
				t.Errorf("error = %v, want %q and the advice", err, tc.wantErr)
			}
		})
	}
}

func TestLoadMissing(t *testing.T) {
	if _, err := Load("no-such-scenario"); err == nil || !strings.Contains(err.Error(), "buslock") {
		t.Errorf("error should list built-ins: %v", err)
	}
}

// A tenant's onset is when its work began, where it says so: a built-in
// load's start line, stamped with its wall-clock time (the line itself may
// wait in the pipe while its CPUs are busy), or a command's onset line, at
// the moment it is read. The load's samples count from it.
func TestOnsetFromTheTenantsOwnWord(t *testing.T) {
	now := 2 * time.Second
	phaseTime := func() time.Duration { return now }
	stamp := func(ago time.Duration) string {
		b, _ := json.Marshal(load.Progress{Type: "start", Load: "chase", At: time.Now().Add(-ago).UTC().Format(time.RFC3339Nano)})
		return string(b)
	}

	p := &proc{t: Tenant{Name: "c", Load: "chase"}, startAt: time.Second, phaseTime: phaseTime}
	p.read(strings.NewReader(stamp(300*time.Millisecond)+"\n"+`{"type":"progress","load":"chase","t":0.1,"ops":5,"metric":7}`+"\n"), false)
	if p.onset == nil || (*p.onset-1700*time.Millisecond).Abs() > 50*time.Millisecond {
		t.Fatalf("onset = %v, want about 1.7s (read at 2s, stamped 0.3s before)", p.onset)
	}
	if len(p.samples) != 1 || math.Abs(p.samples[0].T-(p.onset.Seconds()+0.1)) > 1e-9 {
		t.Errorf("samples %+v, want one at the onset + 0.1s", p.samples)
	}

	early := &proc{t: Tenant{Name: "c", Load: "chase"}, startAt: time.Second, phaseTime: phaseTime}
	early.read(strings.NewReader(stamp(5*time.Second)+"\n"), false)
	if early.onset == nil || *early.onset != time.Second {
		t.Errorf("a stamp before the process start: onset %v, want the start, 1s", early.onset)
	}

	s, err := Parse([]byte(`name: x
phase: 4s
tenants:
  - {name: v, role: victim, load: chase, cpus: "1"}
  - {name: p, role: polluter, command: [stress-ng, --lockbus, "1", -v], onset: '`+StressNGOnset+`', cpus: "0"}
`), "t")
	if err != nil {
		t.Fatal(err)
	}
	cmd := &proc{t: s.Tenants[1], startAt: time.Second, phaseTime: phaseTime}
	cmd.read(strings.NewReader("stress-ng: info:  [7] dispatching hogs: 1 lockbus\nstress-ng: debug: [7] 1 stressor started\n"), false)
	if cmd.onset != nil {
		t.Fatalf("onset %v before its onset line", *cmd.onset)
	}
	cmd.read(strings.NewReader("stress-ng: debug: [9] lockbus: started [9] (instance 0)\n"), true)
	if cmd.onset == nil || *cmd.onset != now {
		t.Errorf("onset %v, want %v, when its line was read", cmd.onset, now)
	}
	none := &proc{t: s.Tenants[0], startAt: time.Second, phaseTime: phaseTime}
	none.read(strings.NewReader(`{"type":"progress","load":"chase","t":0.1,"ops":5,"metric":7}`+"\n"), false)
	if none.onset != nil || len(none.samples) != 1 || math.Abs(none.samples[0].T-1.1) > 1e-9 {
		t.Errorf("no start line: onset %v samples %+v, want none and a sample at the process start + 0.1s", none.onset, none.samples)
	}
}

func TestTenantProgram(t *testing.T) {
	for _, c := range []struct {
		t    Tenant
		want string
	}{
		{Tenant{Name: "v", Load: "chase"}, "chase"},
		{Tenant{Name: "p", Command: []string{"/usr/bin/stress-ng", "--lockbus", "1"}}, "stress-ng"},
		{Tenant{Name: "redis", Command: []string{"sh", "-c", "redis-server --port 1 & sleep 0.3; redis-benchmark"}}, "redis-server"},
		{Tenant{Name: "loop", Command: []string{"/bin/bash", "-c", "while :; do xz -9 </dev/urandom >/dev/null; done"}}, "loop"},
		{Tenant{Name: "env", Command: []string{"sh", "-c", "FOO=1 python3 x.py"}}, "env"},
		{Tenant{Name: "s", Command: []string{"sh", "script.sh"}}, "sh"},
		{Tenant{Name: "n"}, ""},
	} {
		if got := c.t.Program(); got != c.want {
			t.Errorf("%s %q: Program() = %q, want %q", c.t.Name, c.t.Command, got, c.want)
		}
	}
}
