package lab

import (
	"maps"
	"math"
	"slices"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/load"
)

// AttributionPolicy is the policy whose actions the suite scores: the agent.
const AttributionPolicy = "crosstalk"

// convictionSlack is how long after a polluter went quiet (stopped or
// paused) a conviction of it still counts as one while it ran: the agent
// judges on what it sampled up to a tick ago.
const convictionSlack = 0.5

// RunScore is how the agent did in one run, scored like a classifier.
// Times are seconds; a nil time is something that did not happen.
type RunScore struct {
	Name       string `json:"name"`
	Repetition int    `json:"repetition"`
	// What was drawn, for generated runs (Seed is nil for scenario files).
	Seed       *int64   `json:"seed,omitempty"`
	Class      string   `json:"class"` // ClassPolluter or ClassControl
	Victim     string   `json:"victim,omitempty"`
	Polluter   string   `json:"polluter,omitempty"`
	Timing     string   `json:"timing,omitempty"`
	Placement  string   `json:"placement,omitempty"`
	Bystanders []string `json:"bystanders,omitempty"`
	// Error is why the run could not be scored; the rest is then empty.
	Error string `json:"error,omitempty"`

	// AlreadyRunning: the polluter ran before the agent started, and its
	// reaction times count from the agent's start.
	AlreadyRunning bool `json:"already_running,omitempty"`
	// Convicted: a "throttle" of the polluter while it ran (of every
	// polluter that ran, in a scenario with several).
	Convicted bool `json:"convicted"`
	// Polluters and PollutersConvicted, in a scenario with more than one
	// polluter: how many of them ran, and how many of those were convicted.
	Polluters          int `json:"polluters,omitempty"`
	PollutersConvicted int `json:"polluters_convicted,omitempty"`
	// FirstCapSeconds and ConvictionSeconds run from the polluter's onset
	// (or the agent's start, if later) to its first cap (proof or
	// throttle; the start-up survey's moment with every busy tenant capped
	// is none) and to its conviction; ReleaseSeconds from its early stop or
	// pause to its quota back, when it was convicted before. With several
	// polluters each is the slowest one's, and the first two are nil
	// unless every polluter that ran got one: the time until all of them
	// were acted on. The onset is when its work began, where it said so (a
	// built-in load's start line, a command's onset line), else its
	// process start: a process on a busy CPU takes tenths of a second to
	// begin, and nothing pollutes before that.
	FirstCapSeconds   *float64 `json:"first_cap_seconds"`
	ConvictionSeconds *float64 `json:"conviction_seconds"`
	ReleaseSeconds    *float64 `json:"release_seconds"`
	// FirstCapFromProcessSeconds is FirstCapSeconds counted from the
	// polluter's process start (or the agent's start, if later) instead.
	FirstCapFromProcessSeconds *float64 `json:"first_cap_from_process_seconds,omitempty"`
	// Innocents (the victim and bystanders) capped for proofs and convicted:
	// how many tenants, and their capped seconds summed.
	InnocentsProofCapped     int     `json:"innocents_proof_capped"`
	InnocentProofCapSeconds  float64 `json:"innocent_proof_cap_seconds"`
	InnocentsConvicted       int     `json:"innocents_convicted"`
	InnocentConvictedSeconds float64 `json:"innocent_convicted_seconds"`
	// The victim's slowdown against solo by policy, over the whole phase
	// and from the agent's first action against the polluter on (the same
	// moment applied to every policy's timeline).
	VictimSlowdown      map[string]*float64 `json:"victim_slowdown"`
	VictimSlowdownAfter map[string]*float64 `json:"victim_slowdown_after_first_action"`
	// VictimSlowdownWithoutPolluter is the victim's slowdown against solo
	// with the polluters left out (the none policy, over the phase; nil when
	// not measured): the level that throttling only the polluter can at best
	// bring it back to, its bystanders' share of its CPU included.
	VictimSlowdownWithoutPolluter *float64 `json:"victim_slowdown_without_polluter,omitempty"`
	// Harm is what the polluter itself cost the victim: its slowdown under
	// the none policy over its slowdown with the polluter left out (nil
	// when not measured).
	Harm *float64 `json:"harm,omitempty"`
	// HarmBeyondCPU, where the polluter shares the victim's CPUs, is its
	// harm beyond the CPU time it takes there: the victim's slowdown under
	// the none policy over its slowdown with a cache-friendly cpu load of
	// the polluter's timing in its place (nil when not measured). CPU time
	// on a shared CPU is the scheduler's to share out; what crosstalk
	// answers for is the rest.
	HarmBeyondCPU *float64 `json:"harm_beyond_cpu,omitempty"`
	// Harmful: HarmBeyondCPU where measured, else Harm, at least
	// HarmThreshold.
	Harmful bool `json:"harmful"`
	// Journal is the file that keeps the agent's journal of the run
	// (Options.JournalDir; "" where none was kept): 'crosstalk explain
	// --journal' tells from it why each tenant was proved or left alone.
	Journal string `json:"journal,omitempty"`
}

