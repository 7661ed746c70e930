package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/pmu"
	"github.com/crosstalk-project/crosstalk/internal/sense"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

// Build wires an agent to the real host: cgroup discovery, cgroup and
// schedstat sampling, the canary probe, perf counters where the host has
// them, and the CPU-quota actuator with its state file and journal in
// cfg.StateDir. The returned close function releases what Build opened (it
// does not restore quotas: Run does that when it ends). ctx bounds the
// work Build does itself (the first look at the tenants); the agent's loop
// runs under Run's.
func Build(ctx context.Context, cfg Config, h *host.Host, log *slog.Logger, version string, onAction func(api.ActionRecord)) (*Agent, func(), error) {
	return BuildWith(ctx, cfg, h, BuildOptions{Log: log, Version: version, OnAction: onAction})
}

// BuildOptions replace the parts of Build that touch the live machine: the
// simulator (internal/sim) serves its modelled host through them while every
// file the agent reads and writes still goes through h.
type BuildOptions struct {
	Log      *slog.Logger
	Version  string
	OnAction func(api.ActionRecord)
	// PerfOpener replaces perf_event_open; with it, perf counters are used
	// on a non-live host tree too.
	PerfOpener sense.PerfOpener
	// Probe replaces the canary probe.
	Probe Prober
	// Sleep replaces time.Sleep between per-CPU probes (nil: time.Sleep).
	Sleep func(time.Duration)
	// Now replaces time.Now wherever the agent and its sensors timestamp
	// what they read or do (nil: time.Now): with it and Agent.Tick the
	// simulator runs the agent on virtual time.
	Now func() time.Time
	// Safety, when set, is filled with the state of the agent's own
	// bookkeeping (unowned throttles, a corrupt state file moved aside) for
	// the registry to export.
	Safety *Safety
}

