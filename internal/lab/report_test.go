package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"image/png"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const hostile = "<b>&x"

// reportResult is a hand-built run: three policies, a polluter and a
// bystander with a name that needs escaping, actions, and a nil slowdown.
func reportResult() *Result {
	var samples []Sample
	for i := 0; i <= 40; i++ {
		t := float64(i) * 0.125
		v := 20.0
		if t >= 1 && t < 4 {
			v = 160
		}
		samples = append(samples, Sample{T: t, Value: v + float64(i%3)})
	}
	events := []TenantEvent{
		{T: 1, Tenant: "polluter", Role: RolePolluter, Kind: "start"},
		{T: 2, Tenant: hostile, Role: RoleBystander, Kind: "start"},
		{T: 4, Tenant: "polluter", Role: RolePolluter, Kind: "stop"},
	}
	tenants := func(vsd *float64, thr float64) map[string]TenantResult {
		return map[string]TenantResult{
			"victim":   {Role: RoleVictim, Metric: "ns_per_access", Value: ptr(160), Slowdown: vsd},
			"polluter": {Role: RolePolluter, Metric: "locks_per_sec", Value: ptr(2e5), Slowdown: ptr(5), ThrottledSeconds: thr},
			hostile:    {Role: RoleBystander, Metric: "mb_per_sec", Value: ptr(900), Slowdown: ptr(1.1), ThrottledSeconds: thr / 2},
		}
	}
	return &Result{
		Scenario: "buslock<script>", Description: `a "hostile" <i>description</i> & more`, Host: "host-1",
		Phase: 5, Repetitions: 2, Victim: "victim",
		Solo: map[string]Solo{
			"victim":   {Metric: "ns_per_access", Unit: "ns", Direction: "lower", Value: ptr(20), Values: []float64{20}},
			"polluter": {Metric: "locks_per_sec", Unit: "locks/s", Direction: "higher", Value: ptr(1e6)},
			hostile:    {Metric: "mb_per_sec", Unit: "MB/<s>", Direction: "higher", Value: ptr(1000)},
		},
		Results: []PolicyResult{
			{Policy: "none", VictimSlowdown: ptr(8), Tenants: tenants(ptr(8), 0), Actions: []Action{},
				Timeline: Timeline{Victim: samples, Events: events}},
			{Policy: "crosstalk", VictimSlowdown: ptr(1.25), Tenants: tenants(ptr(1.25), 4.2),
				FirstActionSeconds: ptr(0.5), ReleaseSeconds: ptr(0.25),
				Actions: []Action{
					{T: 1.5, Tenant: "polluter", Kind: "throttle", Quota: 0.1, Detail: "bus locks"},
					{T: 2.5, Tenant: hostile, Kind: "cap", Quota: 0.5},
					{T: 4.25, Tenant: "polluter", Kind: "release"},
				},
				Timeline: Timeline{Victim: samples, Events: events}},
			{Policy: "broken", VictimSlowdown: nil, Tenants: tenants(nil, 1), Actions: []Action{},
				Timeline: Timeline{Victim: samples[:10], Events: events}},
		},
	}
}

func reportMatrix() *Matrix {
	m := &Matrix{Phase: 3, Victims: []string{"chase", "server"}, Polluters: []string{"splitlock", "stream", hostile},
		Solo: map[string]float64{"chase": 20, "server": 140},
		Slowdown: map[string]map[string]float64{
			"chase":  {"splitlock": 8.5, "stream": 3.25, hostile: 0.9},
			"server": {"splitlock": 4, "stream": 1.5},
		}}
	m.rank()
	return m
}

