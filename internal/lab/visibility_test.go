package lab

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// readings makes n ticks of one reading of kind on CPU 1 at the given
// latencies, in turn, with no readings at a proof's pace.
func readings(kind string, n int, ns ...float64) []probeTick {
	out := make([]probeTick, n)
	for i := range out {
		out[i] = probeTick{Reading: []sense.ProbeReading{{CPU: 1, Kind: kind, Ns: ns[i%len(ns)]}}}
	}
	return out
}

// withProofPace gives every tick precheckLLC LLC readings at ns, read at a
// proof's pace.
func withProofPace(ts []probeTick, ns float64) []probeTick {
	for i := range ts {
		for range precheckLLC {
			ts[i].ProofLLC = append(ts[i].ProofLLC, sense.ProbeReading{CPU: 1, Kind: sense.ProbeLLC, Ns: ns})
		}
	}
	return ts
}

func TestJudgeVisibilityCountsWhatTheAgentWouldCount(t *testing.T) {
	// Quiet: DRAM about 300 ns (±1%), LLC about 12 ns (±2%), lock 3 ns.
	quiet := append(append(readings(sense.ProbeDRAM, 20, 297, 303), readings(sense.ProbeLLC, 20, 11.8, 12.2)...), readings(sense.ProbeLock, 20, 3)...)
	beside := map[string][]probeTick{
		// A storm in every reading: DRAM 7×, LLC 12×.
		"storm": append(readings(sense.ProbeDRAM, 20, 2100), readings(sense.ProbeLLC, 20, 144)...),
		// A storm in 3 readings of 20 (a tenth or more): sometimes.
		"bursts": readings(sense.ProbeDRAM, 20, 2100, 300, 300, 300, 300, 300, 300),
		// DRAM steadily 1.2×: under the 1.5× threshold, never counted.
		"stream": readings(sense.ProbeDRAM, 20, 360),
		// LLC 2.5×: under the LLC's own 3× threshold.
		"cache": readings(sense.ProbeLLC, 20, 30),
		// The locked add alone: it reads, but proves nobody.
		"lock-only": append(readings(sense.ProbeLock, 20, 30), readings(sense.ProbeDRAM, 20, 300)...),
		// The LLC walk 5× at the interval's pace, quiet at a proof's: the
		// agent would not prove on it.
		"llc-interval-only": withProofPace(readings(sense.ProbeLLC, 20, 60), 12.2),
		// The same, and 5× at a proof's pace too.
		"llc-both": withProofPace(readings(sense.ProbeLLC, 20, 60), 60),
	}
	loads := []string{"storm", "bursts", "stream", "cache", "lock-only", "llc-interval-only", "llc-both"}
	v := judgeVisibility(judge.Thresholds{}, quiet, loads, beside)

	if v.Thresholds[sense.ProbeDRAM] != 1.5 || v.Thresholds[sense.ProbeLLC] != 3 {
		t.Errorf("thresholds = %v, want the judge's defaults (dram 1.5, llc 3)", v.Thresholds)
	}
	if len(v.Quiet) != 3 {
		t.Fatalf("quiet levels = %+v, want dram, llc and lock", v.Quiet)
	}
	for _, q := range v.Quiet {
		if q.Readings != 20 {
			t.Errorf("quiet %s: %d readings, want 20", q.Kind, q.Readings)
		}
		if q.Kind == sense.ProbeDRAM && (q.Ns < 296 || q.Ns > 304) {
			t.Errorf("quiet dram level %.1f ns, want about 300", q.Ns)
		}
	}
	want := map[string]struct {
		seen, by string
		kind     string
		over     int
		median   [2]float64
	}{
		"storm":             {SeenOften, sense.ProbeDRAM, sense.ProbeDRAM, 20, [2]float64{6.5, 7.5}},
		"bursts":            {SeenSometimes, sense.ProbeDRAM, sense.ProbeDRAM, 3, [2]float64{0.98, 1.02}},
		"stream":            {SeenNo, "", sense.ProbeDRAM, 0, [2]float64{1.15, 1.25}},
		"cache":             {SeenNo, "", sense.ProbeLLC, 0, [2]float64{2.4, 2.6}},
		"lock-only":         {SeenNo, "", sense.ProbeLock, 20, [2]float64{9, 11}},
		"llc-interval-only": {SeenNo, "", sense.ProbeLLC, 0, [2]float64{4.8, 5.2}},
		"llc-both":          {SeenOften, sense.ProbeLLC, sense.ProbeLLC, 20, [2]float64{4.8, 5.2}},
	}
	if len(v.Loads) != len(loads) {
		t.Fatalf("%d loads, want %d", len(v.Loads), len(loads))
	}
	for i, ls := range v.Loads {
		if ls.Load != loads[i] {
			t.Fatalf("load %d = %s, want %s (in the order given)", i, ls.Load, loads[i])
		}
		w := want[ls.Load]
		if ls.Seen != w.seen || ls.By != w.by {
			t.Errorf("%s: seen %q by %q, want %q by %q", ls.Load, ls.Seen, ls.By, w.seen, w.by)
		}
		var ks *KindSight
		for j := range ls.Kinds {
			if ls.Kinds[j].Kind == w.kind {
				ks = &ls.Kinds[j]
			}
		}
		if ks == nil {
			t.Errorf("%s: no %s readings in %+v", ls.Load, w.kind, ls.Kinds)
			continue
		}
		if ks.Readings != 20 || ks.Over != w.over {
			t.Errorf("%s %s: %d of %d over, want %d of 20", ls.Load, w.kind, ks.Over, ks.Readings, w.over)
		}
		if ks.Median < w.median[0] || ks.Median > w.median[1] || ks.P90 < ks.Median {
			t.Errorf("%s %s: median %.2f, p90 %.2f, want the median in %v and the p90 no lower", ls.Load, w.kind, ks.Median, ks.P90, w.median)
		}
		switch ls.Load {
		case "llc-interval-only":
			if ks.QuietAtProofPace != 20 || ks.ProofPaceMedian < 0.98 || ks.ProofPaceMedian > 1.05 {
				t.Errorf("%s: %d quiet at a proof's pace, proof-pace median %.2f; want 20 and about 1", ls.Load, ks.QuietAtProofPace, ks.ProofPaceMedian)
			}
		case "llc-both":
			if ks.QuietAtProofPace != 0 || ks.ProofPaceMedian < 4.8 {
				t.Errorf("%s: %d quiet at a proof's pace, proof-pace median %.2f; want none and about 5", ls.Load, ks.QuietAtProofPace, ks.ProofPaceMedian)
			}
		}
	}
}

