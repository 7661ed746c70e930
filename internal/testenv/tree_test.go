package testenv

import (
	"archive/tar"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type entry struct {
	name, body, link string
	dir              bool
}

func writeTarball(t *testing.T, entries []entry) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tree.tar.gz")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Mode: 0o200, Size: int64(len(e.body)), Typeflag: tar.TypeReg}
		switch {
		case e.dir:
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
		case e.link != "":
			hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeSymlink, e.link, 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []interface{ Close() error }{tw, gz, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func TestUnpackTree(t *testing.T) {
	root := UnpackTree(t, writeTarball(t, []entry{
		{name: "box/", dir: true},
		{name: "box/sys/devices/system/node/node2/cpumap", body: "0c\n"},
		{name: "box/sys/devices/system/cpu/cpu2/node2", link: "../../node/node2"},
		{name: "box/sys/devices/system/cpu/cpu2/cache/uevent", body: ""}, // write-only in the tar, readable here
	}))
	if filepath.Base(root) != "box" {
		t.Errorf("root = %s, want the top-level box", root)
	}
	b, err := os.ReadFile(filepath.Join(root, "sys/devices/system/cpu/cpu2/node2/cpumap"))
	if err != nil || string(b) != "0c\n" {
		t.Errorf("cpumap through the node link = %q, %v", b, err)
	}
	if _, err := os.ReadFile(filepath.Join(root, "sys/devices/system/cpu/cpu2/cache/uevent")); err != nil {
		t.Errorf("write-only file unreadable: %v", err)
	}
}

func TestUnpackTreeRejects(t *testing.T) {
	tests := []struct {
		name    string
		entries []entry
		want    string
	}{
		{"two tops", []entry{{name: "a/x", body: "1"}, {name: "b/x", body: "1"}}, "more than one top-level"},
		{"dot-dot name", []entry{{name: "a/../../x", body: "1"}}, "leaves the tree"},
		{"absolute name", []entry{{name: "/etc/x", body: "1"}}, "leaves the tree"},
		{"link out", []entry{{name: "a/l", link: "../../etc"}}, "links out"},
		{"absolute link", []entry{{name: "a/l", link: "/etc"}}, "links out"},
		{"empty", nil, "empty archive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := unpackTree(writeTarball(t, tc.entries), t.TempDir())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
