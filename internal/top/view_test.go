package top

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/api"
)

// crowded is the sample host with 40 more quiet tenants: more than any
// terminal shows under the header.
func crowded() api.State {
	s := sample()
	for i := range 40 {
		s.Tenants = append(s.Tenants, api.TenantState{
			ID: fmt.Sprintf("ct:web-%02d", i), Kind: "container", Name: fmt.Sprintf("web-%02d", i),
			CPUs: "8-15", CPU: float64(i%7) * 0.1, Duty: 1,
		})
	}
	return s
}

func renderView(t *testing.T, s api.State, v View) string {
	t.Helper()
	var b bytes.Buffer
	if err := Render(&b, s, v); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func lines(frame string) []string { return strings.Split(strings.TrimSuffix(frame, "\n"), "\n") }

// tenantRows are the names in the TENANTS table, in order.
func tenantRows(frame string) []string {
	var names []string
	in := false
	for _, l := range lines(frame) {
		switch {
		case strings.HasPrefix(l, "  NAME "):
			in = true
		case in && (l == "" || strings.HasPrefix(l, "  … ")):
			return names
		case in:
			names = append(names, strings.Fields(l)[0])
		}
	}
	return names
}

func TestRenderFitsHeight(t *testing.T) {
	for _, tc := range []struct {
		height, width int
		rows          int    // tenant rows shown
		more          string // the "… N more" line
		has, lacks    []string
	}{
		// Everything fits: no "more" line, every section whole.
		{height: 0, width: 80, rows: 44, has: []string{"ACTIONS  last 8", "- shares L3 domain 0"}},
		{height: 200, width: 120, rows: 44, has: []string{"ACTIONS  last 8"}},
		// A 24-line terminal: the tenants give up rows first.
		{height: 50, width: 80, rows: 11, more: "  … 33 more", has: []string{"ACTIONS  last 8", "PROOF  in progress"}},
		{height: 40, width: 120, rows: 5, more: "  … 39 more", has: []string{"ACTIONS  last 8"}},
		// Then the actions, then the suspects' reasons.
		{height: 30, width: 80, rows: 3, more: "  … 41 more", has: []string{"ACTIONS  8 recent, not shown", "batch/thrash  score 0.31"}, lacks: []string{"- bus locks"}},
		{height: 24, width: 80, rows: 3, more: "  … 41 more", has: []string{"SUSPECTS\n  noisy-neighbour-with-a-very-long-name  score 0.92\n  batch/thrash  score 0.31\n"}, lacks: []string{"- bus locks", "ACTIONS"}},
		// Then lines are cut at the bottom: the header stays.
		{height: 12, width: 80, rows: 0, lacks: []string{"TENANTS", "ACTIONS"}},
		{height: 2, width: 120, rows: 0, lacks: []string{"PROBES"}},
	} {
		t.Run(fmt.Sprintf("%dx%d", tc.width, tc.height), func(t *testing.T) {
			got := renderView(t, crowded(), View{Width: tc.width, Height: tc.height})
			checkWidth(t, got, tc.width)
			ls := lines(got)
			if tc.height > 0 && len(ls) > tc.height {
				t.Errorf("%d lines, over the height %d:\n%s", len(ls), tc.height, got)
			}
			if !strings.HasPrefix(ls[0], "crosstalk  node-7") || !strings.Contains(got, "contention YES") {
				t.Errorf("header not on top:\n%s", got)
			}
			if rows := tenantRows(got); len(rows) != tc.rows {
				t.Errorf("%d tenant rows, want %d:\n%s", len(rows), tc.rows, got)
			}
			if tc.more != "" && !strings.Contains(got, "\n"+tc.more+"\n") {
				t.Errorf("no %q line:\n%s", tc.more, got)
			}
			if tc.more == "" && strings.Contains(got, "  … ") && tc.rows > 0 {
				t.Errorf("a \"more\" line where all fit:\n%s", got)
			}
			for _, s := range tc.has {
				if !strings.Contains(got, s) {
					t.Errorf("lacks %q:\n%s", s, got)
				}
			}
			for _, s := range tc.lacks {
				if strings.Contains(got, s) {
					t.Errorf("has %q:\n%s", s, got)
				}
			}
		})
	}
}

func TestRenderGoldenCrowded(t *testing.T) {
	got := renderView(t, crowded(), View{Width: 80, Height: 24, Stale: "12s old"})
	checkWidth(t, got, 80)
	golden(t, "frame-crowded-80x24.txt", got)
}

func TestRenderSortFilterLimit(t *testing.T) {
	s := sample()
	s.Tenants = append(s.Tenants, api.TenantState{ID: "vm:web-1", Kind: "vm", Name: "web-1", CPU: 5, Throttled: true, Duty: 0.8})
	for _, tc := range []struct {
		name string
		v    View
		want []string
		more string
	}{
		{"score", View{}, []string{"noisy-neighbo…", "batch/thrash", "web-1", "db-primary", "idle"}, ""},
		{"cpu", View{Sort: SortCPU}, []string{"web-1", "batch/thrash", "db-primary", "noisy-neighbo…", "idle"}, ""},
		{"throttle", View{Sort: SortThrottle}, []string{"noisy-neighbo…", "web-1", "batch/thrash", "db-primary", "idle"}, ""},
		{"name", View{Sort: SortName}, []string{"batch/thrash", "db-primary", "idle", "noisy-neighbo…", "web-1"}, ""},
		{"substring", View{Filter: "a"}, []string{"noisy-neighbo…", "batch/thrash", "db-primary"}, ""},
		{"substring ignores case", View{Filter: "DB"}, []string{"db-primary"}, ""},
		{"glob crosses /", View{Filter: "batch*"}, []string{"batch/thrash"}, ""},
		{"glob is anchored", View{Filter: "*-?", Sort: SortName}, []string{"web-1"}, ""},
		{"glob class", View{Filter: "[di]*", Sort: SortName}, []string{"db-primary", "idle"}, ""},
		{"limit", View{Limit: 2}, []string{"noisy-neighbo…", "batch/thrash"}, "  … 3 more"},
		{"limit after filter", View{Limit: 1, Filter: "i", Sort: SortName}, []string{"db-primary"}, "  … 2 more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.v.Width = 80
			got := renderView(t, s, tc.v)
			if rows := tenantRows(got); strings.Join(rows, " ") != strings.Join(tc.want, " ") {
				t.Errorf("rows %q, want %q:\n%s", rows, tc.want, got)
			}
			if tc.more != "" && !strings.Contains(got, "\n"+tc.more+"\n") {
				t.Errorf("no %q:\n%s", tc.more, got)
			}
			if tc.v.Filter != "" && !strings.Contains(got, fmt.Sprintf("match %q", tc.v.Filter)) {
				t.Errorf("title does not say the filter:\n%s", got)
			}
		})
	}
	got := renderView(t, s, View{Width: 80, Filter: "nothing-like-it"})
	if !strings.Contains(got, `TENANTS  5, none match "nothing-like-it"`) {
		t.Errorf("no match:\n%s", got)
	}
}

