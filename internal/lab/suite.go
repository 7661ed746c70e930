package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/humanize"
)

// SuiteCase is one scenario of a suite: generated (Gen set) or given.
type SuiteCase struct {
	Scenario *Scenario
	Gen      *Generated
}

// SuitePlan says what a suite runs.
type SuitePlan struct {
	Seed     int64
	Runs     int // generated runs, with seeds Seed … Seed+Runs-1
	CPUs     cpuset.Set
	Programs Programs
	Builtins bool     // add the built-in scenarios
	Files    []string // add these scenarios (built-in names or files)
	// Phase overrides every scenario's phase length (0: keep), scaling its
	// offsets with it.
	Phase time.Duration
}

// SuiteCases draws and loads the suite's scenarios, each with one
// repetition (the suite repeats runs itself, scoring each).
func SuiteCases(p SuitePlan) ([]SuiteCase, error) {
	if err := p.Programs.checkPolluters(); err != nil {
		return nil, fmt.Errorf("suite: %w", err)
	}
	var out []SuiteCase
	for i := range p.Runs {
		g, err := Generate(p.Seed+int64(i), p.CPUs, p.Programs)
		if err != nil {
			return nil, err
		}
		out = append(out, SuiteCase{Scenario: g.Scenario, Gen: g})
	}
	var names []string
	if p.Builtins {
		names = Builtins()
	}
	for _, n := range append(names, p.Files...) {
		s, err := Load(n)
		if err != nil {
			return nil, err
		}
		out = append(out, SuiteCase{Scenario: s})
	}
	for i := range out {
		c := &out[i]
		if p.Phase > 0 {
			s, err := c.Scenario.WithPhase(p.Phase)
			if err != nil {
				return nil, fmt.Errorf("%s at %s phases: %w", c.Scenario.Name, p.Phase, err)
			}
			c.Scenario = s
			if c.Gen != nil {
				g := *c.Gen
				g.Scenario = s
				c.Gen = &g
			}
		}
		c.Scenario.Repetitions = 1
	}
	if len(out) == 0 {
		return nil, errors.New("suite: nothing to run (give --runs, --builtins or scenarios)")
	}
	return out, nil
}

// SuitePlanned is the measured time RunSuite spends on the cases with these
// options.
func SuitePlanned(cases []SuiteCase, repetitions int, opt Options) time.Duration {
	opt = suiteOptions(opt)
	var d time.Duration
	for _, c := range cases {
		d += Planned(c.Scenario, opt)
	}
	return time.Duration(max(repetitions, 1)) * d
}

// suiteOptions are the lab's options as the suite runs each case: only the
// victim's solo phase, and under no policy the phases that measure the
// polluter's harm (left out, and a cpu load in its place).
func suiteOptions(opt Options) Options {
	opt.SoloVictimOnly = true
	opt.WithoutPolluter = slices.Contains(opt.Policies, "none")
	opt.CPUStandIn = opt.WithoutPolluter
	return opt
}

// RunSuite runs every case repetitions times, each run with only the
// victim's solo phase, scores each run as it ends (report is called with
// it) and returns the scores with their totals. A run that fails is scored
// as an error and the suite goes on; a cancelled ctx stops it.
func RunSuite(ctx context.Context, cases []SuiteCase, repetitions int, opt Options, report func(RunScore)) (*SuiteResult, error) {
	if !slices.Contains(opt.Policies, AttributionPolicy) {
		return nil, fmt.Errorf("suite: the %s policy must be among the policies: its actions are what the suite scores", AttributionPolicy)
	}
	repetitions = max(repetitions, 1)
	opt = suiteOptions(opt)
	out := &SuiteResult{Meta: opt.stamp(KindSuite), Policies: opt.Policies, Runs: []RunScore{}}
	if opt.Host != nil {
		out.Host, _ = opt.Host.ReadString("/proc/sys/kernel/hostname")
	}
	for _, c := range cases {
		if c.Gen != nil && len(out.Runs) == 0 {
			out.Seed = c.Gen.Seed
		}
		for rep := 1; rep <= repetitions; rep++ {
			o := opt
			if opt.JournalDir != "" { // each run's journals in a directory of its own
				o.JournalDir = filepath.Join(opt.JournalDir, fmt.Sprintf("%s-%d", c.Scenario.Name, rep))
			}
			res, err := Run(ctx, c.Scenario, o)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			var sc RunScore
			if err != nil {
				sc = RunScore{Name: c.Scenario.Name, Class: ClassControl, Error: err.Error()}
				if slices.ContainsFunc(c.Scenario.Tenants, func(t Tenant) bool { return t.Role == RolePolluter }) {
					sc.Class = ClassPolluter
				}
			} else {
				sc = ScoreRun(c.Scenario, res)
			}
			sc.Repetition = rep
			c.describe(&sc)
			out.Runs = append(out.Runs, sc)
			if report != nil {
				report(sc)
			}
		}
	}
	out.Summarize()
	return out, nil
}