func render(t *testing.T, r *Result) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteReport(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func renderMatrix(t *testing.T, m *Matrix) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteMatrixReport(&b, m); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

var svgRE = regexp.MustCompile(`(?s)<svg\b.*?</svg>`)

// checkPage checks what every page must be: each <svg> well-formed XML with
// finite coordinates inside its viewBox, no NaN or Inf anywhere, and no
// unescaped hostile string. It returns the SVG elements.
func checkPage(t *testing.T, page string) []string {
	t.Helper()
	for _, bad := range []string{"NaN", "Inf", hostile, "<script", "<i>", "ZgotmplZ"} {
		if strings.Contains(page, bad) {
			t.Errorf("page contains %q", bad)
		}
	}
	if !strings.HasPrefix(page, "<!DOCTYPE html>") || !strings.Contains(page, "</html>") {
		t.Error("not a whole HTML page")
	}
	for _, external := range []string{"<script", "<link", "src=", "http://", "https://"} {
		// the SVG namespace is the one URL allowed
		if strings.Contains(strings.ReplaceAll(page, `xmlns="http://www.w3.org/2000/svg"`, ""), external) {
			t.Errorf("page refers to something outside itself: %q", external)
		}
	}
	svgs := svgRE.FindAllString(page, -1)
	for i, s := range svgs {
		checkSVG(t, i, s)
	}
	return svgs
}

var coordAttrs = map[string]bool{"x": true, "y": true, "x1": true, "x2": true, "y1": true, "y2": true,
	"cx": true, "cy": true, "r": true, "width": true, "height": true}

func checkSVG(t *testing.T, i int, s string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(s))
	d.Strict = true
	var vw, vh float64
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("svg %d is not well-formed XML: %v\n%s", i, err, s)
		}
		el, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		for _, a := range el.Attr {
			switch {
			case el.Name.Local == "svg" && a.Name.Local == "viewBox":
				f := strings.Fields(a.Value)
				vw, _ = strconv.ParseFloat(f[2], 64)
				vh, _ = strconv.ParseFloat(f[3], 64)
			case coordAttrs[a.Name.Local]:
				v, err := strconv.ParseFloat(a.Value, 64)
				if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
					t.Errorf("svg %d: <%s %s=%q>", i, el.Name.Local, a.Name.Local, a.Value)
				} else if v < -1 || (vw > 0 && v > math.Max(vw, vh)+1) {
					t.Errorf("svg %d: <%s %s=%q> outside the %vx%v view", i, el.Name.Local, a.Name.Local, a.Value, vw, vh)
				}
			case a.Name.Local == "points" || a.Name.Local == "d":
				if strings.Contains(a.Value, "NaN") || strings.Contains(a.Value, "Inf") {
					t.Errorf("svg %d: %s=%q", i, a.Name.Local, a.Value)
				}
			}
		}
	}
	if vw <= 0 || vh <= 0 {
		t.Errorf("svg %d has no viewBox", i)
	}
}

func wantAll(t *testing.T, page string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(page, w) {
			t.Errorf("page lacks %q", w)
		}
	}
}

