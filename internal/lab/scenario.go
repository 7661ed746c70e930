// Package lab measures interference on a real host, the way the Alita and
// Kyoto papers did: each tenant solo, then all co-located under each policy,
// and every tenant's slowdown against its solo run. Tenants run in cgroups
// the lab creates (and always removes), pinned to the CPUs the scenario gives.
package lab

import (
	"embed"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/load"
	"github.com/crosstalk-project/crosstalk/internal/scenario"
)

// Roles a tenant can play.
const (
	RoleVictim    = scenario.RoleVictim
	RolePolluter  = scenario.RolePolluter
	RoleBystander = scenario.RoleBystander
)

// MaxSplitLockPhase bounds how long any split-lock tenant may run in one
// phase: split locks slow the whole physical machine, neighbours included.
const MaxSplitLockPhase = 15 * time.Second

// Scenario is a lab experiment.
type Scenario struct {
	Name        string        `yaml:"name" json:"name"`
	Description string        `yaml:"description" json:"description,omitempty"`
	Phase       time.Duration `yaml:"phase" json:"phase"`
	Repetitions int           `yaml:"repetitions" json:"repetitions"`
	// PolicyStart is when the policy begins, as an offset into the
	// co-located phase (0: before any tenant starts). Tenants that start
	// before it are already running when the policy first looks, as on a
	// host where the agent is started or restarted among busy tenants.
	PolicyStart time.Duration `yaml:"policy_start" json:"policy_start,omitempty"`
	Tenants     []Tenant      `yaml:"tenants" json:"tenants"`
}

// Tenant is one workload of a scenario: a built-in load or any command.
type Tenant struct {
	Name string `yaml:"name" json:"name"`
	Role string `yaml:"role" json:"role"`
	// Load is a built-in `crosstalk load` kind; Args are its flags.
	Load string   `yaml:"load" json:"load,omitempty"`
	Args []string `yaml:"args" json:"args,omitempty"`
	// Command is any program (argv); its metric comes from Metric.
	Command []string `yaml:"command" json:"command,omitempty"`
	Metric  *Metric  `yaml:"metric" json:"metric,omitempty"`
	// Onset, for a command, is a regular expression for the line it
	// prints when its work begins (stress-ng --verbose: "started \["):
	// reaction times count from that line instead of the process start.
	// A built-in load says so itself (its "start" line).
	Onset string `yaml:"onset" json:"onset,omitempty"`
	// CPUs the tenant is pinned to, as a cpu list ("0", "2-3").
	CPUs string `yaml:"cpus" json:"cpus"`
	// Start and Stop are offsets into the co-located phase; Stop 0 = phase end.
	Start time.Duration `yaml:"start" json:"start,omitempty"`
	Stop  time.Duration `yaml:"stop" json:"stop,omitempty"`
	// Pause and Resume, offsets into the co-located phase, stop every
	// process of the tenant (SIGSTOP) and let them go on (SIGCONT): a tenant
	// that goes quiet and comes back without restarting.
	Pause  time.Duration `yaml:"pause" json:"pause,omitempty"`
	Resume time.Duration `yaml:"resume" json:"resume,omitempty"`

	line    int // line of the tenant in the YAML, for errors
	cpus    cpuset.Set
	re      *regexp.Regexp
	onsetRe *regexp.Regexp
}

// Metric says how to read a command's performance from its output.
type Metric struct {
	Name string `yaml:"name" json:"name"`
	// Regex is matched against every output line; its first group is the number.
	Regex     string `yaml:"regex" json:"regex"`
	Direction string `yaml:"direction" json:"direction"` // "higher" or "lower" is better
	Unit      string `yaml:"unit" json:"unit,omitempty"`
	// Aggregate combines several matches: last (default), mean, min or max.
	Aggregate string `yaml:"aggregate" json:"aggregate,omitempty"`
}

// CPUSet is the parsed CPU list.
func (t Tenant) CPUSet() cpuset.Set { return t.cpus }

// Program names what the tenant runs: its built-in load, or its command's
// program ("" when it has neither). A shell running a script (sh -c
// SCRIPT) is named by the program the script starts with, or by the
// tenant's name where the script starts with shell syntax: "sh" says
// nothing of what it runs.
func (t Tenant) Program() string {
	if t.Load != "" {
		return t.Load
	}
	if len(t.Command) == 0 {
		return ""
	}
	prog := path.Base(t.Command[0])
	if !shells[prog] || len(t.Command) < 3 || t.Command[1] != "-c" {
		return prog
	}
	if f := strings.Fields(t.Command[2]); len(f) > 0 && !shellSyntax(f[0]) {
		return path.Base(f[0])
	}
	if t.Name != "" {
		return t.Name
	}
	return prog
}

