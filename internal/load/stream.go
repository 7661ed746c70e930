package load

import "time"

// streamBytesPerElem is what STREAM counts for one triad element: read b[i]
// and c[i], write a[i].
const streamBytesPerElem = 3 * 8

// triad is STREAM's triad kernel.
func triad(a, b, c []float64, s float64) {
	b = b[:len(a)]
	c = c[:len(a)]
	for i := range a {
		a[i] = b[i] + s*c[i]
	}
}

func prepareStream(opt Options) (runner, error) {
	n := int(opt.Size / streamBytesPerElem)
	a := make([]float64, n)
	b := make([]float64, n)
	c := make([]float64, n)
	for i := range a {
		a[i], b[i], c[i] = 1, 2, 0.5 // touch every page now, not in the run
	}
	const s = 3.0
	per := n / opt.Threads
	return newPool(opt.Threads, func(id int, ctr *counter, st *stopper) {
		// Each thread sweeps its own part of the arrays, as STREAM's OpenMP
		// loop does.
		lo := id * per
		hi := lo + per
		if id == opt.Threads-1 {
			hi = n
		}
		ch := chunker{n: 1 << 14, min: 1 << 10, max: 1 << 20}
		i := lo
		t0 := time.Now()
		for !st.done(t0) {
			j := min(i+ch.n, hi)
			triad(a[i:j], b[i:j], c[i:j], s)
			ctr.ops.Add(uint64(j - i))
			if i = j; i == hi {
				i = lo
			}
			t1 := time.Now()
			ch.adapt(t1.Sub(t0))
			t0 = t1
		}
		ctr.sink = uint64(a[lo])
	}), nil
}
