package resctrl

import "testing"

func TestMasks(t *testing.T) {
	skx := &CacheAlloc{Resource: "L3", CBMMask: 0x7ff, Ways: 11, MinCBMBits: 1}
	milan := &CacheAlloc{Resource: "L3", CBMMask: 0xffff, Ways: 16, MinCBMBits: 0, SparseMasks: true}
	hsw := &CacheAlloc{Resource: "L3", CBMMask: 0xfffff, Ways: 20, MinCBMBits: 2}
	for _, tc := range []struct {
		ca   *CacheAlloc
		ways int
		end  End
		want uint64
	}{
		// Alita's Xeon 8163: 11 ways; a 4-vCPU abuser on a 48-CPU socket gets
		// ceil(11×4/48)+1 = 2 ways at one end.
		{skx, 2, EndHigh, 0x600},
		{skx, 2, EndLow, 0x3},
		{skx, 11, EndHigh, 0x7ff},
		{skx, 40, EndLow, 0x7ff}, // clamped to all ways
		{skx, 0, EndLow, 0x1},    // at least one way
		{milan, 0, EndHigh, 0x8000},
		{milan, 3, EndHigh, 0xe000},
		{hsw, 1, EndLow, 0x3}, // min_cbm_bits 2
	} {
		got, err := tc.ca.Mask(tc.ways, tc.end)
		if err != nil || got != tc.want {
			t.Errorf("%#x %d %s: %#x %v, want %#x", tc.ca.CBMMask, tc.ways, tc.end, got, err, tc.want)
		}
		if err := tc.ca.Validate(got); err != nil {
			t.Errorf("own mask %#x invalid: %v", got, err)
		}
	}
	if _, err := (&CacheAlloc{CBMMask: 0xf0f, Ways: 8}).Mask(2, EndLow); err == nil {
		t.Error("non-contiguous cbm_mask accepted")
	}
	for _, tc := range []struct {
		ca   *CacheAlloc
		mask uint64
		ok   bool
	}{
		{skx, 0x7ff, true}, {skx, 0x0f0, true}, {skx, 0, false}, {skx, 0x800, false},
		{skx, 0x505, false}, {milan, 0x505, true}, {milan, 0, true},
		{hsw, 0x1, false}, {hsw, 0x3, true}, {&CacheAlloc{CBMMask: 0xff, MinCBMBits: 2, SparseMasks: true}, 0x31, false},
	} {
		if err := tc.ca.Validate(tc.mask); (err == nil) != tc.ok {
			t.Errorf("Validate(%#x) on %#x = %v, want ok %v", tc.mask, tc.ca.CBMMask, err, tc.ok)
		}
	}
	if !Contiguous(0x70) || Contiguous(0x50) || !Contiguous(0) || Ways(0x7ff) != 11 {
		t.Error("Contiguous/Ways")
	}
	// libvirt-vm1 holds the low four ways of the SKX tree: go high.
	if e := skx.EndAwayFrom(0x00f, 2); e != EndHigh {
		t.Errorf("away from 0x00f: %s", e)
	}
	if e := skx.EndAwayFrom(0x780, 2); e != EndLow {
		t.Errorf("away from 0x780: %s", e)
	}
	if e := skx.EndAwayFrom(0, 2); e != EndHigh {
		t.Errorf("nothing used: %s", e)
	}
}

func TestMemBWRound(t *testing.T) {
	intel := &MemBW{MinBandwidth: 10, Granularity: 10, Units: "percent", Max: 100}
	amd := &MemBW{MinBandwidth: 0, Granularity: 1, Units: "1/8GBps", Max: 2048}
	for _, tc := range []struct {
		mb      *MemBW
		in, out int
	}{
		{intel, 50, 50}, {intel, 25, 30}, {intel, 15, 20}, {intel, 5, 10}, {intel, 0, 10}, {intel, 101, 100},
		{amd, 16, 16}, {amd, 0, 1}, {amd, 5000, 2048}, {amd, 1023, 1023},
	} {
		if got := tc.mb.Round(tc.in); got != tc.out {
			t.Errorf("%s Round(%d) = %d, want %d", tc.mb.Units, tc.in, got, tc.out)
		}
	}
}
