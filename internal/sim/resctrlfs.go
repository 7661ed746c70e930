package sim

// The simulator's resctrl kernel side: deliberately minimal, and the only
// file that knows it. The hwcache work (issue #5a) brings a full resctrl
// emulation as a host.Kernel (CLOSID/RMID exhaustion, CDP, bit_usage,
// last_cmd_status, …); when it is merged, NewResctrlKernel is the one place
// to return it instead. The simulator itself reads resctrl only through
// the files (schemata, tasks) and writes only mon_data counters, so either
// kernel serves it.

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

// NewResctrlKernel returns the kernel emulation of the resctrl mount of m.
func NewResctrlKernel(m Machine) host.Kernel {
	return &minimalResctrl{m: m}
}

// minimalResctrl handles: mkdir of a control group (root level) or a
// monitoring group (mon_groups/NAME at the root or in a control group),
// populating tasks, cpus, cpus_list, mode, schemata (control groups: the
// default, all ways and 100%) and mon_data; writes to tasks (one task moved
// out of every other group of its kind); writes to schemata (lines merged
// per resource and domain; a CBM must be non-empty, contiguous and inside
// cbm_mask, else EINVAL); rmdir (its tasks go back to the parent). It does
// not enforce CLOSID or RMID limits.
type minimalResctrl struct {
	m  Machine
	mu sync.Mutex
}

func (r *minimalResctrl) Mkdir(h *host.Host, p string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rel := strings.TrimPrefix(p, resctrlRoot+"/")
	parts := strings.Split(rel, "/")
	mon := len(parts) >= 2 && parts[len(parts)-2] == "mon_groups"
	if !mon && len(parts) != 1 {
		os.Remove(h.Path(p))
		return pathErr("mkdir", h, p, syscall.EPERM)
	}
	files := map[string]string{"tasks": "", "cpus": cpuMask(nil, r.m.CPUs()) + "\n", "cpus_list": "\n"}
	if !mon {
		files["mode"] = "shareable\n"
		files["schemata"] = r.defaultSchemata()
		if err := os.MkdirAll(h.Path(p+"/mon_groups"), 0o755); err != nil {
			return err
		}
		files["mon_groups/"+host.KeepName] = ""
	}
	if on(r.m.Features.MBM) {
		for s := 0; s < r.m.Sockets; s++ {
			d := fmt.Sprintf("mon_data/mon_L3_%02d/", s)
			files[d+"llc_occupancy"] = "0\n"
			files[d+"mbm_total_bytes"] = "0\n"
			files[d+"mbm_local_bytes"] = "0\n"
		}
	}
	for name, content := range files {
		dst := h.Path(path.Join(p, name))
		if err := os.MkdirAll(path.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (r *minimalResctrl) defaultSchemata() string {
	var lines []string
	if on(r.m.Features.CAT) {
		lines = append(lines, "L3:"+domainList(r.m.Sockets, strconv.FormatUint(1<<uint(r.m.L3Ways)-1, 16)))
	}
	if on(r.m.Features.MBA) {
		v := "100"
		if cpuModels[r.m.CPU].vendor == "AuthenticAMD" {
			v = "2048"
		}
		lines = append(lines, "MB:"+domainList(r.m.Sockets, v))
	}
	return strings.Join(lines, "\n") + "\n"
}

func (r *minimalResctrl) Write(h *host.Host, p string, data []byte) (bool, error) {
	switch path.Base(p) {
	case "tasks":
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, f := range strings.FieldsFunc(string(data), func(c rune) bool { return c == ',' || c == '\n' || c == ' ' }) {
			tid, err := strconv.Atoi(f)
			if err != nil || tid <= 0 {
				return true, pathErr("write", h, p, syscall.EINVAL)
			}
			if err := r.moveLocked(h, tid, path.Dir(p)); err != nil {
				return true, err
			}
		}
		return true, nil
	case "schemata":
		r.mu.Lock()
		defer r.mu.Unlock()
		cur, err := os.ReadFile(h.Path(p))
		if err != nil {
			return false, nil
		}
		merged, err := r.mergeSchemata(string(cur), string(data))
		if err != nil {
			os.WriteFile(h.Path(resctrlRoot+"/info/last_cmd_status"), []byte(err.Error()+"\n"), 0o644)
			return true, pathErr("write", h, p, syscall.EINVAL)
		}
		os.WriteFile(h.Path(resctrlRoot+"/info/last_cmd_status"), []byte("ok\n"), 0o644)
		return true, os.WriteFile(h.Path(p), []byte(merged), 0o644)
	}
	return false, nil
}

// mergeSchemata applies "RES:dom=val;dom=val" lines to the current schemata.
func (r *minimalResctrl) mergeSchemata(cur, upd string) (string, error) {
	type line struct {
		res  string
		vals map[int]string
	}
	var lines []*line
	parse := func(s string, create bool) error {
		for _, l := range strings.Split(s, "\n") {
			l = strings.TrimSpace(l)
			if l == "" {
				continue
			}
			res, rest, ok := strings.Cut(l, ":")
			if !ok {
				return fmt.Errorf("Missing ':' in %q", l)
			}
			res = strings.TrimSpace(res)
			var ln *line
			for _, x := range lines {
				if x.res == res {
					ln = x
				}
			}
			if ln == nil {
				if !create {
					return fmt.Errorf("Unknown or unsupported resource name '%s'", res)
				}
				ln = &line{res: res, vals: map[int]string{}}
				lines = append(lines, ln)
			}
			for _, kv := range strings.Split(rest, ";") {
				k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
				d, err := strconv.Atoi(k)
				if !ok || err != nil || d < 0 || d >= r.m.Sockets {
					return fmt.Errorf("Unknown domain ID in %q", kv)
				}
				if !create {
					if err := r.checkValue(res, v); err != nil {
						return err
					}
				}
				ln.vals[d] = strings.TrimSpace(v)
			}
		}
		return nil
	}
	if err := parse(cur, true); err != nil {
		return "", err
	}
	if err := parse(upd, false); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, l := range lines {
		var parts []string
		var doms []int
		for d := range l.vals {
			doms = append(doms, d)
		}
		slices.Sort(doms)
		for _, d := range doms {
			parts = append(parts, fmt.Sprintf("%d=%s", d, l.vals[d]))
		}
		b.WriteString(l.res + ":" + strings.Join(parts, ";") + "\n")
	}
	return b.String(), nil
}

func (r *minimalResctrl) checkValue(res, v string) error {
	switch res {
	case "L3":
		m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		full := uint64(1)<<uint(r.m.L3Ways) - 1
		if err != nil || m == 0 || m&^full != 0 {
			return fmt.Errorf("Mask out of range %q", v)
		}
		// Contiguous: shifting out the trailing zeros leaves 2^n-1.
		for m&1 == 0 {
			m >>= 1
		}
		if m&(m+1) != 0 {
			return fmt.Errorf("Non-contiguous CBM %q", v)
		}
	case "MB":
		n, err := strconv.Atoi(strings.TrimSpace(v))
		hi := 100
		lo := 10
		if cpuModels[r.m.CPU].vendor == "AuthenticAMD" {
			hi, lo = 2048, 0
		}
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("MB value %q out of range %d-%d", v, lo, hi)
		}
	}
	return nil
}

// moveLocked puts tid in group g: out of every other control group (and
// their monitoring groups) for a control group; out of the sibling
// monitoring groups for a monitoring group.
func (r *minimalResctrl) moveLocked(h *host.Host, tid int, g string) error {
	mon := path.Base(path.Dir(g)) == "mon_groups"
	var groups []string
	if mon {
		parent := path.Dir(path.Dir(g))
		groups = r.monGroups(h, parent)
	} else {
		groups = append([]string{resctrlRoot}, r.ctrlGroups(h)...)
		for _, cg := range slices.Clone(groups) {
			groups = append(groups, r.monGroups(h, cg)...)
		}
	}
	for _, o := range groups {
		if o == g {
			continue
		}
		if err := editTasks(h, o, func(ts []int) []int { return slices.DeleteFunc(ts, func(x int) bool { return x == tid }) }); err != nil {
			return err
		}
	}
	return editTasks(h, g, func(ts []int) []int {
		if !slices.Contains(ts, tid) {
			ts = append(ts, tid)
		}
		return ts
	})
}

func (r *minimalResctrl) ctrlGroups(h *host.Host) []string {
	ents, _ := os.ReadDir(h.Path(resctrlRoot))
	var out []string
	for _, e := range ents {
		if e.IsDir() && e.Name() != "info" && e.Name() != "mon_groups" && e.Name() != "mon_data" {
			out = append(out, resctrlRoot+"/"+e.Name())
		}
	}
	return out
}

func (r *minimalResctrl) monGroups(h *host.Host, g string) []string {
	ents, _ := os.ReadDir(h.Path(g + "/mon_groups"))
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, g+"/mon_groups/"+e.Name())
		}
	}
	return out
}

