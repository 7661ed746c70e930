// Package host is the one door through which crosstalk touches the machine it
// watches: every read or write of /proc, /sys, cgroupfs, resctrl, powercap,
// cpufreq and /dev/cpu/*/msr goes through a Host rooted at a directory.
//
// The root is "/" on a normal host, "/host" in a Kubernetes DaemonSet that
// mounts the node's filesystems there, and a captured tree under testdata/ in
// tests. Below a root other than "/", paths are resolved with openat2(2)
// RESOLVE_IN_ROOT, so absolute symlinks such as /var/run -> /run stay inside
// the root instead of escaping to the agent's own filesystem.
package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Host is a machine seen through a root directory. It is safe for concurrent use.
type Host struct {
	root   string
	rootFD int // open O_PATH fd of root; -1 when root is "/" or openat2 is unavailable
	rec    *Recorder
	kernel Kernel
	// live: a root other than "/" that holds this machine's own procfs
	// (a DaemonSet's /host, with host PID).
	live bool
}

// Kernel emulates, for a simulated host tree, what a pseudo-filesystem's
// kernel side does when a directory is made or removed or a file written:
// resctrl and cgroupfs populate a new group's files on mkdir, remove a
// group with its files on rmdir, and a write to "tasks" moves one task
// rather than replacing the file. Real hosts have none (the real kernel
// does it).
type Kernel interface {
	// Mkdir is called after directory p was created.
	Mkdir(h *Host, p string) error
	// Write is called before data is written to p; handled means the
	// kernel consumed the write and the file is not to be written.
	Write(h *Host, p string, data []byte) (handled bool, err error)
	// Remove is called before p is removed; handled means the kernel
	// removed it.
	Remove(h *Host, p string) (handled bool, err error)
}

// WithKernel sets a simulated kernel for a host tree (see Kernel).
func WithKernel(k Kernel) Option { return func(h *Host) { h.kernel = k } }

// Option configures Open.
type Option func(*Host)

// WithRecorder makes the Host note every path it reads, lists or checks, so
// `doctor --capture` can copy exactly the files the code used.
func WithRecorder(r *Recorder) Option { return func(h *Host) { h.rec = r } }

