package judge

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
)

// PowerBudgetConfig is Alita's selective power throttling (YAML section
// `power:`). Defaults are Alita's constants (test_power_iso.cpp: quota
// 150 W, guard 10 W, 12 s, CPUs over 50% busy).
type PowerBudgetConfig struct {
	// Enabled turns the power budget on (default false: a budget is a
	// property of the SKU and the rack, not something to guess).
	Enabled bool `yaml:"enabled"`
	// BudgetWatts per socket (RAPL package power) (default 150).
	BudgetWatts float64 `yaml:"budget_watts"`
	// GuardWatts below the budget a socket must fall before its throttled
	// tenants relax (default 10: relax under 140 W).
	GuardWatts float64 `yaml:"guard_watts"`
	// Period over which power is averaged and one step decided (default 12s).
	Period time.Duration `yaml:"period"`
	// BusyThreshold: a CPU is busy above this fraction (default 0.5).
	BusyThreshold float64 `yaml:"busy_threshold"`
	// BusyCPUs: a noise tenant has at least this fraction of its CPUs on
	// the socket busy (default 0.5, "at least half").
	BusyCPUs float64 `yaml:"busy_cpus"`
	// HotBy is how "hotter than the socket average" is judged:
	// "temperature" (Alita: mean core temperature), "power" (attributed
	// watts per CPU against the socket's watts per CPU) or "auto"
	// (temperature where every core of the socket has a sensor, else
	// power) (default auto).
	HotBy string `yaml:"hot_by"`
	// Levers, in order of preference (default cpufreq, clock_modulation,
	// cpu_quota: DVFS saves the most power per unit of speed lost).
	Levers []string `yaml:"levers"`
	// MinShare: a noise tenant draws at least this fraction of its
	// socket's power (default 0.1). Throttling a tenant that draws 3% of
	// the package cannot bring the socket under its budget; it only hurts
	// that tenant (the simulator's one-core victim next to a 44-thread
	// virus was "noise" by temperature alone).
	MinShare float64 `yaml:"min_share"`
}

// Fill sets defaults.
func (c *PowerBudgetConfig) Fill() {
	if c.BudgetWatts == 0 {
		c.BudgetWatts = 150
	}
	if c.GuardWatts == 0 {
		c.GuardWatts = 10
	}
	if c.Period == 0 {
		c.Period = 12 * time.Second
	}
	if c.BusyThreshold == 0 {
		c.BusyThreshold = 0.5
	}
	if c.BusyCPUs == 0 {
		c.BusyCPUs = 0.5
	}
	if c.HotBy == "" {
		c.HotBy = "auto"
	}
	if len(c.Levers) == 0 {
		c.Levers = []string{string(LeverCPUFreq), string(LeverClockModulation), string(LeverCPUQuota)}
	}
	if c.MinShare == 0 {
		c.MinShare = 0.1
	}
}

// Validate names the offending field.
func (c *PowerBudgetConfig) Validate() error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("power.%s: %s", field, fmt.Sprintf(format, a...)))
	}
	if c.BudgetWatts <= 0 || c.BudgetWatts > 2000 {
		bad("budget_watts", "%g outside 0-2000", c.BudgetWatts)
	}
	if c.GuardWatts < 0 || c.GuardWatts >= c.BudgetWatts {
		bad("guard_watts", "%g must be >= 0 and below budget_watts", c.GuardWatts)
	}
	if c.Period < time.Second || c.Period > 10*time.Minute {
		bad("period", "%s outside 1s-10m", c.Period)
	}
	if c.BusyThreshold <= 0 || c.BusyThreshold >= 1 {
		bad("busy_threshold", "%g outside (0, 1)", c.BusyThreshold)
	}
	if c.BusyCPUs <= 0 || c.BusyCPUs > 1 {
		bad("busy_cpus", "%g outside (0, 1]", c.BusyCPUs)
	}
	if c.MinShare < 0 || c.MinShare >= 1 {
		bad("min_share", "%g outside [0, 1)", c.MinShare)
	}
	switch c.HotBy {
	case "auto", "temperature", "power":
	default:
		bad("hot_by", "%q is not auto, temperature or power", c.HotBy)
	}
	if _, err := ParseLevers("power.levers", c.Levers); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// PowerSocket is one socket's measurements over an interval.
type PowerSocket struct {
	ID    int
	Watts float64 // RAPL package power
	CPUs  cpuset.Set
	// AvgTemp is the mean core temperature (HasTemp); PerCoreTemps says
	// every core has its own sensor, so temperatures tell tenants apart.
	AvgTemp      float64
	HasTemp      bool
	PerCoreTemps bool
}