// HarmThreshold is the harm from which a polluter run counts as harmful:
// the victim at least 20% worse off with the polluter than without it, the
// rest of its neighbours the same. A polluter that harms less on this host
// (a bandwidth loop on a machine whose memory it cannot saturate) is not
// there to be found, and recall over harmful runs says so apart.
const HarmThreshold = 1.2

// ClassHarmful names the polluter runs whose polluter was harmful, in the
// totals.
const ClassHarmful = "harmful"

// Verdict is the run's outcome in a word.
func (r RunScore) Verdict() string {
	switch {
	case r.Error != "":
		return "error"
	case r.Class == ClassControl && r.InnocentsConvicted > 0:
		return "false-conviction"
	case r.Class == ClassControl:
		return "clean"
	case r.Convicted && r.InnocentsConvicted > 0:
		return "caught+false"
	case r.Convicted:
		return "caught"
	}
	return "missed"
}

// window is a span of phase time [from, to).
type window struct{ from, to float64 }

// runWindows is when a tenant ran, from its start/stop/pause/resume events.
func runWindows(events []TenantEvent, tenant string, phase float64) []window {
	var out []window
	open := math.NaN()
	for _, e := range events {
		if e.Tenant != tenant {
			continue
		}
		switch e.Kind {
		case "start", "resume":
			if math.IsNaN(open) {
				open = e.T
			}
		case "stop", "pause":
			if !math.IsNaN(open) {
				out = append(out, window{open, e.T})
				open = math.NaN()
			}
		}
	}
	if !math.IsNaN(open) {
		out = append(out, window{open, phase})
	}
	return out
}

// capSpan is a time a tenant spent capped: from an action with a quota to
// the next action that gave its quota back (or the phase end). Kind is the
// action that began it: "proof" or "throttle".
type capSpan struct {
	kind     string
	from, to float64
}

// capSpans walks a tenant's actions in order. A throttle while capped for a
// proof ends the proof span and begins a conviction span.
func capSpans(actions []Action, tenant string, phase float64) []capSpan {
	var out []capSpan
	var cur *capSpan
	for _, a := range actions {
		if a.Tenant != tenant {
			continue
		}
		switch {
		case a.Quota > 0 && cur == nil:
			cur = &capSpan{kind: a.Kind, from: a.T}
		case a.Quota > 0 && a.Kind == "throttle" && cur.kind != "throttle":
			cur.to = a.T
			out = append(out, *cur)
			cur = &capSpan{kind: "throttle", from: a.T}
		case a.Quota == 0 && cur != nil:
			cur.to = a.T
			out = append(out, *cur)
			cur = nil
		}
	}
	if cur != nil {
		cur.to = max(phase, cur.from)
		out = append(out, *cur)
	}
	return out
}

// Attribution is what scoring a run's attribution needs: the run's length,
// when the policy began, who was guilty and who innocent, when each tenant
// ran (start, stop, pause and resume events) and the policy's actions, all
// in seconds from the run's start. The lab and the simulator both fill it.
type Attribution struct {
	Phase       float64
	PolicyStart float64
	// Guilty are the polluters' names (none in a control run); Innocents
	// the tenants whose conviction is a false one.
	Guilty    []string
	Innocents []string
	Events    []TenantEvent
	Actions   []Action
}

