package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/lab"
	"github.com/crosstalk-project/crosstalk/internal/resultdir"
)

// A result written by lab run's --out and rendered again by lab report gives
// the run's own reports: the same text on stdout, the same report.html.
func TestLabReportRendersWhatTheRunWrote(t *testing.T) {
	var res lab.Result
	b, err := os.ReadFile("../lab/testdata/report-result.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	res.Meta = &lab.Meta{Kind: lab.KindRun, Version: "v0.0.0-test", Commit: "abc123", Date: time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC),
		Command: "crosstalk lab run buslock-burst", Kernel: "6.1.0", Hostname: "lab-host-01", CPUModel: "Xeon Gold 6338", CPUs: 64}
	orig := t.TempDir()
	if _, err := resultdir.Write(orig, labRunFiles(&res)...); err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := lab.WriteText(&text, &res); err != nil {
		t.Fatal(err)
	}
	again := filepath.Join(t.TempDir(), "new", "dir")
	stdout, stderr, err := run(t, "lab", "report", filepath.Join(orig, "result.json"), "--out", again)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if stdout != text.String() {
		t.Errorf("lab report's text differs from the run's:\n%s\n---\n%s", stdout, text.String())
	}
	if !strings.Contains(stderr, filepath.Join(again, "report.html")) {
		t.Errorf("lab report does not say where the report went: %q", stderr)
	}
	sameFile(t, filepath.Join(orig, "report.html"), filepath.Join(again, "report.html"))
}

func sameFile(t *testing.T, want, got string) {
	t.Helper()
	w, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	g, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w, g) {
		t.Errorf("%s differs from %s (%d vs %d bytes)", got, want, len(g), len(w))
	}
}

// Each kind of result is known and gets its own report's name; anything
// else is refused with a reason.
func TestLabReportKinds(t *testing.T) {
	suite := filepath.Join(t.TempDir(), "suite")
	sr := &lab.SuiteResult{Policies: []string{"none", "crosstalk"}, Runs: []lab.RunScore{{Name: "gen-1", Repetition: 1, Class: lab.ClassControl, Victim: "server"}}}
	sr.Summarize()
	if _, err := resultdir.Write(suite, suiteFiles(sr)...); err != nil {
		t.Fatal(err)
	}
	notResult := filepath.Join(t.TempDir(), "other.json")
	os.WriteFile(notResult, []byte(`{"name": "buslock", "tenants": []}`), 0o644)
	tests := []struct {
		file, html, text, err string
	}{
		{file: "../lab/testdata/report-result.json", html: "report.html", text: "scenario buslock-burst"},
		{file: "../lab/testdata/report-matrix.json", html: "matrix.html", text: "victim slowdown (rows: victims"},
		{file: filepath.Join(suite, "suite.json"), html: "suite.html", text: "gen-1"},
		{file: notResult, err: "not a lab result"},
		{file: "../../go.mod", err: "not a lab result"},
		{file: "no-such.json", err: "no such file"},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			dir := t.TempDir()
			stdout, _, err := run(t, "lab", "report", tt.file, "--out", dir)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("err = %v, want one with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(stdout, tt.text) {
				t.Errorf("text lacks %q:\n%s", tt.text, stdout)
			}
			if st, err := os.Stat(filepath.Join(dir, tt.html)); err != nil || st.Size() == 0 {
				t.Errorf("%s not written: %v", tt.html, err)
			}
		})
	}
}

