// Package resctrl reads and writes the kernel's resource-control filesystem
// (Documentation/arch/x86/resctrl.rst): L3/L2 cache allocation (CAT), memory
// bandwidth allocation (MBA) and monitoring (CMT/MBM), on Intel RDT and AMD
// PQoS alike.
//
// It talks to the filesystem directly through host.Host rather than through
// goresctrl: goresctrl keeps package-global state and assumes the real /sys,
// while crosstalk must work under any root (a DaemonSet's /host, captured trees,
// the simulator's fake tree) and must coexist with groups others created.
package resctrl

import (
	"fmt"
	"math/bits"
	"path"
	"strconv"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

// DefaultMount is where resctrl is conventionally mounted.
const DefaultMount = "/sys/fs/resctrl"

// CacheAlloc describes one cache-allocation resource (info/L3, info/L2, or
// their CODE/DATA halves under CDP).
type CacheAlloc struct {
	Resource      string `json:"resource"` // L3, L2, L3CODE, …
	NumClosids    int    `json:"num_closids"`
	CBMMask       uint64 `json:"cbm_mask"`
	Ways          int    `json:"ways"` // bits in cbm_mask
	MinCBMBits    int    `json:"min_cbm_bits"`
	ShareableBits uint64 `json:"shareable_bits"`
	// SparseMasks: the CPU accepts non-contiguous masks (Intel, 6.8+ kernels).
	SparseMasks bool `json:"sparse_masks"`
}

// MemBW describes memory-bandwidth allocation (info/MB).
type MemBW struct {
	NumClosids   int    `json:"num_closids"`
	MinBandwidth int    `json:"min_bandwidth"`
	Granularity  int    `json:"bandwidth_gran"`
	DelayLinear  bool   `json:"delay_linear"`
	ThrottleMode string `json:"thread_throttle_mode,omitempty"`
	// Units of the schemata MB values: "percent" (Intel), "MBps" (Intel with
	// the mba_MBps mount option), or "1/8GBps" (AMD: absolute, 2048 = unlimited).
	Units string `json:"units"`
	Max   int    `json:"max"` // the unthrottled value in those units
}

// Monitoring describes resctrl monitoring (info/L3_MON).
type Monitoring struct {
	NumRMIDs              int      `json:"num_rmids"`
	Features              []string `json:"features"`
	MaxThresholdOccupancy int64    `json:"max_threshold_occupancy,omitempty"`
}

// Has reports whether a monitoring feature (llc_occupancy, mbm_total_bytes,
// mbm_local_bytes) is offered.
func (m *Monitoring) Has(f string) bool {
	if m == nil {
		return false
	}
	for _, x := range m.Features {
		if x == f {
			return true
		}
	}
	return false
}

// Info is what a mounted resctrl offers.
type Info struct {
	Mount string      `json:"mount"`
	L3    *CacheAlloc `json:"l3_cat"`
	L2    *CacheAlloc `json:"l2_cat"`
	CDP   bool        `json:"cdp"` // L3 split into code and data
	MB    *MemBW      `json:"mba_detail"`
	Mon   *Monitoring `json:"monitoring"`
	Root  Schemata    `json:"-"`
	// Groups are the control groups that exist besides the root: ours and
	// anyone else's (libvirt cachetune, pqos, other agents). Never clobber them.
	Groups []string `json:"groups"`
	// Warnings lists files that were missing or garbled.
	Warnings []string `json:"warnings,omitempty"`
}

// MountPoint finds where resctrl is mounted and with which options.
func MountPoint(h *host.Host) (mount string, opts []string, ok bool) {
	mounts, _, _ := h.Mounts()
	for _, m := range mounts {
		if m.FSType == "resctrl" {
			return m.MountPoint, append(append([]string{}, m.Options...), m.SuperOpts...), true
		}
	}
	// Without a readable mount table, the info directory is proof enough.
	if h.Exists(DefaultMount + "/info") {
		return DefaultMount, nil, true
	}
	return "", nil, false
}

// ReadInfo reads the info directory and root group of a mounted resctrl.
// amd selects AMD's absolute MBA units.
func ReadInfo(h *host.Host, mount string, opts []string, amd bool) Info {
	in := Info{Mount: mount, Groups: []string{}}
	warn := func(format string, a ...any) { in.Warnings = append(in.Warnings, fmt.Sprintf(format, a...)) }
	info := path.Join(mount, "info")
	if !h.Exists(info) {
		warn("%s missing: resctrl mounted but no info directory", h.Path(info))
		return in
	}
	for _, res := range []string{"L3", "L3CODE", "L3DATA", "L2", "L2CODE", "L2DATA"} {
		dir := path.Join(info, res)
		if !h.Exists(dir) {
			continue
		}
		ca, err := readCacheAlloc(h, dir, res)
		if err != nil {
			warn("%v", err)
			continue
		}
		switch res {
		case "L3":
			in.L3 = ca
		case "L3CODE":
			in.CDP = true
			if in.L3 == nil {
				in.L3 = ca // ways and closids are the same for both halves
			}
		case "L2":
			in.L2 = ca
		case "L2CODE":
			if in.L2 == nil {
				in.L2 = ca
			}
		}
	}
	if dir := path.Join(info, "MB"); h.Exists(dir) {
		mb, err := readMemBW(h, dir, opts, amd)
		if err != nil {
			warn("%v", err)
		} else {
			in.MB = mb
		}
	}
	if dir := path.Join(info, "L3_MON"); h.Exists(dir) {
		mon := &Monitoring{}
		if n, err := h.ReadInt(dir + "/num_rmids"); err == nil {
			mon.NumRMIDs = int(n)
		} else {
			warn("%v", err)
		}
		if s, err := h.ReadString(dir + "/mon_features"); err == nil {
			mon.Features = strings.Fields(s)
		} else {
			warn("%v", err)
		}
		mon.MaxThresholdOccupancy, _ = h.ReadInt(dir + "/max_threshold_occupancy")
		in.Mon = mon
	}
	if s, err := h.ReadString(path.Join(mount, "schemata")); err == nil {
		if in.Root, err = ParseSchemata(s); err != nil {
			warn("root schemata: %v", err)
		}
	} else {
		warn("%v", err)
	}
	ents, _ := h.ReadDir(mount)
	for _, e := range ents {
		switch e.Name() {
		case "info", "mon_groups", "mon_data":
			continue
		}
		if e.IsDir() {
			in.Groups = append(in.Groups, e.Name())
		}
	}
	return in
}

func readCacheAlloc(h *host.Host, dir, res string) (*CacheAlloc, error) {
	ca := &CacheAlloc{Resource: res}
	mask, err := h.ReadString(dir + "/cbm_mask")
	if err != nil {
		return nil, err
	}
	if ca.CBMMask, err = strconv.ParseUint(mask, 16, 64); err != nil || ca.CBMMask == 0 {
		return nil, fmt.Errorf("%s: cbm_mask %q is not a non-zero hex mask", h.Path(dir), mask)
	}
	ca.Ways = bits.OnesCount64(ca.CBMMask)
	if n, err := h.ReadInt(dir + "/num_closids"); err == nil && n > 0 {
		ca.NumClosids = int(n)
	} else {
		return nil, fmt.Errorf("%s: num_closids unreadable or zero", h.Path(dir))
	}
	if n, err := h.ReadInt(dir + "/min_cbm_bits"); err == nil {
		ca.MinCBMBits = int(n)
	}
	if s, err := h.ReadString(dir + "/shareable_bits"); err == nil {
		ca.ShareableBits, _ = strconv.ParseUint(s, 16, 64)
	}
	if s, err := h.ReadString(dir + "/sparse_masks"); err == nil {
		ca.SparseMasks = s == "1"
	}
	return ca, nil
}

func readMemBW(h *host.Host, dir string, opts []string, amd bool) (*MemBW, error) {
	mb := &MemBW{Units: "percent", Max: 100}
	for _, o := range opts {
		if o == "mba_MBps" {
			mb.Units, mb.Max = "MBps", 1<<32-1 // the kernel's MBA_MAX_MBPS (U32_MAX)
		}
	}
	if amd {
		mb.Units, mb.Max = "1/8GBps", 2048 // MAX_MBA_BW_AMD
	}
	n, err := h.ReadInt(dir + "/num_closids")
	if err != nil {
		return nil, err
	}
	mb.NumClosids = int(n)
	if n, err := h.ReadInt(dir + "/min_bandwidth"); err == nil {
		mb.MinBandwidth = int(n)
	}
	if n, err := h.ReadInt(dir + "/bandwidth_gran"); err == nil {
		mb.Granularity = int(n)
	}
	if s, err := h.ReadString(dir + "/delay_linear"); err == nil {
		mb.DelayLinear = s == "1"
	}
	mb.ThrottleMode, _ = h.ReadString(dir + "/thread_throttle_mode")
	return mb, nil
}

// CPUSupport lists the /proc/cpuinfo flags that show resctrl could work on
// this CPU even when it is not mounted.
func CPUSupport(hasFlag func(string) bool) []string {
	var out []string
	for _, f := range []string{"rdt_a", "cat_l3", "cat_l2", "cdp_l3", "mba", "cqm_llc", "cqm_occup_llc", "cqm_mbm_total", "cqm_mbm_local"} {
		if hasFlag(f) {
			out = append(out, f)
		}
	}
	return out
}

// UnavailableError says why resctrl cannot be used on this host, in the
// words doctor uses.
type UnavailableError struct{ Reason string }

func (e *UnavailableError) Error() string { return "resctrl unavailable: " + e.Reason }

// Open finds the mounted resctrl and reads what it offers, for the sensor
// and the actuators. cpuFlags and amd describe the CPU (from /proc/cpuinfo)
// so that "not mounted" can say whether mounting would help.
func Open(h *host.Host, hasFlag func(string) bool, amd bool) (Info, error) {
	mount, opts, ok := MountPoint(h)
	if !ok {
		support := CPUSupport(hasFlag)
		if len(support) > 0 {
			return Info{}, &UnavailableError{fmt.Sprintf("not mounted, but the CPU supports it (%s): mount -t resctrl resctrl %s", strings.Join(support, " "), DefaultMount)}
		}
		return Info{}, &UnavailableError{"not mounted and the CPU shows no RDT/PQoS flags: no cache or bandwidth monitoring or isolation (the canary probe and CPU-quota throttling still work)"}
	}
	in := ReadInfo(h, mount, opts, amd)
	if in.L3 == nil && in.MB == nil && in.Mon == nil {
		return in, &UnavailableError{fmt.Sprintf("mounted at %s but offers neither allocation nor monitoring (%s)", mount, strings.Join(in.Warnings, "; "))}
	}
	return in, nil
}
