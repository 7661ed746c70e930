// Package doctor tells an operator what this host lets crosstalk sense and
// control (capabilities), and what in its tuning hurts tenants (checks).
//
// It only reads. Every item degrades on its own: a missing or garbled file
// makes that item report "unknown" with the reason, never the whole report fail.
package doctor

import (
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/pmu"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

// Options carries what only the live host can tell.
type Options struct {
	// ProbePerf tries to open a hardware counter; nil skips the probe (trees).
	ProbePerf func() error
	Log       *slog.Logger
}

// LiveOptions returns the options for looking at the machine we run on.
func LiveOptions(log *slog.Logger) Options {
	return Options{ProbePerf: pmu.ProbeCycles, Log: log}
}

// Report is doctor's whole answer; its JSON form is a stable interface.
type Report struct {
	Root         string       `json:"root"`
	Host         HostInfo     `json:"host"`
	Capabilities Capabilities `json:"capabilities"`
	Checks       []Check      `json:"checks"`
	// Domains are the topology checks of running libvirt domains (empty
	// without libvirt); the checks are the plan package's.
	Domains []DomainReport `json:"domains"`
	// Policies says which of the agent's hardware policies and levers
	// would run on this host, and why the others would not (filled by the
	// caller, which builds them as the agent does).
	Policies []Policy `json:"policies,omitempty"`
	// Verdict is what `crosstalk run` will do here (Verdict of the rest of
	// the report, filled by the caller once Policies are in).
	Verdict []VerdictItem `json:"verdict,omitempty"`
}

// Policy is one of the agent's hardware policies or levers on this host.
type Policy struct {
	Name string `json:"name"`
	On   bool   `json:"on"`
	Why  string `json:"why,omitempty"`
}

// HostInfo names the machine.
type HostInfo struct {
	Hostname string `json:"hostname,omitempty"`
	Kernel   string `json:"kernel,omitempty"`
}

// Run examines the host. It never fails: what cannot be read is reported.
func Run(h *host.Host, opt Options) Report {
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	r := Report{Root: h.Root()}
	r.Host.Hostname, _ = h.ReadString("/proc/sys/kernel/hostname")
	r.Host.Kernel, _ = h.ReadString("/proc/sys/kernel/osrelease")

	e := &env{h: h, opt: opt}
	e.cmdline, e.cmdlineErr = h.ReadString("/proc/cmdline")
	if data, err := h.ReadFile("/proc/cpuinfo"); err != nil {
		e.idErr = err
	} else {
		e.id, e.idErr = topology.IdentityFromCPUInfo(string(data))
	}
	e.topo, e.topoErr = topology.Read(h)

	r.Capabilities = capabilities(e)
	e.caps = &r.Capabilities
	for _, c := range checks {
		r.Checks = append(r.Checks, runCheck(c, e))
	}
	r.Domains = runDomains(e)
	return r
}

// env is what capabilities and checks share.
type env struct {
	h          *host.Host
	opt        Options
	id         topology.Identity
	idErr      error
	topo       *topology.Topology
	topoErr    error
	cmdline    string
	cmdlineErr error
	caps       *Capabilities
}

// runDomains reads the running domains' status files and checks their
// topology; like a check, a panic becomes a logged, empty result.
func runDomains(e *env) (out []DomainReport) {
	defer func() {
		if p := recover(); p != nil {
			e.opt.Log.Error("doctor domain checks panicked", "panic", p, "stack", string(debug.Stack()))
			out = []DomainReport{}
		}
	}()
	return domainReports(e)
}

// runCheck runs one check, turning a panic on unexpected input into an
// "unknown" result: doctor must describe broken hosts, not crash on them.
func runCheck(c checkDef, e *env) (out Check) {
	defer func() {
		if p := recover(); p != nil {
			e.opt.Log.Error("doctor check panicked", "check", c.id, "panic", p, "stack", string(debug.Stack()))
			out = Check{ID: c.id, Status: Unknown, Summary: "check failed internally", Why: fmt.Sprintf("internal error: %v (please report with `crosstalk doctor --capture`)", p), Evidence: []Evidence{}}
		}
	}()
	out = c.run(e)
	out.ID = c.id
	if out.Evidence == nil {
		out.Evidence = []Evidence{}
	}
	return out
}
