// Package agent runs crosstalk's loop on a host: every interval it senses
// the tenants and its canary probes, lets the judge decide whether the host
// is contended and who is suspected, proves a suspect by perturbation, and
// has the actuators throttle only a proven polluter — restoring everything
// on exit, and on start whatever a killed predecessor left.
//
// Deciding and writing are apart: policy → arbiter → actuator.
//
//   - The probe sensor (probe.go) reads the canary probe for the loop, the
//     watch and the proofs, each reading under a timeout; a probe that
//     outlives it marks its CPU busy until it ends. An agent with no
//     baselines has it survey the quiet level first (watch.go), capping
//     busy tenants for a moment through the arbiter.
//   - A policy judges and asks. Each hardware-assisted policy (bus-lock
//     budget, pollution permits, power budget, LLC and MBA isolation) is a
//     type in its own file (policy_*.go) holding only its judge and
//     configuration: each interval it reads the observation the sensors
//     made and returns decisions — a claim on a lever for a tenant (a
//     CPU-quota cap, a clock-modulation or cpufreq step on some CPUs, a
//     resctrl class of ways or bandwidth), or a release, each with its
//     reason. It writes nothing. The two policies that convict by proof —
//     the probe policy (policy_probe.go: contention on the canary probes)
//     and CPU wait (cpuwait.go: a tenant's run delay) — rank their suspects
//     and start proofs in one shared prover (prover.go: one proof at a time
//     on the host), which remembers each suspect's backoffs, carried
//     evidence and cap budget in a ledger (ledger.go) and hands a convicted
//     tenant to the throttles (throttle.go: its duty controller, and the
//     convicts on record).
//   - The arbiter (arbiter.go) applies every decision. Several policies may
//     hold one tenant: it keeps each one's claim and gives the tenant the
//     tightest per lever, so no policy's release undoes another's throttle.
//     Dry run stops every write there, in one place. It records each
//     hardware policy's action (state, journal, hook), journals a failed
//     release the same way for every lever, and forgets a tenant that
//     discovery no longer finds.
//   - The actuators (internal/act: CPU quota, clock modulation, cpufreq,
//     resctrl classes) write what the arbiter asks, and nothing else does.
//
// Each component is handed only the roles it needs, as small interfaces:
// the probe policy's CPU-quota claims (probeHolds, over the arbiter), the
// record of actions (recorder.go: state, journal, log, hook), the handling
// of a failed write, the probe sensor's readings.
package agent

import (
	"cmp"
	"fmt"
	"os"
	"path"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/nodesignal"
	"github.com/crosstalk-project/crosstalk/internal/sense"
	"github.com/crosstalk-project/crosstalk/internal/yamlfile"
)

