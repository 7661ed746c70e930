package lab

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/crosstalk-project/crosstalk/internal/humanize"
	"github.com/crosstalk-project/crosstalk/internal/scenario"
)

// Result is a lab run's outcome; its JSON form is what `lab run --json` prints.
type Result struct {
	Meta        *Meta           `json:"meta,omitempty"`
	Scenario    string          `json:"scenario"`
	Description string          `json:"description,omitempty"`
	Host        string          `json:"host,omitempty"`
	Phase       float64         `json:"phase_seconds"`
	Repetitions int             `json:"repetitions"`
	Victim      string          `json:"victim"`
	Solo        map[string]Solo `json:"solo"`
	Results     []PolicyResult  `json:"results"`
	// VictimSlowdownWithoutPolluter is the victim's slowdown with its
	// neighbours but the polluter, under no policy (Options.WithoutPolluter).
	VictimSlowdownWithoutPolluter *float64 `json:"victim_slowdown_without_polluter,omitempty"`
	// VictimSlowdownCPUStandIn is the victim's slowdown with the polluter
	// replaced by a cache-friendly cpu load of its timing, under no policy
	// (Options.CPUStandIn; only where the polluter shares the victim's CPUs).
	VictimSlowdownCPUStandIn *float64 `json:"victim_slowdown_cpu_stand_in,omitempty"`
}

// Solo is a tenant's metric when it ran alone.
type Solo struct {
	Metric    string    `json:"metric"`
	Unit      string    `json:"unit,omitempty"`
	Direction string    `json:"direction,omitempty"`
	Value     *float64  `json:"value"` // median over repetitions; null without a metric
	Values    []float64 `json:"values"`
}

// PolicyResult is one policy's co-located outcome.
type PolicyResult struct {
	Policy         string                  `json:"policy"`
	VictimSlowdown *float64                `json:"victim_slowdown"`
	Tenants        map[string]TenantResult `json:"tenants"`
	Actions        []Action                `json:"actions"`
	Timeline       Timeline                `json:"timeline"`
	// FirstActionSeconds: from a polluter's onset (when its work began, where
	// it said so, else its process start) to the first throttle of it
	// (null when the policy never throttled it). ReleaseSeconds: from its stop
	// to its quota being fully restored (null when it does not stop early or
	// was never throttled).
	FirstActionSeconds *float64 `json:"first_action_seconds"`
	ReleaseSeconds     *float64 `json:"release_seconds"`
	// PolicyStartSeconds is when the policy began, into the phase (the
	// scenario's policy_start; 0 when it began before any tenant).
	PolicyStartSeconds float64 `json:"policy_start_seconds,omitempty"`
	// Journal is the file that keeps the policy's journal of the last
	// repetition's phase (Options.JournalDir; "" where none was kept).
	Journal string `json:"journal,omitempty"`
}

// TenantResult is a tenant's outcome under one policy.
type TenantResult struct {
	Role             string    `json:"role"`
	Metric           string    `json:"metric"`
	Value            *float64  `json:"value"`
	Values           []float64 `json:"values"`
	Slowdown         *float64  `json:"slowdown"`
	ThrottledSeconds float64   `json:"throttled_seconds"`
	CPUSeconds       float64   `json:"cpu_seconds"`
}

// Timeline is the last repetition of a policy's phase, for the plots.
type Timeline struct {
	Victim []Sample `json:"victim"` // the victim's metric over time
	// Contention is what the crosstalk policy's probes read, once an
	// interval: the worst probe latency over its quiet baseline.
	Contention []Sample      `json:"contention,omitempty"`
	Events     []TenantEvent `json:"events"`
}

// TenantEvent marks a tenant starting or stopping.
type TenantEvent struct {
	T      float64 `json:"t"`
	Tenant string  `json:"tenant"`
	Role   string  `json:"role"`
	// Kind is "start" (its process), "onset" (its work began, where it
	// said so), "stop", "pause" or "resume".
	Kind string `json:"kind"`
}

// Slowdown orients a co-located value against solo so that > 1 is worse.
func Slowdown(solo, colo float64, direction string) (float64, bool) {
	if solo <= 0 || colo <= 0 || math.IsNaN(solo) || math.IsNaN(colo) {
		return 0, false
	}
	if direction == "higher" {
		return solo / colo, true
	}
	return colo / solo, true
}

