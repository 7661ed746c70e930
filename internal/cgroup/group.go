package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

// Group is one cgroup as it appears in every hierarchy crosstalk uses: the
// v1 cpu, cpuacct and cpuset mounts and the cgroup2 mount, whichever exist.
// On hybrid hosts the cgroup2 side has no controllers but still gives PSI and
// cpu.stat per cgroup, so it is kept too.
type Group struct {
	h *host.Host
	l Layout
	// Name is the cgroup's path below each hierarchy's root, "/a/b".
	Name string
}

// controllersWanted are the v1 controllers a tenant group lives in.
var controllersWanted = []string{"cpu", "cpuacct", "cpuset"}

// Open returns the group at name without creating anything.
func Open(h *host.Host, l Layout, name string) *Group {
	return &Group{h: h, l: l, Name: path.Clean("/" + name)}
}

// dirs are the group's directories, one per distinct mount, v1 first.
func (g *Group) dirs() []string {
	var out []string
	for _, c := range controllersWanted {
		if m, ok := g.l.V1[c]; ok {
			d := path.Join(m, g.Name)
			if !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	}
	if g.l.V2 != "" {
		out = append(out, path.Join(g.l.V2, g.Name))
	}
	return out
}

// Dirs lists the group's directories on the host (for messages and state files).
func (g *Group) Dirs() []string { return g.dirs() }

// Create makes the group in every hierarchy (parents included) and confines it
// to cpus. On v1, cpuset.cpus and cpuset.mems of each new level are copied
// from its parent first: the kernel creates them empty and refuses tasks then.
// On pure v2, the cpu and cpuset controllers are enabled down the path.
func Create(h *host.Host, l Layout, name string, cpus cpuset.Set) (*Group, error) {
	g := Open(h, l, name)
	if l.Mode == ModeNone {
		return nil, fmt.Errorf("cgroup %s: no cgroup hierarchy on this host", name)
	}
	parts := strings.Split(strings.TrimPrefix(g.Name, "/"), "/")
	for _, mount := range g.mounts() {
		cur := mount
		for _, p := range parts {
			parent := cur
			cur = path.Join(cur, p)
			if mount == l.V2 && l.Mode == ModeV2 {
				// Controllers must be enabled in the parent before the child can use them.
				for _, c := range []string{"cpu", "cpuset"} {
					if l.HasV2Controller(c) {
						if err := enableV2(h, parent, c); err != nil {
							return nil, err
						}
					}
				}
			}
			if err := h.Mkdir(cur, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return nil, fmt.Errorf("create cgroup: %w", err)
			}
			if l.V1["cpuset"] == mount {
				if err := inheritCpuset(h, parent, cur); err != nil {
					return nil, err
				}
			}
		}
	}
	if !cpus.IsEmpty() {
		if err := g.SetCPUs(cpus); err != nil {
			return nil, err
		}
	}
	return g, nil
}

func (g *Group) mounts() []string {
	var out []string
	for _, c := range controllersWanted {
		if m, ok := g.l.V1[c]; ok && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	if g.l.V2 != "" {
		out = append(out, g.l.V2)
	}
	return out
}

func enableV2(h *host.Host, dir, controller string) error {
	cur, err := h.ReadString(path.Join(dir, "cgroup.subtree_control"))
	if err == nil && slices.Contains(strings.Fields(cur), controller) {
		return nil
	}
	if err := h.WriteFile(path.Join(dir, "cgroup.subtree_control"), []byte("+"+controller)); err != nil {
		return fmt.Errorf("enable %s controller in %s: %w", controller, dir, err)
	}
	return nil
}

func inheritCpuset(h *host.Host, parent, child string) error {
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		cur, _ := h.ReadString(path.Join(child, f))
		if cur != "" {
			continue
		}
		v, err := h.ReadString(path.Join(parent, f))
		if err != nil {
			return fmt.Errorf("cgroup %s: %w", child, err)
		}
		if err := h.WriteFile(path.Join(child, f), []byte(v)); err != nil {
			return fmt.Errorf("cgroup %s: %w", child, err)
		}
	}
	return nil
}

// SetCPUs confines the group to cpus (v1 cpuset, or v2 cpuset.cpus when the
// cpuset controller is on the unified hierarchy).
func (g *Group) SetCPUs(cpus cpuset.Set) error {
	var dir string
	switch {
	case g.l.V1["cpuset"] != "":
		dir = path.Join(g.l.V1["cpuset"], g.Name)
	case g.l.HasV2Controller("cpuset"):
		dir = path.Join(g.l.V2, g.Name)
	default:
		return fmt.Errorf("cgroup %s: no cpuset controller to pin CPUs %s", g.Name, cpus)
	}
	if err := g.h.WriteFile(path.Join(dir, "cpuset.cpus"), []byte(cpus.String())); err != nil {
		return fmt.Errorf("pin cgroup %s to CPUs %s: %w", g.Name, cpus, err)
	}
	return nil
}

// AddProc moves a process (all its threads) into the group in every hierarchy.
func (g *Group) AddProc(pid int) error {
	for _, d := range g.dirs() {
		if err := g.h.WriteFile(path.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid))); err != nil {
			return fmt.Errorf("move pid %d into %s: %w", pid, d, err)
		}
	}
	return nil
}

// Procs lists the processes in the group (from the first hierarchy that answers).
func (g *Group) Procs() ([]int, error) {
	var firstErr error
	for _, d := range g.dirs() {
		s, err := g.h.ReadString(path.Join(d, "cgroup.procs"))
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		var pids []int
		for _, f := range strings.Fields(s) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
		return pids, nil
	}
	return nil, firstErr
}

// Kill SIGKILLs every process in the group. It uses cgroup.kill where the
// kernel has it (5.14+, v2), which also catches processes forking meanwhile.
func (g *Group) Kill() error {
	if g.l.V2 != "" {
		if err := g.h.WriteFile(path.Join(g.l.V2, g.Name, "cgroup.kill"), []byte("1")); err == nil {
			return nil
		}
	}
	pids, err := g.Procs()
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range pids {
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill %d: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// Remove deletes the group's directories (the kernel requires them to be
// empty of processes and child groups). Missing directories are fine.
func (g *Group) Remove() error {
	var errs []error
	for _, d := range g.dirs() {
		if err := g.h.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RemoveTree removes the group and every group below it, deepest first,
// killing processes still inside. It is the lab's and the agent's cleanup.
func RemoveTree(h *host.Host, l Layout, name string, wait time.Duration) error {
	var errs []error
	g := Open(h, l, name)
	var children []string
	for _, d := range g.dirs() {
		ents, err := h.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.IsDir() && !slices.Contains(children, e.Name()) {
				children = append(children, e.Name())
			}
		}
	}
	for _, c := range children {
		if err := RemoveTree(h, l, path.Join(name, c), wait); err != nil {
			errs = append(errs, err)
		}
	}
	if pids, _ := g.Procs(); len(pids) > 0 {
		g.Kill()
		deadline := time.Now().Add(wait)
		for time.Now().Before(deadline) {
			if pids, _ := g.Procs(); len(pids) == 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := g.Remove(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Exists reports whether the group exists in at least one hierarchy.
func (g *Group) Exists() bool {
	for _, d := range g.dirs() {
		if g.h.Exists(d) {
			return true
		}
	}
	return false
}

// PIDAlive reports whether a process exists (for telling stale groups apart).
func PIDAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
