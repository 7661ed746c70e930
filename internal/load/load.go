// Package load holds crosstalk's built-in workloads, in pure Go (plus one small
// amd64 assembly kernel). They are the lab's instruments: victims whose
// slowdown we measure (chase, server), polluters that each pollute one shared
// resource (splitlock: the memory bus; stream: memory bandwidth; cachethrash:
// the last-level cache; power: power and frequency), and a bystander (cpu)
// that keeps a core busy without touching shared resources and so must never
// be blamed.
//
// Every load stops by itself after Options.Duration (or earlier when its
// context is cancelled, or at Options.Until), reports Progress every Options.Interval and returns a
// Summary of what ran. Setup (allocating and initialising the working set,
// opening the server's sockets) happens before the clock starts and is not
// counted in Duration.
//
// The loads spend their time in hot loops that neither allocate nor take
// locks; each worker goroutine is locked to its own OS thread so that it can be
// pinned (taskset, cpusets) and seen as one thread by the host.
package load

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Roles of the built-in kinds.
const (
	RoleVictim    = "victim"
	RolePolluter  = "polluter"
	RoleBystander = "bystander"
)

// Directions: which way a metric gets better.
const (
	LowerIsBetter  = "lower"
	HigherIsBetter = "higher"
)

// MaxSplitLockDuration is the longest the splitlock load may run. Every split
// lock takes the memory bus lock and stalls memory accesses of every core of
// the physical host, other tenants' included, so splitlock refuses a longer
// Duration and stops at its Duration even when its context is never cancelled
// (each worker checks the deadline itself).
const MaxSplitLockDuration = 60 * time.Second

// MaxSize bounds Options.Size: large enough for any cache or DRAM experiment,
// small enough that a typo does not take the host's memory.
const MaxSize = 16 << 30

// MaxThreads bounds Options.Threads.
const MaxThreads = 1024

// MaxServerRate bounds the server's request rate (requests per second).
const MaxServerRate = 1e6

// DefaultInterval is the progress interval when Options.Interval is zero.
const DefaultInterval = 500 * time.Millisecond

// MinInterval is the shortest progress interval accepted.
const MinInterval = 10 * time.Millisecond

// DefaultServerRate is the server's request rate when Options.Rate is zero.
const DefaultServerRate = 2000

// Options configure a load.
type Options struct {
	// Duration is how long the load runs; required, > 0. The load stops by
	// itself after it. splitlock refuses more than MaxSplitLockDuration.
	Duration time.Duration
	// Interval between progress reports; 0 means DefaultInterval.
	Interval time.Duration
	// Size is the working set in bytes for chase, cachethrash, stream and
	// server; 0 means the kind's default. Other kinds refuse a size.
	Size int64
	// Rate is, for splitlock, the most locked operations per second over all
	// threads (0: unlimited); for cpu, the most loop iterations per second
	// (0: unlimited); and for server, the requests per second the open-loop
	// client sends (0: DefaultServerRate). Other kinds refuse a rate.
	Rate float64
	// Threads is the number of worker goroutines, each locked to an OS
	// thread; 0 means 1. For server it is the number of connections, each
	// served by its own thread (at least serverMinConns).
	Threads int
	// Until, if set, is a wall-clock time the load stops at even where its
	// Duration has not run out, its setup counted: a caller that schedules
	// the load's end (the lab) keeps that end when the process starts late,
	// or is stopped (SIGSTOP) before its clock starts.
	Until time.Time
}

// Progress is one report per interval, one JSON line; and, before the
// first, one of Type "start" that says when the work began.
type Progress struct {
	Type string `json:"type"` // "start" or "progress"
	Load string `json:"load"`
	// At, in the start line only, is the wall-clock time (RFC 3339) the
	// load's clock started, its setup done: a caller that times something
	// against the load's work (the lab's reaction to a polluter) counts
	// from it, not from the process start. On a busy CPU a process takes
	// tenths of a second to get there.
	At     string  `json:"at,omitempty"`
	T      float64 `json:"t"`      // seconds since start, at the end of the interval
	Ops    uint64  `json:"ops"`    // operations completed in this interval
	Rate   float64 `json:"rate"`   // operations per second in this interval
	Metric float64 `json:"metric"` // the kind's metric over this interval
	// Server only: latency percentiles of the requests answered in this
	// interval, in microseconds, measured from each request's scheduled send
	// time.
	P50us float64 `json:"p50_us,omitempty"`
	P95us float64 `json:"p95_us,omitempty"`
	P99us float64 `json:"p99_us,omitempty"`
}