// shells are the programs whose -c runs a script.
var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true}

// RunLength is how long the tenant runs in a phase of length phase.
func (t Tenant) RunLength(phase time.Duration) time.Duration {
	end := phase
	if t.Stop > 0 && t.Stop < phase {
		end = t.Stop
	}
	return end - t.Start
}

// MetricInfo is the tenant's metric name, unit and direction.
func (t Tenant) MetricInfo() (name, unit, direction string) {
	if t.Load != "" {
		k, _ := load.Lookup(t.Load)
		return k.Metric, k.Unit, k.Direction
	}
	if t.Metric == nil {
		return "", "", ""
	}
	name = t.Metric.Name
	if name == "" {
		name = "metric"
	}
	return name, t.Metric.Unit, t.Metric.Direction
}

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

func (s *Scenario) validate() error {
	if s.Name == "" {
		return errors.New("scenario needs a name")
	}
	if !scenario.ValidName(s.Name) {
		return fmt.Errorf("scenario name %q: use lower-case letters, digits, - and _", s.Name)
	}
	if s.Phase <= 0 {
		return errors.New("phase: must be a positive duration such as 5s")
	}
	if s.Repetitions == 0 {
		s.Repetitions = 1
	}
	if s.Repetitions < 0 || s.Repetitions > 100 {
		return fmt.Errorf("repetitions: %d outside 1-100", s.Repetitions)
	}
	if s.PolicyStart < 0 || s.PolicyStart >= s.Phase {
		return fmt.Errorf("policy_start %s: must be within the phase (0 to %s)", s.PolicyStart, s.Phase)
	}
	if len(s.Tenants) == 0 {
		return errors.New("tenants: at least a victim is needed")
	}
	victims := 0
	seen := map[string]bool{}
	for i := range s.Tenants {
		t := &s.Tenants[i]
		if err := t.validate(s.Phase); err != nil {
			if t.line > 0 {
				return fmt.Errorf("line %d: tenant %q: %w", t.line, t.Name, err)
			}
			return fmt.Errorf("tenant %d %q: %w", i+1, t.Name, err)
		}
		if seen[t.Name] {
			return fmt.Errorf("line %d: tenant name %q used twice", t.line, t.Name)
		}
		seen[t.Name] = true
		if t.Role == RoleVictim {
			victims++
		}
	}
	if victims != 1 {
		return fmt.Errorf("tenants: exactly one victim is needed, found %d", victims)
	}
	return nil
}

