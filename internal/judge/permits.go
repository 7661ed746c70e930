package judge

import (
	"errors"
	"fmt"
	"math"
	"path"
	"slices"
	"strings"
	"time"
)

// Pollution permits, after Kyoto (Tchana et al., Middleware 2016, §3.2-3.3):
// each VM books an llc_cap, the pollution level it may cause; the scheduler
// debits a pollution_quota by the VM's measured pollution llc_cap_act and
// credits it by its booking every time slice; a VM whose quota is negative
// is OVER and "cannot use the processor any more" until the quota is
// positive again (UNDER).
//
// Units. llc_cap_act is Kyoto's equation 1, llc_misses × cpu_freq_khz /
// unhalted_core_cycles: LLC misses per millisecond of the tenant's running
// (unhalted) time, an intensity. A booking llc_cap is in the same unit. The
// credit is kept in llc_cap·seconds: each interval of dt seconds it earns
// llc_cap × dt and pays llc_cap_act × usage × dt, usage being the CPUs the
// tenant kept busy (cores). Kyoto's VMs had one vCPU running flat out
// (usage 1), where this is exactly its accounting; for a tenant on n CPUs
// the booking covers all of them together, so a bigger instance books a
// bigger llc_cap (Kyoto §5 ties llc_cap to the instance type).
//
// Where crosstalk deviates from the paper, and why:
//   - The period is the agent's interval (500 ms by default), not Xen's
//     30 ms time slice, and llc_cap_act is measured per interval from
//     cgroup-mode perf counters of all the tenant's CPUs rather than per
//     100 million instructions of one vCPU on a dedicated socket (Kyoto's
//     first method; its second needs a simulator).
//   - OVER caps the tenant's CFS quota at FloorDuty of its CPUs (1/16 by
//     default, the kernel's 1 ms minimum in a 16 ms period): CFS cannot
//     take the processor away entirely, Xen's credit scheduler can.
//   - The credit starts full and is capped at Burst × llc_cap (2 s of
//     booking by default), as Xen caps credits; the paper does not say.
//   - An interval in which the tenant was not counted (perf's rotating
//     watchlist) is debited at its last measured llc_cap_act if that is at
//     most Stale old, and not at all after that.
//   - A tenant with no booking (no entry, no class and default 0), or with
//     an explicit llc_cap of 0, is not policed.

// PermitClass books an llc_cap for the tenants it matches.
type PermitClass struct {
	Name string `yaml:"name"`
	// Kind matches the tenant kind (vm, pod, container, cgroup); "" any.
	Kind string `yaml:"kind"`
	// Match is a glob (path.Match) on the tenant's name; "" any.
	Match  string  `yaml:"match"`
	LLCCap float64 `yaml:"llc_cap"`
}

// PermitsConfig is the pollution-permit policy (YAML section `permits:`).
// A tenant's booking is, in order: tenants[its ID or name], the first
// class it matches, default.
type PermitsConfig struct {
	// Default llc_cap for tenants matching nothing (default 0: not policed).
	Default float64 `yaml:"default"`
	// Classes, first match wins.
	Classes []PermitClass `yaml:"classes"`
	// Tenants books per tenant, by ID (cgroup path) or name.
	Tenants map[string]float64 `yaml:"tenants"`
	// Burst caps the credit at this much booking (default 2s).
	Burst time.Duration `yaml:"burst"`
	// FloorDuty is the CPU cap of an OVER tenant, as a fraction of its
	// CPUs (default 0.0625).
	FloorDuty float64 `yaml:"floor_duty"`
	// Stale is how long a measured llc_cap_act stands in for intervals
	// without a measurement (default 5s).
	Stale time.Duration `yaml:"stale"`
}

// Fill sets defaults.
func (c *PermitsConfig) Fill() {
	if c.Burst == 0 {
		c.Burst = 2 * time.Second
	}
	if c.FloorDuty == 0 {
		c.FloorDuty = 1.0 / 16
	}
	if c.Stale == 0 {
		c.Stale = 5 * time.Second
	}
}

