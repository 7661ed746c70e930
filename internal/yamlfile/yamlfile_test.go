package yamlfile

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

type doc struct {
	Name  string `yaml:"name"`
	Items []struct {
		X int `yaml:"x"`
	} `yaml:"items"`
}

func TestDecodeStrict(t *testing.T) {
	for _, tc := range []struct {
		name, data, wantErr string
	}{
		{"ok", "name: a\nitems:\n  - x: 1\n", ""},
		{"unknown key", "name: a\nbogus: 1\n", `f.yaml: line 2: unknown key "bogus"`},
		{"empty", "", "f.yaml: empty doc"},
		{"comments only", "# nothing\n", "f.yaml: empty doc"},
		{"bad syntax", "name: [\n", "f.yaml: line 1: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d doc
			err := DecodeStrict([]byte(tc.data), "f.yaml", "empty doc", &d)
			if tc.wantErr == "" {
				if err != nil || d.Name != "a" || len(d.Items) != 1 {
					t.Fatalf("err %v, doc %+v", err, d)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want prefix %q", err, tc.wantErr)
			}
		})
	}
}

func TestItemLines(t *testing.T) {
	data := []byte("# header\nname: a\nitems:\n  - x: 1\n\n  - x: 2\n    # note\n  - x: 3\nother: [1, 2]\n")
	if got, want := ItemLines(data, "items"), []int{4, 6, 8}; !slices.Equal(got, want) {
		t.Errorf("items: %v, want %v", got, want)
	}
	for _, key := range []string{"name", "missing", "other2"} {
		if got := ItemLines(data, key); got != nil {
			t.Errorf("%s: %v, want nil", key, got)
		}
	}
	if got := ItemLines([]byte("- a\n- b\n"), "items"); got != nil {
		t.Errorf("top-level list: %v", got)
	}
	if got := ItemLines([]byte("items: [\n"), "items"); got != nil {
		t.Errorf("bad yaml: %v", got)
	}
}

func TestCatalog(t *testing.T) {
	c := Catalog{FS: fstest.MapFS{
		"s/one.yaml":  {Data: []byte("name: one\n")},
		"s/two.yaml":  {Data: []byte("name: two\n")},
		"s/README.md": {Data: []byte("not a document")},
	}, Dir: "s", Kind: "scenario"}
	if got := c.Names(); !slices.Equal(got, []string{"one", "two"}) {
		t.Errorf("Names = %v", got)
	}
	b, src, err := c.Read("two")
	if err != nil || string(b) != "name: two\n" || src != "two (built-in)" {
		t.Errorf("Read(two) = %q, %q, %v", b, src, err)
	}
	file := filepath.Join(t.TempDir(), "mine.yaml")
	if err := os.WriteFile(file, []byte("name: mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, src, err = c.Read(file)
	if err != nil || string(b) != "name: mine\n" || src != file {
		t.Errorf("Read(file) = %q, %q, %v", b, src, err)
	}
	_, _, err = c.Read("three")
	if err == nil || err.Error() != `no built-in scenario "three" (have one, two) and no such file` {
		t.Errorf("Read(three): %v", err)
	}
	// A path is a path: the error is the file system's, not a catalog list.
	_, _, err = c.Read("./three.yaml")
	if err == nil || strings.Contains(err.Error(), "built-in") {
		t.Errorf("Read(./three.yaml): %v", err)
	}
}
