package testenv

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// UnpackTree unpacks a gzipped tar of a host tree (one top-level directory
// holding proc/, sys/, …, as lscpu's dump script and `tar czf NAME.tar.gz
// NAME` make) into a temporary directory removed with the test, and returns
// the path of that top-level directory: the root to open a host.Host on.
// Real captures stay small in git as tarballs; unpacked they are thousands
// of sysfs files.
func UnpackTree(t testing.TB, tarball string) string {
	t.Helper()
	root, err := unpackTree(tarball, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func unpackTree(tarball, dst string) (string, error) {
	f, err := os.Open(tarball)
	if err != nil {
		return "", fmt.Errorf("unpack tree: %w", err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return "", fmt.Errorf("unpack tree %s: %w", tarball, err)
	}
	defer gz.Close()
	var top string
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("unpack tree %s: %w", tarball, err)
		}
		name := path.Clean(hdr.Name)
		if !filepath.IsLocal(name) {
			return "", fmt.Errorf("unpack tree %s: entry %q leaves the tree", tarball, hdr.Name)
		}
		switch first, _, _ := strings.Cut(name, "/"); {
		case top == "":
			top = first
		case first != top:
			return "", fmt.Errorf("unpack tree %s: more than one top-level entry (%s, %s)", tarball, top, first)
		}
		full := filepath.Join(dst, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return "", fmt.Errorf("unpack tree %s: %w", tarball, err)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(full, 0o755)
		case tar.TypeReg:
			// sysfs modes (0200 for write-only knobs, 0400 for root-only)
			// are not part of what a tree models; every file stays readable.
			err = writeFile(full, tr)
		case tar.TypeSymlink:
			// sysfs links are relative (cpu0/node0 -> ../../node/node0); one
			// leaving the tree would point at this machine, not the captured one.
			if !filepath.IsLocal(path.Join(path.Dir(name), hdr.Linkname)) || path.IsAbs(hdr.Linkname) {
				return "", fmt.Errorf("unpack tree %s: %s links out of the tree to %s", tarball, hdr.Name, hdr.Linkname)
			}
			err = os.Symlink(hdr.Linkname, full)
		default:
			continue // device nodes, fifos: not in sysfs dumps and not modelled
		}
		if err != nil {
			return "", fmt.Errorf("unpack tree %s: %w", tarball, err)
		}
	}
	if top == "" {
		return "", fmt.Errorf("unpack tree %s: empty archive", tarball)
	}
	return filepath.Join(dst, top), nil
}

func writeFile(p string, r io.Reader) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
