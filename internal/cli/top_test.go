package cli

import (
	"bytes"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/agent"
)

type topSource struct {
	s  agent.State
	ok bool
}

func (f topSource) Latest() (agent.State, bool) { return f.s, f.ok }

func topAgent(t *testing.T, src agent.StateSource) string {
	t.Helper()
	srv := httptest.NewServer(agent.Handler(src, agent.NewRegistry(src, "test", "test")))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestTopOnce(t *testing.T) {
	t0 := time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)
	addr := topAgent(t, topSource{ok: true, s: agent.State{
		Time: t0, Interval: 1, Host: "node-7", PMU: false, Contention: true, ContentionRatio: 1.8,
		Tenants: []agent.TenantState{
			{ID: "vm:a", Kind: "vm", Name: "a", CPU: 1, Duty: 1},
			{ID: "vm:noisy", Kind: "vm", Name: "noisy", CPU: 0.5, Score: 0.9, Throttled: true, Duty: 0.5, Quota: 1,
				Counters: map[string]float64{"bus_locks": 120000}},
		},
		Probes:   []agent.ProbeState{{Domain: 0, Kind: "lock", LatencyNs: 900, BaselineNs: 500, Ratio: 1.8}},
		Suspects: []agent.Suspect{{Tenant: "vm:noisy", Name: "noisy", Score: 0.9, Reasons: []string{"bus locks 120k/s"}}},
	}})
	out, errOut, err := run(t, "top", "--once", "--addr", addr, "--width", "100")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("--once output has ANSI codes: %q", out)
	}
	for _, want := range []string{
		"crosstalk  node-7  2026-03-14 09:26:53 UTC  interval 1s  PMU no  dry-run no",
		"contention YES  ratio 1.80x",
		"       0  lock     0    900ns     500ns  1.80x  SLOW",
		"BUSLOCK/s",
		"  noisy  vm",
		"THROTTLED",
		"    - bus locks 120k/s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("frame lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "  noisy  vm") > strings.Index(out, "  a      vm") {
		t.Errorf("suspect not first:\n%s", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if len([]rune(l)) > 100 {
			t.Errorf("line over --width 100: %q", l)
		}
	}
}

func TestTopErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	noState := topAgent(t, topSource{})

	for _, tc := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"--once", "--addr", dead}, "no agent at " + dead + ": is `crosstalk run` running?", 1},
		{[]string{"--addr", dead, "--refresh", "100ms"}, "no agent at " + dead + ": is `crosstalk run` running?", 1},
		{[]string{"--once", "--addr", noState}, "agent at " + noState + ": no state yet", 1},
		{[]string{"--refresh", "10ms"}, "--refresh must be at least 100ms", 0},
		{[]string{"--width", "-1"}, "--width must be >= 0", 0},
		{[]string{"extra"}, "unknown command", 0},
	} {
		out, _, err := run(t, append([]string{"top"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: want %q, got %v", tc.args, tc.want, err)
			continue
		}
		var ee exitError
		if asExit(err, &ee) != (tc.code != 0) || (tc.code != 0 && ee.code != tc.code) {
			t.Errorf("%v: exit code: %#v", tc.args, err)
		}
		if out != "" {
			t.Errorf("%v: wrote %q", tc.args, out)
		}
	}
}

func TestTopDefaults(t *testing.T) {
	cmd := newTopCmd(&globals{})
	for flag, want := range map[string]string{"addr": "127.0.0.1:9477", "refresh": "1s", "once": "false", "width": "0"} {
		if got := cmd.Flags().Lookup(flag).DefValue; got != want {
			t.Errorf("--%s default %q, want %q", flag, got, want)
		}
	}
}

func TestTermWidth(t *testing.T) {
	t.Setenv("COLUMNS", "")
	if w := termWidth(0, &bytes.Buffer{}); w != 120 {
		t.Errorf("no terminal: %d", w)
	}
	t.Setenv("COLUMNS", "87")
	if w := termWidth(0, &bytes.Buffer{}); w != 87 {
		t.Errorf("$COLUMNS: %d", w)
	}
	if w := termWidth(60, &bytes.Buffer{}); w != 60 {
		t.Errorf("--width: %d", w)
	}
}
