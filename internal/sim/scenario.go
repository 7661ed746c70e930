package sim

import (
	"embed"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/scenario"
)

// Roles a tenant plays, for reporting only: the agent never sees them.
const (
	RoleVictim    = scenario.RoleVictim
	RolePolluter  = scenario.RolePolluter
	RoleBystander = scenario.RoleBystander
)

// Tenant kinds: how the tenant appears in the host's cgroup tree.
const (
	KindVM        = "vm"        // a libvirt/QEMU guest: machine.slice/machine-qemu…scope with vcpuN cgroups
	KindContainer = "container" // a docker container: system.slice/docker-<id>.scope
)

// Scenario is a simulated host and its tenants.
type Scenario struct {
	Name        string `yaml:"name" json:"name"`
	Description string `yaml:"description" json:"description,omitempty"`
	// Duration of the simulated run (virtual time; default 60s).
	Duration time.Duration `yaml:"duration" json:"duration"`
	// Step is the model's time step (default 50ms).
	Step time.Duration `yaml:"step" json:"step"`
	// Seed makes the run reproducible (default 1); Noise is the relative
	// standard deviation of probe readings and counters (default 0.02; 0
	// is allowed with noise_off).
	Seed     uint64  `yaml:"seed" json:"seed"`
	Noise    float64 `yaml:"noise" json:"noise"`
	NoiseOff bool    `yaml:"noise_off" json:"noise_off,omitempty"`
	Machine  Machine `yaml:"machine" json:"machine"`
	// Agent is the agent's configuration for the crosstalk policy (every key
	// of `crosstalk run --config`); discovery, listener and state directory
	// are set by the simulator.
	Agent   agent.Config `yaml:"agent" json:"-"`
	Tenants []TenantSpec `yaml:"tenants" json:"tenants"`

	// Victim is the first victim's name (for the summary line).
	tenants []*Tenant
}

// Machine is the simulated host's hardware.
type Machine struct {
	// CPU is the model: its /proc/cpuinfo identity and PMU event encodings.
	// One of skylakex, cascadelakex, icelakex, sapphirerapids, emeraldrapids,
	// graniterapids, haswellx, zen2, zen3, zen4, zen5.
	CPU            string `yaml:"cpu" json:"cpu"`
	Sockets        int    `yaml:"sockets" json:"sockets"`
	CoresPerSocket int    `yaml:"cores_per_socket" json:"cores_per_socket"`
	ThreadsPerCore int    `yaml:"threads_per_core" json:"threads_per_core"`
	// MaxMHz is the highest frequency (cpuinfo_max_freq, all-core turbo
	// here); MinMHz the lowest a power limit or scaling_max_freq can set.
	MaxMHz int `yaml:"max_mhz" json:"max_mhz"`
	MinMHz int `yaml:"min_mhz" json:"min_mhz"`
	// L3Size and L3Ways are per socket (one L3 domain per socket).
	L3Size Bytes `yaml:"l3_size" json:"l3_size"`
	L3Ways int   `yaml:"l3_ways" json:"l3_ways"`
	// MemoryBandwidth is the DRAM bandwidth of one socket.
	MemoryBandwidth ByteRate `yaml:"memory_bandwidth" json:"memory_bandwidth"`
	// TDP is the package power limit the hardware enforces by lowering the
	// frequency of every core of the socket; IdlePower the package power
	// with every core idle.
	TDP       Watts    `yaml:"tdp" json:"tdp"`
	IdlePower Watts    `yaml:"idle_power" json:"idle_power"`
	Features  Features `yaml:"features" json:"features"`
}

