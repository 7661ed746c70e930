package lab

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

func testMeta(kind string) *Meta {
	return &Meta{Kind: kind, Version: "v1.2.3", Commit: "0123abc", Date: time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC),
		Command: "crosstalk lab run buslock --duration=2s", Kernel: "6.1.0-18-amd64", Hostname: "lab-host-01",
		CPUModel: "AMD EPYC 7B13", CPUs: 2}
}

func suiteFixture() *SuiteResult {
	seed := int64(7)
	sr := &SuiteResult{Meta: testMeta(KindSuite), Seed: 7, Policies: []string{"none", "crosstalk"}, Runs: []RunScore{
		{Name: "gen-7", Repetition: 1, Seed: &seed, Class: ClassPolluter, Victim: "chase-4MiB", Polluter: "splitlock", Timing: TimingBeforeAgent, Placement: PlaceAlone,
			Convicted: true, FirstCapSeconds: fp(0.8), ConvictionSeconds: fp(1.2), InnocentsProofCapped: 1, InnocentProofCapSeconds: 0.25,
			VictimSlowdown: map[string]*float64{"none": fp(6), "crosstalk": fp(1.5)}, VictimSlowdownAfter: map[string]*float64{"none": fp(7), "crosstalk": fp(1.1)}},
		{Name: "gen-8", Repetition: 1, Class: ClassControl, Timing: TimingWhole, Victim: "server",
			VictimSlowdown: map[string]*float64{"none": fp(1), "crosstalk": fp(1.2)}},
	}}
	sr.Summarize()
	return sr
}

// renders is a result's text and HTML reports.
func renders(t *testing.T, s *Saved) (text, html string) {
	t.Helper()
	var tb, hb bytes.Buffer
	if err := s.WriteText(&tb); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteHTML(&hb); err != nil {
		t.Fatal(err)
	}
	return tb.String(), hb.String()
}

// A result saved as JSON and read back renders the very reports the result
// itself did: nothing a report shows is lost on the way to disk.
func TestSavedRendersAsTheOriginal(t *testing.T) {
	run := reportResult()
	run.Meta = testMeta(KindRun)
	run.Results[1].Timeline.Contention = []Sample{{T: 0.5, Value: 1}, {T: 1.5, Value: 3.2}, {T: 2.5, Value: 1.4}}
	m := reportMatrix()
	m.Meta = testMeta(KindMatrix)
	legacy := reportResult() // saved before results carried meta
	tests := []struct {
		name     string
		original *Saved
		kind     string
		report   string
	}{
		{"run", &Saved{Kind: KindRun, Run: run}, KindRun, "report.html"},
		{"run without meta", &Saved{Kind: KindRun, Run: legacy}, KindRun, "report.html"},
		{"matrix", &Saved{Kind: KindMatrix, Matrix: m}, KindMatrix, "matrix.html"},
		{"suite", &Saved{Kind: KindSuite, Suite: suiteFixture()}, KindSuite, "suite.html"},
		{"visibility", &Saved{Kind: KindVisibility, Visibility: visibilityFixture()}, KindVisibility, "visibility.html"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v any
			switch {
			case tt.original.Run != nil:
				v = tt.original.Run
			case tt.original.Matrix != nil:
				v = tt.original.Matrix
			case tt.original.Visibility != nil:
				v = tt.original.Visibility
			default:
				v = tt.original.Suite
			}
			b, err := json.MarshalIndent(v, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "saved.json")
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			back, err := LoadSaved(path)
			if err != nil {
				t.Fatal(err)
			}
			if back.Kind != tt.kind || back.ReportName() != tt.report {
				t.Errorf("kind %q, report %q; want %q, %q", back.Kind, back.ReportName(), tt.kind, tt.report)
			}
			wantText, wantHTML := renders(t, tt.original)
			gotText, gotHTML := renders(t, back)
			if gotText != wantText {
				t.Errorf("text differs from the original's:\n%s\n---\n%s", gotText, wantText)
			}
			if gotHTML != wantHTML {
				t.Errorf("HTML differs from the original's (%d vs %d bytes)", len(gotHTML), len(wantHTML))
			}
		})
	}
}

// A suite saved before suites broke their runs down is broken down from
// its runs when read back, and renders as a new one.
func TestSavedSuiteWithoutBreakdowns(t *testing.T) {
	sr := suiteFixture()
	b, err := json.Marshal(sr)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc, "breakdowns")
	old, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseSaved(old)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Suite.Breakdowns, sr.Breakdowns) || len(s.Suite.Breakdowns[ByPolluter]) != 1 {
		t.Errorf("breakdowns read back %+v, want %+v", s.Suite.Breakdowns, sr.Breakdowns)
	}
	text, _ := renders(t, s)
	wantAll(t, text, "polluter splitlock", "timing before-agent", "placement alone")
}

