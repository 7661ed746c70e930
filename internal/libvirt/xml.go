package libvirt

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
)

// ErrMalformedXML wraps every error of ParseDomainXML.
var ErrMalformedXML = errors.New("malformed domain XML")

// DomainConfig is what crosstalk reads from a domain's XML: its CPUs and
// where they may run, its NUMA memory policy, CFS bandwidth and cache
// allocation. Cpusets are parsed; everything else is as libvirt wrote it.
type DomainConfig struct {
	Name string
	UUID string
	// VCPUs is the number of vCPUs online (<vcpu current=…>, else <vcpu>);
	// MaxVCPUs is <vcpu>.
	VCPUs, MaxVCPUs int
	// VCPUPlacement is <vcpu placement=…> ("static", "auto"); VCPUCPUSet is
	// its cpuset attribute: where unpinned vCPUs run (empty: anywhere).
	VCPUPlacement string
	VCPUCPUSet    cpuset.Set
	// VCPUPins maps a vCPU to its <vcpupin> cpuset.
	VCPUPins map[int]cpuset.Set
	// EmulatorPin is <emulatorpin> (empty when absent); IOThreadPins by iothread ID.
	EmulatorPin  cpuset.Set
	IOThreadPins map[int]cpuset.Set
	NUMATune     *NUMATune
	// CPUTune holds <cputune>'s bandwidth settings in microseconds; nil
	// pointers were absent.
	CPUTune CPUTune
	// CacheTunes are the <cachetune> elements (resctrl allocations).
	CacheTunes []CacheTune
	// Partition is <resource><partition> ("/machine" by default).
	Partition string
	// Topology is <cpu><topology> (zero when absent).
	Topology Topology
}

// NUMATune is <numatune>.
type NUMATune struct {
	Mode, Nodeset, Placement string
	MemNodes                 []MemNode
}

// MemNode is one <numatune><memnode>.
type MemNode struct {
	Cell          int
	Mode, Nodeset string
}

// CPUTune is <cputune>'s CFS bandwidth and shares.
type CPUTune struct {
	Shares                        *uint
	Period, Quota                 *int64 // per vCPU
	GlobalPeriod, GlobalQuota     *int64 // the whole domain
	EmulatorPeriod, EmulatorQuota *int64
}

// CacheTune is one <cachetune vcpus=…>: a resctrl allocation for some vCPUs.
type CacheTune struct {
	VCPUs  cpuset.Set
	ID     string
	Caches []CacheBank
}

// CacheBank is one <cache id level type size unit/> of a cachetune.
type CacheBank struct {
	ID, Level int
	Type      string // both, code, data
	Size      uint
	Unit      string
}

// Topology is <cpu><topology>.
type Topology struct{ Sockets, Dies, Cores, Threads int }

