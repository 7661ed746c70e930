package resultdir

import (
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "out")
	paths, err := Write(dir,
		JSON("result.json", map[string]any{"scenario": "buslock", "values": []int{1, 2}}),
		Rendered("report.html", func(w io.Writer) error { _, err := io.WriteString(w, "<html></html>\n"); return err }),
	)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "result.json"), filepath.Join(dir, "report.html")}
	if !slices.Equal(paths, want) {
		t.Errorf("paths = %v, want %v", paths, want)
	}
	files := []struct{ name, text string }{
		{"result.json", "{\n  \"scenario\": \"buslock\",\n  \"values\": [\n    1,\n    2\n  ]\n}\n"},
		{"report.html", "<html></html>\n"},
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != f.text {
			t.Errorf("%s = %q, want %q", f.name, b, f.text)
		}
	}
}

// A failure stops the writing, names the file, and says which files were
// written before it.
func TestWriteErrors(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		files   []File
		written []string
		err     string
		absent  string
	}{
		{
			name:    "render fails",
			files:   []File{JSON("a.json", 1), Rendered("b.html", func(io.Writer) error { return boom }), JSON("c.json", 2)},
			written: []string{"a.json"},
			err:     "writing DIR/b.html: boom",
			absent:  "c.json",
		},
		{
			name:   "unencodable value",
			files:  []File{JSON("nan.json", math.NaN())},
			err:    "encoding DIR/nan.json: json: unsupported value: NaN",
			absent: "nan.json",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			paths, err := Write(dir, tt.files...)
			if err == nil || strings.ReplaceAll(err.Error(), dir, "DIR") != tt.err {
				t.Fatalf("Write error = %v, want %q", err, tt.err)
			}
			var names []string
			for _, p := range paths {
				names = append(names, filepath.Base(p))
			}
			if !slices.Equal(names, tt.written) {
				t.Errorf("written = %v, want %v", names, tt.written)
			}
			if _, err := os.Stat(filepath.Join(dir, tt.absent)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s exists after the failure (stat: %v)", tt.absent, err)
			}
		})
	}
}

func TestWriteDirError(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(filepath.Join(file, "out"), JSON("a.json", 1)); err == nil {
		t.Error("Write under a regular file succeeded")
	}
}
