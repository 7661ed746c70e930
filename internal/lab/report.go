package lab

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/humanize"
	"github.com/crosstalk-project/crosstalk/internal/scenario"
)

// This file renders lab results as one self-contained HTML page: no scripts,
// no external assets, the plots are inline SVG drawn by hand.
//
// Every string that comes from a result (tenant, policy and scenario names,
// descriptions, units) is escaped: the page itself goes through html/template,
// and the SVG, built as text, escapes through svgDoc's text and title methods,
// the only places it writes such strings. Coordinates go through num, which
// never writes NaN or Inf.

// WriteReport writes a self-contained HTML report of a lab run: a summary
// table (per policy and tenant: role, metric, solo, co-located, slowdown,
// throttled seconds) and inline SVG plots: for each policy the victim's
// metric over time, with markers where other tenants start and stop and where
// the policy acted, and a dashed line at the victim's solo value; a bar chart
// of the victim's slowdown per policy; and each tenant's throttled seconds
// per policy.
func WriteReport(w io.Writer, r *Result) error {
	if r == nil {
		return fmt.Errorf("report: no result")
	}
	return reportTmpl.ExecuteTemplate(w, "report", newReportPage(r))
}

// WriteMatrixReport writes the sensitivity/aggressiveness matrix as an HTML
// heat-map table (cells coloured by slowdown) with the two rankings.
func WriteMatrixReport(w io.Writer, m *Matrix) error {
	if m == nil {
		return fmt.Errorf("report: no matrix")
	}
	return reportTmpl.ExecuteTemplate(w, "matrix", newMatrixPage(m))
}

// ---- the result page ----

type reportPage struct {
	Meta                        template.HTML
	Repeated                    bool // some value has a spread over repetitions
	Scenario, Description, Host string
	Phase                       string
	Repetitions                 int
	Victim, VictimMetric        string
	Rows                        []summaryRow
	Policies                    []policySection
	SlowdownChart               template.HTML
	ThrottleChart               template.HTML
}

type summaryRow struct {
	First                           bool // first row of its policy
	Policy, Tenant, Role, Metric    string
	Solo, Colo, Slowdown, Throttled string
	SoloSpread, ColoSpread          string // "min–max" over repetitions, or empty
	Color                           heat
}

type policySection struct {
	Name, Slowdown, FirstAction, Release string
	Actions                              int
	Chart, Contention                    template.HTML
}

func newReportPage(r *Result) reportPage {
	p := reportPage{
		Meta:     metaHTML(r.Meta),
		Scenario: r.Scenario, Description: r.Description, Host: r.Host,
		Phase: fmtSeconds(r.Phase), Repetitions: r.Repetitions,
		Victim: r.Victim, VictimMetric: victimAxisLabel(r.Solo[r.Victim]),
	}
	for _, pr := range r.Results {
		for i, n := range tenantOrder(r, pr) {
			tr := pr.Tenants[n]
			solo := r.Solo[n]
			metric := metricLabel(solo)
			if solo.Metric == "" && tr.Metric != "" {
				metric = tr.Metric
			}
			if solo.Unit != "" {
				metric += " (" + solo.Unit + ")"
			}
			p.Rows = append(p.Rows, summaryRow{
				First: i == 0, Policy: pr.Policy, Tenant: n, Role: tr.Role, Metric: metric,
				Solo: fmtValue(solo.Value), Colo: fmtValue(tr.Value), Slowdown: fmtRatio(tr.Slowdown),
				Throttled: fmtSeconds(tr.ThrottledSeconds), Color: slowdownHeat(tr.Slowdown),
				SoloSpread: spreadText(solo.Values), ColoSpread: spreadText(tr.Values),
			})
			p.Repeated = p.Repeated || p.Rows[len(p.Rows)-1].SoloSpread != "" || p.Rows[len(p.Rows)-1].ColoSpread != ""
		}
		p.Policies = append(p.Policies, policySection{
			Name: pr.Policy, Slowdown: fmtRatio(pr.VictimSlowdown),
			FirstAction: fmtOptSeconds(pr.FirstActionSeconds), Release: fmtOptSeconds(pr.ReleaseSeconds),
			Actions: len(pr.Actions), Chart: timelineChart(r, pr), Contention: contentionChart(r, pr),
		})
	}
	p.SlowdownChart = slowdownChart(r)
	p.ThrottleChart = throttleChart(r)
	return p
}

// spreadText is "min–max" of values repeated at least twice, else empty.
func spreadText(v []float64) string {
	s, ok := spreadOf(v)
	if !ok {
		return ""
	}
	return fmtRange(s, ok)
}

// metaHTML is a result's Meta as a definition table, escaped; empty without
// one (a result saved before results carried it).
func metaHTML(m *Meta) template.HTML {
	ls := m.lines()
	if len(ls) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(`<table class="run-meta">`)
	for _, l := range ls {
		fmt.Fprintf(&b, "<tr><th>%s</th><td>%s</td></tr>", esc(l[0]), esc(l[1]))
	}
	b.WriteString("</table>")
	return template.HTML(b.String())
}

// ---- the visibility page ----

// WriteVisibilityReport renders `lab visibility`'s result as one
// self-contained HTML page.
func WriteVisibilityReport(w io.Writer, v *Visibility) error {
	if v == nil {
		return fmt.Errorf("report: no visibility result")
	}
	return reportTmpl.ExecuteTemplate(w, "visibility", newVisibilityPage(v))
}

type visibilityPage struct {
	Meta                       template.HTML
	Setting, Quiet, Thresholds string
	Kinds                      []string
	Rows                       []visibilityHTMLRow
	Legend                     string
}

type visibilityHTMLRow struct {
	Load, Role, Counts, Seen string
	Cells                    []matrixCell
	SeenColor                heat
}

