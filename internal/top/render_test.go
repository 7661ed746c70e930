package top

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/crosstalk-project/crosstalk/internal/api"
)

var update = flag.Bool("update", false, "rewrite the golden frames in testdata/")

var t0 = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

// sample is a busy host: a VM split-locking the memory bus, throttled in a
// proof; a protected database; a cache-thrashing container; an idle one.
func sample() api.State {
	s := api.State{
		Time:            t0,
		Interval:        1,
		Host:            "node-7",
		Version:         "v0.4.0",
		DryRun:          false,
		PMU:             true,
		Contention:      true,
		ContentionRatio: 2.5,
		Tenants: []api.TenantState{
			{ID: "ct:idle", Kind: "container", Name: "idle", CPUs: "8-15", CPU: 0.01, Duty: 1},
			{
				ID: "vm:db-primary", Kind: "vm", Name: "db-primary", CPUs: "4-7",
				CPU: 3.2, RunDelay: 0.75, PSI: 0.3,
				Counters: map[string]float64{"cycles": 8e9, "instructions": 1.2e10, "llc_misses": 2.5e6},
				Duty:     1, Protected: true,
			},
			{
				ID: "vm:noisy-neighbour-with-a-very-long-name", Kind: "vm", Name: "noisy-neighbour-with-a-very-long-name", CPUs: "0-3",
				CPU: 1.95, RunDelay: 0.0125, PSI: 0.05, ThrottledRatio: 0.5,
				Counters: map[string]float64{"bus_locks": 250000, "cycles": 9.5e9, "instructions": 2.1e9, "llc_misses": 4e4},
				Quota:    2, Throttled: true, Duty: 0.5, Score: 0.92,
				Holds: []api.HoldState{{Policy: "probe", Lever: "cpu_quota", Duty: 0.5}, {Policy: "power:0", Lever: "cpufreq", Duty: 0.75}, {Policy: "power:1", Lever: "cpufreq", Duty: 0.75}},
			},
			{
				ID: "pod:batch/thrash", Kind: "container", Name: "batch/thrash", CPUs: "8-15",
				CPU: 4, RunDelay: 0.2, PSI: 0.12,
				Counters: map[string]float64{"cycles": 1.6e10, "instructions": 4e9, "llc_misses": 9.1e7},
				Duty:     1, Score: 0.31,
			},
		},
		Probes: []api.ProbeState{
			{Domain: 1, CPU: 8, Kind: "llc", LatencyNs: 13.1, BaselineNs: 12.8, Ratio: 1.02},
			{Domain: 0, CPU: 2, Kind: "dram", LatencyNs: 95, BaselineNs: 88, Ratio: 1.08},
			{Domain: 0, CPU: 2, Kind: "lock", LatencyNs: 1500, BaselineNs: 600, Ratio: 2.5},
			{Domain: 0, CPU: 2, Kind: "llc", LatencyNs: 16.9, BaselineNs: 13, Ratio: 1.3},
		},
		Suspects: []api.Suspect{
			{Tenant: "pod:batch/thrash", Name: "batch/thrash", Score: 0.31, Reasons: []string{"llc misses 91M/s, 3x the host median"}},
			{Tenant: "vm:noisy-neighbour-with-a-very-long-name", Name: "noisy-neighbour-with-a-very-long-name", Score: 0.92,
				Reasons: []string{"bus locks 250k/s while the lock probe is 2.50x its baseline", "shares L3 domain 0 with the probe"}},
		},
		Proof:        &api.ProofState{Tenant: "vm:noisy-neighbour-with-a-very-long-name", Name: "noisy-neighbour-with-a-very-long-name", Started: t0.Add(-4 * time.Second), Before: 2.4},
		ActionsTotal: map[string]uint64{"proof": 6, "throttle": 2, "relax": 1, "release": 1},
		ProofsTotal:  map[string]uint64{"polluter": 2, "innocent": 3},
		IntervalCPU:  0.0125,
		PerfFDs:      24,
	}
	kinds := []api.ActionKind{api.KindProof, api.KindThrottle, api.KindRelax, api.KindRelease, api.KindProof}
	for i := range 10 {
		s.Actions = append(s.Actions, api.ActionRecord{
			Time: t0.Add(time.Duration(i-10) * 30 * time.Second), Tenant: "vm:x", Name: fmt.Sprintf("tenant-%d", i),
			Kind: kinds[i%len(kinds)], Quota: float64(i%3) * 0.5, Duty: 0.25 * float64(1+i%4),
			Reason: fmt.Sprintf("reason %d", i),
		})
	}
	s.Actions[9].Kind = "proof"
	s.Actions[9].Name = "noisy-neighbour-with-a-very-long-name"
	s.Actions[9].Reason = "suspect score 0.92 over 3 intervals"
	return s
}

