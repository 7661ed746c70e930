// Package top draws a running agent's state on a terminal: the live view of
// `crosstalk top`. Render is pure (a State and a width in, text out); Run
// polls the agent's /api/state and redraws.
package top

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/humanize"
)

// SlowRatio is the probe latency ratio (against the quiet baseline) from
// which a probe is highlighted as slow.
const SlowRatio = 1.3

// MaxActions is how many of the most recent actions a frame shows.
const MaxActions = 8

// minWidth is the narrowest frame Render lays out; below it lines are cut.
const minWidth = 40

// ANSI styles.
const (
	sBold   = "\x1b[1m"
	sRed    = "\x1b[1;31m"
	sGreen  = "\x1b[32m"
	sYellow = "\x1b[1;33m"
	sCyan   = "\x1b[36m"
	sDim    = "\x1b[2m"
	sReset  = "\x1b[0m"
)

// Render writes one frame of s laid out as v says: no line wider than
// v.Width, no more lines than v.Height (when set), the header always first.
// With colour it highlights with ANSI colours (the text is the same without
// them): slow probes, contention, throttled and protected tenants, suspects.
// It reads nothing but its arguments, so the same State and View always give
// the same frame. The only error is w's, or a View's bad Filter.
func Render(w io.Writer, s api.State, v View) error {
	match, err := ParseFilter(v.Filter)
	if err != nil {
		return err
	}
	v.Width = max(v.Width, minWidth)
	section := func(draw func(f *frame)) string {
		f := &frame{width: v.Width, color: v.Color}
		draw(f)
		return f.b.String()
	}
	var ts []api.TenantState
	for _, t := range s.Tenants {
		if match(tenantName(t)) {
			ts = append(ts, t)
		}
	}
	ts = sortTenants(ts, v.Sort)
	list := tenantList{all: len(s.Tenants), shown: ts, sort: v.Sort, filter: v.Filter}
	if v.Limit > 0 && len(list.shown) > v.Limit {
		list.shown = list.shown[:v.Limit]
	}

	header := section(func(f *frame) { f.header(s, v.Stale) })
	probes := section(func(f *frame) { f.probes(s.Probes) })
	proof := section(func(f *frame) { f.proof(s) })
	layout := fit{
		tenants:     func(rows int) string { return section(func(f *frame) { f.tenants(list, ts, rows) }) },
		suspects:    func(lines int) string { return section(func(f *frame) { f.suspects(s.Suspects, lines) }) },
		actions:     func(rows int) string { return section(func(f *frame) { f.actions(s, rows) }) },
		fixed:       header + probes,
		afterFixed:  proof,
		height:      v.Height,
		tenantRows:  len(list.shown),
		actionRows:  min(len(s.Actions), MaxActions),
		suspectRows: -1,
	}
	_, err = io.WriteString(w, layout.frame())
	return err
}

// tenantList is the tenants a frame lists and how they were chosen.
type tenantList struct {
	all    int // tenants in the state
	shown  []api.TenantState
	sort   SortKey
	filter string
}

// fit lays a frame out in a height: the header and probes as they are, the
// tenants as many as fit (at least minTenantRows), then the suspects, the
// proof and the actions, which give up rows first when even that is too
// tall. What is left over is cut at the bottom, so the header stays.
type fit struct {
	fixed, afterFixed string
	tenants           func(rows int) string
	suspects          func(lines int) string // lines < 0: all
	actions           func(rows int) string
	height            int
	tenantRows        int // rows wanted
	actionRows        int
	suspectRows       int
}

// minTenantRows is the fewest tenant rows fit keeps before it takes rows
// from the sections under the tenant list.
const minTenantRows = 3

func lineCount(s string) int { return strings.Count(s, "\n") }

