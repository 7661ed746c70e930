package sense

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

// CPUTimes is one "cpuN" line of /proc/stat, in USER_HZ ticks.
type CPUTimes struct {
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64
}

// Busy is the time the CPU ran something: user (guest time included, the
// kernel counts it there too), nice, system, irq and softirq.
func (c CPUTimes) Busy() uint64 { return c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ }

// Total adds the time it did not: idle, iowait and steal (a hypervisor ran
// someone else).
func (c CPUTimes) Total() uint64 { return c.Busy() + c.Idle + c.IOWait + c.Steal }

// ParseProcStat reads the per-CPU lines of /proc/stat (not the "cpu"
// summary). Offline CPUs have no line.
func ParseProcStat(s string) (map[int]CPUTimes, error) {
	out := map[int]CPUTimes{}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		cpu, err := strconv.Atoi(f[0][3:])
		if err != nil || cpu < 0 {
			return nil, fmt.Errorf("/proc/stat: bad CPU %q", f[0])
		}
		var v [8]uint64
		for i := 0; i < len(v) && i+1 < len(f); i++ {
			// 2^56 ticks is 23 million years at USER_HZ 100: anything
			// larger is garbage, and would overflow the sums below.
			if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil || v[i] > 1<<56 {
				return nil, fmt.Errorf("/proc/stat: %s: bad field %q", f[0], f[i+1])
			}
		}
		out[cpu] = CPUTimes{User: v[0], Nice: v[1], System: v[2], Idle: v[3], IOWait: v[4], IRQ: v[5], SoftIRQ: v[6], Steal: v[7]}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("/proc/stat: no per-CPU lines")
	}
	return out, nil
}

// CPUBusy follows how busy each CPU is, from /proc/stat: the power
// attribution's view of who uses which package (and Alita's "CPUs over
// 50% busy").
type CPUBusy struct {
	h    *host.Host
	prev map[int]CPUTimes
}

// NewCPUBusy returns a reader; its first Read primes it.
func NewCPUBusy(h *host.Host) *CPUBusy { return &CPUBusy{h: h} }

// Read returns each CPU's busy fraction (0-1) since the previous Read; nil
// on the first. A CPU whose counters went backwards (it went offline and
// came back) is left out this time.
func (c *CPUBusy) Read() (map[int]float64, error) {
	s, err := c.h.ReadString("/proc/stat")
	if err != nil {
		return nil, err
	}
	cur, err := ParseProcStat(s)
	if err != nil {
		return nil, err
	}
	prev := c.prev
	c.prev = cur
	if prev == nil {
		return nil, nil
	}
	out := make(map[int]float64, len(cur))
	for cpu, b := range cur {
		a, ok := prev[cpu]
		if !ok || b.Total() < a.Total() || b.Busy() < a.Busy() {
			continue
		}
		dt := b.Total() - a.Total()
		if dt == 0 {
			out[cpu] = 0
			continue
		}
		out[cpu] = min(float64(b.Busy()-a.Busy())/float64(dt), 1)
	}
	return out, nil
}
