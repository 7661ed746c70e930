package lab

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

// Policy is what the lab compares: something that may act on the tenants'
// cgroups while they run co-located. Begin runs after the tenants' cgroups
// exist and before any tenant starts; End runs after they all stopped and
// must undo every change it made.
type Policy interface {
	Name() string
	Begin(ctx context.Context, env *PolicyEnv) error
	End(ctx context.Context) error
}

// PolicyEnv is what a policy may see and touch during one phase.
type PolicyEnv struct {
	Host    *host.Host
	Layout  cgroup.Layout
	Tenants []PolicyTenant
	Log     *slog.Logger
	// Since is the time since the phase started.
	Since func() time.Duration
	// Record notes an action on the timeline.
	Record func(Action)
	// Contention notes what the policy's probes read (the worst probe
	// latency over its quiet baseline, 1.0 = quiet) on the timeline; a
	// policy without probes never calls it.
	Contention func(Sample)
	// TenantsRunning says the tenants started before the policy began (the
	// scenario's policy_start): what the policy reads first is not a quiet
	// host, so it must not take it as one.
	TenantsRunning bool
	// Journal, when set, is where a policy that keeps a journal (the
	// crosstalk agent's) leaves a copy of it when the phase ends.
	Journal string
}

// PolicyTenant is a tenant as a policy sees it.
type PolicyTenant struct {
	Name  string
	Role  string // a policy must not use this to decide; it is for its log
	CPUs  cpuset.Set
	Group *cgroup.Group
}

// Action is something a policy did, for the report's timeline.
type Action struct {
	T      float64 `json:"t"` // seconds since the phase started
	Tenant string  `json:"tenant"`
	Kind   string  `json:"kind"` // "cap", "throttle", "release", …
	Detail string  `json:"detail,omitempty"`
	// Quota is the CPU quota in CPUs after the action; 0 = unlimited.
	Quota float64 `json:"quota"`
}

// PolicyFactory makes a fresh policy for one phase.
type PolicyFactory func() Policy

// Policies is the set of policies a lab run can use, by name. The agent adds
// "crosstalk" to it; tests add fakes.
type Policies map[string]PolicyFactory

// DefaultPolicies are the baselines every lab run knows.
func DefaultPolicies() Policies {
	return Policies{
		"none":   func() Policy { return nonePolicy{} },
		"static": func() Policy { return &staticPolicy{} },
	}
}

// Names lists the policies, sorted.
func (p Policies) Names() []string {
	return slices.Sorted(maps.Keys(p))
}

// Resolve checks a list of policy names.
func (p Policies) Resolve(names []string) error {
	for _, n := range names {
		if _, ok := p[n]; !ok {
			return fmt.Errorf("unknown policy %q (have %s)", n, strings.Join(p.Names(), ", "))
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("no policy given (have %s)", strings.Join(p.Names(), ", "))
	}
	return nil
}

// nonePolicy co-locates and does nothing: the interference as it is.
type nonePolicy struct{}

func (nonePolicy) Name() string                            { return "none" }
func (nonePolicy) Begin(context.Context, *PolicyEnv) error { return nil }
func (nonePolicy) End(context.Context) error               { return nil }

// staticPolicy is Alita's "static" baseline: resources split ahead of time in
// proportion to each tenant's CPUs, whatever the tenants do. Here the resource
// is CPU time: the CPUs the scenario uses are divided among all tenants by
// their CPU counts, and each is capped to its share (never above its own CPUs)
// for the whole phase — victim and bystander included.
type staticPolicy struct {
	env    *PolicyEnv
	capped []*cgroup.Group
}

// StaticPeriod is the CFS period of the static caps.
const StaticPeriod = 100 * time.Millisecond

func (*staticPolicy) Name() string { return "static" }

// StaticShares computes each tenant's share of CPU time in CPUs.
func StaticShares(tenants []PolicyTenant) map[string]float64 {
	var all cpuset.Set
	total := 0
	for _, t := range tenants {
		all = all.Union(t.CPUs)
		total += t.CPUs.Len()
	}
	out := map[string]float64{}
	for _, t := range tenants {
		share := float64(all.Len()) * float64(t.CPUs.Len()) / float64(total)
		out[t.Name] = min(share, float64(t.CPUs.Len()))
	}
	return out
}

func (p *staticPolicy) Begin(_ context.Context, env *PolicyEnv) error {
	p.env = env
	shares := StaticShares(env.Tenants)
	for _, t := range env.Tenants {
		share := shares[t.Name]
		if share >= float64(t.CPUs.Len()) {
			continue // its fair share is all of its CPUs: nothing to cap
		}
		q := cgroup.Quota{Quota: time.Duration(share * float64(StaticPeriod)), Period: StaticPeriod}
		if err := t.Group.SetCPUQuota(q); err != nil {
			return fmt.Errorf("static policy: %w", err)
		}
		p.capped = append(p.capped, t.Group)
		env.Record(Action{T: env.Since().Seconds(), Tenant: t.Name, Kind: "cap", Detail: q.String(), Quota: q.CPUs()})
	}
	return nil
}

func (p *staticPolicy) End(context.Context) error {
	var errs []string
	for _, g := range slices.Backward(p.capped) {
		if err := g.SetCPUQuota(cgroup.Quota{Quota: -1, Period: StaticPeriod}); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("static policy: restoring quotas: %s", strings.Join(errs, "; "))
	}
	return nil
}
