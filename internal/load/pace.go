package load

import "time"

// pacedLoop runs work in batches so that the ops done never run ahead of
// rate × elapsed time; sleeps make up the rest. A batch is about 1 ms worth
// of the rate, between 1 and maxBatch ops. It returns at the deadline or
// when stopped.
func pacedLoop(st *stopper, c *counter, rate float64, maxBatch int, work func(n int)) {
	start := time.Now()
	t0 := start
	var done uint64
	batch := max(1, min(int(rate/1000), maxBatch))
	for !st.done(t0) {
		due := time.Duration(float64(done+uint64(batch)) / rate * float64(time.Second))
		if wait := due - t0.Sub(start); wait > 0 {
			if !st.sleep(wait) {
				return
			}
		}
		work(batch)
		done += uint64(batch)
		c.ops.Add(uint64(batch))
		t0 = time.Now()
	}
}
