package doctor

import (
	"github.com/crosstalk-project/crosstalk/internal/sense"

	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/crosstalk-project/crosstalk/internal/humanize"
)

// WriteText prints the report for a person, wrapped to width columns (80
// when width is 0 or less) with hanging indents: the verdict first (what
// `crosstalk run` will do here and why the rest is off), then the
// capabilities, the checks with their reasons and advice, the domains and
// the policies in full.
func WriteText(w io.Writer, r Report, width int) error {
	if width <= 0 {
		width = 80
	}
	t := &text{width: max(width, minTextWidth)}
	name := r.Host.Hostname
	if name == "" {
		name = "(unknown host)"
	}
	t.para("", "  ", fmt.Sprintf("crosstalk doctor — %s, kernel %s, root %s", name, orUnknown(r.Host.Kernel), r.Root))

	t.blank()
	t.line("VERDICT (what `crosstalk run` will do on this host)")
	items := Verdict(r)
	nameWidth := 0
	for _, v := range items {
		nameWidth = max(nameWidth, len(v.Name))
	}
	for _, v := range items {
		state := "runs"
		if !v.On {
			state = "off"
		}
		first := fmt.Sprintf("  %-4s  %-*s  ", state, nameWidth, v.Name)
		t.para(first, strings.Repeat(" ", len(first)), v.What)
	}

	t.blank()
	t.line("CAPABILITIES")
	c := r.Capabilities
	for _, l := range capabilityLines(c) {
		first := fmt.Sprintf("  %-10s  ", l[0])
		t.para(first, strings.Repeat(" ", len(first)), l[1])
	}

	t.blank()
	t.line("CHECKS")
	for _, ch := range r.Checks {
		t.check(ch)
	}
	if len(r.Domains) > 0 {
		t.blank()
		t.para("", "  ", "DOMAINS (topology of running libvirt guests, from their status files)")
		for _, d := range r.Domains {
			if d.Error != "" {
				t.check(Check{Status: Unknown, ID: d.Name, Summary: d.Error})
				continue
			}
			ok := 0
			for _, ch := range d.Checks {
				if ch.Status == OK {
					ok++
				}
			}
			t.para("  ", "    ", fmt.Sprintf("%s (%d vCPUs, %s): %d of %d checks ok", d.Name, d.VCPUs, d.Source, ok, len(d.Checks)))
			for _, ch := range d.Checks {
				if ch.Status != OK {
					t.check(ch)
				}
			}
		}
	}
	if len(r.Policies) > 0 {
		t.blank()
		t.para("", "  ", "POLICIES (the agent's hardware policies and levers, built as `crosstalk run` would)")
		for _, p := range r.Policies {
			state := "[on]"
			if !p.On {
				state = "[off]"
			}
			t.line(fmt.Sprintf("  %-9s %s", state, p.Name))
			if p.Why != "" {
				t.label("why:", p.Why)
			}
		}
	}
	counts := map[Status]int{}
	for _, ch := range r.Checks {
		counts[ch.Status]++
	}
	t.blank()
	t.para("", "", fmt.Sprintf("%d ok, %d info, %d warn, %d unknown. `crosstalk doctor --json` for the full report.", counts[OK], counts[Info], counts[Warn], counts[Unknown]))
	if len(r.Domains) > 0 {
		t.para("", "", domainCounts(r.Domains)+".")
	}
	_, err := io.WriteString(w, t.b.String())
	return err
}

// minTextWidth is the narrowest the report is laid out at.
const minTextWidth = 40

// labelWidth is where the labels (read:, why:, advice:) of a check end; the
// text after them starts one column further. Narrow terminals get less.
func (t *text) labelWidth() int {
	if t.width >= 80 {
		return 33
	}
	return t.width / 3
}

// text is a report being written at a width.
type text struct {
	b     strings.Builder
	width int
}

func (t *text) blank() { t.b.WriteByte('\n') }

// line writes s, wrapped under its own leading blanks plus two.
func (t *text) line(s string) {
	lead := s[:len(s)-len(strings.TrimLeft(s, " "))]
	t.para(lead, lead+"  ", s)
}
func (t *text) label(l, s string) {
	first := fmt.Sprintf("%*s ", t.labelWidth(), l)
	t.para(first, strings.Repeat(" ", len(first)), s)
}

