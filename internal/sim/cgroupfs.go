package sim

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

// CgroupFS emulates the kernel side of a cgroup2 mount in a plain
// directory tree (a host.Kernel for the paths below its mount):
//
//   - mkdir populates the new cgroup's interface files (cgroup.*, cpu.*,
//     cpuset.*), the cpu and cpuset controllers being enabled everywhere;
//   - a write to cgroup.procs or cgroup.threads moves one task (out of
//     whichever cgroup held it) instead of replacing the file;
//   - cpu.max is parsed and normalised as the kernel does ("max 100000",
//     "50000 100000"), rejecting what it rejects (EINVAL);
//   - cpuset.cpus sets the cgroup's and its descendants' effective CPUs;
//   - cgroup.subtree_control takes "+ctrl -ctrl" lists;
//   - read-only files (cpu.stat, cgroup.controllers, cgroup.events, the
//     effective cpusets) refuse writes with EACCES;
//   - rmdir fails with EBUSY while the cgroup has tasks or children, and
//     otherwise removes the directory with its files.
//
// The counters (cpu.stat, cpu.pressure) are the simulator's to write.
type CgroupFS struct {
	mount  string // host path of the mount, e.g. /sys/fs/cgroup
	online cpuset.Set

	mu      sync.Mutex
	where   map[int]string        // task → cgroup (host path)
	tasks   map[string][]int      // cgroup → its tasks, sorted
	cpus    map[string]cpuset.Set // configured cpuset.cpus (empty: inherit)
	eff     map[string]cpuset.Set // effective CPUs
	subtree map[string]map[string]bool
}

// NewCgroupFS emulates the cgroup2 mount at mount on a host with the given
// online CPUs.
func NewCgroupFS(mount string, online cpuset.Set) *CgroupFS {
	c := &CgroupFS{mount: path.Clean(mount), online: online, where: map[int]string{}, tasks: map[string][]int{},
		cpus: map[string]cpuset.Set{}, eff: map[string]cpuset.Set{}, subtree: map[string]map[string]bool{}}
	c.eff[c.mount] = online
	return c
}

// Owns reports whether p is at or below the mount.
func (c *CgroupFS) Owns(p string) bool {
	return p == c.mount || strings.HasPrefix(p, c.mount+"/")
}

func pathErr(op string, h *host.Host, p string, err error) error {
	return &fs.PathError{Op: op, Path: h.Path(p), Err: err}
}