func TestJudgeVisibilityUsesTheConfiguredThresholds(t *testing.T) {
	quiet := readings(sense.ProbeDRAM, 20, 297, 303)
	beside := map[string][]probeTick{"stream": readings(sense.ProbeDRAM, 20, 360)}
	v := judgeVisibility(judge.Thresholds{Ratio: 1.15}, quiet, []string{"stream"}, beside)
	if got := v.Loads[0]; got.Seen != SeenOften || got.By != sense.ProbeDRAM {
		t.Errorf("with a 1.15× DRAM threshold a steady 1.2× reads %q by %q, want often by dram", got.Seen, got.By)
	}
}

func TestNearestRank(t *testing.T) {
	for _, c := range []struct {
		sorted []float64
		q      float64
		want   float64
	}{
		{nil, 0.5, 0},
		{[]float64{3}, 0.9, 3},
		{[]float64{1, 2, 3, 4}, 0.5, 2},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.9, 9},
		{[]float64{1, 2}, 0, 1},
	} {
		if got := nearestRank(c.sorted, c.q); got != c.want {
			t.Errorf("nearestRank(%v, %v) = %v, want %v", c.sorted, c.q, got, c.want)
		}
	}
}

func TestVisibilityOptionsCheck(t *testing.T) {
	allowed := cpuset.Of(0, 1)
	ok := VisibilityOptions{Loads: []string{"splitlock", "cpu"}, Phase: 3 * time.Second, Every: 125 * time.Millisecond, LoadCPUs: cpuset.Of(0), ProbeCPUs: cpuset.Of(1)}
	if err := ok.check(allowed); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(*VisibilityOptions)
		want string
	}{
		{"unknown load", func(o *VisibilityOptions) { o.Loads = []string{"nope"} }, `unknown load "nope"`},
		{"long split locks", func(o *VisibilityOptions) { o.Phase = 20 * time.Second }, "allowed for split locks"},
		{"too few readings", func(o *VisibilityOptions) { o.Every = time.Second }, "fewer than four readings"},
		{"load CPU not allowed", func(o *VisibilityOptions) { o.LoadCPUs = cpuset.Of(5) }, "load CPUs 5 are not all allowed"},
		{"no probe CPU", func(o *VisibilityOptions) { o.ProbeCPUs = cpuset.Set{} }, "no CPU left for the probe"},
		{"probe CPU not allowed", func(o *VisibilityOptions) { o.ProbeCPUs = cpuset.Of(7) }, "probe CPUs 7 are not all allowed"},
		{"overlap", func(o *VisibilityOptions) { o.ProbeCPUs = cpuset.Of(0, 1) }, "overlap the load CPUs"},
		{"empty command", func(o *VisibilityOptions) { o.Commands = []string{" "} }, "an empty command"},
		{"a command named as a load", func(o *VisibilityOptions) { o.Commands = []string{"cpu"} }, "given twice, or named as a load"},
		{"a command twice", func(o *VisibilityOptions) { o.Commands = []string{"stress-ng --cpu 1", "stress-ng --cpu 1"} }, "given twice"},
		{"a load twice", func(o *VisibilityOptions) { o.Loads = []string{"cpu", "cpu"} }, "load cpu given twice"},
		{"long command", func(o *VisibilityOptions) {
			o.Loads, o.Commands, o.Phase = []string{"stream"}, []string{"stress-ng --cpu 1"}, 20*time.Second
		}, "allowed for a command"},
	} {
		o := ok
		c.edit(&o)
		err := o.check(allowed)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to say %q", c.name, err, c.want)
		}
	}
	// A long phase is fine without split locks.
	long := ok
	long.Loads, long.Phase = []string{"stream"}, 20*time.Second
	if err := long.check(allowed); err != nil {
		t.Errorf("20 s of stream: %v", err)
	}
}

