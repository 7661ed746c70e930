package scenario

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// doc is a scenario schema as small as the catalog needs: a name and
// tenants whose lines the check keeps.
type doc struct {
	Name    string `yaml:"name"`
	Tenants []struct {
		Name string `yaml:"name"`
		Role string `yaml:"role"`
	} `yaml:"tenants"`

	lines []int
}

func (d *doc) check(lines []int) error {
	d.lines = lines
	if !ValidName(d.Name) {
		return errors.New("bad name")
	}
	for i, t := range d.Tenants {
		if err := CheckRole(t.Role); err != nil {
			return fmt.Errorf("line %d: %w", lines[i], err)
		}
	}
	return nil
}

func testCatalog(files map[string]string) Catalog[doc] {
	fsys := fstest.MapFS{}
	for name, text := range files {
		fsys["scenarios/"+name] = &fstest.MapFile{Data: []byte(text)}
	}
	return NewCatalog(fsys, (*doc).check)
}

const twoTenants = `name: two
tenants:
  - name: a
    role: victim
  - name: b
    role: polluter
`

func TestCatalogLoad(t *testing.T) {
	c := testCatalog(map[string]string{"two.yaml": twoTenants, "notes.txt": "not a scenario"})
	dir := t.TempDir()
	file := filepath.Join(dir, "mine.yaml")
	if err := os.WriteFile(file, []byte("name: mine\ntenants:\n  - {name: x, role: bystander}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badRole := filepath.Join(dir, "bad-role.yaml")
	if err := os.WriteFile(badRole, []byte("name: bad\ntenants:\n  - name: x\n    role: villain\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	typo := filepath.Join(dir, "typo.yaml")
	if err := os.WriteFile(typo, []byte("name: typo\ntenant:\n  - name: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		arg       string
		name      string
		lines     []int
		err       string
		notExists bool
	}{
		{arg: "two", name: "two", lines: []int{3, 5}},
		{arg: file, name: "mine", lines: []int{3}},
		{arg: badRole, err: badRole + `: line 3: role "villain": want victim, polluter or bystander`},
		{arg: typo, err: typo + `: line 2: unknown key "tenant"`},
		{arg: empty, err: empty + ": empty scenario"},
		{arg: "nosuch", err: `no built-in scenario "nosuch" (have two) and no such file`},
		{arg: filepath.Join(dir, "nosuch.yaml"), notExists: true},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.arg), func(t *testing.T) {
			d, err := c.Load(tt.arg)
			switch {
			case tt.notExists:
				if !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("Load = %v, want a missing file's error", err)
				}
			case tt.err != "":
				if err == nil || !strings.HasPrefix(err.Error(), tt.err) {
					t.Fatalf("Load error = %v, want it to start %q", err, tt.err)
				}
			case err != nil:
				t.Fatal(err)
			default:
				if d.Name != tt.name || !reflect.DeepEqual(d.lines, tt.lines) {
					t.Errorf("Load = %q with tenant lines %v, want %q with %v", d.Name, d.lines, tt.name, tt.lines)
				}
			}
		})
	}
}

// A built-in's errors name it as a built-in; a file's name its path.
func TestCatalogParseNamesSource(t *testing.T) {
	c := testCatalog(map[string]string{"bad.yaml": "name: Bad\n"})
	_, err := c.Load("bad")
	if err == nil || err.Error() != "bad (built-in): bad name" {
		t.Errorf("Load(bad) = %v, want %q", err, "bad (built-in): bad name")
	}
	_, err = c.Parse([]byte("name: Bad\n"), "here.yaml")
	if err == nil || err.Error() != "here.yaml: bad name" {
		t.Errorf("Parse = %v, want %q", err, "here.yaml: bad name")
	}
}

func TestCatalogBuiltins(t *testing.T) {
	c := testCatalog(map[string]string{"two.yaml": twoTenants, "one.yaml": "name: one\ntenants:\n  - {name: v, role: victim}\n"})
	if got := c.Names(); !slices.Equal(got, []string{"one", "two"}) {
		t.Errorf("Names = %v, want [one two]", got)
	}
	all, err := c.Builtins()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range all {
		got = append(got, b.Name+"="+b.Scenario.Name)
	}
	if !slices.Equal(got, []string{"one=one", "two=two"}) {
		t.Errorf("Builtins = %v, want [one=one two=two]", got)
	}

	broken := testCatalog(map[string]string{"two.yaml": twoTenants, "worse.yaml": "name: worse\ntenants:\n  - {name: v, role: boss}\n"})
	if _, err := broken.Builtins(); err == nil || !strings.HasPrefix(err.Error(), "built-in scenario worse: worse (built-in): ") {
		t.Errorf("Builtins with a broken one = %v, want it named", err)
	}
}

func TestRoles(t *testing.T) {
	tests := []struct {
		role string
		ok   bool
		rank int
	}{
		{RoleVictim, true, 0},
		{RolePolluter, true, 1},
		{RoleBystander, true, 2},
		{"", false, 0},
		{"Victim", false, 0},
	}
	for _, tt := range tests {
		if err := CheckRole(tt.role); (err == nil) != tt.ok {
			t.Errorf("CheckRole(%q) = %v, want ok %v", tt.role, err, tt.ok)
		}
		if got := RoleRank(tt.role); got != tt.rank {
			t.Errorf("RoleRank(%q) = %d, want %d", tt.role, got, tt.rank)
		}
	}
}

func TestValidName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"redis", true},
		{"0-a_b", true},
		{strings.Repeat("a", 32), true},
		{strings.Repeat("a", 33), false},
		{"", false},
		{"-lead", false},
		{"Upper", false},
		{"sp ace", false},
		{"dot.yaml", false},
	}
	for _, tt := range tests {
		if got := ValidName(tt.name); got != tt.ok {
			t.Errorf("ValidName(%q) = %v, want %v", tt.name, got, tt.ok)
		}
	}
}