// Open returns a Host rooted at root, which must be an existing directory.
func Open(root string, opts ...Option) (*Host, error) {
	if root == "" {
		root = "/"
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("host root %q: %w", root, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("host root: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("host root %s: not a directory", abs)
	}
	h := &Host{root: abs, rootFD: -1}
	for _, o := range opts {
		o(h)
	}
	if abs != "/" {
		fd, err := unix.Open(abs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("host root %s: %w", abs, err)
		}
		// Probe openat2 once; kernels before 5.6 and some sandboxes lack it, and
		// then we fall back to plain joins (correct for trees without absolute symlinks).
		probe, err := unix.Openat2(fd, ".", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT})
		if err == nil {
			unix.Close(probe)
			h.rootFD = fd
		} else {
			unix.Close(fd)
		}
		h.live = holdsOwnProc(abs)
	}
	return h, nil
}

// holdsOwnProc reports whether root/proc is the procfs of this process's PID
// namespace — the node's /proc mounted at /host/proc in a DaemonSet with
// host PID — by its "self" link naming this process. A captured or
// reconstructed tree cannot do that.
func holdsOwnProc(root string) bool {
	target, err := os.Readlink(filepath.Join(root, "proc", "self"))
	return err == nil && target == strconv.Itoa(os.Getpid())
}

// Close releases the root directory handle.
func (h *Host) Close() error {
	if h.rootFD >= 0 {
		err := unix.Close(h.rootFD)
		h.rootFD = -1
		return err
	}
	return nil
}

// Root is the absolute root directory.
func (h *Host) Root() string { return h.root }

// IsLive reports whether the Host is the machine this process runs on, so
// that live-only probes (perf_event_open, euid) describe it: the root "/",
// or a root holding this machine's own /proc (a DaemonSet's --root /host).
func (h *Host) IsLive() bool { return h.root == "/" || h.live }

// Path maps a host path ("/sys/fs/resctrl") to where it is on this machine
// ("/host/sys/fs/resctrl"). Use it for messages; use the methods for access.
func (h *Host) Path(p string) string { return filepath.Join(h.root, clean(p)) }

func clean(p string) string { return path.Clean("/" + p) }

// rel is p relative to the root for openat2; "." for the root itself (the
// parent of a top-level entry).
func rel(p string) string {
	if r := strings.TrimPrefix(clean(p), "/"); r != "" {
		return r
	}
	return "."
}

func (h *Host) note(kind recordKind, p string) {
	if h.rec != nil {
		h.rec.add(kind, clean(p))
	}
}

// OpenFile opens a host path with os.OpenFile semantics, resolved inside the root.
func (h *Host) OpenFile(p string, flag int, perm os.FileMode) (*os.File, error) {
	if h.rootFD < 0 {
		return os.OpenFile(h.Path(p), flag, perm)
	}
	fd, err := unix.Openat2(h.rootFD, rel(p), &unix.OpenHow{
		Flags:   uint64(flag) | unix.O_CLOEXEC,
		Mode:    uint64(perm.Perm()),
		Resolve: unix.RESOLVE_IN_ROOT,
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: h.Path(p), Err: err}
	}
	return os.NewFile(uintptr(fd), h.Path(p)), nil
}

// ReadFile reads a whole host file.
func (h *Host) ReadFile(p string) ([]byte, error) {
	h.note(recFile, p)
	return h.readFile(p)
}

func (h *Host) readFile(p string) ([]byte, error) {
	// Raw open/read/close: the agent reads hundreds of small cgroupfs and
	// sysfs files each interval, and an *os.File costs extra syscalls and a
	// finalizer per file.
	fd, err := h.openFD(p, unix.O_RDONLY)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: h.Path(p), Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: h.Path(p), Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// openFD opens a host path and returns the raw descriptor, resolved inside the root.
func (h *Host) openFD(p string, flag int) (int, error) {
	for {
		var fd int
		var err error
		if h.rootFD < 0 {
			fd, err = unix.Open(h.Path(p), flag|unix.O_CLOEXEC, 0)
		} else {
			fd, err = unix.Openat2(h.rootFD, rel(p), &unix.OpenHow{
				Flags: uint64(flag) | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT})
		}
		if err == unix.EINTR {
			continue
		}
		return fd, err
	}
}

// ReadString reads a host file and trims surrounding white space, the usual
// shape of a sysfs or procfs value.
func (h *Host) ReadString(p string) (string, error) {
	b, err := h.ReadFile(p)
	return strings.TrimSpace(string(b)), err
}

// ReadInt reads a file holding one decimal integer.
func (h *Host) ReadInt(p string) (int64, error) {
	s, err := h.ReadString(p)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: not an integer: %q", h.Path(p), truncate(s, 40))
	}
	return n, nil
}

// ReadUint reads a file holding one unsigned decimal integer (counters such as
// energy_uj that may exceed int64 range on some firmware).
func (h *Host) ReadUint(p string) (uint64, error) {
	s, err := h.ReadString(p)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: not an unsigned integer: %q", h.Path(p), truncate(s, 40))
	}
	return n, nil
}

// ReadDir lists a host directory, sorted by name.
func (h *Host) ReadDir(p string) ([]fs.DirEntry, error) {
	h.note(recDir, p)
	return h.readDir(p)
}

func (h *Host) readDir(p string) ([]fs.DirEntry, error) {
	f, err := h.OpenFile(p, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: h.Path(p), Err: UnwrapPath(err)}
	}
	ents = slices.DeleteFunc(ents, func(e fs.DirEntry) bool { return e.Name() == KeepName })
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, nil
}

// Stat returns information about a host path, following symlinks inside the root.
func (h *Host) Stat(p string) (fs.FileInfo, error) {
	h.note(recStat, p)
	return h.stat(p)
}

