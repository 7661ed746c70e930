package sense

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

// rdHost is a tree with tenants' cgroup2 files and their threads' schedstat,
// written as a test goes.
type rdHost struct {
	t    *testing.T
	root string
	h    *host.Host
}

func newRDHost(t *testing.T) *rdHost {
	root := t.TempDir()
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return &rdHost{t: t, root: root, h: h}
}

func (r *rdHost) write(p, content string) {
	r.t.Helper()
	full := filepath.Join(r.root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// usage sets a tenant's CPU time (µs) and PSI some total (µs).
func (r *rdHost) usage(cg string, usageUS, psiUS int64) {
	r.write("cg2"+cg+"/cpu.stat", fmt.Sprintf("usage_usec %d\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n", usageUS))
	r.write("cg2"+cg+"/cpu.pressure", fmt.Sprintf("some avg10=0.00 avg60=0.00 avg300=0.00 total=%d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", psiUS))
}

// delay sets a thread's cumulative run delay.
func (r *rdHost) delay(tid int, d time.Duration) {
	r.write(fmt.Sprintf("proc/%d/schedstat", tid), fmt.Sprintf("123456 %d 42\n", d.Nanoseconds()))
}

var (
	rdV2     = cgroup.Layout{Mode: cgroup.ModeV2, V2: "/cg2", V2Controllers: []string{"cpu"}}
	rdHybrid = cgroup.Layout{Mode: cgroup.ModeHybrid, V2: "/cg2", V1: map[string]string{"cpu": "/cg1"}}
)

var rdEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Threads read in turns: the run delay is read about once per RunDelayEvery,
// and every rate is right over the window it was measured, however long,
// while the true rate changes under it.
func TestRunDelayTurnsGiveWindowRates(t *testing.T) {
	r := newRDHost(t)
	ten := Tenant{ID: "/vm", Cgroup: "/vm", Threads: []int{11, 12}}
	now := rdEpoch
	files := r.h.NewRereader(8) // the agent's way: schedstat read through its buffer
	defer files.Close()
	c := CgroupStats{Host: r.h, Layout: rdHybrid, Files: files, Now: func() time.Time { return now }, RunDelayEvery: 2 * time.Second}
	r.write("cg1/vm/cpu.stat", "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n")
	const step = 500 * time.Millisecond
	// True run delay: thread 11 at 0.2 s/s for the first 10 s and 0.8 s/s
	// after; thread 12 at 0.1 s/s throughout.
	truth := func(at time.Time) (d11, d12 time.Duration) {
		s := at.Sub(rdEpoch).Seconds()
		a := 0.2 * min(s, 10)
		if s > 10 {
			a += 0.8 * (s - 10)
		}
		return time.Duration(a * 1e9), time.Duration(0.1 * s * 1e9)
	}
	var prev *TenantStats
	var reads []time.Time
	for i := 0; i <= 40; i++ {
		now = rdEpoch.Add(time.Duration(i) * step)
		d11, d12 := truth(now)
		r.delay(11, d11+time.Second) // both had run delay before the tenant was first seen
		r.delay(12, d12+time.Second)
		// Busy (usage moves) and waiting (PSI moves, but on a hybrid host
		// PSI is not the v1 cpu cgroup's, so it cannot excuse a read).
		r.usage("/vm", int64(i+1)*1000, int64(i)*10)
		st, err := c.Read(t.Context(), ten, prev)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case prev == nil:
			// A new tenant is read at once: the sum over its threads.
			if !st.RunDelayAt.Equal(now) || st.RunDelay != 2*time.Second || st.RunDelayRate != 0 {
				t.Fatalf("first read: %v at %v rate %g, want 2s at %v rate 0", st.RunDelay, st.RunDelayAt, st.RunDelayRate, now)
			}
			reads = append(reads, now)
		case st.RunDelayAt.Equal(now):
			from := reads[len(reads)-1]
			a11, a12 := truth(from)
			b11, b12 := truth(now)
			want := (b11 - a11 + b12 - a12).Seconds() / now.Sub(from).Seconds()
			if math.Abs(st.RunDelayRate-want) > 1e-6 {
				t.Errorf("at %v: rate %g over %v, want %g", now.Sub(rdEpoch), st.RunDelayRate, now.Sub(from), want)
			}
			if st.RunDelay != b11+b12+2*time.Second {
				t.Errorf("at %v: RunDelay %v, want the threads' sum %v", now.Sub(rdEpoch), st.RunDelay, b11+b12+2*time.Second)
			}
			reads = append(reads, now)
		default:
			// Not its turn: carried over, never a rate over the wrong window.
			if st.RunDelayAt != prev.RunDelayAt || st.RunDelay != prev.RunDelay || st.RunDelayRate != prev.RunDelayRate {
				t.Errorf("at %v: run delay changed off its turn: %+v after %+v", now.Sub(rdEpoch), st, prev)
			}
		}
		prev = &st
	}
	// 20 s at one turn per 2 s: ten reads after the first, 2 s apart.
	if len(reads) != 11 {
		t.Errorf("%d reads in 20 s, want 1 + 10: %v", len(reads), reads)
	}
	for k := 2; k < len(reads); k++ {
		if gap := reads[k].Sub(reads[k-1]); gap != 2*time.Second {
			t.Errorf("reads %v apart, want 2s (turns %v)", gap, reads)
		}
	}
}

// Tenants first seen together take their turns spread over the window:
// each is read once per window, and no interval reads many more than its share.
func TestRunDelayTurnsStaggered(t *testing.T) {
	r := newRDHost(t)
	now := rdEpoch
	c := CgroupStats{Host: r.h, Layout: rdV2, // no cpu.pressure: no PSI shortcut
		Now: func() time.Time { return now }, RunDelayEvery: 5 * time.Second}
	const n, step = 200, 500 * time.Millisecond
	tenants := make([]Tenant, n)
	prev := make([]*TenantStats, n)
	for i := range tenants {
		cg := fmt.Sprintf("/t%d", i)
		tenants[i] = Tenant{ID: cg, Cgroup: cg, Threads: []int{1000 + i}}
		r.write("cg2"+cg+"/cpu.stat", "usage_usec 1000\n")
		r.delay(1000+i, 0)
	}
	perTenant := make([]int, n)
	maxPerStep := 0
	for k := 0; k <= 20; k++ { // the first sight, then two 5 s windows
		now = rdEpoch.Add(time.Duration(k) * step)
		read := 0
		for i, ten := range tenants {
			p := prev[i]
			if p != nil {
				busy := *p
				busy.Usage-- // busy since (cheaper than rewriting 400 cpu.stat files)
				p = &busy
			}
			st, err := c.Read(t.Context(), ten, p)
			if err != nil {
				t.Fatal(err)
			}
			if k > 0 && st.RunDelayAt.Equal(now) {
				read++
				perTenant[i]++
			}
			prev[i] = &st
		}
		if k > 0 {
			maxPerStep = max(maxPerStep, read)
		}
	}
	for i, got := range perTenant {
		if got != 2 {
			t.Errorf("tenant %d read %d times in two windows, want 2", i, got)
		}
	}
	// 200 tenants, 10 intervals a window: 20 an interval on average.
	if maxPerStep > 40 {
		t.Errorf("an interval read %d of %d tenants, want about %d", maxPerStep, n, n/10)
	}
}

// A thread that exits, one that appears, and a TID reused by a new thread:
// run delay never goes back, and only what threads added between two reads
// of theirs counts.
func TestRunDelayThreadsComeAndGo(t *testing.T) {
	r := newRDHost(t)
	now := rdEpoch
	c := CgroupStats{Host: r.h, Layout: rdHybrid, Now: func() time.Time { return now }} // every Read reads
	r.write("cg1/vm/cpu.stat", "throttled_time 0\n")
	ten := Tenant{ID: "/vm", Cgroup: "/vm", Threads: []int{11, 12, 13}}
	r.delay(11, 100*time.Millisecond)
	r.delay(12, 200*time.Millisecond)
	r.delay(13, 300*time.Millisecond)
	r.usage("/vm", 1000, 0)
	st, err := c.Read(t.Context(), ten, nil)
	if err != nil || st.RunDelay != 600*time.Millisecond {
		t.Fatalf("first read %v, %v; want 600ms", st.RunDelay, err)
	}

	// One second later: 11 added 50 ms, 12 exited (its file is gone), 13's
	// TID now belongs to a new thread (run_delay back near 0), and 14
	// appeared with a long history.
	now = now.Add(time.Second)
	os.RemoveAll(filepath.Join(r.root, "proc/12"))
	r.delay(11, 150*time.Millisecond)
	r.delay(13, 5*time.Millisecond)
	r.delay(14, 10*time.Second)
	ten.Threads = []int{11, 12, 13, 14}
	r.usage("/vm", 2000, 0)
	next, err := c.Read(t.Context(), ten, &st)
	if err != nil {
		t.Fatal(err)
	}
	if next.RunDelay != 650*time.Millisecond || math.Abs(next.RunDelayRate-0.05) > 1e-9 {
		t.Errorf("after exit, reuse and a new thread: %v at %g/s, want 650ms at 0.05/s (11's 50 ms only)", next.RunDelay, next.RunDelayRate)
	}

	// The newcomers count from their first read.
	now = now.Add(time.Second)
	r.delay(11, 160*time.Millisecond)
	r.delay(13, 25*time.Millisecond)
	r.delay(14, 10*time.Second+70*time.Millisecond)
	r.usage("/vm", 3000, 0)
	last, err := c.Read(t.Context(), ten, &next)
	if err != nil {
		t.Fatal(err)
	}
	if last.RunDelay != 750*time.Millisecond || math.Abs(last.RunDelayRate-0.1) > 1e-9 {
		t.Errorf("then: %v at %g/s, want 750ms at 0.1/s (10 + 20 + 70 ms)", last.RunDelay, last.RunDelayRate)
	}

	// Every thread gone: nothing added, nothing lost.
	now = now.Add(time.Second)
	for _, tid := range []int{11, 13, 14} {
		os.RemoveAll(filepath.Join(r.root, fmt.Sprintf("proc/%d", tid)))
	}
	r.usage("/vm", 4000, 0)
	gone, err := c.Read(t.Context(), ten, &last)
	if err != nil || gone.RunDelay != last.RunDelay || gone.RunDelayRate != 0 || !gone.RunDelayAt.Equal(now) {
		t.Errorf("all threads gone: %+v, %v", gone, err)
	}
}

// Known not to have moved, run delay is brought up to date without reading
// the threads: an idle tenant, and on cgroup2 a tenant whose PSI shows no
// wait since the last read. Off its turn, a tenant that did wait is carried
// over until its turn. (The schedstat files move behind the sensor's back
// here, which a real kernel would not do, to show whether they were read.)
func TestRunDelayKnownUnmoved(t *testing.T) {
	r := newRDHost(t)
	now := rdEpoch
	ten := Tenant{ID: "/ct", Cgroup: "/ct", Threads: []int{21}}
	r.delay(21, 40*time.Millisecond)
	r.usage("/ct", 1000, 500)
	c := CgroupStats{Host: r.h, Layout: rdV2, Now: func() time.Time { return now }, RunDelayEvery: time.Hour}
	st, err := c.Read(t.Context(), ten, nil)
	if err != nil {
		t.Fatal(err)
	}

	// Busy, PSI unmoved: up to date at no cost, rate 0.
	now = now.Add(500 * time.Millisecond)
	r.delay(21, 90*time.Millisecond) // not read: the kernel would not have moved it
	r.usage("/ct", 2000, 500)
	st2, err := c.Read(t.Context(), ten, &st)
	if err != nil || !st2.RunDelayAt.Equal(now) || st2.RunDelay != 40*time.Millisecond || st2.RunDelayRate != 0 {
		t.Errorf("PSI unmoved: %v at %v rate %g (%v); want 40ms brought up to %v at 0", st2.RunDelay, st2.RunDelayAt, st2.RunDelayRate, err, now)
	}

	// Idle since a known sample: up to date too.
	now = now.Add(500 * time.Millisecond)
	st3, err := c.Read(t.Context(), ten, &st2)
	if err != nil || !st3.RunDelayAt.Equal(now) || st3.RunDelay != 40*time.Millisecond {
		t.Errorf("idle: %v at %v (%v)", st3.RunDelay, st3.RunDelayAt, err)
	}

	// PSI moved but its turn (hourly here) has not come: carried over.
	now = now.Add(500 * time.Millisecond)
	r.usage("/ct", 3000, 900)
	st4, err := c.Read(t.Context(), ten, &st3)
	if err != nil || !st4.RunDelayAt.Equal(st3.RunDelayAt) || st4.RunDelay != st3.RunDelay {
		t.Errorf("waited, off turn: %v at %v (%v), want carried over from %v", st4.RunDelay, st4.RunDelayAt, err, st3.RunDelayAt)
	}
	// Idle now, but what it waited before is unread: still not up to date.
	now = now.Add(500 * time.Millisecond)
	st5, err := c.Read(t.Context(), ten, &st4)
	if err != nil || !st5.RunDelayAt.Equal(st3.RunDelayAt) {
		t.Errorf("idle after an unread wait: known at %v (%v), want still %v", st5.RunDelayAt, err, st3.RunDelayAt)
	}
	// PSI unchanged since then does not excuse the read either: it moved
	// since the last read.
	now = now.Add(500 * time.Millisecond)
	r.usage("/ct", 4000, 900)
	st6, err := c.Read(t.Context(), ten, &st5)
	if err != nil || !st6.RunDelayAt.Equal(st3.RunDelayAt) {
		t.Errorf("PSI moved since the last read: known at %v (%v), want still %v", st6.RunDelayAt, err, st3.RunDelayAt)
	}

	// Its turn: read, the rate over the whole window since the last read.
	c.RunDelayEvery = 0
	now = now.Add(500 * time.Millisecond)
	r.usage("/ct", 5000, 900)
	st7, err := c.Read(t.Context(), ten, &st6)
	want := (90 - 40) * time.Millisecond
	if err != nil || !st7.RunDelayAt.Equal(now) || st7.RunDelay != 90*time.Millisecond ||
		math.Abs(st7.RunDelayRate-want.Seconds()/now.Sub(st3.RunDelayAt).Seconds()) > 1e-9 {
		t.Errorf("turn: %v at %v rate %g (%v), want 90ms at %v rate %g", st7.RunDelay, st7.RunDelayAt, st7.RunDelayRate, err, now,
			want.Seconds()/now.Sub(st3.RunDelayAt).Seconds())
	}

	// On a hybrid host the v2 PSI is not the cpu cgroup's: no shortcut.
	r.write("cg1/ct/cpu.stat", "throttled_time 0\n")
	h := CgroupStats{Host: r.h, Layout: rdHybrid, Now: func() time.Time { return now }, RunDelayEvery: time.Hour}
	hs, err := h.Read(t.Context(), ten, nil)
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(500 * time.Millisecond)
	r.usage("/ct", 6000, 900)
	hs2, err := h.Read(t.Context(), ten, &hs)
	if err != nil || !hs2.RunDelayAt.Equal(hs.RunDelayAt) {
		t.Errorf("hybrid, PSI unmoved: known at %v (%v), want carried over from %v", hs2.RunDelayAt, err, hs.RunDelayAt)
	}
}

func TestParseRunDelay(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"123 456 7", 456, true},
		{"123 456", 456, true},
		{"123", 0, false},
		{"123 x 7", 0, false},
		{"123 -5 7", 0, false},
	} {
		if got, ok := parseRunDelay(tc.in); got != tc.want || ok != tc.ok {
			t.Errorf("parseRunDelay(%q) = %v %v, want %v %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
