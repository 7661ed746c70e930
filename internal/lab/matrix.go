package lab

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/humanize"
	"github.com/crosstalk-project/crosstalk/internal/load"
)

// MatrixOptions chooses what `lab matrix` pairs up.
type MatrixOptions struct {
	Victims      []string // built-in load kinds run as victims (default: all)
	Polluters    []string // built-in load kinds run as polluters (default: all)
	Phase        time.Duration
	VictimCPUs   cpuset.Set
	PolluterCPUs cpuset.Set
}

// Matrix is Kyoto-style sensitivity/aggressiveness: every victim against
// every polluter, each co-located pair's victim slowdown against its solo run.
type Matrix struct {
	Meta      *Meta                         `json:"meta,omitempty"`
	Phase     float64                       `json:"phase_seconds"`
	Victims   []string                      `json:"victims"`
	Polluters []string                      `json:"polluters"`
	Solo      map[string]float64            `json:"solo"`
	Slowdown  map[string]map[string]float64 `json:"slowdown"` // victim → polluter → slowdown
	// Sensitivity ranks victims by the mean slowdown they suffer;
	// Aggressiveness ranks polluters by the mean slowdown they inflict.
	// Means are geometric: slowdowns are ratios, and one collapsed pair (a
	// latency victim queueing 700×) must not outrank a polluter that hurts
	// every victim.
	Sensitivity    []Rank `json:"sensitivity"`
	Aggressiveness []Rank `json:"aggressiveness"`
}

// Rank is one entry of a ranking.
type Rank struct {
	Load string  `json:"load"`
	Mean float64 `json:"mean_slowdown"`
}

func matrixTenant(name, role, kind string, cpus cpuset.Set) Tenant {
	return Tenant{Name: name, Role: role, Load: kind, CPUs: cpus.String(), cpus: cpus}
}

func allLoads() []string {
	var all []string
	for _, k := range load.Kinds() {
		all = append(all, k.Name)
	}
	return all
}

// withDefaults fills what was left out: every built-in load as victim and
// as polluter, 3 s phases.
func (mo MatrixOptions) withDefaults() MatrixOptions {
	if len(mo.Victims) == 0 {
		mo.Victims = allLoads()
	}
	if len(mo.Polluters) == 0 {
		mo.Polluters = allLoads()
	}
	if mo.Phase <= 0 {
		mo.Phase = 3 * time.Second
	}
	return mo
}

// Planned is the measured time RunMatrix spends: a solo phase per victim
// and a phase per victim × polluter pair.
func (mo MatrixOptions) Planned() time.Duration {
	mo = mo.withDefaults()
	return time.Duration(len(mo.Victims)*(1+len(mo.Polluters))) * mo.Phase
}

// RunMatrix runs each load solo once, then every victim × polluter pair.
func RunMatrix(ctx context.Context, mo MatrixOptions, opt Options) (*Matrix, error) {
	mo = mo.withDefaults()
	all := allLoads()
	for _, k := range append(slices.Clone(mo.Victims), mo.Polluters...) {
		if _, ok := load.Lookup(k); !ok {
			return nil, fmt.Errorf("matrix: unknown load %q (have %s)", k, strings.Join(all, ", "))
		}
	}
	if mo.Phase > MaxSplitLockPhase && (slices.Contains(mo.Polluters, "splitlock") || slices.Contains(mo.Victims, "splitlock")) {
		return nil, fmt.Errorf("matrix: phase %s longer than the %s allowed for split locks", mo.Phase, MaxSplitLockPhase)
	}
	if mo.VictimCPUs.IsEmpty() {
		mo.VictimCPUs = cpuset.Of(1)
	}
	if mo.PolluterCPUs.IsEmpty() {
		mo.PolluterCPUs = cpuset.Of(0)
	}
	// Build a scenario of every load once, just for the preflight checks.
	probe := &Scenario{Name: "matrix", Phase: mo.Phase, Repetitions: 1,
		Tenants: []Tenant{matrixTenant("v", RoleVictim, mo.Victims[0], mo.VictimCPUs), matrixTenant("p", RolePolluter, mo.Polluters[0], mo.PolluterCPUs)}}
	if err := opt.fill(); err != nil {
		return nil, err
	}
	r, cleanup, err := newRunner(opt, probe)
	if err != nil {
		return nil, err
	}
	defer cleanup()

	m := &Matrix{Meta: opt.stamp(KindMatrix), Phase: mo.Phase.Seconds(), Victims: mo.Victims, Polluters: mo.Polluters,
		Solo: map[string]float64{}, Slowdown: map[string]map[string]float64{}}
	for _, v := range mo.Victims {
		t := matrixTenant("victim", RoleVictim, v, mo.VictimCPUs)
		r.log.Info("matrix solo", "load", v)
		out, err := r.phase(ctx, "solo-"+v, mo.Phase, 0, []Tenant{t}, nonePolicy{})
		if err != nil {
			return nil, err
		}
		if val, ok := out.values["victim"]; ok {
			m.Solo[v] = val
		}
	}
	for _, v := range mo.Victims {
		m.Slowdown[v] = map[string]float64{}
		k, _ := load.Lookup(v)
		for _, p := range mo.Polluters {
			r.log.Info("matrix pair", "victim", v, "polluter", p)
			ts := []Tenant{matrixTenant("victim", RoleVictim, v, mo.VictimCPUs), matrixTenant("polluter", RolePolluter, p, mo.PolluterCPUs)}
			out, err := r.phase(ctx, "pair-"+v+"-"+p, mo.Phase, 0, ts, nonePolicy{})
			if err != nil {
				return nil, err
			}
			if val, ok := out.values["victim"]; ok {
				if sd, ok := Slowdown(m.Solo[v], val, k.Direction); ok {
					m.Slowdown[v][p] = sd
				}
			}
		}
	}
	m.rank()
	return m, nil
}

