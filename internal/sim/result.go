package sim

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/crosstalk-project/crosstalk/internal/humanize"
	"github.com/crosstalk-project/crosstalk/internal/scenario"
)

// Result is a simulation's outcome; its JSON form is what `sim run --json` prints.
type Result struct {
	Scenario    string         `json:"scenario"`
	Description string         `json:"description,omitempty"`
	Machine     string         `json:"machine"`
	Duration    float64        `json:"duration_seconds"`
	Seed        uint64         `json:"seed"`
	Tenants     int            `json:"tenants"`
	Results     []PolicyResult `json:"results"`
}

// PolicyResult is one policy's run.
type PolicyResult struct {
	Policy string `json:"policy"`
	// VictimSlowdown is the worst victim's slowdown over the run.
	VictimSlowdown *float64       `json:"victim_slowdown"`
	Tenants        []TenantResult `json:"tenants"`
	// FirstAction is when a polluter was first throttled (seconds from the
	// start; null when never).
	FirstAction *float64 `json:"first_action_seconds"`
	Actions     []Action `json:"actions"`
	// Agent is the agent's own cost (crosstalk only).
	Agent *AgentStats `json:"agent,omitempty"`
	// LeftThrottled lists tenants still under a lever after the policy ended
	// (must be empty).
	LeftThrottled []string `json:"left_throttled"`
	// Tree is the root of the simulated host tree this policy ran on, when
	// it was kept (what 'crosstalk doctor --root' reads); the agent's state
	// directory is beside it.
	Tree string `json:"tree,omitempty"`
}

// TenantResult is one tenant's outcome under a policy.
type TenantResult struct {
	Name string `json:"name"`
	Role string `json:"role"`
	Kind string `json:"kind"`
	// Slowdown is its solo work over its co-located work in the time it was
	// active (the same tenant alone on the same machine, from the model); >1 is worse.
	Slowdown *float64 `json:"slowdown"`
	// SteadySlowdown is the same over the last 30% of its active time.
	SteadySlowdown *float64 `json:"steady_slowdown"`
	// ThrottledSeconds is how long any lever held it back (CPU quota, CAT
	// ways, MBA, frequency cap or clock modulation on its CPUs, proofs included).
	ThrottledSeconds float64 `json:"throttled_seconds"`
	// NamedPolluter: the judge convicted it (an action other than a proof or a release).
	NamedPolluter bool    `json:"named_polluter"`
	Proofs        int     `json:"proofs"`
	CPUSeconds    float64 `json:"cpu_seconds"`
}

// Action is something a policy did.
type Action struct {
	T      float64 `json:"t"`
	Tenant string  `json:"tenant"`
	Kind   string  `json:"kind"`
	Quota  float64 `json:"quota"`
	Reason string  `json:"reason,omitempty"`
	index  int
}

// AgentStats is the agent's CPU cost per interval.
type AgentStats struct {
	Intervals int `json:"intervals"`
	// IntervalCPU is the agent's own measure (its State.interval_cpu:
	// process CPU over one interval's sense-judge-act); TickCPU is the
	// process CPU around each Tick that ran an interval, measured by the
	// simulator. Both include the simulated perf reads and probe, which
	// cost far less than the real ones.
	IntervalCPUMaxMs  float64 `json:"interval_cpu_max_ms"`
	IntervalCPUMeanMs float64 `json:"interval_cpu_mean_ms"`
	IntervalCPUP95Ms  float64 `json:"interval_cpu_p95_ms"`
	// IntervalCPUMs is every interval's, in order.
	IntervalCPUMs []float64 `json:"interval_cpu_ms"`
	TickCPUMaxMs  float64   `json:"tick_cpu_max_ms"`
	TickCPUMeanMs float64   `json:"tick_cpu_mean_ms"`
	PerfFDsMax    int       `json:"perf_fds_max"`
}

// Tenant returns a tenant's result by name.
func (pr *PolicyResult) Tenant(name string) (TenantResult, bool) {
	for _, t := range pr.Tenants {
		if t.Name == name {
			return t, true
		}
	}
	return TenantResult{}, false
}