func newVisibilityPage(v *Visibility) visibilityPage {
	p := visibilityPage{Meta: metaHTML(v.Meta), Setting: v.setting(), Quiet: v.quietLevels(), Thresholds: v.thresholdsText(), Legend: visibilityLegend}
	p.Kinds = append(p.Kinds, visibilityKinds...)
	for _, r := range v.rows() {
		row := visibilityHTMLRow{Load: r.Load, Role: r.Role, Counts: r.Counts, Seen: r.Seen, SeenColor: heat{Bg: "#eeeeee", Fg: "#333333"}}
		for i, c := range r.Cells {
			cell := matrixCell{Text: c, Color: heat{Bg: "#eeeeee", Fg: "#777777"}}
			if m := r.Medians[i]; m > 0 && finite(m) {
				cell.Color = slowdownHeat(&m)
			}
			row.Cells = append(row.Cells, cell)
		}
		switch r.SeenHow {
		case SeenOften:
			row.SeenColor = heat{Bg: "#1a9850", Fg: "#ffffff"}
		case SeenSometimes:
			row.SeenColor = heat{Bg: "#fee08b", Fg: "#333333"}
		}
		p.Rows = append(p.Rows, row)
	}
	return p
}

// ---- the matrix page ----

type matrixPage struct {
	Meta                        template.HTML
	Phase                       string
	Polluters                   []string
	Rows                        []matrixRow
	Sensitivity, Aggressiveness []rankRow
	Scale                       template.HTML
}

type matrixRow struct {
	Victim, Solo string
	Cells        []matrixCell
}

type matrixCell struct {
	Text  string
	Color heat
}

type rankRow struct {
	Load, Mean string
	BarPx      float64 // bar length in pixels, 200 for the largest mean
	Color      heat
}

func newMatrixPage(m *Matrix) matrixPage {
	p := matrixPage{Meta: metaHTML(m.Meta), Phase: fmtSeconds(m.Phase), Polluters: m.Polluters, Scale: heatScaleSVG()}
	for _, v := range m.Victims {
		row := matrixRow{Victim: v, Solo: "–"}
		if s, ok := m.Solo[v]; ok {
			row.Solo = fmtValue(&s)
		}
		for _, pol := range m.Polluters {
			cell := matrixCell{Text: "–", Color: heat{Bg: "#eeeeee", Fg: "#777777"}}
			if sd, ok := m.Slowdown[v][pol]; ok && finite(sd) {
				cell = matrixCell{Text: fmtRatio(&sd), Color: slowdownHeat(&sd)}
			}
			row.Cells = append(row.Cells, cell)
		}
		p.Rows = append(p.Rows, row)
	}
	p.Sensitivity = rankRows(m.Sensitivity)
	p.Aggressiveness = rankRows(m.Aggressiveness)
	return p
}

func rankRows(ranks []Rank) []rankRow {
	top := 0.0
	for _, r := range ranks {
		if finite(r.Mean) {
			top = math.Max(top, r.Mean)
		}
	}
	var out []rankRow
	for _, r := range ranks {
		row := rankRow{Load: r.Load, Mean: "–", Color: heat{Bg: "#eeeeee", Fg: "#777777"}}
		if finite(r.Mean) && r.Mean > 0 {
			mean := r.Mean
			row.Mean, row.Color = fmtRatio(&mean), slowdownHeat(&mean)
			if top > 0 {
				row.BarPx = math.Round(2000*mean/top) / 10
			}
		}
		out = append(out, row)
	}
	return out
}

// ---- formatting ----

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func okPtr(v *float64) bool { return v != nil && finite(*v) }

// fmtValue is fmtVal for a page: a dash for missing or non-finite values.
func fmtValue(v *float64) string {
	if !okPtr(v) {
		return "–"
	}
	return fmtVal(v)
}

// fmtRatio formats a slowdown; missing ones are "n/a".
func fmtRatio(v *float64) string {
	if !okPtr(v) {
		return "n/a"
	}
	return humanize.Ratio(*v)
}

func fmtSeconds(s float64) string { return humanize.Seconds(s, 1) }

// fmtOptSeconds is empty for a missing time: the page leaves the clause out.
func fmtOptSeconds(s *float64) string {
	if !okPtr(s) {
		return ""
	}
	return humanize.Seconds(*s, 2)
}

// victimAxisLabel is "ns_per_access (ns), lower is better".
func victimAxisLabel(s Solo) string {
	if s.Metric == "" {
		return "victim metric"
	}
	l := s.Metric
	if s.Unit != "" {
		l += " (" + s.Unit + ")"
	}
	return l + ", " + betterLabel(s.Direction)
}

func betterLabel(direction string) string {
	if direction == "higher" {
		return "higher is better"
	}
	return "lower is better"
}

// ---- colours ----

// heat is a background and a readable text colour, as "#rrggbb".
type heat struct{ Bg, Fg string }

// slowdownHeat colours a slowdown: white at 1×, deepening to red at 8× and
// beyond (on a log scale), and tinted green below 1× (the tenant did better).
func slowdownHeat(v *float64) heat {
	if !okPtr(v) || *v <= 0 {
		return heat{Bg: "#ffffff", Fg: "#777777"}
	}
	type rgb [3]float64
	white, green := rgb{255, 255, 255}, rgb{161, 217, 155}
	orange, red := rgb{253, 174, 97}, rgb{215, 48, 39}
	mix := func(a, b rgb, t float64) rgb {
		return rgb{a[0] + (b[0]-a[0])*t, a[1] + (b[1]-a[1])*t, a[2] + (b[2]-a[2])*t}
	}
	t := math.Log2(*v) / 3 // 1× → 0, 8× → 1
	var c rgb
	switch {
	case t < 0:
		c = mix(white, green, math.Min(-t*3, 1)) // 0.5× is full green
	case t < 0.5:
		c = mix(white, orange, t/0.5)
	default:
		c = mix(orange, red, math.Min((t-0.5)/0.5, 1))
	}
	fg := "#000000"
	if t > 0.75 {
		fg = "#ffffff"
	}
	return heat{Bg: fmt.Sprintf("#%02x%02x%02x", int(c[0]), int(c[1]), int(c[2])), Fg: fg}
}

