package load

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits: binary suffixes (K, M, G, T and KiB…, Ki…) are powers of 1024;
// KB, MB, GB, TB are powers of 1000, as in GNU dd. Case-insensitive.
var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"ki", 1 << 10}, {"mi", 1 << 20}, {"gi", 1 << 30}, {"ti", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// ParseSize parses a byte count: plain bytes ("4096"), or a number with a
// unit: "32KiB", "4MiB", "256M", "1.5GiB" (K, M, G, T, Ki…, KiB… = 1024^n),
// "100MB" (KB, MB, GB, TB = 1000^n), "512B". The result must be a whole,
// non-negative number of bytes that fits in an int64.
func ParseSize(s string) (int64, error) {
	in := s
	s = strings.TrimSpace(s)
	low := strings.ToLower(s)
	mult := 1.0
	for _, u := range sizeUnits {
		if strings.HasSuffix(low, u.suffix) {
			mult = u.mult
			s = strings.TrimSpace(s[:len(s)-len(u.suffix)])
			break
		}
	}
	if s == "" {
		return 0, fmt.Errorf("size %q: no number", in)
	}
	if i, err := strconv.ParseUint(s, 10, 63); err == nil {
		m := int64(mult)
		if int64(i) > math.MaxInt64/m {
			return 0, fmt.Errorf("size %q: too large", in)
		}
		return int64(i) * m, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || strings.ContainsAny(s, "eEnNxXpP_+") {
		return 0, fmt.Errorf("size %q: want bytes or a number with a unit such as 32KiB, 4MiB, 256M, 1GiB", in)
	}
	if f < 0 {
		return 0, fmt.Errorf("size %q: negative", in)
	}
	v := f * mult
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: too large", in)
	}
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("size %q: not a whole number of bytes", in)
	}
	return int64(v), nil
}

// FormatSize writes n bytes with the largest binary unit that divides it
// exactly ("4MiB", "1536KiB", "1000B").
func FormatSize(n int64) string {
	for _, u := range []struct {
		s string
		m int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.m == 0 {
			return strconv.FormatInt(n/u.m, 10) + u.s
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}