func (m *Matrix) rank() {
	mean := func(vals []float64) float64 {
		n, s := 0, 0.0
		for _, v := range vals {
			if v > 0 {
				s += math.Log(v)
				n++
			}
		}
		if n == 0 {
			return 0
		}
		return math.Exp(s / float64(n))
	}
	m.Sensitivity, m.Aggressiveness = []Rank{}, []Rank{}
	for _, v := range m.Victims {
		var vals []float64
		for _, p := range m.Polluters {
			if sd, ok := m.Slowdown[v][p]; ok {
				vals = append(vals, sd)
			}
		}
		m.Sensitivity = append(m.Sensitivity, Rank{Load: v, Mean: mean(vals)})
	}
	for _, p := range m.Polluters {
		var vals []float64
		for _, v := range m.Victims {
			if sd, ok := m.Slowdown[v][p]; ok {
				vals = append(vals, sd)
			}
		}
		m.Aggressiveness = append(m.Aggressiveness, Rank{Load: p, Mean: mean(vals)})
	}
	byMean := func(a, b Rank) int {
		switch {
		case a.Mean > b.Mean:
			return -1
		case a.Mean < b.Mean:
			return 1
		}
		return strings.Compare(a.Load, b.Load)
	}
	slices.SortFunc(m.Sensitivity, byMean)
	slices.SortFunc(m.Aggressiveness, byMean)
}

// WriteMatrixText prints the matrix and the two rankings.
func WriteMatrixText(w io.Writer, m *Matrix) error {
	var b strings.Builder
	writeMetaText(&b, m.Meta)
	fmt.Fprintf(&b, "victim slowdown (rows: victims, columns: polluters), %s phases\n\n", humanize.Seconds(m.Phase, 1))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "\t")
	for _, p := range m.Polluters {
		fmt.Fprintf(tw, "%s\t", p)
	}
	fmt.Fprintln(tw)
	for _, v := range m.Victims {
		fmt.Fprintf(tw, "%s\t", v)
		for _, p := range m.Polluters {
			if sd, ok := m.Slowdown[v][p]; ok {
				fmt.Fprintf(tw, "%s\t", humanize.Ratio(sd))
			} else {
				fmt.Fprint(tw, humanize.Dash+"\t")
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	b.WriteString("\naggressiveness (geometric mean slowdown inflicted): ")
	for i, r := range m.Aggressiveness {
		if i > 0 {
			b.WriteString(" > ")
		}
		fmt.Fprintf(&b, "%s %s", r.Load, humanize.Ratio(r.Mean))
	}
	b.WriteString("\nsensitivity (geometric mean slowdown suffered):     ")
	for i, r := range m.Sensitivity {
		if i > 0 {
			b.WriteString(" > ")
		}
		fmt.Fprintf(&b, "%s %s", r.Load, humanize.Ratio(r.Mean))
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}