func (t *Tenant) validate(phase time.Duration) error {
	if !scenario.ValidName(t.Name) {
		return errors.New("name: use 1-32 lower-case letters, digits, - and _")
	}
	if err := scenario.CheckRole(t.Role); err != nil {
		return err
	}
	switch {
	case t.Load != "" && len(t.Command) > 0:
		return errors.New("give either load or command, not both")
	case t.Load == "" && len(t.Command) == 0:
		return errors.New("give a built-in load or a command")
	case t.Load != "":
		if _, ok := load.Lookup(t.Load); !ok {
			var names []string
			for _, k := range load.Kinds() {
				names = append(names, k.Name)
			}
			return fmt.Errorf("load %q: built-in loads are %s", t.Load, strings.Join(names, ", "))
		}
		if t.Metric != nil {
			return errors.New("metric: built-in loads report their own metric")
		}
		if t.Onset != "" {
			return errors.New("onset: built-in loads say when their work begins")
		}
		for _, a := range t.Args {
			if a == "--duration" || strings.HasPrefix(a, "--duration=") {
				return errors.New("args: the lab sets --duration from the phase, start and stop")
			}
		}
	default:
		if len(t.Args) > 0 {
			return errors.New("args: only for built-in loads; put a command's arguments in command")
		}
		if t.Metric == nil {
			if t.Role == RoleVictim {
				return errors.New("metric: a victim command needs a metric regex to measure it by")
			}
		} else if err := t.Metric.validate(); err != nil {
			return fmt.Errorf("metric: %w", err)
		}
		if t.Metric != nil {
			t.re = regexp.MustCompile(t.Metric.Regex)
		}
		if t.Onset != "" {
			re, err := regexp.Compile(t.Onset)
			if err != nil {
				return fmt.Errorf("onset: %w", err)
			}
			t.onsetRe = re
		}
	}
	cpus, err := cpuset.Parse(t.CPUs)
	if err != nil {
		return fmt.Errorf("cpus: %w", err)
	}
	if cpus.IsEmpty() {
		return errors.New("cpus: give the CPUs to pin the tenant to, e.g. \"1\" or \"2-3\"")
	}
	t.cpus = cpus
	if t.Start < 0 || t.Stop < 0 {
		return errors.New("start/stop: offsets cannot be negative")
	}
	if t.Start >= phase {
		return fmt.Errorf("start %s: not before the phase ends (%s)", t.Start, phase)
	}
	if t.Stop > 0 && t.Stop <= t.Start {
		return fmt.Errorf("stop %s: must come after start %s", t.Stop, t.Start)
	}
	if t.Stop > phase {
		return fmt.Errorf("stop %s: after the phase ends (%s)", t.Stop, phase)
	}
	if t.Role == RoleVictim && (t.Start != 0 || t.Stop != 0 || t.Pause != 0 || t.Resume != 0) {
		return errors.New("start/stop/pause/resume: the victim runs the whole phase")
	}
	if err := t.validatePause(phase); err != nil {
		return err
	}
	if t.SplitLocks() && t.RunLength(phase) > MaxSplitLockPhase {
		return fmt.Errorf("a split-lock tenant may run at most %s per phase (it slows the whole machine); shorten phase or set stop", MaxSplitLockPhase)
	}
	return nil
}

func (t *Tenant) validatePause(phase time.Duration) error {
	if t.Pause == 0 && t.Resume == 0 {
		return nil
	}
	end := t.Start + t.RunLength(phase)
	switch {
	case t.Pause <= t.Start:
		return fmt.Errorf("pause %s: must come after start %s", t.Pause, t.Start)
	case t.Resume <= t.Pause:
		return fmt.Errorf("resume %s: must come after pause %s", t.Resume, t.Pause)
	case t.Resume >= end:
		return fmt.Errorf("resume %s: must come before the tenant stops (%s)", t.Resume, end)
	}
	return nil
}

// SplitLocks says whether the tenant makes split locks: the built-in
// splitlock load, or stress-ng's bus-lock stressor.
func (t Tenant) SplitLocks() bool {
	if t.Load == "splitlock" {
		return true
	}
	for _, a := range t.Command {
		if a == "--lockbus" || strings.HasPrefix(a, "--lockbus=") || strings.Contains(a, " --lockbus ") {
			return true
		}
	}
	return false
}

func (m *Metric) validate() error {
	if m.Regex == "" {
		return errors.New("regex is required")
	}
	re, err := regexp.Compile(m.Regex)
	if err != nil {
		return fmt.Errorf("regex: %w", err)
	}
	if re.NumSubexp() < 1 {
		return errors.New("regex needs a capture group around the number")
	}
	switch m.Direction {
	case "higher", "lower":
	default:
		return fmt.Errorf("direction %q: want higher or lower (which is better)", m.Direction)
	}
	switch m.Aggregate {
	case "", "last", "mean", "min", "max":
	default:
		return fmt.Errorf("aggregate %q: want last, mean, min or max", m.Aggregate)
	}
	return nil
}

// WithPhase returns a copy of the scenario with a different phase length,
// scaling every offset with it: start, stop, pause, resume and policy_start
// (the --duration flag).
func (s *Scenario) WithPhase(d time.Duration) (*Scenario, error) {
	c := *s
	c.Tenants = slices.Clone(s.Tenants)
	scale := float64(d) / float64(s.Phase)
	at := func(d time.Duration) time.Duration { return time.Duration(float64(d) * scale).Round(time.Millisecond) }
	for i := range c.Tenants {
		t := &c.Tenants[i]
		t.Start, t.Stop = at(t.Start), at(t.Stop)
		t.Pause, t.Resume = at(t.Pause), at(t.Resume)
	}
	c.PolicyStart = at(s.PolicyStart)
	c.Phase = d
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Victim returns the scenario's victim.
func (s *Scenario) Victim() Tenant {
	for _, t := range s.Tenants {
		if t.Role == RoleVictim {
			return t
		}
	}
	return Tenant{}
}
