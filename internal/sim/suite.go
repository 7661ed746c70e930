package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/humanize"
	"github.com/crosstalk-project/crosstalk/internal/lab"
)

// SuitePolicies are the policies each suite run simulates: the victim's
// slowdown under none is what crosstalk is measured against.
var SuitePolicies = []string{PolicyNone, PolicyCrosstalk}

// SuiteScore is one run's score: the lab suite's, with what the simulator
// drew besides.
type SuiteScore struct {
	lab.RunScore
	PMU      bool    `json:"pmu"`
	Noise    float64 `json:"noise"`
	Rate     string  `json:"rate,omitempty"`
	Duration float64 `json:"duration_seconds"`
}

// SuiteResult is a simulated suite: every run's score and the totals,
// overall, by run class and, for polluter runs, by polluter kind, timing
// and placement, and for all runs by PMU.
type SuiteResult struct {
	Seed       int64                               `json:"seed"`
	Policies   []string                            `json:"policies"`
	Runs       []SuiteScore                        `json:"runs"`
	Total      lab.Aggregate                       `json:"total"`
	ByClass    map[string]lab.Aggregate            `json:"by_class"`
	Breakdowns map[string]map[string]lab.Aggregate `json:"breakdowns"`
	// SimulatedSeconds is the virtual time of the runs (once each, not per
	// policy); WallSeconds what the suite took.
	SimulatedSeconds float64 `json:"simulated_seconds"`
	WallSeconds      float64 `json:"wall_seconds"`
}

// Breakdown names: the lab's, and the runs with a PMU and without.
const (
	ByPolluter  = lab.ByPolluter
	ByTiming    = lab.ByTiming
	ByPlacement = lab.ByPlacement
	ByPMU       = "pmu"
)