// Config is the agent's YAML configuration. Every field has a safe default:
// `crosstalk run` works with no file at all.
type Config struct {
	// Interval between samples (default 500ms).
	Interval time.Duration `yaml:"interval"`
	// Listen is the address of /metrics and /api/state (default
	// 127.0.0.1:9477; "" or "off" disables it). Keep it on localhost unless a
	// firewall or a proxy with authentication protects it.
	Listen string `yaml:"listen"`
	// WebConfigFile is an exporter-toolkit web configuration (TLS,
	// basic auth, as Prometheus exporters take it through
	// --web.config.file) for the listener; "" serves plain HTTP.
	WebConfigFile string `yaml:"web_config_file"`
	// StateDir holds the restore state file and the journal (default /var/lib/crosstalk).
	StateDir string `yaml:"state_dir"`
	// DryRun judges and journals but writes nothing to any cgroup.
	DryRun bool `yaml:"dry_run"`
	// LogLevel is debug, info (default), warn or error; --log-level wins
	// over it.
	LogLevel string `yaml:"log_level"`

	Tenants TenantsConfig `yaml:"tenants"`
	// Protect lists tenants never proven nor throttled: IDs, names or
	// cgroup path globs (path.Match syntax).
	Protect []string `yaml:"protect"`
	// MaxThrottled caps how many tenants may be throttled at once (default 2).
	// (omitempty: a Config marshalled and parsed again, as the simulator
	// does, keeps the default rather than failing on an explicit 0.)
	MaxThrottled int `yaml:"max_throttled,omitempty"`

	Probe    ProbeConfig    `yaml:"probe"`
	Judge    JudgeConfig    `yaml:"judge"`
	Proof    ProofConfig    `yaml:"proof"`
	Throttle ThrottleConfig `yaml:"throttle"`
	Perf     PerfConfig     `yaml:"perf"`

	Kubernetes nodesignal.Config `yaml:"kubernetes"`

	// The hardware-assisted policies (Alita, Kyoto). Each runs only where
	// the host has what it needs; the state API and the log say why one is
	// off.
	BusLocks judge.BusLockBudgetConfig `yaml:"buslocks"`
	Permits  judge.PermitsConfig       `yaml:"permits"`
	Power    judge.PowerBudgetConfig   `yaml:"power"`
	Levers   LeversConfig              `yaml:"levers"`
	Resctrl  ResctrlConfig             `yaml:"resctrl"`

	// The CPU-wait and CPI contention signals, and libvirt VMs.
	CPUWait CPUWaitConfig `yaml:"cpu_wait"`
	CPI     CPIConfig     `yaml:"cpi"`
	Libvirt LibvirtConfig `yaml:"libvirt"`
}

// LeversConfig allows or forbids the per-CPU levers the bus-lock and power
// policies may use for a tenant that owns its CPUs (see judge.ChooseLevers;
// every other tenant is throttled through its CPU quota).
type LeversConfig struct {
	ClockModulation act.ClockModConfig `yaml:"clock_modulation"`
	CPUFreq         act.CPUFreqConfig  `yaml:"cpufreq"`
}

// ResctrlConfig is cache and memory-bandwidth monitoring and isolation
// through resctrl (Intel RDT, AMD PQoS).
type ResctrlConfig struct {
	// Enabled monitors tenants' LLC occupancy and memory bandwidth where
	// resctrl monitoring is mounted (default true).
	Enabled *bool `yaml:"enabled"`
	// MaxMonitoringGroups bounds the RMIDs crosstalk takes (0: as many as
	// the hardware has), to leave some to other tools.
	MaxMonitoringGroups int `yaml:"max_monitoring_groups"`
	// LLCIsolation is Alita's bias isolation: only the tenant holding far
	// more LLC than its share of the CPUs gets a small class of ways.
	LLCIsolation LLCIsolationConfig `yaml:"llc_isolation"`
	// MBA is Alita's memory-bandwidth halving of an over-share tenant.
	MBA MBAConfig `yaml:"mba"`
}

// LLCIsolationConfig tunes bias LLC isolation (zero values take Alita's,
// but for busy_fraction).
type LLCIsolationConfig struct {
	// Enabled where resctrl has L3 CAT and monitoring (default true).
	Enabled    *bool   `yaml:"enabled"`
	ThrottleBC float64 `yaml:"throttle_bc"`
	RelaxBC    float64 `yaml:"relax_bc"`
	// BusyFraction: the L3 counts as contended only when its tenants
	// occupy at least this part of it (default 0.9). Alita uses 0.1, which
	// makes a tenant that merely uses spare cache — alone on a quiet
	// domain, above its CPU share — "the abuser" and shrinks it while
	// nobody is short of cache (the simulator isolated the victim that
	// way). Until the LLC is full, nobody evicts anybody.
	BusyFraction  float64       `yaml:"busy_fraction"`
	RelaxPeriod   time.Duration `yaml:"relax_period"`
	ReplacePeriod time.Duration `yaml:"replace_period"`
}