func TestVisibilityDefaults(t *testing.T) {
	vo := VisibilityOptions{Config: agent.Defaults()}.withDefaults()
	if len(vo.Loads) != len(allLoads()) || vo.Phase != 3*time.Second || vo.Every != agent.Defaults().Interval/4 || vo.LoadCPUs.String() != "0" {
		t.Errorf("defaults = %+v", vo)
	}
	if vo := (VisibilityOptions{Commands: []string{"stress-ng --stream 1"}}).withDefaults(); len(vo.Loads) != 0 {
		t.Errorf("with a command, no built-in load by default: %v", vo.Loads)
	}
	if got := (VisibilityOptions{Loads: []string{"cpu", "stream"}, Phase: time.Second}).Planned(); got != 4*time.Second {
		t.Errorf("planned %s, want 4s (quiet before and after, two loads)", got)
	}
}

func TestWriteVisibilityText(t *testing.T) {
	quiet := append(readings(sense.ProbeDRAM, 20, 297, 303), readings(sense.ProbeLLC, 20, 11.8, 12.2)...)
	beside := map[string][]probeTick{
		"splitlock":   append(readings(sense.ProbeDRAM, 20, 2100), readings(sense.ProbeLLC, 20, 144)...),
		"stream":      append(readings(sense.ProbeDRAM, 20, 360), readings(sense.ProbeLLC, 20, 12)...),
		QuietAgain:    append(readings(sense.ProbeDRAM, 20, 300), readings(sense.ProbeLLC, 20, 12)...),
		"cachethrash": append(readings(sense.ProbeDRAM, 20, 300), withProofPace(readings(sense.ProbeLLC, 20, 60), 12)...),
	}
	v := judgeVisibility(judge.Thresholds{}, quiet, []string{"splitlock", "stream", "cachethrash", QuietAgain}, beside)
	v.Phase, v.Every, v.LoadCPUs, v.ProbeCPUs = 3, 0.125, "0", "1"
	var b bytes.Buffer
	if err := WriteVisibilityText(&b, v); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"the agent's canary probe on CPU 1, each load on CPU 0 for 3.0s, a reading every 125ms",
		"quiet (no load): dram 297.6 ns, llc 11.8 ns", // the baselines follow quieter readings quickly
		"CONTENDED READINGS (dram 1.5×, llc 3×)",
		"dram 20 of 20, llc 20 of 20",
		"often (dram)",
		"(quiet again)  –",
		"llc 0 of 20 (+20 quiet at a proof's pace)",
		"LLC (median / p90 (proof pace))",
		"a polluter not seen here can be caught on this host only by a PMU",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "stream ") && !strings.HasSuffix(strings.TrimSpace(line), " no") {
			t.Errorf("stream at 1.2× should read as not seen: %q", line)
		}
	}
	if err := WriteVisibilityText(&b, nil); err == nil {
		t.Error("a nil result printed without an error")
	}
}