// PowerTenant is one tenant on one socket over an interval (one entry per
// socket it has CPUs on: sense.TenantPower).
type PowerTenant struct {
	ID, Name string
	Socket   int
	CPUs     cpuset.Set // its CPUs on the socket
	Watts    float64    // attributed power
	Temp     float64    // busy-weighted mean core temperature (HasTemp)
	HasTemp  bool
	// Protected tenants are never throttled.
	Protected bool
	// Lever and Steps come from ChooseLevers: how it would be throttled,
	// and that lever's number of duty steps (Steps = full speed).
	Lever Lever
	Steps int
}

// PowerSample is one interval of measurements.
type PowerSample struct {
	At       time.Time
	Duration time.Duration // the interval; weights the period's averages (0: 1 s)
	Sockets  []PowerSocket
	CPUBusy  map[int]float64 // busy fraction per CPU
	Tenants  []PowerTenant
}

// PowerAction is what a power decision does.
type PowerAction string

// Power actions.
const (
	PowerTighten PowerAction = "tighten" // one duty step down
	PowerRelax   PowerAction = "relax"   // one duty step up
	PowerRelease PowerAction = "release" // back to full speed: restore
)

// PowerDecision is one change to one tenant's CPUs on one socket.
type PowerDecision struct {
	Tenant, Name string
	Socket       int
	CPUs         cpuset.Set
	Lever        Lever
	Action       PowerAction
	Step, Steps  int // new step; Steps = full speed
	Duty         float64
	Reason       string
}

// PowerSocketStatus is a socket's state at the last decision, for metrics.
type PowerSocketStatus struct {
	ID    int     `json:"socket"`
	Watts float64 `json:"watts"` // averaged over the period
	// State: "over" (>= budget: noise tenants tighten), "guard" (between
	// budget-guard and budget: hold), "under" (<= budget-guard: relax).
	State string   `json:"state"`
	Noise []string `json:"noise,omitempty"` // tenants named noise this period
}

// PowerThrottle is a tenant held below full speed on a socket.
type PowerThrottle struct {
	Tenant      string     `json:"tenant"`
	Name        string     `json:"name"`
	Socket      int        `json:"socket"`
	CPUs        cpuset.Set `json:"cpus"`
	Lever       Lever      `json:"lever"`
	Step, Steps int
}

type powerKey struct {
	tenant string
	socket int
}

type powerAcc struct {
	w, watts, temp, tempW float64
	last                  PowerTenant
}

// PowerBudget is Alita's power module: every Period, a socket whose
// average power is at or over the budget has "noise" tenants — hotter than
// the socket average and with at least half their CPUs on it over 50%
// busy — each dropping one duty step on that socket's CPUs; a socket at or
// under budget minus the guard band relaxes every tenant throttled on it by
// one step; in between nothing changes. Only tenants on a hot socket are
// touched, and only their CPUs on it (for CPU quota, which cannot act per
// socket, the agent applies the tenant's lowest step: TenantStep).
//
// Deterministic: the same samples give the same decisions.
type PowerBudget struct {
	cfg   PowerBudgetConfig
	start time.Time
	// Accumulated over the current period.
	sockW   map[int]float64
	sockAcc map[int]*PowerSocket
	busyAcc map[int]float64
	w       float64
	tenants map[powerKey]*powerAcc
	// Steps of throttled tenant-sockets.
	steps  map[powerKey]*PowerThrottle
	status []PowerSocketStatus
}

// NewPowerBudget returns the judge; cfg is filled with defaults.
func NewPowerBudget(cfg PowerBudgetConfig) *PowerBudget {
	cfg.Fill()
	p := &PowerBudget{cfg: cfg, steps: map[powerKey]*PowerThrottle{}}
	p.reset()
	return p
}

func (p *PowerBudget) reset() {
	p.sockW, p.sockAcc, p.busyAcc, p.w = map[int]float64{}, map[int]*PowerSocket{}, map[int]float64{}, 0
	p.tenants = map[powerKey]*powerAcc{}
}

