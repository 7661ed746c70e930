package host

import (
	"slices"
	"testing"
)

func TestProcStatFields(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string // nil: an error
	}{
		{"4242 (loop) R 1 4242 4242 0 -1 4194560 120 0 0 0 5 3\n", []string{"R", "1", "4242", "4242", "0", "-1", "4194560", "120", "0", "0", "0", "5", "3"}},
		{"7 (CPU 0/KVM) S 1 2", []string{"S", "1", "2"}},
		{"7 (x) S (y) T 1", []string{"T", "1"}},
		{"7 loop R 1", nil},
		{"7 (loop)", nil},
		{"7 (loop)R 1", nil},
		{"", nil},
	} {
		got, err := ProcStatFields(tc.line)
		if (err != nil) != (tc.want == nil) || !slices.Equal(got, tc.want) {
			t.Errorf("ProcStatFields(%q) = %q, %v; want %q", tc.line, got, err, tc.want)
		}
	}
}
