// Package cpuset is a set of CPU numbers with the two text forms the kernel uses:
// cpu lists ("0-3,8,10-11", as in cpuset.cpus or */cpulist) and hex bitmasks
// ("ff,00000001", as in */cpumap or resctrl cpus).
//
// CPU numbering on real servers is sparse and interleaved (node0 = 0-7,16-23), so
// nothing here assumes CPUs are contiguous.
package cpuset

import (
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// MaxCPU bounds the CPU numbers accepted from text. Linux's NR_CPUS tops out at
// 8192 on x86; a larger value in sysfs is garbage, not a CPU.
const MaxCPU = 8191

// Set is an immutable, sorted set of CPU numbers. The zero value is the empty set.
type Set struct {
	cpus []int // sorted, unique
}

// Of returns the set holding the given CPUs.
func Of(cpus ...int) Set {
	c := slices.Clone(cpus)
	slices.Sort(c)
	return Set{cpus: slices.Compact(c)}
}

// Range returns the set {lo, ..., hi}.
func Range(lo, hi int) Set {
	if hi < lo {
		return Set{}
	}
	c := make([]int, 0, hi-lo+1)
	for i := lo; i <= hi; i++ {
		c = append(c, i)
	}
	return Set{cpus: c}
}

// Parse reads a kernel cpu list such as "0-3,8,10-11" or "0-15:4" (stride form,
// accepted by the kernel's bitmap_parselist). Blank input is the empty set.
func Parse(s string) (Set, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Set{}, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return Set{}, fmt.Errorf("cpu list %q: empty element", s)
		}
		stride := 1
		if i := strings.IndexByte(part, ':'); i >= 0 {
			n, err := strconv.Atoi(part[i+1:])
			if err != nil || n <= 0 {
				return Set{}, fmt.Errorf("cpu list %q: bad stride in %q", s, part)
			}
			stride, part = n, part[:i]
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := parseCPU(lo)
		if err != nil {
			return Set{}, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = parseCPU(hi); err != nil {
				return Set{}, fmt.Errorf("cpu list %q: %w", s, err)
			}
			if b < a {
				return Set{}, fmt.Errorf("cpu list %q: descending range %q", s, part)
			}
		} else if stride != 1 {
			return Set{}, fmt.Errorf("cpu list %q: stride without range in %q", s, part)
		}
		for c := a; c <= b; c += stride {
			out = append(out, c)
		}
	}
	return Of(out...), nil
}

func parseCPU(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("bad cpu number %q", s)
	}
	if n < 0 || n > MaxCPU {
		return 0, fmt.Errorf("cpu number %d out of range 0-%d", n, MaxCPU)
	}
	return n, nil
}

// MustParse is Parse for literals in code and tests; it panics on error.
func MustParse(s string) Set {
	c, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return c
}

// ParseMask reads a kernel hex bitmask: comma-separated 32-bit words, most
// significant first ("ff,00000001" = CPUs 0 and 32-39). An optional 0x prefix
// is accepted.
func ParseMask(s string) (Set, error) {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	if s == "" {
		return Set{}, fmt.Errorf("empty cpu mask")
	}
	words := strings.Split(s, ",")
	var out []int
	for i := range words {
		w := words[len(words)-1-i] // least significant word last in the text
		if w == "" || len(w) > 8 {
			return Set{}, fmt.Errorf("cpu mask %q: bad word %q", s, w)
		}
		v, err := strconv.ParseUint(w, 16, 32)
		if err != nil {
			return Set{}, fmt.Errorf("cpu mask %q: bad word %q", s, w)
		}
		for v != 0 {
			b := bits.TrailingZeros64(v)
			cpu := i*32 + b
			if cpu > MaxCPU {
				return Set{}, fmt.Errorf("cpu mask %q: cpu %d out of range", s, cpu)
			}
			out = append(out, cpu)
			v &^= 1 << b
		}
	}
	return Set{cpus: out}, nil // built in ascending order already
}

// Len is the number of CPUs in the set.
func (s Set) Len() int { return len(s.cpus) }

// IsEmpty reports whether the set has no CPUs.
func (s Set) IsEmpty() bool { return len(s.cpus) == 0 }

// List returns the CPUs in ascending order; the caller may keep it.
func (s Set) List() []int { return slices.Clone(s.cpus) }

// Contains reports whether cpu is in the set.
func (s Set) Contains(cpu int) bool {
	_, ok := slices.BinarySearch(s.cpus, cpu)
	return ok
}

// First returns the lowest CPU, or -1 for the empty set.
func (s Set) First() int {
	if len(s.cpus) == 0 {
		return -1
	}
	return s.cpus[0]
}

// Equal reports whether both sets hold the same CPUs.
func (s Set) Equal(o Set) bool { return slices.Equal(s.cpus, o.cpus) }

// Union returns s ∪ o.
func (s Set) Union(o Set) Set {
	return Of(append(slices.Clone(s.cpus), o.cpus...)...)
}

// Intersect returns s ∩ o.
func (s Set) Intersect(o Set) Set {
	var out []int
	i, j := 0, 0
	for i < len(s.cpus) && j < len(o.cpus) {
		switch {
		case s.cpus[i] < o.cpus[j]:
			i++
		case s.cpus[i] > o.cpus[j]:
			j++
		default:
			out = append(out, s.cpus[i])
			i++
			j++
		}
	}
	return Set{cpus: out}
}

// Difference returns s \ o.
func (s Set) Difference(o Set) Set {
	var out []int
	for _, c := range s.cpus {
		if !o.Contains(c) {
			out = append(out, c)
		}
	}
	return Set{cpus: out}
}

// IsSubsetOf reports whether every CPU of s is in o.
func (s Set) IsSubsetOf(o Set) bool { return s.Intersect(o).Len() == s.Len() }

// String renders the kernel cpu-list form, "0-3,8,10-11"; "" for the empty set.
func (s Set) String() string {
	var b strings.Builder
	for i := 0; i < len(s.cpus); {
		j := i
		for j+1 < len(s.cpus) && s.cpus[j+1] == s.cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s.cpus[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(s.cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}

// MarshalText renders the cpu-list form so sets read naturally in JSON and YAML.
func (s Set) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses the cpu-list form.
func (s *Set) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}
