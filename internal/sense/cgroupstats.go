package sense

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

// TenantStats are a tenant's cumulative counters at one instant; the agent
// turns two of them into per-second rates.
type TenantStats struct {
	At        time.Time
	Usage     time.Duration // CPU time consumed
	Throttled time.Duration // time held back by its CFS quota
	// NrThrottled is how many periods its CFS quota held it back in.
	// While a tenant pays off a run that overran its quota it uses no CPU
	// and its throttled time may not move (cgroup v1 adds a throttle's
	// time when it ends), but each period it stays throttled counts here.
	NrThrottled uint64
	// PSISome is the cumulative time at least one of its tasks waited for a
	// CPU (cgroup2 cpu.pressure "some total"); HasPSI is false without it.
	PSISome time.Duration
	HasPSI  bool

	// RunDelay is the time its threads spent runnable but not running
	// (/proc/TID/schedstat run_delay): for a VM, its vCPUs' wait for the
	// host's CPUs, which the guest sees as steal. At the tenant's first read
	// it is the sum over its threads; after that it grows by what each thread
	// seen at two successive reads added in between, so it never goes back
	// when a thread exits, and a thread that appears (a re-read of the
	// tenant's threads) counts from its first read, not its whole life.
	//
	// It is known as of RunDelayAt, which may be earlier than At: one file
	// per thread is the largest part of sampling a thousand tenants, so
	// CgroupStats reads a tenant's threads only in its turn
	// (CgroupStats.RunDelayEvery) and carries RunDelay and RunDelayAt over
	// in between. A rate is therefore the difference of two RunDelay values
	// over the difference of their RunDelayAt, never over At.
	RunDelay   time.Duration
	RunDelayAt time.Time // zero: not read yet
	// RunDelayRate is run delay per second of wall time (summed over the
	// threads, so up to one per runnable thread) between the last two times
	// RunDelay was known: a rate over that window, one interval long where
	// the threads were read or were known not to have waited, up to
	// RunDelayEvery long when they were read in turns. It is 0 until RunDelay
	// has been known twice.
	RunDelayRate float64

	// runDelayPSI is PSISome when RunDelay was last known (with
	// runDelayHasPSI): where it has not moved since, nothing waited.
	runDelayPSI    time.Duration
	runDelayHasPSI bool
	// threads are each thread's run_delay at the last read, by TID.
	threads []threadDelay
	// ran is whether it used CPU time since the sample before.
	ran bool
}

// threadDelay is one thread's cumulative run_delay as last read.
type threadDelay struct {
	tid   int
	delay time.Duration
}

// CgroupStats reads TenantStats through the host.
type CgroupStats struct {
	Host   *host.Host
	Layout cgroup.Layout
	// Files, when set, keeps the per-tenant files open between reads (the
	// agent's hot path); nil opens them each time.
	Files *host.Rereader
	// Now timestamps each sample (nil: time.Now); the simulator's clock is virtual.
	Now func() time.Time
	// RunDelayEvery is how often a tenant's threads are read for its run
	// delay: a tenant is read when it is first seen, then once in each
	// RunDelayEvery window, at an offset within the window given by a hash of
	// its ID, so each Read of all tenants reads about interval/RunDelayEvery
	// of all threads rather than all of them. Between its turns, a tenant's
	// run delay is brought up to date without reading when it is known not
	// to have moved: it was idle (no CPU time used) since a read, or, on
	// hosts whose cpu controller is cgroup2, its PSI shows that none of its
	// tasks waited for a CPU since the last read. 0 reads the threads at
	// every Read.
	RunDelayEvery time.Duration
}

func (c CgroupStats) reader() cgroup.StringReader {
	if c.Files != nil {
		return c.Files
	}
	return c.Host
}

// SetRunDelayEvery changes RunDelayEvery (the agent sizes it to the host's
// thread count each interval; 0 reads every tenant's run delay each time).
func (c *CgroupStats) SetRunDelayEvery(d time.Duration) { c.RunDelayEvery = d }

// Forget closes the files kept open for a cgroup that is gone (and for
// the cgroups below it): without it, each tenant that came and went would
// hold its descriptors until the re-reader's bound pushed them out.
func (c CgroupStats) Forget(cg string) {
	if c.Files == nil || cleanCgroup(cg) == "" {
		return
	}
	for _, dir := range cgroup.Open(c.Host, c.Layout, cg).Dirs() {
		c.Files.Forget(dir + "/")
	}
}

