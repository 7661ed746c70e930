package load

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// runner is a prepared load. launch starts its goroutines; they run until the
// stopper says stop; wait blocks until every goroutine has returned and every
// resource is released; totals reads the cumulative counters (safe while
// running).
type runner interface {
	launch(st *stopper)
	wait()
	totals() (ops uint64, busyNs int64)
	// describe fills the kind-specific fields of the summary after wait.
	describe(s *Summary)
}

// latencyRunner is a runner that measures latencies (server).
type latencyRunner interface {
	runner
	// interval returns the percentiles (µs) of the samples since the last
	// call and resets them; ok is false when there were none.
	interval() (p50, p95, p99 float64, ok bool)
}

// stopper tells workers when to stop: at the deadline, which every worker
// checks itself, or when stop is called (context cancelled, coordinator done).
type stopper struct {
	deadline time.Time
	flag     atomic.Bool
	once     sync.Once
	ch       chan struct{}
}

func newStopper(deadline time.Time) *stopper {
	return &stopper{deadline: deadline, ch: make(chan struct{})}
}

func (s *stopper) stop() {
	s.once.Do(func() {
		s.flag.Store(true)
		close(s.ch)
	})
}

// done reports whether workers must stop, given the time now.
func (s *stopper) done(now time.Time) bool {
	return s.flag.Load() || !now.Before(s.deadline)
}

// sleep waits d, or less when stopped or at the deadline; it reports whether
// the worker may go on.
func (s *stopper) sleep(d time.Duration) bool {
	now := time.Now()
	if left := s.deadline.Sub(now); d > left {
		d = left
	}
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-s.ch:
			t.Stop()
		}
	}
	return !s.done(time.Now())
}

// counter is one worker's cumulative counters, padded to its own cache line
// so workers do not false-share.
type counter struct {
	ops  atomic.Uint64
	busy atomic.Int64 // ns spent in timed chunks (chase)
	sink uint64       // the worker's result, written once at the end
	_    [40]byte
}

// pool runs one function per worker, each locked to an OS thread.
type pool struct {
	threads int
	ctr     []counter
	work    func(id int, c *counter, st *stopper)
	wg      sync.WaitGroup
	desc    func(s *Summary)
}

func newPool(threads int, work func(id int, c *counter, st *stopper)) *pool {
	return &pool{threads: threads, ctr: make([]counter, threads), work: work}
}

func (p *pool) launch(st *stopper) {
	p.wg.Add(p.threads)
	for i := 0; i < p.threads; i++ {
		go func(id int) {
			defer p.wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			p.work(id, &p.ctr[id], st)
		}(i)
	}
}

func (p *pool) wait() { p.wg.Wait() }

func (p *pool) totals() (ops uint64, busy int64) {
	for i := range p.ctr {
		ops += p.ctr[i].ops.Load()
		busy += p.ctr[i].busy.Load()
	}
	return ops, busy
}

func (p *pool) describe(s *Summary) {
	for i := range p.ctr {
		s.sink ^= p.ctr[i].sink
	}
	if p.desc != nil {
		p.desc(s)
	}
}

// chunker adapts how much work a worker does between two looks at the clock,
// so that the clock costs nothing measurable and stopping stays prompt:
// chunks last between about 100 µs and 1 ms.
type chunker struct {
	n, min, max int
}

func (c *chunker) adapt(took time.Duration) {
	switch {
	case took < 100*time.Microsecond && c.n < c.max:
		c.n *= 2
	case took > time.Millisecond && c.n > c.min:
		c.n /= 2
	}
}

// run drives a prepared runner: starts the clock, reports progress at every
// interval, stops at the deadline or on cancellation and builds the summary.
func (s *spec) run(ctx context.Context, opt Options, r runner, progress func(Progress)) Summary {
	start := time.Now()
	deadline := start.Add(opt.Duration)
	if !opt.Until.IsZero() && opt.Until.Before(deadline) {
		deadline = opt.Until
	}
	if deadline.Before(start) {
		deadline = start // an end already past: run nothing
	}
	st := newStopper(deadline)
	stopOnCancel := context.AfterFunc(ctx, st.stop)
	defer stopOnCancel()
	if progress != nil {
		progress(Progress{Type: "start", Load: s.Name, At: start.UTC().Format(time.RFC3339Nano)})
	}
	r.launch(st)

	lr, _ := r.(latencyRunner)
	var lastOps uint64
	var lastBusy int64
	lastT := start
	emit := func(now time.Time) {
		ops, busy := r.totals()
		dOps, dBusy := ops-lastOps, busy-lastBusy
		secs := now.Sub(lastT).Seconds()
		p := Progress{Type: "progress", Load: s.Name, T: now.Sub(start).Seconds(), Ops: dOps}
		if secs > 0 {
			p.Rate = float64(dOps) / secs
		}
		if lr != nil {
			if p50, p95, p99, ok := lr.interval(); ok {
				p.P50us, p.P95us, p.P99us, p.Metric = p50, p95, p99, p99
			}
		} else {
			p.Metric = s.metric(dOps, dBusy, secs)
		}
		lastOps, lastBusy, lastT = ops, busy, now
		if progress != nil {
			progress(p)
		}
	}

	timer := time.NewTimer(opt.Interval)
	defer timer.Stop()
	stopped := "duration"
	for k := 1; ; {
		next := start.Add(time.Duration(k) * opt.Interval)
		if !next.Before(st.deadline) {
			next = st.deadline
		}
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-st.ch:
		}
		now := time.Now()
		if st.flag.Load() {
			stopped = "cancelled"
			break
		}
		if !now.Before(st.deadline) {
			break
		}
		emit(now)
		// The next tick after now: a slow progress callback skips ticks
		// instead of bunching them.
		k = int(now.Sub(start)/opt.Interval) + 1
	}
	st.stop()
	r.wait()
	// Workers stop at the deadline by themselves (within one chunk), even
	// while a slow progress callback holds this goroutine.
	end := time.Now()
	if end.After(st.deadline) {
		end = st.deadline
	}
	if ops, _ := r.totals(); ops > lastOps || lastT == start {
		emit(end)
	}
	if ctx.Err() != nil {
		stopped = "cancelled"
	}

	ops, busy := r.totals()
	secs := end.Sub(start).Seconds()
	sum := Summary{
		Type: "summary", Load: s.Name, Role: s.Role, Seconds: secs, Ops: ops,
		Metric: s.Kind.Metric, Unit: s.Unit, Direction: s.Direction, OpName: s.Op,
		Threads: opt.Threads, Size: opt.Size, Stopped: stopped,
	}
	if secs > 0 {
		sum.Rate = float64(ops) / secs
	}
	if s.metric != nil {
		sum.Value = s.metric(ops, busy, secs)
	}
	r.describe(&sum)
	return sum
}