// check writes one finding: its status, id and summary; unless it is ok,
// the files read, why it matters and the advice.
func (t *text) check(ch Check) {
	first := fmt.Sprintf("  %-9s %-20s ", "["+string(ch.Status)+"]", ch.ID)
	if utf8.RuneCountInString(first) > t.labelWidth()+1 {
		// A long id: the summary goes under it.
		t.line(strings.TrimRight(first, " "))
		first = strings.Repeat(" ", t.labelWidth()+1)
	}
	t.para(first, strings.Repeat(" ", utf8.RuneCountInString(first)), ch.Summary)
	if ch.Status == OK {
		return
	}
	for _, ev := range ch.Evidence {
		t.label("read:", ev.File+" = "+ev.Value)
	}
	t.label("why:", ch.Why)
	if ch.Advice != "" {
		t.label("advice:", ch.Advice)
	}
}

// para writes s word by word after first, wrapping at the width onto lines
// that start with indent (a hanging indent). A word longer than a line is
// cut where the line ends, so that no line is ever wider than the width.
func (t *text) para(first, indent, s string) {
	if utf8.RuneCountInString(indent) >= t.width/2 {
		indent = "    "
	}
	line := first
	n := utf8.RuneCountInString(line)
	fresh := true // nothing after the prefix yet
	flush := func() {
		t.b.WriteString(strings.TrimRight(line, " "))
		t.b.WriteByte('\n')
		line, n, fresh = indent, utf8.RuneCountInString(indent), true
	}
	for _, word := range strings.Fields(s) {
		wn := utf8.RuneCountInString(word)
		sep := 1
		if fresh {
			sep = 0
		}
		if !fresh && n+sep+wn > t.width {
			flush()
			sep = 0
		}
		for n+sep+wn > t.width {
			// The word does not fit even on a line of its own.
			room := t.width - n - sep
			if room <= 0 {
				flush()
				sep = 0
				continue
			}
			r := []rune(word)
			line += strings.Repeat(" ", sep) + string(r[:room])
			word, wn = string(r[room:]), wn-room
			flush()
			sep = 0
		}
		line += strings.Repeat(" ", sep) + word
		n += sep + wn
		fresh = false
	}
	flush()
}