func editTasks(h *host.Host, g string, f func([]int) []int) error {
	b, err := os.ReadFile(h.Path(g + "/tasks"))
	if err != nil {
		return nil
	}
	ts := parseTasks(string(b))
	ts = f(ts)
	var sb strings.Builder
	for _, t := range ts {
		sb.WriteString(strconv.Itoa(t) + "\n")
	}
	return os.WriteFile(h.Path(g+"/tasks"), []byte(sb.String()), 0o644)
}

func parseTasks(s string) []int {
	var out []int
	for _, f := range strings.Fields(s) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// Remove is rmdir of a group: its tasks return to the parent group.
func (r *minimalResctrl) Remove(h *host.Host, p string) (bool, error) {
	st, err := os.Stat(h.Path(p))
	if err != nil {
		return false, nil
	}
	if !st.IsDir() || p == resctrlRoot || strings.HasPrefix(p, resctrlRoot+"/info") {
		return true, &fs.PathError{Op: "remove", Path: h.Path(p), Err: syscall.EPERM}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b, _ := os.ReadFile(h.Path(p + "/tasks"))
	parent := resctrlRoot
	if path.Base(path.Dir(p)) == "mon_groups" {
		parent = path.Dir(path.Dir(p))
	}
	if ts := parseTasks(string(b)); len(ts) > 0 && parent == resctrlRoot && path.Base(path.Dir(p)) != "mon_groups" {
		// A control group's tasks go back to the default group.
		if err := editTasks(h, resctrlRoot, func(cur []int) []int { return append(cur, ts...) }); err != nil {
			return true, err
		}
	}
	return true, os.RemoveAll(h.Path(p))
}
