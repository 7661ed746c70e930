package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/humanize"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/load"
	"github.com/crosstalk-project/crosstalk/internal/sense"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

// KindVisibility is the Meta.Kind of `lab visibility`'s result.
const KindVisibility = "lab-visibility"

// VisibilityOptions chooses what `lab visibility` runs and how it reads.
type VisibilityOptions struct {
	// Loads are the built-in loads run one at a time (default: all, or
	// none when Commands are given).
	Loads []string
	// Commands are other programs run the same way, each a shell command
	// line (sh -c), stopped at the end of its phase.
	Commands []string
	// Phase is how long each load runs, and how long the quiet reading
	// before them lasts (default 3 s).
	Phase time.Duration
	// Every is the time between two readings of the probe (default a
	// quarter of the agent's interval: its watch's pace).
	Every time.Duration
	// LoadCPUs are the CPUs the loads run on (default CPU 0); ProbeCPUs
	// those the probe reads on (default: the other allowed CPUs). They
	// must not overlap: the agent proves a suspect on a CPU it does not
	// run on.
	LoadCPUs, ProbeCPUs cpuset.Set
	// Config is the agent's configuration: its probe and its thresholds.
	Config agent.Config
}

// Visibility is what the agent's canary probe read beside each load: the
// pollution the agent can see, and so prove, on this host without a PMU.
type Visibility struct {
	Meta      *Meta   `json:"meta,omitempty"`
	Phase     float64 `json:"phase_seconds"`
	Every     float64 `json:"every_seconds"`
	LoadCPUs  string  `json:"load_cpus"`
	ProbeCPUs string  `json:"probe_cpus"`
	// Thresholds are the ratios over its quiet level at which the agent
	// counts a reading of each kind as contended.
	Thresholds map[string]float64 `json:"thresholds"`
	Quiet      []QuietLevel       `json:"quiet"`
	Loads      []LoadSight        `json:"loads"`
}

// QuietLevel is a probe kind's quiet level, learned with no load running
// as the agent learns its baselines.
type QuietLevel struct {
	Kind     string  `json:"kind"`
	Ns       float64 `json:"ns"`
	Readings int     `json:"readings"`
}

// LoadSight is what the probe read while one load ran.
type LoadSight struct {
	Load  string      `json:"load"`
	Role  string      `json:"role"`
	Kinds []KindSight `json:"kinds"`
	// Seen says how often a DRAM or LLC reading was contended as the agent
	// counts it: SeenOften (half the readings or more), SeenSometimes (a
	// tenth or more) or SeenNo. By is the kind that read it most often.
	Seen string `json:"seen"`
	By   string `json:"by,omitempty"`
}

// KindSight is one probe kind's readings beside a load, as ratios over
// its quiet level.
type KindSight struct {
	Kind     string  `json:"kind"`
	Readings int     `json:"readings"`
	Median   float64 `json:"median"`
	P90      float64 `json:"p90"`
	// Over is how many readings the agent would count as contended: over
	// the kind's threshold and beyond the quiet readings' scatter (for the
	// LLC walk, also not quiet at a proof's pace).
	Over int `json:"over"`
	// ProofPaceMedian is the LLC walk's median ratio read at a proof's
	// pace, back to back after a reading that warms its buffer (0: not
	// read); QuietAtProofPace counts the readings over the threshold
	// whose proof-pace readings were quiet: the agent proves nobody on
	// those.
	ProofPaceMedian  float64 `json:"proof_pace_median,omitempty"`
	QuietAtProofPace int     `json:"quiet_at_proof_pace,omitempty"`
}

// What LoadSight.Seen says.
const (
	SeenOften     = "often"
	SeenSometimes = "sometimes"
	SeenNo        = "no"
)

// visibilityKinds are the probe kinds in the order they are shown.
var visibilityKinds = []string{sense.ProbeDRAM, sense.ProbeLLC, sense.ProbeLock}

// seenBy are the kinds whose contention starts a proof: contention only
// the locked add reads proves nobody (see the agent's proofCPU).
var seenBy = []string{sense.ProbeDRAM, sense.ProbeLLC}

