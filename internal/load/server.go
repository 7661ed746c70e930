package load

import (
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// serverSteps is the work of one request: dependent loads through the
	// table's cycle, a few µs when the table sits in the LLC.
	serverSteps = 320
	// serverMinConns: the client spreads requests round-robin over at least
	// this many connections, so one slow response holds back few others.
	serverMinConns = 4
	// serverDrain is how long the client waits for outstanding responses
	// after the last send; what is still missing then counts as unanswered.
	serverDrain = 50 * time.Millisecond
	// serverMaxSleep bounds one sleep of the sender so it notices a stop.
	serverMaxSleep = 5 * time.Millisecond
	frameLen       = 16
)

// server is the latency victim: a TCP server and an open-loop client in one
// process. Request: scheduled send time (ns since start) and the start slot
// of the chase; response: the scheduled time echoed and the chase's end.
type server struct {
	table  []uint64
	rate   float64
	conns  int
	ln     net.Listener
	cli    []net.Conn
	srv    []net.Conn
	start  time.Time
	period float64 // ns between scheduled sends

	sent     atomic.Uint64
	answered atomic.Uint64
	sink     atomic.Uint64

	mu      sync.Mutex
	iv, all hist

	sender  sync.WaitGroup
	workers sync.WaitGroup
}

func prepareServer(opt Options) (r runner, err error) {
	s := &server{
		table:  buildCycle(opt.Size, 2),
		rate:   opt.Rate,
		conns:  max(opt.Threads, serverMinConns),
		period: 1e9 / opt.Rate,
	}
	defer func() {
		if err != nil {
			s.closeAll()
		}
	}()
	s.ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	for i := 0; i < s.conns; i++ {
		c, err := net.Dial("tcp", s.ln.Addr().String())
		if err != nil {
			return nil, err
		}
		s.cli = append(s.cli, c)
		a, err := s.ln.Accept()
		if err != nil {
			return nil, err
		}
		s.srv = append(s.srv, a)
	}
	return s, nil
}

func (s *server) closeAll() {
	for _, c := range s.cli {
		c.Close()
	}
	for _, c := range s.srv {
		c.Close()
	}
	if s.ln != nil {
		s.ln.Close()
	}
}

func (s *server) launch(st *stopper) {
	s.start = time.Now()
	for _, c := range s.srv {
		s.workers.Add(1)
		go s.serve(c)
	}
	for _, c := range s.cli {
		s.workers.Add(1)
		go s.receive(c)
	}
	s.sender.Add(1)
	go s.send(st)
}

// serve answers requests on one connection from its own OS thread.
func (s *server) serve(c net.Conn) {
	defer s.workers.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var req, resp [frameLen]byte
	slots := uint64(len(s.table) / slotWords)
	for {
		if _, err := io.ReadFull(c, req[:]); err != nil {
			return
		}
		startSlot := uint64(binary.LittleEndian.Uint32(req[8:])) % slots
		end := chaseN(s.table, startSlot*slotWords, serverSteps)
		copy(resp[:8], req[:8])
		binary.LittleEndian.PutUint64(resp[8:], end)
		if _, err := c.Write(resp[:]); err != nil {
			return
		}
	}
}

// receive reads responses on one client connection and records latencies
// from each request's scheduled send time.
func (s *server) receive(c net.Conn) {
	defer s.workers.Done()
	var resp [frameLen]byte
	var sink uint64
	defer func() { s.sink.Add(sink) }()
	for {
		if _, err := io.ReadFull(c, resp[:]); err != nil {
			return
		}
		now := int64(time.Since(s.start))
		sched := int64(binary.LittleEndian.Uint64(resp[:8]))
		sink += binary.LittleEndian.Uint64(resp[8:])
		lat := now - sched
		s.mu.Lock()
		s.iv.record(lat)
		s.all.record(lat)
		s.mu.Unlock()
		s.answered.Add(1)
	}
}

// send is the open-loop client: request k is due at k×period after start,
// whatever happened to earlier ones. When it wakes late it sends everything
// due at once, each request stamped with its own scheduled time, so lateness
// is charged to latency (no coordinated omission).
func (s *server) send(st *stopper) {
	defer s.sender.Done()
	// Locked for good: the thread gets a 1 ns timer slack and exits with
	// this goroutine instead of going back to the runtime's pool.
	runtime.LockOSThread()
	preciseTimers()
	var req [frameLen]byte
	x := uint64(0x853c49e6748fea9b)
	for k := uint64(0); ; {
		now := time.Since(s.start)
		if st.done(s.start.Add(now)) {
			return
		}
		due := time.Duration(float64(k) * s.period)
		if due > now {
			preciseSleep(min(due-now, serverMaxSleep))
			continue
		}
		for ; time.Duration(float64(k)*s.period) <= now; k++ {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			binary.LittleEndian.PutUint64(req[:8], uint64(float64(k)*s.period))
			binary.LittleEndian.PutUint32(req[8:], uint32(x>>32))
			c := s.cli[k%uint64(len(s.cli))]
			if _, err := c.Write(req[:]); err != nil {
				return
			}
			s.sent.Add(1)
		}
	}
}

func (s *server) wait() {
	// A sender blocked on a full socket (server stalled) must not hold us.
	for _, c := range s.cli {
		c.SetWriteDeadline(time.Now().Add(serverDrain))
	}
	s.sender.Wait()
	deadline := time.Now().Add(serverDrain)
	for s.answered.Load() < s.sent.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	s.closeAll()
	s.workers.Wait()
}

func (s *server) totals() (uint64, int64) { return s.answered.Load(), 0 }

func (s *server) interval() (p50, p95, p99 float64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.iv.n == 0 {
		return 0, 0, 0, false
	}
	p50, p95, p99 = s.iv.quantile(0.50)/1e3, s.iv.quantile(0.95)/1e3, s.iv.quantile(0.99)/1e3
	s.iv.reset()
	return p50, p95, p99, true
}

func (s *server) describe(sum *Summary) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum.P50us = s.all.quantile(0.50) / 1e3
	sum.P95us = s.all.quantile(0.95) / 1e3
	sum.P99us = s.all.quantile(0.99) / 1e3
	sum.MaxUs = float64(s.all.max) / 1e3
	sum.Value = sum.P99us
	sum.Target = s.rate
	sum.Sent = s.sent.Load()
	sum.Unanswered = sum.Sent - s.answered.Load()
	sum.Conns = s.conns
	sum.sink ^= s.sink.Load()
}