func (h *Host) stat(p string) (fs.FileInfo, error) {
	if h.rootFD < 0 {
		return os.Stat(h.Path(p))
	}
	f, err := h.OpenFile(p, unix.O_PATH, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Stat()
}

// Exists reports whether a host path exists (file, directory, device or socket).
func (h *Host) Exists(p string) bool {
	_, err := h.Stat(p)
	return err == nil
}

// Glob returns the host paths matching pattern (path.Match syntax per
// component), sorted. Unreadable directories are skipped, like filepath.Glob.
func (h *Host) Glob(pattern string) ([]string, error) {
	parts := strings.Split(strings.TrimPrefix(clean(pattern), "/"), "/")
	for _, part := range parts {
		if _, err := path.Match(part, ""); err != nil {
			return nil, fmt.Errorf("glob %q: %w", pattern, err)
		}
	}
	matches := []string{"/"}
	for _, part := range parts {
		var next []string
		for _, dir := range matches {
			if !hasMeta(part) {
				p := path.Join(dir, part)
				if h.Exists(p) {
					next = append(next, p)
				}
				continue
			}
			ents, err := h.ReadDir(dir)
			if err != nil {
				continue
			}
			for _, e := range ents {
				if ok, _ := path.Match(part, e.Name()); ok {
					next = append(next, path.Join(dir, e.Name()))
				}
			}
		}
		matches = next
	}
	slices.Sort(matches)
	return matches, nil
}

func hasMeta(s string) bool { return strings.ContainsAny(s, `*?[\`) }

// WriteFile writes data to an existing host file, the way cgroupfs, sysfs and
// resctrl files must be written: one write(2) and no create. O_TRUNC is
// what `echo v > file` does too; kernfs ignores it, and it makes the same
// write correct on captured trees and the simulator's plain files.
func (h *Host) WriteFile(p string, data []byte) error {
	if h.kernel != nil {
		if handled, err := h.kernel.Write(h, clean(p), data); handled || err != nil {
			return err
		}
	}
	f, err := h.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr != nil {
		return &fs.PathError{Op: "write", Path: h.Path(p), Err: UnwrapPath(werr)}
	}
	if cerr != nil {
		return &fs.PathError{Op: "close", Path: h.Path(p), Err: UnwrapPath(cerr)}
	}
	return nil
}

// Mkdir creates a host directory (a cgroup or a resctrl group).
func (h *Host) Mkdir(p string, perm os.FileMode) error {
	if err := h.mkdir(p, perm); err != nil {
		return err
	}
	if h.kernel != nil {
		return h.kernel.Mkdir(h, clean(p))
	}
	return nil
}

func (h *Host) mkdir(p string, perm os.FileMode) error {
	if h.rootFD < 0 {
		return os.Mkdir(h.Path(p), perm)
	}
	parent, name := path.Split(clean(p))
	d, err := h.OpenFile(parent, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Mkdirat(int(d.Fd()), name, uint32(perm.Perm())); err != nil {
		return &fs.PathError{Op: "mkdir", Path: h.Path(p), Err: err}
	}
	return nil
}

// Remove removes an empty host directory or a file (rmdir of a cgroup or a
// resctrl group).
func (h *Host) Remove(p string) error {
	if h.kernel != nil {
		if handled, err := h.kernel.Remove(h, clean(p)); handled || err != nil {
			return err
		}
	}
	if h.rootFD < 0 {
		return os.Remove(h.Path(p))
	}
	parent, name := path.Split(clean(p))
	d, err := h.OpenFile(parent, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	err = unix.Unlinkat(int(d.Fd()), name, unix.AT_REMOVEDIR)
	if errors.Is(err, unix.ENOTDIR) {
		err = unix.Unlinkat(int(d.Fd()), name, 0)
	}
	if err != nil {
		return &fs.PathError{Op: "remove", Path: h.Path(p), Err: err}
	}
	return nil
}

// UnwrapPath is the error a path error wraps (its errno), for a message
// that names the path itself; any other error as it is.
func UnwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// recordKind says how a path was used, which decides how capture copies it.
type recordKind uint8

const (
	recFile recordKind = 1 << iota // read as a file: copy its contents
	recDir                         // listed: recreate the directory
	recStat                        // checked for existence: recreate an empty stand-in
)

// Recorder collects the host paths a Host touched. Safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	paths map[string]recordKind
}

func (r *Recorder) add(kind recordKind, p string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.paths == nil {
		r.paths = map[string]recordKind{}
	}
	r.paths[p] |= kind
}

// Touched lists the recorded paths, sorted, with how they were used.
func (r *Recorder) Touched() []Touch {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Touch, 0, len(r.paths))
	for p, k := range r.paths {
		out = append(out, Touch{Path: p, Read: k&recFile != 0, Listed: k&recDir != 0, Checked: k&recStat != 0})
	}
	slices.SortFunc(out, func(a, b Touch) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// Touch is one recorded path.
type Touch struct {
	Path    string
	Read    bool // its contents were read
	Listed  bool // it was listed as a directory
	Checked bool // its existence was checked
}