// Observe adds an interval's measurements; at the end of each period it
// returns the decisions, sorted by socket and tenant (nil in between).
func (p *PowerBudget) Observe(s PowerSample) []PowerDecision {
	if p.start.IsZero() {
		p.start = s.At.Add(-s.Duration)
	}
	w := s.Duration.Seconds()
	if w <= 0 {
		w = 1
	}
	p.w += w
	for _, so := range s.Sockets {
		acc := p.sockAcc[so.ID]
		if acc == nil {
			acc = &PowerSocket{ID: so.ID}
			p.sockAcc[so.ID] = acc
		}
		acc.Watts += w * so.Watts
		acc.CPUs, acc.PerCoreTemps = so.CPUs, so.PerCoreTemps
		if so.HasTemp {
			acc.AvgTemp += w * so.AvgTemp
			acc.HasTemp = true
			p.sockW[so.ID] += w
		}
	}
	for cpu, b := range s.CPUBusy {
		p.busyAcc[cpu] += w * b
	}
	for _, t := range s.Tenants {
		k := powerKey{t.ID, t.Socket}
		acc := p.tenants[k]
		if acc == nil {
			acc = &powerAcc{}
			p.tenants[k] = acc
		}
		acc.w += w
		acc.watts += w * t.Watts
		if t.HasTemp {
			acc.temp += w * t.Temp
			acc.tempW += w
		}
		acc.last = t
	}
	if s.At.Sub(p.start) < p.cfg.Period {
		return nil
	}
	d := p.decide()
	p.start = s.At
	p.reset()
	return d
}

func (p *PowerBudget) decide() []PowerDecision {
	var out []PowerDecision
	p.status = p.status[:0]
	budget, relaxAt := p.cfg.BudgetWatts, p.cfg.BudgetWatts-p.cfg.GuardWatts
	busy := func(cpu int) float64 { return p.busyAcc[cpu] / p.w }

	// Throttles of tenants that are gone, or that are now protected, end.
	for k, th := range p.steps {
		acc, ok := p.tenants[k]
		if !ok || acc.last.Protected {
			why := "tenant gone"
			if ok {
				why = "tenant is protected"
			}
			out = append(out, PowerDecision{Tenant: k.tenant, Name: th.Name, Socket: k.socket, CPUs: th.CPUs, Lever: th.Lever,
				Action: PowerRelease, Step: th.Steps, Steps: th.Steps, Duty: 1, Reason: why})
			delete(p.steps, k)
		}
	}

	sockets := slices.Sorted(maps.Keys(p.sockAcc))
	for _, id := range sockets {
		so := p.sockAcc[id]
		watts := so.Watts / p.w
		st := PowerSocketStatus{ID: id, Watts: watts, State: "guard"}
		switch {
		case watts >= budget:
			st.State = "over"
			byTemp := so.HasTemp && (p.cfg.HotBy == "temperature" || p.cfg.HotBy == "auto" && so.PerCoreTemps)
			// "Hotter than the socket average" is judged against the busy
			// tenants of the socket (weighted by their busy CPUs), not the
			// whole package: Alita's sockets were full of VMs, and idle
			// cores in the average make any busy core look hot.
			type cand struct {
				k           powerKey
				temp, watts float64 // mean temperature; watts per CPU
				nbusy, n    int
			}
			var cands []cand
			var sumT, sumTW, sumW, sumWW float64
			for _, k := range p.keysOn(id) {
				acc := p.tenants[k]
				t := acc.last
				n := t.CPUs.Len()
				if n == 0 {
					continue
				}
				nbusy := 0
				for _, cpu := range t.CPUs.List() {
					if busy(cpu) > p.cfg.BusyThreshold {
						nbusy++
					}
				}
				if float64(nbusy) < p.cfg.BusyCPUs*float64(n) {
					continue
				}
				c := cand{k: k, watts: acc.watts / acc.w / float64(n), nbusy: nbusy, n: n}
				if acc.tempW > 0 {
					c.temp = acc.temp / acc.tempW
					sumT += c.temp * float64(nbusy)
					sumTW += float64(nbusy)
				}
				sumW += c.watts * float64(nbusy)
				sumWW += float64(nbusy)
				cands = append(cands, c)
			}
			avgTemp, perCPU := 0.0, 0.0
			if sumTW > 0 {
				avgTemp = sumT / sumTW
			}
			if sumWW > 0 {
				perCPU = sumW / sumWW
			}
			for _, c := range cands {
				k := c.k
				acc := p.tenants[k]
				t := acc.last
				n, nbusy := c.n, c.nbusy
				if t.Protected || t.Lever == "" || t.Steps < 2 {
					continue
				}
				if share := acc.watts / acc.w; share < p.cfg.MinShare*watts {
					continue
				}
				var hot string
				switch {
				case byTemp && acc.tempW > 0:
					if c.temp < avgTemp {
						continue
					}
					hot = fmt.Sprintf("%.1f °C >= busy tenants' average %.1f °C", c.temp, avgTemp)
				case byTemp:
					continue // no temperature for it: not shown hotter
				default:
					if c.watts < perCPU {
						continue
					}
					hot = fmt.Sprintf("%.1f W per CPU >= busy tenants' average %.1f W per CPU", c.watts, perCPU)
				}
				st.Noise = append(st.Noise, t.ID)
				th := p.throttle(k, t)
				if th.Step <= 1 {
					continue // at the floor (Alita keeps duty 1)
				}
				th.Step--
				out = append(out, PowerDecision{Tenant: t.ID, Name: t.Name, Socket: id, CPUs: th.CPUs, Lever: th.Lever,
					Action: PowerTighten, Step: th.Step, Steps: th.Steps, Duty: float64(th.Step) / float64(th.Steps),
					Reason: fmt.Sprintf("socket %d at %.1f W >= budget %.0f W; %s; %d/%d CPUs over %.0f%% busy",
						id, watts, budget, hot, nbusy, n, 100*p.cfg.BusyThreshold)})
			}
		case watts <= relaxAt:
			st.State = "under"
			for _, k := range p.throttledOn(id) {
				th := p.steps[k]
				if acc := p.tenants[k]; acc != nil {
					p.relever(th, acc.last)
				}
				th.Step++
				d := PowerDecision{Tenant: k.tenant, Name: th.Name, Socket: id, CPUs: th.CPUs, Lever: th.Lever,
					Action: PowerRelax, Step: th.Step, Steps: th.Steps, Duty: float64(th.Step) / float64(th.Steps),
					Reason: fmt.Sprintf("socket %d at %.1f W <= %.0f W (budget %.0f W - guard %.0f W)", id, watts, relaxAt, budget, p.cfg.GuardWatts)}
				if th.Step >= th.Steps {
					d.Action, d.Step, d.Duty = PowerRelease, th.Steps, 1
					delete(p.steps, k)
				}
				out = append(out, d)
			}
		}
		p.status = append(p.status, st)
	}
	slices.SortStableFunc(out, func(a, b PowerDecision) int {
		if a.Socket != b.Socket {
			return a.Socket - b.Socket
		}
		return strings.Compare(a.Tenant, b.Tenant)
	})
	return out
}