// Features says which interfaces the host exposes (each default true: a
// bare-metal server; set false to model a VM or an older kernel).
type Features struct {
	// PMU: a hardware core PMU (perf counters); false = "none", a VM without a vPMU.
	PMU *bool `yaml:"pmu" json:"pmu"`
	// CAT, MBA and MBM are resctrl's cache allocation, memory-bandwidth
	// allocation and bandwidth monitoring (with LLC occupancy).
	CAT *bool `yaml:"cat" json:"cat"`
	MBA *bool `yaml:"mba" json:"mba"`
	MBM *bool `yaml:"mbm" json:"mbm"`
	// RAPL is powercap package energy; CPUFreq the cpufreq policies with
	// scaling_max_freq; MSR /dev/cpu/N/msr (clock modulation, MSR 0x19A).
	RAPL    *bool `yaml:"rapl" json:"rapl"`
	CPUFreq *bool `yaml:"cpufreq" json:"cpufreq"`
	MSR     *bool `yaml:"msr" json:"msr"`
	// Hwmon is coretemp temperatures per package and core.
	Hwmon *bool `yaml:"hwmon" json:"hwmon"`
	// KernelReports: the kernel names threads that take split or bus
	// locks in /dev/kmsg (split_lock_detect=warn, its default), where the
	// CPU detects them (Ice Lake and later Xeons: #AC, once per thread;
	// Zen 3 and later: #DB, ten reports per five seconds for the host);
	// false = split_lock_detect=off.
	KernelReports *bool `yaml:"kernel_reports" json:"kernel_reports"`
}

func on(b *bool) bool { return b == nil || *b }

// TenantSpec is a tenant as the scenario declares it; Count > 1 declares
// that many alike (names get -0001, -0002, …).
type TenantSpec struct {
	Name string `yaml:"name" json:"name"`
	Kind string `yaml:"kind" json:"kind"`
	Role string `yaml:"role" json:"role"`
	// CPUs pins the tenant: a cpu list ("24-27"); a VM gets one vCPU per
	// listed CPU, in order. "auto" (with VCPUs) packs tenants onto the
	// host's CPUs in order, wrapping around (overcommitting) when needed.
	CPUs  string `yaml:"cpus" json:"cpus"`
	VCPUs int    `yaml:"vcpus" json:"vcpus,omitempty"`
	Count int    `yaml:"count" json:"count,omitempty"`
	// Vary (0-0.9) scales each instance's cpu, llc_refs and power by a
	// factor drawn from [1-vary, 1+vary] with the scenario's seed.
	Vary float64 `yaml:"vary" json:"vary,omitempty"`
	// Start and Stop bound the tenant's life (Stop 0: the whole run); its
	// cgroup appears at Start and is removed at Stop.
	Start  time.Duration `yaml:"start" json:"start,omitempty"`
	Stop   time.Duration `yaml:"stop" json:"stop,omitempty"`
	Phases []Phase       `yaml:"phases" json:"phases"`

	line int
}

// Phase is a tenant's behaviour from a time on (offset from the run's
// start). A field left out keeps the previous phase's value (the first
// phase's defaults are in the package doc). Rates are what the tenant does
// running alone at full speed on all its vCPUs; the model scales them by
// how fast it actually progresses.
type Phase struct {
	From time.Duration `yaml:"from" json:"from"`
	// CPU is how busy each vCPU wants to be (0-1).
	CPU *float64 `yaml:"cpu" json:"cpu,omitempty"`
	// MemoryBound is the fraction of its solo time spent waiting on the
	// LLC and DRAM (0-1): its sensitivity to memory latency and cache loss.
	MemoryBound *float64 `yaml:"memory_bound" json:"memory_bound,omitempty"`
	// WorkingSet is the memory it touches repeatedly.
	WorkingSet *Bytes `yaml:"working_set" json:"working_set,omitempty"`
	// LLCRefs are LLC references per second; MemoryBandwidth is an
	// alternative that sets LLCRefs to bandwidth/64 (a streaming tenant
	// whose every reference misses).
	LLCRefs         *Rate     `yaml:"llc_refs" json:"llc_refs,omitempty"`
	MemoryBandwidth *ByteRate `yaml:"memory_bandwidth" json:"memory_bandwidth,omitempty"`
	// BusLocks per second (split or uncacheable locked accesses).
	BusLocks *Rate `yaml:"bus_locks" json:"bus_locks,omitempty"`
	// Power is the dynamic power of all its vCPUs busy at the maximum frequency.
	Power *Watts `yaml:"power" json:"power,omitempty"`
}

