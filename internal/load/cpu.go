package load

import "time"

// cpuTableWords is the bystander's table: 8 KiB, well inside any L1d.
const cpuTableWords = 1024

// spin runs n iterations of integer work on registers and the small table
// and returns its state: a multiply-add generator, a lookup and a rotate-xor
// per iteration.
func spin(tab *[cpuTableWords]uint64, x, acc uint64, n int) (uint64, uint64) {
	for ; n > 0; n-- {
		x = x*6364136223846793005 + 1442695040888963407
		acc += tab[x>>54] ^ x // top 10 bits: 0..1023
		acc = acc<<7 | acc>>57
	}
	return x, acc
}

func prepareCPU(opt Options) (runner, error) {
	var tab [cpuTableWords]uint64
	for i := range tab {
		tab[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	perThread := opt.Rate / float64(opt.Threads) // 0: as fast as it can
	return newPool(opt.Threads, func(id int, c *counter, st *stopper) {
		local := tab // each thread its own copy, on its own stack
		x, acc := uint64(id)+1, uint64(0)
		if perThread > 0 {
			// A paced bystander: busy for part of every millisecond, like a
			// service with steady load, leaving the rest of its CPU to others.
			pacedLoop(st, c, perThread, 1<<20, func(n int) { x, acc = spin(&local, x, acc, n) })
			c.sink = x ^ acc
			return
		}
		ch := chunker{n: 1 << 14, min: 1 << 10, max: 1 << 24}
		t0 := time.Now()
		for !st.done(t0) {
			x, acc = spin(&local, x, acc, ch.n)
			c.ops.Add(uint64(ch.n))
			t1 := time.Now()
			ch.adapt(t1.Sub(t0))
			t0 = t1
		}
		c.sink = x ^ acc
	}), nil
}
