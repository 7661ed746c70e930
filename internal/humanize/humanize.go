// Package humanize is the one number format of crosstalk's tables and
// reports: SI numbers with units, IEC bytes, durations, ratios and percents,
// each with about three significant digits, so that a column never mixes
// 1.2M, 410000 and 9100.0.
//
// Every function writes NaN and ±Inf as Dash: a table cell with no value is
// a dash, whatever the reason.
package humanize

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Dash stands for a missing or non-finite value.
const Dash = "–"

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Sig3 writes v with about three significant digits and no trailing zeros
// after the point: 500, 12.5, 1.2, 0.25, 0.001.
func Sig3(v float64) string {
	if !finite(v) {
		return Dash
	}
	a := math.Abs(v)
	var s string
	switch {
	case a >= 100:
		s = strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		s = strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		s = strconv.FormatFloat(v, 'f', 2, 64)
	default:
		s = strconv.FormatFloat(v, 'f', 3, 64)
	}
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	if s == "-0" {
		s = "0"
	}
	return s
}

// scale picks the largest prefix whose multiplier is at most |v|, and
// rounds up to the next prefix when three significant digits would print
// 1000 (999.6k is 1M).
func scale(v, base float64, prefixes []string) (float64, string) {
	a := math.Abs(v)
	i := 0
	for i+1 < len(prefixes) && a >= math.Pow(base, float64(i+1)) {
		i++
	}
	x := v / math.Pow(base, float64(i))
	if i+1 < len(prefixes) && math.Abs(x) >= 999.5 {
		i++
		x = v / math.Pow(base, float64(i))
	}
	return x, prefixes[i]
}

var siPrefixes = []string{"", "k", "M", "G", "T", "P"}

// SI writes v with a decimal prefix and unit: SI(1.2e6, "") is "1.2M",
// SI(410000, "req/s") is "410kreq/s", SI(9100, "B/s") is "9.1kB/s". Values
// under 1000 have no prefix.
func SI(v float64, unit string) string {
	if !finite(v) {
		return Dash
	}
	x, p := scale(v, 1000, siPrefixes)
	return Sig3(x) + p + unit
}

var iecPrefixes = []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}

// Bytes writes a size with a binary prefix: 512B, 1.38MiB, 4GiB.
func Bytes(n float64) string {
	if !finite(n) {
		return Dash
	}
	x, p := scale(n, 1024, iecPrefixes)
	return Sig3(x) + p
}

// Duration writes seconds as ns, µs, ms or s with three significant digits
// (850ns, 1.2µs, 12.5ms, 4.5s), and as minutes and seconds from one minute
// (2m30s) or hours and minutes from one hour (1h05m).
func Duration(seconds float64) string {
	if !finite(seconds) {
		return Dash
	}
	a := math.Abs(seconds)
	sign := ""
	if seconds < 0 {
		sign = "-"
	}
	switch {
	case a == 0:
		return "0s"
	case a < 1e-6:
		return sign + Sig3(a*1e9) + "ns"
	case a < 1e-3:
		return sign + Sig3(a*1e6) + "µs"
	case a < 1:
		return sign + Sig3(a*1e3) + "ms"
	case a < 59.95:
		return sign + Sig3(a) + "s"
	case a < 3600:
		s := int64(math.Round(a))
		return sign + strconv.FormatInt(s/60, 10) + "m" + pad2(s%60) + "s"
	}
	m := int64(math.Round(a / 60))
	return sign + strconv.FormatInt(m/60, 10) + "h" + pad2(m%60) + "m"
}

func pad2(n int64) string {
	if n < 10 {
		return "0" + strconv.FormatInt(n, 10)
	}
	return strconv.FormatInt(n, 10)
}

// Seconds writes a length of time in seconds with a fixed number of
// decimals (4.5s with 1, 0.25s with 2), for columns of phase lengths and
// reaction times whose values are compared digit against digit.
func Seconds(s float64, decimals int) string {
	if !finite(s) {
		return Dash
	}
	return strconv.FormatFloat(s, 'f', decimals, 64) + "s"
}

// Ratio writes a ratio such as a slowdown: 1.23×.
func Ratio(v float64) string {
	if !finite(v) {
		return Dash
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + "×"
}

// Percent writes a fraction as a percent: 0.25 is 25%, 0.004 is 0.4%.
func Percent(fraction float64) string {
	if !finite(fraction) {
		return Dash
	}
	p := fraction * 100
	if p != 0 && math.Abs(p) < 10 {
		return strconv.FormatFloat(p, 'f', 1, 64) + "%"
	}
	return strconv.FormatFloat(p, 'f', 0, 64) + "%"
}

// Truncate shortens s to at most width runes, ending a cut string with …;
// a width under 1 leaves nothing.
func Truncate(s string, width int) string {
	if width < 1 {
		return ""
	}
	if utf8.RuneCountInString(s) <= width {
		return s
	}
	r := []rune(s)
	return string(r[:width-1]) + "…"
}

// Opt applies a format to an optional value: Dash when v is nil.
func Opt(v *float64, format func(float64) string) string {
	if v == nil {
		return Dash
	}
	return format(*v)
}