func TestWriteReport(t *testing.T) {
	r := reportResult()
	page := render(t, r)
	svgs := checkPage(t, page)
	if want := len(r.Results) + 2; len(svgs) != want {
		t.Errorf("%d <svg> elements, want %d (a timeline per policy, slowdowns, throttling)", len(svgs), want)
	}
	wantAll(t, page,
		// title, description, host, escaped
		"crosstalk lab: buslock&lt;script&gt;", "a &#34;hostile&#34; &lt;i&gt;description&lt;/i&gt; &amp; more", "host-1",
		// summary table
		"<th>policy</th>", "ns_per_access ↓ (ns)", "mb_per_sec ↑ (MB/&lt;s&gt;)", "8.00×", "1.25×", "n/a", "4.2s", "2.1s",
		"throttled 0.50s", "released 0.25s",
		// the hostile tenant, escaped in the table and in the SVGs
		"<td>&lt;b&gt;&amp;x</td>", "&lt;b&gt;&amp;x starts",
		// timeline: axis, solo line, events, actions as tooltips
		"ns_per_access (ns), lower is better", "seconds since the co-located phase started", "solo 20 ns",
		"<title>1.00s: polluter starts (polluter)</title>", "<title>4.00s: polluter stops (polluter)</title>",
		"<title>1.50s: throttle polluter to 0.10 CPUs — bus locks</title>",
		"<title>2.50s: cap &lt;b&gt;&amp;x to 0.50 CPUs</title>",
		"<title>4.25s: release polluter (quota unlimited)</title>",
		`stroke-dasharray="6 4"`, "policy action", "policy release",
		// slowdown and throttling charts
		"victim slowdown per policy", "1.0 = as fast as solo", "throttled seconds per policy and tenant",
		"crosstalk: polluter throttled 4.2s",
		// footer
		"slowdown = co-located / solo, oriented so that &gt; 1 is worse",
	)
	// The page shows the slowdown and throttling charts, then a timeline per policy.
	bars, timeline := svgs[0], svgs[2]
	// Round ticks: seconds 0…5 in steps of 0.5, the metric 0…200 in steps of 50.
	for _, tick := range []string{">0</text>", ">0.5</text>", ">5.0</text>", ">150</text>", ">200</text>"} {
		if !strings.Contains(timeline, tick) {
			t.Errorf("timeline lacks tick %q", tick)
		}
	}
	// The nil slowdown shows as "n/a" in the bar chart.
	if !strings.Contains(bars, ">n/a</text>") || !strings.Contains(bars, ">8.00×</text>") {
		t.Errorf("slowdown chart lacks n/a or 8.00×:\n%s", bars)
	}
}

func TestWriteReportEdgeCases(t *testing.T) {
	one := reportResult()
	one.Results = one.Results[:1]
	one.Results[0].Timeline.Victim = []Sample{{T: 2, Value: 30}}

	flat := reportResult()
	for i := range flat.Results {
		flat.Results[i].Timeline.Victim = []Sample{{T: 0, Value: 7}, {T: 0, Value: 7}, {T: 0, Value: 7}}
		flat.Results[i].Timeline.Events = []TenantEvent{{T: 0, Tenant: "p", Role: RolePolluter, Kind: "start"}}
		flat.Results[i].Actions = []Action{{T: 0, Tenant: "p", Kind: "throttle"}}
		flat.Results[i].VictimSlowdown = ptr(1)
		for n, tr := range flat.Results[i].Tenants {
			tr.ThrottledSeconds = 0
			flat.Results[i].Tenants[n] = tr
		}
	}
	flat.Phase = 0
	flat.Solo["victim"] = Solo{Metric: "ns_per_access", Value: ptr(7)}

	zeros := reportResult()
	zeros.Solo["victim"] = Solo{Metric: "ops", Direction: "higher", Value: ptr(0)}
	for i := range zeros.Results {
		zeros.Results[i].Timeline.Victim = []Sample{{T: 1, Value: 0}, {T: 2, Value: 0}}
	}

	empty := reportResult()
	for i := range empty.Results {
		empty.Results[i].Timeline = Timeline{}
		empty.Results[i].VictimSlowdown = nil
	}

	weird := reportResult()
	weird.Phase = math.NaN()
	weird.Solo["victim"] = Solo{Metric: "m", Value: ptr(math.Inf(1))}
	weird.Results[0].Timeline.Victim = []Sample{{T: math.NaN(), Value: 1}, {T: 1, Value: math.Inf(-1)}, {T: 2, Value: 1e300}, {T: 3, Value: -1e300}}
	weird.Results[0].VictimSlowdown = ptr(math.NaN())
	weird.Results[1].Actions = append(weird.Results[1].Actions, Action{T: math.Inf(1), Kind: "cap", Quota: math.NaN()})

	tests := []struct {
		name  string
		r     *Result
		wants []string
	}{
		{"one sample", one, []string{"<circle", "victim slowdown per policy"}},
		{"zero ranges", flat, []string{"1.00×", "no data: no policy throttled any tenant", ">0.1</text>", ">8</text>"}},
		{"all zero", zeros, []string{"ops, higher is better", "solo 0 "}},
		{"empty timelines, all slowdowns nil", empty, []string{
			"no data: no victim samples in this policy&#39;s timeline",
			"no data: no policy has a victim slowdown"}},
		{"non-finite input", weird, []string{"victim slowdown per policy"}},
		{"nothing at all", &Result{}, []string{"No policy results.", "no data: no policy has a victim slowdown"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			page := render(t, tc.r)
			checkPage(t, page)
			wantAll(t, page, tc.wants...)
		})
	}
	t.Run("one sample has no line", func(t *testing.T) {
		timeline := svgRE.FindAllString(render(t, one), -1)[2]
		if strings.Contains(timeline, "<polyline") || strings.Count(timeline, "<circle") != 1 {
			t.Errorf("one sample should be one dot:\n%s", timeline)
		}
	})
	if err := WriteReport(io.Discard, nil); err == nil {
		t.Error("nil result: no error")
	}
}