func (l fit) frame() string {
	build := func(tenantRows, actionRows, suspectLines int) string {
		return l.fixed + l.tenants(tenantRows) + l.suspects(suspectLines) + l.afterFixed + l.actions(actionRows)
	}
	out := build(l.tenantRows, l.actionRows, -1)
	if l.height <= 0 || lineCount(out) <= l.height {
		return out
	}
	// The tenants take what the other sections leave.
	rows := l.tenantRows
	over := lineCount(out) - l.height
	floor := min(l.tenantRows, minTenantRows)
	rows = max(floor, rows-over)
	out = build(rows, l.actionRows, -1)
	// Hiding rows adds the "… N more" line.
	for rows > floor && lineCount(out) > l.height {
		rows--
		out = build(rows, l.actionRows, -1)
	}
	// Then the actions give up rows, then the suspects lines.
	actionRows := l.actionRows
	if over := lineCount(out) - l.height; over > 0 {
		actionRows = max(0, actionRows-over)
		out = build(rows, actionRows, -1)
	}
	if over := lineCount(out) - l.height; over > 0 {
		// At least the title, the top suspect and a line counting the
		// others: suspects are what an operator looks for.
		suspects := lineCount(l.suspects(-1))
		out = build(rows, actionRows, max(4, suspects-over))
	}
	if lineCount(out) > l.height {
		lines := strings.SplitAfter(out, "\n")
		out = strings.Join(lines[:l.height], "")
	}
	return out
}

type seg struct{ text, style string }

type frame struct {
	b     strings.Builder
	width int
	color bool
}

// line writes segments as one line, cut to the frame width, trailing blanks
// trimmed, styled when colour is on.
func (f *frame) line(segs ...seg) {
	// Cut to width.
	room := f.width
	for i := range segs {
		n := utf8.RuneCountInString(segs[i].text)
		if n > room {
			segs[i].text = humanize.Truncate(segs[i].text, room)
			segs = segs[:i+1]
			break
		}
		room -= n
	}
	// Trim trailing blanks.
	for len(segs) > 0 {
		last := &segs[len(segs)-1]
		last.text = strings.TrimRight(last.text, " ")
		if last.text != "" {
			break
		}
		segs = segs[:len(segs)-1]
	}
	for _, sg := range segs {
		if f.color && sg.style != "" && sg.text != "" {
			f.b.WriteString(sg.style)
			f.b.WriteString(sg.text)
			f.b.WriteString(sReset)
		} else {
			f.b.WriteString(sg.text)
		}
	}
	f.b.WriteByte('\n')
}

func (f *frame) blank() { f.b.WriteByte('\n') }

func (f *frame) title(name, note string) {
	if note == "" {
		f.line(seg{name, sBold})
		return
	}
	f.line(seg{name, sBold}, seg{"  " + note, sDim})
}

func (f *frame) header(s api.State, stale string) {
	when := "-"
	if !s.Time.IsZero() {
		when = s.Time.Format("2006-01-02 15:04:05 MST")
	}
	host := clean(s.Host)
	if host == "" {
		host = "?"
	}
	dry := seg{"no", ""}
	if s.DryRun {
		dry = seg{"YES", sYellow}
	}
	items := [][]seg{
		{{"crosstalk", sBold}},
		{{host, sBold}},
		{{when, ""}},
		{{"interval " + humanize.Duration(s.Interval), ""}},
		{{"PMU " + yesNo(s.PMU), ""}},
		{{"dry-run ", ""}, dry},
	}
	if stale != "" {
		// In words and first after the name, so that it shows without
		// colour and on the narrowest terminal.
		items = slices.Insert(items, 1, []seg{{"STALE: " + clean(stale), sRed}})
	}
	if v := clean(s.Version); v != "" {
		items = append(items, []seg{{"agent " + v, sDim}})
	}
	f.flow("", items...)

	verdict := seg{"no", sGreen}
	if s.Contention {
		verdict = seg{"YES", sRed}
	}
	agentCPU := humanize.Duration(s.IntervalCPU) + "/interval"
	if s.Interval > 0 {
		agentCPU += " (" + humanize.Percent(s.IntervalCPU/s.Interval) + " of a CPU)"
	}
	f.flow("",
		[]seg{{"contention ", ""}, verdict},
		[]seg{{"ratio " + humanize.Ratio(s.ContentionRatio), styleIf(s.Contention, sRed)}},
		[]seg{{"perf fds " + strconv.Itoa(s.PerfFDs), ""}},
		[]seg{{"agent cpu " + agentCPU, ""}},
	)
}

// flow writes items separated by two blanks, wrapping to a new line, indented
// by indent, when the next item would overflow the width.
func (f *frame) flow(indent string, items ...[]seg) {
	const sep = "  "
	var cur []seg
	used := 0
	for _, it := range items {
		n := 0
		for _, sg := range it {
			n += utf8.RuneCountInString(sg.text)
		}
		switch {
		case len(cur) == 0:
		case used+len(sep)+n <= f.width:
			cur = append(cur, seg{sep, ""})
			used += len(sep)
		default:
			f.line(cur...)
			cur = []seg{{indent, ""}}
			used = utf8.RuneCountInString(indent)
		}
		cur = append(cur, it...)
		used += n
	}
	if len(cur) > 0 {
		f.line(cur...)
	}
}

