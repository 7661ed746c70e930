package doctor

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText prints the report for a person: capabilities as aligned
// sections, then the checks with their reasons and advice.
func WriteText(w io.Writer, r Report) error {
	var b strings.Builder
	name := r.Host.Hostname
	if name == "" {
		name = "(unknown host)"
	}
	fmt.Fprintf(&b, "crosstalk doctor — %s, kernel %s, root %s\n\n", name, orUnknown(r.Host.Kernel), r.Root)

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	c := r.Capabilities
	fmt.Fprintln(tw, "CAPABILITIES\t")
	for _, l := range capabilityLines(c) {
		fmt.Fprintf(tw, "  %s\t%s\n", l[0], l[1])
	}
	tw.Flush()

	b.WriteString("\nCHECKS\n")
	for _, ch := range r.Checks {
		fmt.Fprintf(&b, "  %-9s %-20s %s\n", "["+string(ch.Status)+"]", ch.ID, ch.Summary)
		if ch.Status == OK {
			continue
		}
		for _, ev := range ch.Evidence {
			fmt.Fprintf(&b, "%33s %s = %s\n", "read:", ev.File, ev.Value)
		}
		wrap(&b, "why:", ch.Why)
		if ch.Advice != "" {
			wrap(&b, "advice:", ch.Advice)
		}
	}
	if len(r.Domains) > 0 {
		b.WriteString("\nDOMAINS (topology of running libvirt guests, from their status files)\n")
		for _, d := range r.Domains {
			if d.Error != "" {
				fmt.Fprintf(&b, "  %-9s %-20s %s\n", "[unknown]", d.Name, d.Error)
				continue
			}
			ok := 0
			for _, ch := range d.Checks {
				if ch.Status == OK {
					ok++
				}
			}
			fmt.Fprintf(&b, "  %s (%d vCPUs, %s): %d of %d checks ok\n", d.Name, d.VCPUs, d.Source, ok, len(d.Checks))
			for _, ch := range d.Checks {
				if ch.Status == OK {
					continue
				}
				fmt.Fprintf(&b, "  %-9s %-20s %s\n", "["+string(ch.Status)+"]", ch.ID, ch.Summary)
				for _, ev := range ch.Evidence {
					fmt.Fprintf(&b, "%33s %s = %s\n", "read:", ev.File, ev.Value)
				}
				wrap(&b, "why:", ch.Why)
				if ch.Advice != "" {
					wrap(&b, "advice:", ch.Advice)
				}
			}
		}
	}
	if len(r.Policies) > 0 {
		b.WriteString("\nPOLICIES (the agent's hardware policies and levers, built as `crosstalk run` would)\n")
		for _, p := range r.Policies {
			state := "[on]"
			if !p.On {
				state = "[off]"
			}
			fmt.Fprintf(&b, "  %-9s %s\n", state, p.Name)
			if p.Why != "" {
				wrap(&b, "why:", p.Why)
			}
		}
	}
	counts := map[Status]int{}
	for _, ch := range r.Checks {
		counts[ch.Status]++
	}
	fmt.Fprintf(&b, "\n%d ok, %d info, %d warn, %d unknown. `crosstalk doctor --json` for the full report.\n", counts[OK], counts[Info], counts[Warn], counts[Unknown])
	if len(r.Domains) > 0 {
		fmt.Fprintf(&b, "%s.\n", domainCounts(r.Domains))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// wrap writes a labelled paragraph indented under a check, wrapped at 100 columns.
func wrap(b *strings.Builder, label, text string) {
	const indent, width = 34, 100
	line := fmt.Sprintf("%33s", label)
	for _, word := range strings.Fields(text) {
		if len(line)+1+len(word) > width && len(line) > indent {
			b.WriteString(line + "\n")
			line = strings.Repeat(" ", indent-1)
		}
		line += " " + word
	}
	b.WriteString(line + "\n")
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
			add("", fmt.Sprintf("%s: CPUs %s, %s, %d-way", id, l3.CPUs, bytesIEC(l3.SizeBytes), l3.Ways))
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

func bytesIEC(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
