package libvirt

import (
	"path"
	"strconv"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/systemdunit"
)

// A domain's cgroup is named after its machine name, which libvirt builds
// in virDomainDriverGenerateMachineName (src/hypervisor/domain_driver.c):
// "<driver>-<id>-<name>", the name reduced to hostname characters and the
// whole cut at 64 bytes (an embedded driver adds "embed-<8 hex>-" before the
// ID). Without systemd the cgroup is "<partition>/<machine>.libvirt-<driver>"
// (virCgroupNewDomainPartition); with systemd-machined it is the scope
// "machine-<escaped machine>.scope". Older libvirt used the bare domain name.
//
// Matching a cgroup to a domain needs both the ID and the name: two libvirt
// daemons on one host (a system one and a session or test one) each have a
// domain 1.

// MachineRef is what a cgroup name says about the domain inside it.
type MachineRef struct {
	Driver string // "qemu", "ch"
	// ID is the domain ID when the name carries one (-1: it does not).
	ID int
	// Name is the machine name's name part: the domain name as libvirt
	// sanitised it (possibly truncated), or the bare domain name.
	Name string
}

// ParseMachineCgroup reads a domain cgroup path (or its last component):
// "/machine/qemu-3-web.libvirt-qemu", "/machine.slice/machine-qemu\x2d3\x2dweb.scope".
func ParseMachineCgroup(cgroupPath string) (MachineRef, bool) {
	base := path.Base(cgroupPath)
	if m, ok := strings.CutSuffix(base, ".scope"); ok {
		m, ok = strings.CutPrefix(m, "machine-")
		if !ok {
			return MachineRef{}, false
		}
		return parseMachineName(systemdunit.Unescape(m))
	}
	for _, driver := range []string{"qemu", "ch"} {
		m, ok := strings.CutSuffix(base, ".libvirt-"+driver)
		if !ok {
			continue
		}
		if b, ok := strings.CutPrefix(m, "_"); ok && b != "" {
			m = b // virCgroupPartitionEscape
		}
		if ref, ok := parseMachineName(m); ok && ref.Driver == driver {
			return ref, true
		}
		if m == "" {
			return MachineRef{}, false
		}
		return MachineRef{Driver: driver, ID: -1, Name: m}, true // older libvirt: the bare name
	}
	return MachineRef{}, false
}

// parseMachineName splits "qemu-3-web" (or "qemu-embed-0123abcd-3-web").
func parseMachineName(m string) (MachineRef, bool) {
	for _, driver := range []string{"qemu", "ch"} {
		rest, ok := strings.CutPrefix(m, driver+"-")
		if !ok {
			continue
		}
		if r, ok := strings.CutPrefix(rest, "embed-"); ok && len(r) > 9 && r[8] == '-' {
			rest = r[9:]
		}
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i == 0 || i >= len(rest) || rest[i] != '-' || rest[i+1:] == "" {
			return MachineRef{}, false
		}
		id, err := strconv.Atoi(rest[:i])
		if err != nil {
			return MachineRef{}, false
		}
		return MachineRef{Driver: driver, ID: id, Name: rest[i+1:]}, true
	}
	return MachineRef{}, false
}

// MachineName is the machine name a privileged (system) libvirt daemon gives
// domain id called name: "qemu-3-web". It follows
// virDomainMachineNameAppendValid: only letters, digits, '-' and '.' are
// kept, runs of '-'/'.' collapse to their first, none leads or trails, and
// the whole stops growing at 64 bytes.
func MachineName(driver string, id int, name string) string {
	var b strings.Builder
	b.WriteString(driver + "-" + strconv.Itoa(id) + "-")
	skip := true
	for i := 0; i < len(name); i++ {
		if b.Len() >= 64 {
			break
		}
		c := name[i]
		if c == '.' || c == '-' {
			if !skip {
				b.WriteByte(c)
				skip = true
			}
			continue
		}
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			continue
		}
		b.WriteByte(c)
		skip = false
	}
	return strings.TrimRight(b.String(), "-.")
}

// Matches says whether a cgroup's MachineRef names the domain d.
func (r MachineRef) Matches(d Domain) bool {
	if r.ID < 0 {
		return r.Name == d.Name
	}
	if r.ID != d.ID {
		return false
	}
	want := MachineName(r.Driver, d.ID, d.Name)
	got := r.Driver + "-" + strconv.Itoa(r.ID) + "-" + r.Name
	return got == want
}
