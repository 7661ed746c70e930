package judge

import (
	"fmt"
	"slices"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
)

// Lever is how a throttle is applied to a tenant.
type Lever string

// The levers, finest first.
const (
	// LeverClockModulation is Intel on-demand clock modulation
	// (IA32_CLOCK_MODULATION, act.ClockModulation): per logical CPU,
	// microsecond-grain stalls. Alita's lever.
	LeverClockModulation Lever = "clock_modulation"
	// LeverCPUFreq is a cpufreq scaling_max_freq limit (act.CPUFreq): per
	// frequency policy; lowers voltage too, so it saves the most power per
	// unit of speed lost.
	LeverCPUFreq Lever = "cpufreq"
	// LeverCPUQuota is CFS bandwidth (act.CPUQuota with act.Sparsify's
	// duty steps): per cgroup, works everywhere and never touches another
	// tenant, but throttles in millisecond slices.
	LeverCPUQuota Lever = "cpu_quota"
)

// ParseLevers checks a configured preference list.
func ParseLevers(field string, names []string) ([]Lever, error) {
	var out []Lever
	for _, n := range names {
		l := Lever(n)
		switch l {
		case LeverClockModulation, LeverCPUFreq, LeverCPUQuota:
		default:
			return nil, fmt.Errorf("%s: unknown lever %q (clock_modulation, cpufreq, cpu_quota)", field, n)
		}
		if slices.Contains(out, l) {
			return nil, fmt.Errorf("%s: lever %q listed twice", field, n)
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no levers", field)
	}
	return out, nil
}

// LeverHost is what the chooser needs to know about the host.
type LeverHost struct {
	// Siblings maps each online CPU to its core's SMT threads (itself
	// included).
	Siblings map[int]cpuset.Set
	// FreqDomains are the CPU sets each cpufreq policy scales together
	// (related_cpus).
	FreqDomains []cpuset.Set
	// Available levers with their step counts; a lever that is off has
	// its reason (as doctor says it) in Why.
	ClockModulation, CPUFreq       bool
	ClockModSteps, CPUFreqSteps    int
	QuotaSteps                     int
	ClockModulationWhy, CPUFreqWhy string
}

// LeverTenant is a tenant as the chooser sees it.
type LeverTenant struct {
	ID   string
	CPUs cpuset.Set
}

// LeverChoice is the lever for one tenant.
type LeverChoice struct {
	Tenant string
	// Lever is "" when no lever in the preference list can be used.
	Lever Lever
	// CPUs are the CPUs to program (the tenant's CPUs, whole cores and
	// whole frequency policies) for the per-CPU levers.
	CPUs  cpuset.Set
	Steps int
	// Reason says why this lever, and why not each preferred one before it.
	Reason string
}

// ChooseLevers picks, for each tenant, the first lever of prefer that can
// throttle it without touching anyone else:
//
//   - clock modulation only where the tenant owns its CPUs exclusively
//     with their SMT siblings: no other tenant's cpuset overlaps them, and
//     every sibling of each of its CPUs is its own (siblings are programmed
//     alike, and a sibling left at full speed keeps the core busy);
//   - cpufreq only where, in addition, every cpufreq policy covering its
//     CPUs covers only its CPUs (a policy scales all its CPUs together);
//   - otherwise CPU quota, which acts on the tenant's cgroup alone.
//
// Throttling a shared CPU's clock or frequency would punish the innocent
// tenants on it, which is the one thing crosstalk must not do. An
// unconfined tenant (cpuset = every CPU) therefore always gets CPU quota.
// AMD has no clock modulation (LeverHost.ClockModulation is false there).
func ChooseLevers(tenants []LeverTenant, h LeverHost, prefer []Lever) []LeverChoice {
	owners := map[int]int{}
	for _, t := range tenants {
		for _, cpu := range t.CPUs.List() {
			owners[cpu]++
		}
	}
	out := make([]LeverChoice, 0, len(tenants))
	for _, t := range tenants {
		out = append(out, chooseLever(t, owners, h, prefer))
	}
	return out
}

func chooseLever(t LeverTenant, owners map[int]int, h LeverHost, prefer []Lever) LeverChoice {
	c := LeverChoice{Tenant: t.ID}
	var why []string
	exclusive := exclusiveWhy(t, owners, h)
	for _, l := range prefer {
		switch l {
		case LeverClockModulation:
			switch {
			case !h.ClockModulation:
				why = append(why, "no clock modulation: "+h.ClockModulationWhy)
			case exclusive != "":
				why = append(why, "no clock modulation: "+exclusive)
			default:
				c.Lever, c.CPUs, c.Steps = l, t.CPUs, h.ClockModSteps
			}
		case LeverCPUFreq:
			switch {
			case !h.CPUFreq:
				why = append(why, "no cpufreq: "+h.CPUFreqWhy)
			case exclusive != "":
				why = append(why, "no cpufreq: "+exclusive)
			default:
				if w := sharedDomain(t, h); w != "" {
					why = append(why, "no cpufreq: "+w)
					continue
				}
				c.Lever, c.CPUs, c.Steps = l, t.CPUs, h.CPUFreqSteps
			}
		case LeverCPUQuota:
			c.Lever, c.CPUs, c.Steps = l, t.CPUs, h.QuotaSteps
		}
		if c.Lever != "" {
			break
		}
	}
	switch {
	case c.Lever == "":
		c.Reason = "no usable lever: " + strings.Join(why, "; ")
	case len(why) == 0:
		c.Reason = string(c.Lever)
	default:
		c.Reason = string(c.Lever) + " (" + strings.Join(why, "; ") + ")"
	}
	return c
}

// exclusiveWhy is "" when t owns its CPUs and their SMT siblings alone,
// else why not.
func exclusiveWhy(t LeverTenant, owners map[int]int, h LeverHost) string {
	if t.CPUs.IsEmpty() {
		return "its CPUs are unknown"
	}
	var shared []int
	for _, cpu := range t.CPUs.List() {
		if owners[cpu] > 1 {
			shared = append(shared, cpu)
		}
	}
	if len(shared) > 0 {
		return fmt.Sprintf("cpus %s are shared with other tenants", cpuset.Of(shared...))
	}
	for _, cpu := range t.CPUs.List() {
		sib, ok := h.Siblings[cpu]
		if !ok {
			return fmt.Sprintf("cpu %d is not online", cpu)
		}
		if out := sib.Difference(t.CPUs); !out.IsEmpty() {
			return fmt.Sprintf("cpu %d shares its core with cpu %s, which is not the tenant's", cpu, out)
		}
	}
	return ""
}

// sharedDomain is "" when every cpufreq policy covering t's CPUs covers
// only t's CPUs, and every CPU has one.
func sharedDomain(t LeverTenant, h LeverHost) string {
	covered := cpuset.Set{}
	for _, d := range h.FreqDomains {
		if d.Intersect(t.CPUs).IsEmpty() {
			continue
		}
		if out := d.Difference(t.CPUs); !out.IsEmpty() {
			return fmt.Sprintf("a cpufreq policy scales cpus %s together, and %s are not the tenant's", d, out)
		}
		covered = covered.Union(d)
	}
	if missing := t.CPUs.Difference(covered); !missing.IsEmpty() {
		return fmt.Sprintf("cpus %s have no cpufreq policy", missing)
	}
	return ""
}