// ScoreAttribution fills sc's attribution scores (class, conviction,
// reaction and release times, innocents capped and convicted) and returns
// the time of the first cap of a guilty tenant (nil: none).
func ScoreAttribution(sc *RunScore, in Attribution) *float64 {
	sc.Class = ClassControl
	if len(in.Guilty) > 0 {
		sc.Class = ClassPolluter
	}
	for _, name := range in.Innocents {
		proofed, convicted := false, false
		for _, sp := range capSpans(in.Actions, name, in.Phase) {
			if sp.kind == "throttle" {
				convicted = true
				sc.InnocentConvictedSeconds += sp.to - sp.from
			} else if sp.kind == "proof" {
				proofed = true
				sc.InnocentProofCapSeconds += sp.to - sp.from
			}
		}
		if proofed {
			sc.InnocentsProofCapped++
		}
		if convicted {
			sc.InnocentsConvicted++
		}
	}
	var firstAction *float64
	ran, convicted := 0, 0
	// A run's first cap and conviction are its slowest polluter's, and
	// only where every polluter that ran had one.
	var firstCaps, fromProcess, convictions []*float64
	for _, name := range in.Guilty {
		ps, ok := scorePolluter(in, name)
		if !ok {
			continue // it never started: nothing to react to
		}
		ran++
		if ps.conviction != nil {
			convicted++
		}
		sc.AlreadyRunning = sc.AlreadyRunning || ps.alreadyRunning
		if ps.firstAction != nil && (firstAction == nil || *ps.firstAction < *firstAction) {
			firstAction = ps.firstAction
		}
		firstCaps, convictions = append(firstCaps, ps.firstCap), append(convictions, ps.conviction)
		fromProcess = append(fromProcess, ps.firstCapFromProcess)
		sc.ReleaseSeconds = slowest(sc.ReleaseSeconds, ps.release)
	}
	sc.FirstCapSeconds, sc.ConvictionSeconds = slowestOfAll(firstCaps), slowestOfAll(convictions)
	sc.FirstCapFromProcessSeconds = slowestOfAll(fromProcess)
	sc.Convicted = ran > 0 && convicted == ran
	if len(in.Guilty) > 1 {
		sc.Polluters, sc.PollutersConvicted = ran, convicted
	}
	return firstAction
}

// ScoreRun scores one run of scenario s from its result: the crosstalk
// policy's actions and timeline for attribution, every policy's victim
// slowdown. Every polluter of s is guilty, every other tenant innocent.
func ScoreRun(s *Scenario, res *Result) RunScore {
	sc := RunScore{Name: s.Name, Class: ClassControl,
		VictimSlowdown: map[string]*float64{}, VictimSlowdownAfter: map[string]*float64{}}
	var ct *PolicyResult
	for i := range res.Results {
		pr := &res.Results[i]
		sc.VictimSlowdown[pr.Policy] = pr.VictimSlowdown
		if pr.Policy == AttributionPolicy {
			ct = pr
		}
	}
	in := Attribution{Phase: s.Phase.Seconds()}
	for _, t := range s.Tenants {
		if t.Role == RolePolluter {
			in.Guilty = append(in.Guilty, t.Name)
		} else {
			in.Innocents = append(in.Innocents, t.Name)
		}
	}
	if ct == nil {
		if len(in.Guilty) > 0 {
			sc.Class = ClassPolluter
		}
		sc.Error = "no " + AttributionPolicy + " policy result to score"
		return sc
	}
	in.PolicyStart, in.Events, in.Actions = ct.PolicyStartSeconds, ct.Timeline.Events, ct.Actions
	sc.Journal = ct.Journal
	firstAction := ScoreAttribution(&sc, in)
	if len(in.Guilty) > 0 {
		none := sc.VictimSlowdown["none"]
		if without := res.VictimSlowdownWithoutPolluter; none != nil && without != nil && *without > 0 {
			sc.VictimSlowdownWithoutPolluter = without
			sc.Harm = ptr(*none / *without)
			sc.Harmful = *sc.Harm >= HarmThreshold
		}
		if standIn := res.VictimSlowdownCPUStandIn; none != nil && standIn != nil && *standIn > 0 {
			sc.HarmBeyondCPU = ptr(*none / *standIn)
			sc.Harmful = *sc.HarmBeyondCPU >= HarmThreshold
		}
	}
	var solo Solo
	if res.Solo != nil {
		solo = res.Solo[res.Victim]
	}
	perOp := false
	for _, t := range s.Tenants {
		if t.Name == res.Victim && t.Load != "" {
			k, _ := load.Lookup(t.Load)
			perOp = k.PerOp
		}
	}
	for _, pr := range res.Results {
		if firstAction == nil || solo.Value == nil {
			sc.VictimSlowdownAfter[pr.Policy] = nil
			continue
		}
		begin := 0.0 // the victim's start, where its first window begins
		if runs := runWindows(pr.Timeline.Events, res.Victim, in.Phase); len(runs) > 0 {
			begin = runs[0].from
		}
		sc.VictimSlowdownAfter[pr.Policy] = meanSlowdownFrom(pr.Timeline.Victim, *firstAction, begin, *solo.Value, solo.Direction, perOp)
	}
	return sc
}

