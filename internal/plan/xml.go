package plan

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"html"
	"regexp"

	"libvirt.org/go/libvirtxml"
)

// Fragments renders the elements of x a plan sets — <memory>, <vcpu>,
// <cputune>, <numatune> and <cpu> — in libvirt's element order, ready to
// paste into `virsh edit`.
func Fragments(x *libvirtxml.Domain) (string, error) {
	var b bytes.Buffer
	enc := xml.NewEncoder(&b)
	enc.Indent("", "  ")
	for _, e := range []struct {
		name string
		v    any
		set  bool
	}{
		{"memory", x.Memory, x.Memory != nil},
		{"vcpu", x.VCPU, x.VCPU != nil},
		{"cputune", x.CPUTune, x.CPUTune != nil},
		{"numatune", x.NUMATune, x.NUMATune != nil},
		{"cpu", x.CPU, x.CPU != nil},
	} {
		if !e.set {
			continue
		}
		if err := enc.EncodeElement(e.v, xml.StartElement{Name: xml.Name{Local: e.name}}); err != nil {
			return "", fmt.Errorf("<%s>: %w", e.name, err)
		}
	}
	if err := enc.Flush(); err != nil {
		return "", err
	}
	// encoding/xml never writes empty elements as <x/>; libvirt does.
	return emptyElemRE.ReplaceAllString(b.String(), "<$1$2/>") + "\n", nil
}

var emptyElemRE = regexp.MustCompile(`<([a-zA-Z][a-zA-Z0-9_]*)((?:\s+[a-zA-Z_:][-a-zA-Z0-9_:.]*="[^"]*")*)></([a-zA-Z][a-zA-Z0-9_]*)>`)

// ParseFragments reads fragments back as a domain named name, the way
// libvirt would see them inside <domain>.
func ParseFragments(name, frag string) (*Domain, error) {
	doc := "<domain type='kvm'><name>" + html.EscapeString(name) + "</name>" + frag + "</domain>"
	var x libvirtxml.Domain
	if err := x.Unmarshal(doc); err != nil {
		return nil, err
	}
	return DomainFromXML(&x, "plan:"+name)
}