// MBAConfig tunes memory-bandwidth throttling. It is off unless enabled:
// its threshold is the memory traffic an L3 domain of this host can carry
// before it hurts, which depends on the platform (Alita's 50 GB/s was one
// Xeon socket; an AMD L3 domain is one CCD).
type MBAConfig struct {
	Enabled bool `yaml:"enabled"`
	// ThresholdBytesPerSec: a domain moving at least this much is under
	// pressure (default 50e9).
	ThresholdBytesPerSec float64 `yaml:"threshold_bytes_per_sec"`
	// RelaxGuardBytesPerSec: relax only below threshold minus this (default 5e9).
	RelaxGuardBytesPerSec float64 `yaml:"relax_guard_bytes_per_sec"`
	// Floor is the lowest rate as a fraction of unthrottled (default 0.2).
	Floor float64 `yaml:"floor"`
}

// CPUWaitConfig is the CPU-wait contention signal: a tenant whose work takes
// far longer than usual because its threads wait for CPUs a neighbour keeps
// busy (vCPUs of two VMs pinned to one CPU; what a guest sees as steal).
// Suspects are the tenants active on its CPUs, proven by the same randomized proof.
type CPUWaitConfig struct {
	// Enabled judges CPU wait (default true). Turn it off where tenants are
	// meant to share CPUs and compete for them.
	Enabled *bool `yaml:"enabled"`
	// Prove lets CPU wait prove and throttle a tenant that takes half
	// again an equal share of the CPUs it shares (default false: it
	// reports the victims and the suspects, and proves no one). The
	// scheduler already shares a CPU fairly among tenants of equal CPU
	// weight; one takes that much more only by a larger weight — on a
	// Kubernetes node its pods' requests, which crosstalk must not undo —
	// or by threads outside its group. Turn it on where tenants' weights
	// are not meant to divide shared CPUs.
	Prove *bool `yaml:"prove"`
	// Ratio: a tenant's stretch ((CPU time + run delay) / CPU time) this
	// many times its quiet stretch, twice in a row, is contention (default
	// 1.5); Strong counts at once (default 4).
	Ratio  float64 `yaml:"ratio"`
	Strong float64 `yaml:"strong"`
}

// CPIConfig is the CPI contention signal, where a PMU counts each
// tenant's cycles and instructions: a tenant whose cycles per instruction
// rise far above its usual level is losing its cache or its memory
// bandwidth to a neighbour on its L3 (CPI²). The suspects are the tenants
// on that L3, ranked by LLC misses, activity and correlation; the proof
// is the probes' randomized one, read on the victims' CPI.
type CPIConfig struct {
	// Enabled judges CPI where cycles and instructions are counted
	// (default true; off, or without a PMU, nothing is judged).
	Enabled *bool `yaml:"enabled"`
	// Prove lets CPI prove and throttle a suspect (default true; off, it
	// reports the victims and the suspects, and proves no one).
	Prove *bool `yaml:"prove"`
	// Ratio: a tenant's CPI this many times its usual, twice in a row, is
	// contention (default 1.3); Strong counts at once (default 2).
	Ratio  float64 `yaml:"ratio"`
	Strong float64 `yaml:"strong"`
	// Survey caps each tenant that misses the LLC as a polluter does for
	// a moment at start, and starts the CPI baselines of the neighbours
	// its cap relieved by Strong or more from their CPI with it capped: a
	// polluter already running when the agent starts would otherwise be
	// every victim's usual. Default false: it also finds a heavy innocent
	// that slows its neighbours as much (in the simulator, a memory-bound
	// tenant beside a light cache user), which the proof then convicts.
	Survey *bool `yaml:"survey"`
}

// TenantsConfig says which cgroups are tenants.
type TenantsConfig struct {
	// Builtin discovers libvirt VMs, Kubernetes pods and containers (default true).
	Builtin *bool `yaml:"builtin"`
	// Globs add cgroup path patterns whose matches are tenants.
	Globs []string `yaml:"globs"`
}

