package sim

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Bytes is a size in bytes, written in YAML as a number or with a binary
// or decimal suffix: 4MiB, 1.375MiB, 33MB, 64KiB.
type Bytes int64

// Rate is a count per second, written as a number or with a decimal
// suffix: 700k, 2.5M, 2e8.
type Rate float64

// ByteRate is bytes per second: 100GB/s, 12.5GiB/s, or a plain number.
type ByteRate float64

// Watts is a power: 165W or a plain number.
type Watts float64

// UnmarshalYAML parses a size.
func (b *Bytes) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseBytes(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*b = Bytes(v)
	return nil
}

// UnmarshalYAML parses a rate.
func (r *Rate) UnmarshalYAML(n *yaml.Node) error {
	v, err := parseScaled(n.Value, "", decimalSuffixes)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: %q is not a rate (a count per second such as 700k, 2.5M or 2e8)", n.Line, n.Value)
	}
	*r = Rate(v)
	return nil
}

// UnmarshalYAML parses a byte rate.
func (r *ByteRate) UnmarshalYAML(n *yaml.Node) error {
	s := strings.TrimSuffix(strings.TrimSpace(n.Value), "/s")
	v, err := ParseBytes(s)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a bandwidth (such as 100GB/s or 12.5GiB/s)", n.Line, n.Value)
	}
	*r = ByteRate(v)
	return nil
}

// UnmarshalYAML parses a power.
func (w *Watts) UnmarshalYAML(n *yaml.Node) error {
	v, err := parseScaled(n.Value, "W", nil)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: %q is not a power (such as 165W)", n.Line, n.Value)
	}
	*w = Watts(v)
	return nil
}

var decimalSuffixes = map[string]float64{"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}

var byteSuffixes = map[string]float64{
	"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
	"KB": 1e3, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
	"K": 1 << 10, "M": 1 << 20, "G": 1 << 30,
}

// ParseBytes reads a size such as 33MiB, 1.375MiB, 100GB or 4096.
func ParseBytes(s string) (int64, error) {
	v, err := parseScaled(s, "", byteSuffixes)
	if err != nil || v < 0 || v > math.MaxInt64/2 {
		return 0, fmt.Errorf("%q is not a size (such as 33MiB, 64KiB or 100GB)", s)
	}
	return int64(math.Round(v)), nil
}

// parseScaled reads a number with an optional unit (dropped) and an
// optional suffix from suffixes.
func parseScaled(s, unit string, suffixes map[string]float64) (float64, error) {
	s = strings.TrimSpace(s)
	if unit != "" {
		s = strings.TrimSpace(strings.TrimSuffix(s, unit))
	}
	mult := 1.0
	// Longest suffix first, so "MiB" wins over "B".
	best := ""
	for suf := range suffixes {
		if strings.HasSuffix(s, suf) && len(suf) > len(best) {
			if _, err := strconv.ParseFloat(strings.TrimSuffix(s, suf), 64); err == nil {
				best = suf
			}
		}
	}
	if best != "" {
		mult, s = suffixes[best], strings.TrimSuffix(s, best)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("not a number: %q", s)
	}
	return v * mult, nil
}
