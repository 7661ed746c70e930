// Package plan places VMs' vCPUs on a host so that their virtual topology
// matches the physical one, writes the libvirt XML that says so, and checks
// the virtual topology of any domain — planned here or already running —
// against the host (NUMA span, SMT siblings, L3 sharing, the glibc
// non-temporal copy threshold, guest physical address bits).
//
// It follows Faggioli, "Virtual Topology for VMs: Friend or Foe?" (KVM Forum
// 2020): a virtual topology only helps when virtual and physical sharing agree,
// which takes pinning — 1-to-1 for dedicated partitioning, or at least to one
// shared-cache domain per VM.
//
// The package is logic: it reads nothing itself except through the
// host.Host a caller passes (ReadHost, StatusDir), so trees, captures and fakes
// stand in for the machine.
package plan

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/crosstalk-project/crosstalk/internal/yamlfile"
)

// Policy is how a VM's vCPUs are pinned.
type Policy string

// The placement policies.
const (
	// OneToOne gives each vCPU a physical CPU of its own, shared with no
	// other vCPU of any VM: the talk's static, dedicated partitioning.
	OneToOne Policy = "1to1"
	// PerNode pins all of a VM's vCPUs to all CPUs of one NUMA node (or of a
	// few, one virtual cell each); VMs on a node share its CPUs.
	PerNode Policy = "per-node"
	// PerLLC pins all of a VM's vCPUs to the CPUs of one L3 domain (or of a
	// few, one virtual die each): the talk's "stick to a shared cache domain".
	PerLLC Policy = "per-llc"
	// Shared lets vCPUs run on every CPU not dedicated or reserved.
	Shared Policy = "shared"
)

// Policies lists the policies in the order they are placed.
var Policies = []Policy{OneToOne, PerLLC, PerNode, Shared}

// CacheMode is what the guest is told about the L3.
type CacheMode string

// Cache modes. Auto picks whichever of passthrough and emulate puts the
// guest's glibc copy threshold nearer the host's.
const (
	CacheAuto        CacheMode = ""
	CachePassthrough CacheMode = "passthrough"
	CacheEmulate     CacheMode = "emulate"
)

// PhysBits is the guest's physical address width request: "auto" (the
// default: QEMU's unless the guest's memory needs the host's), "host",
// "default" (QEMU's, whatever it is), or a number of bits.
type PhysBits struct {
	Mode string // "auto", "host", "default", "bits"
	Bits int
}

// UnmarshalYAML accepts a keyword or an integer.
func (p *PhysBits) UnmarshalYAML(n *yaml.Node) error {
	switch v := strings.TrimSpace(n.Value); v {
	case "", "auto":
		*p = PhysBits{Mode: "auto"}
	case "host", "default":
		*p = PhysBits{Mode: v}
	default:
		b, err := strconv.Atoi(v)
		if err != nil || b < 32 || b > 52 {
			return fmt.Errorf("line %d: phys_bits %q: want auto, host, default or a number of bits 32-52", n.Line, v)
		}
		*p = PhysBits{Mode: "bits", Bits: b}
	}
	return nil
}

// String renders the request as the YAML would.
func (p PhysBits) String() string {
	if p.Mode == "bits" {
		return strconv.Itoa(p.Bits)
	}
	if p.Mode == "" {
		return "auto"
	}
	return p.Mode
}

// Size is an amount of memory in KiB, written in YAML as "4GiB", "512MiB",
// "2G" (binary units throughout) or a bare number of MiB.
type Size uint64

var sizeRE = regexp.MustCompile(`^([0-9]+)\s*([KMGT]?)(i?B)?$`)

// ParseSize reads a memory size; a bare number is MiB, as in virt-install.
func ParseSize(s string) (Size, error) {
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("memory %q: want a size such as 4GiB, 512MiB or 2T", s)
	}
	n, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("memory %q: %w", s, err)
	}
	shift := map[string]uint{"K": 0, "": 10, "M": 10, "G": 20, "T": 30}[m[2]]
	if m[2] == "" && m[3] != "" {
		return 0, fmt.Errorf("memory %q: give a unit (KiB, MiB, GiB, TiB) or a bare number of MiB", s)
	}
	if n == 0 || n > (1<<50)>>shift {
		return 0, fmt.Errorf("memory %q: out of range", s)
	}
	return Size(n << shift), nil
}