func TestParseSortFilter(t *testing.T) {
	for in, want := range map[string]SortKey{"": SortScore, "score": SortScore, "CPU": SortCPU, "throttle": SortThrottle, "name": SortName} {
		if got, err := ParseSort(in); err != nil || got != want {
			t.Errorf("ParseSort(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseSort("memory"); err == nil || !strings.Contains(err.Error(), "want one of score, cpu, throttle, name") {
		t.Errorf("ParseSort(memory): %v", err)
	}
	if _, err := ParseFilter("web[1"); err == nil || !strings.Contains(err.Error(), `--filter "web[1"`) {
		t.Errorf("bad glob: %v", err)
	}
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"", "anything", true}, {"web", "my-web-1", true}, {"web", "db", false},
		{"web-*", "web-1", true}, {"web-*", "my-web-1", false}, {"web-?", "web-12", false},
		{"[!w]*", "web", false}, {"[!w]*", "db", true}, {"a.b*", "axb", false}, {"a.b*", "a.bc", true},
		{"pod:*/*", "pod:ns/name", true},
	} {
		m, err := ParseFilter(tc.pattern)
		if err != nil || m(tc.name) != tc.want {
			t.Errorf("%q matches %q = %v (%v), want %v", tc.pattern, tc.name, err == nil && m(tc.name), err, tc.want)
		}
	}
}

