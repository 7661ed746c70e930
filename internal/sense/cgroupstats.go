package sense

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
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
	// PSISome is the cumulative time at least one of its tasks waited for a
	// CPU (cgroup2 cpu.pressure "some total"); HasPSI is false without it.
	PSISome time.Duration
	HasPSI  bool
	// RunDelay is the sum over its threads of time spent runnable but not
	// running (/proc/TID/schedstat): for a VM, its vCPUs' steal from the host.
	RunDelay time.Duration
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
}

func (c CgroupStats) reader() cgroup.StringReader {
	if c.Files != nil {
		return c.Files
	}
	return c.Host
}

// Read samples one tenant. A tenant whose cgroup vanished returns an error
// wrapping fs.ErrNotExist; threads that exit meanwhile are skipped.
//
// With prev (the tenant's previous sample), a tenant that used no CPU since
// then costs one read: an idle tenant can be neither throttled nor stalled,
// so its other counters have not moved either.
func (c CgroupStats) Read(t Tenant, prev *TenantStats) (TenantStats, error) {
	now := c.Now
	if now == nil {
		now = time.Now
	}
	st := TenantStats{At: now()}
	g := cgroup.Open(c.Host, c.Layout, t.Cgroup)
	cs, err := g.UsageFrom(c.reader())
	if err != nil {
		return st, fmt.Errorf("tenant %s: %w", t.ID, err)
	}
	if prev != nil && cs.Usage == prev.Usage {
		idle := *prev
		idle.At = st.At
		return idle, nil
	}
	if err := g.ThrottlingFrom(c.reader(), &cs); err != nil {
		return st, fmt.Errorf("tenant %s: %w", t.ID, err)
	}
	st.Usage, st.Throttled = cs.Usage, cs.Throttled
	if c.Layout.V2 != "" {
		if s, err := c.reader().ReadString(path.Join(c.Layout.V2, t.Cgroup, "cpu.pressure")); err == nil {
			if total, ok := PSITotal(s, "some"); ok {
				st.PSISome, st.HasPSI = total, true
			}
		}
	}
	for _, tid := range t.Threads {
		s, err := c.Host.ReadString("/proc/" + strconv.Itoa(tid) + "/schedstat")
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return st, err
		}
		if f := strings.Fields(s); len(f) >= 2 {
			if d, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				st.RunDelay += time.Duration(d)
			}
		}
	}
	return st, nil
}

// PSITotal extracts the cumulative stall time of a PSI line ("some" or
// "full") from a pressure file: "some avg10=0.00 avg60=0.00 avg300=0.00 total=1234".
func PSITotal(s, which string) (time.Duration, bool) {
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != which {
			continue
		}
		for _, kv := range f[1:] {
			if v, ok := strings.CutPrefix(kv, "total="); ok {
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
