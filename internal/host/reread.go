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
// on every read from offset 0.
//
// It holds at most Max descriptors, so descriptors cannot grow with the
// tenant count beyond that bound. When the files read in turn outnumber the
// bound, it keeps the ones it holds and reads the others through a descriptor
// opened for that read, rather than evicting on every miss (a least-recently-
// used cache read in a cycle larger than itself misses every time); a held
// file not read for a long while (4 × Max reads: its tenant is gone) gives its
// place to the next new one. Every step is O(1). Safe for concurrent use.
type Rereader struct {
	h   *Host
	max int

	mu    sync.Mutex
	fds   map[string]*rrEntry
	lru   rrEntry // sentinel of the recency list: lru.next is the least recently read
	clock uint64
	buf   []byte
}

type rrEntry struct {
	path       string
	fd         int
	used       uint64
	prev, next *rrEntry
}

// NewRereader keeps up to max descriptors open (max <= 0: 256).
func (h *Host) NewRereader(max int) *Rereader {
	if max <= 0 {
		max = 256
	}
	r := &Rereader{h: h, max: max, fds: map[string]*rrEntry{}, buf: make([]byte, 4096)}
	r.lru.prev, r.lru.next = &r.lru, &r.lru
	return r
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
			if old := r.lru.next; r.clock-old.used > 4*uint64(r.max) {
				r.dropLocked(old)
			} else {
				// Full of files still read: read this one and let it go.
				s, err := r.preadLocked(fd)
				unix.Close(fd)
				if err != nil {
					return "", readErr(r.h, p, err)
				}
				return trimSpace(s), nil
			}
		}
		e = &rrEntry{path: p, fd: fd}
		r.fds[p] = e
	} else {
		e.prev.next, e.next.prev = e.next, e.prev // unlink; relinked as most recent below
	}
	e.used = r.clock
	e.prev, e.next = r.lru.prev, &r.lru
	r.lru.prev.next = e
	r.lru.prev = e
	s, err := r.preadLocked(e.fd)
	if err != nil {
		// A removed cgroup answers ENODEV on its open files: drop the
		// descriptor, and report it as gone.
		r.dropLocked(e)
		return "", readErr(r.h, p, err)
	}
	return trimSpace(s), nil
}

// ReadOnce reads a file without keeping it open (a thread's
// /proc/TID/schedstat, read now and then), in one read into the Rereader's
// buffer: open, pread, close, where Host.ReadString also reads to end of
// file and allocates a buffer.
func (r *Rereader) ReadOnce(p string) (string, error) {
	fd, err := r.h.openFD(p, unix.O_RDONLY)
	if err != nil {
		return "", &fs.PathError{Op: "open", Path: r.h.Path(p), Err: err}
	}
	defer unix.Close(fd)
	r.mu.Lock()
	defer r.mu.Unlock()
	s, err := r.preadLocked(fd)
	if err != nil {
		return "", readErr(r.h, p, err)
	}
	return trimSpace(s), nil
}

func readErr(h *Host, p string, err error) error {
	if errors.Is(err, unix.ENODEV) {
		err = fs.ErrNotExist
	}
	return &fs.PathError{Op: "read", Path: h.Path(p), Err: err}
}

// dropLocked closes a held descriptor and forgets it.
func (r *Rereader) dropLocked(e *rrEntry) {
	unix.Close(e.fd)
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	delete(r.fds, e.path)
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

// Forget closes the descriptors of files under a directory prefix (a tenant
// that went away).
func (r *Rereader) Forget(prefix string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, e := range r.fds {
		if len(p) >= len(prefix) && p[:len(prefix)] == prefix {
			r.dropLocked(e)
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
	for _, e := range r.fds {
		r.dropLocked(e)
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
