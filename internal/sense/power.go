package sense

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

// PowerTenantInput is what power attribution needs of a tenant.
type PowerTenantInput struct {
	ID   string
	CPUs cpuset.Set
	// Usage is its CPU use over the interval, in cores (cgroup usage).
	Usage float64
	// PerCPU, when known (cgroup v1 cpuacct.usage_percpu), is its use of
	// each CPU in cores; otherwise Usage is spread over its CPUs in
	// proportion to how busy each was.
	PerCPU map[int]float64
}

// TenantPower is the power attributed to a tenant on one package.
type TenantPower struct {
	ID      string     `json:"id"`
	Package int        `json:"package"`
	CPUs    cpuset.Set `json:"cpus"` // its CPUs on this package
	// Busy is its estimated CPU use on the package, in cores.
	Busy float64 `json:"busy_cores"`
	// Watts is its share of the package's power.
	Watts float64 `json:"watts"`
	// CPUShareWatts is the same without temperature weighting.
	CPUShareWatts float64 `json:"cpu_share_watts"`
	// Temp is the busy-weighted mean temperature of its cores (HasTemp).
	Temp    float64 `json:"temp_c,omitempty"`
	HasTemp bool    `json:"has_temp"`
}

// PackageAttribution is how one package's power was divided.
type PackageAttribution struct {
	PackagePower
	CPUs      cpuset.Set `json:"cpus"`
	BusyCores float64    `json:"busy_cores"`
	// Unattributed is the power of the work no tenant accounts for (host
	// processes, kernel threads).
	Unattributed float64 `json:"unattributed_watts"`
	// TempWeighted says the division weighted busy time by core
	// temperature; TempReason why not, when it did not.
	TempWeighted bool   `json:"temp_weighted"`
	TempReason   string `json:"temp_reason,omitempty"`
	// AvgTemp is the mean core temperature (package sensor when there are
	// no per-core ones), HasTemp when known; PerCoreTemps says every CPU of
	// the package had its core's own reading, so temperatures can tell its
	// tenants apart.
	AvgTemp      float64 `json:"avg_temp_c,omitempty"`
	HasTemp      bool    `json:"has_temp"`
	PerCoreTemps bool    `json:"per_core_temps"`
	// IdleRefTemp is the idle reference temperature the weighting used.
	IdleRefTemp float64 `json:"idle_ref_temp_c,omitempty"`
}

// PowerAttributor divides each package's RAPL power among the tenants
// running on it. RAPL measures packages, not processes, so this is an
// estimate, with these rules:
//
//   - The package's power is divided in proportion to the work done on it:
//     each CPU's busy time (/proc/stat), a tenant's part of it from its
//     cgroup CPU use. Idle and uncore power are thereby shared by the work
//     too (a light tenant alone on a package is charged the whole package),
//     and work outside any tenant is reported as unattributed.
//   - Where every core has a temperature sensor (Intel coretemp), each
//     CPU's busy time is weighted by how far its core runs above the
//     package's idle reference (the coolest temperature seen on a core of
//     the package under 5% busy, learned over time): a core burning more
//     power per busy second runs hotter. Equal temperatures give equal
//     weights, i.e. plain CPU share. Until an idle reference exists, or
//     without per-core sensors (AMD), the division is by CPU share alone.
//
// It keeps the idle references between calls; everything else is plain
// values in and out.
type PowerAttributor struct {
	idleRef map[int]float64
}

// idleBusy: a core this busy or less is idle enough to be a reference.
const idleBusy = 0.05