func (vo VisibilityOptions) withDefaults() VisibilityOptions {
	if len(vo.Loads) == 0 && len(vo.Commands) == 0 {
		vo.Loads = allLoads()
	}
	if vo.Phase <= 0 {
		vo.Phase = 3 * time.Second
	}
	if vo.Every <= 0 {
		vo.Every = max(vo.Config.Interval/4, 10*time.Millisecond)
	}
	if vo.LoadCPUs.IsEmpty() {
		vo.LoadCPUs = cpuset.Of(0)
	}
	return vo
}

// Planned is the measured time RunVisibility spends: the quiet reading
// before and after the loads, and a phase per load.
func (vo VisibilityOptions) Planned() time.Duration {
	vo = vo.withDefaults()
	return time.Duration(2+len(vo.Loads)+len(vo.Commands)) * vo.Phase
}

// QuietAgain is the row of the quiet reading taken after the loads.
const QuietAgain = "(quiet again)"

// RoleCommand is the role a command's row shows: what it is, the reader
// says.
const RoleCommand = "command"

// check validates the options against the CPUs this process may use.
func (vo VisibilityOptions) check(allowed cpuset.Set) error {
	all := allLoads()
	for _, k := range vo.Loads {
		if _, ok := load.Lookup(k); !ok {
			return fmt.Errorf("visibility: unknown load %q (have %s)", k, strings.Join(all, ", "))
		}
	}
	if vo.Phase > MaxSplitLockPhase && slices.Contains(vo.Loads, "splitlock") {
		return fmt.Errorf("visibility: phase %s longer than the %s allowed for split locks", vo.Phase, MaxSplitLockPhase)
	}
	rows := map[string]bool{QuietAgain: true}
	for _, l := range vo.Loads {
		if rows[l] {
			return fmt.Errorf("visibility: load %s given twice", l)
		}
		rows[l] = true
	}
	for _, c := range vo.Commands {
		if strings.TrimSpace(c) == "" {
			return errors.New("visibility: an empty command")
		}
		if rows[c] {
			return fmt.Errorf("visibility: command %q given twice, or named as a load", c)
		}
		rows[c] = true
	}
	if vo.Phase > MaxSplitLockPhase && len(vo.Commands) > 0 {
		// What a command does is not known: it may split locks.
		return fmt.Errorf("visibility: phase %s longer than the %s allowed for a command (it may split locks)", vo.Phase, MaxSplitLockPhase)
	}
	if vo.Every > vo.Phase/4 {
		return fmt.Errorf("visibility: a reading every %s gives fewer than four readings in a %s phase", vo.Every, vo.Phase)
	}
	if !vo.LoadCPUs.Difference(allowed).IsEmpty() {
		return fmt.Errorf("visibility: load CPUs %s are not all allowed here (%s)", vo.LoadCPUs, allowed)
	}
	if vo.ProbeCPUs.IsEmpty() {
		return fmt.Errorf("visibility: no CPU left for the probe: the loads take %s of %s", vo.LoadCPUs, allowed)
	}
	if !vo.ProbeCPUs.Difference(allowed).IsEmpty() {
		return fmt.Errorf("visibility: probe CPUs %s are not all allowed here (%s)", vo.ProbeCPUs, allowed)
	}
	if !vo.ProbeCPUs.Intersect(vo.LoadCPUs).IsEmpty() {
		return fmt.Errorf("visibility: probe CPUs %s overlap the load CPUs %s: the agent proves a suspect on a CPU it does not run on", vo.ProbeCPUs, vo.LoadCPUs)
	}
	return nil
}

