package load

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"
)

// splitOffset places the 4-byte counter at bytes 62..65 of a 128-byte-aligned
// block: two bytes in one cache line, two in the next.
const splitOffset = 62

// splitAddr returns a *uint32 that straddles a 64-byte cache-line boundary,
// inside buf (which must have at least 128+splitOffset+4 bytes).
func splitAddr(buf []byte) *uint32 {
	base := uintptr(unsafe.Pointer(&buf[0]))
	pad := (128 - base%128) % 128
	return (*uint32)(unsafe.Pointer(&buf[int(pad)+splitOffset]))
}

// splitAdd does n locked adds on p. On x86 a LOCK-prefixed instruction on an
// operand that crosses a cache line cannot be done with a cache lock, so the
// core takes the bus lock: every other core's memory access waits.
func splitAdd(p *uint32, n int) {
	for ; n > 0; n-- {
		atomic.AddUint32(p, 1)
	}
}

// prepareSplitLock sets up the memory-bus polluter. Safety: validate refuses
// a Duration over MaxSplitLockDuration, and every worker checks the deadline
// itself after each batch, so the load ends on time even when its context is
// never cancelled. On hosts with split_lock_detect=warn the kernel slows the
// thread down on purpose (and logs it); with =fatal the process gets SIGBUS.
func prepareSplitLock(opt Options) (runner, error) {
	buf := make([]byte, 256)
	p := splitAddr(buf)
	if a := uintptr(unsafe.Pointer(p)); a%64 != splitOffset {
		return nil, fmt.Errorf("internal error: split address %#x not at offset %d of a line", a, splitOffset)
	}
	perThread := opt.Rate / float64(opt.Threads) // 0: unlimited
	pl := newPool(opt.Threads, func(id int, c *counter, st *stopper) {
		if perThread == 0 {
			t0 := time.Now()
			ch := chunker{n: 1 << 8, min: 1 << 4, max: 1 << 16}
			for !st.done(t0) {
				splitAdd(p, ch.n)
				c.ops.Add(uint64(ch.n))
				t1 := time.Now()
				ch.adapt(t1.Sub(t0))
				t0 = t1
			}
			return
		}
		pacedLoop(st, c, perThread, 256, func(n int) { splitAdd(p, n) })
	})
	pl.desc = func(s *Summary) {
		s.RateLimit = opt.Rate
		s.sink ^= uint64(atomic.LoadUint32(p))
	}
	return pl, nil
}