// ProbeConfig sizes the canary probe.
type ProbeConfig struct {
	LLCBytes      int64 `yaml:"llc_bytes"`
	CPUsPerDomain int   `yaml:"cpus_per_domain"`
	Chunks        int   `yaml:"chunks"`
	// ProofChunks is how many timed chunks a proof's DRAM reading runs
	// (default 3, or chunks if fewer): a proof reads a dozen times a slot,
	// often on a victim's CPU.
	ProofChunks int `yaml:"proof_chunks"`
	// Spread is how many readings, in back-to-back pairs 400 µs apart,
	// make one DRAM reading of an interval or a watch: their median
	// counts, and their worst where it is strong (1 = one reading).
	Spread int `yaml:"spread"`
	// ProofReads is how many DRAM readings one proof reading takes back
	// to back, counted at their worst (default 2): the first after the
	// proof's timer wake misses a storm beside a paced neighbour, the
	// second does not (sense.ProbeConfig.ProofReads).
	ProofReads int `yaml:"proof_reads"`
	// Realtime runs the probe's thread, while it is pinned to a tenant's
	// CPU, at the lowest real-time priority (default true; needs
	// CAP_SYS_NICE, and goes on at its normal priority without it): a
	// thread locked to a CPU its tenants starve held up the garbage
	// collector, and with it the whole agent, for seconds
	// (sense.ProbeConfig.NoRealtime).
	Realtime *bool `yaml:"realtime"`
	// PreferIdle reads the probe on the idle CPUs of a domain where it
	// has any (default true): those the last look's /proc/stat read found
	// running for at most a quarter of it, and that no busy or new tenant
	// may run on. The probe takes no tenant's CPU there, and no
	// polluter's own CPU, where it would read quiet, is among them. false
	// reads on every CPU in turn, busy or not.
	PreferIdle *bool `yaml:"prefer_idle"`
}

// preferIdle reports whether the probe reads on idle CPUs where a domain
// has any (ProbeConfig.PreferIdle).
func (c ProbeConfig) preferIdle() bool { return c.PreferIdle == nil || *c.PreferIdle }

// JudgeConfig holds the contention thresholds (ratios of probe latency to its quiet baseline).
type JudgeConfig struct {
	Ratio     float64 `yaml:"ratio"`
	Strong    float64 `yaml:"strong"`
	Tolerance float64 `yaml:"tolerance"`
	// LLCRatio and LLCStrong replace Ratio and Strong for the LLC probe,
	// which shares the LLC with the tenants by design and reads louder
	// (defaults 3 and 6).
	LLCRatio  float64 `yaml:"llc_ratio"`
	LLCStrong float64 `yaml:"llc_strong"`
	// Window is how many intervals the correlation looks back (default 16).
	Window int `yaml:"window"`
}

// ProofConfig shapes the perturbation proof: randomized trials, each a
// slot with the suspect capped hard and a slot with it free, in an order
// drawn at random; a conviction needs `need` of `trials` trials in which
// the cap removed `effect` of the contention (see judge.ProofConfig, and
// judge.ProofConfig.FalseConviction for the bound this gives).
type ProofConfig struct {
	judge.ProofConfig `yaml:",inline"`
	// Backoff before an innocent suspect may be tested again; doubles each
	// time, up to MaxBackoff (defaults 10s, 5m).
	Backoff    time.Duration `yaml:"backoff"`
	MaxBackoff time.Duration `yaml:"max_backoff"`
	// Budget is the most time a tenant may spend capped for proofs in any
	// minute (default 1s): a tenant that used it is not proved again until
	// the minute has passed. While its last proof left evidence leaning to
	// guilt, that evidence multiplies it, up to four times (see
	// proofLedger.allowance): an innocent gets k times the budget with
	// probability at most 1/k.
	Budget time.Duration `yaml:"budget"`
}