// slowest is the later of two times, either of which may be missing.
func slowest(a, b *float64) *float64 {
	if a == nil || (b != nil && *b > *a) {
		return b
	}
	return a
}

// slowestOfAll is the latest of times that must all be there: nil if any
// is missing, or if there are none.
func slowestOfAll(ts []*float64) *float64 {
	var out *float64
	for _, t := range ts {
		if t == nil {
			return nil
		}
		out = slowest(out, t)
	}
	return out
}

// polluterScore is how the agent did against one polluter.
type polluterScore struct {
	alreadyRunning                bool
	firstCap, conviction, release *float64 // as RunScore's; conviction nil: not convicted
	firstCapFromProcess           *float64 // its first cap from its process start
	firstAction                   *float64 // phase time of its first cap
}

// scorePolluter scores the agent against the polluter name; false if it
// never ran.
func scorePolluter(in Attribution, name string) (polluterScore, bool) {
	var ps polluterScore
	runs := runWindows(in.Events, name, in.Phase)
	if len(runs) == 0 {
		return ps, false
	}
	ref, procRef := onsetIn(in.Events, name, runs[0]), runs[0].from
	if in.PolicyStart > ref {
		ref = in.PolicyStart
		ps.alreadyRunning = true
	}
	procRef = max(procRef, in.PolicyStart)
	var convictedAt *float64
	for _, a := range in.Actions {
		if a.Tenant != name || a.T < runs[0].from {
			continue
		}
		if a.Quota > 0 && ps.firstAction == nil && !isSurveyCap(a) {
			ps.firstAction = ptr(a.T)
			ps.firstCap = ptr(max(0, a.T-ref))
			ps.firstCapFromProcess = ptr(max(0, a.T-procRef))
		}
		if a.Kind == "throttle" && convictedAt == nil && within(runs, a.T, convictionSlack) {
			convictedAt = ptr(a.T)
			ps.conviction = ptr(max(0, a.T-ref))
		}
	}
	if convictedAt == nil {
		return ps, true
	}
	// Release: from the first time it went quiet after its conviction (an
	// early stop or a pause; not the phase end) to its quota back.
	for _, w := range runs {
		quiet := w.to
		if quiet+convictionSlack < *convictedAt || quiet >= in.Phase-0.05 {
			continue
		}
		for _, a := range in.Actions {
			if a.Tenant == name && a.Quota == 0 && a.T >= quiet {
				ps.release = ptr(a.T - quiet)
				break
			}
		}
		break
	}
	return ps, true
}

// onsetIn is when the tenant's work began in its run window w, where it
// said so (an "onset" event in w), else w's start.
func onsetIn(events []TenantEvent, tenant string, w window) float64 {
	for _, e := range events {
		if e.Tenant == tenant && e.Kind == "onset" && e.T >= w.from && e.T <= w.to {
			return e.T
		}
	}
	return w.from
}

// isSurveyCap says whether a is a cap of the agent's start-up survey,
// which caps every busy tenant for a moment to read the quiet level: no
// reaction to a polluter, so neither its first cap nor the victim's "after
// the first action". An innocent's survey caps still count among its
// proof caps, what the agent's proofs cost innocents.
func isSurveyCap(a Action) bool {
	return a.Kind == string(api.KindProof) && a.Detail == agent.SurveyCapReason
}

