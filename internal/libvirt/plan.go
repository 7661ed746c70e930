package libvirt

import (
	"context"
	"fmt"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/plan"
)

// XML reads a domain's live XML now (virDomainGetXMLDesc, flags 0).
func (c *Client) XML(ctx context.Context, d Domain) (string, error) {
	ref, err := d.ref()
	if err != nil {
		return "", err
	}
	var doc string
	err = c.call(ctx, "domain "+d.Name+" XML", func(r rpc) error {
		var err error
		doc, err = r.DomainGetXMLDesc(ref, 0)
		return err
	})
	return doc, err
}

// PlanSource is crosstalk plan's view of the running domains through the
// libvirt API (plan.DomainSource and plan.Pinner): the live XML, the vCPUs
// online and their live affinity, and live pinning by domain name.
type PlanSource struct {
	Client *Client
	// URI names the connection in the evidence (default qemu:///system).
	URI string
}

// RunningDomains lists the running domains now, with their live XML and
// vCPU affinities. A domain that stops meanwhile is left out.
func (s PlanSource) RunningDomains(ctx context.Context) ([]plan.RunningDomain, error) {
	doms, err := s.Client.Refresh(ctx)
	if err != nil {
		return nil, err
	}
	uri := s.URI
	if uri == "" {
		uri = "qemu:///system"
	}
	var out []plan.RunningDomain
	for _, d := range doms {
		if d.State != "running" && d.State != "paused" && d.State != "blocked" {
			continue
		}
		doc, err := s.Client.XML(ctx, d)
		if err != nil {
			continue // stopped meanwhile, or unreadable: the others are planned
		}
		rd := plan.RunningDomain{Name: d.Name, UUID: d.UUID, Source: uri, XML: []byte(doc), VCPUs: d.VCPUs}
		if vs, err := s.Client.VCPUs(ctx, d); err == nil {
			rd.VCPUPins = make([]cpuset.Set, 0, len(vs))
			for _, v := range vs {
				for len(rd.VCPUPins) < v.Index {
					rd.VCPUPins = append(rd.VCPUPins, cpuset.Set{})
				}
				rd.VCPUPins = append(rd.VCPUPins, v.Affinity)
			}
		}
		out = append(out, rd)
	}
	return out, nil
}

// domain finds a listed domain by name.
func (s PlanSource) domain(name string) (Domain, error) {
	doms, _ := s.Client.Domains()
	for _, d := range doms {
		if d.Name == name {
			return d, nil
		}
	}
	return Domain{}, fmt.Errorf("domain %s: %w", name, ErrDomainGone)
}

// PinVCPU pins a vCPU of a running domain live.
func (s PlanSource) PinVCPU(ctx context.Context, domain string, vcpu int, cpus cpuset.Set) error {
	d, err := s.domain(domain)
	if err != nil {
		return err
	}
	return s.Client.PinVCPU(ctx, d, vcpu, cpus)
}

// PinEmulator pins a running domain's emulator threads live.
func (s PlanSource) PinEmulator(ctx context.Context, domain string, cpus cpuset.Set) error {
	d, err := s.domain(domain)
	if err != nil {
		return err
	}
	return s.Client.PinEmulator(ctx, d, cpus)
}

var (
	_ plan.DomainSource = PlanSource{}
	_ plan.Pinner       = PlanSource{}
)
