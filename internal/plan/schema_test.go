package plan

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
)

// Every kind of XML the planner writes — 1to1 with and without SMT, cells
// with <memnode>s, both cache modes, <maxphysaddr> — validates against the
// installed libvirt's domain schema (virt-xml-validate, libvirt-clients, with
// xmllint from libxml2-utils).
func TestPlannedXMLValidatesAgainstLibvirtSchema(t *testing.T) {
	if _, err := exec.LookPath("virt-xml-validate"); err != nil {
		t.Skip("virt-xml-validate not installed (apt-get install libvirt-clients libxml2-utils)")
	}
	if _, err := exec.LookPath("xmllint"); err != nil {
		t.Skip("xmllint not installed (apt-get install libxml2-utils)")
	}
	_, hc := openTree(t, "amd-naples-2s")
	p, err := Make(hc, mustSpec(t, `vms:
  - {name: talk, vcpus: 32, memory: 64GiB, policy: 1to1, smt: true, phys_bits: host}
  - {name: solo, vcpus: 8, memory: 8GiB, policy: 1to1, cache: emulate, phys_bits: 46}
  - {name: llc, vcpus: 16, memory: 16GiB, policy: per-llc}
  - {name: node, vcpus: 4, memory: 4GiB, policy: per-node}
  - {name: all, vcpus: 4, memory: 4GiB, policy: shared, phys_bits: default}
  - {name: big, vcpus: 8, memory: 200GiB, policy: per-node}
`), cpuset.Of(7, 71))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, pl := range p.VMs {
		doc := fmt.Sprintf("<domain type='kvm'>\n<name>%s</name>\n<os><type arch='x86_64' machine='q35'>hvm</type></os>\n%s</domain>\n", pl.VM.Name, pl.XML)
		f := filepath.Join(dir, pl.VM.Name+".xml")
		if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("virt-xml-validate", f, "domain").CombinedOutput()
		if err != nil {
			t.Errorf("%s does not validate: %v\n%s\n%s", pl.VM.Name, err, out, doc)
		}
	}
	// The validator rejects what libvirt would.
	bad := filepath.Join(dir, "bad.xml")
	os.WriteFile(bad, []byte(strings.Replace(fmt.Sprintf("<domain type='kvm'><name>b</name><os><type>hvm</type></os>%s</domain>", p.VMs[0].XML), `threads="2"`, `threads="two"`, 1)), 0o644)
	if err := exec.Command("virt-xml-validate", bad, "domain").Run(); err == nil {
		t.Error("a broken <topology> validated: the schema check proves nothing")
	}
}

// The live <domain> inside every status file the trees carry (and the one
// libvirt wrote on the dev machine) is valid libvirt domain XML.
func TestTreeStatusFilesValidate(t *testing.T) {
	if _, err := exec.LookPath("virt-xml-validate"); err != nil {
		t.Skip("virt-xml-validate not installed (apt-get install libvirt-clients libxml2-utils)")
	}
	if _, err := exec.LookPath("xmllint"); err != nil {
		t.Skip("xmllint not installed (apt-get install libxml2-utils)")
	}
	files, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "hosts", "*", "run", "libvirt", "qemu", "*.xml"))
	files = append(files, filepath.Join("testdata", "libvirt-9.0-status-plan-probe.xml"))
	if len(files) < 7 {
		t.Fatalf("only %d status files", len(files))
	}
	dir := t.TempDir()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s := string(data)
		i, j := strings.Index(s, "<domain "), strings.LastIndex(s, "</domain>")
		if i < 0 || j < i {
			t.Fatalf("%s: no <domain>", f)
		}
		out := filepath.Join(dir, filepath.Base(f))
		os.WriteFile(out, []byte(s[i:j+len("</domain>")]), 0o644)
		if msg, err := exec.Command("virt-xml-validate", out, "domain").CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", f, err, msg)
		}
	}
}
