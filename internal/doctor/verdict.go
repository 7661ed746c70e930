package doctor

import (
	"fmt"
	"strings"
)

// VerdictItem is one thing `crosstalk run` does, or would do and cannot, on
// this host: a sensor, a lever or a hardware policy.
type VerdictItem struct {
	Name string `json:"name"`
	On   bool   `json:"on"`
	// What says what it does here when on, and the reason when off, in
	// one short clause (the policies' full reasons are under POLICIES).
	What string `json:"what"`
}

// Verdict says what `crosstalk run` will do on the host of r: the canary
// probe, the CPU-wait signal, the CPU-quota lever, the PMU counters and
// the CPI signal they feed, then each hardware policy and lever of
// r.Policies.
func Verdict(r Report) []VerdictItem {
	c := r.Capabilities
	var out []VerdictItem

	probe := VerdictItem{Name: "canary probe"}
	switch t := c.Topology; {
	case t.Error != "":
		probe.What = "cannot place itself: topology unknown (" + t.Error + ")"
	case len(t.L3) == 0:
		probe.On, probe.What = true, fmt.Sprintf("lock, LLC, DRAM latency on CPUs %s (no L3 listed)", t.Online)
	case len(t.L3) == 1:
		probe.On, probe.What = true, fmt.Sprintf("lock, LLC, DRAM latency in 1 L3 domain (CPUs %s)", t.L3[0].CPUs)
	default:
		probe.On, probe.What = true, fmt.Sprintf("lock, LLC, DRAM latency in each of %d L3 domains", len(t.L3))
	}
	out = append(out, probe)

	wait := VerdictItem{Name: "CPU wait", On: true, What: "run delay of every tenant, and CPU pressure (PSI)"}
	if !c.PSIInfo.PerCgroup {
		wait.What = "run delay of every tenant (no PSI per cgroup)"
	}
	out = append(out, wait)

	quota := VerdictItem{Name: "cpu_quota"}
	switch c.Cgroup.CPUControl {
	case "v1":
		quota.On, quota.What = true, "caps the polluter's CPU (cgroup v1 cpu.cfs_quota_us)"
	case "v2":
		quota.On, quota.What = true, "caps the polluter's CPU (cgroup v2 cpu.max)"
	default:
		quota.What = "no cgroup CPU controller: it can sense, not throttle"
	}
	out = append(out, quota)

	counters := VerdictItem{Name: "PMU counters"}
	switch p := c.PMU; {
	case !p.Hardware:
		counters.What = "no hardware PMU: the canary probe alone finds polluters (what it sees here: crosstalk lab visibility)"
	case p.LiveProbe != "" && p.LiveProbe != "ok":
		counters.What = "counters cannot be opened: " + p.LiveProbe
	default:
		counters.On, counters.What = true, "cycles, instructions and LLC misses per tenant"
	}
	out = append(out, counters)

	cpi := VerdictItem{Name: "CPI", On: counters.On, What: "each tenant's cycles per instruction against its usual"}
	if !cpi.On {
		cpi.What = "no cycles and instructions per tenant"
	}
	out = append(out, cpi)

	reports := VerdictItem{Name: "kernel reports", On: c.BusLockReports.On}
	if reports.On {
		reports.What = "names the tenants whose threads take bus locks"
	} else {
		reports.What = shortReason(c.BusLockReports.Reason)
	}
	out = append(out, reports)

	for _, p := range r.Policies {
		v := VerdictItem{Name: p.Name, On: p.On, What: shortReason(p.Why)}
		if v.On && v.What == "" {
			v.What = policyDoes[p.Name]
			if v.What == "" {
				v.What = "on"
			}
		}
		out = append(out, v)
	}
	return out
}

// policyDoes says what each of the agent's hardware policies and levers does
// when it runs.
var policyDoes = map[string]string{
	"buslocks":         "holds each tenant to a share of a bus-lock budget",
	"permits":          "holds tenants to their booked LLC pollution",
	"power":            "keeps each socket within its power budget",
	"llc":              "gives the polluter a small slice of the L3 (CAT)",
	"mba":              "caps the polluter's memory bandwidth (MBA)",
	"clock_modulation": "slows the polluter's own cores (clock modulation)",
	"cpufreq":          "lowers the clock of the polluter's own cores",
}

// shortReason is the first clause of a policy's reason: up to the first
// colon or semicolon outside parentheses, without a long one's closing
// parenthesis that adds detail. "resctrl unavailable: not mounted …" → "resctrl
// unavailable".
func shortReason(why string) string {
	depth := 0
	cut := len(why)
	for i, r := range why {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ':', ';':
			if depth == 0 && (i+1 == len(why) || why[i+1] == ' ') {
				cut = i
			}
		}
		if cut < len(why) {
			break
		}
	}
	s := strings.TrimSpace(why[:cut])
	if len(s) > 40 && strings.HasSuffix(s, ")") {
		if i := strings.LastIndex(s, " ("); i > 0 {
			s = s[:i]
		}
	}
	// Still long: the rest of a sentence after its first parenthesis is
	// detail (the root … is not this machine (…), so …).
	if i := strings.Index(s, " ("); len(s) > 60 && i > 0 {
		s = s[:i]
	}
	return s
}
