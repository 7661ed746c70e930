package humanize

import (
	"math"
	"testing"
)

func TestFormats(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"sig3 hundreds", Sig3(512.4), "512"},
		{"sig3 tens", Sig3(12.54), "12.5"},
		{"sig3 ones", Sig3(1.2), "1.2"},
		{"sig3 fraction", Sig3(0.25), "0.25"},
		{"sig3 negative zero", Sig3(-0.0001), "0"},
		{"sig3 NaN", Sig3(nan), Dash},
		{"si small", SI(950, ""), "950"},
		{"si kilo", SI(410000, ""), "410k"},
		{"si mega", SI(1.2e6, ""), "1.2M"},
		{"si kilo rounds up to mega", SI(999_600, ""), "1M"},
		{"si giga with unit", SI(2.5e9, "B/s"), "2.5GB/s"},
		{"si fraction", SI(0.5, "W"), "0.5W"},
		{"si negative", SI(-9100, ""), "-9.1k"},
		{"si inf", SI(inf, "x"), Dash},
		{"bytes", Bytes(512), "512B"},
		{"bytes KiB", Bytes(64 << 10), "64KiB"},
		{"bytes MiB", Bytes(1.375 * (1 << 20)), "1.38MiB"},
		{"bytes GiB", Bytes(4 << 30), "4GiB"},
		{"duration zero", Duration(0), "0s"},
		{"duration ns", Duration(850e-9), "850ns"},
		{"duration µs", Duration(1.2e-6), "1.2µs"},
		{"duration ms", Duration(0.0125), "12.5ms"},
		{"duration s", Duration(4.5), "4.5s"},
		{"duration minutes", Duration(150), "2m30s"},
		{"duration hours", Duration(3900), "1h05m"},
		{"duration negative", Duration(-0.25), "-250ms"},
		{"seconds one decimal", Seconds(4.54, 1), "4.5s"},
		{"seconds two decimals", Seconds(0.25, 2), "0.25s"},
		{"seconds NaN", Seconds(nan, 1), Dash},
		{"ratio", Ratio(1.234), "1.23×"},
		{"ratio inf", Ratio(inf), Dash},
		{"percent", Percent(0.25), "25%"},
		{"percent small", Percent(0.004), "0.4%"},
		{"percent zero", Percent(0), "0%"},
		{"truncate short", Truncate("redis", 8), "redis"},
		{"truncate cut", Truncate("stress-ng-matrix", 8), "stress-…"},
		{"truncate runes", Truncate("µµµµµ", 3), "µµ…"},
		{"truncate zero width", Truncate("abc", 0), ""},
		{"opt nil", Opt(nil, Ratio), Dash},
		{"opt value", Opt(ptr(2), Ratio), "2.00×"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}

func ptr(v float64) *float64 { return &v }

// A column of SI values from one table uses one style: no value is printed
// as a plain integer past 999 or with a trailing .0.
func TestSIColumnIsUniform(t *testing.T) {
	for _, v := range []float64{1.2e6, 410000, 9100, 100.0, 20.1, 1e12} {
		s := SI(v, "")
		for _, bad := range []string{"0000", ".0k", ".0M", ".0"} {
			if len(s) >= len(bad) && s[len(s)-len(bad):] == bad {
				t.Errorf("SI(%g) = %q ends in %q", v, s, bad)
			}
		}
		if len(s) > 4 {
			t.Errorf("SI(%g) = %q is wider than 4 characters", v, s)
		}
	}
}