// Policy returns a policy's result.
func (r *Result) Policy(name string) (*PolicyResult, bool) {
	for i := range r.Results {
		if r.Results[i].Policy == name {
			return &r.Results[i], true
		}
	}
	return nil, false
}

// maxRowsPerRole bounds the text table on scenarios with many tenants.
const maxRowsPerRole = 6

// WriteText prints the result for a person.
func WriteText(w io.Writer, r *Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "scenario %s: %.0fs simulated, seed %d, %d tenants\nmachine: %s\n\n", r.Scenario, r.Duration, r.Seed, r.Tenants, r.Machine)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tTENANT\tROLE\tSLOWDOWN\tSTEADY\tTHROTTLED\tNAMED\tPROOFS")
	for _, pr := range r.Results {
		ts := slices.Clone(pr.Tenants)
		slices.SortStableFunc(ts, func(a, b TenantResult) int {
			return cmp.Or(cmp.Compare(scenario.RoleRank(a.Role), scenario.RoleRank(b.Role)), cmp.Compare(fl(b.Slowdown), fl(a.Slowdown)))
		})
		shown := map[string]int{}
		rest := map[string][]TenantResult{}
		for _, t := range ts {
			if shown[t.Role] >= maxRowsPerRole {
				rest[t.Role] = append(rest[t.Role], t)
				continue
			}
			shown[t.Role]++
			named := ""
			if t.NamedPolluter {
				named = "yes"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", pr.Policy, t.Name, t.Role, humanize.Opt(t.Slowdown, humanize.Ratio), humanize.Opt(t.SteadySlowdown, humanize.Ratio), humanize.Seconds(t.ThrottledSeconds, 1), named, t.Proofs)
		}
		for _, role := range []string{RoleVictim, RolePolluter, RoleBystander} {
			if more := rest[role]; len(more) > 0 {
				worst, thr, namedN := 0.0, 0.0, 0
				for _, t := range more {
					worst = max(worst, fl(t.Slowdown))
					thr = max(thr, t.ThrottledSeconds)
					if t.NamedPolluter {
						namedN++
					}
				}
				fmt.Fprintf(tw, "%s\t… %d more\t%s\tup to %s\t\tup to %s\t%d named\t\n", pr.Policy, len(more), role, humanize.Ratio(worst), humanize.Seconds(thr, 1), namedN)
			}
		}
	}
	tw.Flush()
	b.WriteString("\n")
	for _, pr := range r.Results {
		line := fmt.Sprintf("%-10s worst victim slowdown %s", pr.Policy, humanize.Opt(pr.VictimSlowdown, humanize.Ratio))
		if pr.FirstAction != nil {
			line += fmt.Sprintf(", polluter first throttled at %.2fs", *pr.FirstAction)
		}
		if a := pr.Agent; a != nil {
			line += fmt.Sprintf("; agent CPU per interval max %.2f ms, p95 %.2f ms, mean %.2f ms over %d intervals", a.IntervalCPUMaxMs, a.IntervalCPUP95Ms, a.IntervalCPUMeanMs, a.Intervals)
		}
		if len(pr.LeftThrottled) > 0 {
			line += "; LEFT THROTTLED: " + strings.Join(pr.LeftThrottled, ", ")
		}
		b.WriteString(line + "\n")
		var acts []string
		for _, a := range pr.Actions {
			if len(acts) == 10 {
				acts = append(acts, fmt.Sprintf("… %d more", len(pr.Actions)-10))
				break
			}
			acts = append(acts, fmt.Sprintf("%.2fs %s %s", a.T, a.Kind, a.Tenant))
		}
		if len(acts) > 0 {
			b.WriteString("           actions: " + strings.Join(acts, ", ") + "\n")
		}
	}
	b.WriteString("\nslowdown = the tenant's work alone on this machine / its work co-located (from the model), > 1 is worse;\nsteady = the same over the last 30% of its time; throttled = time under any lever, proofs included.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func fl(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