// Summary describes a whole run, the last JSON line.
type Summary struct {
	Type      string  `json:"type"` // "summary"
	Load      string  `json:"load"`
	Role      string  `json:"role"`
	Seconds   float64 `json:"seconds"` // measured run time
	Ops       uint64  `json:"ops"`
	Rate      float64 `json:"rate"`      // operations per second
	Metric    string  `json:"metric"`    // e.g. "ns_per_access"
	Value     float64 `json:"value"`     // the metric over the whole run
	Unit      string  `json:"unit"`      // e.g. "ns"
	Direction string  `json:"direction"` // "lower" or "higher" is better
	OpName    string  `json:"op"`        // what one op is, e.g. "access"
	Threads   int     `json:"threads"`
	Size      int64   `json:"size_bytes,omitempty"`  // working set, for the kinds that have one
	RateLimit float64 `json:"rate_limit,omitempty"`  // splitlock: the cap on locked ops per second
	Target    float64 `json:"target_rate,omitempty"` // server: requests per second scheduled
	Impl      string  `json:"impl,omitempty"`        // power: "avx2-fma" or "math.FMA"
	Stopped   string  `json:"stopped"`               // "duration" or "cancelled"

	// Server only: latency percentiles over the run, in microseconds, the
	// requests sent, and those still unanswered at the end.
	P50us      float64 `json:"p50_us,omitempty"`
	P95us      float64 `json:"p95_us,omitempty"`
	P99us      float64 `json:"p99_us,omitempty"`
	MaxUs      float64 `json:"max_us,omitempty"`
	Sent       uint64  `json:"sent,omitempty"`
	Unanswered uint64  `json:"unanswered,omitempty"`
	Conns      int     `json:"conns,omitempty"`

	// sink holds the loads' results so the compiler cannot drop the work.
	sink uint64
}

// Kind describes a built-in load.
type Kind struct {
	Name      string `json:"name"`
	Role      string `json:"role"`      // RoleVictim, RolePolluter or RoleBystander
	Metric    string `json:"metric"`    // name of the metric
	Unit      string `json:"unit"`      // unit of the metric
	Direction string `json:"direction"` // LowerIsBetter or HigherIsBetter
	Op        string `json:"op"`        // what one op is
	// PerOp says the metric is a time per operation (busy time over
	// operations, as chase's ns_per_access): intervals combine weighted by
	// their operations, as the run's own value does, where an unweighted
	// mean would let an interval that did a few slow operations count as
	// much as one that did many fast ones.
	PerOp       bool   `json:"per_op,omitempty"`
	Description string `json:"description"`
}

// spec is a Kind plus what the engine needs to run it. The table below is
// read-only.
type spec struct {
	Kind
	defSize int64 // 0: the kind has no working set
	minSize int64 // per thread for partitioned kinds, else total
	perThrd bool  // Size is split between threads
	rate    bool  // the kind accepts Options.Rate
	// metric turns an interval's (or the run's) totals into the metric.
	metric func(ops uint64, busyNs int64, secs float64) float64
	// prepare allocates and initialises the load; the clock starts after.
	prepare func(opt Options) (runner, error)
}

func perSec(ops uint64, _ int64, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return float64(ops) / secs
}