// Read samples one tenant. A tenant whose cgroup vanished returns an error
// wrapping fs.ErrNotExist; threads that exit meanwhile are skipped.
//
// prev is the tenant's previous sample (nil for a new tenant). A tenant that
// used no CPU since then costs one read: an idle tenant cannot be stalled,
// so its other counters have not moved either — except its throttling. A
// run that overran its CFS quota (a vCPU the host stalled mid-run is
// charged the stall) leaves it throttled, using nothing, until the periods'
// quota pays the debt off: on the dev VM a stress-ng --lockbus held to
// 1 ms in 128 ms ran 13 ms at once, then nothing for 1.6 s, throttled in
// every period. So an idle tenant's throttling is read again too when it
// ran in the window before or was ever throttled; one that was never
// throttled and did not run cannot have become so. prev also carries the
// run delay between its turns (see RunDelayEvery).
//
// It reads only cgroupfs and procfs, which do not block, so it does not
// consult ctx.
func (c CgroupStats) Read(_ context.Context, t Tenant, prev *TenantStats) (TenantStats, error) {
	now := c.Now
	if now == nil {
		now = time.Now
	}
	st := TenantStats{At: now()}
	v2 := c.Layout.CPUControl() == "v2"
	var g *cgroup.Group
	var cs cgroup.CPUStat
	var err error
	if v2 {
		// Pure cgroup2, the hot path: one file has usage and throttling.
		cs, err = c.cpuStatV2(t.Cgroup)
	} else {
		g = cgroup.Open(c.Host, c.Layout, t.Cgroup)
		cs, err = g.UsageFrom(c.reader())
	}
	if err != nil {
		return st, fmt.Errorf("tenant %s: %w", t.ID, err)
	}
	if prev != nil && cs.Usage == prev.Usage {
		idle := *prev
		idle.At, idle.ran = st.At, false
		// cgroup2's cpu.stat, read already, has the throttling too.
		if v2 || prev.ran || prev.NrThrottled > 0 || prev.Throttled > 0 {
			if !v2 {
				if err := g.ThrottlingFrom(c.reader(), &cs); err != nil {
					return idle, fmt.Errorf("tenant %s: %w", t.ID, err)
				}
			}
			idle.Throttled, idle.NrThrottled = cs.Throttled, cs.NrThrottled
		}
		// A tenant held back waited, so its run delay is read as usual.
		waited := idle.NrThrottled != prev.NrThrottled || idle.Throttled != prev.Throttled
		if err := c.runDelay(t, prev, &idle, !waited); err != nil {
			return idle, fmt.Errorf("tenant %s: %w", t.ID, err)
		}
		return idle, nil
	}
	if !v2 {
		if err := g.ThrottlingFrom(c.reader(), &cs); err != nil {
			return st, fmt.Errorf("tenant %s: %w", t.ID, err)
		}
	}
	st.Usage, st.Throttled, st.NrThrottled = cs.Usage, cs.Throttled, cs.NrThrottled
	st.ran = prev != nil
	if c.Layout.V2 != "" {
		if s, err := c.reader().ReadString(c.Layout.V2 + cleanCgroup(t.Cgroup) + "/cpu.pressure"); err == nil {
			if total, ok := PSITotal(s, "some"); ok {
				st.PSISome, st.HasPSI = total, true
			}
		}
	}
	if err := c.runDelay(t, prev, &st, false); err != nil {
		return st, fmt.Errorf("tenant %s: %w", t.ID, err)
	}
	return st, nil
}

// cpuStatV2 reads usage and throttling from a cgroup2 cpu.stat, as
// cgroup.Group.UsageFrom does on a pure cgroup2 host, without a map per read:
// it runs for every tenant every interval.
func (c CgroupStats) cpuStatV2(cg string) (cgroup.CPUStat, error) {
	var st cgroup.CPUStat
	p := c.Layout.V2 + cleanCgroup(cg) + "/cpu.stat"
	s, err := c.reader().ReadString(p)
	if err != nil {
		return st, err
	}
	usage := false
	for len(s) > 0 {
		line := s
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			line, s = s[:i], s[i+1:]
		} else {
			s = ""
		}
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "usage_usec":
			st.Usage, usage = time.Duration(n)*time.Microsecond, true
		case "throttled_usec":
			st.Throttled = time.Duration(n) * time.Microsecond
		case "nr_periods":
			st.NrPeriods = uint64(n)
		case "nr_throttled":
			st.NrThrottled = uint64(n)
		}
	}
	if !usage {
		return st, fmt.Errorf("%s: no usage_usec", c.Host.Path(p))
	}
	return st, nil
}

// cleanCgroup returns a cgroup path as discovery makes them ("/a/b"), cleaning
// only what is not already.
func cleanCgroup(cg string) string {
	if strings.HasPrefix(cg, "/") && !strings.Contains(cg, "//") && !strings.Contains(cg, "/.") && !strings.HasSuffix(cg, "/") {
		return cg
	}
	if c := path.Clean("/" + cg); c != "/" {
		return c
	}
	return ""
}

