package act

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strconv"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/sense"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

// RecordCPUFreq is the StateFile record kind of cpufreq limits; keys are
// policy names ("policy3").
const RecordCPUFreq = "cpufreq"

// CPUFreqConfig configures the cpufreq lever (YAML under levers.cpufreq).
type CPUFreqConfig struct {
	// Enabled allows the lever where the host has cpufreq (default true).
	Enabled *bool `yaml:"enabled"`
	// Steps between cpuinfo_min_freq (step 1) and cpuinfo_max_freq (step
	// Steps, no limit) (default 16, as clock modulation with ECMD).
	Steps int `yaml:"steps"`
}

// Fill sets defaults.
func (c *CPUFreqConfig) Fill() {
	if c.Enabled == nil {
		t := true
		c.Enabled = &t
	}
	if c.Steps == 0 {
		c.Steps = 16
	}
}

// Validate checks the step count.
func (c *CPUFreqConfig) Validate() error {
	if c.Steps < 2 || c.Steps > 64 {
		return fmt.Errorf("levers.cpufreq.steps: %d outside 2-64", c.Steps)
	}
	return nil
}

// CPUFreqSupport says why the cpufreq lever is off on h, or nil.
func CPUFreqSupport(h *host.Host, cfg CPUFreqConfig) error {
	cfg.Fill()
	if !*cfg.Enabled {
		return errors.New("cpufreq throttling is disabled by configuration (levers.cpufreq.enabled: false)")
	}
	doms, err := sense.FreqPolicies(h)
	if err != nil {
		return err
	}
	if len(doms) == 0 {
		return errors.New("no cpufreq policies: no frequency driver (usual in VMs; on bare metal check BIOS power management and the intel_pstate/acpi-cpufreq/amd-pstate driver)")
	}
	return nil
}

// KHzForStep is the scaling_max_freq of step out of steps for policy d:
// linear from cpuinfo_min_freq (step 1) towards cpuinfo_max_freq, rounded
// down to 100 MHz (intel_pstate's ratio unit); with
// scaling_available_frequencies, the highest listed frequency at or below
// that (at least the lowest), so a step is never looser than asked. Step
// steps is cpuinfo_max_freq.
func KHzForStep(d sense.FreqPolicy, step, steps int) int64 {
	if step >= steps {
		return d.HWMaxKHz
	}
	step = max(step, 1)
	f := d.HWMinKHz + (d.HWMaxKHz-d.HWMinKHz)*int64(step-1)/int64(steps-1)
	f = max(f/100000*100000, d.HWMinKHz)
	if len(d.AvailableKHz) > 0 {
		pick := d.AvailableKHz[0]
		for _, a := range d.AvailableKHz {
			if a <= f {
				pick = a
			}
		}
		f = pick
	}
	return f
}

type cpufreqRecord struct {
	Tenant      string    `json:"tenant"`
	CPUs        string    `json:"cpus"`
	OriginalKHz int64     `json:"original_khz"`
	AppliedKHz  int64     `json:"applied_khz"`
	Since       time.Time `json:"since"`
}

// CPUFreq throttles a tenant's CPUs by lowering scaling_max_freq of the
// cpufreq policies covering them. A policy scales all its related_cpus
// together, so a limit is only ever written to a policy whose every CPU is
// in the set given (and the set must hold whole cores): never to a policy
// an innocent tenant shares (see judge.ChooseLever).
//
// Before its first write to a policy it records the original
// scaling_max_freq in the state file; Restore, RestoreTenant and RestoreAll
// write it back.
//
// Apply and Restore take the agent's context as its other levers do; a
// sysfs write cannot block, so they do not consult it.
type CPUFreq struct {
	Host     *host.Host
	State    *StateFile
	Topology *topology.Topology
	Config   CPUFreqConfig
	Log      *slog.Logger
}