func TestParseSavedRejects(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"not JSON", "name: buslock\n", "not a lab result"},
		{"an array", `[{"scenario": "x"}]`, "not a lab result"},
		{"another document", `{"scenario": "x", "tenants": []}`, "neither a lab run's fields"},
		{"an unknown kind", `{"meta": {"kind": "sim-run"}, "scenario": "x"}`, `kind "sim-run"`},
		{"a run of the wrong shape", `{"scenario": "x", "solo": {}, "results": {"policy": "none"}}`, "reading a lab-run result"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSaved([]byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one with %q", err, tt.want)
			}
		})
	}
}

func TestHostMeta(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"proc/sys/kernel/osrelease": "6.1.0-18-amd64\n",
		"proc/sys/kernel/hostname":  "lab-host-01\n",
		"proc/cpuinfo": "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\n" +
			"processor\t: 1\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n",
	}
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	got := HostMeta(h)
	want := Meta{Kernel: "6.1.0-18-amd64", Hostname: "lab-host-01", CPUModel: "AMD EPYC 7B13", CPUs: 2}
	if got != want {
		t.Errorf("HostMeta = %+v, want %+v", got, want)
	}

	// What a tree lacks stays empty.
	empty, err := host.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	if got := HostMeta(empty); got != (Meta{}) {
		t.Errorf("HostMeta of an empty tree = %+v", got)
	}
}

// Every report starts with where its result came from, in text and HTML.
func TestReportsShowMeta(t *testing.T) {
	run := reportResult()
	run.Meta = testMeta(KindRun)
	run.Meta.Command = `crosstalk lab run '<b>&x'`
	m := reportMatrix()
	m.Meta = testMeta(KindMatrix)
	wants := []string{"v1.2.3 (commit 0123abc)", "2026-03-14 09:26:53 UTC", "6.1.0-18-amd64", "lab-host-01", "AMD EPYC 7B13, 2 CPUs"}
	for _, s := range []*Saved{{Kind: KindRun, Run: run}, {Kind: KindMatrix, Matrix: m}, {Kind: KindSuite, Suite: suiteFixture()}} {
		t.Run(s.Kind, func(t *testing.T) {
			text, html := renders(t, s)
			if !strings.HasPrefix(text, "crosstalk  ") {
				t.Errorf("the text report does not start with its meta:\n%s", text)
			}
			head, _, _ := strings.Cut(html, "<h2>")
			for _, w := range wants {
				if !strings.Contains(text, w) {
					t.Errorf("text lacks %q:\n%s", w, text)
				}
				if !strings.Contains(head, w) {
					t.Errorf("the HTML report's head lacks %q", w)
				}
			}
			checkPage(t, html)
		})
	}
}

func TestPlanned(t *testing.T) {
	s := &Scenario{Phase: 2 * time.Second, Repetitions: 3, Tenants: []Tenant{
		{Name: "v", Role: RoleVictim}, {Name: "p", Role: RolePolluter}, {Name: "b", Role: RoleBystander},
	}}
	quiet := &Scenario{Phase: 2 * time.Second, Repetitions: 1, Tenants: []Tenant{{Name: "v", Role: RoleVictim}}}
	tests := []struct {
		name string
		s    *Scenario
		opt  Options
		want time.Duration
	}{
		// 3 solo + 2 co-located phases of 2 s, 3 times.
		{"every tenant solo", s, Options{Policies: []string{"none", "crosstalk"}}, 30 * time.Second},
		// 1 solo + 2 co-located + 1 without the polluter.
		{"the suite's phases", s, Options{Policies: []string{"none", "crosstalk"}, SoloVictimOnly: true, WithoutPolluter: true}, 24 * time.Second},
		{"no polluter to leave out", quiet, Options{Policies: []string{"none"}, WithoutPolluter: true}, 4 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Planned(tt.s, tt.opt); got != tt.want {
				t.Errorf("Planned = %s, want %s", got, tt.want)
			}
		})
	}
	if got := SuitePlanned([]SuiteCase{{Scenario: s}, {Scenario: quiet}}, 2, Options{Policies: []string{"none", "crosstalk"}}); got != 2*(24+6)*time.Second {
		t.Errorf("SuitePlanned = %s, want 60s", got)
	}
	mo := MatrixOptions{Victims: []string{"chase", "stream"}, Polluters: []string{"splitlock", "stream", "cachethrash"}, Phase: time.Second}
	if got := mo.Planned(); got != 8*time.Second {
		t.Errorf("matrix Planned = %s, want 8s (2 solo, 6 pairs)", got)
	}
}