var specs = [...]spec{
	{
		Kind: Kind{Name: "chase", Role: RoleVictim, Metric: "ns_per_access", Unit: "ns", Direction: LowerIsBetter, Op: "access", PerOp: true,
			Description: "random pointer chase over one Sattolo cycle of 64-byte slots (default 4 MiB: LLC-sensitive; 256 MiB: DRAM-sensitive); every load depends on the one before"},
		defSize: 4 << 20, minSize: 4 << 10,
		metric: func(ops uint64, busy int64, _ float64) float64 {
			if ops == 0 {
				return 0
			}
			return float64(busy) / float64(ops)
		},
		prepare: prepareChase,
	},
	{
		Kind: Kind{Name: "server", Role: RoleVictim, Metric: "p99_us", Unit: "us", Direction: LowerIsBetter, Op: "request",
			Description: "TCP server on 127.0.0.1 with an open-loop client in the same process (Rate requests/s, default 2000); each request chases 320 dependent loads through a table (default 2 MiB); latency from each request's scheduled send time"},
		defSize: 2 << 20, minSize: 4 << 10, rate: true,
		metric:  nil, // percentiles come from the runner
		prepare: prepareServer,
	},
	{
		Kind: Kind{Name: "splitlock", Role: RolePolluter, Metric: "locks_per_sec", Unit: "locks/s", Direction: HigherIsBetter, Op: "locked add",
			Description: "atomic 32-bit adds on an address straddling two cache lines, each one a bus lock that stalls the whole host; Rate caps locks/s; refuses more than 60 s"},
		rate: true, metric: perSec, prepare: prepareSplitLock,
	},
	{
		Kind: Kind{Name: "stream", Role: RolePolluter, Metric: "mb_per_sec", Unit: "MB/s", Direction: HigherIsBetter, Op: "triad element",
			Description: "STREAM triad a[i] = b[i] + s*c[i] over three float64 arrays (default 192 MiB in all, far beyond the LLC); 24 bytes moved per element, MB = 1e6 bytes"},
		defSize: 192 << 20, minSize: 24 << 10, perThrd: true,
		metric: func(ops uint64, _ int64, secs float64) float64 {
			return perSec(ops, 0, secs) * streamBytesPerElem / 1e6
		},
		prepare: prepareStream,
	},
	{
		Kind: Kind{Name: "cachethrash", Role: RolePolluter, Metric: "writes_per_sec", Unit: "writes/s", Direction: HigherIsBetter, Op: "write",
			Description: "random 8-byte read-modify-writes (xorshift addresses) across a buffer (default 32 MiB, about one LLC), evicting everyone else's lines"},
		defSize: 32 << 20, minSize: 4 << 10, perThrd: true,
		metric: perSec, prepare: prepareCacheThrash,
	},
	{
		Kind: Kind{Name: "power", Role: RolePolluter, Metric: "gflops", Unit: "GFLOP/s", Direction: HigherIsBetter, Op: "flop",
			Description: "independent AVX2 FMA chains on 12 YMM registers (math.FMA where AVX2/FMA is missing), drawing power and lowering the package's frequency"},
		metric:  func(ops uint64, _ int64, secs float64) float64 { return perSec(ops, 0, secs) / 1e9 },
		prepare: preparePower,
	},
	{
		Kind: Kind{Name: "cpu", Role: RoleBystander, Metric: "ops_per_sec", Unit: "ops/s", Direction: HigherIsBetter, Op: "loop iteration",
			Description: "integer arithmetic on registers and an 8 KiB table: busy but cache-friendly, it must never look like a polluter; Rate caps ops/s (a steady service using part of its CPU)"},
		rate: true, metric: perSec, prepare: prepareCPU,
	},
}

// Kinds returns all built-in kinds in a stable order: victims, polluters,
// bystander.
func Kinds() []Kind {
	out := make([]Kind, len(specs))
	for i := range specs {
		out[i] = specs[i].Kind
	}
	return out
}

// Names returns the kinds' names in the order of Kinds.
func Names() []string {
	out := make([]string, len(specs))
	for i := range specs {
		out[i] = specs[i].Name
	}
	return out
}

// Lookup finds a kind by name.
func Lookup(name string) (Kind, bool) {
	s, ok := lookup(name)
	if !ok {
		return Kind{}, false
	}
	return s.Kind, true
}

func lookup(name string) (*spec, bool) {
	for i := range specs {
		if specs[i].Name == name {
			return &specs[i], true
		}
	}
	return nil, false
}

// DefaultSize returns the kind's default working set in bytes, 0 when it has
// none.
func DefaultSize(kind string) int64 {
	if s, ok := lookup(kind); ok {
		return s.defSize
	}
	return 0
}

// ErrUnknownKind is wrapped by the error for a kind that does not exist.
var ErrUnknownKind = errors.New("unknown load kind")

