package plan

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

// RunningDomain is one running guest as a DomainSource reports it: its live
// XML, and live facts that may differ from the XML. Zero values mean "take
// it from the XML".
type RunningDomain struct {
	Name string
	UUID string
	// Source names where it came from, for evidence: a status file path,
	// or a connection URI such as "qemu:///system".
	Source string
	// XML is the live domain XML (virDomainGetXMLDesc, flags 0) or a status
	// file (<domstatus> wrapping it).
	XML []byte
	// VCPUs is the number of online vCPUs (virDomainGetVcpusFlags with
	// VIR_DOMAIN_AFFECT_LIVE).
	VCPUs int
	// MemoryKiB is the current memory (virDomainGetInfo).
	MemoryKiB uint64
	// VCPUPins is each vCPU's live affinity (virDomainGetVcpuPinInfo with
	// VIR_DOMAIN_AFFECT_LIVE), index = vCPU.
	VCPUPins []cpuset.Set
	// EmulatorPin is the emulator threads' live affinity
	// (virDomainGetEmulatorPinInfo).
	EmulatorPin cpuset.Set
}

// DomainSource lists the running domains. StatusDir reads libvirt's status
// files through a host root; an RPC client (libvirt's API) is the other.
type DomainSource interface {
	RunningDomains(ctx context.Context) ([]RunningDomain, error)
}

// Pinner changes a running domain's pinning live (virDomainPinVcpuFlags and
// virDomainPinEmulator with VIR_DOMAIN_AFFECT_LIVE).
type Pinner interface {
	PinVCPU(ctx context.Context, domain string, vcpu int, cpus cpuset.Set) error
	PinEmulator(ctx context.Context, domain string, cpus cpuset.Set) error
}

// LoadDomains parses what a source returns, overlaying its live facts on
// the XML. A domain whose XML cannot be read is reported in errs and
// skipped; the others are returned.
func LoadDomains(ctx context.Context, src DomainSource) (doms []*Domain, errs []error, err error) {
	running, err := src.RunningDomains(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("listing running domains: %w", err)
	}
	for _, r := range running {
		d, err := ParseDomainFile(r.XML, r.Source)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := overlay(d, r); err != nil {
			errs = append(errs, err)
			continue
		}
		doms = append(doms, d)
	}
	slices.SortFunc(doms, func(a, b *Domain) int { return strings.Compare(a.Name, b.Name) })
	return doms, errs, nil
}

func overlay(d *Domain, r RunningDomain) error {
	if r.Name != "" && r.Name != d.Name {
		return fmt.Errorf("%s: source says domain %q, its XML says %q", r.Source, r.Name, d.Name)
	}
	if r.VCPUs > 0 {
		if r.VCPUs > d.MaxVCPUs {
			return fmt.Errorf("%s: %d vCPUs online but the XML allows %d", r.Source, r.VCPUs, d.MaxVCPUs)
		}
		d.VCPUs = r.VCPUs
	}
	if r.MemoryKiB > 0 {
		d.MemoryKiB = r.MemoryKiB
	}
	if r.VCPUPins != nil {
		for i, s := range r.VCPUPins {
			if i < len(d.Pins) && !s.IsEmpty() {
				d.Pins[i] = s
				d.PinSource = "live affinity"
			}
		}
	}
	if !r.EmulatorPin.IsEmpty() {
		d.EmulatorPin = r.EmulatorPin
	}
	return nil
}

// StatusDirPath is where a system libvirtd (or virtqemud) keeps the status
// XML of each running QEMU domain.
const StatusDirPath = "/run/libvirt/qemu"

// StatusDir is a DomainSource reading libvirt's status files under a host
// root: no socket needed, and it works on captured trees.
type StatusDir struct {
	Host *host.Host
	// Dir defaults to StatusDirPath.
	Dir string
}

// RunningDomains returns one entry per NAME.xml in the directory. A missing
// directory means no running domains (or no libvirt).
func (s StatusDir) RunningDomains(context.Context) ([]RunningDomain, error) {
	dir := s.Dir
	if dir == "" {
		dir = StatusDirPath
	}
	files, err := s.Host.Glob(dir + "/*.xml")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	slices.Sort(files)
	var out []RunningDomain
	for _, f := range files {
		data, err := s.Host.ReadFile(f)
		if err != nil {
			// It vanished between listing and reading: the domain stopped.
			continue
		}
		out = append(out, RunningDomain{Name: strings.TrimSuffix(path.Base(f), ".xml"), Source: f, XML: data})
	}
	return out, nil
}

