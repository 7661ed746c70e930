// Package resultdir writes a command's result directory (--out): the
// result as JSON, which 'lab report' reads back, and the reports rendered
// from it.
package resultdir

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// File is one file of a result directory.
type File struct {
	Name string
	save func(path string) error
}

// JSON is a file holding v as indented JSON with a final newline: the
// form 'lab report' reads back. v is encoded before the file is created,
// so a value that cannot be encoded leaves no file behind.
func JSON(name string, v any) File {
	return File{Name: name, save: func(path string) error {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding %s: %w", path, err)
		}
		return os.WriteFile(path, append(b, '\n'), 0o644)
	}}
}

// Rendered is a file that write renders, such as an HTML report.
func Rendered(name string, write func(w io.Writer) error) File {
	return File{Name: name, save: func(path string) error { return writeFileWith(path, write) }}
}

// Write makes dir (and its parents) and writes files into it, in order,
// stopping at the first error. It returns the paths written.
func Write(dir string, files ...File) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for _, f := range files {
		path := filepath.Join(dir, f.Name)
		if err := f.save(path); err != nil {
			return paths, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// writeFileWith creates path and writes it with write, closing it either
// way and reporting the first error.
func writeFileWith(path string, write func(w io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}