// RunVisibility reads the agent's canary probe, as the agent builds it
// from vo.Config, with nothing running, then beside each load in turn.
func RunVisibility(ctx context.Context, vo VisibilityOptions, opt Options) (*Visibility, error) {
	vo = vo.withDefaults()
	if err := opt.fill(); err != nil {
		return nil, err
	}
	allowed, err := AllowedCPUs(opt.Host)
	if err != nil {
		return nil, err
	}
	if vo.ProbeCPUs.IsEmpty() {
		vo.ProbeCPUs = allowed.Difference(vo.LoadCPUs)
	}
	if err := vo.check(allowed); err != nil {
		return nil, err
	}
	for _, c := range vo.Commands {
		if err := findProgram(c, exec.LookPath); err != nil {
			return nil, fmt.Errorf("visibility: %w", err)
		}
	}
	topo, err := topology.Read(opt.Host)
	if err != nil {
		return nil, err
	}
	probe, err := sense.NewProbe(topo, allowed, vo.Config.ProbeSettings())
	if err != nil {
		return nil, err
	}
	domainOf := map[int]int{}
	for _, d := range probe.Domains() {
		for _, c := range d.CPUs.List() {
			domainOf[c] = d.ID
		}
	}
	for _, c := range vo.ProbeCPUs.List() {
		if _, ok := domainOf[c]; !ok {
			return nil, fmt.Errorf("visibility: the probe cannot read on CPU %d (no L3 domain of it here)", c)
		}
	}

	// The loads and commands, each as the one tenant of its phase.
	type row struct {
		name string
		t    Tenant
	}
	var rows []row
	for _, l := range vo.Loads {
		k, _ := load.Lookup(l)
		rows = append(rows, row{l, matrixTenant("load", k.Role, l, vo.LoadCPUs)})
	}
	for _, c := range vo.Commands {
		rows = append(rows, row{c, Tenant{Name: "load", Role: RolePolluter, Command: []string{"sh", "-c", c}, CPUs: vo.LoadCPUs.String(), cpus: vo.LoadCPUs}})
	}
	scen := &Scenario{Name: "visibility", Phase: vo.Phase, Repetitions: 1, Tenants: []Tenant{rows[0].t}}
	r, cleanup, err := newRunner(opt, scen)
	if err != nil {
		return nil, err
	}
	defer cleanup()

	read := func(ctx context.Context, stop <-chan struct{}) ([]probeTick, error) {
		return readProbe(ctx, stop, probe, domainOf, vo.ProbeCPUs, vo.Every)
	}
	readQuiet := func() ([]probeTick, error) {
		r.log.Info("visibility: quiet", "seconds", vo.Phase.Seconds(), "probe_cpus", vo.ProbeCPUs.String())
		quietCtx, cancel := context.WithTimeout(ctx, vo.Phase)
		rs, err := read(quietCtx, nil)
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			return nil, fmt.Errorf("visibility: reading the probe: %w", err)
		}
		if opt.Progress != nil {
			opt.Progress(vo.Phase)
		}
		return rs, nil
	}
	quiet, err := readQuiet()
	if err != nil {
		return nil, err
	}
	beside := map[string][]probeTick{}
	var names []string
	for i, rw := range rows {
		r.log.Info("visibility: load", "load", rw.name, "cpus", vo.LoadCPUs.String())
		pol := &probeReader{read: read, settle: min(250*time.Millisecond, vo.Phase/4)}
		if _, err := r.phase(ctx, fmt.Sprintf("visibility-%d", i), vo.Phase, 0, []Tenant{rw.t}, pol); err != nil {
			return nil, fmt.Errorf("visibility: %s: %w", rw.name, err)
		}
		if pol.err != nil {
			return nil, fmt.Errorf("visibility: reading the probe beside %s: %w", rw.name, pol.err)
		}
		beside[rw.name] = pol.readings
		names = append(names, rw.name)
	}
	// Quiet again at the end: how far the host itself moved the probe
	// while the loads ran (on a VM the physical host's other guests move
	// it too), the noise every load's row is read against.
	if beside[QuietAgain], err = readQuiet(); err != nil {
		return nil, err
	}
	v := judgeVisibility(vo.Config.Thresholds(), quiet, append(names, QuietAgain), beside)
	for i := len(vo.Loads); i < len(names); i++ {
		v.Loads[i].Role = RoleCommand
	}
	v.Meta = opt.stamp(KindVisibility)
	v.Phase, v.Every = vo.Phase.Seconds(), vo.Every.Seconds()
	v.LoadCPUs, v.ProbeCPUs = vo.LoadCPUs.String(), vo.ProbeCPUs.String()
	return v, nil
}