// Stale data says so in words: without colour, on a narrow terminal, and
// in the live footer.
func TestRenderStale(t *testing.T) {
	for _, width := range []int{120, 40} {
		got := renderView(t, sample(), View{Width: width, Stale: "12s old"})
		if !strings.HasPrefix(got, "crosstalk  STALE: 12s old") {
			t.Errorf("width %d: no STALE mark first in the header:\n%s", width, got)
		}
		checkWidth(t, got, width)
	}
	if got := renderView(t, sample(), View{Width: 120}); strings.Contains(got, "STALE") {
		t.Errorf("fresh data marked stale:\n%s", got)
	}
	for _, tc := range []struct {
		age  time.Duration
		want string
	}{{time.Second, ""}, {3 * time.Second, ""}, {3500 * time.Millisecond, "3.5s old"}, {time.Hour + 1500*time.Millisecond, "1h0m2s old"}} {
		if got := staleness(sample(), t0.Add(tc.age)); got != tc.want {
			t.Errorf("age %s: %q, want %q", tc.age, got, tc.want)
		}
	}
	if got := staleness(api.State{}, t0); got != "" {
		t.Errorf("no state: %q", got)
	}
}

func TestRunOnceStaleAndFitted(t *testing.T) {
	src := &source{}
	src.set(crowded())
	addr, _ := agentServer(t, src)
	var out bytes.Buffer
	err := Run(context.Background(), &out, Options{Addr: addr, Once: true, Width: func() int { return 80 }, Height: func() int { return 24 },
		Now: func() time.Time { return t0.Add(12 * time.Second) }})
	if err != nil {
		t.Fatal(err)
	}
	if want := renderView(t, crowded(), View{Width: 80, Height: 24, Stale: "12s old"}); out.String() != want {
		t.Errorf("--once frame:\n%s\nwant:\n%s", out.String(), want)
	}
}

// The live view fills the terminal and no more, the footer included, and
// ends without a newline, which would scroll the header away.
func TestRunLiveFitsTerminal(t *testing.T) {
	src := &source{}
	src.set(crowded())
	addr, _ := agentServer(t, src)
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, &out, Options{
			Addr: addr, Refresh: 10 * time.Millisecond, Sort: SortName, Filter: "web-*",
			Width: func() int { return 80 }, Height: func() int { return 24 },
			Now: func() time.Time { return t0.Add(10 * time.Second) },
		})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(out.String(), clearHome) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	frame := strings.Split(out.String(), clearHome)[1]
	if n := strings.Count(frame, "\n") + 1; n != 24 {
		t.Errorf("frame of %d lines on a 24-line terminal:\n%s", n, frame)
	}
	if strings.HasSuffix(frame, "\n") {
		t.Error("frame ends with a newline")
	}
	for _, want := range []string{"crosstalk  STALE: 10s old", "updated 10s ago  STALE", "web-00", `(40 match "web-*")`} {
		if !strings.Contains(frame, want) {
			t.Errorf("lacks %q:\n%s", want, frame)
		}
	}
}

func TestSuspectsInFewLines(t *testing.T) {
	ss := []api.Suspect{
		{Name: "a", Score: 0.5, Reasons: []string{"r1", "r2"}},
		{Name: "b", Score: 0.9, Reasons: []string{"r3"}},
		{Name: "c", Score: 0.1},
	}
	for _, tc := range []struct {
		lines int
		want  string
	}{
		{-1, "\nSUSPECTS\n  b  score 0.90\n    - r3\n  a  score 0.50\n    - r1\n    - r2\n  c  score 0.10\n"},
		{6, "\nSUSPECTS\n  b  score 0.90\n    - r3\n  a  score 0.50\n  c  score 0.10\n"},
		{5, "\nSUSPECTS\n  b  score 0.90\n    - r3\n  … 2 more\n"},
		{4, "\nSUSPECTS\n  b  score 0.90\n  … 2 more\n"},
		{3, "\nSUSPECTS\n  … 3 more\n"},
		{0, ""},
	} {
		f := &frame{width: 80}
		f.suspects(ss, tc.lines)
		if got := f.b.String(); got != tc.want {
			t.Errorf("%d lines: got\n%q\nwant\n%q", tc.lines, got, tc.want)
		}
	}
}