// within says whether t falls in one of the windows, or up to slack after
// one ends.
func within(ws []window, t, slack float64) bool {
	for _, w := range ws {
		if t >= w.from && t <= w.to+slack {
			return true
		}
	}
	return false
}

// meanSlowdownFrom is the victim's slowdown against solo over the timeline
// samples whose windows begin at phase time from or later (nil without
// any): their mean, weighted by each one's operations where the metric is
// a time per operation (perOp) and every sample knows them, so that it is
// the same measure as the phase's own value over those samples' time.
//
// A sample ends its window: the window began at the sample before it, or
// for the first at begin (the victim's start). The window the first action
// falls in is left out, since it holds the contention before the action as
// well as after (a quarter second of a 5× storm before a proof read 1.09×
// over the rest of a phase that read 1.04× without it).
func meanSlowdownFrom(samples []Sample, from, begin, solo float64, direction string, perOp bool) *float64 {
	var sum, opSum, ops float64
	var n int
	weighted := perOp
	for i, s := range samples {
		start := begin
		if i > 0 {
			start = samples[i-1].T
		}
		if start >= from && finite(s.Value) {
			n++
			sum += s.Value
			opSum += s.Value * float64(s.Ops)
			ops += float64(s.Ops)
			weighted = weighted && s.Ops > 0
		}
	}
	if n == 0 {
		return nil
	}
	mean := sum / float64(n)
	if weighted {
		mean = opSum / ops
	}
	if sd, ok := Slowdown(solo, mean, direction); ok {
		return ptr(sd)
	}
	return nil
}

// Dist is a distribution over runs: how many values, their median and
// 95th percentile (nearest rank: the smallest value at or above 95% of
// them). Median and P95 are nil without values.
type Dist struct {
	N      int      `json:"n"`
	Median *float64 `json:"median"`
	P95    *float64 `json:"p95"`
}

func distOf(vals []float64) Dist {
	d := Dist{N: len(vals)}
	if len(vals) == 0 {
		return d
	}
	s := slices.Clone(vals)
	slices.Sort(s)
	m, _ := median(s)
	d.Median = ptr(m)
	d.P95 = ptr(nearestRank(s, 0.95))
	return d
}