// Behaviour is a phase with every field resolved.
type Behaviour struct {
	From        time.Duration
	CPU         float64
	MemoryBound float64
	WorkingSet  float64 // bytes
	LLCRefs     float64 // per second, whole tenant
	BusLocks    float64 // per second, whole tenant
	Power       float64 // watts, whole tenant
}

// Tenant is one resolved tenant (a TenantSpec with Count 3 gives three).
type Tenant struct {
	Index  int
	Name   string
	Kind   string
	Role   string
	VCPUs  []int // pCPU of each vCPU (VMs), or the CPUs a container may use
	CPUSet cpuset.Set
	Start  time.Duration
	Stop   time.Duration // 0: the whole run
	Phases []Behaviour
	// Threads is the number of threads (one per vCPU, plus an emulator
	// thread for VMs).
	Threads int

	cgroup string // cgroupPath, once computed
}

// Active reports whether the tenant exists at t.
func (t *Tenant) Active(t0 time.Duration) bool {
	return t0 >= t.Start && (t.Stop == 0 || t0 < t.Stop)
}

// PhaseAt returns the index of the phase in force at t.
func (t *Tenant) PhaseAt(at time.Duration) int {
	k := 0
	for i, p := range t.Phases {
		if at >= p.From {
			k = i
		}
	}
	return k
}

// Resolved returns the tenants, one per instance (Count expanded).
func (s *Scenario) Resolved() []*Tenant { return s.tenants }

//go:embed scenarios/*.yaml
var builtinFS embed.FS

// scenarios are the built-in scenarios and any scenario file.
var scenarios = scenario.NewCatalog(builtinFS, (*Scenario).check)

// Builtins lists the built-in scenario names.
func Builtins() []string { return scenarios.Names() }

// LoadBuiltins loads every built-in scenario, in name order.
func LoadBuiltins() ([]scenario.Builtin[Scenario], error) { return scenarios.Builtins() }

// Load returns a built-in scenario by name, or reads a YAML file.
func Load(nameOrFile string) (*Scenario, error) { return scenarios.Load(nameOrFile) }

// Parse reads a scenario. Unknown keys are rejected and every error names
// the line it is about.
func Parse(data []byte, source string) (*Scenario, error) { return scenarios.Parse(data, source) }

// check finishes a decoded scenario: its tenants' lines, for errors, and
// its validation.
func (s *Scenario) check(tenantLines []int) error {
	for i, line := range tenantLines {
		if i < len(s.Tenants) {
			s.Tenants[i].line = line
		}
	}
	return s.validate()
}

// MaxTenants bounds a scenario's tenants (after Count).
const MaxTenants = 5000

func (s *Scenario) validate() error {
	if !scenario.ValidName(s.Name) {
		return fmt.Errorf("name %q: use 1-32 lower-case letters, digits, - and _", s.Name)
	}
	if s.Duration == 0 {
		s.Duration = 60 * time.Second
	}
	if s.Duration < time.Second || s.Duration > 24*time.Hour {
		return fmt.Errorf("duration: %s outside 1s-24h", s.Duration)
	}
	if s.Step == 0 {
		s.Step = 50 * time.Millisecond
	}
	if s.Step < 10*time.Millisecond || s.Step > time.Second {
		return fmt.Errorf("step: %s outside 10ms-1s", s.Step)
	}
	if s.Seed == 0 {
		s.Seed = 1
	}
	if s.Noise == 0 && !s.NoiseOff {
		s.Noise = 0.02
	}
	if s.NoiseOff {
		s.Noise = 0
	}
	if s.Noise < 0 || s.Noise > 0.5 {
		return fmt.Errorf("noise: %g outside 0-0.5", s.Noise)
	}
	if err := s.Machine.validate(); err != nil {
		return fmt.Errorf("machine: %w", err)
	}
	if _, err := s.agentConfig(); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if len(s.Tenants) == 0 {
		return errors.New("tenants: at least one is needed")
	}
	return s.resolveTenants()
}