// UnmarshalYAML reads a size.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*s = v
	return nil
}

// String renders the size in the largest binary unit that divides it.
func (s Size) String() string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{30, "TiB"}, {20, "GiB"}, {10, "MiB"}} {
		if uint64(s)%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", uint64(s)>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%dKiB", uint64(s))
}

// MarshalText keeps sizes readable in JSON.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// VMSpec is one VM to place.
type VMSpec struct {
	Name     string    `yaml:"name" json:"name"`
	VCPUs    int       `yaml:"vcpus" json:"vcpus"`
	Memory   Size      `yaml:"memory" json:"memory"`
	Policy   Policy    `yaml:"policy" json:"policy"`
	SMT      bool      `yaml:"smt" json:"smt"`
	Cache    CacheMode `yaml:"cache" json:"cache,omitempty"`
	PhysBits PhysBits  `yaml:"phys_bits" json:"-"`
	// Line is where the VM starts in its file, for error messages.
	Line int `yaml:"-" json:"-"`
}

// Spec is a plan request: the VMs and the CPUs kept for the host.
type Spec struct {
	// Reserve lists host CPUs no vCPU may use (housekeeping, emulator
	// threads); the --reserve flag overrides it.
	Reserve string   `yaml:"reserve" json:"reserve,omitempty"`
	VMs     []VMSpec `yaml:"vms" json:"vms"`
}

var vmNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$`)

// MaxVCPUs bounds a VM's vCPU count (QEMU's q35 limit is 288 before 7.x and
// 1024 after; no host here has more CPUs than that).
const MaxVCPUs = 1024

// Parse reads a plan spec. Unknown keys are rejected and every error names
// its line.
func Parse(data []byte, source string) (*Spec, error) {
	var s Spec
	if err := yamlfile.DecodeStrict(data, source, `empty spec (want a "vms:" list)`, &s); err != nil {
		return nil, err
	}
	for i, line := range yamlfile.ItemLines(data, "vms") {
		if i < len(s.VMs) {
			s.VMs[i].Line = line
		}
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return &s, nil
}

// Validate checks a spec and fills defaults (phys_bits auto).
func (s *Spec) Validate() error {
	if len(s.VMs) == 0 {
		return errors.New("vms: at least one VM is needed")
	}
	seen := map[string]bool{}
	for i := range s.VMs {
		v := &s.VMs[i]
		if err := v.validate(); err != nil {
			if v.Line > 0 {
				return fmt.Errorf("line %d: vm %q: %w", v.Line, v.Name, err)
			}
			return fmt.Errorf("vm %d %q: %w", i+1, v.Name, err)
		}
		if seen[v.Name] {
			return fmt.Errorf("line %d: vm name %q used twice", v.Line, v.Name)
		}
		seen[v.Name] = true
	}
	return nil
}

func (v *VMSpec) validate() error {
	if !vmNameRE.MatchString(v.Name) {
		return errors.New("name: 1-64 letters, digits, '.', '_', '+' or '-' (libvirt domain names)")
	}
	if v.VCPUs < 1 || v.VCPUs > MaxVCPUs {
		return fmt.Errorf("vcpus: %d outside 1-%d", v.VCPUs, MaxVCPUs)
	}
	if v.Memory == 0 {
		return errors.New("memory: required (e.g. 4GiB)")
	}
	if v.Memory < 16<<10 {
		return fmt.Errorf("memory: %s is less than the 16MiB any guest needs", v.Memory)
	}
	switch v.Policy {
	case OneToOne, PerNode, PerLLC, Shared:
	case "":
		return errors.New("policy: required: 1to1, per-node, per-llc or shared")
	default:
		return fmt.Errorf("policy %q: want 1to1, per-node, per-llc or shared", v.Policy)
	}
	switch v.Cache {
	case CacheAuto, CachePassthrough, CacheEmulate:
	default:
		return fmt.Errorf("cache %q: want passthrough or emulate (or leave it out to choose by the glibc threshold)", v.Cache)
	}
	if v.PhysBits.Mode == "" {
		v.PhysBits.Mode = "auto"
	}
	return nil
}
