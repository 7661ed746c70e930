package resctrl

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

// Monitoring events as mon_features names them.
const (
	LLCOccupancy  = "llc_occupancy"
	MBMTotalBytes = "mbm_total_bytes"
	MBMLocalBytes = "mbm_local_bytes"
)

// Counter is one mon_data value. A file that reads "Unavailable" (the
// hardware has no count for this RMID yet: just allocated, or the counters
// were reset by a bandwidth-event reconfiguration), "Error", or
// "Unassigned" (no hardware counter assigned, in counter-assignment mode)
// has OK false and the word in Status.
type Counter struct {
	Value  uint64 `json:"value"`
	OK     bool   `json:"ok"`
	Status string `json:"status,omitempty"`
}

// Since is how many bytes an MBM counter advanced from prev. ok is false
// when either reading is unavailable or the counter went backwards: the
// kernel extends the narrow hardware counter to 64 bits itself (its
// overflow handler reads every RMID at least once a second), so a smaller
// value is not a wrap but a reset — the RMID was freed and reallocated or
// the event reconfigured — and the interval has no usable delta.
func (c Counter) Since(prev Counter) (uint64, bool) {
	if !c.OK || !prev.OK || c.Value < prev.Value {
		return 0, false
	}
	return c.Value - prev.Value, true
}

// MonReading is one group's monitoring data in one L3 domain.
type MonReading struct {
	Domain    int     `json:"domain"`
	Occupancy Counter `json:"llc_occupancy"`
	Total     Counter `json:"mbm_total_bytes"`
	Local     Counter `json:"mbm_local_bytes"`
}

// MonDomains lists the L3 monitoring domains of a group's mon_data, sorted.
func MonDomains(h *host.Host, g Group) ([]int, error) {
	ents, err := h.ReadDir(path.Join(g.Path(), "mon_data"))
	if err != nil {
		return nil, fmt.Errorf("resctrl: mon_data of %s: %w", g, err)
	}
	var out []int
	for _, e := range ents {
		if id, ok := strings.CutPrefix(e.Name(), "mon_L3_"); ok {
			if n, err := strconv.Atoi(id); err == nil {
				out = append(out, n)
			}
		}
	}
	return out, nil
}

// ReadMonData reads a group's counters in the given L3 domains. A control
// group's values are the sum over itself and its monitoring groups. A
// feature the host does not offer reads as not OK with Status "absent". An
// error means the group itself is gone or unreadable.
func ReadMonData(h *host.Host, g Group, domains []int) ([]MonReading, error) {
	return ReadMonEvents(h, g, domains, LLCOccupancy, MBMTotalBytes, MBMLocalBytes)
}

// ReadMonEvents is ReadMonData for some events only; the others read as not
// OK with Status "not read". Each file read costs the kernel a cross-CPU
// call to a CPU of the domain (resctrl reads the counter there), so an
// agent watching hundreds of groups reads only what it uses.
func ReadMonEvents(h *host.Host, g Group, domains []int, events ...string) ([]MonReading, error) {
	return ReadMonEventsFrom(h, h, g, domains, events...)
}

// StringReader reads a host file's trimmed content (host.Host, or a
// host.Rereader that keeps the files open between reads).
type StringReader interface {
	ReadString(p string) (string, error)
}

// ReadMonEventsFrom is ReadMonEvents reading the files through r: an agent
// reading hundreds of groups every second keeps their files open.
func ReadMonEventsFrom(h *host.Host, rd StringReader, g Group, domains []int, events ...string) ([]MonReading, error) {
	out := make([]MonReading, 0, len(domains))
	for _, d := range domains {
		dir := path.Join(g.Path(), "mon_data", fmt.Sprintf("mon_L3_%02d", d))
		r := MonReading{Domain: d}
		for _, f := range []struct {
			name string
			c    *Counter
		}{{LLCOccupancy, &r.Occupancy}, {MBMTotalBytes, &r.Total}, {MBMLocalBytes, &r.Local}} {
			if !slices.Contains(events, f.name) {
				f.c.Status = "not read"
				continue
			}
			s, err := rd.ReadString(path.Join(dir, f.name))
			switch {
			case errors.Is(err, fs.ErrNotExist):
				if !h.Exists(dir) {
					return nil, fmt.Errorf("resctrl: %s has no monitoring data for L3 domain %d: %w", g, d, err)
				}
				f.c.Status = "absent"
			case err != nil:
				return nil, fmt.Errorf("resctrl: %s: %w", g, err)
			default:
				*f.c = parseCounter(s)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

func parseCounter(s string) Counter {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		if s == "" {
			s = "empty"
		}
		return Counter{Status: s}
	}
	return Counter{Value: v, OK: true}
}