// ParseDomainXML parses a domain's XML. Anything libvirt could not have
// written — not XML, not a <domain>, a cpuset that does not parse, a
// vcpupin for a vCPU that does not exist — is an error naming the element,
// wrapping ErrMalformedXML.
func ParseDomainXML(doc string) (*DomainConfig, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrMalformedXML, fmt.Sprintf(format, a...))
	}
	if strings.TrimSpace(doc) == "" {
		return nil, bad("empty document")
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(doc); err != nil {
		return nil, bad("%v", err)
	}
	if d.Name == "" {
		return nil, bad("no <name>")
	}
	c := &DomainConfig{Name: d.Name, UUID: d.UUID, VCPUPins: map[int]cpuset.Set{}, IOThreadPins: map[int]cpuset.Set{}, Partition: "/machine"}
	set := func(what, s string) (cpuset.Set, error) {
		if s == "" {
			return cpuset.Set{}, nil
		}
		cs, err := parseLibvirtCPUSet(s)
		if err != nil {
			return cs, bad("domain %s: %s cpuset %q: %v", d.Name, what, s, err)
		}
		return cs, nil
	}
	if v := d.VCPU; v != nil {
		c.MaxVCPUs, c.VCPUs, c.VCPUPlacement = int(v.Value), int(v.Value), v.Placement
		if v.Current > 0 {
			c.VCPUs = int(v.Current)
		}
		if c.VCPUs > c.MaxVCPUs {
			return nil, bad("domain %s: %d current vCPUs of %d", d.Name, c.VCPUs, c.MaxVCPUs)
		}
		var err error
		if c.VCPUCPUSet, err = set("<vcpu>", v.CPUSet); err != nil {
			return nil, err
		}
	}
	if c.MaxVCPUs == 0 {
		return nil, bad("domain %s: no <vcpu> count", d.Name)
	}
	if t := d.CPUTune; t != nil {
		for _, p := range t.VCPUPin {
			if int(p.VCPU) >= c.MaxVCPUs {
				return nil, bad("domain %s: <vcpupin vcpu='%d'> but the domain has %d vCPUs", d.Name, p.VCPU, c.MaxVCPUs)
			}
			cs, err := set(fmt.Sprintf("<vcpupin vcpu='%d'>", p.VCPU), p.CPUSet)
			if err != nil {
				return nil, err
			}
			c.VCPUPins[int(p.VCPU)] = cs
		}
		if t.EmulatorPin != nil {
			cs, err := set("<emulatorpin>", t.EmulatorPin.CPUSet)
			if err != nil {
				return nil, err
			}
			c.EmulatorPin = cs
		}
		for _, p := range t.IOThreadPin {
			cs, err := set(fmt.Sprintf("<iothreadpin iothread='%d'>", p.IOThread), p.CPUSet)
			if err != nil {
				return nil, err
			}
			c.IOThreadPins[int(p.IOThread)] = cs
		}
		if t.Shares != nil {
			v := t.Shares.Value
			c.CPUTune.Shares = &v
		}
		per := func(p *libvirtxml.DomainCPUTunePeriod) *int64 {
			if p == nil {
				return nil
			}
			v := int64(p.Value)
			return &v
		}
		quo := func(q *libvirtxml.DomainCPUTuneQuota) *int64 {
			if q == nil {
				return nil
			}
			v := q.Value
			return &v
		}
		c.CPUTune.Period, c.CPUTune.Quota = per(t.Period), quo(t.Quota)
		c.CPUTune.GlobalPeriod, c.CPUTune.GlobalQuota = per(t.GlobalPeriod), quo(t.GlobalQuota)
		c.CPUTune.EmulatorPeriod, c.CPUTune.EmulatorQuota = per(t.EmulatorPeriod), quo(t.EmulatorQuota)
		for _, ct := range t.CacheTune {
			vcpus, err := set("<cachetune vcpus>", ct.VCPUs)
			if err != nil {
				return nil, err
			}
			tune := CacheTune{VCPUs: vcpus, ID: ct.ID}
			for _, cache := range ct.Cache {
				tune.Caches = append(tune.Caches, CacheBank{ID: int(cache.ID), Level: int(cache.Level), Type: cache.Type, Size: cache.Size, Unit: cache.Unit})
			}
			c.CacheTunes = append(c.CacheTunes, tune)
		}
	}
	if n := d.NUMATune; n != nil {
		c.NUMATune = &NUMATune{}
		if m := n.Memory; m != nil {
			c.NUMATune.Mode, c.NUMATune.Nodeset, c.NUMATune.Placement = m.Mode, m.Nodeset, m.Placement
		}
		for _, mn := range n.MemNodes {
			c.NUMATune.MemNodes = append(c.NUMATune.MemNodes, MemNode{Cell: int(mn.CellID), Mode: mn.Mode, Nodeset: mn.Nodeset})
		}
	}
	if r := d.Resource; r != nil && r.Partition != "" {
		c.Partition = r.Partition
	}
	if d.CPU != nil && d.CPU.Topology != nil {
		t := d.CPU.Topology
		c.Topology = Topology{Sockets: t.Sockets, Dies: t.Dies, Cores: t.Cores, Threads: t.Threads}
	}
	return c, nil
}

// parseLibvirtCPUSet reads libvirt's cpuset syntax: a cpu list that may also
// exclude CPUs with '^' ("0-7,^3").
func parseLibvirtCPUSet(s string) (cpuset.Set, error) {
	var plus, minus []string
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if p, ok := strings.CutPrefix(part, "^"); ok {
			minus = append(minus, p)
			continue
		}
		plus = append(plus, part)
	}
	set, err := cpuset.Parse(strings.Join(plus, ","))
	if err != nil {
		return set, err
	}
	if len(minus) > 0 {
		ex, err := cpuset.Parse(strings.Join(minus, ","))
		if err != nil {
			return set, err
		}
		set = set.Difference(ex)
	}
	if set.IsEmpty() {
		return set, errors.New("no CPUs")
	}
	return set, nil
}

// VCPUCPUs is where vCPU i may run as configured: its <vcpupin>, else
// <vcpu cpuset>, else the empty set (anywhere).
func (c *DomainConfig) VCPUCPUs(i int) cpuset.Set {
	if s, ok := c.VCPUPins[i]; ok {
		return s
	}
	return c.VCPUCPUSet
}

// PinnedCPUs is the union of the CPUs the domain's threads are confined to
// (vCPUs, emulator, iothreads), and whether all of them are confined: a
// domain with one unpinned vCPU may run anywhere its cgroup allows.
func (c *DomainConfig) PinnedCPUs() (cpuset.Set, bool) {
	var all cpuset.Set
	for i := range c.VCPUs {
		s := c.VCPUCPUs(i)
		if s.IsEmpty() {
			return cpuset.Set{}, false
		}
		all = all.Union(s)
	}
	emu := c.EmulatorPin
	if emu.IsEmpty() {
		emu = c.VCPUCPUSet
	}
	if emu.IsEmpty() {
		return cpuset.Set{}, false
	}
	all = all.Union(emu)
	for _, id := range slices.Sorted(maps.Keys(c.IOThreadPins)) {
		all = all.Union(c.IOThreadPins[id])
	}
	return all, true
}