// The crosstalk policy's contention is drawn with its actions; a policy
// without probes has no such chart, and repeated values show their spread.
func TestReportContentionAndSpread(t *testing.T) {
	r := reportResult()
	r.Results[1].Timeline.Contention = []Sample{{T: 0.5, Value: 1.02}, {T: 1.5, Value: 3.2}, {T: 2.5, Value: 1.4}}
	tr := r.Results[1].Tenants["victim"]
	tr.Values = []float64{150, 160, 171}
	r.Results[1].Tenants["victim"] = tr
	page := render(t, r)
	svgs := checkPage(t, page)
	var contention []string
	for _, s := range svgs {
		if strings.Contains(s, "probe contention over time") {
			contention = append(contention, s)
		}
	}
	if len(contention) != 1 || !strings.Contains(contention[0], "crosstalk: probe contention") {
		t.Fatalf("want one contention chart, the crosstalk policy's; got %d", len(contention))
	}
	c := contention[0]
	for _, w := range []string{"1.50s: 3.20×", `class="action"`, "1.50s: throttle polluter", "1.0 = quiet", "polluter starts"} {
		if !strings.Contains(c, w) {
			t.Errorf("the contention chart lacks %q", w)
		}
	}
	if !strings.Contains(page, `160<span class="spread">150–171</span>`) {
		t.Error("the victim's co-located value under crosstalk does not show its spread over repetitions")
	}
	if strings.Count(page, `class="spread"`) != 1 {
		t.Errorf("spreads shown where a value was not repeated: %d", strings.Count(page, `class="spread"`))
	}
}

func TestMetaLines(t *testing.T) {
	tests := []struct {
		name string
		m    *Meta
		want string
	}{
		{"none", nil, ""},
		{"all", testMeta(KindRun), "crosstalk  v1.2.3 (commit 0123abc)\ndate       2026-03-14 09:26:53 UTC\ncommand    crosstalk lab run buslock --duration=2s\n" +
			"host       lab-host-01\nkernel     6.1.0-18-amd64\ncpu        AMD EPYC 7B13, 2 CPUs\n\n"},
		{"a count without a model", &Meta{Kind: KindRun, CPUs: 4}, "cpu        4 CPUs\n\n"},
		{"a model without a count", &Meta{Kind: KindRun, CPUModel: "ARMv8"}, "cpu        ARMv8\n\n"},
		{"a commit without a version", &Meta{Kind: KindRun, Commit: "0123abc"}, "crosstalk  (commit 0123abc)\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			writeMetaText(&b, tt.m)
			if b.String() != tt.want {
				t.Errorf("got\n%q\nwant\n%q", b.String(), tt.want)
			}
		})
	}
}

// A polluter on the victim's CPU gets a cpu load in its place, on its CPUs
// and with its timing; one on other CPUs does not (its CPU use alone does
// not slow the victim).
func TestCPUStandIn(t *testing.T) {
	parse := func(polluterCPUs string) *Scenario {
		t.Helper()
		s, err := Parse([]byte(`name: shared
phase: 4s
tenants:
  - {name: victim, role: victim, load: chase, args: ["--size", "4MiB"], cpus: "1"}
  - {name: bus, role: polluter, load: splitlock, args: ["--rate", "1000"], cpus: "`+polluterCPUs+`", start: 1s, stop: 3s, pause: 1500ms, resume: 2s}
  - {name: svc, role: bystander, command: ["sh", "-c", "echo ops 5"], metric: {name: ops, regex: "ops (\\d+)", direction: higher}, cpus: "0"}
`), "shared")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := parse("0-1")
	got, ok := cpuStandIn(s)
	if !ok || len(got) != 3 {
		t.Fatalf("cpuStandIn = %d tenants, %v; want 3, true", len(got), ok)
	}
	in := got[1]
	if in.Role != RolePolluter || in.Load != "cpu" || in.Args != nil || in.Command != nil || in.Metric != nil ||
		in.CPUSet().String() != "0-1" || in.Start != time.Second || in.Stop != 3*time.Second || in.Pause != 1500*time.Millisecond || in.Resume != 2*time.Second {
		t.Errorf("stand-in = %+v", in)
	}
	if got[0].Load != "chase" || got[2].Command == nil || s.Tenants[1].Load != "splitlock" {
		t.Errorf("the other tenants or the scenario changed: %+v, %+v", got, s.Tenants[1])
	}
	if name, _, _ := in.MetricInfo(); name != "ops_per_sec" {
		t.Errorf("stand-in's metric = %q, want the cpu load's", name)
	}
	opt := Options{Policies: []string{"none", "crosstalk"}, SoloVictimOnly: true, WithoutPolluter: true, CPUStandIn: true}
	// 1 solo + 2 co-located + 1 without the polluter + 1 with the stand-in.
	if p := Planned(s, opt); p != 20*time.Second {
		t.Errorf("Planned = %s, want 20s", p)
	}
	alone := parse("0")
	if _, ok := cpuStandIn(alone); ok {
		t.Error("a stand-in for a polluter that does not share the victim's CPUs")
	}
	if p := Planned(alone, opt); p != 16*time.Second {
		t.Errorf("Planned alone = %s, want 16s", p)
	}
}