func TestWriteMatrixReport(t *testing.T) {
	page := renderMatrix(t, reportMatrix())
	if svgs := checkPage(t, page); len(svgs) != 1 {
		t.Errorf("%d <svg> elements, want the colour key", len(svgs))
	}
	wantAll(t, page, "interference matrix", "3.0s phases", "<th class=\"num\">&lt;b&gt;&amp;x</th>",
		"8.50×", "3.25×", "0.90×", "Aggressiveness", "Sensitivity", "slowdown = co-located / solo")
	// the cell with no measurement, coloured as such
	if !strings.Contains(page, `style="background:#eeeeee;color:#777777">–</td>`) {
		t.Error("missing pair not shown as –")
	}
	// 8.5× is deep red with white text; 0.9× is green-tinted.
	if !strings.Contains(page, `color:#ffffff">8.50×`) {
		t.Error("8.50× cell is not dark")
	}
	// Rankings in order: splitlock inflicts the most, chase suffers the most.
	agg, sens := page[strings.Index(page, "<h2>Aggressiveness"):], page[strings.Index(page, "<h2>Sensitivity"):]
	if !(strings.Index(agg, "splitlock") < strings.Index(agg, "stream")) || !(strings.Index(sens, "chase") < strings.Index(sens, "server")) {
		t.Error("rankings out of order")
	}

	for name, m := range map[string]*Matrix{
		"empty": {},
		"nan":   {Victims: []string{"a"}, Polluters: []string{"b"}, Slowdown: map[string]map[string]float64{"a": {"b": math.NaN()}}, Sensitivity: []Rank{{Load: "a", Mean: math.NaN()}}},
	} {
		t.Run(name, func(t *testing.T) {
			checkPage(t, renderMatrix(t, m))
		})
	}
	if err := WriteMatrixReport(io.Discard, nil); err == nil {
		t.Error("nil matrix: no error")
	}
}

