package lab

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

// The kinds of result a lab command writes, as Meta.Kind says.
const (
	KindRun    = "lab-run"
	KindMatrix = "lab-matrix"
	KindSuite  = "lab-suite"
)

// Meta says what made a result, where and when, so that a report kept for
// months can still be traced to a binary and a machine. It is stored in the
// result's JSON and shown at the top of its reports.
type Meta struct {
	Kind     string    `json:"kind"`
	Version  string    `json:"version,omitempty"`
	Commit   string    `json:"commit,omitempty"`
	Date     time.Time `json:"date"`
	Command  string    `json:"command,omitempty"`
	Kernel   string    `json:"kernel,omitempty"`
	Hostname string    `json:"hostname,omitempty"`
	CPUModel string    `json:"cpu_model,omitempty"`
	CPUs     int       `json:"cpus,omitempty"`
}

// HostMeta reads the machine's part of Meta: the kernel release (uname -r),
// host name, CPU model and the number of CPUs in /proc/cpuinfo. What cannot
// be read is left empty: a report without a CPU model is still a report.
func HostMeta(h *host.Host) Meta {
	var m Meta
	m.Kernel, _ = h.ReadString("/proc/sys/kernel/osrelease")
	m.Hostname, _ = h.ReadString("/proc/sys/kernel/hostname")
	if b, err := h.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPUModel, m.CPUs = parseCPUInfo(b)
	}
	return m
}

// parseCPUInfo returns the first model name (x86's "model name", some
// arm's "Hardware") and the count of processors.
func parseCPUInfo(b []byte) (model string, cpus int) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "processor":
			cpus++
		case "model name", "Hardware":
			if model == "" {
				model = v
			}
		}
	}
	return model, cpus
}

// stamp is the Meta of a result of kind made now: the caller's part
// (version, commit, command) from opt.Stamp, the machine's read from its host.
func (o Options) stamp(kind string) *Meta {
	m := o.Stamp
	if o.Host != nil {
		hm := HostMeta(o.Host)
		m.Kernel, m.Hostname, m.CPUModel, m.CPUs = hm.Kernel, hm.Hostname, hm.CPUModel, hm.CPUs
	}
	m.Kind, m.Date = kind, time.Now().UTC().Truncate(time.Second)
	return &m
}

// lines are Meta's facts as label and value, in the order reports show them.
func (m *Meta) lines() [][2]string {
	if m == nil {
		return nil
	}
	var out [][2]string
	add := func(label, v string) {
		if v != "" {
			out = append(out, [2]string{label, v})
		}
	}
	build := m.Version
	if m.Commit != "" {
		build = strings.TrimSpace(build + " (commit " + m.Commit + ")")
	}
	add("crosstalk", build)
	if !m.Date.IsZero() {
		add("date", m.Date.UTC().Format("2006-01-02 15:04:05 UTC"))
	}
	add("command", m.Command)
	add("host", m.Hostname)
	add("kernel", m.Kernel)
	cpu := []string{}
	if m.CPUModel != "" {
		cpu = append(cpu, m.CPUModel)
	}
	if m.CPUs > 0 {
		cpu = append(cpu, fmt.Sprintf("%d CPUs", m.CPUs))
	}
	add("cpu", strings.Join(cpu, ", "))
	return out
}

// writeMetaText writes Meta as aligned "label  value" lines and a blank
// line; nothing when there is no Meta.
func writeMetaText(w io.Writer, m *Meta) {
	ls := m.lines()
	if len(ls) == 0 {
		return
	}
	for _, l := range ls {
		fmt.Fprintf(w, "%-9s  %s\n", l[0], l[1])
	}
	fmt.Fprintln(w)
}
