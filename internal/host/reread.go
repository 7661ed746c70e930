package host

import (
	"errors"
	"io/fs"
	"sync"

	"golang.org/x/sys/unix"
)

// Rereader reads the same small files over and over (every tenant's cpu.stat
// and cpu.pressure, every interval) through descriptors it keeps open,
// re-reading each with pread at offset 0 — one syscall instead of open, read
// and close, as top does with /proc/stat. Kernfs regenerates a file's content
// on every read from offset 0. It holds at most Max descriptors, dropping the
// least recently used, so descriptors cannot grow with the tenant count
// beyond that bound. Safe for concurrent use.
type Rereader struct {
	h   *Host
	max int

	mu    sync.Mutex
	fds   map[string]*rrEntry
	clock uint64
	buf   []byte
}

type rrEntry struct {
	fd   int
	used uint64
}

// NewRereader keeps up to max descriptors open (max <= 0: 256).
func (h *Host) NewRereader(max int) *Rereader {
	if max <= 0 {
		max = 256
	}
	return &Rereader{h: h, max: max, fds: map[string]*rrEntry{}, buf: make([]byte, 4096)}
}

// ReadString reads a host file, trimmed like Host.ReadString.
func (r *Rereader) ReadString(p string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clock++
	e := r.fds[p]
	if e == nil {
		fd, err := r.h.openFD(p, unix.O_RDONLY)
		if err != nil {
			return "", &fs.PathError{Op: "open", Path: r.h.Path(p), Err: err}
		}
		if len(r.fds) >= r.max {
			r.evictLocked()
		}
		e = &rrEntry{fd: fd}
		r.fds[p] = e
	}
	e.used = r.clock
	s, err := r.preadLocked(e.fd)
	if err != nil {
		// A removed cgroup answers ENODEV on its open files: drop the
		// descriptor, and report it as gone.
		unix.Close(e.fd)
		delete(r.fds, p)
		if errors.Is(err, unix.ENODEV) {
			err = fs.ErrNotExist
		}
		return "", &fs.PathError{Op: "read", Path: r.h.Path(p), Err: err}
	}
	return trimSpace(s), nil
}

func (r *Rereader) preadLocked(fd int) (string, error) {
	n, err := unix.Pread(fd, r.buf, 0)
	for err == unix.EINTR {
		n, err = unix.Pread(fd, r.buf, 0)
	}
	if err != nil {
		return "", err
	}
	if n < len(r.buf) {
		return string(r.buf[:n]), nil
	}
	// Larger than the buffer: read the whole file.
	out := append([]byte(nil), r.buf[:n]...)
	for off := int64(n); ; {
		m, err := unix.Pread(fd, r.buf, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", err
		}
		if m == 0 {
			return string(out), nil
		}
		out = append(out, r.buf[:m]...)
		off += int64(m)
	}
}

func (r *Rereader) evictLocked() {
	var oldest string
	var min uint64
	for p, e := range r.fds {
		if oldest == "" || e.used < min {
			oldest, min = p, e.used
		}
	}
	if e := r.fds[oldest]; e != nil {
		unix.Close(e.fd)
		delete(r.fds, oldest)
	}
}

// Forget closes the descriptors of files under a directory prefix (a tenant
// that went away).
func (r *Rereader) Forget(prefix string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, e := range r.fds {
		if len(p) >= len(prefix) && p[:len(prefix)] == prefix {
			unix.Close(e.fd)
			delete(r.fds, p)
		}
	}
}

// Open is the number of descriptors held.
func (r *Rereader) Open() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.fds)
}

// Close closes every descriptor.
func (r *Rereader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, e := range r.fds {
		unix.Close(e.fd)
		delete(r.fds, p)
	}
	return nil
}

func trimSpace(s string) string {
	i, j := 0, len(s)
	for i < j && isSpace(s[i]) {
		i++
	}
	for j > i && isSpace(s[j-1]) {
		j--
	}
	return s[i:j]
}