// runDelay fills st's run delay: read from the threads when the tenant is
// new or its turn has come, brought up to date without reading when it is
// known not to have moved, and otherwise carried over from prev.
func (c CgroupStats) runDelay(t Tenant, prev, st *TenantStats, idle bool) error {
	if prev == nil || prev.RunDelayAt.IsZero() {
		return c.readRunDelay(t, nil, st)
	}
	st.RunDelay, st.RunDelayAt, st.RunDelayRate = prev.RunDelay, prev.RunDelayAt, prev.RunDelayRate
	st.runDelayPSI, st.runDelayHasPSI, st.threads = prev.runDelayPSI, prev.runDelayHasPSI, prev.threads
	unmoved := false
	switch {
	case idle:
		// Nothing ran since prev, so nothing waited since then either; up
		// to date only if RunDelay was known at prev.
		unmoved = prev.RunDelayAt.Equal(prev.At)
	case c.Layout.CPUControl() == "v2" && st.HasPSI && prev.runDelayHasPSI:
		// On cgroup2 the tenant's PSI is its own threads': run delay grows
		// only while "some" does (up to a wait in progress at a read,
		// which the next read counts).
		unmoved = st.PSISome == prev.runDelayPSI
	}
	if unmoved {
		if st.At.After(prev.RunDelayAt) {
			st.RunDelayAt, st.RunDelayRate = st.At, 0
		}
		return nil
	}
	if !c.runDelayTurn(t.ID, prev.At, st.At) {
		return nil
	}
	return c.readRunDelay(t, prev, st)
}

// runDelayTurn says whether a tenant's turn to read its threads came after
// its previous sample at from and by this one at to: its turns are the
// instants k·RunDelayEvery − offset, the offset a hash of its ID, so tenants
// first seen together take their turns spread over the window.
func (c CgroupStats) runDelayTurn(id string, from, to time.Time) bool {
	every := int64(c.RunDelayEvery)
	if every <= 0 {
		return true
	}
	off := int64(spread(id) % uint64(every))
	turn := func(at time.Time) int64 {
		n := at.UnixNano() + off
		q := n / every
		if n < 0 && n%every != 0 {
			q-- // floor
		}
		return q
	}
	return turn(to) != turn(from)
}

// readRunDelay reads the run delay of t's threads into st, adding to prev's
// what each thread read both times added in between.
func (c CgroupStats) readRunDelay(t Tenant, prev, st *TenantStats) error {
	threads := make([]threadDelay, 0, len(t.Threads))
	for _, tid := range t.Threads {
		p := "/proc/" + strconv.Itoa(tid) + "/schedstat"
		var s string
		var err error
		if c.Files != nil {
			s, err = c.Files.ReadOnce(p)
		} else {
			s, err = c.Host.ReadString(p)
		}
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // exited
			}
			return err
		}
		if d, ok := parseRunDelay(s); ok {
			threads = append(threads, threadDelay{tid: tid, delay: d})
		}
	}
	slices.SortFunc(threads, func(a, b threadDelay) int { return a.tid - b.tid })
	var total, added time.Duration
	var old []threadDelay
	if prev != nil {
		old = prev.threads
	}
	i := 0
	for _, th := range threads {
		total += th.delay
		for i < len(old) && old[i].tid < th.tid {
			i++
		}
		if i < len(old) && old[i].tid == th.tid && th.delay >= old[i].delay {
			added += th.delay - old[i].delay
		}
		// A thread not read before counts from now; one whose run_delay went
		// back is a new thread with a reused TID and counts from now too.
	}
	st.threads = threads
	st.runDelayPSI, st.runDelayHasPSI = st.PSISome, st.HasPSI
	if prev == nil {
		st.RunDelay, st.RunDelayAt, st.RunDelayRate = total, st.At, 0
		return nil
	}
	st.RunDelay = prev.RunDelay + added
	if dt := st.At.Sub(prev.RunDelayAt); dt > 0 {
		st.RunDelayRate = added.Seconds() / dt.Seconds()
	}
	st.RunDelayAt = st.At
	return nil
}

// parseRunDelay takes run_delay, the second field of /proc/TID/schedstat
// ("<on-cpu ns> <run delay ns> <timeslices>").
func parseRunDelay(s string) (time.Duration, bool) {
	i := strings.IndexByte(s, ' ')
	if i < 0 {
		return 0, false
	}
	s = s[i+1:]
	if j := strings.IndexByte(s, ' '); j >= 0 {
		s = s[:j]
	}
	d, err := strconv.ParseInt(s, 10, 64)
	if err != nil || d < 0 {
		return 0, false
	}
	return time.Duration(d), true
}

// spread hashes a tenant ID to pick its turn: 64-bit FNV-1a, then the
// MurmurHash3 finaliser, because IDs differ only in a few characters and
// FNV alone leaves them bunched in a window.
func spread(id string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// PSITotal extracts the cumulative stall time of a PSI line ("some" or
// "full") from a pressure file: "some avg10=0.00 avg60=0.00 avg300=0.00 total=1234".
func PSITotal(s, which string) (time.Duration, bool) {
	for len(s) > 0 {
		line := s
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			line, s = s[:i], s[i+1:]
		} else {
			s = ""
		}
		line = strings.TrimLeft(line, " \t")
		rest, ok := strings.CutPrefix(line, which)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '\t') {
			continue
		}
		for rest != "" {
			rest = strings.TrimLeft(rest, " \t")
			field := rest
			if i := strings.IndexAny(rest, " \t"); i >= 0 {
				field, rest = rest[:i], rest[i:]
			} else {
				rest = ""
			}
			if v, ok := strings.CutPrefix(field, "total="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil || n < 0 {
					return 0, false
				}
				return time.Duration(n) * time.Microsecond, true
			}
		}
	}
	return 0, false
}
