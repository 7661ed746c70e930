package plan

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// HostLine summarises the host in one line.
func HostLine(hc *Host) string {
	t := hc.Topo
	name := hc.Hostname
	if name == "" {
		name = "(unknown host)"
	}
	return fmt.Sprintf("%s: %d CPUs (%d cores × %d threads), %d package(s), %d NUMA node(s), %d L3 domain(s)",
		name, t.Online.Len(), t.Cores(), max(t.SMT, 1), len(t.Packages), len(t.Nodes), len(t.CacheLevel(3)))
}

// WriteText prints a plan for a person: the placement table, pools and
// warnings, the checks that are not ok, and each VM's XML.
func WriteText(w io.Writer, hc *Host, p *Plan) error {
	var b strings.Builder
	reserved := p.Reserved.String()
	if reserved == "" {
		reserved = "none"
	}
	fmt.Fprintf(&b, "crosstalk plan — %s; reserved for the host: %s\n\n", HostLine(hc), reserved)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VM\tPOLICY\tVCPUS\tMEMORY\tTOPOLOGY s/d/c/t\tNODES\tCELLS\tCACHE\tVCPU → CPU")
	for _, pl := range p.VMs {
		cells := "-"
		if len(pl.Cells) > 0 {
			cells = itoa(len(pl.Cells))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", pl.VM.Name, pl.VM.Policy, pl.VM.VCPUs, pl.VM.Memory,
			pl.Topology, nodeList(pl.Nodes), cells, pl.Cache, pinCell(pl))
	}
	tw.Flush()
	if !p.Dedicated.IsEmpty() {
		fmt.Fprintf(&b, "\nDedicated to 1to1 VMs (no other vCPU runs there): %s\n", p.Dedicated)
	}
	if len(p.Pools) > 0 {
		b.WriteString("\nSHARED POOLS (vCPUs confined to them / CPUs)\n")
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, pool := range p.Pools {
			fmt.Fprintf(tw, "  %s\t%d / %d\t%.2f\t%s\n", pool.What, pool.VCPUs, pool.CPUs.Len(), pool.Ratio, pool.CPUs)
		}
		tw.Flush()
	}
	notes := false
	for _, pl := range p.VMs {
		for _, n := range pl.Notes {
			if !notes {
				b.WriteString("\nNOTES\n")
				notes = true
			}
			fmt.Fprintf(&b, "  %s: %s\n", pl.VM.Name, n)
		}
	}
	if len(p.Warnings) > 0 {
		b.WriteString("\nWARNINGS\n")
		for _, w := range p.Warnings {
			fmt.Fprintf(&b, "  %s\n", w)
		}
	}
	b.WriteString("\nTOPOLOGY CHECKS OF THE PLANNED XML\n")
	for _, pl := range p.VMs {
		writeChecks(&b, pl.VM.Name, pl.Checks, false)
	}
	b.WriteString("\nXML (paste into `virsh edit NAME`; <topology>, <numa> and <cache> take effect at the next boot)\n")
	for _, pl := range p.VMs {
		fmt.Fprintf(&b, "\n<!-- %s -->\n%s", pl.VM.Name, pl.XML)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// pinCell renders a VM's pinning for the table: the CPU of each vCPU under
// 1to1 (shortened), else the pool(s).
func pinCell(pl *Placement) string {
	if pl.VM.Policy == OneToOne {
		var parts []string
		for i, s := range pl.Pins {
			if i == 8 && len(pl.Pins) > 10 {
				parts = append(parts, "…", pl.Pins[len(pl.Pins)-1].String())
				break
			}
			parts = append(parts, s.String())
		}
		return strings.Join(parts, " ")
	}
	var pools []string
	for i, s := range pl.Pins {
		if i == 0 || !s.Equal(pl.Pins[i-1]) {
			pools = append(pools, s.String())
		}
	}
	return "any of " + strings.Join(pools, " | ")
}

// WriteDomainChecks prints the checks of running domains, with evidence,
// reasons and advice for those that are not ok.
func WriteDomainChecks(w io.Writer, doms []*Domain, checks [][]Check) error {
	var b strings.Builder
	for i, d := range doms {
		fmt.Fprintf(&b, "%s (%s)\n", d.Name, d.Source)
		writeChecks(&b, d.Name, checks[i], true)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeChecks(b *strings.Builder, name string, cs []Check, details bool) {
	ok := 0
	for _, c := range cs {
		if c.Status == OK {
			ok++
		}
	}
	if ok == len(cs) {
		fmt.Fprintf(b, "  %-12s all %d ok\n", name, len(cs))
		return
	}
	for _, c := range cs {
		if c.Status == OK {
			continue
		}
		fmt.Fprintf(b, "  %-12s %-9s %-18s %s\n", name, "["+string(c.Status)+"]", c.ID, c.Summary)
		if details {
			for _, e := range c.Evidence {
				fmt.Fprintf(b, "  %12s %-9s read: %s = %s\n", "", "", e.File, e.Value)
			}
		}
		if c.Advice != "" {
			fmt.Fprintf(b, "  %12s %-9s advice: %s\n", "", "", c.Advice)
		}
	}
}
