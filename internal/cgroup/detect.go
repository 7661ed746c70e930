// Package cgroup knows where the host's cgroup hierarchies are and what each
// can do. On v1 every controller is its own mount (cpu and cpuacct often
// together); on v2 there is one unified mount; "hybrid" hosts (systemd's
// default for years, and this project's dev machines) have v1 controllers
// plus a controller-less cgroup2 mount at /sys/fs/cgroup/unified that still
// provides PSI and cpu.stat per cgroup.
package cgroup

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

// Mode is the cgroup layout of a host.
type Mode string

// The three layouts doctor reports.
const (
	ModeV1     Mode = "v1"
	ModeHybrid Mode = "hybrid"
	ModeV2     Mode = "v2"
	ModeNone   Mode = "none"
)

// Layout is where the cgroup hierarchies are mounted.
type Layout struct {
	Mode Mode `json:"mode"`
	// V1 maps each v1 controller (cpu, cpuacct, cpuset, memory, perf_event, …)
	// to its mount point.
	V1 map[string]string `json:"v1,omitempty"`
	// V2 is the cgroup2 mount point, "" when there is none.
	V2 string `json:"v2_mount,omitempty"`
	// V2Controllers are the controllers enabled at the cgroup2 root
	// (empty on hybrid hosts: the controllers are bound to v1).
	V2Controllers []string `json:"v2_controllers"`
	// Evidence names what the layout was read from.
	Evidence string `json:"evidence"`
}

// v1Controllers are the controller names a v1 mount may carry in its
// superblock options; anything else there (rw, name=systemd, nsroot=…) is not one.
var v1Controllers = []string{"blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "hugetlb", "memory", "misc", "net_cls", "net_prio", "perf_event", "pids", "rdma"}

// Detect reads the cgroup layout from the host's mount table, falling back
// to the conventional paths under /sys/fs/cgroup when mountinfo is unreadable
// (a captured tree from an older crosstalk, or a restricted container).
func Detect(h *host.Host) (Layout, error) {
	mounts, src, err := h.Mounts()
	if len(mounts) > 0 {
		l := fromMounts(mounts)
		if len(l.V1) > 0 || l.V2 != "" {
			l.Evidence = src
			finish(h, &l)
			return l, nil
		}
	}
	why := "no cgroup mounts in " + src
	if err != nil {
		why = err.Error()
	}
	l := fromPaths(h)
	finish(h, &l)
	if l.Mode == ModeNone {
		return l, fmt.Errorf("cgroup: %s, and no cgroup filesystem under %s", why, h.Path("/sys/fs/cgroup"))
	}
	l.Evidence = "layout of /sys/fs/cgroup (" + why + ")"
	return l, nil
}

func fromMounts(mounts []host.Mount) Layout {
	l := Layout{V1: map[string]string{}}
	for _, m := range mounts {
		switch m.FSType {
		case "cgroup2":
			if l.V2 == "" || m.MountPoint == "/sys/fs/cgroup" {
				l.V2 = m.MountPoint
			}
		case "cgroup":
			for _, c := range v1Controllers {
				if m.HasOption(c) {
					if _, seen := l.V1[c]; !seen {
						l.V1[c] = m.MountPoint
					}
				}
			}
		}
	}
	return l
}

func fromPaths(h *host.Host) Layout {
	l := Layout{V1: map[string]string{}}
	switch {
	case h.Exists("/sys/fs/cgroup/cgroup.controllers"):
		l.V2 = "/sys/fs/cgroup"
	case h.Exists("/sys/fs/cgroup/unified/cgroup.controllers"):
		l.V2 = "/sys/fs/cgroup/unified"
	}
	ents, _ := h.ReadDir("/sys/fs/cgroup")
	for _, e := range ents {
		if !e.IsDir() || e.Name() == "unified" {
			continue
		}
		dir := path.Join("/sys/fs/cgroup", e.Name())
		if !h.Exists(dir + "/cgroup.procs") {
			continue
		}
		// A co-mounted directory is named after all its controllers ("cpu,cpuacct").
		for _, c := range strings.Split(e.Name(), ",") {
			if slices.Contains(v1Controllers, c) {
				l.V1[c] = dir
			}
		}
	}
	return l
}

func finish(h *host.Host, l *Layout) {
	switch {
	case len(l.V1) > 0 && l.V2 != "":
		l.Mode = ModeHybrid
	case len(l.V1) > 0:
		l.Mode = ModeV1
	case l.V2 != "":
		l.Mode = ModeV2
	default:
		l.Mode = ModeNone
	}
	if len(l.V1) == 0 {
		l.V1 = nil
	}
	l.V2Controllers = []string{}
	if l.V2 != "" {
		if s, err := h.ReadString(path.Join(l.V2, "cgroup.controllers")); err == nil {
			l.V2Controllers = strings.Fields(s)
		}
	}
}

// HasV2Controller reports whether the cgroup2 root offers a controller.
func (l Layout) HasV2Controller(c string) bool { return slices.Contains(l.V2Controllers, c) }

// CPUControl says which hierarchy crosstalk throttles CPU through: "v2" when
// the unified hierarchy has the cpu controller, "v1" when a v1 cpu mount
// exists, "" when neither does.
func (l Layout) CPUControl() string {
	switch {
	case l.V2 != "" && l.HasV2Controller("cpu"):
		return "v2"
	case l.V1["cpu"] != "":
		return "v1"
	}
	return ""
}

// Controllers lists the usable controllers across hierarchies, sorted, each
// once (for display).
func (l Layout) Controllers() []string {
	out := slices.AppendSeq(slices.Clone(l.V2Controllers), maps.Keys(l.V1))
	slices.Sort(out)
	return slices.Compact(out)
}
