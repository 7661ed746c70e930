package cli

import (
	"bytes"
	"fmt"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/api"
)

type topSource struct {
	s  api.State
	ok bool
}

func (f topSource) Latest() (api.State, bool) { return f.s, f.ok }

func topAgent(t *testing.T, src agent.StateSource) string {
	t.Helper()
	srv := httptest.NewServer(agent.Handler(src, agent.NewRegistry(src, "test", "test")))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestTopOnce(t *testing.T) {
	t0 := time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)
	addr := topAgent(t, topSource{ok: true, s: api.State{
		Time: t0, Interval: 1, Host: "node-7", PMU: false, Contention: true, ContentionRatio: 1.8,
		Tenants: []api.TenantState{
			{ID: "vm:a", Kind: "vm", Name: "a", CPU: 1, Duty: 1},
			{ID: "vm:noisy", Kind: "vm", Name: "noisy", CPU: 0.5, Score: 0.9, Throttled: true, Duty: 0.5, Quota: 1,
				Counters: map[string]float64{"bus_locks": 120000}},
		},
		Probes:   []api.ProbeState{{Domain: 0, Kind: "lock", LatencyNs: 900, BaselineNs: 500, Ratio: 1.8}},
		Suspects: []api.Suspect{{Tenant: "vm:noisy", Name: "noisy", Score: 0.9, Reasons: []string{"bus locks 120k/s"}}},
	}})
	out, errOut, err := run(t, "top", "--once", "--addr", addr, "--width", "100")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("--once output has ANSI codes: %q", out)
	}
	for _, want := range []string{
		// The state's time is long past: the header says so in words.
		"crosstalk  STALE: ",
		"node-7  2026-03-14 09:26:53 UTC  interval 1s  PMU no",
		"contention YES  ratio 1.80×",
		"       0  lock     0    900ns     500ns  1.80×  SLOW",
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
		{[]string{"--height", "-1"}, "--height must be >= 0", 0},
		{[]string{"--limit", "-1"}, "--limit must be >= 0", 0},
		{[]string{"--sort", "memory"}, `--sort "memory": want one of score, cpu, throttle, name`, 0},
		{[]string{"--filter", "web[1"}, `--filter "web[1"`, 0},
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
	for flag, want := range map[string]string{"addr": "127.0.0.1:9477", "refresh": "1s", "once": "false", "width": "0",
		"height": "0", "sort": "score", "filter": "", "limit": "0"} {
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

func TestTermHeight(t *testing.T) {
	t.Setenv("LINES", "")
	if h := termHeight(0, &bytes.Buffer{}); h != 0 {
		t.Errorf("no terminal: %d, want 0 (no limit)", h)
	}
	t.Setenv("LINES", "31")
	if h := termHeight(0, &bytes.Buffer{}); h != 31 {
		t.Errorf("$LINES: %d", h)
	}
	if h := termHeight(20, &bytes.Buffer{}); h != 20 {
		t.Errorf("--height: %d", h)
	}
}

// Forty tenants on a 24-line terminal: the header stays, the busiest
// tenants are listed and the rest counted.
func TestTopOnceFitsAndChooses(t *testing.T) {
	t0 := time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)
	s := api.State{Time: t0, Interval: 1, Host: "node-7", Contention: true, ContentionRatio: 1.8}
	for i := range 40 {
		s.Tenants = append(s.Tenants, api.TenantState{ID: fmt.Sprintf("vm:web-%02d", i), Kind: "vm", Name: fmt.Sprintf("web-%02d", i), CPU: float64(i) / 10, Duty: 1})
	}
	addr := topAgent(t, topSource{ok: true, s: s})
	t.Setenv("LINES", "24")
	t.Setenv("COLUMNS", "80")
	out, errOut, err := run(t, "top", "--once", "--addr", addr)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) > 24 || !strings.HasPrefix(lines[0], "crosstalk  STALE: ") || !strings.Contains(strings.Join(lines[:4], "\n"), "\ncontention YES") {
		t.Errorf("%d lines, header not on top:\n%s", len(lines), out)
	}
	if !strings.Contains(out, "  web-39  ") || !strings.Contains(out, "more\n") {
		t.Errorf("busiest tenant not first or no \"more\" line:\n%s", out)
	}
	out, _, err = run(t, "top", "--once", "--addr", addr, "--sort", "name", "--filter", "web-1*", "--limit", "3", "--height", "100")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`TENANTS  40 (10 match "web-1*"), by name`, "  web-10  ", "  web-12  ", "  … 7 more"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "web-13") || strings.Contains(out, "web-20") {
		t.Errorf("beyond --limit or --filter:\n%s", out)
	}
}
