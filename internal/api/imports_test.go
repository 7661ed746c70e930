package api

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/crosstalk-project/crosstalk/"

// imports returns the module-internal packages that the non-test files of
// the package in dir (relative to the module root) import.
func imports(t *testing.T, root, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, spec := range af.Imports {
			p, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			if rest, ok := strings.CutPrefix(p, module); ok {
				out = append(out, rest)
			}
		}
	}
	if len(files) == 0 {
		t.Fatalf("no Go files in %s", dir)
	}
	return out
}

// reaches reports whether the package in dir depends on target, directly
// or through other packages of the module (build tags are ignored, so a
// file for any platform counts).
func reaches(t *testing.T, root, dir, target string) bool {
	t.Helper()
	seen := map[string]bool{dir: true}
	queue := []string{dir}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		for _, p := range imports(t, root, d) {
			if p == target {
				return true
			}
			if !seen[p] {
				seen[p] = true
				queue = append(queue, p)
			}
		}
	}
	return false
}

// Readers of the state depend on the wire types, not on the agent (its
// sensors, actuators and wiring); the agent does not depend on the lab that
// benchmarks it.
func TestPackageBoundaries(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	for _, c := range []struct {
		from, to string
		want     bool
	}{
		{"internal/top", "internal/agent", false},
		{"internal/nodesignal", "internal/agent", false},
		{"internal/agent", "internal/lab", false},
		{"internal/api", "internal/agent", false},
		// The walk itself: what is imported is found, directly and through
		// other packages.
		{"internal/top", "internal/api", true},
		{"internal/agent", "internal/nodesignal", true},
		{"internal/lab", "internal/api", true},
		{"internal/cli", "internal/judge", true},
	} {
		if got := reaches(t, root, c.from, c.to); got != c.want {
			t.Errorf("%s depends on %s: %v, want %v", c.from, c.to, got, c.want)
		}
	}
}