// probeTick is one CPU's reading of every kind, as an interval reads it,
// and the LLC walk read right after at a proof's pace, as the agent
// checks before it proves on the LLC walk (prover.readable): one
// reading that warms the buffer, then precheckLLC back to back.
type probeTick struct {
	Reading  []sense.ProbeReading
	ProofLLC []sense.ProbeReading
}

// precheckLLC is how many LLC readings at a proof's pace follow a tick's
// reading (the agent's precheckReadings).
const precheckLLC = 4

// findProgram checks that the program a command line starts is installed,
// so that a typo fails before any load runs, not in the middle. A line
// that starts with an assignment or shell syntax is left to the shell.
func findProgram(line string, lookPath func(string) (string, error)) error {
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return errors.New("an empty command")
	}
	prog := fields[0]
	if shellSyntax(prog) {
		return nil
	}
	if _, err := lookPath(prog); err != nil {
		return fmt.Errorf("command %q: %s is not installed here (or not on PATH)", line, prog)
	}
	return nil
}

// shellSyntax reports whether the first word of a command line is the
// shell's (an assignment, a quote, a keyword ...) rather than a program.
func shellSyntax(word string) bool {
	return strings.ContainsAny(word, "=$`'\"(){}[];&|<>*?~\\") || shellWords[word]
}

// shellWords are the shell's own words that may start a command line:
// what runs is further on.
var shellWords = map[string]bool{"exec": true, "if": true, "for": true, "while": true, "until": true, "case": true, "!": true, "time": true}

// readProbe reads the probe on each CPU, every every, until ctx ends or
// stop is closed.
func readProbe(ctx context.Context, stop <-chan struct{}, probe *sense.Probe, domainOf map[int]int, cpus cpuset.Set, every time.Duration) ([]probeTick, error) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	var out []probeTick
	for {
		select {
		case <-ctx.Done():
			return out, nil
		case <-stop:
			return out, nil
		case <-tick.C:
		}
		for _, c := range cpus.List() {
			rs, err := probe.MeasureCPU(domainOf[c], c)
			if err != nil {
				return out, err
			}
			t := probeTick{Reading: rs}
			for i := range precheckLLC + 1 {
				once, err := probe.MeasureOnce(domainOf[c], c, sense.ProbeLLC)
				if err != nil {
					return out, err
				}
				if i > 0 {
					t.ProofLLC = append(t.ProofLLC, once...)
				}
			}
			out = append(out, t)
		}
	}
}

// probeReader is a lab policy that touches nothing: it reads the probe
// through a phase, from settle on (the load's start-up left out).
type probeReader struct {
	read   func(ctx context.Context, stop <-chan struct{}) ([]probeTick, error)
	settle time.Duration

	stop     chan struct{}
	wg       sync.WaitGroup
	readings []probeTick
	err      error
}

func (p *probeReader) Name() string { return "probe" }

func (p *probeReader) Begin(ctx context.Context, _ *PolicyEnv) error {
	p.stop = make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		select {
		case <-time.After(p.settle):
		case <-p.stop:
			return
		case <-ctx.Done():
			return
		}
		p.readings, p.err = p.read(ctx, p.stop)
	}()
	return nil
}

func (p *probeReader) End(context.Context) error {
	close(p.stop)
	p.wg.Wait()
	return nil
}

