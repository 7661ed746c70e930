package lab

import (
	"fmt"
	"html/template"
	"io"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/humanize"
)

// WriteSuiteReport writes a suite as one self-contained HTML page in the lab
// report's style: the totals overall and by run class, the victim's slowdown
// per policy, and a row a run.
func WriteSuiteReport(w io.Writer, r *SuiteResult) error {
	if r == nil {
		return fmt.Errorf("report: no suite result")
	}
	return suiteTmpl.Execute(w, newSuitePage(r))
}

type suitePage struct {
	Meta           template.HTML
	HarmThreshold  float64
	Seed           int64
	Host           string
	Policies       string
	Runs           int
	Totals         []suiteTotalRow
	Slowdowns      []suiteSlowdownRow
	Restored       []suiteRestoreRow
	RestoreFrom    float64
	RestoredWithin float64
	Rows           []suiteRunRow
	PolicyHeadings []string
}

type suiteTotalRow struct {
	Class, Runs, Recall, FalseConviction, ProofCap, FirstCap, Conviction, Release string
}

type suiteSlowdownRow struct {
	First                bool
	Class, Policy        string
	Whole, After         string
	WholeHeat, AfterHeat heat
}

type suiteRestoreRow struct {
	Class, Runs, Acted, WithinSolo, WithinWithout string
}

type suiteCell struct {
	Text string
	Heat heat
}

type suiteRunRow struct {
	Name, Class, Victim, Polluter, Timing, Placement, Bystanders, Verdict string
	Caught                                                                string // "1 of 2" with several polluters
	Cap, Convict, Release, Proof, Convicted, Error, Harm                  string
	Slowdowns                                                             []suiteCell
}

func newSuitePage(r *SuiteResult) suitePage {
	p := suitePage{Meta: metaHTML(r.Meta), HarmThreshold: HarmThreshold, Seed: r.Seed, Host: r.Host, Policies: strings.Join(r.Policies, ", "), Runs: len(r.Runs), PolicyHeadings: r.Policies,
		RestoreFrom: RestoreFrom, RestoredWithin: RestoredWithin}
	total := func(c AttributionRow) {
		a := c.Aggregate
		p.Totals = append(p.Totals, suiteTotalRow{Class: c.Name, Runs: c.Runs, Recall: fmtRate(a.Recall, a.PolluterRuns, a.RecallInterval),
			FalseConviction: fmtRate(a.FalseConvictionRate, a.Runs, a.FalseConvictionInterval), ProofCap: fmtDist(a.InnocentProofCapSeconds, secs2),
			FirstCap: fmtDist(a.FirstCap, secs2), Conviction: fmtDist(a.Conviction, secs2), Release: fmtDist(a.Release, secs2)})
	}
	for _, c := range r.classRows() {
		total(c)
		a := c.Aggregate
		if rs := a.Restore; rs.Runs > 0 {
			p.Restored = append(p.Restored, suiteRestoreRow{Class: c.Name, Runs: fmt.Sprint(rs.Runs), Acted: fmt.Sprint(rs.Acted),
				WithinSolo: fmtOf(rs.WithinSolo, rs.Acted), WithinWithout: fmtOf(rs.WithinWithout, rs.Measured)})
		}
		for i, pol := range r.Policies {
			whole, after := a.VictimSlowdown[pol], a.VictimSlowdownAfter[pol]
			p.Slowdowns = append(p.Slowdowns, suiteSlowdownRow{First: i == 0, Class: c.Name, Policy: pol,
				Whole: fmtDist(whole, humanize.Ratio), After: fmtDist(after, humanize.Ratio), WholeHeat: slowdownHeat(whole.Median), AfterHeat: slowdownHeat(after.Median)})
		}
	}
	for _, c := range r.breakdownRows() {
		total(c)
	}
	for _, s := range r.Runs {
		name := s.Name
		if s.Repetition > 1 {
			name += fmt.Sprintf(" #%d", s.Repetition)
		}
		row := suiteRunRow{Name: name, Class: s.Class, Victim: s.Victim, Polluter: s.Polluter, Timing: s.Timing, Placement: s.Placement,
			Bystanders: strings.Join(s.Bystanders, ", "), Verdict: s.Verdict(), Error: s.Error}
		if s.Error == "" {
			if s.Class == ClassPolluter {
				if s.Polluters > 1 {
					row.Caught = fmt.Sprintf("%d of %d", s.PollutersConvicted, s.Polluters)
				}
				row.Cap, row.Convict, row.Release = fmtOptSecs(s.FirstCapSeconds), fmtOptSecs(s.ConvictionSeconds), fmtOptSecs(s.ReleaseSeconds)
				if s.AlreadyRunning {
					row.Cap += " ⁱ"
				}
				if s.Harm != nil {
					row.Harm = fmtRatio(s.Harm)
					if s.HarmBeyondCPU != nil {
						row.Harm += " / " + fmtRatio(s.HarmBeyondCPU)
					}
					if s.Harmful {
						row.Harm += " ʰ"
					}
				}
			}
			row.Proof = fmt.Sprintf("%d (%s)", s.InnocentsProofCapped, secs2(s.InnocentProofCapSeconds))
			row.Convicted = fmt.Sprintf("%d (%s)", s.InnocentsConvicted, secs2(s.InnocentConvictedSeconds))
		}
		for _, pol := range r.Policies {
			v := s.VictimSlowdown[pol]
			text := fmtRatio(v)
			if a := s.VictimSlowdownAfter[pol]; a != nil {
				text += " / " + fmtRatio(a)
			}
			row.Slowdowns = append(row.Slowdowns, suiteCell{Text: text, Heat: slowdownHeat(v)})
		}
		p.Rows = append(p.Rows, row)
	}
	return p
}

