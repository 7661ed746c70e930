package yamlfile

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// size reads its own YAML, as the plan's memory sizes do.
type size int

func (s *size) UnmarshalYAML(n *yaml.Node) error {
	if !strings.HasSuffix(n.Value, "GiB") {
		return fmt.Errorf("line %d: memory %q: want a size such as 4GiB", n.Line, n.Value)
	}
	*s = 1
	return nil
}

type vmSpec struct {
	Name    string  `yaml:"name"`
	VCPUs   int     `yaml:"vcpus"`
	Memory  size    `yaml:"memory"`
	Weight  float64 `yaml:"weight"`
	Pinned  bool    `yaml:"pinned"`
	Spread  uint    `yaml:"spread"`
	Timeout time.Duration
	Tags    []string `yaml:"tags"`
	Extra   extra    `yaml:",inline"`
}

type extra struct {
	Notes string `yaml:"notes"`
}

type spec struct {
	VMs    []vmSpec          `yaml:"vms"`
	Limits map[string]vmSpec `yaml:"limits"`
	Owner  *struct {
		Email string `yaml:"email"`
	} `yaml:"owner"`
}

func TestDecodeStrictErrors(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       []string // one error each, in order
	}{
		{"typo in a list item", "vms:\n  - name: a\n    memroy: 1GiB\n",
			[]string{`f.yaml: line 3: unknown key "memroy" (did you mean "memory"?)`}},
		{"typo at the top", "vm:\n  - name: a\n",
			[]string{`f.yaml: line 1: unknown key "vm" (did you mean "vms"?)`}},
		{"swapped letters", "vms:\n  - nmae: a\n",
			[]string{`f.yaml: line 2: unknown key "nmae" (did you mean "name"?)`}},
		{"case", "vms:\n  - Name: a\n",
			[]string{`f.yaml: line 2: unknown key "Name" (did you mean "name"?)`}},
		{"inline struct key and default field name", "vms:\n  - {name: a, note: x, timeot: 1s}\n",
			[]string{`f.yaml: line 2: unknown key "note" (did you mean "notes"?)`, `f.yaml: line 2: unknown key "timeot" (did you mean "timeout"?)`}},
		{"nothing close", "vms:\n  - name: a\nflavour: spicy\n",
			[]string{`f.yaml: line 3: unknown key "flavour" (known keys: limits, owner, vms)`}},
		{"in a map of structs", "limits:\n  big:\n    vcpu: 2\n",
			[]string{`f.yaml: line 3: unknown key "vcpu" (did you mean "vcpus"?)`}},
		{"behind a pointer", "owner:\n  emial: a@b\n",
			[]string{`f.yaml: line 2: unknown key "emial" (did you mean "email"?)`}},
		{"not a number", "vms:\n  - name: a\n    vcpus: 2\n    weight: abc\n",
			[]string{`f.yaml: line 4: "abc" is not a number`}},
		{"int not a number", "vms:\n  - name: a\n\n    vcpus: abc\n",
			[]string{`f.yaml: line 4: "abc" is not a number`}},
		{"not a whole number", "vms:\n  - vcpus: 1.5\n",
			[]string{`f.yaml: line 2: "1.5" is not a whole number`}},
		{"negative unsigned", "vms:\n  - spread: -1\n",
			[]string{`f.yaml: line 2: "-1" is not a whole number of zero or more`}},
		{"long value given back whole", "vms:\n  - vcpus: twelve-hundred\n",
			[]string{`f.yaml: line 2: "twelve-hundred" is not a number`}},
		{"bool", "vms:\n  - pinned: maybe\n",
			[]string{`f.yaml: line 2: "maybe" is not true or false`}},
		{"duration", "vms:\n  - timeout: soon\n",
			[]string{`f.yaml: line 2: "soon" is not a duration (such as 500ms, 2s or 1m30s)`}},
		{"list for a number", "vms:\n  - vcpus: [1, 2]\n",
			[]string{`f.yaml: line 2: got a list, want a whole number`}},
		{"mapping for a list", "vms:\n  name: a\n",
			[]string{`f.yaml: line 2: got a mapping (key: value), want a list`}},
		{"value for a mapping", "owner: me\n",
			[]string{`f.yaml: line 1: "me" is not a mapping (key: value)`}},
		{"key twice", "vms:\n  - name: a\n    name: b\n",
			[]string{`f.yaml: line 3: key "name" given twice (first at line 2)`}},
		{"type's own reader", "vms:\n  - memory: lots\n",
			[]string{`f.yaml: line 2: memory "lots": want a size such as 4GiB`}},
		{"several, in line order", "vms:\n  - colour: red\n    vcpus: x\n  - memroy: 1GiB\n",
			[]string{`f.yaml: line 2: unknown key "colour" (known keys: memory, name, notes, pinned, spread, tags, timeout, vcpus, weight)`,
				`f.yaml: line 3: "x" is not a number`, `f.yaml: line 4: unknown key "memroy" (did you mean "memory"?)`}},
		{"syntax", "vms: [\n", []string{`f.yaml: line 1: did not find expected node content`}},
		{"empty", "", []string{`f.yaml: empty doc`}},
		{"comments only", "# nothing\n", []string{`f.yaml: empty doc`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s spec
			err := DecodeStrict([]byte(tc.data), "f.yaml", "empty doc", &s)
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if got := strings.Split(err.Error(), "\n"); strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
			if strings.Contains(err.Error(), "yamlfile.") || strings.Contains(err.Error(), "!!") {
				t.Errorf("Go type or YAML tag leaks: %v", err)
			}
			var ye *Error
			if !errors.As(err, &ye) || ye.Source != "f.yaml" {
				t.Errorf("not an *Error naming the file: %#v", err)
			}
		})
	}
}

func TestDecodeStrictAcceptsAllKeys(t *testing.T) {
	var s spec
	data := "vms:\n  - {name: a, vcpus: 2, memory: 4GiB, weight: 0.5, pinned: true, spread: 1, timeout: 2s, tags: [x], notes: hi}\nlimits:\n  big: {vcpus: 8}\nowner: {email: a@b}\n"
	if err := DecodeStrict([]byte(data), "f.yaml", "empty", &s); err != nil {
		t.Fatal(err)
	}
	if len(s.VMs) != 1 || s.VMs[0].Timeout != 2*time.Second || s.VMs[0].Extra.Notes != "hi" || s.Limits["big"].VCPUs != 8 || s.Owner.Email != "a@b" {
		t.Errorf("decoded %+v", s)
	}
}

func TestClosest(t *testing.T) {
	names := []string{"interval", "memory", "name", "vcpus"}
	for _, tc := range []struct {
		key, want string
		ok        bool
	}{
		{"memroy", "memory", true}, {"intervall", "interval", true}, {"nmae", "name", true},
		{"vcpu", "vcpus", true}, {"colour", "", false}, {"x", "", false}, {"MEMORY", "memory", true},
	} {
		got, ok := closest(tc.key, names)
		if got != tc.want || ok != tc.ok {
			t.Errorf("closest(%q) = %q, %v; want %q, %v", tc.key, got, ok, tc.want, tc.ok)
		}
	}
}