// SpecsFromDomains turns running domains into plan specs with the given
// policy: same name, vCPUs, memory; SMT when they expose threads; cache mode
// kept when set. The largest VMs come first, so they get whole nodes.
func SpecsFromDomains(doms []*Domain, policy Policy) *Spec {
	s := &Spec{}
	doms = slices.Clone(doms)
	slices.SortStableFunc(doms, func(a, b *Domain) int {
		return cmp.Or(cmp.Compare(b.MaxVCPUs, a.MaxVCPUs), strings.Compare(a.Name, b.Name))
	})
	for _, d := range doms {
		vm := VMSpec{Name: d.Name, VCPUs: d.MaxVCPUs, Memory: Size(d.MemoryKiB), Policy: policy,
			SMT: d.TopologyGiven && d.Topology.Threads > 1, PhysBits: PhysBits{Mode: "auto"}}
		switch d.Cache {
		case "passthrough":
			vm.Cache = CachePassthrough
		case "emulate":
			vm.Cache = CacheEmulate
		}
		s.VMs = append(s.VMs, vm)
	}
	return s
}

// Applied is one live change Apply made, with what it replaced.
type Applied struct {
	Domain string
	VCPU   int // -1 for the emulator threads
	From   cpuset.Set
	To     cpuset.Set
}

// Apply pins the planned domains' online vCPUs and emulator threads live,
// skipping what already matches. current gives each domain's present
// pinning (an unpinned vCPU is restored to every online CPU, onlineCPUs).
// If a step fails, the steps already made are undone in reverse order and
// the error says what happened; topology, cells and cache changes are not
// live operations and are left to the XML.
func Apply(ctx context.Context, p Pinner, plan *Plan, current []*Domain, onlineCPUs cpuset.Set) ([]Applied, error) {
	byName := map[string]*Domain{}
	for _, d := range current {
		byName[d.Name] = d
	}
	var done []Applied
	undo := func(cause error) error {
		var uerrs []error
		for i := len(done) - 1; i >= 0; i-- {
			a := done[i]
			var err error
			if a.VCPU < 0 {
				err = p.PinEmulator(ctx, a.Domain, a.From)
			} else {
				err = p.PinVCPU(ctx, a.Domain, a.VCPU, a.From)
			}
			if err != nil {
				uerrs = append(uerrs, fmt.Errorf("restoring %s vCPU %d to %s: %w", a.Domain, a.VCPU, a.From, err))
			}
		}
		if len(uerrs) > 0 {
			return fmt.Errorf("%w; undoing the %d change(s) made also failed: %w", cause, len(done), errors.Join(uerrs...))
		}
		return fmt.Errorf("%w (the %d change(s) made before were undone)", cause, len(done))
	}
	for _, pl := range plan.VMs {
		d, ok := byName[pl.VM.Name]
		if !ok {
			return nil, undo(fmt.Errorf("domain %q is not running", pl.VM.Name))
		}
		if d.VCPUs > len(pl.Pins) {
			return nil, undo(fmt.Errorf("domain %q has %d vCPUs online, the plan places %d", d.Name, d.VCPUs, len(pl.Pins)))
		}
		for v := range d.VCPUs {
			from := onlineCPUs
			if v < len(d.Pins) && !d.Pins[v].IsEmpty() {
				from = d.Pins[v]
			}
			if from.Equal(pl.Pins[v]) {
				continue
			}
			if err := ctx.Err(); err != nil {
				return nil, undo(err)
			}
			if err := p.PinVCPU(ctx, d.Name, v, pl.Pins[v]); err != nil {
				return nil, undo(fmt.Errorf("pinning %s vCPU %d to %s: %w", d.Name, v, pl.Pins[v], err))
			}
			done = append(done, Applied{Domain: d.Name, VCPU: v, From: from, To: pl.Pins[v]})
		}
		from := onlineCPUs
		if !d.EmulatorPin.IsEmpty() {
			from = d.EmulatorPin
		}
		if !pl.Emulator.IsEmpty() && !from.Equal(pl.Emulator) {
			if err := p.PinEmulator(ctx, d.Name, pl.Emulator); err != nil {
				return nil, undo(fmt.Errorf("pinning %s emulator threads to %s: %w", d.Name, pl.Emulator, err))
			}
			done = append(done, Applied{Domain: d.Name, VCPU: -1, From: from, To: pl.Emulator})
		}
	}
	return done, nil
}