const (
	colorVictim     = "#1f77b4"
	colorPolluter   = "#d62728"
	colorBystander  = "#9467bd"
	colorAction     = "#ff7f0e"
	colorRelease    = "#2ca02c"
	colorSolo       = "#555555"
	colorAxis       = "#333333"
	colorGrid       = "#e5e5e5"
	colorMuted      = "#888888"
	colorContention = "#8c564b"
)

// tenantPalette colours tenants in the throttled-seconds chart.
var tenantPalette = []string{"#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#1f77b4"}

func roleColor(role string) string {
	switch role {
	case RolePolluter:
		return colorPolluter
	case RoleBystander:
		return colorBystander
	}
	return colorMuted
}

// ---- scales and ticks ----

// linearScale maps a domain [d0, d1] onto a range [r0, r1]. A zero-width
// domain maps to the middle of the range; results are always finite and
// within the range.
type linearScale struct{ d0, d1, r0, r1 float64 }

func (s linearScale) at(v float64) float64 {
	lo, hi := math.Min(s.r0, s.r1), math.Max(s.r0, s.r1)
	if s.d1 == s.d0 || !finite(v) {
		return (s.r0 + s.r1) / 2
	}
	x := s.r0 + (v-s.d0)/(s.d1-s.d0)*(s.r1-s.r0)
	if !finite(x) {
		return (s.r0 + s.r1) / 2
	}
	return math.Max(lo, math.Min(hi, x))
}

// niceTicks widens [lo, hi] to round numbers and returns about n ticks
// (steps of 1, 2 or 5 × 10^k) from the new lo to the new hi.
func niceTicks(lo, hi float64, n int) (ticks []float64, step float64) {
	if !finite(lo) || !finite(hi) {
		lo, hi = 0, 1
	}
	if hi < lo {
		lo, hi = hi, lo
	}
	if hi == lo {
		d := math.Abs(lo) * 0.1
		if d == 0 {
			d = 1
		}
		lo, hi = lo-d, hi+d
		if lo < 0 && lo+d >= 0 {
			lo = 0 // a non-negative constant keeps a zero baseline
		}
	}
	step = niceStep((hi - lo) / float64(max(n, 1)))
	if step <= 0 || !finite(step) || !finite(hi-lo) {
		return []float64{lo, hi}, hi - lo
	}
	first, last := math.Floor(lo/step), math.Ceil(hi/step)
	if last-first > 50 { // cannot happen with a sane n; stay bounded anyway
		return []float64{lo, hi}, hi - lo
	}
	for i := first; i <= last; i++ {
		v := i * step
		if v == 0 {
			v = 0 // no "-0"
		}
		ticks = append(ticks, v)
	}
	return ticks, step
}

