package load

import "time"

// thrash does n random read-modify-writes of 8-byte words across buf,
// addresses from a xorshift64 generator, and returns the generator's state.
// The writes are independent of each other, so many misses are in flight at
// once: the most LLC lines evicted per second.
func thrash(buf []uint64, x uint64, n int) uint64 {
	m := uint64(len(buf))
	for ; n > 0; n-- {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		i := ((x >> 32) * m) >> 32 // Lemire's range reduction, m < 2^32
		buf[i] += x
	}
	return x
}

func prepareCacheThrash(opt Options) (runner, error) {
	words := int(opt.Size / 8)
	buf := make([]uint64, words)
	for i := range buf {
		buf[i] = uint64(i) // touch every page now
	}
	per := words / opt.Threads
	return newPool(opt.Threads, func(id int, c *counter, st *stopper) {
		// Each thread thrashes its own part, so threads never race.
		part := buf[id*per : (id+1)*per]
		if id == opt.Threads-1 {
			part = buf[id*per:]
		}
		x := uint64(0x2545f4914f6cdd1d) + uint64(id)*0x9e3779b97f4a7c15
		ch := chunker{n: 1 << 12, min: 1 << 8, max: 1 << 22}
		t0 := time.Now()
		for !st.done(t0) {
			x = thrash(part, x, ch.n)
			c.ops.Add(uint64(ch.n))
			t1 := time.Now()
			ch.adapt(t1.Sub(t0))
			t0 = t1
		}
		c.sink = x
	}), nil
}