// BuildWith is Build with parts replaced (see BuildOptions).
func BuildWith(ctx context.Context, cfg Config, h *host.Host, o BuildOptions) (*Agent, func(), error) {
	log, version, onAction := o.Log, o.Version, o.OnAction
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	layout, err := cgroup.Detect(h)
	if err != nil {
		return nil, nil, err
	}
	if layout.CPUControl() == "" && !cfg.DryRun {
		return nil, nil, errors.New("no cgroup cpu controller: crosstalk cannot throttle anything here (use --dry-run to watch only)")
	}
	topo, err := topology.Read(h)
	if err != nil {
		return nil, nil, err
	}
	var probe Prober = o.Probe
	if probe == nil {
		if probe, err = sense.NewProbe(topo, allowedCPUs(topo), cfg.ProbeSettings()); err != nil {
			return nil, nil, err
		}
	}
	disc, err := sense.NewCgroupDiscoverer(h, layout, cfg.Tenants.Globs)
	if err != nil {
		return nil, nil, fmt.Errorf("tenants.globs: %w", err)
	}
	disc.Builtin = *cfg.Tenants.Builtin
	// Threads and cpusets change rarely: re-read them about every 30 s, each
	// tenant in its own turn (new tenants are read at once). Starting on a
	// host with a thousand tenants, the first reads spread over a few
	// intervals, 100 tenants each, instead of one interval reading them all.
	disc.DetailEvery = max(1, int(30*time.Second/cfg.Interval))
	disc.MaxNew = 50

	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("state_dir: %w", err)
	}
	if err := CheckStateDir(cfg.StateDir); err != nil {
		return nil, nil, err
	}
	journal, err := act.OpenJournal(JournalPath(cfg.StateDir))
	if err != nil {
		return nil, nil, err
	}
	safety := o.Safety
	if safety == nil {
		safety = NewSafety()
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	state, err := openStateOrMoveAside(StatePath(cfg.StateDir), journal, safety, log, now())
	if err != nil {
		journal.Close()
		return nil, nil, err
	}
	safety.attach(state)
	closers := []func(){func() { journal.Close() }}
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}

	// Each tenant has two or three hot files (cpu.stat, cpu.pressure): keep
	// them open, within a bound.
	files := h.NewRereader(4096)
	closers = append(closers, func() { files.Close() })
	// Run delay is one file per thread: on a busy host each tenant's threads
	// are read in its turn, up to every 5 s, and not at all while its
	// cgroup2 PSI shows that nothing waited (the agent sizes the turn to the
	// host's threads: budgetRunDelay).
	stats := &sense.CgroupStats{Host: h, Layout: layout, Files: files, Now: o.Now, RunDelayEvery: maxRunDelayEvery}
	// A tenant that is gone gives its kept-open files back at once.
	disc.OnGone = stats.Forget
	sp := cfg.Sparsify()
	cq := &act.CPUQuota{Host: h, Layout: layout, State: state, Log: log, Journal: journal,
		Shapes: act.QuotaShapes{ThrottlePeriod: sp.Period, ProofPeriod: proofPeriod, ProofMaxQuota: time.Duration(topo.Online.Len()) * cgroup.MinQuota}}
	if !cfg.DryRun {
		// Every tenant present, not the first MaxNew: a throttle left
		// behind must be flagged wherever it is. Their details read now
		// are cached, so this front-loads the spread-out first reads.
		disc.MaxNew = 0
		flagUnowned(ctx, cq, disc, log)
		disc.MaxNew = 50
	}
	// libvirt VMs: named and located as libvirt knows them, and throttled
	// through libvirt (see wireLibvirt).
	discoverer, quota, stopLibvirt := wireLibvirt(ctx, cfg, h, log, disc, disc.DetailEvery, cq, state)
	closers = append(closers, stopLibvirt)
	d := Deps{
		Discoverer: discoverer,
		Stats:      stats,
		Runnable:   sense.TaskStates{Host: h, Threads: disc.Threads},
		Probe:      probe,
		Quota:      quota,
		Journal:    journal,
		Log:        log,
		OnAction:   onAction,
		Version:    version,
		Sleep:      o.Sleep,
		Now:        o.Now,
		CPUBusy:    sense.NewCPUBusy(h).Read,
	}
	d.Host, _ = h.ReadString("/proc/sys/kernel/hostname")
	var id topology.Identity
	idErr := errors.New("no /proc/cpuinfo")
	if data, err := h.ReadFile("/proc/cpuinfo"); err == nil {
		id, idErr = topology.IdentityFromCPUInfo(string(data))
	}
	if cfg.Probe.Realtime == nil || *cfg.Probe.Realtime {
		if err := sense.RealtimeAllowed(); err != nil {
			// The agent runs on; an operator should know what it risks.
			log.Warn("probe at its normal priority: on a CPU its tenants starve, its pinned thread can hold up the whole agent for seconds; give the agent CAP_SYS_NICE (and a real-time budget in its cgroup), or set probe.realtime: false to accept it", "err", err)
		}
	}
	pres := pmu.Detect(h)
	opener := o.PerfOpener
	if opener == nil && h.IsLive() {
		opener = sense.SystemPerfOpener()
	}
	switch {
	case !*cfg.Perf.Enabled || opener == nil:
	case !pres.Hardware && !cfg.Perf.Software:
		// Software events alone add little to cgroup accounting and cost a
		// file descriptor per tenant, event and CPU: off unless asked for.
		log.Info("no hardware PMU: per-tenant perf counters off; the canary probe is the contention signal", "reason", pres.Reason)
	default:
		var arch pmu.Microarch
		known := idErr == nil
		if known {
			arch, known = pmu.Lookup(id.Vendor, id.Family, id.Model, id.Stepping)
		}
		pc, err := sense.NewPerfCounters(h, layout, sense.PerfEventsFor(pres, arch, known), cfg.Perf.FDBudget, opener)
		if err != nil {
			log.Warn("perf counters off", "err", err)
		} else {
			if o.Now != nil {
				pc.SetClock(o.Now)
			}
			d.Counters, d.PMU = pc, pres.Hardware
		}
	}
	if idErr == nil {
		if ok, why := sense.KernelReportsBusLocks(h, id.HasFlag); !ok {
			log.Info("kernel bus-lock reports off", "why", why)
		} else if kb, err := sense.OpenKernelBusLocks(h); err != nil {
			log.Warn("kernel bus-lock reports off", "err", err)
		} else {
			log.Info("kernel bus-lock reports on: tenants whose threads the kernel names go first among suspects", "why", why)
			d.BusLocks = kb
			d.ThreadCgroups = func(tid int) ([]string, error) { return sense.ThreadCgroups(h, tid) }
			closers = append(closers, func() { kb.Close() })
		}
	}
	rc := RestoreContext{Host: h, Layout: layout, State: state, Log: log}
	d.RestoreRecords = func(ctx context.Context) (int, error) { return restoreRecords(ctx, rc) }
	var events []string
	if pc, ok := d.Counters.(*sense.PerfCounters); ok {
		for _, e := range pc.Events() {
			events = append(events, e.Name)
		}
	}
	switch {
	case !*cfg.CPI.Enabled:
		log.Info("CPI signal off", "why", "cpi.enabled: false")
	case !d.PMU || !slices.Contains(events, sense.EventCycles) || !slices.Contains(events, sense.EventInstructions):
		log.Info("CPI signal off", "why", "no hardware PMU counts each tenant's cycles and instructions")
	default:
		log.Info("CPI signal on: a tenant far over its usual cycles per instruction is a victim, proven on with its neighbours on the L3", "prove", *cfg.CPI.Prove)
	}
	hw := NewHardware(cfg, HardwareOptions{Host: h, Topology: topo, Identity: id, State: state, Log: log, Now: o.Now,
		Events: events, QuotaSteps: cfg.Sparsify().Steps, Files: files})
	for _, k := range slices.Sorted(maps.Keys(hw.Off())) {
		log.Info("hardware policy off", "name", k, "why", hw.Off()[k])
	}
	// Always attached, even with every policy off: the state API says why.
	d.Hardware = hw
	closers = append(closers, func() {
		if hw.resmon != nil {
			hw.resmon.Close()
		}
	})
	a, err := New(cfg, d)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	a.baselinePath = filepath.Join(cfg.StateDir, "baselines.json")
	if b, err := act.ReadNoFollow(a.baselinePath, 16<<20); err == nil {
		var saved map[string]judge.Baseline
		if json.Unmarshal(b, &saved) == nil {
			a.RestoreBaselines(saved)
			log.Info("probe baselines restored", "file", a.baselinePath)
		}
	}
	return a, closeAll, nil
}

// allowedCPUs are the online CPUs this process may run on (a DaemonSet may
// confine the agent to housekeeping CPUs).
func allowedCPUs(topo *topology.Topology) cpuset.Set {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return topo.Online
	}
	var ids []int
	for _, c := range topo.Online.List() {
		if set.IsSet(c) {
			ids = append(ids, c)
		}
	}
	if len(ids) == 0 {
		return topo.Online
	}
	return cpuset.Of(ids...)
}

// saveBaselines writes the probe baselines so a restart starts calibrated.
func (a *Agent) saveBaselines() {
	if a.baselinePath == "" {
		return
	}
	b, err := json.MarshalIndent(a.Baselines(), "", "  ")
	if err != nil {
		return
	}
	// A fresh temporary file (O_EXCL), renamed over the old one: nothing
	// planted in the state directory is written through.
	tmp, err := os.CreateTemp(filepath.Dir(a.baselinePath), ".baselines-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(b)
	if cerr := tmp.Close(); werr != nil || cerr != nil || os.Rename(tmp.Name(), a.baselinePath) != nil {
		os.Remove(tmp.Name())
	}
}