// ThrottleConfig shapes the duty cycling of proven polluters.
type ThrottleConfig struct {
	Period       time.Duration `yaml:"period"`
	Steps        int           `yaml:"steps"`
	StartStep    int           `yaml:"start_step"`
	FloorStep    int           `yaml:"floor_step"`
	TightenAbove float64       `yaml:"tighten_above"`
	RelaxBelow   float64       `yaml:"relax_below"`
	Hold         time.Duration `yaml:"hold"`
	MaxHold      time.Duration `yaml:"max_hold"`
	// MaxHarm is the most slowdown relaxing may predict for a neighbour,
	// from the contention the polluter's storm reads (judge.DutyController).
	MaxHarm float64 `yaml:"max_harm"`
}

// PerfConfig controls perf counters.
type PerfConfig struct {
	// Enabled opens per-tenant perf counters (default true).
	Enabled *bool `yaml:"enabled"`
	// FDBudget bounds the open perf file descriptors (default 512).
	FDBudget int `yaml:"fd_budget"`
	// Software also counts software events (context switches, migrations)
	// per tenant on hosts without a hardware PMU (default false).
	Software bool `yaml:"software"`
}

// LibvirtConfig is the libvirt integration: VMs named and located as libvirt
// knows them, and throttled through libvirt's scheduler parameters.
type LibvirtConfig struct {
	// Enabled is "auto" (default: on when the socket exists at start),
	// "true" (on; while the socket is absent crosstalk keeps retrying and
	// VMs are not throttled) or "false" (never: VMs are throttled through
	// their cgroup files, as any other tenant).
	Enabled string `yaml:"enabled"`
	// Socket is libvirtd's socket below the host root (default
	// /run/libvirt/libvirt-sock; with --root /host it is read at
	// /host/run/libvirt/libvirt-sock).
	Socket string `yaml:"socket"`
	// URI is the driver to open (default qemu:///system).
	URI string `yaml:"uri"`
	// Timeout bounds connecting and each call (default 2s): a daemon that
	// does not answer has its connection reset and is reconnected.
	Timeout time.Duration `yaml:"timeout"`
}

// Defaults returns the configuration used without a file.
func Defaults() Config {
	var c Config
	c.fill()
	return c
}