func (f *frame) probes(ps []api.ProbeState) {
	f.blank()
	if len(ps) == 0 {
		f.title("PROBES", "none")
		return
	}
	f.title("PROBES", fmt.Sprintf("canary latency vs quiet baseline; SLOW at >= %.1f×", SlowRatio))
	ps = slices.Clone(ps)
	slices.SortStableFunc(ps, func(a, b api.ProbeState) int {
		return cmp.Or(cmp.Compare(a.Domain, b.Domain), probeOrder(a.Kind)-probeOrder(b.Kind), strings.Compare(a.Kind, b.Kind))
	})
	cols := []*column{
		{head: "DOMAIN", right: true, keep: 9},
		{head: "PROBE", keep: 9},
		{head: "CPU", right: true, keep: 1},
		{head: "LATENCY", right: true, keep: 8},
		{head: "BASELINE", right: true, keep: 7},
		{head: "RATIO", right: true, keep: 9},
		{head: "", keep: 9},
	}
	for _, p := range ps {
		slow := p.Ratio >= SlowRatio
		flag := ""
		if slow {
			flag = "SLOW"
		}
		st := styleIf(slow, sRed)
		cols[0].add(strconv.Itoa(p.Domain), "")
		cols[1].add(clean(p.Kind), "")
		cols[2].add(strconv.Itoa(p.CPU), "")
		cols[3].add(humanize.Duration(p.LatencyNs/1e9), st)
		cols[4].add(humanize.Duration(p.BaselineNs/1e9), "")
		cols[5].add(humanize.Ratio(p.Ratio), st)
		cols[6].add(flag, st)
	}
	f.table(cols)
}

func probeOrder(kind string) int {
	switch kind {
	case "lock":
		return 0
	case "llc":
		return 1
	case "dram":
		return 2
	}
	return 3
}

func cmpDesc(a, b float64) int {
	// NaN sorts last.
	switch {
	case math.IsNaN(a) && math.IsNaN(b):
		return 0
	case math.IsNaN(a):
		return 1
	case math.IsNaN(b):
		return -1
	}
	return cmp.Compare(b, a)
}

func tenantName(t api.TenantState) string {
	if t.Name != "" {
		return clean(t.Name)
	}
	return clean(t.ID)
}

