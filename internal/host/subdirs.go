package host

import (
	"bytes"
	"encoding/binary"
	"io/fs"
	"slices"

	"golang.org/x/sys/unix"
)

// SubDirs lists the names of a host directory's subdirectories, sorted. It is
// ReadDir for walking a cgroup tree: a cgroup directory holds dozens of
// control files and few or no subdirectories, and SubDirs reads the entries
// with getdents64 straight from the kernel's buffer, allocating only the
// names it returns (ReadDir allocates an entry per file and sorts them all).
// buf is scratch space for the kernel's entries, reused between calls (nil:
// SubDirs allocates one). Symbolic links are not subdirectories, as with
// ReadDir's IsDir.
func (h *Host) SubDirs(p string, buf []byte) ([]string, error) {
	h.note(recDir, p)
	fd, err := h.openFD(p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: h.Path(p), Err: err}
	}
	defer unix.Close(fd)
	if len(buf) < 1024 {
		buf = make([]byte, 8192)
	}
	var out []string
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "readdir", Path: h.Path(p), Err: err}
		}
		if n <= 0 {
			break
		}
		out, err = appendDirs(fd, buf[:n], out)
		if err != nil {
			return nil, &fs.PathError{Op: "readdir", Path: h.Path(p), Err: err}
		}
	}
	slices.Sort(out)
	return out, nil
}

// appendDirs appends the directory names among linux_dirent64 records:
// d_ino (8 bytes), d_off (8), d_reclen (2), d_type (1), then the name,
// NUL-terminated within the record.
func appendDirs(dirfd int, b []byte, out []string) ([]string, error) {
	const nameOff = 19
	for len(b) >= nameOff {
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < nameOff || reclen > len(b) {
			return out, unix.EIO // a record the kernel cannot have written
		}
		typ := b[18]
		name := b[nameOff:reclen]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		b = b[reclen:]
		switch string(name) {
		case ".", "..", KeepName:
			continue
		}
		if typ == unix.DT_UNKNOWN {
			// File systems without d_type (rare; never kernfs or tmpfs).
			var st unix.Stat_t
			if err := unix.Fstatat(dirfd, string(name), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				continue // removed meanwhile
			}
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				typ = unix.DT_DIR
			}
		}
		if typ == unix.DT_DIR {
			out = append(out, string(name))
		}
	}
	return out, nil
}