// describe copies what was drawn into the score; for a scenario given by
// name or file, the victim's program and the polluters' (joined by "+"
// where there are several), so that its runs count in the breakdown by
// polluter too.
func (c SuiteCase) describe(sc *RunScore) {
	if c.Gen == nil {
		if c.Scenario == nil {
			return
		}
		for _, t := range c.Scenario.Tenants {
			switch {
			case t.Role == RoleVictim && sc.Victim == "":
				sc.Victim = t.Program()
			case t.Role == RolePolluter && sc.Polluter == "":
				sc.Polluter = t.Program()
			case t.Role == RolePolluter:
				sc.Polluter += "+" + t.Program()
			}
		}
		return
	}
	g := c.Gen
	sc.Seed = ptrInt(g.Seed)
	sc.Victim, sc.Polluter, sc.Timing, sc.Placement = g.Victim, g.Polluter, g.Timing, g.Placement
	sc.Bystanders = slices.Clone(g.Bystanders)
}

func ptrInt(v int64) *int64 { return &v }

// WriteSuiteRun prints one run's line (no header).
func WriteSuiteRun(w io.Writer, r RunScore) error {
	_, err := fmt.Fprintln(w, suiteRunLine(r))
	return err
}

func suiteRunLine(r RunScore) string {
	name := r.Name
	if r.Repetition > 1 {
		name += fmt.Sprintf("#%d", r.Repetition)
	}
	what := r.Class
	if r.Polluter != "" {
		what = strings.Join(slices.DeleteFunc([]string{r.Polluter, r.Timing, r.Placement}, func(s string) bool { return s == "" }), " ")
	} else if r.Timing != "" {
		what += " " + r.Timing
	}
	if r.Victim != "" {
		what += " vs " + r.Victim
	}
	if r.Error != "" {
		return fmt.Sprintf("%-10s %-44s error: %s", name, what, firstLine(r.Error))
	}
	line := fmt.Sprintf("%-10s %-44s %-16s", name, what, r.Verdict())
	if r.Class == ClassPolluter {
		early := ""
		if r.AlreadyRunning {
			early = " (already running)"
		}
		if r.Polluters > 1 {
			line += fmt.Sprintf(" %d of %d polluters convicted,", r.PollutersConvicted, r.Polluters)
		}
		cap := fmtOptSecs(r.FirstCapSeconds)
		if f, c := r.FirstCapFromProcessSeconds, r.FirstCapSeconds; f != nil && c != nil && *f-*c >= 0.005 {
			cap += " (" + secs2(*f) + " from its process start)"
		}
		line += fmt.Sprintf(" cap %s convict %s release %s%s", cap, fmtOptSecs(r.ConvictionSeconds), fmtOptSecs(r.ReleaseSeconds), early)
		if r.Harm != nil {
			line += " | harm " + fmtSlowdown(r.Harm)
		}
		if r.HarmBeyondCPU != nil {
			line += " (beyond its CPU use " + fmtSlowdown(r.HarmBeyondCPU) + ")"
		}
	}
	line += fmt.Sprintf(" | innocents proof %d (%s) convicted %d (%s)", r.InnocentsProofCapped, secs2(r.InnocentProofCapSeconds), r.InnocentsConvicted, secs2(r.InnocentConvictedSeconds))
	var sds []string
	for _, p := range slices.Sorted(maps.Keys(r.VictimSlowdown)) {
		s := p + " " + fmtSlowdown(r.VictimSlowdown[p])
		if v := r.VictimSlowdownAfter[p]; v != nil {
			s += " (after " + fmtSlowdown(v) + ")"
		}
		sds = append(sds, s)
	}
	if len(sds) > 0 {
		line += " | victim " + strings.Join(sds, ", ")
	}
	return line
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// WriteSuiteText prints a suite: a line a run, then the totals overall and
// by class.
func WriteSuiteText(w io.Writer, r *SuiteResult) error {
	var b strings.Builder
	writeMetaText(&b, r.Meta)
	for _, s := range r.Runs {
		b.WriteString(suiteRunLine(s) + "\n")
	}
	b.WriteString("\n")
	rows := r.classRows()
	WriteAttributionTable(&b, "RUNS", append(rows, r.breakdownRows()...))
	fmt.Fprintf(&b, "first cap from the polluters' process starts instead of their onsets: %s\n\n", fmtDist(r.Total.FirstCapFromProcess, secs2))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VICTIM SLOWDOWN\tPOLICY\tWHOLE PHASE\tAFTER FIRST ACTION")
	for _, row := range rows {
		for _, p := range r.Policies {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", row.Name, p, fmtDist(row.Aggregate.VictimSlowdown[p], humanize.Ratio), fmtDist(row.Aggregate.VictimSlowdownAfter[p], humanize.Ratio))
		}
	}
	tw.Flush()
	writeRestoreTable(&b, rows)
	fmt.Fprintf(&b, "\nmedian / p95 over runs; recall = polluter runs whose polluter was convicted; false conv. = runs with an innocent convicted;\npolluter, timing and placement rows count polluter runs only;\nfirst cap and conviction count from a polluter's onset: when its work began, where it said so (a built-in load's start line,\na command's onset line), else its process start;\nharmful = polluter runs whose victim was at least %.1f× worse off with the polluter than without it, under no policy (harm);\nwhere the polluter shares the victim's CPUs, than with a cache-friendly cpu load in its place (harm beyond its CPU use);\nvictim restored = of the polluter runs whose victim no policy slowed %.1f× or more, those the agent acted on,\nand of these, those whose victim after the first action was within %.2f× of its solo level, and of its level with the polluter left out.\n", HarmThreshold, RestoreFrom, RestoredWithin)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeRestoreTable prints the restored victims of each row that has runs
// to restore; nothing when none has.
func writeRestoreTable(b *strings.Builder, rows []AttributionRow) {
	var some []AttributionRow
	for _, row := range rows {
		if row.Aggregate.Restore.Runs > 0 {
			some = append(some, row)
		}
	}
	if len(some) == 0 {
		return
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "VICTIM RESTORED\tNONE ≥ %s\tACTED ON\t≤ %s OF SOLO\t≤ %s WITHOUT POLLUTER\n", humanize.Ratio(RestoreFrom), humanize.Ratio(RestoredWithin), humanize.Ratio(RestoredWithin))
	for _, row := range some {
		r := row.Aggregate.Restore
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", row.Name, r.Runs, r.Acted, fmtOf(r.WithinSolo, r.Acted), fmtOf(r.WithinWithout, r.Measured))
	}
	tw.Flush()
}

// fmtOf writes a count of a total as "5 of 27", a dash when the total is 0.
func fmtOf(k, n int) string {
	if n == 0 {
		return humanize.Dash
	}
	return fmt.Sprintf("%d of %d", k, n)
}

// AttributionRow is one line of the attribution table: a set of runs by
// name, its count (with errors) and its totals.
type AttributionRow struct {
	Name, Runs string
	Aggregate  Aggregate
}

// AttributionRowOf names an aggregate, with its count of runs and errors.
func AttributionRowOf(name string, a Aggregate) AttributionRow {
	n := fmt.Sprint(a.Runs)
	if a.Errors > 0 {
		n += fmt.Sprintf(" (+%d errors)", a.Errors)
	}
	return AttributionRow{Name: name, Runs: n, Aggregate: a}
}

// WriteAttributionTable prints recall and false convictions (with their 95%
// intervals), innocent proof cap-seconds, reaction and release, a row per
// set of runs; heading names the first column.
func WriteAttributionTable(w io.Writer, heading string, rows []AttributionRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tN\tRECALL (95%%)\tFALSE CONV. (95%%)\tINNOCENT PROOF CAP/RUN\tFIRST CAP\tCONVICTION\tRELEASE\n", heading)
	for _, row := range rows {
		a := row.Aggregate
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", row.Name, row.Runs, fmtRate(a.Recall, a.PolluterRuns, a.RecallInterval),
			fmtRate(a.FalseConvictionRate, a.Runs, a.FalseConvictionInterval),
			fmtDist(a.InnocentProofCapSeconds, secs2), fmtDist(a.FirstCap, secs2), fmtDist(a.Conviction, secs2), fmtDist(a.Release, secs2))
	}
	return tw.Flush()
}

// classRows are the totals' lines: all runs, polluter, harmful and control
// runs.
func (r *SuiteResult) classRows() []AttributionRow {
	return []AttributionRow{AttributionRowOf("all", r.Total), AttributionRowOf(ClassPolluter, r.ByClass[ClassPolluter]),
		AttributionRowOf(ClassHarmful, r.ByClass[ClassHarmful]), AttributionRowOf(ClassControl, r.ByClass[ClassControl])}
}

// fmtRate writes a rate as "45% of 22 (27–64%)": the rate, its
// denominator and, when known, its 95% interval.
func fmtRate(v *float64, of int, ci *Interval) string {
	if v == nil {
		return humanize.Dash
	}
	s := fmt.Sprintf("%s of %d", humanize.Percent(*v), of)
	if ci != nil {
		s += fmt.Sprintf(" (%s–%s)", strings.TrimSuffix(humanize.Percent(ci.Low), "%"), humanize.Percent(ci.High))
	}
	return s
}

// fmtDist writes a distribution as "median / p95", each in format.
func fmtDist(d Dist, format func(float64) string) string {
	if d.Median == nil || d.P95 == nil {
		return humanize.Dash
	}
	return format(*d.Median) + " / " + format(*d.P95)
}

func secs2(s float64) string { return humanize.Seconds(s, 2) }
