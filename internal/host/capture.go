package host

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"time"
)

// CaptureManifest is written as crosstalk-capture.json at the top of a captured
// tree: what was copied and what could not be, so a tree attached to a bug
// report says what it leaves out.
type CaptureManifest struct {
	Source     string            `json:"source"`
	CapturedAt time.Time         `json:"captured_at"`
	Files      int               `json:"files"`
	Dirs       int               `json:"dirs"`
	StandIns   []string          `json:"stand_ins,omitempty"` // devices and sockets, stored as empty files
	Unreadable map[string]string `json:"unreadable,omitempty"`
}

// ManifestName is the file Capture writes at the root of the tree.
const ManifestName = "crosstalk-capture.json"

// KeepName marks a directory of a captured tree that is empty on the host:
// git keeps no empty directories, and a directory's existence is evidence
// (/sys/module there means "no kvm_intel", not "partial tree"). Host.ReadDir
// never lists it.
const KeepName = ".crosstalk-keep"

// Capture copies the recorded paths from src into the directory dst, so dst
// can later serve as a Host root. File contents are copied; listed directories
// are recreated; devices and sockets (/dev/kvm, /dev/cpu/N/msr, the libvirt
// socket) become empty regular files, the convention every tree in testdata/
// follows. Paths that did not exist are not created, so absence is preserved.
func Capture(src *Host, touched []Touch, dst string) (CaptureManifest, error) {
	m := CaptureManifest{Source: src.Root(), CapturedAt: time.Now().UTC(), Unreadable: map[string]string{}}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return m, fmt.Errorf("capture: %w", err)
	}
	for _, t := range touched {
		out := filepath.Join(dst, t.Path)
		st, err := src.stat(t.Path)
		if err != nil {
			continue // absent on the source: leave it absent
		}
		switch {
		case st.IsDir():
			if err := os.MkdirAll(out, 0o755); err != nil {
				return m, fmt.Errorf("capture %s: %w", t.Path, err)
			}
			m.Dirs++
			if t.Listed {
				// A listing's answer is its entries: recreate the subdirectories
				// (perf event sources, cgroups, resctrl groups) even when nothing
				// inside them was read. Files only come along when they were read,
				// so no value is ever invented.
				n, err := captureSubdirs(src, t.Path, out)
				if err != nil {
					return m, err
				}
				m.Dirs += n
			}
		case st.Mode().IsRegular():
			data, err := src.readFile(t.Path)
			if err != nil {
				// Present but unreadable (EACCES, or EOPNOTSUPP from /proc/pressure
				// with PSI compiled in but off): keep the fact, not a fake value.
				m.Unreadable[t.Path] = err.Error()
				continue
			}
			if err := writeCaptured(out, data); err != nil {
				return m, err
			}
			m.Files++
		default: // device node, socket, fifo
			if err := writeCaptured(out, nil); err != nil {
				return m, err
			}
			m.StandIns = append(m.StandIns, t.Path)
		}
	}
	if err := keepEmptyDirs(dst); err != nil {
		return m, err
	}
	if len(m.Unreadable) == 0 {
		m.Unreadable = nil
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, err
	}
	if err := os.WriteFile(filepath.Join(dst, ManifestName), append(b, '\n'), 0o644); err != nil {
		return m, fmt.Errorf("capture manifest: %w", err)
	}
	return m, nil
}

func captureSubdirs(src *Host, dir, out string) (int, error) {
	ents, err := src.readDir(dir)
	if err != nil {
		return 0, nil // listed before, unlistable now: nothing to add
	}
	n := 0
	for _, e := range ents {
		st, err := src.stat(path.Join(dir, e.Name())) // follows sysfs symlinks
		if err != nil || !st.IsDir() {
			continue
		}
		if err := os.MkdirAll(filepath.Join(out, e.Name()), 0o755); err != nil {
			return n, fmt.Errorf("capture %s: %w", dir, err)
		}
		n++
	}
	return n, nil
}

// keepEmptyDirs puts a KeepName file in every empty directory under dst.
func keepEmptyDirs(dst string) error {
	return filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			return err
		}
		if len(ents) == 0 {
			return os.WriteFile(filepath.Join(p, KeepName), nil, 0o644)
		}
		return nil
	})
}

func writeCaptured(out string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	if err := os.WriteFile(out, data, 0o644); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	return nil
}