func render(t *testing.T, s api.State, width int, color bool) string {
	t.Helper()
	var b bytes.Buffer
	if err := Render(&b, s, View{Width: width, Color: color}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/top -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("frame differs from %s (go test ./internal/top -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

func checkWidth(t *testing.T, frame string, width int) {
	t.Helper()
	for i, l := range strings.Split(frame, "\n") {
		if n := utf8.RuneCountInString(ansi.ReplaceAllString(l, "")); n > width {
			t.Errorf("line %d is %d wide, over %d: %q", i+1, n, width, l)
		}
		if strings.HasSuffix(l, " ") {
			t.Errorf("line %d has trailing blanks: %q", i+1, l)
		}
	}
}

func TestRenderGolden(t *testing.T) {
	for _, width := range []int{120, 80, 50} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			got := render(t, sample(), width, false)
			if strings.Contains(got, "\x1b") {
				t.Error("plain frame has escape codes")
			}
			checkWidth(t, got, width)
			golden(t, fmt.Sprintf("frame-%d.txt", width), got)
		})
	}
}

func TestRenderColor(t *testing.T) {
	s := sample()
	for _, width := range []int{120, 50} {
		plain := render(t, s, width, false)
		col := render(t, s, width, true)
		if !strings.Contains(col, sRed+"2.50×"+sReset) {
			t.Errorf("slow probe ratio not highlighted:\n%q", col)
		}
		if strings.Contains(col, sRed+"1.02×") || strings.Contains(col, sRed+"1.08×") {
			t.Error("quiet probe highlighted")
		}
		if !strings.Contains(col, sRed+" 1.30×"+sReset) && !strings.Contains(col, sRed+"1.30×"+sReset) {
			t.Errorf("probe at exactly %.1f× not highlighted", SlowRatio)
		}
		if !strings.Contains(col, sYellow+"THROTTLED") {
			t.Error("THROTTLED not highlighted")
		}
		// Colour changes nothing but the escape codes.
		if stripped := ansi.ReplaceAllString(col, ""); stripped != plain {
			t.Errorf("width %d: colour frame without escapes differs from the plain one:\n%s\n---\n%s", width, stripped, plain)
		}
		checkWidth(t, col, width)
	}
}

func TestRenderOrder(t *testing.T) {
	got := render(t, sample(), 200, false)
	order := []string{"noisy-neighbour-with-a-very-long-name  vm", "batch/thrash", "db-primary", "idle"}
	last := -1
	for _, name := range order {
		i := strings.Index(got, "\n  "+name)
		if i < 0 || i < last {
			t.Fatalf("tenants not sorted by score then CPU (%s at %d):\n%s", name, i, got)
		}
		last = i
	}
	// Last 8 actions only, newest last.
	if strings.Contains(got, "tenant-1 ") || !strings.Contains(got, "tenant-2 ") {
		t.Errorf("want actions 2..9 only:\n%s", got)
	}
}

func TestRenderEmpty(t *testing.T) {
	got := render(t, api.State{}, 80, false)
	want := `crosstalk  ?  -  interval 0s  PMU no  dry-run no
contention no  ratio 0.00×  perf fds 0  agent cpu 0s/interval

PROBES  none

TENANTS  none

SUSPECTS  none

PROOF  none in progress

ACTIONS  none yet
  actions since start: none  proofs: none
`
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// Names come from tenants: they must not drive the terminal.
func TestRenderHostileNames(t *testing.T) {
	s := sample()
	s.Host = "evil\x1b]0;pwned\x07"
	s.Tenants[0].Name = "idle\x1b[2J\x1b[31m\nnext\xff"
	s.Suspects[0].Reasons = []string{"\x1b[1A\rgotcha"}
	got := render(t, s, 120, false)
	if strings.ContainsAny(got, "\x1b\r\x07") {
		t.Errorf("control characters reach the terminal: %q", got)
	}
	if !strings.Contains(got, "idle?[2J?[31m?next\uFFFD") {
		t.Errorf("name not shown cleaned:\n%s", got)
	}
	checkWidth(t, got, 120)
}

func TestRenderNarrowest(t *testing.T) {
	for _, w := range []int{0, 10, 40} {
		got := render(t, sample(), w, false)
		checkWidth(t, got, minWidth)
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{perSecond(0.75), "750ms/s"}, {perSecond(0), "0"},
		{rateOrDash(250000, true), "250k"}, {rateOrDash(0, false), "-"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// A held tenant's flags name the policies holding it, each once (a power
// hold per socket is one "power").
func TestRenderNamesHoldingPolicies(t *testing.T) {
	out := render(t, sample(), 200, false)
	if !strings.Contains(out, "HELD BY") || !strings.Contains(out, "probe+power") || strings.Contains(out, "power:0") {
		t.Errorf("flags do not name the holding policies once each:\n%s", out)
	}
}

// A tenant the agent judged by its CPI shows its ratio to its usual, marked
// when it is slowed; the column is not there when no tenant is judged.
func TestRenderCPIRatio(t *testing.T) {
	if out := render(t, sample(), 200, false); strings.Contains(out, "CPI×") {
		t.Errorf("a CPI column with no tenant judged:\n%s", out)
	}
	s := sample()
	s.Tenants[0].CPIRatio = 1.6
	s.Tenants[1].CPIRatio = 1.02
	out := render(t, s, 200, false)
	if !strings.Contains(out, "CPI×") || !strings.Contains(out, "1.60×") || !strings.Contains(out, "1.02×") {
		t.Errorf("no CPI ratios:\n%s", out)
	}
	if colored := render(t, s, 200, true); !strings.Contains(colored, sYellow+"1.60×") || strings.Contains(colored, sYellow+"1.02×") {
		t.Errorf("the slowed tenant is not marked, or the other is:\n%q", colored)
	}
}