// nearestRank is the q-quantile of sorted by nearest rank: the smallest
// value at or above a q share of them; 0 for none.
func nearestRank(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Interval is a confidence interval of a rate.
type Interval struct {
	Low  float64 `json:"low"`
	High float64 `json:"high"`
}

// Wilson is the 95% Wilson score interval of k successes in n trials (nil
// when n is 0). Unlike the normal approximation it stays inside [0, 1] and
// is not empty at 0 of n or n of n.
func Wilson(k, n int) *Interval {
	if n <= 0 {
		return nil
	}
	const z = 1.959963984540054
	nf, p := float64(n), float64(k)/float64(n)
	den := 1 + z*z/nf
	mid := (p + z*z/(2*nf)) / den
	half := z / den * math.Sqrt(p*(1-p)/nf+z*z/(4*nf*nf))
	iv := &Interval{Low: max(0, mid-half), High: min(1, mid+half)}
	// At 0 of n and n of n the bound is exactly 0 or 1; rounding would
	// print a stray 0.0%.
	if k == 0 {
		iv.Low = 0
	}
	if k == n {
		iv.High = 1
	}
	return iv
}

// Aggregate is the suite's totals over a set of runs.
type Aggregate struct {
	Runs         int `json:"runs"` // scored runs, errors not included
	Errors       int `json:"errors"`
	PolluterRuns int `json:"polluter_runs"`
	ControlRuns  int `json:"control_runs"`
	// Recall: polluter runs whose polluter was convicted, of all polluter
	// runs. FalseConvictionRate: runs where any innocent was convicted, of
	// all runs (control runs included). Nil when there is nothing to divide.
	Recall              *float64 `json:"recall"`
	FalseConvictionRate *float64 `json:"false_conviction_rate"`
	// Their 95% Wilson score intervals: with tens of runs a rate is known
	// only to within tens of percent, and the interval says how far.
	RecallInterval          *Interval `json:"recall_95,omitempty"`
	FalseConvictionInterval *Interval `json:"false_conviction_rate_95,omitempty"`
	// InnocentProofCapSeconds per run; the reactions over the runs where
	// they happened.
	InnocentProofCapSeconds Dist            `json:"innocent_proof_cap_seconds"`
	FirstCap                Dist            `json:"first_cap_seconds"`
	FirstCapFromProcess     Dist            `json:"first_cap_from_process_seconds"`
	Conviction              Dist            `json:"conviction_seconds"`
	Release                 Dist            `json:"release_seconds"`
	VictimSlowdown          map[string]Dist `json:"victim_slowdown"`
	VictimSlowdownAfter     map[string]Dist `json:"victim_slowdown_after_first_action"`
	Restore                 Restore         `json:"restore,omitzero"`
}

// RestoreFrom and RestoredWithin set the bar for a restored victim: in a
// polluter run where no policy slows the victim RestoreFrom or more over
// the phase, it is restored when, from the agent's first action against
// the polluter on, it runs within RestoredWithin of its reference level.
const (
	RestoreFrom    = 1.5
	RestoredWithin = 1.05
)

// Restore counts restored victims. The reference is the victim alone
// (WithinSolo), which a victim whose bystanders share its CPU cannot
// reach by any throttle of the polluter, and the same scenario with the
// polluter left out (WithinWithout), which it can.
type Restore struct {
	// Runs: polluter runs whose victim no policy slowed RestoreFrom or
	// more over the phase. Acted: those where the attribution policy acted
	// on the polluter; the rest were not restored.
	Runs  int `json:"runs"`
	Acted int `json:"acted"`
	// WithinSolo: acted runs whose victim after the first action was within
	// RestoredWithin of its solo level. Measured: acted runs whose level
	// without the polluter was measured; WithinWithout: those within
	// RestoredWithin of it.
	WithinSolo    int `json:"within_solo"`
	Measured      int `json:"measured"`
	WithinWithout int `json:"within_without_polluter"`
}

// count adds one run's victim to r.
func (r *Restore) count(s RunScore) {
	none := s.VictimSlowdown["none"]
	// A score without the victim after the first action at all (the
	// simulator keeps no timeline of it) has nothing to count.
	after, measured := s.VictimSlowdownAfter[AttributionPolicy]
	if s.Class != ClassPolluter || none == nil || *none < RestoreFrom || !measured {
		return
	}
	r.Runs++
	if after == nil {
		return
	}
	r.Acted++
	if *after <= RestoredWithin {
		r.WithinSolo++
	}
	if w := s.VictimSlowdownWithoutPolluter; w != nil && *w > 0 {
		r.Measured++
		if *after / *w <= RestoredWithin {
			r.WithinWithout++
		}
	}
}

// Summarize aggregates run scores.
func Summarize(runs []RunScore) Aggregate {
	a := Aggregate{VictimSlowdown: map[string]Dist{}, VictimSlowdownAfter: map[string]Dist{}}
	var proofSecs, firstCap, fromProcess, conviction, release []float64
	slow, after := map[string][]float64{}, map[string][]float64{}
	convicted, falseRuns := 0, 0
	for _, r := range runs {
		if r.Error != "" {
			a.Errors++
			continue
		}
		a.Runs++
		if r.Class == ClassPolluter {
			a.PolluterRuns++
			if r.Convicted {
				convicted++
			}
		} else {
			a.ControlRuns++
		}
		if r.InnocentsConvicted > 0 {
			falseRuns++
		}
		a.Restore.count(r)
		proofSecs = append(proofSecs, r.InnocentProofCapSeconds)
		for _, v := range []struct {
			p   *float64
			dst *[]float64
		}{{r.FirstCapSeconds, &firstCap}, {r.FirstCapFromProcessSeconds, &fromProcess}, {r.ConvictionSeconds, &conviction}, {r.ReleaseSeconds, &release}} {
			if v.p != nil {
				*v.dst = append(*v.dst, *v.p)
			}
		}
		for p, v := range r.VictimSlowdown {
			if _, ok := slow[p]; !ok {
				slow[p] = []float64{}
			}
			if v != nil {
				slow[p] = append(slow[p], *v)
			}
		}
		for p, v := range r.VictimSlowdownAfter {
			if _, ok := after[p]; !ok {
				after[p] = []float64{}
			}
			if v != nil {
				after[p] = append(after[p], *v)
			}
		}
	}
	if a.PolluterRuns > 0 {
		a.Recall = ptr(float64(convicted) / float64(a.PolluterRuns))
		a.RecallInterval = Wilson(convicted, a.PolluterRuns)
	}
	if a.Runs > 0 {
		a.FalseConvictionRate = ptr(float64(falseRuns) / float64(a.Runs))
		a.FalseConvictionInterval = Wilson(falseRuns, a.Runs)
	}
	a.InnocentProofCapSeconds = distOf(proofSecs)
	a.FirstCap, a.Conviction, a.Release = distOf(firstCap), distOf(conviction), distOf(release)
	a.FirstCapFromProcess = distOf(fromProcess)
	for p, v := range slow {
		a.VictimSlowdown[p] = distOf(v)
	}
	for p, v := range after {
		a.VictimSlowdownAfter[p] = distOf(v)
	}
	return a
}

// SuiteResult is a whole suite: every run's score and the totals, overall,
// by run class, and the polluter runs by what was drawn.
type SuiteResult struct {
	Meta     *Meta                `json:"meta,omitempty"`
	Seed     int64                `json:"seed"`
	Policies []string             `json:"policies"`
	Host     string               `json:"host,omitempty"`
	Runs     []RunScore           `json:"runs"`
	Total    Aggregate            `json:"total"`
	ByClass  map[string]Aggregate `json:"by_class"`
	// Breakdowns are the polluter runs' totals by polluter, timing and
	// placement (ByPolluter …), a row for each value some run drew.
	Breakdowns map[string]map[string]Aggregate `json:"breakdowns"`
}

// Breakdown names: the polluter runs' totals by what was drawn.
const (
	ByPolluter  = "polluter"
	ByTiming    = "timing"
	ByPlacement = "placement"
)

// Breakdown summarizes runs by key: an aggregate for each value of keys
// that some run has (nil keys: each value the runs have, sorted; runs
// whose key is "" are left out). The simulator breaks its runs down the
// same way, with fixed keys and one breakdown of its own.
func Breakdown[T any](runs []T, score func(T) RunScore, key func(T) string, keys []string) map[string]Aggregate {
	by := map[string][]RunScore{}
	for _, r := range runs {
		if k := key(r); k != "" {
			by[k] = append(by[k], score(r))
		}
	}
	if keys == nil {
		keys = slices.Sorted(maps.Keys(by))
	}
	out := map[string]Aggregate{}
	for _, k := range keys {
		if rs, ok := by[k]; ok {
			out[k] = Summarize(rs)
		}
	}
	return out
}

// Summarize fills the totals from the runs.
func (r *SuiteResult) Summarize() {
	r.Total = Summarize(r.Runs)
	r.ByClass = map[string]Aggregate{}
	for _, class := range []string{ClassPolluter, ClassHarmful, ClassControl} {
		var of []RunScore
		for _, s := range r.Runs {
			if s.Class == class || class == ClassHarmful && s.Class == ClassPolluter && s.Harmful {
				of = append(of, s)
			}
		}
		r.ByClass[class] = Summarize(of)
	}
	r.breakDown()
}

// breakDown fills the breakdowns from the runs.
func (r *SuiteResult) breakDown() {
	var polluter []RunScore
	for _, s := range r.Runs {
		if s.Class == ClassPolluter {
			polluter = append(polluter, s)
		}
	}
	self := func(s RunScore) RunScore { return s }
	r.Breakdowns = map[string]map[string]Aggregate{
		ByPolluter:  Breakdown(polluter, self, func(s RunScore) string { return s.Polluter }, nil),
		ByTiming:    Breakdown(polluter, self, func(s RunScore) string { return s.Timing }, nil),
		ByPlacement: Breakdown(polluter, self, func(s RunScore) string { return s.Placement }, nil),
	}
}

// breakdownRows are the breakdowns' lines, "polluter splitlock" and so on,
// in the order of their names and then of their values.
func (r *SuiteResult) breakdownRows() []AttributionRow {
	var rows []AttributionRow
	for _, name := range []string{ByPolluter, ByTiming, ByPlacement} {
		m := r.Breakdowns[name]
		for _, k := range slices.Sorted(maps.Keys(m)) {
			rows = append(rows, AttributionRowOf(name+" "+k, m[k]))
		}
	}
	return rows
}