// tenants lists up to rows of list.shown; matched is every tenant the
// filter kept, so that the columns are the same whatever the height.
func (f *frame) tenants(list tenantList, matched []api.TenantState, rows int) {
	f.blank()
	note := ""
	if list.filter != "" {
		note = fmt.Sprintf(" (%d match %q)", len(matched), list.filter)
	}
	if len(list.shown) == 0 || rows <= 0 {
		switch {
		case list.all == 0:
			f.title("TENANTS", "none")
		case len(matched) == 0:
			f.title("TENANTS", fmt.Sprintf("%d, none match %q", list.all, list.filter))
		default:
			f.title("TENANTS", fmt.Sprintf("%d%s, %s", list.all, note, list.sort.describe()))
			f.line(seg{fmt.Sprintf("  … %d more (a taller terminal, or --height, shows them)", len(matched)), sDim})
		}
		return
	}
	ts := list.shown[:min(rows, len(list.shown))]
	f.title("TENANTS", fmt.Sprintf("%d%s, %s", list.all, note, list.sort.describe()))
	defer func() {
		if more := len(matched) - len(ts); more > 0 {
			f.line(seg{fmt.Sprintf("  … %d more", more), sDim})
		}
	}()

	has := func(ev ...string) bool {
		for _, t := range matched {
			ok := true
			for _, e := range ev {
				if _, found := t.Counters[e]; !found {
					ok = false
				}
			}
			if ok {
				return true
			}
		}
		return false
	}
	name := &column{head: "NAME", keep: 100, flex: true}
	kind := &column{head: "KIND", keep: 3}
	cpus := &column{head: "CPUS", keep: 1}
	cpu := &column{head: "CPU", right: true, keep: 90}
	delay := &column{head: "RUNDELAY", right: true, keep: 60}
	psi := &column{head: "PSI", right: true, keep: 40}
	cols := []*column{name, kind, cpus, cpu, delay, psi}
	var busLocks, ipc, cpiRatio, llc *column
	if has("bus_locks") {
		busLocks = &column{head: "BUSLOCK/s", right: true, keep: 70}
		cols = append(cols, busLocks)
	}
	if has("instructions", "cycles") {
		ipc = &column{head: "IPC", right: true, keep: 50}
		cols = append(cols, ipc)
	}
	if slices.ContainsFunc(matched, func(t api.TenantState) bool { return t.CPIRatio > 0 }) {
		// Its cycles per instruction against its usual: over 1.3× (the
		// agent's default cpi.ratio) it is slowed per instruction.
		cpiRatio = &column{head: "CPI×", right: true, keep: 55}
		cols = append(cols, cpiRatio)
	}
	if has("llc_misses") {
		llc = &column{head: "LLCMISS/s", right: true, keep: 30}
		cols = append(cols, llc)
	}
	quota := &column{head: "QUOTA", right: true, keep: 45}
	duty := &column{head: "DUTY", right: true, keep: 20}
	flags := &column{head: "FLAGS", keep: 95}
	score := &column{head: "SCORE", right: true, keep: 99}
	cols = append(cols, quota, duty, flags, score)
	var heldBy *column
	for _, t := range matched {
		if len(t.Holds) > 0 {
			heldBy = &column{head: "HELD BY", keep: 0} // the first to go on a narrow terminal
			cols = append(cols, heldBy)
			break
		}
	}

	for _, t := range ts {
		suspect := t.Score > 0
		name.add(tenantName(t), styleIf(suspect, sBold))
		kind.add(clean(t.Kind), "")
		cpus.add(clean(t.CPUs), "")
		cpu.add(fmt.Sprintf("%.2f", t.CPU), "")
		delay.add(perSecond(t.RunDelay), "")
		psi.add(humanize.Percent(t.PSI), "")
		if busLocks != nil {
			v, ok := t.Counters["bus_locks"]
			busLocks.add(rateOrDash(v, ok), styleIf(ok && v > 0, sYellow))
		}
		if ipc != nil {
			in, ok1 := t.Counters["instructions"]
			cy, ok2 := t.Counters["cycles"]
			if ok1 && ok2 && cy > 0 {
				ipc.add(fmt.Sprintf("%.2f", in/cy), "")
			} else {
				ipc.add("-", "")
			}
		}
		if cpiRatio != nil {
			if t.CPIRatio > 0 {
				cpiRatio.add(humanize.Ratio(t.CPIRatio), styleIf(t.CPIRatio >= cpiSlowed, sYellow))
			} else {
				cpiRatio.add("-", "")
			}
		}
		if llc != nil {
			v, ok := t.Counters["llc_misses"]
			llc.add(rateOrDash(v, ok), "")
		}
		if t.Quota > 0 {
			quota.add(fmt.Sprintf("%.2f", t.Quota), "")
		} else {
			quota.add("-", "")
		}
		if t.Throttled {
			duty.add(humanize.Percent(t.Duty), sYellow)
		} else {
			duty.add("-", "")
		}
		var fl []string
		st := ""
		if t.Throttled {
			fl = append(fl, "THROTTLED")
			st = sYellow
		}
		if heldBy != nil {
			// Which policies hold it (a bus-lock budget, a permit, the
			// probe's duty controller…): an operator asks "why" first.
			var by []string
			for _, h := range t.Holds {
				p, _, _ := strings.Cut(string(h.Policy), ":") // power:0 → power
				if p = clean(p); !slices.Contains(by, p) {
					by = append(by, p)
				}
			}
			heldBy.add(strings.Join(by, "+"), "")
		}
		if t.Protected {
			fl = append(fl, "PROTECTED")
			if st == "" {
				st = sCyan
			}
		}
		flags.add(strings.Join(fl, ","), st)
		if suspect {
			score.add(fmt.Sprintf("%.2f", t.Score), sRed)
		} else {
			score.add("-", "")
		}
	}
	f.table(cols)
}