// agentConfig is the scenario's agent configuration, validated.
func (s *Scenario) agentConfig() (agent.Config, error) {
	b, err := yaml.Marshal(s.Agent)
	if err != nil {
		return agent.Config{}, err
	}
	return agent.ParseConfig(b, "agent section")
}

func (m *Machine) validate() error {
	if _, ok := cpuModels[m.CPU]; !ok {
		return fmt.Errorf("cpu: %q unknown (have %s)", m.CPU, strings.Join(cpuModelNames(), ", "))
	}
	if m.Sockets < 1 || m.Sockets > 8 {
		return fmt.Errorf("sockets: %d outside 1-8", m.Sockets)
	}
	if m.CoresPerSocket < 1 || m.CoresPerSocket > 256 {
		return fmt.Errorf("cores_per_socket: %d outside 1-256", m.CoresPerSocket)
	}
	if m.ThreadsPerCore == 0 {
		m.ThreadsPerCore = 1
	}
	if m.ThreadsPerCore != 1 && m.ThreadsPerCore != 2 {
		return fmt.Errorf("threads_per_core: %d (1 or 2)", m.ThreadsPerCore)
	}
	if m.CPUs() > cpuset.MaxCPU+1 {
		return fmt.Errorf("%d CPUs: more than crosstalk handles (%d)", m.CPUs(), cpuset.MaxCPU+1)
	}
	if m.MaxMHz == 0 {
		m.MaxMHz = 3000
	}
	if m.MinMHz == 0 {
		m.MinMHz = 800
	}
	if m.MinMHz < 100 || m.MinMHz >= m.MaxMHz {
		return fmt.Errorf("min_mhz %d must be at least 100 and below max_mhz %d", m.MinMHz, m.MaxMHz)
	}
	if m.L3Size == 0 {
		m.L3Size = Bytes(int64(m.CoresPerSocket) * 1408 << 10)
	}
	if m.L3Ways == 0 {
		m.L3Ways = 11
	}
	if m.L3Ways < 2 || m.L3Ways > 32 {
		return fmt.Errorf("l3_ways: %d outside 2-32", m.L3Ways)
	}
	if m.L3Size < Bytes(m.L3Ways*64*64) {
		return fmt.Errorf("l3_size: %d bytes is too small for %d ways", m.L3Size, m.L3Ways)
	}
	if m.MemoryBandwidth == 0 {
		m.MemoryBandwidth = ByteRate(float64(m.CoresPerSocket) * 4e9)
	}
	if m.TDP == 0 {
		m.TDP = Watts(float64(m.CoresPerSocket)*7 + 40)
	}
	if m.IdlePower == 0 {
		m.IdlePower = Watts(math.Min(0.25*float64(m.TDP), 60))
	}
	if m.IdlePower >= m.TDP {
		return fmt.Errorf("idle_power %gW must be below tdp %gW", m.IdlePower, m.TDP)
	}
	return nil
}

// CPUs is the number of logical CPUs.
func (m Machine) CPUs() int { return m.Sockets * m.CoresPerSocket * m.ThreadsPerCore }