// Validate names the offending field.
func (c *PermitsConfig) Validate() error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("permits.%s: %s", field, fmt.Sprintf(format, a...)))
	}
	if c.Default < 0 || math.IsNaN(c.Default) {
		bad("default", "llc_cap %g below 0", c.Default)
	}
	for i, cl := range c.Classes {
		if cl.LLCCap < 0 || math.IsNaN(cl.LLCCap) {
			bad(fmt.Sprintf("classes[%d].llc_cap", i), "%g below 0", cl.LLCCap)
		}
		if _, err := path.Match(cl.Match, ""); err != nil {
			bad(fmt.Sprintf("classes[%d].match", i), "bad pattern %q: %v", cl.Match, err)
		}
		switch cl.Kind {
		case "", "vm", "pod", "container", "cgroup":
		default:
			bad(fmt.Sprintf("classes[%d].kind", i), "%q is not vm, pod, container or cgroup", cl.Kind)
		}
	}
	for k, v := range c.Tenants {
		if v < 0 || math.IsNaN(v) {
			bad("tenants."+k, "llc_cap %g below 0", v)
		}
	}
	if c.Burst < 100*time.Millisecond || c.Burst > time.Hour {
		bad("burst", "%s outside 100ms-1h", c.Burst)
	}
	if c.FloorDuty <= 0 || c.FloorDuty >= 1 {
		bad("floor_duty", "%g outside (0, 1)", c.FloorDuty)
	}
	if c.Stale < 0 {
		bad("stale", "must be >= 0")
	}
	return errors.Join(errs...)
}

// Active reports whether any tenant can have a booking.
func (c *PermitsConfig) Active() bool {
	return c.Default > 0 || len(c.Classes) > 0 || len(c.Tenants) > 0
}

// Booking is a tenant's llc_cap and what booked it ("tenant", "class
// NAME", "default"); 0 means not policed.
func (c *PermitsConfig) Booking(id, name, kind string) (llcCap float64, by string) {
	if v, ok := c.Tenants[id]; ok {
		return v, "tenant"
	}
	if v, ok := c.Tenants[name]; ok && name != "" {
		return v, "tenant"
	}
	for i, cl := range c.Classes {
		if cl.Kind != "" && cl.Kind != kind {
			continue
		}
		if cl.Match != "" {
			if ok, _ := path.Match(cl.Match, name); !ok {
				continue
			}
		}
		n := cl.Name
		if n == "" {
			n = fmt.Sprintf("#%d", i)
		}
		return cl.LLCCap, "class " + n
	}
	if c.Default > 0 {
		return c.Default, "default"
	}
	return 0, ""
}

// PermitTenant is one tenant's interval.
type PermitTenant struct {
	ID, Name, Kind string
	// LLCCapAct is its measured pollution (Kyoto eq. 1, over all its CPUs);
	// Measured is false when it was not counted this interval.
	LLCCapAct float64
	Measured  bool
	// Usage is its CPU use over the interval, in cores; CPUs how many it
	// may run on (the cap is a fraction of them).
	Usage     float64
	CPUs      int
	Protected bool
}

// PermitSample is one interval. Tenants lists every current tenant.
type PermitSample struct {
	At       time.Time
	Duration time.Duration
	Tenants  []PermitTenant
}

// Permit states.
const (
	PermitUnder = "UNDER"
	PermitOver  = "OVER"
)

// PermitDecision is a change of a tenant's state: OVER comes with the cap
// the agent applies through CPU quota, UNDER lifts it.
type PermitDecision struct {
	Tenant, Name string
	State        string
	// CapCores is the CPU cap while OVER (cores); Duty the same as a
	// fraction of its CPUs.
	CapCores float64
	Duty     float64
	Credit   float64
	Reason   string
}

// PermitStatus is a tenant's permit, for metrics and the state API.
type PermitStatus struct {
	Tenant   string  `json:"tenant"`
	Name     string  `json:"name"`
	Booking  float64 `json:"llc_cap"`
	BookedBy string  `json:"booked_by"`
	// Credit and Limit in llc_cap·seconds.
	Credit    float64 `json:"credit"`
	Limit     float64 `json:"limit"`
	State     string  `json:"state"`
	Act       float64 `json:"llc_cap_act"` // last measured
	CapCores  float64 `json:"cap_cores,omitempty"`
	Protected bool    `json:"protected,omitempty"`
}

type permitState struct {
	PermitStatus
	actAt   time.Time
	haveAct bool
	capped  bool // a cap decision is in force
}