// throttle returns the tenant-socket's throttle state, creating it at full
// speed, with lever and steps brought up to date.
func (p *PowerBudget) throttle(k powerKey, t PowerTenant) *PowerThrottle {
	th := p.steps[k]
	if th == nil {
		th = &PowerThrottle{Tenant: k.tenant, Name: t.Name, Socket: k.socket, Lever: t.Lever, Step: t.Steps, Steps: t.Steps}
		p.steps[k] = th
	}
	p.relever(th, t)
	return th
}

// relever follows a tenant whose lever (or its step count) changed: the
// duty is kept, rounded to the new steps.
func (p *PowerBudget) relever(th *PowerThrottle, t PowerTenant) {
	th.CPUs, th.Name = t.CPUs, t.Name
	if t.Steps >= 2 && t.Steps != th.Steps {
		th.Step = max(1, min(t.Steps, (th.Step*t.Steps+th.Steps/2)/th.Steps))
		th.Steps = t.Steps
	}
	if t.Lever != "" {
		th.Lever = t.Lever
	}
}

func (p *PowerBudget) keysOn(socket int) []powerKey {
	var ks []powerKey
	for k := range p.tenants {
		if k.socket == socket {
			ks = append(ks, k)
		}
	}
	slices.SortFunc(ks, func(a, b powerKey) int { return strings.Compare(a.tenant, b.tenant) })
	return ks
}

func (p *PowerBudget) throttledOn(socket int) []powerKey {
	var ks []powerKey
	for k := range p.steps {
		if k.socket == socket {
			ks = append(ks, k)
		}
	}
	slices.SortFunc(ks, func(a, b powerKey) int { return strings.Compare(a.tenant, b.tenant) })
	return ks
}

// Throttled lists the tenant-sockets held below full speed, sorted.
func (p *PowerBudget) Throttled() []PowerThrottle {
	out := make([]PowerThrottle, 0, len(p.steps))
	for _, th := range p.steps {
		out = append(out, *th)
	}
	slices.SortFunc(out, func(a, b PowerThrottle) int {
		if a.Socket != b.Socket {
			return a.Socket - b.Socket
		}
		return strings.Compare(a.Tenant, b.Tenant)
	})
	return out
}

// TenantStep is a tenant's lowest step over its sockets (for a lever that
// acts on the whole tenant, CPU quota); ok is false when it is not
// throttled.
func (p *PowerBudget) TenantStep(tenant string) (step, steps int, ok bool) {
	for k, th := range p.steps {
		if k.tenant != tenant {
			continue
		}
		if !ok || float64(th.Step)/float64(th.Steps) < float64(step)/float64(steps) {
			step, steps, ok = th.Step, th.Steps, true
		}
	}
	return step, steps, ok
}

// Sockets is each socket's state at the last decision.
func (p *PowerBudget) Sockets() []PowerSocketStatus { return slices.Clone(p.status) }
