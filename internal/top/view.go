package top

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/api"
)

// View says how a frame is laid out and which tenants it lists.
type View struct {
	// Width is the frame's width in columns; below minWidth the frame is
	// laid out at minWidth.
	Width int
	// Height is the most lines the frame may take; 0 means as many as it
	// needs (a pipe, a file). The header is always kept; the tenant list
	// and the sections under it give up rows to fit.
	Height int
	// Color highlights with ANSI colours; the text is the same without.
	Color bool
	// Sort orders the tenants; the zero value is SortScore.
	Sort SortKey
	// Filter keeps the tenants whose name matches: a glob when it has *, ?
	// or [, else a substring; case is ignored. Empty keeps all.
	Filter string
	// Limit is the most tenants listed; 0 lists as many as fit.
	Limit int
	// Stale, when not empty, says why the state shown is old: the header
	// carries a STALE mark with it, in words, so it shows without colour.
	Stale string
}

// SortKey is an order of the tenant list.
type SortKey string

// Tenant orders.
const (
	SortScore    SortKey = "score"    // suspect score, then CPU
	SortCPU      SortKey = "cpu"      // CPU used, then suspect score
	SortThrottle SortKey = "throttle" // throttled first, hardest held first
	SortName     SortKey = "name"     // by name
)

// SortKeys lists the orders, for help and errors.
var SortKeys = []SortKey{SortScore, SortCPU, SortThrottle, SortName}

// ParseSort reads a --sort value.
func ParseSort(s string) (SortKey, error) {
	if s == "" {
		return SortScore, nil
	}
	k := SortKey(strings.ToLower(s))
	if !slices.Contains(SortKeys, k) {
		return "", fmt.Errorf("--sort %q: want one of %s", s, joinKeys())
	}
	return k, nil
}

func joinKeys() string {
	var s []string
	for _, k := range SortKeys {
		s = append(s, string(k))
	}
	return strings.Join(s, ", ")
}

// describe is the order in words, for the TENANTS title.
func (k SortKey) describe() string {
	switch k {
	case SortCPU:
		return "by CPU"
	case SortThrottle:
		return "throttled first"
	case SortName:
		return "by name"
	}
	return "by suspect score then CPU"
}

// sortTenants orders a copy of ts by key; ties fall back to the name and ID
// so the same state always gives the same list.
func sortTenants(ts []api.TenantState, key SortKey) []api.TenantState {
	ts = slices.Clone(ts)
	byName := func(a, b api.TenantState) int {
		return cmp.Or(strings.Compare(tenantName(a), tenantName(b)), strings.Compare(a.ID, b.ID))
	}
	slices.SortStableFunc(ts, func(a, b api.TenantState) int {
		switch key {
		case SortCPU:
			return cmp.Or(cmpDesc(a.CPU, b.CPU), cmpDesc(a.Score, b.Score), byName(a, b))
		case SortThrottle:
			// Held tenants first, the lowest duty (the hardest held) first
			// among them; then the rest as by score.
			return cmp.Or(cmpBoolFirst(a.Throttled, b.Throttled), cmp.Compare(a.Duty, b.Duty),
				cmpDesc(a.Score, b.Score), cmpDesc(a.CPU, b.CPU), byName(a, b))
		case SortName:
			return byName(a, b)
		}
		return cmp.Or(cmpDesc(a.Score, b.Score), cmpDesc(a.CPU, b.CPU), byName(a, b))
	})
	return ts
}

func cmpBoolFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

// Matcher tells whether a tenant name matches a --filter pattern.
type Matcher func(name string) bool

// ParseFilter reads a --filter pattern: a glob when it has *, ? or [ (where
// * also crosses the / of pod names), else a substring; case is ignored.
func ParseFilter(pattern string) (Matcher, error) {
	if pattern == "" {
		return func(string) bool { return true }, nil
	}
	if !strings.ContainsAny(pattern, "*?[") {
		p := strings.ToLower(pattern)
		return func(name string) bool { return strings.Contains(strings.ToLower(name), p) }, nil
	}
	re, err := globRegexp(pattern)
	if err != nil {
		return nil, fmt.Errorf("--filter %q: %w", pattern, err)
	}
	return re.MatchString, nil
}

// globRegexp turns a glob into an anchored, case-insensitive regexp.
func globRegexp(glob string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("(?i)^")
	r := []rune(glob)
	for i := 0; i < len(r); i++ {
		switch c := r[i]; c {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		case '[':
			end := i + 1
			if end < len(r) && (r[end] == '!' || r[end] == '^') {
				end++
			}
			if end < len(r) && r[end] == ']' {
				end++
			}
			for end < len(r) && r[end] != ']' {
				end++
			}
			if end >= len(r) {
				return nil, fmt.Errorf("unclosed [ in the glob")
			}
			class := string(r[i+1 : end])
			neg := ""
			if c, ok := strings.CutPrefix(class, "!"); ok {
				class, neg = c, "^"
			} else if c, ok := strings.CutPrefix(class, "^"); ok {
				class, neg = c, "^"
			}
			class = strings.ReplaceAll(strings.ReplaceAll(class, `\`, `\\`), "[", `\[`)
			b.WriteString("[" + neg + class + "]")
			i = end
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("not a glob: %w", err)
	}
	return re, nil
}