// Permits keeps every policed tenant's credit.
type Permits struct {
	cfg     PermitsConfig
	tenants map[string]*permitState
}

// NewPermits returns the judge; cfg is filled with defaults.
func NewPermits(cfg PermitsConfig) *Permits {
	cfg.Fill()
	return &Permits{cfg: cfg, tenants: map[string]*permitState{}}
}

// Observe debits and credits every booked tenant for one interval and
// returns the state changes, sorted by tenant.
func (p *Permits) Observe(s PermitSample) []PermitDecision {
	dt := s.Duration.Seconds()
	if dt <= 0 {
		dt = 1
	}
	var out []PermitDecision
	present := map[string]bool{}
	for _, t := range s.Tenants {
		present[t.ID] = true
		booking, by := p.cfg.Booking(t.ID, t.Name, t.Kind)
		st := p.tenants[t.ID]
		if booking <= 0 {
			if st != nil && st.capped {
				out = append(out, PermitDecision{Tenant: t.ID, Name: t.Name, State: PermitUnder, Duty: 1, Credit: st.Credit, Reason: "no longer booked"})
			}
			delete(p.tenants, t.ID)
			continue
		}
		limit := booking * p.cfg.Burst.Seconds()
		if st == nil {
			st = &permitState{PermitStatus: PermitStatus{Tenant: t.ID, Credit: limit, State: PermitUnder}}
			p.tenants[t.ID] = st
		}
		st.Name, st.Booking, st.BookedBy, st.Limit, st.Protected = t.Name, booking, by, limit, t.Protected
		act, haveAct := st.Act, false
		switch {
		case t.Measured:
			st.Act, st.actAt, st.haveAct = t.LLCCapAct, s.At, true
			act, haveAct = t.LLCCapAct, true
		case st.haveAct && s.At.Sub(st.actAt) <= p.cfg.Stale:
			haveAct = true
		}
		debit := 0.0
		if haveAct {
			debit = act * max(t.Usage, 0) * dt
		}
		st.Credit = min(st.Credit+booking*dt-debit, limit)
		switch {
		case st.Credit < 0:
			st.State = PermitOver
		case st.Credit > 0:
			st.State = PermitUnder
		}
		ncpus := float64(max(t.CPUs, 1))
		switch {
		case st.State == PermitOver && !t.Protected && !st.capped:
			st.capped, st.CapCores = true, p.cfg.FloorDuty*ncpus
			out = append(out, PermitDecision{Tenant: t.ID, Name: t.Name, State: PermitOver, CapCores: st.CapCores, Duty: p.cfg.FloorDuty, Credit: st.Credit,
				Reason: fmt.Sprintf("credit %.0f below 0: polluting at %.0f (llc_cap_act) on %.2f CPUs against a booked llc_cap of %.0f (%s)", st.Credit, act, t.Usage, booking, by)})
		case st.capped && (st.State == PermitUnder || t.Protected):
			why := fmt.Sprintf("credit %.0f above 0 again", st.Credit)
			if t.Protected {
				why = "tenant is protected"
			}
			st.capped, st.CapCores = false, 0
			out = append(out, PermitDecision{Tenant: t.ID, Name: t.Name, State: PermitUnder, Duty: 1, Credit: st.Credit, Reason: why})
		}
	}
	for id, st := range p.tenants {
		if !present[id] {
			if st.capped {
				out = append(out, PermitDecision{Tenant: id, Name: st.Name, State: PermitUnder, Duty: 1, Credit: st.Credit, Reason: "tenant gone"})
			}
			delete(p.tenants, id)
		}
	}
	slices.SortFunc(out, func(a, b PermitDecision) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out
}

// Status lists every booked tenant's permit, sorted.
func (p *Permits) Status() []PermitStatus {
	out := make([]PermitStatus, 0, len(p.tenants))
	for _, st := range p.tenants {
		out = append(out, st.PermitStatus)
	}
	slices.SortFunc(out, func(a, b PermitStatus) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out
}

// Capped is the tenants under an OVER cap, with the cap in cores.
func (p *Permits) Capped() map[string]float64 {
	out := map[string]float64{}
	for id, st := range p.tenants {
		if st.capped {
			out[id] = st.CapCores
		}
	}
	return out
}
