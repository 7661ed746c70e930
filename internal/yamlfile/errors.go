package yamlfile

import (
	"encoding"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Error is one problem in a YAML document, said for the person who wrote
// it: the file, the line, and the key or value as written. It never names a
// Go type.
type Error struct {
	Source string
	Line   int // 0 when the decoder did not say
	Msg    string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s: line %d: %s", e.Source, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Source, e.Msg)
}

var (
	unmarshalerType     = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// decodesItself reports whether t reads its own YAML, so its keys and
// values are not the walk's to judge.
func decodesItself(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return t.Implements(unmarshalerType) || pt.Implements(unmarshalerType) ||
		t.Implements(textUnmarshalerType) || pt.Implements(textUnmarshalerType)
}

// structKeys lists the keys a struct takes in YAML, as the decoder names
// them: the yaml tag, else the lower-cased field name; inline structs add
// theirs. open is true when an inline map takes any key.
func structKeys(t reflect.Type) (keys map[string]reflect.Type, open bool) {
	keys = map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if slices.Contains(strings.Split(opts, ","), "inline") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			switch ft.Kind() {
			case reflect.Struct:
				sub, subOpen := structKeys(ft)
				for k, v := range sub {
					keys[k] = v
				}
				open = open || subOpen
			case reflect.Map:
				open = true
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		keys[name] = f.Type
	}
	return keys, open
}

// checker walks a document against the Go type it is decoded into.
type checker struct {
	source string
	errs   []*Error
	// scalars holds every scalar node by line, to give back values the
	// decoder's messages cut short.
	scalars map[int][]*yaml.Node
	// types are the Go types reachable from the target by their printed
	// name, to say in words what the decoder's messages name in Go.
	types map[string]reflect.Type
}

func (c *checker) indexTypes(t reflect.Type) {
	if _, seen := c.types[t.String()]; seen {
		return
	}
	c.types[t.String()] = t
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		c.indexTypes(t.Elem())
	case reflect.Map:
		c.indexTypes(t.Key())
		c.indexTypes(t.Elem())
	case reflect.Struct:
		keys, _ := structKeys(t)
		for _, ft := range keys {
			c.indexTypes(ft)
		}
	}
}

func (c *checker) indexScalars(n *yaml.Node) {
	if n == nil {
		return
	}
	if n.Kind == yaml.ScalarNode {
		c.scalars[n.Line] = append(c.scalars[n.Line], n)
	}
	for _, ch := range n.Content {
		c.indexScalars(ch)
	}
}

// walk reports the keys of n that t does not take.
func (c *checker) walk(n *yaml.Node, t reflect.Type) {
	if n == nil || t == nil {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if decodesItself(t) {
		return
	}
	switch n.Kind {
	case yaml.ScalarNode:
		// The decoder drops the fraction of a number read into a whole-number
		// field (vcpus: 1.5 becomes 1); a person meant something else.
		if n.ShortTag() == "!!float" && isWhole(t.Kind()) {
			c.errs = append(c.errs, &Error{Source: c.source, Line: n.Line, Msg: c.wrongType(n.Line, "!!float", n.Value, t.String())})
		}
	case yaml.DocumentNode:
		for _, ch := range n.Content {
			c.walk(ch, t)
		}
	case yaml.MappingNode:
		switch t.Kind() {
		case reflect.Struct:
			keys, open := structKeys(t)
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if k.Kind != yaml.ScalarNode || k.Value == "<<" {
					continue
				}
				ft, ok := keys[k.Value]
				if !ok {
					if !open {
						c.errs = append(c.errs, &Error{Source: c.source, Line: k.Line, Msg: unknownKey(k.Value, keys)})
					}
					continue
				}
				c.walk(v, ft)
			}
		case reflect.Map:
			for i := 1; i < len(n.Content); i += 2 {
				c.walk(n.Content[i], t.Elem())
			}
		}
	case yaml.SequenceNode:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for _, ch := range n.Content {
				c.walk(ch, t.Elem())
			}
		}
	}
}

// unknownKey says that key is not one of keys, suggesting the closest.
func unknownKey(key string, keys map[string]reflect.Type) string {
	msg := fmt.Sprintf("unknown key %q", key)
	names := slices.Sorted(maps.Keys(keys))
	if s, ok := closest(key, names); ok {
		return msg + fmt.Sprintf(" (did you mean %q?)", s)
	}
	if len(names) > 0 {
		return msg + " (known keys: " + strings.Join(names, ", ") + ")"
	}
	return msg
}