// Validate checks opt for kind and returns it with defaults filled in.
func Validate(kind string, opt Options) (Options, error) {
	s, ok := lookup(kind)
	if !ok {
		return opt, fmt.Errorf("%w %q: valid kinds are %s", ErrUnknownKind, kind, strings.Join(Names(), ", "))
	}
	return s.validate(opt)
}

func (s *spec) validate(opt Options) (Options, error) {
	if opt.Duration <= 0 {
		return opt, fmt.Errorf("%s: duration must be > 0, got %v", s.Name, opt.Duration)
	}
	if s.Name == "splitlock" && opt.Duration > MaxSplitLockDuration {
		return opt, fmt.Errorf("splitlock: duration %v refused: split locks stall the memory bus of the whole physical host, so splitlock runs for at most %v", opt.Duration, MaxSplitLockDuration)
	}
	switch {
	case opt.Interval < 0:
		return opt, fmt.Errorf("%s: interval must be >= 0, got %v", s.Name, opt.Interval)
	case opt.Interval == 0:
		opt.Interval = DefaultInterval
	case opt.Interval < MinInterval:
		return opt, fmt.Errorf("%s: interval %v is shorter than the minimum %v", s.Name, opt.Interval, MinInterval)
	}
	switch {
	case opt.Threads < 0:
		return opt, fmt.Errorf("%s: threads must be >= 1, got %d", s.Name, opt.Threads)
	case opt.Threads == 0:
		opt.Threads = 1
	case opt.Threads > MaxThreads:
		return opt, fmt.Errorf("%s: threads %d is more than the maximum %d", s.Name, opt.Threads, MaxThreads)
	}
	if opt.Size < 0 {
		return opt, fmt.Errorf("%s: size must be >= 0, got %d", s.Name, opt.Size)
	}
	if s.defSize == 0 {
		if opt.Size != 0 {
			return opt, fmt.Errorf("%s: has no working set, so it takes no size (size applies to chase, server, stream, cachethrash)", s.Name)
		}
	} else {
		if opt.Size == 0 {
			opt.Size = s.defSize
		}
		if opt.Size > MaxSize {
			return opt, fmt.Errorf("%s: size %s is more than the maximum %s", s.Name, FormatSize(opt.Size), FormatSize(MaxSize))
		}
		min := s.minSize
		what := ""
		if s.perThrd {
			min *= int64(opt.Threads)
			what = fmt.Sprintf(" (%s per thread × %d threads)", FormatSize(s.minSize), opt.Threads)
		}
		if opt.Size < min {
			return opt, fmt.Errorf("%s: size %s is too small: at least %s%s", s.Name, FormatSize(opt.Size), FormatSize(min), what)
		}
	}
	if math.IsNaN(opt.Rate) || math.IsInf(opt.Rate, 0) || opt.Rate < 0 {
		return opt, fmt.Errorf("%s: rate must be a finite number >= 0, got %v", s.Name, opt.Rate)
	}
	if !s.rate && opt.Rate != 0 {
		return opt, fmt.Errorf("%s: takes no rate (rate applies to splitlock and server)", s.Name)
	}
	if s.Name == "server" {
		if opt.Rate == 0 {
			opt.Rate = DefaultServerRate
		}
		if opt.Rate > MaxServerRate {
			return opt, fmt.Errorf("server: rate %g is more than the maximum %g requests per second", opt.Rate, float64(MaxServerRate))
		}
	}
	return opt, nil
}

// Run runs the load kind until opt.Duration has passed or ctx is cancelled,
// whichever comes first, calling progress (if not nil) once per interval from
// a single goroutine, and returns the summary of what ran. An error means the
// load did not run (bad options, or setup failed).
func Run(ctx context.Context, kind string, opt Options, progress func(Progress)) (Summary, error) {
	s, ok := lookup(kind)
	if !ok {
		_, err := Validate(kind, opt)
		return Summary{}, err
	}
	opt, err := s.validate(opt)
	if err != nil {
		return Summary{}, err
	}
	if err := ctx.Err(); err != nil {
		return Summary{}, fmt.Errorf("%s: not started: %w", s.Name, err)
	}
	r, err := s.prepare(opt)
	if err != nil {
		return Summary{}, fmt.Errorf("%s: %w", s.Name, err)
	}
	return s.run(ctx, opt, r, progress), nil
}
