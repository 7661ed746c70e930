package load

import (
	"math/rand/v2"
	"time"
)

// slotWords is the number of uint64 in one 64-byte cache-line slot.
const slotWords = 8

// buildCycle returns a buffer of size bytes (rounded down to whole 64-byte
// slots) holding one random cycle through all its slots: the first word of
// each slot is the word index of the next slot. Sattolo's algorithm makes the
// permutation a single cycle, so a chase from any slot visits every slot
// before it repeats. The generator is seeded, so the layout is reproducible.
func buildCycle(size int64, seed uint64) []uint64 {
	n := int(size / 64)
	buf := make([]uint64, n*slotWords)
	perm := make([]uint32, n)
	for i := range perm {
		perm[i] = uint32(i)
	}
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	for i := n - 1; i > 0; i-- {
		j := rng.IntN(i) // j < i: Sattolo, not Fisher-Yates
		perm[i], perm[j] = perm[j], perm[i]
	}
	for i, next := range perm {
		buf[i*slotWords] = uint64(next) * slotWords
	}
	return buf
}

// chaseN follows n links from word index p and returns where it ended. Every
// load's address comes from the load before, so nothing overlaps.
func chaseN(buf []uint64, p uint64, n int) uint64 {
	for ; n > 0; n-- {
		p = buf[p]
	}
	return p
}

func prepareChase(opt Options) (runner, error) {
	buf := buildCycle(opt.Size, 1)
	slots := uint64(len(buf) / slotWords)
	return newPool(opt.Threads, func(id int, c *counter, st *stopper) {
		// Threads share the (read-only) cycle, each starting elsewhere on it.
		p := uint64(id) * (slots / uint64(opt.Threads)) * slotWords
		ch := chunker{n: 1 << 12, min: 1 << 10, max: 1 << 22}
		t0 := time.Now()
		for !st.done(t0) {
			p = chaseN(buf, p, ch.n)
			t1 := time.Now()
			took := t1.Sub(t0)
			c.busy.Add(int64(took))
			c.ops.Add(uint64(ch.n))
			ch.adapt(took)
			t0 = t1
		}
		c.sink = p
	}), nil
}