// NewCPUFreq checks support and returns the actuator, or why it is off.
func NewCPUFreq(h *host.Host, state *StateFile, topo *topology.Topology, cfg CPUFreqConfig, log *slog.Logger) (*CPUFreq, error) {
	cfg.Fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := CPUFreqSupport(h, cfg); err != nil {
		return nil, err
	}
	if topo == nil {
		return nil, errors.New("cpufreq throttling needs the CPU topology (SMT siblings)")
	}
	return &CPUFreq{Host: h, State: state, Topology: topo, Config: cfg, Log: log}, nil
}

// Steps is the number of steps; step Steps is no limit.
func (c *CPUFreq) Steps() int {
	c.Config.Fill()
	return c.Config.Steps
}

// Domains lists the policies (re-read: CPUs come and go).
func (c *CPUFreq) Domains() ([]sense.FreqPolicy, error) { return sense.FreqPolicies(c.Host) }

// Apply limits the policies of cpus to step/Steps for tenant; step ==
// Steps restores them.
func (c *CPUFreq) Apply(ctx context.Context, tenant string, cpus cpuset.Set, step int) error {
	steps := c.Steps()
	if step < 1 || step > steps {
		return fmt.Errorf("cpufreq limit of %s: step %d outside 1-%d", tenant, step, steps)
	}
	if cpus.IsEmpty() {
		return fmt.Errorf("cpufreq limit of %s: no CPUs", tenant)
	}
	if err := wholeCores(c.Topology, cpus); err != nil {
		return fmt.Errorf("cpufreq limit of %s: %w", tenant, err)
	}
	doms, err := c.Domains()
	if err != nil {
		return err
	}
	var mine []sense.FreqPolicy
	covered := cpuset.Set{}
	for _, d := range doms {
		if d.CPUs.Intersect(cpus).IsEmpty() {
			continue
		}
		if out := d.CPUs.Difference(cpus); !out.IsEmpty() {
			return fmt.Errorf("cpufreq limit of %s: %s scales cpus %s together, and %s are not the tenant's: limiting it would slow them too", tenant, d.Name, d.CPUs, out)
		}
		mine = append(mine, d)
		covered = covered.Union(d.CPUs)
	}
	if missing := cpus.Difference(covered); !missing.IsEmpty() {
		return fmt.Errorf("cpufreq limit of %s: cpus %s have no cpufreq policy", tenant, missing)
	}
	if step == steps {
		return c.Restore(ctx, cpus)
	}
	var errs []error
	for _, d := range mine {
		if err := c.applyDomain(tenant, d, step, steps); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *CPUFreq) applyDomain(tenant string, d sense.FreqPolicy, step, steps int) error {
	var rec cpufreqRecord
	known, err := c.State.GetRecord(RecordCPUFreq, d.Name, &rec)
	if err != nil {
		return err
	}
	if !known {
		rec = cpufreqRecord{OriginalKHz: d.ScaleMaxKHz, Since: time.Now().UTC()}
	}
	f := KHzForStep(d, step, steps)
	// Never looser than the limit someone else set before us, and never
	// below scaling_min_freq (a max under the min is not a limit the kernel
	// keeps: the min request wins).
	f = max(min(f, rec.OriginalKHz), d.ScaleMinKHz)
	rec.Tenant, rec.CPUs, rec.AppliedKHz = tenant, d.CPUs.String(), f
	if err := c.State.PutRecord(RecordCPUFreq, d.Name, rec); err != nil {
		return fmt.Errorf("not limiting %s: cannot record its original scaling_max_freq: %w", d.Name, err)
	}
	if err := c.Host.WriteFile(d.Dir()+"/scaling_max_freq", []byte(strconv.FormatInt(f, 10))); err != nil {
		return fmt.Errorf("cpufreq limit of %s on %s: %w", tenant, d.Name, err)
	}
	return nil
}

// Restore writes back the original scaling_max_freq of every policy
// covering cpus that crosstalk limited, and forgets them.
func (c *CPUFreq) Restore(_ context.Context, cpus cpuset.Set) error {
	var errs []error
	for _, k := range c.State.RecordKeys(RecordCPUFreq) {
		var rec cpufreqRecord
		if ok, err := c.State.GetRecord(RecordCPUFreq, k, &rec); err != nil || !ok {
			if err != nil {
				errs = append(errs, err)
			}
			continue
		}
		rc, err := cpuset.Parse(rec.CPUs)
		if err != nil || rc.Intersect(cpus).IsEmpty() {
			continue
		}
		if err := restoreFreq(c.Host, c.State, k, rec); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func restoreFreq(h *host.Host, st *StateFile, policy string, rec cpufreqRecord) error {
	err := h.WriteFile(sense.CPUFreqDir+"/"+policy+"/scaling_max_freq", []byte(strconv.FormatInt(rec.OriginalKHz, 10)))
	if errors.Is(err, fs.ErrNotExist) {
		return st.ForgetRecord(RecordCPUFreq, policy) // the policy went away with its CPUs
	}
	if err != nil {
		return fmt.Errorf("restore cpufreq %s: %w", policy, err)
	}
	return st.ForgetRecord(RecordCPUFreq, policy)
}

// RestoreTenant restores every policy recorded for tenant.
func (c *CPUFreq) RestoreTenant(tenant string) error {
	var errs []error
	for _, k := range c.State.RecordKeys(RecordCPUFreq) {
		var rec cpufreqRecord
		if ok, _ := c.State.GetRecord(RecordCPUFreq, k, &rec); ok && rec.Tenant == tenant {
			if err := restoreFreq(c.Host, c.State, k, rec); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Limited lists the CPUs crosstalk has limited, by tenant.
func (c *CPUFreq) Limited() map[string]cpuset.Set {
	out := map[string]cpuset.Set{}
	for _, k := range c.State.RecordKeys(RecordCPUFreq) {
		var rec cpufreqRecord
		if ok, _ := c.State.GetRecord(RecordCPUFreq, k, &rec); ok {
			if s, err := cpuset.Parse(rec.CPUs); err == nil {
				out[rec.Tenant] = out[rec.Tenant].Union(s)
			}
		}
	}
	return out
}

// RestoreAll restores every policy in the state file.
func (c *CPUFreq) RestoreAll() (restored int, err error) {
	return RestoreCPUFreq(c.Host, c.State, c.Log)
}

// RestoreCPUFreq restores every recorded policy without an actuator (at
// start-up after kill -9, even where the lever is now off). A policy whose
// scaling_max_freq is no longer what crosstalk wrote was changed by someone
// else (an administrator, tuned, a power manager) and is left as it is.
//
// Caveat: scaling_max_freq shows the effective limit, the minimum of every
// frequency-QoS request, so the original recorded at the first write is a
// thermal or platform limit if one was in force then, and a limit lowered
// by the thermal framework since reads as "changed by someone else".
func RestoreCPUFreq(h *host.Host, st *StateFile, log *slog.Logger) (restored int, err error) {
	var errs []error
	for _, k := range st.RecordKeys(RecordCPUFreq) {
		var rec cpufreqRecord
		if ok, gerr := st.GetRecord(RecordCPUFreq, k, &rec); gerr != nil || !ok {
			errs = append(errs, fmt.Errorf("cpufreq record %q unreadable: %v", k, gerr))
			continue
		}
		cur, rerr := h.ReadInt(sense.CPUFreqDir + "/" + k + "/scaling_max_freq")
		switch {
		case errors.Is(rerr, fs.ErrNotExist):
			st.ForgetRecord(RecordCPUFreq, k)
			continue
		case rerr != nil:
			errs = append(errs, fmt.Errorf("restore cpufreq %s: %w", k, rerr))
			continue
		case cur != rec.AppliedKHz:
			if log != nil {
				log.Warn("scaling_max_freq changed by someone else since crosstalk set it; leaving it", "policy", k, "now_khz", cur, "crosstalk_wrote_khz", rec.AppliedKHz)
			}
			st.ForgetRecord(RecordCPUFreq, k)
			continue
		}
		if werr := restoreFreq(h, st, k, rec); werr != nil {
			errs = append(errs, werr)
			continue
		}
		restored++
	}
	return restored, errors.Join(errs...)
}
