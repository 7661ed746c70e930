package load

import "math/bits"

// hist is an HDR-style log-linear histogram of non-negative int64 values
// (nanoseconds): exact below 256, then 128 linear sub-buckets per power of
// two, so any recorded value is known within 1/128 (0.8%). Its memory is
// fixed (about 58 KiB) however many samples it holds.
type hist struct {
	counts [histBuckets]uint64
	n      uint64
	max    int64
}

const (
	histSubBits = 7
	histSub     = 1 << histSubBits
	// shifts 0..(63-histSubBits) each give histSub buckets, plus histSub
	// for shift 0's lower half.
	histBuckets = (64-histSubBits-1)*histSub + 2*histSub
)

func histIndex(v uint64) int {
	shift := bits.Len64(v) - (histSubBits + 1)
	if shift < 0 {
		shift = 0
	}
	return shift<<histSubBits + int(v>>uint(shift))
}

// histValue is the midpoint of bucket i's range.
func histValue(i int) float64 {
	shift := i>>histSubBits - 1
	if shift < 0 {
		shift = 0
	}
	lo := uint64(i-shift<<histSubBits) << uint(shift)
	return float64(lo) + float64(uint64(1)<<uint(shift)-1)/2
}

func (h *hist) record(v int64) {
	if v < 0 {
		v = 0
	}
	h.counts[histIndex(uint64(v))]++
	h.n++
	if v > h.max {
		h.max = v
	}
}

func (h *hist) reset() { *h = hist{} }

// quantile returns the value at quantile q (0 < q <= 1): the smallest
// bucket holding at least ceil(q*n) samples, never above the largest sample.
func (h *hist) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.999999999)
	rank = max(1, min(rank, h.n))
	var seen uint64
	for i, c := range h.counts {
		if seen += c; seen >= rank {
			return min(histValue(i), float64(h.max))
		}
	}
	return float64(h.max)
}