func median(v []float64) (float64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

func ptr(v float64) *float64 { return &v }

// WriteText prints the result as a table for a person: where it was made,
// then per policy and tenant its metric solo and co-located (SI numbers, in
// the metric's unit), the co-located spread over repetitions, its slowdown
// and the time it was throttled.
func WriteText(w io.Writer, r *Result) error {
	var b strings.Builder
	writeMetaText(&b, r.Meta)
	fmt.Fprintf(&b, "scenario %s: %d repetition(s) of %s phases", r.Scenario, r.Repetitions, humanize.Seconds(r.Phase, 1))
	if r.Host != "" {
		fmt.Fprintf(&b, " on %s", r.Host)
	}
	b.WriteString("\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tTENANT\tROLE\tMETRIC\tSOLO\tCO-LOCATED\tMIN–MAX\tSLOWDOWN\tTHROTTLED")
	for _, pr := range r.Results {
		names := tenantOrder(r, pr)
		for _, n := range names {
			tr := pr.Tenants[n]
			solo := r.Solo[n]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", pr.Policy, n, tr.Role, metricWithUnit(solo),
				fmtVal(solo.Value), fmtVal(tr.Value), fmtRange(spreadOf(tr.Values)), fmtSlowdown(tr.Slowdown), humanize.Seconds(tr.ThrottledSeconds, 1))
		}
	}
	tw.Flush()
	b.WriteString("\n")
	for _, pr := range r.Results {
		line := fmt.Sprintf("%-10s victim slowdown %s", pr.Policy, fmtSlowdown(pr.VictimSlowdown))
		if pr.FirstActionSeconds != nil {
			line += fmt.Sprintf(", throttled %s after the polluter started", fmtOptSecs(pr.FirstActionSeconds))
		}
		if pr.ReleaseSeconds != nil {
			line += fmt.Sprintf(", released %s after it stopped", fmtOptSecs(pr.ReleaseSeconds))
		}
		b.WriteString(line + "\n")
		if len(pr.Actions) > 0 {
			var acts []string
			for i, a := range pr.Actions {
				if i == 8 {
					acts = append(acts, fmt.Sprintf("… %d more", len(pr.Actions)-8))
					break
				}
				acts = append(acts, fmt.Sprintf("%s %s %s", humanize.Seconds(a.T, 2), a.Kind, a.Tenant))
			}
			b.WriteString("           actions (last repetition): " + strings.Join(acts, ", ") + "\n")
		}
	}
	b.WriteString("\nslowdown = co-located / solo, oriented so that > 1 is worse; min–max: the co-located values over repetitions.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// Spread is the range of a value over repetitions.
type Spread struct {
	Min, Median, Max float64
	N                int
}

// spreadOf is the spread of values; ok is false with fewer than two, where
// there is no spread to show.
func spreadOf(v []float64) (Spread, bool) {
	var fin []float64
	for _, x := range v {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			fin = append(fin, x)
		}
	}
	if len(fin) < 2 {
		return Spread{}, false
	}
	med, _ := median(fin)
	return Spread{Min: slices.Min(fin), Median: med, Max: slices.Max(fin), N: len(fin)}, true
}

// fmtRange writes a spread as "min–max"; a dash when there is none.
func fmtRange(s Spread, ok bool) string {
	if !ok {
		return humanize.Dash
	}
	return humanize.SI(s.Min, "") + "–" + humanize.SI(s.Max, "")
}

// tenantOrder lists tenants victim first, then polluters, then bystanders.
func tenantOrder(r *Result, pr PolicyResult) []string {
	var names []string
	for n := range pr.Tenants {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		ra, rb := scenario.RoleRank(pr.Tenants[a].Role), scenario.RoleRank(pr.Tenants[b].Role)
		if ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	return names
}

func metricLabel(s Solo) string {
	if s.Metric == "" {
		return "-"
	}
	arrow := "↓"
	if s.Direction == "higher" {
		arrow = "↑"
	}
	return s.Metric + " " + arrow
}

// metricWithUnit is metricLabel with the unit the column's numbers are in.
func metricWithUnit(s Solo) string {
	l := metricLabel(s)
	if s.Unit != "" && s.Metric != "" {
		l += " (" + s.Unit + ")"
	}
	return l
}

// fmtVal writes a metric's value as an SI number: the unit is the metric's,
// shown with its name, so every value of a column has the same form.
func fmtVal(v *float64) string {
	return humanize.Opt(v, func(x float64) string { return humanize.SI(x, "") })
}

func fmtSlowdown(v *float64) string { return humanize.Opt(v, humanize.Ratio) }

// fmtOptSecs writes an optional time in seconds, to the hundredth.
func fmtOptSecs(v *float64) string {
	return humanize.Opt(v, func(x float64) string { return humanize.Seconds(x, 2) })
}
