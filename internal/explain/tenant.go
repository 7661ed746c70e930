package explain

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/yamlfile"
)

// UnknownTenantError says the journal names no tenant like the one asked
// about; Known are those it does name, closest first.
type UnknownTenantError struct {
	Query string
	Known []Tenant
}

// unknownListed is how many known tenants the error lists.
const unknownListed = 8

func (e *UnknownTenantError) Error() string {
	if len(e.Known) == 0 {
		return fmt.Sprintf("no tenant %q in the journal: it names no tenant at all", e.Query)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "no tenant %q in the journal; it knows, closest first: ", e.Query)
	for i, t := range e.Known[:min(len(e.Known), unknownListed)] {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%s)", t.Name, t.ID)
	}
	if n := len(e.Known) - unknownListed; n > 0 {
		fmt.Fprintf(&b, " and %d more", n)
	}
	return b.String()
}

// resolve finds the tenants the journal names that q means, by the first
// rule that matches any: the ID (its cgroup path) exactly, the name
// exactly, a cgroup path that ends in the ID (a full cgroupfs path) or the
// ID's last element, the name ignoring case. A name may be several
// tenants (a VM defined again).
func resolve(q string, events []event) ([]Tenant, error) {
	byID := map[string]string{}
	for _, e := range events {
		if e.Tenant != "" && (e.Name != "" || byID[e.Tenant] == "") {
			byID[e.Tenant] = e.Name
		}
	}
	var known []Tenant
	for id, name := range byID {
		if name == "" {
			name = id
		}
		known = append(known, Tenant{ID: id, Name: name})
	}
	slices.SortFunc(known, func(a, b Tenant) int { return cmp.Compare(a.ID, b.ID) })
	trimmed := "/" + strings.Trim(q, "/")
	rules := []func(Tenant) bool{
		func(t Tenant) bool { return t.ID == q },
		func(t Tenant) bool { return t.Name == q },
		func(t Tenant) bool {
			id := "/" + strings.Trim(t.ID, "/")
			return id != "/" && (strings.HasSuffix(trimmed, id) || path.Base(id) == strings.Trim(q, "/"))
		},
		func(t Tenant) bool { return strings.EqualFold(t.Name, q) },
	}
	for _, rule := range rules {
		var got []Tenant
		for _, t := range known {
			if rule(t) {
				got = append(got, t)
			}
		}
		if len(got) > 0 {
			return got, nil
		}
	}
	dist := func(t Tenant) int {
		lq := strings.ToLower(q)
		return min(yamlfile.EditDistance(lq, strings.ToLower(t.Name)), yamlfile.EditDistance(lq, strings.ToLower(path.Base(t.ID))),
			yamlfile.EditDistance(lq, strings.ToLower(t.ID)))
	}
	slices.SortStableFunc(known, func(a, b Tenant) int { return cmp.Or(cmp.Compare(dist(a), dist(b)), cmp.Compare(a.Name, b.Name)) })
	return nil, &UnknownTenantError{Query: q, Known: known}
}