func (c *Config) fill() {
	if c.Interval == 0 {
		c.Interval = 500 * time.Millisecond
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:9477"
	}
	if c.StateDir == "" {
		c.StateDir = "/var/lib/crosstalk"
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.Probe.Realtime == nil {
		c.Probe.Realtime = ptrTo(true)
	}
	if c.Probe.PreferIdle == nil {
		c.Probe.PreferIdle = ptrTo(true)
	}
	if c.Tenants.Builtin == nil {
		c.Tenants.Builtin = ptrTo(true)
	}
	if c.MaxThrottled == 0 {
		c.MaxThrottled = 2
	}
	if c.Judge.Window == 0 {
		c.Judge.Window = 16
	}
	c.Proof.Fill()
	if c.Proof.Budget == 0 {
		c.Proof.Budget = time.Second
	}
	if c.Proof.Backoff == 0 {
		c.Proof.Backoff = 10 * time.Second
	}
	if c.Proof.MaxBackoff == 0 {
		c.Proof.MaxBackoff = 5 * time.Minute
	}
	if c.Perf.Enabled == nil {
		c.Perf.Enabled = ptrTo(true)
	}
	if c.Perf.FDBudget == 0 {
		c.Perf.FDBudget = 512
	}
	c.BusLocks.Fill()
	c.Permits.Fill()
	c.Power.Fill()
	c.Levers.ClockModulation.Fill()
	c.Levers.CPUFreq.Fill()
	if c.Resctrl.Enabled == nil {
		c.Resctrl.Enabled = ptrTo(true)
	}
	if c.Resctrl.LLCIsolation.Enabled == nil {
		c.Resctrl.LLCIsolation.Enabled = ptrTo(true)
	}
	if c.Resctrl.LLCIsolation.BusyFraction == 0 {
		c.Resctrl.LLCIsolation.BusyFraction = 0.9
	}
	alita := judge.AlitaBias()
	li := &c.Resctrl.LLCIsolation
	li.ThrottleBC = cmp.Or(li.ThrottleBC, alita.ThrottleBC)
	li.RelaxBC = cmp.Or(li.RelaxBC, alita.RelaxBC)
	li.RelaxPeriod = cmp.Or(li.RelaxPeriod, alita.RelaxPeriod)
	li.ReplacePeriod = cmp.Or(li.ReplacePeriod, alita.ReplacePeriod)
	mba, am := &c.Resctrl.MBA, judge.AlitaMBA()
	mba.ThresholdBytesPerSec = cmp.Or(mba.ThresholdBytesPerSec, am.ThresholdBytesPerSec)
	mba.RelaxGuardBytesPerSec = cmp.Or(mba.RelaxGuardBytesPerSec, am.RelaxGuardBytesPerSec)
	mba.Floor = cmp.Or(mba.Floor, am.Floor)
	if c.Kubernetes.UncontainedAfter == 0 {
		c.Kubernetes.UncontainedAfter = 5 * time.Minute
	}
	if c.Kubernetes.ClearAfter == 0 {
		c.Kubernetes.ClearAfter = 2 * time.Minute
	}
	if c.CPUWait.Enabled == nil {
		c.CPUWait.Enabled = ptrTo(true)
	}
	if c.CPUWait.Prove == nil {
		c.CPUWait.Prove = ptrTo(false)
	}
	if c.CPUWait.Ratio == 0 {
		c.CPUWait.Ratio = 1.5
	}
	if c.CPUWait.Strong == 0 {
		c.CPUWait.Strong = max(4, c.CPUWait.Ratio)
	}
	if c.CPI.Enabled == nil {
		c.CPI.Enabled = ptrTo(true)
	}
	if c.CPI.Prove == nil {
		c.CPI.Prove = ptrTo(true)
	}
	if c.CPI.Survey == nil {
		c.CPI.Survey = ptrTo(false)
	}
	if c.CPI.Ratio == 0 {
		c.CPI.Ratio = 1.3
	}
	if c.CPI.Strong == 0 {
		c.CPI.Strong = max(2, c.CPI.Ratio)
	}
	if c.Libvirt.Enabled == "" {
		c.Libvirt.Enabled = "auto"
	}
	if c.Libvirt.Timeout == 0 {
		c.Libvirt.Timeout = 2 * time.Second
	}
	if c.Libvirt.Socket == "" {
		c.Libvirt.Socket = "/run/libvirt/libvirt-sock"
	}
	if c.Libvirt.URI == "" {
		c.Libvirt.URI = "qemu:///system"
	}
}

func ptrTo[T any](v T) *T { return &v }

// LoadConfig reads a YAML file; unknown keys are errors that name the key and line.
func LoadConfig(file string) (Config, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return Config{}, fmt.Errorf("configuration: %w", err)
	}
	return ParseConfig(b, file)
}