// judgeVisibility rates each load's readings against the quiet ones as
// the agent would: baselines learned from the quiet readings
// (judge.Contention.Calibrate), each reading rated and counted contended
// by the agent's own rule (judge.Contention.Above), and a contended LLC
// reading counted only where the readings at a proof's pace after it were
// not quiet either (the agent proves nobody on the LLC walk otherwise).
func judgeVisibility(th judge.Thresholds, quiet []probeTick, loads []string, beside map[string][]probeTick) *Visibility {
	th.Fill()
	v := &Visibility{Thresholds: map[string]float64{}}
	for _, k := range visibilityKinds {
		ratio, _ := th.For(k)
		v.Thresholds[k] = ratio
	}
	cont := judge.NewContention(th)
	for _, t := range quiet {
		cont.Calibrate(t.Reading)
	}
	for _, k := range visibilityKinds {
		var n int
		var domain int
		for _, t := range quiet {
			for _, r := range t.Reading {
				if r.Kind == k {
					n++
					domain = r.Domain
				}
			}
		}
		if n == 0 {
			continue
		}
		// The level of the last domain read: the probe CPUs of one run
		// share an L3 on every host this is run on in practice.
		level := cont.Rate([]sense.ProbeReading{{Domain: domain, Kind: k, Ns: 1}})[0].Baseline
		v.Quiet = append(v.Quiet, QuietLevel{Kind: k, Ns: level, Readings: n})
	}
	for _, l := range loads {
		v.Loads = append(v.Loads, judgeLoad(cont, l, beside[l]))
	}
	return v
}

// judgeLoad is what the ticks read beside one load, against cont's
// baselines.
func judgeLoad(cont *judge.Contention, name string, ticks []probeTick) LoadSight {
	ls := LoadSight{Load: name, Seen: SeenNo}
	if k, ok := load.Lookup(name); ok {
		ls.Role = k.Role
	}
	ratios, proof := map[string][]float64{}, map[string][]float64{}
	over, paceQuiet := map[string]int{}, map[string]int{}
	for _, t := range ticks {
		var proofRatios []float64
		for _, r := range cont.Rate(t.ProofLLC) {
			proofRatios = append(proofRatios, r.Ratio)
		}
		proof[sense.ProbeLLC] = append(proof[sense.ProbeLLC], proofRatios...)
		for _, r := range cont.Rate(t.Reading) {
			ratios[r.Kind] = append(ratios[r.Kind], r.Ratio)
			if !cont.Above(r) {
				continue
			}
			if r.Kind == sense.ProbeLLC && len(proofRatios) > 0 && judge.SlotLevel(r.Ratio, proofRatios) < judge.QuietLevel(r.Ratio) {
				paceQuiet[r.Kind]++
				continue
			}
			over[r.Kind]++
		}
	}
	best := 0.0
	for _, k := range visibilityKinds {
		xs := ratios[k]
		if len(xs) == 0 {
			continue
		}
		slices.Sort(xs)
		slices.Sort(proof[k])
		ks := KindSight{Kind: k, Readings: len(xs), Median: nearestRank(xs, 0.5), P90: nearestRank(xs, 0.9), Over: over[k],
			ProofPaceMedian: nearestRank(proof[k], 0.5), QuietAtProofPace: paceQuiet[k]}
		ls.Kinds = append(ls.Kinds, ks)
		if share := float64(ks.Over) / float64(ks.Readings); slices.Contains(seenBy, k) && ks.Over > 0 && share > best {
			best, ls.By = share, k
		}
	}
	switch {
	case best >= 0.5:
		ls.Seen = SeenOften
	case best >= 0.1:
		ls.Seen = SeenSometimes
	default:
		ls.By = ""
	}
	return ls
}

