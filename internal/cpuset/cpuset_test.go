package cpuset

import (
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{in: "", want: nil},
		{in: "\n", want: nil},
		{in: "0", want: []int{0}},
		{in: "0-3", want: []int{0, 1, 2, 3}},
		{in: "0-3,8,10-11\n", want: []int{0, 1, 2, 3, 8, 10, 11}},
		{in: "8,0-1", want: []int{0, 1, 8}},
		{in: "0-1,1-2", want: []int{0, 1, 2}},
		// The 8-node interleaved layout from the KVM Forum topology talk.
		{in: "0,8,16,24", want: []int{0, 8, 16, 24}},
		{in: "0-15:4", want: []int{0, 4, 8, 12}},
		{in: "3-1", wantErr: true},
		{in: "a", wantErr: true},
		{in: "1,,2", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "0-99999", wantErr: true},
		{in: "4:2", wantErr: true},
		{in: "0-4:0", wantErr: true},
	}
	for _, tc := range tests {
		got, err := Parse(tc.in)
		if tc.wantErr {
			if err == nil {
				t.Errorf("Parse(%q) = %v, want error", tc.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if !slices.Equal(got.List(), tc.want) {
			t.Errorf("Parse(%q) = %v, want %v", tc.in, got.List(), tc.want)
		}
	}
}

func TestParseMask(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{in: "1", want: "0"},
		{in: "3\n", want: "0-1"},
		{in: "ff,00000001", want: "0,32-39"},
		{in: "00000000,00000000", want: ""}, // a memory-only node
		{in: "0x0f", want: "0-3"},
		{in: "00ff00ff", want: "0-7,16-23"},
		// node cpumaps of real machines (util-linux's lscpu dumps): the
		// kernel pads every word but the first, which is as wide as
		// nr_cpu_ids needs.
		{in: "0000,55555555,55555555", want: "0,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,32,34,36,38,40,42,44,46,48,50,52,54,56,58,60,62"},
		{in: "00000000,003f0000,0000003f", want: "0-5,48-53"},
		{in: "fc000000,0000fc00,00000000", want: "42-47,90-95"},
		{in: "00000000,00000000,00000000,00000000,00000000,00000000,00000000,0000000f", want: "0-3"},
		{in: "0000000g", wantErr: true},
		{in: "ff,,ff", wantErr: true},
		{in: ",ff", wantErr: true},
		{in: "ff 00", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "", wantErr: true},
		{in: "xyz", wantErr: true},
		{in: "1,", wantErr: true},
		{in: "123456789", wantErr: true},
	}
	for _, tc := range tests {
		got, err := ParseMask(tc.in)
		if tc.wantErr {
			if err == nil {
				t.Errorf("ParseMask(%q) = %v, want error", tc.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseMask(%q): %v", tc.in, err)
			continue
		}
		if got.String() != tc.want {
			t.Errorf("ParseMask(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestSetOps(t *testing.T) {
	a := MustParse("0-7,16-23")
	b := MustParse("4-11")
	if got := a.Intersect(b).String(); got != "4-7" {
		t.Errorf("Intersect = %q", got)
	}
	if got := a.Union(b).String(); got != "0-11,16-23" {
		t.Errorf("Union = %q", got)
	}
	if got := a.Difference(b).String(); got != "0-3,16-23" {
		t.Errorf("Difference = %q", got)
	}
	if !MustParse("17").IsSubsetOf(a) || b.IsSubsetOf(a) {
		t.Error("IsSubsetOf wrong")
	}
	if a.Len() != 16 || a.First() != 0 || (Set{}).First() != -1 {
		t.Error("Len/First wrong")
	}
	if !a.Contains(20) || a.Contains(12) {
		t.Error("Contains wrong")
	}
	if !Range(2, 4).Equal(Of(4, 3, 2, 3)) || !Range(3, 2).IsEmpty() {
		t.Error("Range/Of wrong")
	}
	var s Set
	if err := s.UnmarshalText([]byte("1-2")); err != nil || s.String() != "1-2" {
		t.Errorf("UnmarshalText: %v %v", s, err)
	}
}

// FuzzParse checks that any list the parser accepts renders back to an
// equivalent list, and that it never panics.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"0-3,8", "0", "", "1-0", "0-15:4", "7,6,5", "0-8191"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		set, err := Parse(s)
		if err != nil {
			return
		}
		again, err := Parse(set.String())
		if err != nil {
			t.Fatalf("re-parse of %q (from %q): %v", set.String(), s, err)
		}
		if !again.Equal(set) {
			t.Fatalf("round trip %q -> %q -> %q", s, set, again)
		}
	})
}

func FuzzParseMask(f *testing.F) {
	for _, s := range []string{"ff", "ff,00000001", "0x3", ",", "fffffffff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		set, err := ParseMask(s)
		if err != nil {
			return
		}
		for _, c := range set.List() {
			if c < 0 || c > MaxCPU {
				t.Fatalf("ParseMask(%q) produced cpu %d", s, c)
			}
		}
	})
}