func (s *Scenario) resolveTenants() error {
	seen := map[string]int{}
	rng := newRNG(s.Seed, 0x7e4a47)
	next := 0 // the "auto" packing cursor
	ncpu := s.Machine.CPUs()
	// "auto" packs over the CPUs no tenant is pinned to (all of them when
	// every CPU is pinned somewhere).
	var pinnedAll cpuset.Set
	for _, ts := range s.Tenants {
		if ts.CPUs != "auto" {
			if set, err := cpuset.Parse(ts.CPUs); err == nil {
				pinnedAll = pinnedAll.Union(set)
			}
		}
	}
	var free []int
	for c := 0; c < ncpu; c++ {
		if !pinnedAll.Contains(c) {
			free = append(free, c)
		}
	}
	if len(free) == 0 {
		free = seq(ncpu)
	}
	for i := range s.Tenants {
		ts := &s.Tenants[i]
		where := fmt.Sprintf("tenants[%d]", i)
		if ts.line > 0 {
			where = fmt.Sprintf("line %d: tenant %q", ts.line, ts.Name)
		}
		bad := func(format string, a ...any) error {
			return fmt.Errorf("%s: %s", where, fmt.Sprintf(format, a...))
		}
		if !scenario.ValidName(ts.Name) {
			return bad("name: use 1-32 lower-case letters, digits, - and _")
		}
		switch ts.Kind {
		case "":
			ts.Kind = KindVM
		case KindVM, KindContainer:
		default:
			return bad("kind %q: want vm or container", ts.Kind)
		}
		if err := scenario.CheckRole(ts.Role); err != nil {
			return bad("%v", err)
		}
		if ts.Count == 0 {
			ts.Count = 1
		}
		if ts.Count < 0 || len(s.tenants)+ts.Count > MaxTenants {
			return bad("count %d: at most %d tenants in all", ts.Count, MaxTenants)
		}
		if ts.Vary < 0 || ts.Vary > 0.9 {
			return bad("vary %g outside 0-0.9", ts.Vary)
		}
		if ts.Start < 0 || ts.Stop < 0 || (ts.Stop > 0 && ts.Stop <= ts.Start) {
			return bad("start %s / stop %s: need 0 <= start < stop (stop 0 = the whole run)", ts.Start, ts.Stop)
		}
		if ts.Start >= s.Duration {
			return bad("start %s is not inside the run's %s", ts.Start, s.Duration)
		}
		phases, err := resolvePhases(ts.Phases)
		if err != nil {
			return bad("%v", err)
		}
		var pinned []int
		auto := ts.CPUs == "auto"
		if !auto {
			set, err := cpuset.Parse(ts.CPUs)
			if err != nil || set.IsEmpty() {
				return bad("cpus %q: a cpu list such as 0-3, or auto with vcpus", ts.CPUs)
			}
			if l := set.List(); l[len(l)-1] >= ncpu {
				return bad("cpus %s: the machine has CPUs 0-%d", set, ncpu-1)
			}
			pinned = set.List()
			if ts.VCPUs != 0 && ts.VCPUs != len(pinned) && ts.Kind == KindVM {
				return bad("vcpus %d: a VM gets one vCPU per listed CPU (%d listed)", ts.VCPUs, len(pinned))
			}
		} else if ts.VCPUs < 1 || ts.VCPUs > ncpu {
			return bad("cpus auto needs vcpus between 1 and %d", ncpu)
		}
		for k := 0; k < ts.Count; k++ {
			name := ts.Name
			if ts.Count > 1 {
				name = fmt.Sprintf("%s-%04d", ts.Name, k+1)
			}
			if prev, dup := seen[name]; dup {
				return bad("name %q repeats tenant %d", name, prev)
			}
			seen[name] = len(s.tenants)
			t := &Tenant{Index: len(s.tenants), Name: name, Kind: ts.Kind, Role: ts.Role, Start: ts.Start, Stop: ts.Stop}
			if auto {
				for v := 0; v < ts.VCPUs; v++ {
					t.VCPUs = append(t.VCPUs, free[next%len(free)])
					next++
				}
			} else {
				t.VCPUs = slices.Clone(pinned)
				if ts.Kind == KindContainer && ts.VCPUs > 0 {
					// A container may run VCPUs threads anywhere in its set.
					t.VCPUs = t.VCPUs[:min(ts.VCPUs, len(t.VCPUs))]
				}
			}
			t.CPUSet = cpuset.Of(t.VCPUs...)
			if !auto && ts.Kind == KindContainer {
				t.CPUSet = cpuset.Of(pinned...)
			}
			t.Threads = len(t.VCPUs)
			if ts.Kind == KindVM {
				t.Threads++ // the emulator thread
			}
			f := 1.0
			if ts.Vary > 0 {
				f = 1 - ts.Vary + 2*ts.Vary*rng.Float64()
			}
			for _, p := range phases {
				p.CPU = min(1, p.CPU*f)
				p.LLCRefs *= f
				p.Power *= f
				t.Phases = append(t.Phases, p)
			}
			t.finishDefaults()
			s.tenants = append(s.tenants, t)
		}
	}
	return nil
}

