package resctrl

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Schemata is a parsed resctrl schemata file: one line per resource, each
// with a value per cache domain ("L3:0=7ff;1=7ff", "MB:0=100;1=100").
type Schemata []Line

// Line is one resource's allocation across domains.
type Line struct {
	Resource string
	Domains  []Domain
}

// Domain is one cache domain's value. Cache resources hold hex bitmasks,
// MB holds decimal percentages or bandwidths: both are kept as text and
// interpreted by the accessors.
type Domain struct {
	ID    int
	Value string
}

// ParseSchemata parses schemata text. White space around separators is
// accepted, as the kernel does when parsing writes.
func ParseSchemata(s string) (Schemata, error) {
	var out Schemata
	for n, raw := range strings.Split(s, "\n") {
		line := strings.TrimSpace(raw)
		if line == "" {
			continue
		}
		res, rest, ok := strings.Cut(line, ":")
		res = strings.TrimSpace(res)
		if !ok || res == "" {
			return nil, fmt.Errorf("schemata line %d: %q: want RESOURCE:ID=VALUE;…", n+1, line)
		}
		l := Line{Resource: res}
		for _, d := range strings.Split(rest, ";") {
			d = strings.TrimSpace(d)
			if d == "" {
				continue
			}
			id, val, ok := strings.Cut(d, "=")
			if !ok {
				return nil, fmt.Errorf("schemata line %d: %q: domain without '='", n+1, d)
			}
			i, err := strconv.Atoi(strings.TrimSpace(id))
			if err != nil || i < 0 {
				return nil, fmt.Errorf("schemata line %d: bad domain id %q", n+1, id)
			}
			val = strings.TrimSpace(val)
			if val == "" || strings.ContainsAny(val, " \t;=:") {
				return nil, fmt.Errorf("schemata line %d: bad value %q for domain %d", n+1, val, i)
			}
			if slices.ContainsFunc(l.Domains, func(x Domain) bool { return x.ID == i }) {
				return nil, fmt.Errorf("schemata line %d: domain %d twice", n+1, i)
			}
			l.Domains = append(l.Domains, Domain{ID: i, Value: val})
		}
		if len(l.Domains) == 0 {
			return nil, fmt.Errorf("schemata line %d: resource %s has no domains", n+1, res)
		}
		out = append(out, l)
	}
	return out, nil
}

// String renders the schemata in the kernel's format.
func (s Schemata) String() string {
	var b strings.Builder
	for _, l := range s {
		b.WriteString(l.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// String renders one line without its newline: "L3:0=7ff;1=7ff".
func (l Line) String() string {
	var b strings.Builder
	b.WriteString(l.Resource)
	b.WriteByte(':')
	for i, d := range l.Domains {
		if i > 0 {
			b.WriteByte(';')
		}
		fmt.Fprintf(&b, "%d=%s", d.ID, d.Value)
	}
	return b.String()
}

// Line returns the line of a resource.
func (s Schemata) Line(resource string) (Line, bool) {
	for _, l := range s {
		if l.Resource == resource {
			return l, true
		}
	}
	return Line{}, false
}

// Value returns the text value of a resource in a domain.
func (s Schemata) Value(resource string, domain int) (string, bool) {
	for _, l := range s {
		if l.Resource != resource {
			continue
		}
		for _, d := range l.Domains {
			if d.ID == domain {
				return d.Value, true
			}
		}
	}
	return "", false
}

// CacheMask returns a cache resource's bitmask in a domain.
func (s Schemata) CacheMask(resource string, domain int) (uint64, error) {
	v, ok := s.Value(resource, domain)
	if !ok {
		return 0, fmt.Errorf("schemata: no %s domain %d", resource, domain)
	}
	m, err := strconv.ParseUint(v, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("schemata: %s domain %d: bad mask %q", resource, domain, v)
	}
	return m, nil
}
