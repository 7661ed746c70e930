package resctrlfs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

// CopyTree copies a host tree (a directory of plain files, such as
// testdata/hosts/intel-skx-2s) to dst, which must not exist or be empty:
// all of it, or with paths given (relative to the tree, such as
// "sys/fs/resctrl"), only those files and directories. Paths the tree lacks
// are skipped. Symlinks are not followed or copied: host trees hold none.
func CopyTree(dst, src string, paths ...string) error {
	if len(paths) == 0 {
		paths = []string{"."}
	}
	for _, p := range paths {
		if _, err := os.Lstat(filepath.Join(src, p)); os.IsNotExist(err) {
			continue
		}
		if err := copyTree(dst, src, p); err != nil {
			return err
		}
	}
	return nil
}

// ResctrlPaths are the parts of a host tree the emulation reads besides the
// topology: copying only these keeps a test's copy small (a full host tree
// is thousands of files).
var ResctrlPaths = []string{
	"sys/fs/resctrl", "proc/cpuinfo", "proc/1/mountinfo", "proc/self/mountinfo",
	"proc/sys/kernel/osrelease", "sys/devices/system/cpu/online", "sys/devices/system/cpu/possible",
}

func copyTree(dst, src, sub string) error {
	return filepath.WalkDir(filepath.Join(src, sub), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		out := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(out, 0o755)
		case d.Type().IsRegular():
			if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(out, b, 0o644)
		}
		return nil
	})
}

// OpenTree copies the resctrl parts of the host tree src (ResctrlPaths)
// and any extra paths to dst and opens the copy as a Host whose resctrl is
// emulated, mounted and ready; the CPU topology (cache sizes, online CPUs)
// is read from src itself unless opts.Topology is set. Close the Host when
// done.
func OpenTree(dst, src string, opts Options, extra ...string) (*host.Host, *FS, error) {
	if err := CopyTree(dst, src, append(slices.Clone(ResctrlPaths), extra...)...); err != nil {
		return nil, nil, fmt.Errorf("resctrlfs: copy %s: %w", src, err)
	}
	if opts.Topology == nil {
		sh, err := host.Open(src)
		if err != nil {
			return nil, nil, err
		}
		opts.Topology, err = topology.Read(sh)
		sh.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("resctrlfs: topology of %s: %w", src, err)
		}
	}
	k := New(opts)
	h, err := host.Open(dst, host.WithKernel(k))
	if err != nil {
		return nil, nil, err
	}
	if err := k.Mount(h); err != nil {
		h.Close()
		return nil, nil, err
	}
	return h, k, nil
}
