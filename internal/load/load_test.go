package load

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"
)

func TestKinds(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Kinds() {
		if seen[k.Name] {
			t.Errorf("duplicate kind %q", k.Name)
		}
		seen[k.Name] = true
		if k.Role != RoleVictim && k.Role != RolePolluter && k.Role != RoleBystander {
			t.Errorf("%s: role %q", k.Name, k.Role)
		}
		if k.Direction != LowerIsBetter && k.Direction != HigherIsBetter {
			t.Errorf("%s: direction %q", k.Name, k.Direction)
		}
		if k.Metric == "" || k.Unit == "" || k.Description == "" || k.Op == "" {
			t.Errorf("%s: incomplete: %+v", k.Name, k)
		}
		if got, ok := Lookup(k.Name); !ok || got != k {
			t.Errorf("Lookup(%q) = %+v, %v", k.Name, got, ok)
		}
	}
	want := []string{"chase", "server", "splitlock", "stream", "cachethrash", "power", "cpu"}
	if got := Names(); !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	if _, ok := Lookup("nope"); ok {
		t.Error("Lookup(nope) found something")
	}
}

func TestValidate(t *testing.T) {
	sec := time.Second
	for _, tc := range []struct {
		name, kind string
		opt        Options
		err        string // "" = valid
	}{
		{"ok", "chase", Options{Duration: sec}, ""},
		{"unknown kind", "bogus", Options{Duration: sec}, "valid kinds are chase, server, splitlock, stream, cachethrash, power, cpu"},
		{"zero duration", "chase", Options{}, "duration must be > 0"},
		{"negative duration", "cpu", Options{Duration: -sec}, "duration must be > 0"},
		{"splitlock 60s ok", "splitlock", Options{Duration: 60 * sec}, ""},
		{"splitlock 61s refused", "splitlock", Options{Duration: 61 * sec}, "runs for at most 1m0s"},
		{"negative interval", "cpu", Options{Duration: sec, Interval: -1}, "interval must be >= 0"},
		{"tiny interval", "cpu", Options{Duration: sec, Interval: time.Millisecond}, "shorter than the minimum"},
		{"negative threads", "cpu", Options{Duration: sec, Threads: -1}, "threads must be >= 1"},
		{"too many threads", "cpu", Options{Duration: sec, Threads: MaxThreads + 1}, "more than the maximum"},
		{"negative size", "chase", Options{Duration: sec, Size: -1}, "size must be >= 0"},
		{"chase too small", "chase", Options{Duration: sec, Size: 1024}, "too small: at least 4KiB"},
		{"stream too small per thread", "stream", Options{Duration: sec, Size: 48 << 10, Threads: 4}, "at least 96KiB (24KiB per thread × 4 threads)"},
		{"cachethrash too small", "cachethrash", Options{Duration: sec, Size: 100}, "too small"},
		{"server too small", "server", Options{Duration: sec, Size: 64}, "too small"},
		{"size too large", "chase", Options{Duration: sec, Size: MaxSize + 1}, "more than the maximum"},
		{"size on cpu", "cpu", Options{Duration: sec, Size: 4096}, "takes no size"},
		{"size on splitlock", "splitlock", Options{Duration: sec, Size: 4096}, "takes no size"},
		{"negative rate", "splitlock", Options{Duration: sec, Rate: -1}, "rate must be a finite number >= 0"},
		{"NaN rate", "server", Options{Duration: sec, Rate: math.NaN()}, "finite"},
		{"inf rate", "server", Options{Duration: sec, Rate: math.Inf(1)}, "finite"},
		{"rate on chase", "chase", Options{Duration: sec, Rate: 5}, "takes no rate"},
		{"server rate too high", "server", Options{Duration: sec, Rate: 2e6}, "more than the maximum"},
		{"splitlock rate ok", "splitlock", Options{Duration: sec, Rate: 1000}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Validate(tc.kind, tc.opt)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.err != "" && err == nil:
				t.Fatalf("no error, want %q", tc.err)
			case tc.err != "" && !strings.Contains(err.Error(), tc.err):
				t.Fatalf("error %q does not contain %q", err, tc.err)
			}
			// Run refuses the same options without running anything.
			if tc.err != "" {
				if _, err := Run(context.Background(), tc.kind, tc.opt, nil); err == nil {
					t.Fatal("Run accepted invalid options")
				}
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	opt, err := Validate("server", Options{Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if opt.Interval != DefaultInterval || opt.Threads != 1 || opt.Size != 2<<20 || opt.Rate != DefaultServerRate {
		t.Errorf("defaults not filled: %+v", opt)
	}
	for kind, size := range map[string]int64{"chase": 4 << 20, "stream": 192 << 20, "cachethrash": 32 << 20, "cpu": 0, "power": 0, "splitlock": 0} {
		if got := DefaultSize(kind); got != size {
			t.Errorf("DefaultSize(%s) = %d, want %d", kind, got, size)
		}
	}
}

// runKind runs a load and collects its progress lines.
func runKind(t *testing.T, ctx context.Context, kind string, opt Options) (Summary, []Progress) {
	t.Helper()
	var ps []Progress
	s, err := Run(ctx, kind, opt, func(p Progress) { ps = append(ps, p) })
	if err != nil {
		t.Fatal(err)
	}
	return s, ps
}

// Every kind runs briefly, reports progress and a sane summary. splitlock
// runs 250 ms here (the tests' split-lock time must stay under 2 s).
func TestEachKind(t *testing.T) {
	sizes := map[string]int64{"stream": 24 << 20, "cachethrash": 8 << 20}
	for _, k := range Kinds() {
		t.Run(k.Name, func(t *testing.T) {
			opt := Options{Duration: 250 * time.Millisecond, Interval: 100 * time.Millisecond, Size: sizes[k.Name]}
			s, ps := runKind(t, context.Background(), k.Name, opt)
			b, _ := json.Marshal(s)
			t.Logf("%s", b)
			if len(ps) < 1 {
				t.Fatal("no progress")
			}
			// The start line first, at the clock's start.
			if ps[0].Type != "start" || ps[0].Load != k.Name || ps[0].T != 0 {
				t.Fatalf("first line %+v, want the start", ps[0])
			}
			began, err := time.Parse(time.RFC3339Nano, ps[0].At)
			if err != nil {
				t.Fatalf("start line's time: %v", err)
			}
			if d := time.Since(began); d < time.Duration(s.Seconds*0.9*float64(time.Second)) || d > 10*time.Second {
				t.Errorf("start line says the clock started %v ago, the load ran %.3f s", d, s.Seconds)
			}
			ps = ps[1:]
			if len(ps) < 1 {
				t.Fatal("no progress")
			}
			var sum uint64
			prevT := 0.0
			for _, p := range ps {
				if p.Type != "progress" || p.Load != k.Name || p.T <= prevT || p.At != "" {
					t.Errorf("bad progress line %+v after t=%v", p, prevT)
				}
				prevT = p.T
				sum += p.Ops
			}
			if sum != s.Ops {
				t.Errorf("progress ops add up to %d, summary says %d", sum, s.Ops)
			}
			if s.Type != "summary" || s.Load != k.Name || s.Role != k.Role || s.Metric != k.Metric || s.Unit != k.Unit || s.Direction != k.Direction {
				t.Errorf("summary does not match kind %+v: %+v", k, s)
			}
			if s.Ops == 0 || s.Value <= 0 || s.Rate <= 0 || math.IsInf(s.Value, 0) || math.IsNaN(s.Value) {
				t.Errorf("not sane: ops %d value %v rate %v", s.Ops, s.Value, s.Rate)
			}
			if s.Seconds < 0.24 || s.Seconds > 0.5 {
				t.Errorf("ran %.3f s, want about 0.25", s.Seconds)
			}
			if s.Stopped != "duration" || s.Threads != 1 {
				t.Errorf("stopped %q threads %d", s.Stopped, s.Threads)
			}
			if k.Name == "server" {
				if !(s.P50us > 0 && s.P50us <= s.P95us && s.P95us <= s.P99us && s.P99us <= s.MaxUs) {
					t.Errorf("percentiles out of order: %v %v %v max %v", s.P50us, s.P95us, s.P99us, s.MaxUs)
				}
				if s.Value != s.P99us || s.Sent < 400 || s.Unanswered > s.Sent/10 {
					t.Errorf("server summary: %+v", s)
				}
				for _, p := range ps {
					if p.Ops > 0 && !(p.P50us > 0 && p.P50us <= p.P95us && p.P95us <= p.P99us && p.Metric == p.P99us) {
						t.Errorf("interval percentiles: %+v", p)
					}
				}
			}
		})
	}
}

func TestThreads(t *testing.T) {
	for _, kind := range []string{"chase", "cachethrash", "stream", "cpu"} {
		s, _ := runKind(t, context.Background(), kind, Options{Duration: 150 * time.Millisecond, Threads: 2, Size: DefaultSize(kind) / 8})
		if s.Threads != 2 || s.Ops == 0 || s.Value <= 0 {
			t.Errorf("%s with 2 threads: %+v", kind, s)
		}
	}
}

// A random chase over 64 KiB stays in L1/L2; over 64 MiB it misses the LLC
// (32 MiB here) and the TLB. The order holds on any machine.
func TestChaseSmallFasterThanLarge(t *testing.T) {
	run := func(size int64) float64 {
		s, _ := runKind(t, context.Background(), "chase", Options{Duration: 300 * time.Millisecond, Size: size})
		return s.Value
	}
	small, large := run(64<<10), run(64<<20)
	t.Logf("chase: 64KiB %.2f ns, 64MiB %.2f ns, ratio %.1f", small, large, large/small)
	if !(small < large) {
		t.Errorf("64KiB chase (%.2f ns) not faster than 64MiB (%.2f ns)", small, large)
	}
}

func TestCycleVisitsEverySlot(t *testing.T) {
	buf := buildCycle(64*1000, 7)
	n := len(buf) / slotWords
	seen := make([]bool, n)
	p := uint64(0)
	for i := 0; i < n; i++ {
		if p%slotWords != 0 || seen[p/slotWords] {
			t.Fatalf("step %d: slot %d revisited or misaligned before the cycle closed", i, p)
		}
		seen[p/slotWords] = true
		p = buf[p]
	}
	if p != 0 {
		t.Fatalf("cycle did not close after %d steps", n)
	}
}

func TestSplitAddrStraddles(t *testing.T) {
	for i := 0; i < 10; i++ {
		buf := make([]byte, 256+i) // different allocations, different alignments
		p := uintptr(unsafe.Pointer(splitAddr(buf)))
		if p%64 != 62 || p/64 == (p+3)/64 {
			t.Fatalf("address %#x does not straddle a line", p)
		}
		base := uintptr(unsafe.Pointer(&buf[0]))
		if p < base || p+4 > base+uintptr(len(buf)) {
			t.Fatalf("address %#x outside the buffer", p)
		}
	}
}

func TestSplitLockRefuses61s(t *testing.T) {
	start := time.Now()
	_, err := Run(context.Background(), "splitlock", Options{Duration: 61 * time.Second}, nil)
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 100*time.Millisecond {
		t.Fatal("refusal took too long: did it run?")
	}
}

// 300 ms at 2000 locks/s: 600 split locks, a negligible disturbance.
func TestSplitLockRate(t *testing.T) {
	const rate = 2000
	s, _ := runKind(t, context.Background(), "splitlock", Options{Duration: 300 * time.Millisecond, Rate: rate, Interval: 100 * time.Millisecond})
	t.Logf("splitlock capped at %d: %.0f locks/s over %.3f s", rate, s.Value, s.Seconds)
	if s.Value > 1.5*rate || s.Value < 0.2*rate {
		t.Errorf("rate %.0f locks/s, cap %d", s.Value, rate)
	}
	if s.RateLimit != rate {
		t.Errorf("rate_limit = %v", s.RateLimit)
	}
}

// A paced bystander keeps to its rate: it uses part of its CPU, not all.
func TestCPURate(t *testing.T) {
	const rate = 5e7
	s, _ := runKind(t, context.Background(), "cpu", Options{Duration: 300 * time.Millisecond, Rate: rate, Interval: 100 * time.Millisecond})
	if s.Value > 1.3*rate || s.Value < 0.3*rate {
		t.Errorf("cpu paced at %.0f: ran %.0f ops/s", float64(rate), s.Value)
	}
}

// Cancelling the context stops a 10 s load promptly, and Run still returns
// the summary of what ran.
func TestCancelStopsPromptly(t *testing.T) {
	for _, kind := range []string{"chase", "server", "stream", "power"} {
		t.Run(kind, func(t *testing.T) {
			size := map[string]int64{"stream": 24 << 20}[kind]
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var cancelled time.Time
			time.AfterFunc(150*time.Millisecond, func() { cancelled = time.Now(); cancel() })
			s, ps := runKind(t, ctx, kind, Options{Duration: 10 * time.Second, Size: size})
			late := time.Since(cancelled)
			t.Logf("%s returned %v after cancel; ran %.3f s", kind, late, s.Seconds)
			if late > 150*time.Millisecond {
				t.Errorf("took %v to stop after cancel", late)
			}
			if s.Stopped != "cancelled" || s.Ops == 0 || len(ps) == 0 || s.Seconds > 1 {
				t.Errorf("summary after cancel: %+v, %d progress lines", s, len(ps))
			}
		})
	}
}

// A progress callback that blocks does not keep the load running past its
// deadline.
func TestSlowProgressCallback(t *testing.T) {
	start := time.Now()
	calls := 0
	s, err := Run(context.Background(), "cpu", Options{Duration: 200 * time.Millisecond, Interval: 50 * time.Millisecond}, func(Progress) {
		if calls++; calls == 1 {
			time.Sleep(300 * time.Millisecond)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Seconds > 0.21 || s.Stopped != "duration" {
		t.Errorf("summary: %+v", s)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Run took %v", took)
	}
	if calls < 2 {
		t.Errorf("%d progress calls, want the tick and the final one", calls)
	}
}

// Until ends a load before its Duration, its setup counted: a load whose
// start was delayed (a slow exec, a SIGSTOP before its clock started) still
// ends when its caller scheduled it to.
func TestUntilEndsTheLoadBeforeItsDuration(t *testing.T) {
	for _, tc := range []struct {
		kind string
		opt  Options
	}{
		{"cpu", Options{}},
		{"chase", Options{Size: 64 << 20}}, // a setup of its own before the clock starts
		{"server", Options{Rate: 1000}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			start := time.Now()
			opt := tc.opt
			opt.Duration, opt.Interval, opt.Until = 30*time.Second, 50*time.Millisecond, start.Add(400*time.Millisecond)
			s, err := Run(context.Background(), tc.kind, opt, nil)
			if err != nil {
				t.Fatal(err)
			}
			// The summary's seconds run from the clock's start, after setup.
			if took := time.Since(start); took > 5*time.Second || s.Seconds > 0.5 || s.Stopped != "duration" {
				t.Errorf("Run took %v for a load due to stop 0.4s after it was called: %+v", took, s)
			}
		})
	}
	// An end already past runs nothing, and says so in its summary.
	s, err := Run(context.Background(), "cpu", Options{Duration: 30 * time.Second, Until: time.Now().Add(-time.Second)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Seconds != 0 {
		t.Errorf("a load whose end had passed ran %.3fs", s.Seconds)
	}
}

func TestCancelledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, "cpu", Options{Duration: time.Second}, nil); err == nil {
		t.Fatal("Run started with a cancelled context")
	}
}

// The server closes every socket and goroutine before Run returns.
func TestServerCleansUp(t *testing.T) {
	before := runtime.NumGoroutine()
	s, _ := runKind(t, context.Background(), "server", Options{Duration: 100 * time.Millisecond, Threads: 6, Rate: 5000})
	if s.Conns != 6 {
		t.Errorf("conns = %d, want 6", s.Conns)
	}
	deadline := time.Now().Add(time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after Run, %d before", n, before)
	}
}

func TestHistQuantiles(t *testing.T) {
	var h hist
	rng := rand.New(rand.NewPCG(1, 2))
	vals := make([]int64, 20000)
	for i := range vals {
		vals[i] = int64(rng.ExpFloat64()*50e3) + 1000 // ns, exponential around 50 µs
		h.record(vals[i])
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.95, 0.99, 0.999, 1} {
		exact := float64(vals[int(math.Ceil(q*float64(len(vals))))-1])
		got := h.quantile(q)
		if math.Abs(got-exact)/exact > 0.01 {
			t.Errorf("q%.3f = %.0f, exact %.0f", q, got, exact)
		}
	}
	if h.quantile(1) != float64(vals[len(vals)-1]) {
		t.Errorf("max %.0f, want %d", h.quantile(1), vals[len(vals)-1])
	}
	// Every value maps into range and its bucket contains it.
	for _, v := range []uint64{0, 1, 127, 255, 256, 257, 1000, 1 << 40, math.MaxInt64} {
		i := histIndex(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("index %d for %d out of range", i, v)
		}
		if mid := histValue(i); math.Abs(mid-float64(v)) > float64(v)/128+1 {
			t.Errorf("value %d in bucket %d with midpoint %.0f", v, i, mid)
		}
	}
	h.reset()
	if h.n != 0 || h.quantile(0.5) != 0 {
		t.Error("reset left samples")
	}
}

func TestPowerKernelsAgree(t *testing.T) {
	var a, b powerAcc
	for i := range a {
		a[i] = 1 + float64(i)*1e-3
	}
	b = a
	fmaPortable(100000, &a, powerMul, powerAdd)
	if !haveAVX2FMA() {
		t.Skip("no AVX2/FMA here")
	}
	fmaAVX2(100000, &b, powerMul, powerAdd)
	for i := 0; i < 8; i++ {
		if a[i] != b[i] {
			t.Errorf("acc[%d]: math.FMA %v, AVX2 %v", i, a[i], b[i])
		}
	}
	for i, v := range b {
		if !(v > 0.5 && v < 2) {
			t.Errorf("acc[%d] = %v drifted away from the fixed point 1", i, v)
		}
	}
	fmaAVX2(0, &b, powerMul, powerAdd) // n = 0 must not loop forever
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  bool
	}{
		{"4096", 4096, false},
		{"0", 0, false},
		{"4MiB", 4 << 20, false},
		{"4mib", 4 << 20, false},
		{"256M", 256 << 20, false},
		{"256Mi", 256 << 20, false},
		{"32KiB", 32 << 10, false},
		{"32K", 32 << 10, false},
		{"1GiB", 1 << 30, false},
		{"2G", 2 << 30, false},
		{"1TiB", 1 << 40, false},
		{"1.5GiB", 3 << 29, false},
		{"100MB", 100e6, false},
		{"1KB", 1000, false},
		{"512B", 512, false},
		{" 4 MiB ", 4 << 20, false},
		{"", 0, true},
		{"MiB", 0, true},
		{"-4MiB", 0, true},
		{"4XB", 0, true},
		{"1e6", 0, true},
		{"0x100", 0, true},
		{"1.5", 0, true},
		{"NaN", 0, true},
		{"inf", 0, true},
		{"9999999999999999999", 0, true},
		{"9000000000G", 0, true},
		{"8589934592GiB", 0, true},
	} {
		got, err := ParseSize(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{4 << 20: "4MiB", 1536 << 10: "1536KiB", 1000: "1000B", 0: "0B", 3 << 30: "3GiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
		if back, err := ParseSize(FormatSize(n)); err != nil || back != n {
			t.Errorf("round trip of %d: %d, %v", n, back, err)
		}
	}
}

func BenchmarkChase4MiB(b *testing.B) {
	buf := buildCycle(4<<20, 1)
	b.ResetTimer()
	p := chaseN(buf, 0, b.N)
	b.StopTimer()
	if p == math.MaxUint64 {
		b.Log(p)
	}
}

func BenchmarkChase64KiB(b *testing.B) {
	buf := buildCycle(64<<10, 1)
	b.ResetTimer()
	p := chaseN(buf, 0, b.N)
	b.StopTimer()
	if p == math.MaxUint64 {
		b.Log(p)
	}
}

func BenchmarkTriad1MiB(b *testing.B) {
	n := (1 << 20) / streamBytesPerElem
	a, x, y := make([]float64, n), make([]float64, n), make([]float64, n)
	b.SetBytes(int64(n * streamBytesPerElem))
	for i := 0; i < b.N; i++ {
		triad(a, x, y, 3)
	}
}