// Defaults of a tenant's first phase.
const (
	defaultCPU         = 1.0
	defaultMemoryBound = 0.1
	defaultWorkingSet  = 1 << 20
	defaultRefsPerVCPU = 2e6 // LLC references per second and vCPU
	defaultWattsPerCPU = 6.0 // dynamic power of a busy core at the maximum frequency
)

func resolvePhases(in []Phase) ([]Behaviour, error) {
	if len(in) == 0 {
		in = []Phase{{}}
	}
	var out []Behaviour
	cur := Behaviour{CPU: defaultCPU, MemoryBound: defaultMemoryBound, WorkingSet: defaultWorkingSet, LLCRefs: -1, Power: -1}
	for i, p := range in {
		if i > 0 && p.From <= in[i-1].From {
			return nil, fmt.Errorf("phases[%d]: from %s must be after the previous phase's %s", i, p.From, in[i-1].From)
		}
		if i == 0 && p.From != 0 {
			return nil, fmt.Errorf("phases[0]: from must be 0 (the tenant's behaviour from the start)")
		}
		cur.From = p.From
		if p.CPU != nil {
			cur.CPU = *p.CPU
		}
		if p.MemoryBound != nil {
			cur.MemoryBound = *p.MemoryBound
		}
		if p.WorkingSet != nil {
			cur.WorkingSet = float64(*p.WorkingSet)
		}
		if p.LLCRefs != nil && p.MemoryBandwidth != nil {
			return nil, fmt.Errorf("phases[%d]: give llc_refs or memory_bandwidth, not both", i)
		}
		if p.LLCRefs != nil {
			cur.LLCRefs = float64(*p.LLCRefs)
		}
		if p.MemoryBandwidth != nil {
			cur.LLCRefs = float64(*p.MemoryBandwidth) / lineSize
		}
		if p.BusLocks != nil {
			cur.BusLocks = float64(*p.BusLocks)
		}
		if p.Power != nil {
			cur.Power = float64(*p.Power)
		}
		switch {
		case cur.CPU < 0 || cur.CPU > 1:
			return nil, fmt.Errorf("phases[%d]: cpu %g outside 0-1", i, cur.CPU)
		case cur.MemoryBound < 0 || cur.MemoryBound > 0.99:
			return nil, fmt.Errorf("phases[%d]: memory_bound %g outside 0-0.99", i, cur.MemoryBound)
		case cur.WorkingSet < 0:
			return nil, fmt.Errorf("phases[%d]: working_set must be positive", i)
		case cur.BusLocks > 5e7:
			return nil, fmt.Errorf("phases[%d]: bus_locks %g/s is beyond any machine (a lock holds the bus about a microsecond)", i, cur.BusLocks)
		}
		out = append(out, cur)
	}
	return out, nil
}

// finishDefaults fills the per-vCPU defaults of rates left unset.
func (t *Tenant) finishDefaults() {
	for i := range t.Phases {
		p := &t.Phases[i]
		if p.LLCRefs < 0 {
			p.LLCRefs = defaultRefsPerVCPU * float64(len(t.VCPUs))
		}
		if p.Power < 0 {
			p.Power = defaultWattsPerCPU * float64(len(t.VCPUs))
		}
	}
}
