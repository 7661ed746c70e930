// Package yamlfile reads the YAML documents operators hand crosstalk (lab
// and simulator scenarios, plan specs): unknown keys are errors, every error
// names its file, and the line of each item of a list is kept so that a
// check made after decoding can still point at the item it is about.
package yamlfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// DecodeStrict decodes data into v, rejecting keys v does not have. Its
// errors are *Error values (several joined when the document has several
// problems), each naming source and the line, in the words of the document:
// an unknown key as written with the closest known key, a value with what
// was wanted instead. A document with nothing in it is an error whose text
// is empty (after the source): what the reader should have written.
func DecodeStrict(data []byte, source, empty string, v any) error {
	c := &checker{source: source, scalars: map[int][]*yaml.Node{}, types: map[string]reflect.Type{}}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return c.syntaxError(err)
	}
	if root.Kind == 0 || len(root.Content) == 0 {
		return &Error{Source: source, Msg: empty}
	}
	if t := reflect.TypeOf(v); t != nil {
		c.indexTypes(t)
		c.indexScalars(&root)
		c.walk(&root, t)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(v)
	var te *yaml.TypeError
	switch {
	case err == nil, errors.Is(err, io.EOF):
	case errors.As(err, &te):
		for _, msg := range te.Errors {
			e := c.decoderError(msg)
			// The walk has said it already, with the closest key.
			if !slices.ContainsFunc(c.errs, func(o *Error) bool { return *o == *e || o.Line == e.Line && strings.HasPrefix(e.Msg, "unknown key") }) {
				c.errs = append(c.errs, e)
			}
		}
	default:
		// A type's own reader (a size, a rate) says what is wrong in words
		// and names its line; only the file is missing.
		e := &Error{Source: source, Msg: err.Error()}
		if m := reLine.FindStringSubmatch(e.Msg); m != nil {
			e.Line, _ = strconv.Atoi(m[1])
			e.Msg = m[2]
		}
		c.errs = append(c.errs, e)
	}
	if len(c.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(c.errs, func(a, b *Error) int { return a.Line - b.Line })
	errs := make([]error, len(c.errs))
	for i, e := range c.errs {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// ItemLines returns the line of each item of the list under the top-level
// key, in order; nil when the document has no such list (decoding has then
// already said what is wrong, or the list is empty).
func ItemLines(data []byte, key string) []int {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil {
		return nil
	}
	n := &root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key && n.Content[i+1].Kind == yaml.SequenceNode {
			var out []int
			for _, item := range n.Content[i+1].Content {
				out = append(out, item.Line)
			}
			return out
		}
	}
	return nil
}

// Catalog is a set of built-in documents (name.yaml files in Dir of FS, an
// embedded tree) that a user names by name, or replaces by a file path.
type Catalog struct {
	FS   fs.FS
	Dir  string
	Kind string // what a document is, for errors: "scenario"
}

// Names lists the built-in documents' names, sorted.
func (c Catalog) Names() []string {
	ents, _ := fs.ReadDir(c.FS, c.Dir)
	var out []string
	for _, e := range ents {
		if name, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			out = append(out, name)
		}
	}
	return out
}

// Read returns a built-in document by name, or else the file nameOrFile,
// with the source to name in errors.
func (c Catalog) Read(nameOrFile string) (data []byte, source string, err error) {
	if b, err := fs.ReadFile(c.FS, path.Join(c.Dir, nameOrFile+".yaml")); err == nil && !strings.Contains(nameOrFile, "/") {
		return b, nameOrFile + " (built-in)", nil
	}
	b, err := os.ReadFile(nameOrFile)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && !strings.ContainsAny(nameOrFile, "/.") {
			return nil, "", fmt.Errorf("no built-in %s %q (have %s) and no such file", c.Kind, nameOrFile, strings.Join(c.Names(), ", "))
		}
		return nil, "", err
	}
	return b, nameOrFile, nil
}