var suiteTmpl = template.Must(template.New("suite").Funcs(template.FuncMap{
	"css": func() template.CSS { return template.CSS(reportCSS + suiteCSS) },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>crosstalk lab suite</title>
<style>{{css}}</style></head>
<body>
<h1>crosstalk lab suite</h1>
{{.Meta}}
<p class="meta">{{with .Host}}host <b>{{.}}</b> · {{end}}{{.Runs}} run(s) · first seed {{.Seed}} · policies {{.Policies}}</p>

<h2>Attribution</h2>
<table class="totals">
<thead><tr><th>runs</th><th class="num">n</th><th class="num">recall</th><th class="num">false convictions</th><th class="num">innocent proof caps / run</th><th class="num">first cap</th><th class="num">conviction</th><th class="num">release</th></tr></thead>
<tbody>{{range .Totals}}
<tr><td>{{.Class}}</td><td class="num">{{.Runs}}</td><td class="num">{{.Recall}}</td><td class="num">{{.FalseConviction}}</td><td class="num">{{.ProofCap}}</td><td class="num">{{.FirstCap}}</td><td class="num">{{.Conviction}}</td><td class="num">{{.Release}}</td></tr>{{end}}
</tbody></table>
<p class="meta">Median / 95th percentile over runs. Recall: polluter runs whose polluter was convicted (throttled while it ran). False convictions: runs where any innocent (victim or bystander) was convicted, control runs included. The polluter, timing and placement rows count polluter runs only. Reactions count from the polluter's start, or from the agent's when the polluter was already running. Harmful: the polluter runs whose victim was at least {{.HarmThreshold}}× worse off with the polluter than without it, under no policy; where the polluter shares the victim's CPUs, than with a cache-friendly cpu load of its timing in its place (its harm beyond the CPU time it takes, which the scheduler shares out).</p>

<h2>Victim slowdown</h2>
<table class="slowdowns">
<thead><tr><th>runs</th><th>policy</th><th class="num">whole phase</th><th class="num">after the first action</th></tr></thead>
<tbody>{{range .Slowdowns}}
<tr{{if .First}} class="first"{{end}}><td>{{.Class}}</td><td>{{.Policy}}</td><td class="num" style="background:{{.WholeHeat.Bg}};color:{{.WholeHeat.Fg}}">{{.Whole}}</td><td class="num" style="background:{{.AfterHeat.Bg}};color:{{.AfterHeat.Fg}}">{{.After}}</td></tr>{{end}}
</tbody></table>
<p class="meta">After the first action: the victim's progress windows that begin at the agent's first cap of the polluter or later (the window it falls in held contention from before it), under every policy (the same moment), against its solo run; a time per operation (ns per access) weighted by each sample's operations, as the whole phase's value is.</p>

{{if .Restored}}<h3>Victim restored</h3>
<table class="totals">
<thead><tr><th>runs</th><th class="num">no policy ≥ {{.RestoreFrom}}×</th><th class="num">acted on</th><th class="num">≤ {{.RestoredWithin}}× of solo</th><th class="num">≤ {{.RestoredWithin}}× without the polluter</th></tr></thead>
<tbody>{{range .Restored}}
<tr><td>{{.Class}}</td><td class="num">{{.Runs}}</td><td class="num">{{.Acted}}</td><td class="num">{{.WithinSolo}}</td><td class="num">{{.WithinWithout}}</td></tr>{{end}}
</tbody></table>
<p class="meta">Of the polluter runs whose victim no policy slowed {{.RestoreFrom}}× or more over the phase: those where the agent acted on the polluter, and of these, those whose victim after the first action ran within {{.RestoredWithin}}× of its solo level, and within {{.RestoredWithin}}× of its level in the same scenario with the polluter left out (no policy) — the level that throttling only the polluter can bring it back to, its bystanders' share of its CPU included.</p>
{{end}}
<h2>Runs</h2>
<table class="runs">
<thead><tr><th>run</th><th>class</th><th>victim</th><th>polluter</th><th>timing</th><th>placement</th><th>bystanders</th><th>verdict</th><th class="num">harm</th><th class="num">first cap</th><th class="num">conviction</th><th class="num">release</th><th class="num">innocents proved</th><th class="num">innocents convicted</th>{{range .PolicyHeadings}}<th class="num">{{.}}</th>{{end}}</tr></thead>
<tbody>{{range .Rows}}
<tr><td>{{.Name}}</td><td>{{.Class}}</td><td>{{.Victim}}</td><td class="role-polluter">{{.Polluter}}</td><td>{{.Timing}}</td><td>{{.Placement}}</td><td class="role-bystander">{{.Bystanders}}</td>{{if .Error}}<td class="verdict-error" colspan="7">error: {{.Error}}</td>{{else}}<td class="verdict-{{.Verdict}}">{{.Verdict}}{{with .Caught}} ({{.}}){{end}}</td><td class="num">{{.Harm}}</td><td class="num">{{.Cap}}</td><td class="num">{{.Convict}}</td><td class="num">{{.Release}}</td><td class="num">{{.Proof}}</td><td class="num">{{.Convicted}}</td>{{end}}{{range .Slowdowns}}<td class="num" style="background:{{.Heat.Bg}};color:{{.Heat.Fg}}">{{.Text}}</td>{{end}}</tr>{{end}}
</tbody></table>
<p class="meta">Per policy: the victim's slowdown over the whole phase / after the first action. ⁱ: the polluter was already running when the agent started. Harm: the victim's slowdown under no policy over its slowdown with the polluter left out, and where it shares the victim's CPUs, / over its slowdown with a cpu load in its place; ʰ: at least {{.HarmThreshold}}×, a harmful run.</p>

<footer>slowdown = co-located / solo, oriented so that &gt; 1 is worse. Generated by crosstalk lab suite.</footer>
</body></html>
`))

const suiteCSS = `
td.verdict-caught{color:#2ca02c;font-weight:bold}
td.verdict-clean{color:#2ca02c}
td.verdict-missed,td.verdict-caught\+false{color:#ff7f0e;font-weight:bold}
td.verdict-false-conviction,td.verdict-error{color:#d62728;font-weight:bold}
table.runs td{white-space:nowrap}
`