// niceStep rounds a raw step up to 1, 2 or 5 × 10^k.
func niceStep(raw float64) float64 {
	if raw <= 0 || !finite(raw) {
		return 0
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	switch f := raw / mag; {
	case f <= 1:
		return mag
	case f <= 2:
		return 2 * mag
	case f <= 5:
		return 5 * mag
	}
	return 10 * mag
}

// fmtTick writes a tick value with as many decimals as its step needs, and
// k/M/G for large values.
func fmtTick(v, step float64) string {
	if v == 0 || !finite(v) {
		return "0"
	}
	suffix, div := "", 1.0
	switch a := math.Abs(v); {
	case a >= 1e9:
		suffix, div = "G", 1e9
	case a >= 1e6:
		suffix, div = "M", 1e6
	case a >= 1e4:
		suffix, div = "k", 1e3
	}
	s := step / div
	dec := 0
	if s > 0 && finite(s) && s < 1 {
		dec = int(math.Ceil(-math.Log10(s) - 1e-9))
	}
	if dec > 6 {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	return strconv.FormatFloat(v/div, 'f', dec, 64) + suffix
}

// ---- SVG ----

// svgDoc builds one <svg> element as text. Attribute lists passed to its
// methods are constants of this file; strings from a result go through text
// and title, which escape them.
type svgDoc struct {
	b    strings.Builder
	w, h float64
}

func newSVG(w, h float64, label string) *svgDoc {
	s := &svgDoc{w: w, h: h}
	fmt.Fprintf(&s.b, `<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 %s %s" width="%s" height="%s" role="img" aria-label="%s" font-family="sans-serif" font-size="12">`,
		num(w), num(h), num(w), num(h), esc(label))
	return s
}

func (s *svgDoc) html() template.HTML {
	return template.HTML(s.b.String() + "</svg>")
}

func esc(s string) string { return template.HTMLEscapeString(s) }

// num writes a coordinate: one decimal at most, and never NaN or Inf.
func num(v float64) string {
	if !finite(v) {
		v = 0
	}
	v = math.Round(v*10) / 10
	if v == 0 {
		v = 0
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func (s *svgDoc) raw(str string) { s.b.WriteString(str) }

func (s *svgDoc) line(x1, y1, x2, y2 float64, attrs string) {
	fmt.Fprintf(&s.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" %s/>`, num(x1), num(y1), num(x2), num(y2), attrs)
}

func (s *svgDoc) rect(x, y, w, h float64, attrs string) {
	fmt.Fprintf(&s.b, `<rect x="%s" y="%s" width="%s" height="%s" %s/>`, num(x), num(y), num(math.Max(w, 0)), num(math.Max(h, 0)), attrs)
}

func (s *svgDoc) circle(x, y, r float64, attrs string) {
	fmt.Fprintf(&s.b, `<circle cx="%s" cy="%s" r="%s" %s/>`, num(x), num(y), num(r), attrs)
}

func (s *svgDoc) text(x, y float64, attrs, str string) {
	fmt.Fprintf(&s.b, `<text x="%s" y="%s" %s>%s</text>`, num(x), num(y), attrs, esc(str))
}

// group opens a <g> with a tooltip; close it with end.
func (s *svgDoc) group(attrs, title string) {
	fmt.Fprintf(&s.b, `<g %s><title>%s</title>`, attrs, esc(title))
}

func (s *svgDoc) end() { s.b.WriteString("</g>") }

func (s *svgDoc) polyline(pts [][2]float64, attrs string) {
	s.b.WriteString(`<polyline points="`)
	for i, p := range pts {
		if i > 0 {
			s.b.WriteByte(' ')
		}
		s.b.WriteString(num(p[0]) + "," + num(p[1]))
	}
	fmt.Fprintf(&s.b, `" fill="none" %s/>`, attrs)
}

// noData draws a framed panel with a message instead of a chart.
func noDataSVG(w, h float64, title, msg string) template.HTML {
	s := newSVG(w, h, title+": "+msg)
	s.rect(0.5, 0.5, w-1, h-1, `fill="#fafafa" stroke="#cccccc" stroke-dasharray="4 3"`)
	s.text(w/2, 24, `text-anchor="middle" font-weight="bold"`, title)
	s.text(w/2, h/2+4, `text-anchor="middle" fill="`+colorMuted+`"`, "no data: "+msg)
	return s.html()
}

// plotArea is a chart's drawing rectangle inside its SVG.
type plotArea struct{ left, top, right, bottom float64 }

func (a plotArea) width() float64 { return a.right - a.left }

// yAxis draws horizontal grid lines and tick labels on the left, and the
// axis title rotated along it.
func (s *svgDoc) yAxis(a plotArea, y linearScale, ticks []float64, step float64, title string) {
	for _, t := range ticks {
		py := y.at(t)
		s.line(a.left, py, a.right, py, `stroke="`+colorGrid+`"`)
		s.line(a.left-4, py, a.left, py, `stroke="`+colorAxis+`"`)
		s.text(a.left-7, py+4, `text-anchor="end" font-size="11"`, fmtTick(t, step))
	}
	s.line(a.left, a.top, a.left, a.bottom, `stroke="`+colorAxis+`"`)
	cy := (a.top + a.bottom) / 2
	fmt.Fprintf(&s.b, `<text x="%s" y="%s" transform="rotate(-90 %s %s)" text-anchor="middle">%s</text>`,
		num(16), num(cy), num(16), num(cy), esc(title))
}

// xAxis draws vertical ticks and labels along the bottom, and the axis title.
func (s *svgDoc) xAxis(a plotArea, x linearScale, ticks []float64, step float64, title string) {
	s.line(a.left, a.bottom, a.right, a.bottom, `stroke="`+colorAxis+`"`)
	for _, t := range ticks {
		px := x.at(t)
		s.line(px, a.bottom, px, a.bottom+4, `stroke="`+colorAxis+`"`)
		s.text(px, a.bottom+17, `text-anchor="middle" font-size="11"`, fmtTick(t, step))
	}
	s.text((a.left+a.right)/2, a.bottom+34, `text-anchor="middle"`, title)
}

// legendItem is one entry of a chart legend: a swatch and a label.
type legendItem struct {
	label, color, dash string
	box                bool // a filled box rather than a line
}

// legend draws items left to right from (x, y), wrapping at the SVG's width.
func (s *svgDoc) legend(x, y float64, items []legendItem) {
	cx, cy := x, y
	for _, it := range items {
		label := humanize.Truncate(it.label, 40)
		w := 30 + 6.5*float64(len([]rune(label)))
		if cx+w > s.w-10 && cx > x {
			cx, cy = x, cy+18
		}
		if it.box {
			s.rect(cx, cy-9, 14, 10, `fill="`+it.color+`"`)
		} else {
			dash := ""
			if it.dash != "" {
				dash = ` stroke-dasharray="` + it.dash + `"`
			}
			s.line(cx, cy-4, cx+18, cy-4, `stroke="`+it.color+`" stroke-width="2"`+dash)
		}
		s.text(cx+22, cy, `font-size="11"`, label)
		cx += w
	}
}

// ---- charts ----

const chartWidth = 960

// halo keeps a label over lines readable: a white outline under its glyphs.
const halo = ` stroke="#ffffff" stroke-width="3" stroke-linejoin="round" paint-order="stroke"`

// timelineChart plots the victim's metric over one policy's phase.
func timelineChart(r *Result, pr PolicyResult) template.HTML {
	title := pr.Policy + ": " + r.Victim + " (victim) over time"
	samples := finiteSamples(pr.Timeline.Victim)
	if len(samples) == 0 {
		return noDataSVG(chartWidth, 140, title, "no victim samples in this policy's timeline")
	}
	solo := r.Solo[r.Victim]

	// Values from 0 (or below) to the highest sample or solo value.
	vMin, vMax := 0.0, math.Inf(-1)
	for _, s := range samples {
		vMin, vMax = math.Min(vMin, s.Value), math.Max(vMax, s.Value)
	}
	if okPtr(solo.Value) {
		vMin, vMax = math.Min(vMin, *solo.Value), math.Max(vMax, *solo.Value)
	}
	events := otherTenantEvents(pr.Timeline.Events)
	xt, xstep := niceTicks(0, timeExtent(r, pr, samples, events), 10)
	yt, ystep := niceTicks(vMin, vMax, 6)

	const h = 380
	a := plotArea{left: 78, top: 62, right: chartWidth - 24, bottom: h - 92}
	x := linearScale{xt[0], xt[len(xt)-1], a.left, a.right}
	y := linearScale{yt[0], yt[len(yt)-1], a.bottom, a.top}

	s := newSVG(chartWidth, h, title)
	s.text(a.left, 18, `font-weight="bold" font-size="14"`, title)
	s.yAxis(a, y, yt, ystep, humanize.Truncate(victimAxisLabel(solo), 60))
	s.xAxis(a, x, xt, xstep, "seconds since the co-located phase started")

	legend := []legendItem{{label: r.Victim + " (victim)", color: colorVictim}}
	if okPtr(solo.Value) {
		py := y.at(*solo.Value)
		s.group(`class="solo"`, "solo "+fmtValue(solo.Value)+" "+solo.Unit)
		s.line(a.left, py, a.right, py, `stroke="`+colorSolo+`" stroke-width="1.5" stroke-dasharray="6 4"`)
		s.end()
		s.text(a.right-4, py-5, `text-anchor="end" font-size="11" fill="`+colorSolo+`"`+halo, "solo "+fmtValue(solo.Value)+" "+solo.Unit)
		legend = append(legend, legendItem{label: "solo", color: colorSolo, dash: "6 4"})
	}
	legend = append(legend, s.eventMarkers(a, x, events)...)
	legend = append(legend, s.actionMarkers(a, x, pr.Actions)...)

	s.series(samples, x, y, colorVictim, nil)
	s.legend(a.left, h-22, legend)
	return s.html()
}

// contentionChart plots what the crosstalk policy's probes read over its
// phase, the worst probe latency against its quiet baseline, with the same
// tenant events and policy actions as the victim's chart: it shows what the
// agent saw when it acted. Policies without probes have no such timeline
// (nil).
func contentionChart(r *Result, pr PolicyResult) template.HTML {
	samples := finiteSamples(pr.Timeline.Contention)
	if len(samples) == 0 {
		return ""
	}
	title := pr.Policy + ": probe contention over time"
	vMax := 1.5
	for _, s := range samples {
		vMax = math.Max(vMax, s.Value)
	}
	events := otherTenantEvents(pr.Timeline.Events)
	xt, xstep := niceTicks(0, timeExtent(r, pr, samples, events), 10)
	yt, ystep := niceTicks(0, vMax, 5)

	const h = 300
	a := plotArea{left: 78, top: 62, right: chartWidth - 24, bottom: h - 92}
	x := linearScale{xt[0], xt[len(xt)-1], a.left, a.right}
	y := linearScale{yt[0], yt[len(yt)-1], a.bottom, a.top}

	s := newSVG(chartWidth, h, title)
	s.text(a.left, 18, `font-weight="bold" font-size="14"`, title)
	s.yAxis(a, y, yt, ystep, "× quiet baseline")
	s.xAxis(a, x, xt, xstep, "seconds since the co-located phase started")
	quiet := y.at(1)
	s.line(a.left, quiet, a.right, quiet, `stroke="`+colorSolo+`" stroke-width="1.5" stroke-dasharray="6 4"`)
	s.text(a.right-4, quiet-5, `text-anchor="end" font-size="11" fill="`+colorSolo+`"`+halo, "1.0 = quiet")

	legend := []legendItem{{label: "worst probe latency / baseline", color: colorContention}, {label: "quiet", color: colorSolo, dash: "6 4"}}
	legend = append(legend, s.eventMarkers(a, x, events)...)
	legend = append(legend, s.actionMarkers(a, x, pr.Actions)...)
	s.series(samples, x, y, colorContention, func(p Sample) string {
		return fmt.Sprintf("%s: %s", humanize.Seconds(p.T, 2), humanize.Ratio(p.Value))
	})
	s.legend(a.left, h-22, legend)
	return s.html()
}

// series draws samples as a line, with a dot at each while there are few
// enough to tell apart; title, when given, labels each dot (a hover title).
func (s *svgDoc) series(samples []Sample, x, y linearScale, color string, title func(Sample) string) {
	pts := make([][2]float64, len(samples))
	for i, p := range samples {
		pts[i] = [2]float64{x.at(p.T), y.at(p.Value)}
	}
	if len(pts) > 1 {
		s.polyline(pts, `stroke="`+color+`" stroke-width="1.8" stroke-linejoin="round"`)
	}
	if len(pts) > 120 {
		return
	}
	for i, p := range pts {
		if title != nil {
			s.group(`class="probe"`, title(samples[i]))
		}
		s.circle(p[0], p[1], 2.5, `fill="`+color+`"`)
		if title != nil {
			s.end()
		}
	}
}

// finiteSamples keeps the samples a chart can place.
func finiteSamples(in []Sample) []Sample {
	var out []Sample
	for _, s := range in {
		if finite(s.T) && finite(s.Value) {
			out = append(out, s)
		}
	}
	return out
}

// timeExtent is a phase chart's time axis: from 0 to the phase's end or the
// last thing that happened in it (a sample, a tenant event, an action).
func timeExtent(r *Result, pr PolicyResult, samples []Sample, events []TenantEvent) float64 {
	tMax := r.Phase
	if !finite(tMax) {
		tMax = 0
	}
	for _, s := range samples {
		tMax = math.Max(tMax, s.T)
	}
	for _, e := range events {
		tMax = math.Max(tMax, e.T)
	}
	for _, a := range pr.Actions {
		if finite(a.T) {
			tMax = math.Max(tMax, a.T)
		}
	}
	return tMax
}

// otherTenantEvents keeps the polluters' and bystanders' finite events.
func otherTenantEvents(evs []TenantEvent) []TenantEvent {
	var out []TenantEvent
	for _, e := range evs {
		if e.Role != RoleVictim && finite(e.T) {
			out = append(out, e)
		}
	}
	return out
}

// eventMarkers draws a vertical line where a tenant starts (solid) or stops
// (dotted), labelled above the plot; it returns the legend entries it used.
func (s *svgDoc) eventMarkers(a plotArea, x linearScale, events []TenantEvent) []legendItem {
	seen := map[string]bool{}
	var legend []legendItem
	for i, e := range events {
		if e.Kind == "onset" {
			continue // a start line a moment after its start: one marker is enough
		}
		px := x.at(e.T)
		color := roleColor(e.Role)
		dash, verb := "", "starts"
		switch e.Kind {
		case "stop":
			dash, verb = ` stroke-dasharray="2 3"`, "stops"
		case "pause":
			dash, verb = ` stroke-dasharray="2 3"`, "pauses"
		case "resume":
			verb = "resumes"
		}
		s.group(`class="event"`, fmt.Sprintf("%.2fs: %s %s (%s)", e.T, e.Tenant, verb, e.Role))
		s.line(px, a.top-6, px, a.bottom, `stroke="`+color+`" stroke-width="1.5"`+dash)
		s.text(px+3, a.top-10-float64(i%2)*13, `font-size="11" fill="`+color+`"`+halo, humanize.Truncate(e.Tenant, 20)+" "+verb)
		s.end()
		key := e.Role + "/" + e.Kind
		if !seen[key] {
			seen[key] = true
			d := ""
			if e.Kind == "stop" || e.Kind == "pause" {
				d = "2 3"
			}
			legend = append(legend, legendItem{label: e.Role + " " + verb, color: color, dash: d})
		}
	}
	return legend
}

// actionMarkers draws a thin vertical line and a triangle at the bottom of
// the plot for each policy action, with the action as a tooltip.
func (s *svgDoc) actionMarkers(a plotArea, x linearScale, actions []Action) []legendItem {
	kinds := map[string]bool{}
	for _, act := range actions {
		if !finite(act.T) {
			continue
		}
		px := x.at(act.T)
		color := colorAction
		if act.Kind == "release" {
			color = colorRelease
		}
		kinds[color] = true
		tip := fmt.Sprintf("%.2fs: %s %s", act.T, act.Kind, act.Tenant)
		if act.Quota > 0 && finite(act.Quota) {
			tip += fmt.Sprintf(" to %.2f CPUs", act.Quota)
		} else if act.Kind != "" {
			tip += " (quota unlimited)"
		}
		if act.Detail != "" {
			tip += " — " + act.Detail
		}
		s.group(`class="action"`, tip)
		s.line(px, a.top, px, a.bottom, `stroke="`+color+`" stroke-width="1" stroke-opacity="0.55"`)
		s.raw(fmt.Sprintf(`<path d="M%s %sl-5 9h10z" fill="%s"/>`, num(px), num(a.bottom-9), color))
		s.end()
	}
	var legend []legendItem
	if kinds[colorAction] {
		legend = append(legend, legendItem{label: "policy action", color: colorAction})
	}
	if kinds[colorRelease] {
		legend = append(legend, legendItem{label: "policy release", color: colorRelease})
	}
	return legend
}

// slowdownChart is a bar per policy of the victim's slowdown, with a
// reference line at 1× (as fast as solo).
func slowdownChart(r *Result) template.HTML {
	title := "victim slowdown per policy"
	top := 1.0
	have := false
	for _, pr := range r.Results {
		if okPtr(pr.VictimSlowdown) {
			have = true
			top = math.Max(top, *pr.VictimSlowdown)
		}
	}
	if !have {
		return noDataSVG(chartWidth, 140, title, "no policy has a victim slowdown (no solo or co-located metric)")
	}
	yt, ystep := niceTicks(0, top, 5)
	const h = 300
	a := plotArea{left: 78, top: 40, right: chartWidth - 24, bottom: h - 50}
	y := linearScale{yt[0], yt[len(yt)-1], a.bottom, a.top}
	band := a.width() / float64(len(r.Results))
	barW := math.Min(band*0.6, 120)

	s := newSVG(chartWidth, h, title)
	s.text(a.left, 18, `font-weight="bold" font-size="14"`, title)
	s.yAxis(a, y, yt, ystep, "slowdown (× solo, > 1 is worse)")
	s.line(a.left, a.bottom, a.right, a.bottom, `stroke="`+colorAxis+`"`)
	for i, pr := range r.Results {
		cx := a.left + band*(float64(i)+0.5)
		s.text(cx, a.bottom+18, `text-anchor="middle"`, humanize.Truncate(pr.Policy, 24))
		if !okPtr(pr.VictimSlowdown) {
			s.text(cx, a.bottom-8, `text-anchor="middle" fill="`+colorMuted+`" font-style="italic"`, "n/a")
			continue
		}
		v := *pr.VictimSlowdown
		py := y.at(v)
		s.group(`class="bar"`, pr.Policy+": victim slowdown "+fmtRatio(&v))
		s.rect(cx-barW/2, py, barW, a.bottom-py, `fill="`+slowdownHeat(&v).Bg+`" stroke="#444444"`)
		s.end()
		s.text(cx, py-5, `text-anchor="middle" font-weight="bold"`, fmtRatio(&v))
	}
	ref := y.at(1)
	s.line(a.left, ref, a.right, ref, `stroke="`+colorAxis+`" stroke-width="1.5" stroke-dasharray="6 4"`)
	s.text(a.right-4, ref-5, `text-anchor="end" font-size="11"`+halo, "1.0 = as fast as solo")
	return s.html()
}

// throttleChart groups, per policy, a bar per tenant of the seconds the
// policy held it throttled.
func throttleChart(r *Result) template.HTML {
	title := "throttled seconds per policy and tenant"
	tenants := throttleTenants(r)
	top := 0.0
	for _, pr := range r.Results {
		for _, n := range tenants {
			if v := pr.Tenants[n].ThrottledSeconds; finite(v) {
				top = math.Max(top, v)
			}
		}
	}
	if len(r.Results) == 0 || len(tenants) == 0 || top <= 0 {
		return noDataSVG(chartWidth, 140, title, "no policy throttled any tenant")
	}
	yt, ystep := niceTicks(0, top, 5)
	const h = 300
	a := plotArea{left: 78, top: 40, right: chartWidth - 24, bottom: h - 74}
	y := linearScale{yt[0], yt[len(yt)-1], a.bottom, a.top}
	band := a.width() / float64(len(r.Results))
	barW := math.Min(band*0.8/float64(len(tenants)), 60)

	s := newSVG(chartWidth, h, title)
	s.text(a.left, 18, `font-weight="bold" font-size="14"`, title)
	s.yAxis(a, y, yt, ystep, "throttled seconds")
	s.line(a.left, a.bottom, a.right, a.bottom, `stroke="`+colorAxis+`"`)
	for i, pr := range r.Results {
		cx := a.left + band*(float64(i)+0.5)
		s.text(cx, a.bottom+18, `text-anchor="middle"`, humanize.Truncate(pr.Policy, 24))
		x0 := cx - barW*float64(len(tenants))/2
		for j, n := range tenants {
			tr, ok := pr.Tenants[n]
			if !ok || !finite(tr.ThrottledSeconds) {
				continue
			}
			v := tr.ThrottledSeconds
			py := y.at(v)
			bx := x0 + barW*float64(j)
			s.group(`class="bar"`, fmt.Sprintf("%s: %s throttled %.1fs", pr.Policy, n, v))
			s.rect(bx+1, py, barW-2, a.bottom-py, `fill="`+tenantPalette[j%len(tenantPalette)]+`"`)
			s.end()
			if barW >= 26 {
				s.text(bx+barW/2, py-4, `text-anchor="middle" font-size="10"`, fmtSeconds(v))
			}
		}
	}
	var legend []legendItem
	for j, n := range tenants {
		legend = append(legend, legendItem{label: n, color: tenantPalette[j%len(tenantPalette)], box: true})
	}
	s.legend(a.left, h-22, legend)
	return s.html()
}

// throttleTenants lists the tenants worth a bar: every non-victim, and the
// victim too if some policy throttled it; in role order.
func throttleTenants(r *Result) []string {
	role := map[string]string{}
	keep := map[string]bool{}
	for _, pr := range r.Results {
		for n, tr := range pr.Tenants {
			role[n] = tr.Role
			if tr.Role != RoleVictim || tr.ThrottledSeconds > 0 {
				keep[n] = true
			}
		}
	}
	var names []string
	for n := range keep {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		if d := scenario.RoleRank(role[a]) - scenario.RoleRank(role[b]); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return names
}

// heatScaleSVG is the matrix's colour key.
func heatScaleSVG() template.HTML {
	stops := []float64{0.5, 1, 1.5, 2, 3, 4, 6, 8}
	const cell = 56
	s := newSVG(cell*float64(len(stops))+20, 44, "slowdown colour key")
	for i, v := range stops {
		x := 10 + cell*float64(i)
		s.rect(x, 4, cell, 20, `fill="`+slowdownHeat(&v).Bg+`" stroke="#999999"`)
		s.text(x+cell/2, 38, `text-anchor="middle" font-size="11"`, fmtRatio(&v))
	}
	return s.html()
}

// ---- templates ----

const reportCSS = `
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#222;margin:24px auto;max-width:1000px;padding:0 16px;line-height:1.4}
h1{font-size:24px;margin:0 0 4px}
h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 4px}
.meta{color:#555;margin:2px 0}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{padding:4px 10px;border-bottom:1px solid #e3e3e3;text-align:left}
th{background:#f4f4f4}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
tr.first td{border-top:2px solid #bbb}
svg.chart{max-width:100%;height:auto;display:block;margin:6px 0}
.role-polluter{color:#d62728}.role-bystander{color:#9467bd}.role-victim{color:#1f77b4;font-weight:bold}
.bar{display:inline-block;height:10px;vertical-align:middle;border:1px solid #999}
table.run-meta{font-size:12px;color:#444;margin:4px 0 10px}
table.run-meta th{background:none;font-weight:normal;color:#777;padding:1px 12px 1px 0;border:0}
table.run-meta td{padding:1px 0;border:0;font-family:ui-monospace,monospace}
span.spread{display:block;font-size:11px;color:#777}
footer{margin-top:32px;padding-top:8px;border-top:1px solid #ddd;color:#555;font-size:13px}
`

const reportTemplates = `
{{define "report"}}<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>crosstalk lab: {{.Scenario}}</title>
<style>{{css}}</style></head>
<body>
<h1>crosstalk lab: {{.Scenario}}</h1>
{{.Meta}}
{{with .Description}}<p class="meta">{{.}}</p>{{end}}
<p class="meta">{{with .Host}}host <b>{{.}}</b> · {{end}}{{.Repetitions}} repetition(s) of {{.Phase}} phases · victim <b>{{.Victim}}</b>: {{.VictimMetric}}</p>

<h2>Summary</h2>
{{if .Rows}}<table class="summary">
<thead><tr><th>policy</th><th>tenant</th><th>role</th><th>metric</th><th class="num">solo</th><th class="num">co-located</th><th class="num">slowdown</th><th class="num">throttled</th></tr></thead>
<tbody>{{range .Rows}}
<tr{{if .First}} class="first"{{end}}><td>{{.Policy}}</td><td>{{.Tenant}}</td><td class="role-{{.Role}}">{{.Role}}</td><td>{{.Metric}}</td><td class="num">{{.Solo}}{{with .SoloSpread}}<span class="spread">{{.}}</span>{{end}}</td><td class="num">{{.Colo}}{{with .ColoSpread}}<span class="spread">{{.}}</span>{{end}}</td><td class="num" style="background:{{.Color.Bg}};color:{{.Color.Fg}}">{{.Slowdown}}</td><td class="num">{{.Throttled}}</td></tr>{{end}}
</tbody></table>
{{if .Repeated}}<p class="meta">Solo and co-located values are medians over the repetitions; under each, its minimum–maximum.</p>{{end}}
<ul>{{range .Policies}}
<li><b>{{.Name}}</b>: victim slowdown {{.Slowdown}}{{with .FirstAction}}, throttled {{.}} after the polluter started{{end}}{{with .Release}}, released {{.}} after it stopped{{end}}{{if .Actions}} · {{.Actions}} action(s){{end}}</li>{{end}}
</ul>{{else}}<p>No policy results.</p>{{end}}

<h2>Victim slowdown</h2>
{{.SlowdownChart}}
<h2>Throttling</h2>
{{.ThrottleChart}}

<h2>Victim over time</h2>
<p class="meta">The last repetition of each policy's co-located phase. Vertical lines: other tenants starting (solid) and stopping (dotted), and the policy's actions (triangles; hover for details). Dashed: the victim's solo value. Under a policy with probes (crosstalk), a second chart shows what its probes read each interval: the worst probe latency over its quiet baseline, the contention it acted on.</p>
{{range .Policies}}<h3>{{.Name}}</h3>
{{.Chart}}
{{with .Contention}}{{.}}{{end}}
{{else}}<p>No policy results.</p>{{end}}

<footer>slowdown = co-located / solo, oriented so that &gt; 1 is worse (for a metric where higher is better it is solo / co-located). 1.0 means as fast as running alone. Generated by crosstalk lab.</footer>
</body></html>
{{end}}

{{define "matrix"}}<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>crosstalk lab: interference matrix</title>
<style>{{css}}</style></head>
<body>
<h1>crosstalk lab: interference matrix</h1>
{{.Meta}}
<p class="meta">Victim slowdown for every victim × polluter pair, {{.Phase}} phases. Rows: victims; columns: polluters.</p>
{{if and .Rows .Polluters}}<table class="matrix">
<thead><tr><th>victim \ polluter</th><th class="num">solo</th>{{range .Polluters}}<th class="num">{{.}}</th>{{end}}</tr></thead>
<tbody>{{range .Rows}}
<tr><th>{{.Victim}}</th><td class="num">{{.Solo}}</td>{{range .Cells}}<td class="num" style="background:{{.Color.Bg}};color:{{.Color.Fg}}">{{.Text}}</td>{{end}}</tr>{{end}}
</tbody></table>
{{.Scale}}{{else}}<p>No data: the matrix has no victim × polluter pairs.</p>{{end}}

<h2>Aggressiveness</h2>
<p class="meta">Polluters by the mean slowdown they inflict.</p>
{{template "ranking" .Aggressiveness}}
<h2>Sensitivity</h2>
<p class="meta">Victims by the mean slowdown they suffer.</p>
{{template "ranking" .Sensitivity}}

<footer>slowdown = co-located / solo, oriented so that &gt; 1 is worse (for a metric where higher is better it is solo / co-located). 1.0 means as fast as running alone. Generated by crosstalk lab.</footer>
</body></html>
{{end}}

{{define "visibility"}}<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>crosstalk lab: what the probe sees</title>
<style>{{css}}</style></head>
<body>
<h1>crosstalk lab: what the agent's probe sees</h1>
{{.Meta}}
<p class="meta">{{.Setting}}. Quiet (no load): {{.Quiet}}. Each cell: the readings' median / 90th percentile over the quiet level.</p>
{{if .Rows}}<table class="matrix">
<thead><tr><th>load</th><th>role</th>{{range .Kinds}}<th class="num">{{.}}</th>{{end}}<th>contended readings ({{.Thresholds}})</th><th>seen</th></tr></thead>
<tbody>{{range .Rows}}
<tr><th>{{.Load}}</th><td>{{.Role}}</td>{{range .Cells}}<td class="num" style="background:{{.Color.Bg}};color:{{.Color.Fg}}">{{.Text}}</td>{{end}}<td>{{.Counts}}</td><td style="background:{{.SeenColor.Bg}};color:{{.SeenColor.Fg}}">{{.Seen}}</td></tr>{{end}}
</tbody></table>{{else}}<p>No data: no load was read.</p>{{end}}

<footer>{{.Legend}} Generated by crosstalk lab.</footer>
</body></html>
{{end}}

{{define "ranking"}}{{if .}}<table class="ranking">
<thead><tr><th class="num">#</th><th>load</th><th class="num">mean slowdown</th><th></th></tr></thead>
<tbody>{{range $i, $r := .}}
<tr><td class="num">{{inc $i}}</td><td>{{$r.Load}}</td><td class="num" style="background:{{$r.Color.Bg}};color:{{$r.Color.Fg}}">{{$r.Mean}}</td><td><span class="bar" style="width:{{$r.BarPx}}px;background:{{$r.Color.Bg}}"></span></td></tr>{{end}}
</tbody></table>{{else}}<p>No data.</p>{{end}}{{end}}
`

var reportTmpl = template.Must(template.New("lab-report").Funcs(template.FuncMap{
	"css": func() template.CSS { return template.CSS(reportCSS) },
	"inc": func(i int) int { return i + 1 },
}).Parse(reportTemplates))
