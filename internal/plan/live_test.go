package plan

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

func TestStatusDirOnTrees(t *testing.T) {
	for tree, want := range map[string]string{
		"amd-naples-2s": "floating,stream,talk-1to1",
		"intel-skx-4s":  "db-remote,sap-hana,smt-wrong",
		"intel-skx-2s":  "",
		"dev-epyc-vm":   "",
	} {
		h, _ := openTree(t, tree)
		doms, errs, err := LoadDomains(context.Background(), StatusDir{Host: h})
		if err != nil || len(errs) > 0 {
			t.Fatalf("%s: %v %v", tree, err, errs)
		}
		var names []string
		for _, d := range doms {
			names = append(names, d.Name)
			if d.State != "running" || !strings.HasPrefix(d.Source, StatusDirPath+"/") {
				t.Errorf("%s/%s: state %q source %q", tree, d.Name, d.State, d.Source)
			}
		}
		if got := strings.Join(names, ","); got != want {
			t.Errorf("%s: domains %q, want %q", tree, got, want)
		}
	}
}

// A garbled status file is reported and skipped; the others are read.
func TestStatusDirMalformed(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "run/libvirt/qemu")
	os.MkdirAll(dir, 0o755)
	good, _ := os.ReadFile("testdata/libvirt-9.0-status-plan-probe.xml")
	os.WriteFile(filepath.Join(dir, "plan-probe.xml"), good, 0o644)
	os.WriteFile(filepath.Join(dir, "broken.xml"), []byte("<domstatus><domain><name>broken</nam"), 0o644)
	os.WriteFile(filepath.Join(dir, "half.xml.new"), []byte("<dom"), 0o644) // libvirt's temp file, not a domain
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	doms, errs, err := LoadDomains(context.Background(), StatusDir{Host: h})
	if err != nil {
		t.Fatal(err)
	}
	if len(doms) != 1 || doms[0].Name != "plan-probe" {
		t.Errorf("domains %v", doms)
	}
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "/run/libvirt/qemu/broken.xml: malformed") {
		t.Errorf("errors %v", errs)
	}
}

type fakeSource struct {
	doms []RunningDomain
	err  error
}

func (f fakeSource) RunningDomains(context.Context) ([]RunningDomain, error) { return f.doms, f.err }

// Live facts from a source (as the libvirt API gives them) override the XML.
func TestLoadDomainsOverlay(t *testing.T) {
	xml := []byte("<domain type='kvm'><name>vm</name><memory unit='GiB'>8</memory><vcpu>4</vcpu><cputune><vcpupin vcpu='0' cpuset='0'/></cputune></domain>")
	src := fakeSource{doms: []RunningDomain{{Name: "vm", Source: "qemu:///system", XML: xml, VCPUs: 2, MemoryKiB: 4 << 20,
		VCPUPins: []cpuset.Set{cpuset.Of(3), cpuset.Of(4)}, EmulatorPin: cpuset.Of(7)}}}
	doms, errs, err := LoadDomains(context.Background(), src)
	if err != nil || len(errs) > 0 || len(doms) != 1 {
		t.Fatalf("%v %v %v", doms, errs, err)
	}
	d := doms[0]
	if d.VCPUs != 2 || d.MaxVCPUs != 4 || d.MemoryKiB != 4<<20 || d.Pins[0].String() != "3" || d.Pins[1].String() != "4" || d.EmulatorPin.String() != "7" || d.PinSource != "live affinity" {
		t.Errorf("overlaid %+v", d)
	}
	for _, bad := range []RunningDomain{
		{Name: "other", Source: "s", XML: xml},
		{Name: "vm", Source: "s", XML: xml, VCPUs: 9},
	} {
		_, errs, _ := LoadDomains(context.Background(), fakeSource{doms: []RunningDomain{bad}})
		if len(errs) != 1 {
			t.Errorf("%+v accepted", bad)
		}
	}
	if _, _, err := LoadDomains(context.Background(), fakeSource{err: errors.New("connection refused")}); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("source error: %v", err)
	}
}

// fakePinner records live pin calls and can fail the n-th one.
type fakePinner struct {
	calls  []string
	failAt int // 1-based call number that fails; 0 never
}