func TestBuildCommit(t *testing.T) {
	info := func(settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) { return &debug.BuildInfo{Settings: settings}, true }
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	tests := []struct {
		name, linked string
		info         func() (*debug.BuildInfo, bool)
		want         string
	}{
		{"linker flags win", "abc123", info(debug.BuildSetting{Key: "vcs.revision", Value: "fff"}), "abc123"},
		{"the checkout's revision", "unknown", info(debug.BuildSetting{Key: "vcs.revision", Value: "0123abcd"}), "0123abcd"},
		{"a dirty checkout", "", info(debug.BuildSetting{Key: "vcs.revision", Value: "0123abcd"}, debug.BuildSetting{Key: "vcs.modified", Value: "true"}), "0123abcd-dirty"},
		{"no revision stamped", "unknown", info(), ""},
		{"no build info", "", none, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := buildCommit(tt.linked, tt.info); got != tt.want {
				t.Errorf("buildCommit = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCommandLine(t *testing.T) {
	root := NewRoot(Build{}, &bytes.Buffer{}, &bytes.Buffer{})
	cmd, rest, err := root.Find([]string{"lab", "run"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.ParseFlags(append(rest, "--policy", "none,crosstalk", "--duration", "2s", "--out", "/tmp/my report")); err != nil {
		t.Fatal(err)
	}
	got := commandLine(cmd, []string{"my scenario.yaml"})
	want := "crosstalk lab run --duration=2s --out='/tmp/my report' --policy=none,crosstalk 'my scenario.yaml'"
	if got != want {
		t.Errorf("commandLine = %s\nwant          %s", got, want)
	}
}

// The bar draws on a terminal only; where it draws, it shows what it
// measures and how far along it is.
func TestProgress(t *testing.T) {
	var buf bytes.Buffer
	g := &globals{errOut: &buf}
	if p := g.progress(time.Minute, "lab buslock", false); p != nil {
		t.Error("a progress bar on an error output that is not a terminal")
	}
	p := newProgress(&buf, 10*time.Second, "lab buslock")
	p.add(5 * time.Second)
	time.Sleep(150 * time.Millisecond) // past the bar's redraw throttle
	p.add(time.Second)
	if out := buf.String(); !strings.Contains(out, "lab buslock") || !strings.Contains(out, "60%") {
		t.Errorf("the bar does not show its description and 60%%: %q", out)
	}
	p.finish()
	var nilBar *progress // where nothing is drawn, every method is a no-op
	nilBar.add(time.Second)
	nilBar.clear()
	nilBar.finish()
	if newProgress(&buf, 0, "empty") != nil {
		t.Error("a bar over no planned time")
	}
}

// A short real lab run, written with --out and rendered again by lab
// report: the same text and the same HTML, and the result says what made it.
func TestLabReportLive(t *testing.T) {
	liveSuite(t)
	orig := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stdout, stderr, err := runCtx(ctx, "lab", "run", "buslock", "--duration", "1s", "--repetitions", "2",
		"--policy", "none,crosstalk", "--out", orig, "--log-level", "warn")
	if err != nil {
		t.Fatalf("lab run: %v\n%s", err, stderr)
	}
	again := t.TempDir()
	restdout, _, err := run(t, "lab", "report", filepath.Join(orig, "result.json"), "--out", again)
	if err != nil {
		t.Fatal(err)
	}
	if restdout != stdout {
		t.Errorf("lab report's text differs from the run's:\n%s\n---\n%s", restdout, stdout)
	}
	sameFile(t, filepath.Join(orig, "report.html"), filepath.Join(again, "report.html"))

	s, err := lab.LoadSaved(filepath.Join(orig, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	m := s.Run.Meta
	if m == nil || m.Kind != lab.KindRun || m.Version != "v0.0.0-test" || m.Commit != "abc123" || m.Kernel == "" || m.CPUs < 1 ||
		!strings.HasPrefix(m.Command, "crosstalk lab run --duration=1s") || time.Since(m.Date) > 5*time.Minute {
		t.Errorf("meta = %+v", m)
	}
	for _, want := range []string{"crosstalk  v0.0.0-test (commit abc123)", "kernel     " + m.Kernel} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the text report lacks %q:\n%s", want, stdout)
		}
	}
	for _, pr := range s.Run.Results {
		if pr.Policy == "crosstalk" {
			t.Logf("crosstalk policy: %d contention samples, %d actions", len(pr.Timeline.Contention), len(pr.Actions))
		}
	}
}