// Mkdir populates a new cgroup.
func (c *CgroupFS) Mkdir(h *host.Host, p string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	parent := path.Dir(p)
	eff := c.eff[parent]
	if eff.IsEmpty() {
		eff = c.online
	}
	c.eff[p] = eff
	files := map[string]string{
		"cgroup.procs":           "",
		"cgroup.threads":         "",
		"cgroup.controllers":     cgroupControllers + "\n",
		"cgroup.subtree_control": "\n",
		"cgroup.type":            "domain\n",
		"cgroup.events":          "populated 0\nfrozen 0\n",
		"cpu.max":                "max 100000\n",
		"cpu.max.burst":          "0\n",
		"cpu.weight":             "100\n",
		"cpu.stat":               cpuStat(0, 0, 0, 0),
		"cpu.pressure":           pressure(0),
		"cpuset.cpus":            "\n",
		"cpuset.cpus.effective":  eff.String() + "\n",
		"cpuset.mems":            "\n",
		"cpuset.mems.effective":  "0\n",
	}
	for name, content := range files {
		if err := os.WriteFile(h.Path(path.Join(p, name)), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

var cgroupReadOnly = []string{"cpu.stat", "cgroup.controllers", "cgroup.events", "cpuset.cpus.effective", "cpuset.mems.effective", "cgroup.type"}

// Write handles writes to the interface files with kernel semantics.
func (c *CgroupFS) Write(h *host.Host, p string, data []byte) (bool, error) {
	dir, name := path.Split(p)
	dir = path.Clean(dir)
	if slices.Contains(cgroupReadOnly, name) {
		return true, pathErr("open", h, p, syscall.EACCES)
	}
	if !h.Exists(p) {
		return false, nil // let the open fail as it would
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := strings.TrimSpace(string(data))
	switch name {
	case "cgroup.procs", "cgroup.threads":
		tid, err := strconv.Atoi(s)
		if err != nil || tid <= 0 {
			return true, pathErr("write", h, p, syscall.EINVAL)
		}
		return true, c.moveLocked(h, tid, dir)
	case "cpu.max":
		v, err := normaliseCPUMax(s, h, p)
		if err != nil {
			return true, pathErr("write", h, p, syscall.EINVAL)
		}
		return true, os.WriteFile(h.Path(p), []byte(v+"\n"), 0o644)
	case "cpuset.cpus":
		set, err := cpuset.Parse(s)
		if err != nil {
			return true, pathErr("write", h, p, syscall.EINVAL)
		}
		if !set.IsEmpty() && !set.IsSubsetOf(c.online) {
			return true, pathErr("write", h, p, syscall.EINVAL)
		}
		c.cpus[dir] = set
		if err := os.WriteFile(h.Path(p), []byte(set.String()+"\n"), 0o644); err != nil {
			return true, err
		}
		return true, c.propagateLocked(h, dir)
	case "cgroup.subtree_control":
		cur := c.subtree[dir]
		if cur == nil {
			cur = map[string]bool{}
			c.subtree[dir] = cur
		}
		for _, tok := range strings.Fields(s) {
			ctrl := tok[1:]
			if len(tok) < 2 || (tok[0] != '+' && tok[0] != '-') || !slices.Contains(strings.Fields(cgroupControllers), ctrl) {
				return true, pathErr("write", h, p, syscall.EINVAL)
			}
			cur[ctrl] = tok[0] == '+'
		}
		var on []string
		for _, ctrl := range strings.Fields(cgroupControllers) {
			if cur[ctrl] {
				on = append(on, ctrl)
			}
		}
		return true, os.WriteFile(h.Path(p), []byte(strings.Join(on, " ")+"\n"), 0o644)
	}
	return false, nil
}

// normaliseCPUMax parses "QUOTA [PERIOD]" as cpu_max_write does: QUOTA is
// "max" or microseconds ≥ 1000, PERIOD 1000-1000000 (kept when omitted).
func normaliseCPUMax(s string, h *host.Host, p string) (string, error) {
	f := strings.Fields(s)
	if len(f) == 0 || len(f) > 2 {
		return "", errors.New("want QUOTA [PERIOD]")
	}
	period := int64(100000)
	if cur, err := os.ReadFile(h.Path(p)); err == nil {
		if cf := strings.Fields(string(cur)); len(cf) == 2 {
			if n, err := strconv.ParseInt(cf[1], 10, 64); err == nil {
				period = n
			}
		}
	}
	if len(f) == 2 {
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || n < 1000 || n > 1000000 {
			return "", errors.New("bad period")
		}
		period = n
	}
	if f[0] == "max" {
		return fmt.Sprintf("max %d", period), nil
	}
	q, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || q < 1000 {
		return "", errors.New("bad quota")
	}
	return fmt.Sprintf("%d %d", q, period), nil
}

// Remove is rmdir of a cgroup: EBUSY while it has tasks or children.
func (c *CgroupFS) Remove(h *host.Host, p string) (bool, error) {
	if p == c.mount {
		return true, pathErr("remove", h, p, syscall.EBUSY)
	}
	st, err := os.Stat(h.Path(p))
	if err != nil {
		return false, nil
	}
	if !st.IsDir() {
		return true, pathErr("remove", h, p, syscall.EPERM)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.tasks[p]) > 0 {
		return true, pathErr("remove", h, p, syscall.EBUSY)
	}
	ents, err := os.ReadDir(h.Path(p))
	if err != nil {
		return true, err
	}
	for _, e := range ents {
		if e.IsDir() {
			return true, pathErr("remove", h, p, syscall.EBUSY)
		}
	}
	delete(c.tasks, p)
	delete(c.cpus, p)
	delete(c.eff, p)
	delete(c.subtree, p)
	return true, os.RemoveAll(h.Path(p))
}

// Exit removes tasks that ended (a tenant going away), as the kernel does
// when a thread exits.
func (c *CgroupFS) Exit(h *host.Host, tids ...int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := map[string]bool{}
	for _, tid := range tids {
		if g, ok := c.where[tid]; ok {
			c.tasks[g] = slices.DeleteFunc(c.tasks[g], func(x int) bool { return x == tid })
			delete(c.where, tid)
			changed[g] = true
		}
	}
	for g := range changed {
		if err := c.writeTasksLocked(h, g); err != nil {
			return err
		}
	}
	return nil
}

// TasksOf lists a cgroup's tasks.
func (c *CgroupFS) TasksOf(p string) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.tasks[path.Clean(p)])
}

func (c *CgroupFS) moveLocked(h *host.Host, tid int, to string) error {
	if from, ok := c.where[tid]; ok {
		if from == to {
			return nil
		}
		c.tasks[from] = slices.DeleteFunc(c.tasks[from], func(x int) bool { return x == tid })
		if err := c.writeTasksLocked(h, from); err != nil {
			return err
		}
	}
	c.where[tid] = to
	ts := append(c.tasks[to], tid)
	slices.Sort(ts)
	c.tasks[to] = ts
	return c.writeTasksLocked(h, to)
}

func (c *CgroupFS) writeTasksLocked(h *host.Host, g string) error {
	var b strings.Builder
	for _, t := range c.tasks[g] {
		b.WriteString(strconv.Itoa(t))
		b.WriteByte('\n')
	}
	for _, f := range []string{"cgroup.procs", "cgroup.threads"} {
		if err := os.WriteFile(h.Path(path.Join(g, f)), []byte(b.String()), 0o644); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
	}
	return nil
}

// propagateLocked recomputes the effective CPUs of dir and its descendants.
func (c *CgroupFS) propagateLocked(h *host.Host, dir string) error {
	parentEff := c.eff[path.Dir(dir)]
	if dir == c.mount || parentEff.IsEmpty() {
		parentEff = c.online
	}
	eff := parentEff
	if set := c.cpus[dir]; !set.IsEmpty() {
		if x := set.Intersect(parentEff); !x.IsEmpty() {
			eff = x
		}
	}
	c.eff[dir] = eff
	if err := os.WriteFile(h.Path(path.Join(dir, "cpuset.cpus.effective")), []byte(eff.String()+"\n"), 0o644); err != nil {
		return err
	}
	ents, err := os.ReadDir(h.Path(dir))
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := c.propagateLocked(h, path.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// cpuStat renders a cgroup2 cpu.stat.
func cpuStat(usageUS, periods, throttledPeriods, throttledUS int64) string {
	user := usageUS * 9 / 10
	return fmt.Sprintf("usage_usec %d\nuser_usec %d\nsystem_usec %d\nnr_periods %d\nnr_throttled %d\nthrottled_usec %d\nnr_bursts 0\nburst_usec 0\n",
		usageUS, user, usageUS-user, periods, throttledPeriods, throttledUS)
}

// pressure renders a PSI file whose "some" line has the given total (µs).
func pressure(someUS int64) string {
	return fmt.Sprintf("some avg10=0.00 avg60=0.00 avg300=0.00 total=%d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", someUS)
}