func (f *fakePinner) call(s string) error {
	f.calls = append(f.calls, s)
	if f.failAt > 0 && len(f.calls) == f.failAt {
		return errors.New("domain not found: no domain with matching name")
	}
	return nil
}

func (f *fakePinner) PinVCPU(_ context.Context, dom string, vcpu int, cpus cpuset.Set) error {
	return f.call(fmt.Sprintf("%s vcpu %d -> %s", dom, vcpu, cpus))
}

func (f *fakePinner) PinEmulator(_ context.Context, dom string, cpus cpuset.Set) error {
	return f.call(fmt.Sprintf("%s emulator -> %s", dom, cpus))
}

func TestApply(t *testing.T) {
	h, hc := openTree(t, "intel-skx-4s")
	doms, _, err := LoadDomains(context.Background(), StatusDir{Host: h})
	if err != nil {
		t.Fatal(err)
	}
	var smt *Domain
	for _, d := range doms {
		if d.Name == "smt-wrong" {
			smt = d
		}
	}
	spec := SpecsFromDomains([]*Domain{smt}, OneToOne)
	if !spec.VMs[0].SMT || spec.VMs[0].VCPUs != 4 || spec.VMs[0].Memory != 8<<20 {
		t.Fatalf("spec from domain = %+v", spec.VMs[0])
	}
	p, err := Make(hc, spec, cpuset.Of(0, 112))
	if err != nil {
		t.Fatal(err)
	}
	// smt-wrong runs 84,85,86,87; the plan moves it to sibling pairs.
	f := &fakePinner{}
	done, err := Apply(context.Background(), f, p, []*Domain{smt}, hc.Topo.Online)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"smt-wrong vcpu 0 -> 1", "smt-wrong vcpu 1 -> 113", "smt-wrong vcpu 2 -> 2", "smt-wrong vcpu 3 -> 114", "smt-wrong emulator -> 0,112"}
	if strings.Join(f.calls, "; ") != strings.Join(want, "; ") || len(done) != 5 || done[0].From.String() != "84" {
		t.Errorf("calls %q (done %+v), want %q", f.calls, done, want)
	}

	// Applying to a domain already placed changes nothing.
	placed := *smt
	placed.Pins = p.VMs[0].Pins
	placed.EmulatorPin = p.VMs[0].Emulator
	f = &fakePinner{}
	if done, err := Apply(context.Background(), f, p, []*Domain{&placed}, hc.Topo.Online); err != nil || len(f.calls) != 0 || len(done) != 0 {
		t.Errorf("no-op apply: %v %q", err, f.calls)
	}

	// The domain vanishes at the third call: the two made are undone, in
	// reverse, back to where they were.
	f = &fakePinner{failAt: 3}
	_, err = Apply(context.Background(), f, p, []*Domain{smt}, hc.Topo.Online)
	if err == nil || !strings.Contains(err.Error(), "pinning smt-wrong vCPU 2") || !strings.Contains(err.Error(), "2 change(s) made before were undone") {
		t.Errorf("err = %v", err)
	}
	wantCalls := []string{"smt-wrong vcpu 0 -> 1", "smt-wrong vcpu 1 -> 113", "smt-wrong vcpu 2 -> 2", "smt-wrong vcpu 1 -> 85", "smt-wrong vcpu 0 -> 84"}
	if strings.Join(f.calls, "; ") != strings.Join(wantCalls, "; ") {
		t.Errorf("calls %q, want %q", f.calls, wantCalls)
	}

	// A planned domain that is not running: nothing is changed.
	f = &fakePinner{}
	if _, err := Apply(context.Background(), f, p, nil, hc.Topo.Online); err == nil || len(f.calls) != 0 {
		t.Errorf("missing domain: %v, calls %q", err, f.calls)
	}

	// A cancelled context stops before the first change.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f = &fakePinner{}
	if _, err := Apply(ctx, f, p, []*Domain{smt}, hc.Topo.Online); !errors.Is(err, context.Canceled) || len(f.calls) != 0 {
		t.Errorf("cancelled: %v, calls %q", err, f.calls)
	}
}
