package load

import (
	"math"
	"time"
)

// powerAcc holds the accumulators between calls: 12 YMM registers of 4
// float64 for the AVX2 kernel; the portable kernel uses the first 8.
type powerAcc [powerChains * 4]float64

// powerChains is the number of independent FMA chains the AVX2 kernel keeps
// in flight: more than latency (4-5 cycles) × FMA ports (2), so the ports
// never wait.
const powerChains = 12

// The accumulators follow acc = acc*powerMul + powerAdd, whose fixed point is
// powerAdd/(1-powerMul) = 1: starting at 1 they stay near 1 forever, never
// denormal, never overflowing, and the hardware cannot skip anything.
const (
	powerMul = 0.999999
	powerAdd = 1e-6
)

// fmaPortable is the fallback kernel: 8 independent scalar math.FMA chains,
// 16 flops per iteration.
func fmaPortable(n uint64, acc *powerAcc, m, c float64) {
	a0, a1, a2, a3, a4, a5, a6, a7 := acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7]
	for ; n > 0; n-- {
		a0 = math.FMA(a0, m, c)
		a1 = math.FMA(a1, m, c)
		a2 = math.FMA(a2, m, c)
		a3 = math.FMA(a3, m, c)
		a4 = math.FMA(a4, m, c)
		a5 = math.FMA(a5, m, c)
		a6 = math.FMA(a6, m, c)
		a7 = math.FMA(a7, m, c)
	}
	acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7] = a0, a1, a2, a3, a4, a5, a6, a7
}

const (
	implAVX2     = "avx2-fma"
	implPortable = "math.FMA"
	// flops per kernel iteration: 2 per FMA lane.
	flopsAVX2     = powerChains * 4 * 2
	flopsPortable = 8 * 2
)

func preparePower(opt Options) (runner, error) {
	impl, flops, kernel := implPortable, uint64(flopsPortable), fmaPortable
	if haveAVX2FMA() {
		impl, flops, kernel = implAVX2, flopsAVX2, fmaAVX2
	}
	pl := newPool(opt.Threads, func(id int, c *counter, st *stopper) {
		var acc powerAcc
		for i := range acc {
			acc[i] = 1 + float64(i)*1e-9
		}
		ch := chunker{n: 1 << 14, min: 1 << 10, max: 1 << 24}
		t0 := time.Now()
		for !st.done(t0) {
			kernel(uint64(ch.n), &acc, powerMul, powerAdd)
			c.ops.Add(uint64(ch.n) * flops)
			t1 := time.Now()
			ch.adapt(t1.Sub(t0))
			t0 = t1
		}
		var s float64
		for _, v := range acc {
			s += v
		}
		c.sink = math.Float64bits(s)
	})
	pl.desc = func(s *Summary) { s.Impl = impl }
	return pl, nil
}