// suspects lists the suspects, highest score first, in at most lines lines
// (title included) when lines >= 0: reasons go first, then whole suspects,
// counted in a "… N more" line.
func (f *frame) suspects(ss []api.Suspect, lines int) {
	if lines == 0 {
		return
	}
	f.blank()
	if len(ss) == 0 {
		f.title("SUSPECTS", "none")
		return
	}
	f.title("SUSPECTS", "")
	ss = slices.Clone(ss)
	slices.SortStableFunc(ss, func(a, b api.Suspect) int { return cmpDesc(a.Score, b.Score) })
	used := 2 // the blank and the title
	for i, s := range ss {
		name := clean(s.Name)
		if name == "" {
			name = clean(s.Tenant)
		}
		one := &frame{width: f.width, color: f.color}
		one.flow("    ", []seg{{"  " + name + idNote(s.Tenant, name), sRed}}, []seg{{fmt.Sprintf("score %.2f", s.Score), ""}})
		bare := one.b.String()
		for _, r := range s.Reasons {
			one.line(seg{"    - " + clean(r), ""})
		}
		text := one.b.String()
		if lines >= 0 {
			// Room for this suspect and, if any follow, for the line
			// counting them.
			room := lines - used
			if i < len(ss)-1 {
				room--
			}
			if lineCount(text) > room {
				text = bare
			}
			if lineCount(text) > room {
				if lines-used > 0 {
					f.line(seg{fmt.Sprintf("  … %d more", len(ss)-i), sDim})
				}
				return
			}
		}
		f.b.WriteString(text)
		used += lineCount(text)
	}
}

func (f *frame) proof(s api.State) {
	f.blank()
	p := s.Proof
	if p == nil {
		f.title("PROOF", "none in progress")
		return
	}
	f.title("PROOF", "in progress")
	name := clean(p.Name)
	if name == "" {
		name = clean(p.Tenant)
	}
	items := [][]seg{{{"  " + name + idNote(p.Tenant, name), sBold}}}
	if !p.Started.IsZero() {
		started := "started " + p.Started.Format("15:04:05")
		if !s.Time.IsZero() && !s.Time.Before(p.Started) {
			started += " (" + s.Time.Sub(p.Started).Round(time.Second).String() + " ago)"
		}
		items = append(items, []seg{{started, ""}})
	}
	items = append(items, []seg{{"contention before " + humanize.Ratio(p.Before) + ", now " + humanize.Ratio(s.ContentionRatio), ""}})
	f.flow("    ", items...)
}

// idNote is " (ID)" when the tenant's ID says more than its name.
func idNote(id, name string) string {
	if id == "" || strings.Contains(id, name) && name != "" {
		return ""
	}
	return " (" + clean(id) + ")"
}

// actions shows the last rows actions (at most MaxActions), and the
// totals; rows 0 shows the totals only.
func (f *frame) actions(s api.State, rows int) {
	f.blank()
	var totals []string
	for _, k := range slices.Sorted(maps.Keys(s.ActionsTotal)) {
		totals = append(totals, fmt.Sprintf("%s %d", clean(k), s.ActionsTotal[k]))
	}
	var proofs []string
	for _, k := range slices.Sorted(maps.Keys(s.ProofsTotal)) {
		proofs = append(proofs, fmt.Sprintf("%s %d", clean(k), s.ProofsTotal[k]))
	}
	totalsLine := func() {
		f.flow("    ",
			[]seg{{"  actions since start: " + orNone(strings.Join(totals, ", ")), ""}},
			[]seg{{"proofs: " + orNone(strings.Join(proofs, ", ")), ""}})
	}
	if len(s.Actions) == 0 {
		f.title("ACTIONS", "none yet")
		totalsLine()
		return
	}
	if rows <= 0 {
		f.title("ACTIONS", fmt.Sprintf("%d recent, not shown for want of lines", min(len(s.Actions), MaxActions)))
		totalsLine()
		return
	}
	acts := s.Actions
	if n := min(rows, MaxActions); len(acts) > n {
		acts = acts[len(acts)-n:]
	}
	f.title("ACTIONS", fmt.Sprintf("last %d, newest last", len(acts)))
	totalsLine()
	cols := []*column{
		{head: "TIME", keep: 90},
		{head: "ACTION", keep: 99},
		{head: "TENANT", keep: 100, flex: true},
		{head: "QUOTA", right: true, keep: 50},
		{head: "DUTY", right: true, keep: 40},
		{head: "REASON", keep: 80, flex: true},
	}
	for _, a := range acts {
		when := "-"
		if !a.Time.IsZero() {
			when = a.Time.Format("15:04:05")
		}
		kind := clean(string(a.Kind))
		if a.DryRun {
			kind += " (dry)"
		}
		name := clean(a.Name)
		if name == "" {
			name = clean(a.Tenant)
		}
		q := "-"
		if a.Quota > 0 {
			q = fmt.Sprintf("%.2f", a.Quota)
		}
		cols[0].add(when, "")
		cols[1].add(kind, actionStyle(a.Kind))
		cols[2].add(name, "")
		cols[3].add(q, "")
		cols[4].add(humanize.Percent(a.Duty), "")
		cols[5].add(orNone(clean(a.Reason)), "")
	}
	f.table(cols)
}

