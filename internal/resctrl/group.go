package resctrl

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

// OwnedPrefix starts the name of every group crosstalk creates, so an
// operator (and crosstalk after a restart) can tell them from groups libvirt
// (cachetune), pqos or other agents made, which crosstalk only ever reads.
const OwnedPrefix = "crosstalk-"

// IsOwned reports whether a group name is one crosstalk creates.
func IsOwned(name string) bool { return strings.HasPrefix(name, OwnedPrefix) }

// GroupName is the name of crosstalk's group of a kind ("class" for control
// groups, "mon" for monitoring groups) for a tenant: the prefix, the kind, a
// readable part of the tenant's name and a hash of its ID (tenant IDs are
// cgroup paths, which neither fit nor are allowed in a directory name).
func GroupName(kind, tenantID, tenantName string) string {
	sum := sha256.Sum256([]byte(tenantID))
	var b strings.Builder
	for _, r := range tenantName {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 32 {
			break
		}
	}
	readable := strings.Trim(b.String(), "._")
	if readable == "" {
		readable = "tenant"
	}
	return OwnedPrefix + kind + "-" + readable + "-" + hex.EncodeToString(sum[:4])
}

// Group is a resctrl group: a control group (CTRL_MON; Ctrl "" is the
// default group, the mount itself) or, when Mon is set, a monitoring group
// in that control group's mon_groups directory.
type Group struct {
	Mount string
	Ctrl  string
	Mon   string
}

// CtrlGroup is the control group name under mount ("" for the default group).
func CtrlGroup(mount, name string) Group { return Group{Mount: mount, Ctrl: name} }

// MonGroup is the monitoring group name in control group ctrl.
func MonGroup(mount, ctrl, name string) Group { return Group{Mount: mount, Ctrl: ctrl, Mon: name} }

// Path is the group's directory.
func (g Group) Path() string {
	p := path.Join(g.Mount, g.Ctrl)
	if g.Mon != "" {
		p = path.Join(p, "mon_groups", g.Mon)
	}
	return p
}

// IsDefault reports whether g is the default (root) control group.
func (g Group) IsDefault() bool { return g.Ctrl == "" && g.Mon == "" }

func (g Group) String() string {
	switch {
	case g.IsDefault():
		return "default group"
	case g.Mon == "":
		return "control group " + g.Ctrl
	case g.Ctrl == "":
		return "monitoring group " + g.Mon
	}
	return "monitoring group " + g.Ctrl + "/" + g.Mon
}

// NoSpaceError says a group could not be made because the hardware ran out
// of class-of-service IDs or monitoring IDs (mkdir's ENOSPC), or because
// every free RMID is still in limbo, tagged to lines a removed group left in
// the cache (EBUSY; it clears as those lines are evicted).
type NoSpaceError struct {
	Group    Group
	Resource string // "CLOSID", "RMID", or "" when the kernel did not say
	Limbo    bool
	Status   string // info/last_cmd_status
	Err      error
}

func (e *NoSpaceError) Error() string {
	what := "no free CLOSID or RMID"
	switch {
	case e.Limbo:
		what = "every free RMID is still in limbo (recently freed, still tagging cache lines)"
	case e.Resource == "CLOSID":
		what = "out of CLOSIDs (classes of service)"
	case e.Resource == "RMID":
		what = "out of RMIDs (monitoring IDs)"
	}
	return fmt.Sprintf("resctrl: cannot create %s: %s", e.Group, what)
}

func (e *NoSpaceError) Unwrap() error { return e.Err }

// LastCmdStatus reads info/last_cmd_status, the kernel's explanation of the
// last failed command ("" when unreadable or "ok").
func LastCmdStatus(h *host.Host, mount string) string {
	s, err := h.ReadString(path.Join(mount, "info", "last_cmd_status"))
	if err != nil || s == "ok" {
		return ""
	}
	return strings.ReplaceAll(s, "\n", "; ")
}

func withStatus(h *host.Host, mount string, err error) error {
	if s := LastCmdStatus(h, mount); s != "" {
		return fmt.Errorf("%w (kernel: %s)", err, s)
	}
	return err
}