// The fixtures are results as `lab run --json` and `lab matrix --json` print them.
func loadFixture(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func TestReportFixtures(t *testing.T) {
	var r Result
	loadFixture(t, "report-result.json", &r)
	page := render(t, &r)
	if svgs := checkPage(t, page); len(svgs) != len(r.Results)+2 {
		t.Errorf("%d svgs", len(svgs))
	}
	wantAll(t, page, "crosstalk lab: buslock-burst", "lab-host-01", "6.45×", "1.22×", "n/a",
		"no data: no victim samples", "split-lock rate 1.1M/s")

	var m Matrix
	loadFixture(t, "report-matrix.json", &m)
	checkPage(t, renderMatrix(t, &m))
}

func TestScalesAndTicks(t *testing.T) {
	s := linearScale{0, 10, 100, 200}
	if s.at(5) != 150 || s.at(-5) != 100 || s.at(20) != 200 {
		t.Errorf("linearScale: %v %v %v", s.at(5), s.at(-5), s.at(20))
	}
	if v := (linearScale{3, 3, 0, 10}).at(3); v != 5 {
		t.Errorf("zero-width domain → %v, want the middle", v)
	}
	if v := (linearScale{0, 1, 10, 0}).at(math.NaN()); v != 5 {
		t.Errorf("NaN → %v", v)
	}
	tests := []struct {
		lo, hi float64
		n      int
		want   []float64
	}{
		{0, 5, 10, []float64{0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5}},
		{0, 163, 6, []float64{0, 50, 100, 150, 200}},
		{0, 8.5, 5, []float64{0, 2, 4, 6, 8, 10}},
		{7, 7, 6, []float64{6, 6.5, 7, 7.5, 8}},
		{0, 0, 6, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}},
		{math.NaN(), 1, 4, []float64{0, 0.5, 1}},
		{-3, 12, 5, []float64{-5, 0, 5, 10, 15}},
	}
	for _, tc := range tests {
		got, _ := niceTicks(tc.lo, tc.hi, tc.n)
		if len(got) != len(tc.want) {
			t.Errorf("niceTicks(%v, %v, %d) = %v, want %v", tc.lo, tc.hi, tc.n, got, tc.want)
			continue
		}
		for i := range got {
			if math.Abs(got[i]-tc.want[i]) > 1e-9 {
				t.Errorf("niceTicks(%v, %v, %d) = %v, want %v", tc.lo, tc.hi, tc.n, got, tc.want)
				break
			}
		}
	}
	for _, tc := range []struct {
		v, step float64
		want    string
	}{{0, 1, "0"}, {150, 50, "150"}, {0.5, 0.5, "0.5"}, {0.25, 0.05, "0.25"}, {1.2e6, 2e5, "1.2M"}, {40000, 10000, "40k"}} {
		if got := fmtTick(tc.v, tc.step); got != tc.want {
			t.Errorf("fmtTick(%v, %v) = %q, want %q", tc.v, tc.step, got, tc.want)
		}
	}
}

// ---- headless Chromium ----

func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium not installed: apt-get install chromium")
	return ""
}

// runChromium runs headless Chromium on a fresh profile with args and returns
// its stdout. It kills the browser's whole process group when it is done or
// after a minute, and fails the test if any process of it is left.
func runChromium(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	profile := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	argv := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--user-data-dir=" + profile}, args...)
	cmd := exec.CommandContext(ctx, bin, argv...)
	cmd.Env = append(os.Environ(), "HOME="+profile, "XDG_CONFIG_HOME="+profile, "XDG_CACHE_HOME="+profile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // whatever of the group is left
	}
	t.Logf("chromium %s: %.1fs", strings.SplitN(args[0], "=", 2)[0], time.Since(start).Seconds())
	// Chromium's crash handlers run in sessions of their own and exit soon
	// after the browser; they carry the profile (HOME) in their arguments.
	left := processesMentioning(profile)
	for deadline := time.Now().Add(5 * time.Second); len(left) > 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		left = processesMentioning(profile)
	}
	if len(left) > 0 {
		for _, pid := range left {
			if pgid, err := syscall.Getpgid(pid); err == nil && pgid != syscall.Getpgrp() {
				syscall.Kill(-pgid, syscall.SIGKILL) // and whatever it started
			}
			syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Errorf("chromium left processes behind: %v", left)
	}
	if ctx.Err() != nil {
		t.Fatalf("chromium timed out: %v\n%s", ctx.Err(), stderr.Bytes())
	}
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.Bytes())
	}
	return stdout.Bytes()
}