func capabilityLines(c Capabilities) [][2]string {
	var out [][2]string
	add := func(k, v string) { out = append(out, [2]string{k, v}) }

	if c.CPU.Error != "" {
		add("cpu", "unknown: "+c.CPU.Error)
	} else {
		v := fmt.Sprintf("%s (%s family %d model %#x stepping %d)", c.CPU.ModelName, c.CPU.Vendor, c.CPU.Family, c.CPU.Model, c.CPU.Stepping)
		if c.CPU.Microarch != "" {
			v += ", " + c.CPU.Microarch
		}
		if c.CPU.Hypervisor {
			v += ", running as a VM"
		}
		add("cpu", v)
	}

	t := c.Topology
	if t.Error != "" {
		add("topology", "unknown: "+t.Error)
	} else {
		add("topology", fmt.Sprintf("%d CPUs (%s), %d package(s), %d cores, %d thread(s)/core, %d NUMA node(s)",
			t.CPUs, t.Online, t.Packages, t.Cores, t.ThreadsPerCore, t.NUMANodes))
		for _, n := range t.Nodes {
			add("", fmt.Sprintf("node%d: %s", n.ID, n.CPUs))
		}
		for _, l3 := range t.L3 {
			// Kernels before 4.14 have no cache id file; the CPUs name the domain.
			id := "L3"
			if l3.ID >= 0 {
				id = fmt.Sprintf("L3 #%d", l3.ID)
			}
			add("", fmt.Sprintf("%s: CPUs %s, %s, %d-way", id, l3.CPUs, humanize.Bytes(float64(l3.SizeBytes)), l3.Ways))
		}
		for _, w := range t.Warnings {
			add("", "warning: "+w)
		}
	}

	g := c.Cgroup
	v := string(g.Mode)
	if g.Error != "" {
		v = "unknown: " + g.Error
	} else {
		if len(g.V1) > 0 {
			v += "; v1 controllers " + strings.Join(v1Names(g), ",")
		}
		if g.V2 != "" {
			v += fmt.Sprintf("; cgroup2 at %s (controllers: %s)", g.V2, orNone(strings.Join(g.V2Controllers, ",")))
		}
		switch g.CPUControl {
		case "":
			v += "; no CPU controller: CPU-quota throttling unavailable"
		default:
			v += "; CPU throttling via " + g.CPUControl
		}
	}
	add("cgroup", v)

	p := c.PSIInfo
	v = fmt.Sprintf("host %s, per cgroup %s", yesNo(p.Host), yesNo(p.PerCgroup))
	if p.Reason != "" {
		v += " (" + p.Reason + ")"
	}
	add("psi", v)

	m := c.PMU
	if m.Hardware {
		v = fmt.Sprintf("hardware PMU %q", m.Core)
		if m.Name != "" {
			v += " (" + m.Name + ")"
		}
		if m.LiveProbe != "" {
			v += ", live probe: " + m.LiveProbe
		}
	} else {
		v = "no hardware PMU: " + m.Reason
	}
	add("pmu", v)
	if m.BusLockEvent != nil {
		add("", fmt.Sprintf("bus-lock event %s (raw config %#x, %s)", m.BusLockEvent.Name, m.BusLockEvent.Config, m.BusLockEvent.Source))
	} else {
		add("", "bus-lock event: none ("+m.BusLockReason+")")
	}
	if b := c.BusLockReports; b.On {
		add("", "kernel bus-lock reports: on, read from "+sense.KmsgPath+": "+b.Reason)
	} else {
		add("", "kernel bus-lock reports: off: "+b.Reason)
	}

	r := c.Resctrl
	if r.Mounted {
		var parts []string
		if r.L3CAT != nil {
			parts = append(parts, fmt.Sprintf("L3 CAT %d ways (mask %#x, min %d bits, %d closids)", r.L3CAT.Ways, r.L3CAT.CBMMask, r.L3CAT.MinCBMBits, r.L3CAT.NumClosids))
		}
		if r.CDP {
			parts = append(parts, "CDP")
		}
		if r.L2CAT != nil {
			parts = append(parts, fmt.Sprintf("L2 CAT %d ways", r.L2CAT.Ways))
		}
		if r.MBADetail != nil {
			parts = append(parts, fmt.Sprintf("MBA min %d gran %d %s (linear %v)", r.MBADetail.MinBandwidth, r.MBADetail.Granularity, r.MBADetail.Units, r.MBADetail.DelayLinear))
		}
		if r.Monitoring != nil {
			parts = append(parts, fmt.Sprintf("monitoring %s (%d RMIDs)", strings.Join(r.Monitoring.Features, ","), r.Monitoring.NumRMIDs))
		}
		if len(r.Groups) > 0 {
			parts = append(parts, "existing groups: "+strings.Join(r.Groups, ","))
		}
		add("resctrl", "mounted at "+r.Mount+": "+strings.Join(parts, "; "))
		for _, w := range r.Warnings {
			add("", "warning: "+w)
		}
	} else {
		add("resctrl", r.Reason)
	}

	if len(c.RAPL.Zones) > 0 {
		v = strings.Join(c.RAPL.Zones, ", ")
		if c.RAPL.Reason != "" {
			v += " (" + c.RAPL.Reason + ")"
		}
		add("rapl", v)
	} else {
		add("rapl", "no zones: "+c.RAPL.Reason)
	}

	f := c.CPUFreq
	if f.Present {
		add("cpufreq", fmt.Sprintf("%d policies, driver %s, governor %s, %d-%d MHz", f.Policies, strings.Join(f.Drivers, ","), strings.Join(f.Governors, ","), f.HWMinKHz/1000, f.HWMaxKHz/1000))
	} else {
		add("cpufreq", f.Reason)
	}

	if c.MSR.Present {
		add("msr", fmt.Sprintf("/dev/cpu/*/msr on %d CPUs", c.MSR.CPUs))
	} else {
		add("msr", c.MSR.Reason)
	}

	k := c.KVM
	v = fmt.Sprintf("/dev/kvm %s, CPU virtualization %s", presentAbsent(k.Device), orNone(k.Virtualization))
	if k.TDP != nil {
		v += fmt.Sprintf(", %s=%v", k.TDPParam[strings.LastIndex(k.TDPParam, "/")+1:], *k.TDP)
	}
	if k.Reason != "" {
		v += " (" + k.Reason + ")"
	}
	add("kvm", v)

	if c.Libvirt.Present {
		add("libvirt", "socket "+c.Libvirt.Socket)
	} else {
		add("libvirt", "no libvirt socket")
	}
	return out
}

func v1Names(g CgroupCap) []string {
	var out []string
	for _, c := range g.Controllers {
		if _, ok := g.V1[c]; ok {
			out = append(out, c)
		}
	}
	return out
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func presentAbsent(b bool) string {
	if b {
		return "present"
	}
	return "absent"
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