// TestLiveVisibility reads the real probe beside a cpu load, a short
// split-lock loop (1 s: split locks slow the whole host) and a command, in
// real cgroups, and leaves nothing behind. What the probe reads depends on the host, so
// it checks the readings are there, not what they say.
func TestLiveVisibility(t *testing.T) {
	h, l := liveHost(t)
	probeCPU, loadCPU := twoCPUs(t, h)
	if probeCPU == loadCPU {
		t.Skip("one CPU: the probe needs a CPU the loads do not run on")
	}
	cfg := agent.Defaults()
	vo := VisibilityOptions{Loads: []string{"cpu", "splitlock"}, Commands: []string{"sleep 30"}, Phase: time.Second, Every: 100 * time.Millisecond,
		LoadCPUs: mustCPUs(t, loadCPU), ProbeCPUs: mustCPUs(t, probeCPU), Config: cfg}
	v, err := RunVisibility(context.Background(), vo, Options{Host: h, Self: crosstalkBin, Policies: []string{"none"}})
	if err != nil {
		t.Fatal(err)
	}
	assertClean(t, h, l, os.Getpid())
	if len(v.Quiet) != 3 {
		t.Errorf("quiet levels %+v, want dram, llc and lock", v.Quiet)
	}
	if len(v.Loads) != 4 || v.Loads[0].Load != "cpu" || v.Loads[1].Load != "splitlock" || v.Loads[2].Load != "sleep 30" || v.Loads[3].Load != QuietAgain {
		t.Fatalf("loads %+v, want cpu, splitlock, the command (stopped at its phase's end), then the quiet reading again", v.Loads)
	}
	if v.Loads[2].Role != RoleCommand || v.Loads[1].Role != RolePolluter {
		t.Errorf("roles %q and %q, want %q and %q", v.Loads[2].Role, v.Loads[1].Role, RoleCommand, RolePolluter)
	}
	for _, ls := range v.Loads {
		if len(ls.Kinds) != 3 {
			t.Errorf("%s: kinds %+v, want dram, llc and lock", ls.Load, ls.Kinds)
		}
		for _, k := range ls.Kinds {
			// 1 s less the 250 ms start-up, a reading every 100 ms.
			if k.Readings < 3 || k.Median <= 0 || k.P90 < k.Median {
				t.Errorf("%s %s: %+v", ls.Load, k.Kind, k)
			}
		}
	}
	if v.Meta == nil || v.Meta.Kind != KindVisibility {
		t.Errorf("meta %+v", v.Meta)
	}
}

// visibilityFixture is a result as RunVisibility returns it.
func visibilityFixture() *Visibility {
	quiet := append(readings(sense.ProbeDRAM, 20, 297, 303), readings(sense.ProbeLLC, 20, 11.8, 12.2)...)
	beside := map[string][]probeTick{
		"splitlock": append(readings(sense.ProbeDRAM, 20, 2100), withProofPace(readings(sense.ProbeLLC, 20, 144), 140)...),
		"<b>&x":     readings(sense.ProbeDRAM, 20, 300, 300, 300, 700),
		QuietAgain:  append(readings(sense.ProbeDRAM, 20, 300), readings(sense.ProbeLLC, 20, 12)...),
	}
	v := judgeVisibility(judge.Thresholds{}, quiet, []string{"splitlock", "<b>&x", QuietAgain}, beside)
	v.Meta = testMeta(KindVisibility)
	v.Phase, v.Every, v.LoadCPUs, v.ProbeCPUs = 3, 0.125, "0", "1"
	return v
}

func TestWriteVisibilityReport(t *testing.T) {
	var b bytes.Buffer
	if err := WriteVisibilityReport(&b, visibilityFixture()); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	checkPage(t, page)
	wantAll(t, page, "what the agent's probe sees", "lab-host-01", "7.06× / 7.06×", "12.16× / 12.16× (11.83×)", "dram 20 of 20", "often (dram)",
		"sometimes (dram)", "&lt;b&gt;&amp;x", "(quiet again)", "contended readings (dram 1.5×, llc 3×)", "a polluter not seen here")
	if err := WriteVisibilityReport(&b, nil); err == nil {
		t.Error("nil result: no error")
	}
	var empty bytes.Buffer
	if err := WriteVisibilityReport(&empty, &Visibility{}); err != nil || !strings.Contains(empty.String(), "No data") {
		t.Errorf("an empty result: %v\n%s", err, empty.String())
	}
}

func TestFindProgram(t *testing.T) {
	installed := func(name string) (string, error) {
		if name == "stress-ng" || name == "sh" {
			return "/usr/bin/" + name, nil
		}
		return "", errors.New("not found")
	}
	for _, c := range []struct {
		line string
		want string // "" = accepted
	}{
		{"stress-ng --stream 1 -q", ""},
		{"  stress-ng --cache 1", ""},
		{"nosuchprog --x", `nosuchprog is not installed here`},
		{"FOO=1 nosuchprog", ""},             // an assignment: the shell's business
		{"while :; do nosuchprog; done", ""}, // shell syntax
		{"exec nosuchprog", ""},
		{"", "an empty command"},
	} {
		err := findProgram(c.line, installed)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v", c.line, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: err = %v, want it to say %q", c.line, err, c.want)
		}
	}
}
