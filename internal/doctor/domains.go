package doctor

import (
	"context"
	"fmt"

	"github.com/crosstalk-project/crosstalk/internal/plan"
)

// DomainReport is the topology checks of one running libvirt domain, read
// from libvirt's status file. Error is set, and Checks empty, when the file
// could not be read as a domain.
type DomainReport struct {
	Name   string  `json:"name"`
	UUID   string  `json:"uuid,omitempty"`
	Source string  `json:"source"`
	State  string  `json:"state,omitempty"`
	VCPUs  int     `json:"vcpus,omitempty"`
	Checks []Check `json:"checks"`
	Error  string  `json:"error,omitempty"`
}

// domainReports runs the plan package's topology checks on every domain in
// /run/libvirt/qemu (read-only). A host without libvirt has none, and then
// nothing else is read.
func domainReports(e *env) []DomainReport {
	out := []DomainReport{}
	running, err := plan.StatusDir{Host: e.h}.RunningDomains(context.Background())
	if err != nil || len(running) == 0 {
		if err != nil {
			e.opt.Log.Warn("doctor: cannot list libvirt status files", "err", err)
		}
		return out
	}
	hc, err := plan.ReadHost(e.h)
	if err != nil {
		for _, r := range running {
			out = append(out, DomainReport{Name: r.Name, Source: r.Source, Checks: []Check{}, Error: "host topology unreadable: " + err.Error()})
		}
		return out
	}
	for _, r := range running {
		d, err := plan.ParseDomainFile(r.XML, r.Source)
		if err != nil {
			e.opt.Log.Warn("doctor: skipping a libvirt status file", "file", r.Source, "err", err)
			out = append(out, DomainReport{Name: r.Name, Source: r.Source, Checks: []Check{}, Error: err.Error()})
			continue
		}
		rep := DomainReport{Name: d.Name, UUID: d.UUID, Source: r.Source, State: d.State, VCPUs: d.VCPUs}
		rep.Checks = plan.CheckDomain(hc, d)
		out = append(out, rep)
	}
	return out
}

// domainCounts is "3 domains: 5 ok, 0 info, 4 warn, 0 unknown".
func domainCounts(ds []DomainReport) string {
	counts := map[Status]int{}
	for _, d := range ds {
		for _, c := range d.Checks {
			counts[c.Status]++
		}
	}
	return fmt.Sprintf("%d domain(s): %d ok, %d info, %d warn, %d unknown", len(ds), counts[OK], counts[Info], counts[Warn], counts[Unknown])
}