// Create makes the group's directory. ENOSPC and EBUSY come back as a
// *NoSpaceError; a group that already exists as fs.ErrExist.
func Create(h *host.Host, g Group) error {
	if g.IsDefault() {
		return errors.New("resctrl: the default group always exists")
	}
	err := h.Mkdir(g.Path(), 0o755)
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EBUSY) {
		status := LastCmdStatus(h, g.Mount)
		e := &NoSpaceError{Group: g, Status: status, Err: err, Limbo: errors.Is(err, unix.EBUSY)}
		switch {
		case strings.Contains(status, "CLOSID"):
			e.Resource = "CLOSID"
		case strings.Contains(status, "RMID") || g.Mon != "" || e.Limbo:
			e.Resource = "RMID"
		}
		return e
	}
	return withStatus(h, g.Mount, fmt.Errorf("resctrl: create %s: %w", g, err))
}

// Remove removes the group; the kernel gives its tasks and CPUs back to the
// parent (the default group for a control group). A group already gone is
// not an error.
func Remove(h *host.Host, g Group) error {
	if g.IsDefault() {
		return errors.New("resctrl: the default group cannot be removed")
	}
	if err := h.Remove(g.Path()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return withStatus(h, g.Mount, fmt.Errorf("resctrl: remove %s: %w", g, err))
	}
	return nil
}

// Exists reports whether the group's directory is there.
func Exists(h *host.Host, g Group) bool { return h.Exists(path.Join(g.Path(), "tasks")) }

// ReadTasks lists the thread IDs in the group, sorted. A control group's
// list includes the threads of its monitoring groups.
func ReadTasks(h *host.Host, g Group) ([]int, error) {
	b, err := h.ReadFile(path.Join(g.Path(), "tasks"))
	if err != nil {
		return nil, fmt.Errorf("resctrl: tasks of %s: %w", g, err)
	}
	return parseTasks(string(b), g)
}

func parseTasks(s string, g Group) ([]int, error) {
	var out []int
	for _, f := range strings.Fields(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("resctrl: tasks of %s: bad thread id %q", g, f)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// MoveTasks writes the threads into the group's tasks file one per write
// (every kernel takes one ID per write; lists came only in 6.2). Moving a
// thread into a control group takes it out of its old control group and of
// any monitoring group; moving it into a monitoring group needs it to be in
// that group's control group already. Threads that exited meanwhile
// (ESRCH) are returned in gone, not as errors; the first other error stops
// the moves.
func MoveTasks(h *host.Host, g Group, tids []int) (moved, gone []int, err error) {
	p := path.Join(g.Path(), "tasks")
	for _, tid := range tids {
		werr := h.WriteFile(p, []byte(strconv.Itoa(tid)+"\n"))
		switch {
		case werr == nil:
			moved = append(moved, tid)
		case errors.Is(werr, unix.ESRCH):
			gone = append(gone, tid)
		default:
			return moved, gone, withStatus(h, g.Mount, fmt.Errorf("resctrl: move thread %d to %s: %w", tid, g, werr))
		}
	}
	return moved, gone, nil
}

// ReadSchemata reads a control group's schemata.
func ReadSchemata(h *host.Host, g Group) (Schemata, error) {
	s, err := h.ReadString(path.Join(g.Path(), "schemata"))
	if err != nil {
		return nil, fmt.Errorf("resctrl: schemata of %s: %w", g, err)
	}
	return ParseSchemata(s)
}

// WriteLine writes one schemata line, and only it: the kernel merges what is
// written line by line and domain by domain, so the group's other resources
// and domains keep their values. The write ends in the newline every kernel
// requires.
func WriteLine(h *host.Host, g Group, l Line) error {
	if g.Mon != "" {
		return fmt.Errorf("resctrl: %s has no schemata", g)
	}
	if err := h.WriteFile(path.Join(g.Path(), "schemata"), []byte(l.String()+"\n")); err != nil {
		return withStatus(h, g.Mount, fmt.Errorf("resctrl: write %q to %s: %w", l.String(), g, err))
	}
	return nil
}

// CtrlGroups lists the control groups besides the default one.
func CtrlGroups(h *host.Host, mount string) ([]string, error) {
	ents, err := h.ReadDir(mount)
	if err != nil {
		return nil, fmt.Errorf("resctrl: list %s: %w", h.Path(mount), err)
	}
	var out []string
	for _, e := range ents {
		switch e.Name() {
		case "info", "mon_groups", "mon_data":
			continue
		}
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// MonGroups lists the monitoring groups of a control group ("" = default).
func MonGroups(h *host.Host, mount, ctrl string) ([]string, error) {
	ents, err := h.ReadDir(path.Join(mount, ctrl, "mon_groups"))
	if err != nil {
		return nil, fmt.Errorf("resctrl: monitoring groups of %s: %w", CtrlGroup(mount, ctrl), err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}
