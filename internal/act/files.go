package act

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNotRegular says a path crosstalk keeps its own files at (lock, state,
// journal) is a symlink or something other than a regular file. Following
// a symlink planted there would have root write wherever it points.
var ErrNotRegular = errors.New("not a regular file")

// OpenNoFollow opens a file of crosstalk's own with O_NOFOLLOW and refuses
// anything but a regular file (a FIFO would block, a device would be
// written to).
func OpenNoFollow(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, perm)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%s: %w (a symlink)", path, ErrNotRegular)
		}
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, st.Mode().Type())
	}
	// O_NONBLOCK was only there so that opening a FIFO cannot hang; a
	// regular file ignores it.
	return f, nil
}

// ReadNoFollow reads a file of crosstalk's own through OpenNoFollow, at most
// max bytes (a larger file is an error, not a reason to run out of memory).
func ReadNoFollow(path string, max int64) ([]byte, error) {
	f, err := OpenNoFollow(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, max)
	}
	return b, nil
}