// WriteVisibilityText prints the result: the quiet levels, a line a load,
// and what the agent can and cannot do with what it read.
func WriteVisibilityText(w io.Writer, v *Visibility) error {
	if v == nil {
		return errors.New("no visibility result")
	}
	var b strings.Builder
	writeMetaText(&b, v.Meta)
	fmt.Fprintf(&b, "%s\n", v.setting())
	fmt.Fprintf(&b, "quiet (no load): %s\n\n", v.quietLevels())
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	head := []string{"LOAD", "ROLE"}
	for _, k := range visibilityKinds {
		h := fmt.Sprintf("%s (median / p90)", strings.ToUpper(k))
		if k == sense.ProbeLLC {
			h = "LLC (median / p90 (proof pace))"
		}
		head = append(head, h)
	}
	head = append(head, fmt.Sprintf("CONTENDED READINGS (%s)", v.thresholdsText()), "SEEN")
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range v.rows() {
		fmt.Fprintln(tw, strings.Join(append(append([]string{r.Load, r.Role}, r.Cells...), r.Counts, r.Seen), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteString("\n" + visibilityLegend)
	_, err := io.WriteString(w, b.String())
	return err
}

// setting is the line that says where and how the probe read.
func (v *Visibility) setting() string {
	return fmt.Sprintf("the agent's canary probe on CPU %s, each load on CPU %s for %.1fs, a reading every %s",
		v.ProbeCPUs, v.LoadCPUs, v.Phase, time.Duration(v.Every*float64(time.Second)))
}

func (v *Visibility) quietLevels() string {
	var q []string
	for _, l := range v.Quiet {
		q = append(q, fmt.Sprintf("%s %.1f ns", l.Kind, l.Ns))
	}
	return strings.Join(q, ", ")
}

func (v *Visibility) thresholdsText() string {
	var ths []string
	for _, k := range seenBy {
		ths = append(ths, fmt.Sprintf("%s %s×", k, humanize.Sig3(v.Thresholds[k])))
	}
	return strings.Join(ths, ", ")
}

// visibilityRow is a load's line, as text cells.
type visibilityRow struct {
	Load, Role string
	// Cells are "median / p90" of each of visibilityKinds ("–": none).
	Cells        []string
	Medians      []float64 // 0 where a kind has no readings
	Counts, Seen string
	SeenHow      string // LoadSight.Seen
}

func (v *Visibility) rows() []visibilityRow {
	var out []visibilityRow
	for _, l := range v.Loads {
		r := visibilityRow{Load: l.Load, Role: l.Role, SeenHow: l.Seen, Seen: l.Seen}
		if r.Role == "" {
			r.Role = "–"
		}
		byKind := map[string]KindSight{}
		for _, k := range l.Kinds {
			byKind[k.Kind] = k
		}
		var counts []string
		for _, k := range visibilityKinds {
			ks, ok := byKind[k]
			if !ok {
				r.Cells, r.Medians = append(r.Cells, "–"), append(r.Medians, 0)
				continue
			}
			cell := fmt.Sprintf("%.2f× / %.2f×", ks.Median, ks.P90)
			if ks.ProofPaceMedian > 0 {
				cell += fmt.Sprintf(" (%.2f×)", ks.ProofPaceMedian)
			}
			r.Cells, r.Medians = append(r.Cells, cell), append(r.Medians, ks.Median)
			if slices.Contains(seenBy, k) {
				c := fmt.Sprintf("%s %d of %d", k, ks.Over, ks.Readings)
				if ks.QuietAtProofPace > 0 {
					c += fmt.Sprintf(" (+%d quiet at a proof's pace)", ks.QuietAtProofPace)
				}
				counts = append(counts, c)
			}
		}
		if l.By != "" {
			r.Seen += " (" + l.By + ")"
		}
		r.Counts = strings.Join(counts, ", ")
		out = append(out, r)
	}
	return out
}

// visibilityLegend says how to read the result, in the text and the HTML.
const visibilityLegend = `seen: how often a DRAM or LLC reading was contended as the agent counts it (over its threshold
and beyond the quiet readings' scatter; for the LLC walk, also not quiet when read again at a
proof's pace, back to back after a reading that warms its buffer, as the agent checks before it
proves on it): often (half the readings or more), sometimes (a tenth or more), no. The agent proves only what its probe reads, on a CPU the suspect does not run
on: a polluter not seen here can be caught on this host only by a PMU's counters (bus locks,
LLC misses, CPI) or resctrl (see crosstalk doctor). What is seen, a proof still has to confirm;
an innocent load seen here costs proofs, not convictions. (quiet again) is nothing running,
read after the loads: how far the host itself moved the probe meanwhile.
`
