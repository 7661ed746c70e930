package resctrl

import (
	"fmt"
	"math/bits"
	"strconv"
)

// End is the end of a cache's way mask a contiguous allocation sits at.
// Alita isolates an abuser at one end so that the rest of the cache stays
// one contiguous block for everyone else.
type End int

const (
	EndHigh End = iota // the most significant ways (Alita's left slot)
	EndLow             // the least significant ways (Alita's right slot)
)

func (e End) String() string {
	if e == EndLow {
		return "low"
	}
	return "high"
}

// Other is the opposite end.
func (e End) Other() End {
	if e == EndLow {
		return EndHigh
	}
	return EndLow
}

// Ways is the number of ways (set bits) in a mask.
func Ways(mask uint64) int { return bits.OnesCount64(mask) }

// Contiguous reports whether the set bits of mask form one block (the zero
// mask counts as contiguous).
func Contiguous(mask uint64) bool {
	if mask == 0 {
		return true
	}
	m := mask >> bits.TrailingZeros64(mask)
	return m&(m+1) == 0
}

// FormatMask renders a mask as the kernel parses it in schemata writes (hex,
// no prefix).
func FormatMask(mask uint64) string { return strconv.FormatUint(mask, 16) }

// MinWays is the fewest ways a mask of this resource may have: min_cbm_bits,
// and never fewer than one (AMD kernels since 6.1 report min_cbm_bits 0,
// which allows an empty mask; an empty mask would stall the class).
func (ca *CacheAlloc) MinWays() int { return max(1, ca.MinCBMBits) }

// Mask returns a contiguous mask of ways ways at one end of cbm_mask. ways is
// clamped to [MinWays, all ways]; the error says when cbm_mask itself is not
// one block (then no end is well defined).
func (ca *CacheAlloc) Mask(ways int, end End) (uint64, error) {
	if ca == nil || ca.CBMMask == 0 {
		return 0, fmt.Errorf("resctrl: no cache allocation resource")
	}
	if !Contiguous(ca.CBMMask) {
		return 0, fmt.Errorf("resctrl: %s cbm_mask %#x is not contiguous", ca.Resource, ca.CBMMask)
	}
	ways = min(max(ways, ca.MinWays()), ca.Ways)
	lo := bits.TrailingZeros64(ca.CBMMask)
	block := uint64(1)<<ways - 1
	if end == EndHigh {
		return block << (lo + ca.Ways - ways), nil
	}
	return block << lo, nil
}

// Validate checks a mask the way the kernel's cbm_validate() does before
// accepting a schemata write: within cbm_mask, non-zero when min_cbm_bits is
// set, one block unless the CPU takes sparse masks, and at least
// min_cbm_bits long (the first block, for sparse masks).
func (ca *CacheAlloc) Validate(mask uint64) error {
	if (ca.MinCBMBits > 0 && mask == 0) || mask&^ca.CBMMask != 0 {
		return fmt.Errorf("mask %x out of range (cbm_mask %x)", mask, ca.CBMMask)
	}
	if mask == 0 {
		return nil
	}
	if !ca.SparseMasks && !Contiguous(mask) {
		return fmt.Errorf("mask %x has non-consecutive 1-bits", mask)
	}
	first := mask >> bits.TrailingZeros64(mask)
	if run := bits.TrailingZeros64(^first); run < ca.MinCBMBits {
		return fmt.Errorf("mask %x: need at least %d bits", mask, ca.MinCBMBits)
	}
	return nil
}

// EndAwayFrom picks the end for an allocation of ways ways that overlaps
// least with used, the ways other groups' masks (and hardware-shared bits)
// occupy; a tie goes to the high end.
func (ca *CacheAlloc) EndAwayFrom(used uint64, ways int) End {
	hi, err1 := ca.Mask(ways, EndHigh)
	lo, err2 := ca.Mask(ways, EndLow)
	if err1 != nil || err2 != nil {
		return EndHigh
	}
	if Ways(lo&used) < Ways(hi&used) {
		return EndLow
	}
	return EndHigh
}

// Round returns the MB value the kernel will apply for a request of v: for
// percentages it rounds up to the next control step (min_bandwidth + N ×
// bandwidth_gran, as bw_validate()'s roundup does) within [min, max]; for
// AMD's absolute units (granularity 1) and MBps it only clamps.
func (mb *MemBW) Round(v int) int {
	lo := mb.MinBandwidth
	if mb.Units == "1/8GBps" {
		lo = max(lo, 1) // 0 would stop the class; crosstalk never asks for it
	}
	v = min(max(v, lo), mb.Max)
	if g := mb.Granularity; g > 1 && mb.Units == "percent" {
		if r := v % g; r != 0 {
			v += g - r
		}
		v = min(v, mb.Max)
	}
	return v
}