// Attribute divides pkgs among tenants. busy is each CPU's busy fraction
// over the interval, temps the temperatures (zero value when none).
func (a *PowerAttributor) Attribute(pkgs []PackagePower, topo *topology.Topology, busy map[int]float64, temps Temperatures, tenants []PowerTenantInput) ([]PackageAttribution, []TenantPower) {
	if a.idleRef == nil {
		a.idleRef = map[int]float64{}
	}
	// Each tenant's use of each CPU, in cores.
	use := make([]map[int]float64, len(tenants))
	claimed := map[int]float64{}
	for ti, t := range tenants {
		u := map[int]float64{}
		if t.PerCPU != nil {
			for cpu, v := range t.PerCPU {
				if t.CPUs.Contains(cpu) || t.CPUs.IsEmpty() {
					u[cpu] = v
				}
			}
		} else if t.Usage > 0 && !t.CPUs.IsEmpty() {
			var sum float64
			for _, cpu := range t.CPUs.List() {
				sum += busy[cpu]
			}
			for _, cpu := range t.CPUs.List() {
				if sum > 0 {
					u[cpu] = t.Usage * busy[cpu] / sum
				} else {
					u[cpu] = t.Usage / float64(t.CPUs.Len())
				}
			}
		}
		for cpu, v := range u {
			claimed[cpu] += v
		}
		use[ti] = u
	}
	// Tenants sharing a CPU cannot together have used more of it than it ran.
	for _, u := range use {
		for cpu, v := range u {
			if b := busy[cpu]; claimed[cpu] > b {
				if claimed[cpu] > 0 {
					u[cpu] = v * b / claimed[cpu]
				}
			}
		}
	}

	var outPkgs []PackageAttribution
	var outTenants []TenantPower
	for _, p := range pkgs {
		pa := PackageAttribution{PackagePower: p}
		for _, tp := range topo.Packages {
			if tp.ID == p.Package {
				pa.CPUs = tp.CPUs
			}
		}
		cpus := pa.CPUs.List()
		weight := a.weights(&pa, cpus, busy, temps)
		var total float64 // weighted busy of the package
		for _, cpu := range cpus {
			pa.BusyCores += busy[cpu]
			total += busy[cpu] * weight[cpu]
		}
		var attributed float64
		for ti, t := range tenants {
			on := t.CPUs.Intersect(pa.CPUs)
			if t.CPUs.IsEmpty() && t.PerCPU != nil {
				var ids []int
				for cpu := range use[ti] {
					if pa.CPUs.Contains(cpu) {
						ids = append(ids, cpu)
					}
				}
				on = cpuset.Of(ids...)
			}
			if on.IsEmpty() {
				continue
			}
			tp := TenantPower{ID: t.ID, Package: p.Package, CPUs: on}
			var w, tempSum, tempWeight float64
			for _, cpu := range on.List() {
				u := use[ti][cpu]
				tp.Busy += u
				w += u * weight[cpu]
				if c, ok := temps.CPU[cpu]; ok && u > 0 {
					tempSum += c * u
					tempWeight += u
				}
			}
			if total > 0 {
				tp.Watts = p.Watts * w / total
			}
			if pa.BusyCores > 0 {
				tp.CPUShareWatts = p.Watts * tp.Busy / pa.BusyCores
			}
			if tempWeight > 0 {
				tp.Temp, tp.HasTemp = tempSum/tempWeight, true
			} else if c, ok := temps.Package[p.Package]; ok && temps.CPU == nil {
				tp.Temp, tp.HasTemp = c, true // AMD: the socket's, the same for all
			}
			attributed += tp.Watts
			outTenants = append(outTenants, tp)
		}
		pa.Unattributed = max(p.Watts-attributed, 0)
		outPkgs = append(outPkgs, pa)
	}
	slices.SortFunc(outTenants, func(a, b TenantPower) int {
		if a.Package != b.Package {
			return a.Package - b.Package
		}
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return outPkgs, outTenants
}

// weights is each CPU's weight for the package: 1 (CPU share), or its
// core's temperature rise over the idle reference normalised so the busy-
// weighted mean is 1. It also fills the package's temperature fields.
func (a *PowerAttributor) weights(pa *PackageAttribution, cpus []int, busy map[int]float64, temps Temperatures) map[int]float64 {
	w := make(map[int]float64, len(cpus))
	for _, cpu := range cpus {
		w[cpu] = 1
	}
	var sum float64
	var n int
	allTemps := len(cpus) > 0
	idleMin, haveIdle := 0.0, false
	for _, cpu := range cpus {
		c, ok := temps.CPU[cpu]
		if !ok {
			allTemps = false
			continue
		}
		sum += c
		n++
		if b, ok := busy[cpu]; ok && b <= idleBusy && (!haveIdle || c < idleMin) {
			idleMin, haveIdle = c, true
		}
	}
	switch {
	case n > 0:
		pa.AvgTemp, pa.HasTemp = sum/float64(n), true
	default:
		if c, ok := temps.Package[pa.Package]; ok {
			pa.AvgTemp, pa.HasTemp = c, true
		}
	}
	pa.PerCoreTemps = allTemps
	if !allTemps {
		pa.TempReason = temps.PerCoreReason
		if pa.TempReason == "" {
			pa.TempReason = "no per-core temperatures for this package"
		}
		return w
	}
	// The idle reference drops at once to a cooler idle core and follows a
	// warmer one slowly, so one busy interval cannot lift it.
	ref, known := a.idleRef[pa.Package]
	switch {
	case haveIdle && (!known || idleMin < ref):
		ref, known = idleMin, true
	case haveIdle:
		ref += 0.05 * (idleMin - ref)
	}
	if !known {
		pa.TempReason = "no idle reference temperature yet (no core of the package has been idle)"
		return w
	}
	a.idleRef[pa.Package] = ref
	pa.IdleRefTemp = ref
	var num, den float64
	for _, cpu := range cpus {
		rise := max(temps.CPU[cpu]-ref, 0)
		w[cpu] = rise
		num += busy[cpu] * rise
		den += busy[cpu]
	}
	if num <= 0 || den <= 0 {
		for _, cpu := range cpus {
			w[cpu] = 1
		}
		pa.TempReason = "no busy core runs above the idle reference"
		return w
	}
	mean := num / den
	for _, cpu := range cpus {
		w[cpu] /= mean
	}
	pa.TempWeighted = true
	return w
}

// PowerReading is one interval of the power sensor.
type PowerReading struct {
	At       time.Time            `json:"at"`
	Packages []PackageAttribution `json:"packages"`
	Tenants  []TenantPower        `json:"tenants"`
	// CPUBusy is each CPU's busy fraction over the interval.
	CPUBusy map[int]float64 `json:"-"`
	// Temps is the temperature reading (zero when there are no sensors).
	Temps Temperatures `json:"temperatures"`
}

// PowerSensor reads RAPL, /proc/stat and the temperature sensors and
// attributes power to tenants: the sense stage of selective power
// throttling.
type PowerSensor struct {
	Topology *topology.Topology
	RAPL     *RAPLMeter
	Busy     *CPUBusy
	// Temps is nil without temperature sensors; TempsWhy says why.
	Temps    *TemperatureReader
	TempsWhy string
	attr     PowerAttributor
}

// NewPowerSensor sets up the power sensor. Without RAPL it returns the
// reason (there is nothing to budget); without temperature sensors it
// works by CPU share and says why in TempsWhy.
func NewPowerSensor(h *host.Host, topo *topology.Topology) (*PowerSensor, error) {
	if topo == nil {
		return nil, errors.New("power sensing needs the CPU topology")
	}
	m, err := NewRAPLMeter(h)
	if err != nil {
		return nil, err
	}
	s := &PowerSensor{Topology: topo, RAPL: m, Busy: NewCPUBusy(h)}
	if s.Temps, err = NewTemperatureReader(h, topo); err != nil {
		s.TempsWhy = err.Error()
	}
	return s, nil
}

// Read samples at now. ok is false on the first call (counters primed) and
// when no package could be measured.
//
// It reads only sysfs and procfs, which do not block, so it does not
// consult ctx.
func (s *PowerSensor) Read(_ context.Context, now time.Time, tenants []PowerTenantInput) (r PowerReading, ok bool, err error) {
	r.At = now
	pkgs, perr := s.RAPL.Read(now)
	busy, berr := s.Busy.Read()
	var terr error
	if s.Temps != nil {
		r.Temps, terr = s.Temps.Read()
	} else {
		r.Temps.PerCoreReason = s.TempsWhy
	}
	err = errors.Join(perr, berr, terr)
	if len(pkgs) == 0 || busy == nil {
		return r, false, err
	}
	r.CPUBusy = busy
	r.Packages, r.Tenants = s.attr.Attribute(pkgs, s.Topology, busy, r.Temps, tenants)
	return r, true, err
}