func actionStyle(kind api.ActionKind) string {
	switch kind {
	case api.KindThrottle, api.KindTighten:
		return sYellow
	case api.KindRelax, api.KindRelease:
		return sGreen
	case api.KindProof:
		return sCyan
	}
	return ""
}

// column is one column of a table.
type column struct {
	head  string
	right bool
	// keep ranks columns for a narrow terminal: the lowest goes first.
	keep int
	// flex columns give up width (down to flexMin) before any column is dropped.
	flex  bool
	cells []seg
	width int
}

const flexMin = 10

func (c *column) add(text, style string) { c.cells = append(c.cells, seg{text, style}) }

// table lays cols out in the frame width: flexible columns shrink first,
// then the least important columns are dropped; a name that does not fit is
// cut with an ellipsis.
func (f *frame) table(cols []*column) {
	natural := func(c *column) {
		c.width = utf8.RuneCountInString(c.head)
		for _, cell := range c.cells {
			c.width = max(c.width, utf8.RuneCountInString(cell.text))
		}
	}
	for _, c := range cols {
		natural(c)
	}
	const gap = 2
	const indent = 2
	total := func() int {
		n := indent
		for i, c := range cols {
			if i > 0 {
				n += gap
			}
			n += c.width
		}
		return n
	}
	shrink := func(floor int) {
		// Take from the widest flexible column first.
		for over := total() - f.width; over > 0; over = total() - f.width {
			var widest *column
			for _, c := range cols {
				if c.flex && c.width > floor && (widest == nil || c.width > widest.width) {
					widest = c
				}
			}
			if widest == nil {
				return
			}
			widest.width--
		}
	}
	shrink(flexMin)
	for total() > f.width && len(cols) > 1 {
		drop := 0
		for i, c := range cols {
			if c.keep < cols[drop].keep {
				drop = i
			}
		}
		cols = slices.Delete(cols, drop, drop+1)
		// The room the dropped column leaves goes back to the flexible
		// columns shrunk to make it fit.
		for _, c := range cols {
			if c.flex {
				natural(c)
			}
		}
		shrink(flexMin)
	}
	shrink(4)

	row := func(cell func(c *column) seg) {
		segs := []seg{{strings.Repeat(" ", indent), ""}}
		for i, c := range cols {
			if i > 0 {
				segs = append(segs, seg{strings.Repeat(" ", gap), ""})
			}
			sg := cell(c)
			sg.text = pad(humanize.Truncate(sg.text, c.width), c.width, c.right)
			segs = append(segs, sg)
		}
		f.line(segs...)
	}
	row(func(c *column) seg { return seg{c.head, sDim} })
	for r := range cols[0].cells {
		row(func(c *column) seg { return c.cells[r] })
	}
}

func pad(s string, n int, right bool) string {
	k := n - utf8.RuneCountInString(s)
	if k <= 0 {
		return s
	}
	if right {
		return strings.Repeat(" ", k) + s
	}
	return s + strings.Repeat(" ", k)
}

// clean makes text from tenants (names, reasons) safe to print on a terminal:
// control characters, escape sequences included, become '?', and invalid
// UTF-8 the replacement character.
func clean(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return '?'
		}
		return r
	}, s)
}

func styleIf(b bool, style string) string {
	if b {
		return style
	}
	return ""
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// perSecond formats a time per second (run delay): 250ms/s.
func perSecond(v float64) string {
	if v == 0 {
		return "0"
	}
	return humanize.Duration(v) + "/s"
}

func rateOrDash(v float64, ok bool) string {
	if !ok {
		return "-"
	}
	return humanize.SI(v, "")
}

// cpiSlowed is the CPI ratio top marks: the agent's default cpi.ratio.
const cpiSlowed = 1.3