// processesMentioning lists the live processes whose command line contains
// s (a zombie's is empty).
func processesMentioning(s string) []int {
	var pids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(s)) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(d)); err == nil && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestReportInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	bin := findChromium(t)
	dir := t.TempDir()

	var r Result
	loadFixture(t, "report-result.json", &r)
	r.Description += " " + hostile
	page := render(t, &r)
	html := filepath.Join(dir, "report.html")
	if err := os.WriteFile(html, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	url := "file://" + html

	// The DOM as the browser built it: every SVG survived parsing, the
	// text is there, and the hostile name stayed text.
	dom := string(runChromium(t, bin, "--dump-dom", url))
	if got, want := strings.Count(dom, "<svg"), strings.Count(page, "<svg"); got != want || want == 0 {
		t.Errorf("DOM has %d <svg> elements, the page %d", got, want)
	}
	wantAll(t, dom, "crosstalk lab: buslock-burst", "victim slowdown per policy", "throttled seconds per policy and tenant",
		"<polyline", "6.45×", "n/a", "&lt;b&gt;&amp;x", "slowdown = co-located / solo")
	if strings.Contains(dom, "<b>&amp;x") {
		t.Error("the hostile tenant name became markup")
	}

	// A screenshot: it decodes and is mostly, but far from all, white, with
	// the victim's blue line and the polluter's red markers on it.
	shot := filepath.Join(dir, "report.png")
	runChromium(t, bin, "--screenshot="+shot, "--window-size=1200,2000", url)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	b := img.Bounds()
	var ink, blue, red int
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			r, g, bl = r>>8, g>>8, bl>>8
			if r < 235 || g < 235 || bl < 235 {
				ink++
			}
			if near(r, 0x1f) && near(g, 0x77) && near(bl, 0xb4) {
				blue++
			}
			if near(r, 0xd6) && near(g, 0x27) && near(bl, 0x28) {
				red++
			}
		}
	}
	total := b.Dx() * b.Dy()
	t.Logf("screenshot %dx%d: %.1f%% ink, %d victim-blue and %d polluter-red pixels", b.Dx(), b.Dy(), 100*float64(ink)/float64(total), blue, red)
	if b.Dx() != 1200 || b.Dy() != 2000 {
		t.Errorf("screenshot is %dx%d, want 1200x2000", b.Dx(), b.Dy())
	}
	if ink < total/50 || ink > total*9/10 {
		t.Errorf("screenshot has %d of %d pixels inked: blank or garbage", ink, total)
	}
	if blue < 200 || red < 100 {
		t.Errorf("screenshot lacks the plots' colours: %d blue, %d red pixels", blue, red)
	}
	if os.Getenv("CROSSTALK_REPORT_KEEP") != "" {
		os.WriteFile(os.Getenv("CROSSTALK_REPORT_KEEP"), mustRead(t, shot), 0o644)
	}

	// The matrix page parses too.
	var m Matrix
	loadFixture(t, "report-matrix.json", &m)
	mhtml := filepath.Join(dir, "matrix.html")
	if err := os.WriteFile(mhtml, []byte(renderMatrix(t, &m)), 0o644); err != nil {
		t.Fatal(err)
	}
	mdom := string(runChromium(t, bin, "--dump-dom", "file://"+mhtml))
	wantAll(t, mdom, "interference matrix", "8.20×", "<svg", "Aggressiveness")

	// And the visibility page, its hostile load name kept as text.
	var vb bytes.Buffer
	if err := WriteVisibilityReport(&vb, visibilityFixture()); err != nil {
		t.Fatal(err)
	}
	vhtml := filepath.Join(dir, "visibility.html")
	if err := os.WriteFile(vhtml, vb.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	vdom := string(runChromium(t, bin, "--dump-dom", "file://"+vhtml))
	wantAll(t, vdom, "what the agent's probe sees", "7.06× / 7.06×", "often (dram)", "&lt;b&gt;&amp;x", "(quiet again)")
	if strings.Contains(vdom, "<b>&amp;x") {
		t.Error("the hostile load name became markup")
	}
}

func near(c uint32, want uint32) bool { return c+12 >= want && c <= want+12 }

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