// SuiteCases draws the cases of seeds seed … seed+runs-1.
func SuiteCases(seed int64, runs int) ([]*SuiteCase, error) {
	if runs < 1 {
		return nil, errors.New("suite: --runs must be at least 1")
	}
	out := make([]*SuiteCase, 0, runs)
	for i := range runs {
		c, err := GenerateSuiteCase(seed + int64(i))
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// SuitePlanned is the virtual time RunSuite simulates for the cases.
func SuitePlanned(cases []*SuiteCase) time.Duration {
	var d time.Duration
	for _, c := range cases {
		d += time.Duration(len(SuitePolicies)) * c.Scenario.Duration
		if c.Without != nil {
			d += c.Without.Duration
		}
	}
	return d
}

// SuiteOptions adjust a suite.
type SuiteOptions struct {
	Log *slog.Logger
	// Progress is told of each second of virtual time simulated.
	Progress func(time.Duration)
	// Report is called with each run's score as it ends.
	Report func(SuiteScore)
	// Now is the wall clock, for the suite's elapsed time.
	Now func() time.Time
	// Agent, when set, edits each run's agent configuration before it is
	// built (Options.Agent).
	Agent func(*agent.Config)
}

// RunSuite simulates each case under none and crosstalk (and, for polluter
// runs, none without the polluter, for its harm) and scores it. A run that
// fails is scored as an error and the suite goes on; a cancelled ctx stops
// it.
func RunSuite(ctx context.Context, cases []*SuiteCase, o SuiteOptions) (*SuiteResult, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	began := o.Now()
	out := &SuiteResult{Policies: slices.Clone(SuitePolicies), Runs: []SuiteScore{}}
	if len(cases) > 0 {
		out.Seed = cases[0].Seed
	}
	startup := &lab.StartupOnce{}
	for _, c := range cases {
		opt := Options{Policies: SuitePolicies, Log: o.Log, Progress: o.Progress, Agent: o.Agent, Startup: startup}
		res, err := Run(ctx, c.Scenario, opt)
		var without *Result
		if err == nil && c.Without != nil {
			opt.Policies = []string{PolicyNone}
			without, err = Run(ctx, c.Without, opt)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var sc SuiteScore
		if err != nil {
			sc = c.errorScore(err)
		} else {
			sc = ScoreSuiteRun(c, res, without)
		}
		out.Runs = append(out.Runs, sc)
		out.SimulatedSeconds += sc.Duration
		if o.Report != nil {
			o.Report(sc)
		}
	}
	out.Summarize()
	out.WallSeconds = round(o.Now().Sub(began).Seconds(), 1)
	return out, nil
}

func (c *SuiteCase) errorScore(err error) SuiteScore {
	sc := c.describe()
	sc.Error = err.Error()
	return sc
}

// describe is the score of the case before scoring: what was drawn.
func (c *SuiteCase) describe() SuiteScore {
	seed := c.Seed
	return SuiteScore{RunScore: lab.RunScore{Name: c.Scenario.Name, Repetition: 1, Seed: &seed, Class: c.Class,
		Victim: c.Victim, Polluter: c.Polluter, Timing: c.Timing, Placement: c.Placement, Bystanders: slices.Clone(c.Bystanders),
		VictimSlowdown: map[string]*float64{}, VictimSlowdownAfter: map[string]*float64{}},
		PMU: c.PMU, Noise: c.Noise, Rate: c.Rate, Duration: c.Scenario.Duration.Seconds()}
}

// ScoreSuiteRun scores a case from its result (none and crosstalk) and,
// for a polluter run, the result of none without the polluter (nil: harm
// not measured). The crosstalk policy's actions are scored as the lab
// suite scores them: the polluter convicted while it ran, the reaction and
// release, the innocents (the victim and bystanders) capped for proofs and
// convicted.
func ScoreSuiteRun(c *SuiteCase, res, without *Result) SuiteScore {
	sc := c.describe()
	ct, ok := res.Policy(PolicyCrosstalk)
	if !ok {
		sc.Error = "no " + PolicyCrosstalk + " policy result to score"
		return sc
	}
	for _, pr := range res.Results {
		sc.VictimSlowdown[pr.Policy] = pr.VictimSlowdown
	}
	in := lab.Attribution{Phase: c.Scenario.Duration.Seconds(), Events: c.Events}
	for _, t := range c.Scenario.Resolved() {
		if t.Role == RolePolluter {
			in.Guilty = append(in.Guilty, t.Name)
		} else {
			in.Innocents = append(in.Innocents, t.Name)
		}
	}
	for _, a := range ct.Actions {
		in.Actions = append(in.Actions, lab.Action{T: a.T, Tenant: a.Tenant, Kind: a.Kind, Detail: a.Reason, Quota: a.Quota})
	}
	// The simulator keeps no timeline of the victim: its slowdown after
	// the first action is not measured.
	lab.ScoreAttribution(&sc.RunScore, in)
	if without != nil {
		none, _ := res.Policy(PolicyNone)
		alone, _ := without.Policy(PolicyNone)
		if none != nil && alone != nil && none.VictimSlowdown != nil && alone.VictimSlowdown != nil && *alone.VictimSlowdown > 0 {
			h := round(*none.VictimSlowdown / *alone.VictimSlowdown, 3)
			sc.Harm = &h
			sc.Harmful = h >= lab.HarmThreshold
		}
	}
	return sc
}

// Summarize fills the totals from the runs.
func (r *SuiteResult) Summarize() {
	all := make([]lab.RunScore, len(r.Runs))
	for i, s := range r.Runs {
		all[i] = s.RunScore
	}
	r.Total = lab.Summarize(all)
	r.ByClass = map[string]lab.Aggregate{}
	for _, class := range []string{lab.ClassPolluter, lab.ClassHarmful, lab.ClassControl} {
		r.ByClass[class] = lab.Summarize(r.filter(func(s SuiteScore) bool {
			return s.Class == class || class == lab.ClassHarmful && s.Class == lab.ClassPolluter && s.Harmful
		}))
	}
	var polluter []SuiteScore
	for _, s := range r.Runs {
		if s.Class == lab.ClassPolluter {
			polluter = append(polluter, s)
		}
	}
	score := func(s SuiteScore) lab.RunScore { return s.RunScore }
	r.Breakdowns = map[string]map[string]lab.Aggregate{
		ByPolluter:  lab.Breakdown(polluter, score, func(s SuiteScore) string { return s.Polluter }, SuitePolluters),
		ByTiming:    lab.Breakdown(polluter, score, func(s SuiteScore) string { return s.Timing }, SuiteTimings),
		ByPlacement: lab.Breakdown(polluter, score, func(s SuiteScore) string { return s.Placement }, SuitePlacements),
		ByPMU:       lab.Breakdown(r.Runs, score, func(s SuiteScore) string { return onOff(s.PMU) }, []string{"on", "off"}),
	}
}

func (r *SuiteResult) filter(keep func(SuiteScore) bool) []lab.RunScore {
	var out []lab.RunScore
	for _, s := range r.Runs {
		if keep(s) {
			out = append(out, s.RunScore)
		}
	}
	return out
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// SuiteRunLine is one run in a line.
func SuiteRunLine(s SuiteScore) string {
	what := "control"
	if s.Class == lab.ClassPolluter {
		what = fmt.Sprintf("%s %s %s (%s)", s.Polluter, s.Timing, s.Placement, s.Rate)
	}
	what += fmt.Sprintf(" vs %s, pmu %s, %d bystanders", s.Victim, onOff(s.PMU), len(s.Bystanders))
	if s.Error != "" {
		return fmt.Sprintf("%-9s %s: error: %s", s.Name, what, firstLine(s.Error))
	}
	line := fmt.Sprintf("%-9s %-16s %s", s.Name, s.Verdict(), what)
	if s.Class == lab.ClassPolluter {
		line += fmt.Sprintf(" | cap %s convict %s release %s", optSecs(s.FirstCapSeconds), optSecs(s.ConvictionSeconds), optSecs(s.ReleaseSeconds))
		if s.Harm != nil {
			line += " harm " + humanize.Ratio(*s.Harm)
		}
	}
	line += fmt.Sprintf(" | innocents proof %d (%s) convicted %d (%s) | victim none %s crosstalk %s", s.InnocentsProofCapped,
		humanize.Seconds(s.InnocentProofCapSeconds, 2), s.InnocentsConvicted, humanize.Seconds(s.InnocentConvictedSeconds, 2),
		humanize.Opt(s.VictimSlowdown[PolicyNone], humanize.Ratio), humanize.Opt(s.VictimSlowdown[PolicyCrosstalk], humanize.Ratio))
	return line
}

func optSecs(v *float64) string {
	if v == nil {
		return humanize.Dash
	}
	return humanize.Seconds(*v, 2)
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// WriteSuiteText prints a suite: with verbose a line a run, then the
// attribution totals (overall, by class, by polluter kind, timing,
// placement and PMU) and the victim's slowdown by class.
func WriteSuiteText(w io.Writer, r *SuiteResult, verbose bool) error {
	var b strings.Builder
	if verbose {
		for _, s := range r.Runs {
			b.WriteString(SuiteRunLine(s) + "\n")
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "%d simulated runs from seed %d (%s of virtual time in %s)\n\n", len(r.Runs), r.Seed,
		humanize.Seconds(r.SimulatedSeconds, 0), humanize.Seconds(r.WallSeconds, 1))
	rows := []lab.AttributionRow{lab.AttributionRowOf("all", r.Total)}
	for _, class := range []string{lab.ClassPolluter, lab.ClassHarmful, lab.ClassControl} {
		rows = append(rows, lab.AttributionRowOf(class, r.ByClass[class]))
	}
	for _, g := range []struct {
		name string
		keys []string
	}{{ByPolluter, SuitePolluters}, {ByTiming, SuiteTimings}, {ByPlacement, SuitePlacements}, {ByPMU, []string{"on", "off"}}} {
		for _, k := range g.keys {
			if a, ok := r.Breakdowns[g.name][k]; ok {
				rows = append(rows, lab.AttributionRowOf(g.name+" "+k, a))
			}
		}
	}
	if err := lab.WriteAttributionTable(&b, "RUNS", rows); err != nil {
		return err
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VICTIM SLOWDOWN\tNONE\tCROSSTALK")
	for _, row := range rows[:4] {
		a := row.Aggregate
		fmt.Fprintf(tw, "%s\t%s\t%s\n", row.Name, dist(a.VictimSlowdown[PolicyNone]), dist(a.VictimSlowdown[PolicyCrosstalk]))
	}
	tw.Flush()
	fmt.Fprintf(&b, "\nsimulated: the production agent against the contention model, not a real host.\n"+
		"median / p95 over runs; recall = polluter runs whose polluter was convicted (throttled while it ran), with its 95%% Wilson interval;\n"+
		"false conv. = runs with an innocent convicted; polluter, timing and placement rows count polluter runs only;\n"+
		"harmful = polluter runs whose victim was at least %.1f× worse off with the polluter than without it, under no policy.\n", lab.HarmThreshold)
	_, err := io.WriteString(w, b.String())
	return err
}

func dist(d lab.Dist) string {
	if d.Median == nil || d.P95 == nil {
		return humanize.Dash
	}
	return humanize.Ratio(*d.Median) + " / " + humanize.Ratio(*d.P95)
}