// closest is the name nearest to key by edit distance, when near enough to
// be a slip of the fingers rather than another word: at most a third of the
// key's length, and at least one edit allowed. Case is ignored.
func closest(key string, names []string) (string, bool) {
	best, bestDist := "", -1
	lk := strings.ToLower(key)
	for _, n := range names {
		d := EditDistance(lk, strings.ToLower(n))
		if bestDist < 0 || d < bestDist {
			best, bestDist = n, d
		}
	}
	limit := max(1, len([]rune(key))/3)
	if bestDist < 0 || bestDist > limit {
		return "", false
	}
	return best, true
}

// EditDistance is the Damerau–Levenshtein distance (optimal string
// alignment) of a and b: a swapped pair of letters counts as one edit.
func EditDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

var (
	reLine      = regexp.MustCompile(`^line (\d+): (.*)$`)
	reCannot    = regexp.MustCompile(`^cannot unmarshal (!!\w+)(?: ` + "`" + `(.*)` + "`" + `)? into (.+)$`)
	reNotFound  = regexp.MustCompile(`^field (.+) not found in type (.+)$`)
	reSet       = regexp.MustCompile(`^field (.+) already set in type .+$`)
	reDefined   = regexp.MustCompile(`^mapping key "(.*)" already defined at line (\d+)$`)
	reSyntaxPre = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)
)

// decoderError turns one of the decoder's messages into the reader's words.
func (c *checker) decoderError(msg string) *Error {
	e := &Error{Source: c.source, Msg: msg}
	m := reLine.FindStringSubmatch(msg)
	if m == nil {
		return e
	}
	e.Line, _ = strconv.Atoi(m[1])
	e.Msg = m[2]
	switch {
	case reCannot.MatchString(m[2]):
		mm := reCannot.FindStringSubmatch(m[2])
		e.Msg = c.wrongType(e.Line, mm[1], mm[2], mm[3])
	case reNotFound.MatchString(m[2]):
		mm := reNotFound.FindStringSubmatch(m[2])
		var keys map[string]reflect.Type
		if t, ok := c.types[mm[2]]; ok && t.Kind() == reflect.Struct {
			keys, _ = structKeys(t)
		}
		e.Msg = unknownKey(mm[1], keys)
	case reSet.MatchString(m[2]):
		e.Msg = fmt.Sprintf("key %q given twice", reSet.FindStringSubmatch(m[2])[1])
	case reDefined.MatchString(m[2]):
		mm := reDefined.FindStringSubmatch(m[2])
		e.Msg = fmt.Sprintf("key %q given twice (first at line %s)", mm[1], mm[2])
	}
	return e
}

// wrongType says in words why the value on line does not fit the Go type
// named goType.
func (c *checker) wrongType(line int, tag, value, goType string) string {
	want := c.wanted(goType)
	switch tag {
	case "!!seq":
		return "got a list, want " + want
	case "!!map":
		return "got a mapping (key: value), want " + want
	}
	if full, ok := strings.CutSuffix(value, "..."); ok {
		for _, n := range c.scalars[line] {
			if strings.HasPrefix(n.Value, full) {
				value = n.Value
				break
			}
		}
	}
	t := c.types[strings.TrimLeft(goType, "*")]
	if t != nil {
		if t.PkgPath() == "time" && t.Name() == "Duration" {
			return fmt.Sprintf("%q is not a duration (such as 500ms, 2s or 1m30s)", value)
		}
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			if _, err := strconv.ParseFloat(value, 64); err == nil {
				return fmt.Sprintf("%q is not a whole number", value)
			}
			return fmt.Sprintf("%q is not a number", value)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			if _, err := strconv.ParseFloat(value, 64); err == nil {
				return fmt.Sprintf("%q is not a whole number of zero or more", value)
			}
			return fmt.Sprintf("%q is not a number", value)
		case reflect.Float32, reflect.Float64:
			return fmt.Sprintf("%q is not a number", value)
		case reflect.Bool:
			return fmt.Sprintf("%q is not true or false", value)
		}
	}
	return fmt.Sprintf("%q is not %s", value, want)
}

// wanted names in words what a Go type takes in YAML.
func (c *checker) wanted(goType string) string {
	t := c.types[strings.TrimLeft(goType, "*")]
	if t == nil {
		return "a value of another kind"
	}
	if t.PkgPath() == "time" && t.Name() == "Duration" {
		return "a duration (such as 500ms, 2s or 1m30s)"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a single value"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping (key: value)"
	}
	return "a value of another kind"
}

// syntaxError says where the document stops being YAML.
func (c *checker) syntaxError(err error) *Error {
	m := reSyntaxPre.FindStringSubmatch(err.Error())
	if m == nil {
		return &Error{Source: c.source, Msg: err.Error()}
	}
	e := &Error{Source: c.source, Msg: m[2]}
	e.Line, _ = strconv.Atoi(m[1])
	return e
}

func isWhole(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}