// StateDirOf reads only state_dir from a configuration that may be invalid
// otherwise (unknown keys, bad values): restore needs nothing else, and a
// typo elsewhere must not keep it from the state.
func StateDirOf(data []byte) (string, bool) {
	var c struct {
		StateDir string `yaml:"state_dir"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil || c.StateDir == "" {
		return "", false
	}
	return c.StateDir, true
}

// ParseConfig parses and validates a configuration.
func ParseConfig(data []byte, source string) (Config, error) {
	var c Config
	// An empty file is the defaults; anything else is read strictly, with
	// errors that name the line and the closest known key.
	if err := yamlfile.DecodeStrict(data, source, "", &c); err != nil {
		if e, ok := err.(*yamlfile.Error); !ok || e.Msg != "" {
			return c, err
		}
	}
	// fill turns an absent max_throttled into its default; written out as
	// 0 it would silently become that default too.
	var explicit struct {
		MaxThrottled *int `yaml:"max_throttled"`
	}
	if yaml.Unmarshal(data, &explicit) == nil && explicit.MaxThrottled != nil && *explicit.MaxThrottled == 0 {
		return c, fmt.Errorf("%s: max_throttled: 0 outside 1-1000 (to watch without throttling, set dry_run: true)", source)
	}
	c.fill()
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("%s: %w", source, err)
	}
	return c, nil
}

// Sparsify is the throttle's duty grid as the CPU-quota actuator writes
// it, with defaults filled.
func (c *Config) Sparsify() act.Sparsify {
	s := act.Sparsify{Period: c.Throttle.Period, Steps: c.Throttle.Steps}
	s.Fill()
	return s
}

// DutyController is the throttle's duty controller, with defaults filled.
func (c *Config) DutyController() judge.DutyController {
	t := c.Throttle
	d := judge.DutyController{Steps: t.Steps, StartStep: t.StartStep, FloorStep: t.FloorStep,
		TightenAbove: t.TightenAbove, RelaxBelow: t.RelaxBelow, Hold: t.Hold, MaxHold: t.MaxHold, MaxHarm: t.MaxHarm}
	d.Fill()
	return d
}

// FloorDuty is the duty of the throttle's floor step: a tenant held there
// cannot be held tighter through its CPU quota.
func (c *Config) FloorDuty() float64 {
	d := c.DutyController()
	return d.Duty(d.FloorStep)
}

// Thresholds is the judge configuration with defaults filled.
func (c *Config) Thresholds() judge.Thresholds {
	th := judge.Thresholds{Ratio: c.Judge.Ratio, Strong: c.Judge.Strong, Tolerance: c.Judge.Tolerance, LLCRatio: c.Judge.LLCRatio, LLCStrong: c.Judge.LLCStrong}
	th.Fill()
	return th
}

// WaitThresholds are the CPU-wait judge's thresholds: its own ratio and
// strong level, the probes' tolerance ("back to normal") for proofs.
func (c *Config) WaitThresholds() judge.Thresholds {
	th := c.Thresholds()
	return judge.Thresholds{Ratio: c.CPUWait.Ratio, Strong: c.CPUWait.Strong, Tolerance: min(th.Tolerance, c.CPUWait.Ratio)}
}

// CPIThresholds are the CPI judge's thresholds: its own ratio and strong
// level, the probes' tolerance ("back to normal") for proofs.
func (c *Config) CPIThresholds() judge.Thresholds {
	th := c.Thresholds()
	return judge.Thresholds{Ratio: c.CPI.Ratio, Strong: c.CPI.Strong, Tolerance: min(th.Tolerance, c.CPI.Ratio)}
}

// ProbeSettings is the probe configuration for the sensor.
func (c *Config) ProbeSettings() sense.ProbeConfig {
	return sense.ProbeConfig{LLCBytes: c.Probe.LLCBytes, CPUsPerDomain: c.Probe.CPUsPerDomain, Chunks: c.Probe.Chunks, ProofChunks: c.Probe.ProofChunks, Spread: c.Probe.Spread, ProofReads: c.Probe.ProofReads,
		NoRealtime: c.Probe.Realtime != nil && !*c.Probe.Realtime}
}

// protects reports whether the configuration protects a tenant: an ID, a
// name or a cgroup path pattern in Protect names it.
func (c *Config) protects(t sense.Tenant) bool {
	for _, p := range c.Protect {
		if p == t.ID || p == t.Name {
			return true
		}
		if ok, _ := path.Match(p, t.Cgroup); ok {
			return true
		}
	}
	return false
}
