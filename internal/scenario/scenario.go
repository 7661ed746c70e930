// Package scenario is what the lab's and the simulator's scenarios have in
// common: built-in scenarios named by name or replaced by a YAML file,
// strict decoding that keeps each tenant's line for the checks made after
// it, and the roles and names of tenants. Their schemas differ (a real host
// runs commands, a simulated one models behaviours), so each package keeps
// its own types and checks and hands them to a Catalog.
package scenario

import (
	"fmt"
	"io/fs"
	"regexp"

	"github.com/crosstalk-project/crosstalk/internal/yamlfile"
)

// Roles a tenant plays in a scenario.
const (
	RoleVictim    = "victim"
	RolePolluter  = "polluter"
	RoleBystander = "bystander"
)

// CheckRole says what is wrong with a tenant's role, if anything.
func CheckRole(role string) error {
	switch role {
	case RoleVictim, RolePolluter, RoleBystander:
		return nil
	}
	return fmt.Errorf("role %q: want victim, polluter or bystander", role)
}

// RoleRank orders roles as reports list tenants: the victim first, then
// polluters, then bystanders (anything else sorts with the victim, as an
// unknown role never passes CheckRole).
func RoleRank(role string) int {
	switch role {
	case RolePolluter:
		return 1
	case RoleBystander:
		return 2
	}
	return 0
}

// validName is the form of scenario and tenant names: they become cgroup,
// file and table names, so they are short and need no quoting.
var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// ValidName reports whether s can name a scenario or a tenant: 1-32
// lower-case letters, digits, - and _, starting with a letter or digit.
func ValidName(s string) bool { return validName.MatchString(s) }

// Catalog reads scenarios of type S: the built-in ones embedded under
// scenarios/ by name, or any YAML file by path.
type Catalog[S any] struct {
	docs yamlfile.Catalog
	// check finishes a decoded scenario: lines holds the line of each item
	// of its tenants list, in order (fewer than its tenants when the
	// document was not a list); its errors get the source put before them.
	check func(s *S, lines []int) error
}

// NewCatalog is the catalog of the scenarios/*.yaml files of builtins (an
// embedded tree),
// finished by check after decoding.
func NewCatalog[S any](builtins fs.FS, check func(s *S, lines []int) error) Catalog[S] {
	return Catalog[S]{docs: yamlfile.Catalog{FS: builtins, Dir: "scenarios", Kind: "scenario"}, check: check}
}

// Names lists the built-in scenarios' names, sorted.
func (c Catalog[S]) Names() []string { return c.docs.Names() }

// Load returns a built-in scenario by name, or reads a YAML file.
func (c Catalog[S]) Load(nameOrFile string) (*S, error) {
	b, source, err := c.docs.Read(nameOrFile)
	if err != nil {
		return nil, err
	}
	return c.Parse(b, source)
}

// Parse reads a scenario from data, source naming it in errors. Unknown
// keys are rejected and every error names the line it is about.
func (c Catalog[S]) Parse(data []byte, source string) (*S, error) {
	var s S
	if err := yamlfile.DecodeStrict(data, source, "empty scenario", &s); err != nil {
		return nil, err
	}
	if err := c.check(&s, yamlfile.ItemLines(data, "tenants")); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return &s, nil
}

// Builtin is a built-in scenario and the name it is known by.
type Builtin[S any] struct {
	Name     string
	Scenario *S
}

// Builtins loads every built-in scenario, in name order. A built-in that
// does not load is a fault of this binary, named in the error.
func (c Catalog[S]) Builtins() ([]Builtin[S], error) {
	var out []Builtin[S]
	for _, name := range c.Names() {
		s, err := c.Load(name)
		if err != nil {
			return nil, fmt.Errorf("built-in scenario %s: %w", name, err)
		}
		out = append(out, Builtin[S]{Name: name, Scenario: s})
	}
	return out, nil
}
