package libvirt

import (
	"errors"
	"strings"
	"testing"
)

func TestMachineName(t *testing.T) {
	for _, tc := range []struct {
		id         int
		name, want string
	}{
		{3, "web", "qemu-3-web"},
		{7, "ct-libvirt-victim", "qemu-7-ct-libvirt-victim"},
		// Only hostname characters survive; runs of '.'/'-' collapse; none lead or trail.
		{1, "my_vm (prod)", "qemu-1-myvmprod"},
		{1, "..a--b..c-", "qemu-1-a-b.c"},
		{2, "-x-", "qemu-2-x"},
		// The whole name stops growing at 64 bytes.
		{12, strings.Repeat("a", 80), "qemu-12-" + strings.Repeat("a", 56)},
	} {
		if got := MachineName("qemu", tc.id, tc.name); got != tc.want {
			t.Errorf("MachineName(%d, %q) = %q, want %q", tc.id, tc.name, got, tc.want)
		}
	}
}

func TestParseMachineCgroup(t *testing.T) {
	for _, tc := range []struct {
		cgroup string
		want   MachineRef
		ok     bool
	}{
		{"/machine/qemu-3-web.libvirt-qemu", MachineRef{"qemu", 3, "web"}, true},
		{"/machine/qemu-12-ct-libvirt-victim.libvirt-qemu", MachineRef{"qemu", 12, "ct-libvirt-victim"}, true},
		{`/machine.slice/machine-qemu\x2d3\x2dweb.scope`, MachineRef{"qemu", 3, "web"}, true},
		{`/machine.slice/machine-qemu\x2dembed\x2d0123abcd\x2d4\x2ddb.scope`, MachineRef{"qemu", 4, "db"}, true},
		{"/prod.partition/_qemu-5-api.libvirt-qemu", MachineRef{"qemu", 5, "api"}, true},
		{"/machine/web.libvirt-qemu", MachineRef{"qemu", -1, "web"}, true}, // older libvirt
		{"/machine/ch-2-fc.libvirt-ch", MachineRef{"ch", 2, "fc"}, true},
		{"/machine.slice/machine-libpod_pod_abc.slice", MachineRef{}, false},
		{"/machine.slice/machine-foo.scope", MachineRef{}, false},
		{"/system.slice/docker-abc.scope", MachineRef{}, false},
		{"/machine/.libvirt-qemu", MachineRef{}, false},
	} {
		got, ok := ParseMachineCgroup(tc.cgroup)
		if ok != tc.ok || got != tc.want {
			t.Errorf("ParseMachineCgroup(%s) = %+v, %v; want %+v, %v", tc.cgroup, got, ok, tc.want, tc.ok)
		}
	}
	d := Domain{Name: "my_vm (prod)", ID: 1}
	if ref, _ := ParseMachineCgroup("/machine/qemu-1-myvmprod.libvirt-qemu"); !ref.Matches(d) {
		t.Error("sanitised name did not match its domain")
	}
	if ref, _ := ParseMachineCgroup("/machine/qemu-2-myvmprod.libvirt-qemu"); ref.Matches(d) {
		t.Error("matched a domain with another ID")
	}
}

const fullXML = `<domain type='kvm'>
  <name>db</name><uuid>4dea22b3-1d52-d8f3-2516-782e98ab3fa0</uuid>
  <memory unit='GiB'>8</memory>
  <vcpu placement='static' cpuset='0-7,^3' current='4'>6</vcpu>
  <cputune>
    <shares>2048</shares>
    <period>100000</period><quota>-1</quota>
    <global_period>100000</global_period><global_quota>400000</global_quota>
    <emulator_period>50000</emulator_period><emulator_quota>20000</emulator_quota>
    <vcpupin vcpu='0' cpuset='4'/><vcpupin vcpu='1' cpuset='5'/>
    <emulatorpin cpuset='1-2'/>
    <iothreadpin iothread='1' cpuset='6'/>
    <cachetune vcpus='0-1'>
      <cache id='0' level='3' type='both' size='3' unit='MiB'/>
    </cachetune>
  </cputune>
  <numatune><memory mode='strict' nodeset='0'/><memnode cellid='0' mode='preferred' nodeset='0'/></numatune>
  <resource><partition>/prod</partition></resource>
  <cpu mode='host-passthrough'><topology sockets='1' dies='1' cores='3' threads='2'/></cpu>
  <os><type arch='x86_64'>hvm</type></os>
</domain>`

func TestParseDomainXML(t *testing.T) {
	c, err := ParseDomainXML(fullXML)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "db" || c.UUID != "4dea22b3-1d52-d8f3-2516-782e98ab3fa0" || c.VCPUs != 4 || c.MaxVCPUs != 6 {
		t.Errorf("identity: %+v", c)
	}
	if c.VCPUCPUSet.String() != "0-2,4-7" {
		t.Errorf("<vcpu cpuset> with exclusion: %s", c.VCPUCPUSet)
	}
	if c.VCPUCPUs(0).String() != "4" || c.VCPUCPUs(3).String() != "0-2,4-7" || c.EmulatorPin.String() != "1-2" || c.IOThreadPins[1].String() != "6" {
		t.Errorf("pins: vcpu0 %s vcpu3 %s emulator %s iothread1 %s", c.VCPUCPUs(0), c.VCPUCPUs(3), c.EmulatorPin, c.IOThreadPins[1])
	}
	if pinned, all := c.PinnedCPUs(); !all || pinned.String() != "0-2,4-7" {
		t.Errorf("PinnedCPUs = %s, %v", pinned, all)
	}
	ct := c.CPUTune
	if *ct.Shares != 2048 || *ct.Period != 100000 || *ct.Quota != -1 || *ct.GlobalQuota != 400000 || *ct.EmulatorPeriod != 50000 || *ct.EmulatorQuota != 20000 {
		t.Errorf("cputune: %+v", ct)
	}
	if len(c.CacheTunes) != 1 || c.CacheTunes[0].VCPUs.String() != "0-1" || c.CacheTunes[0].Caches[0] != (CacheBank{ID: 0, Level: 3, Type: "both", Size: 3, Unit: "MiB"}) {
		t.Errorf("cachetune: %+v", c.CacheTunes)
	}
	if n := c.NUMATune; n == nil || n.Mode != "strict" || n.Nodeset != "0" || len(n.MemNodes) != 1 || n.MemNodes[0].Mode != "preferred" {
		t.Errorf("numatune: %+v", c.NUMATune)
	}
	if c.Partition != "/prod" || c.Topology != (Topology{1, 1, 3, 2}) {
		t.Errorf("partition %q topology %+v", c.Partition, c.Topology)
	}
}

func TestParseDomainXMLUnpinned(t *testing.T) {
	c, err := ParseDomainXML(`<domain type='qemu'><name>free</name><vcpu>2</vcpu><cputune><vcpupin vcpu='0' cpuset='1'/></cputune></domain>`)
	if err != nil {
		t.Fatal(err)
	}
	if _, all := c.PinnedCPUs(); all {
		t.Error("a domain with an unpinned vCPU and emulator reported fully pinned")
	}
	if c.Partition != "/machine" || c.NUMATune != nil {
		t.Errorf("defaults: partition %q numatune %+v", c.Partition, c.NUMATune)
	}
}

func TestParseDomainXMLRejectsMalformed(t *testing.T) {
	for name, doc := range map[string]string{
		"empty":          "  ",
		"not xml":        "this is not xml",
		"truncated":      "<domain><name>x</name><vcpu>2</vcpu><cputune>",
		"not a domain":   "<network><name>default</name></network>",
		"no name":        "<domain><vcpu>1</vcpu></domain>",
		"no vcpu":        "<domain><name>x</name></domain>",
		"bad cpuset":     "<domain><name>x</name><vcpu>1</vcpu><cputune><vcpupin vcpu='0' cpuset='1-'/></cputune></domain>",
		"pin past vcpus": "<domain><name>x</name><vcpu>1</vcpu><cputune><vcpupin vcpu='3' cpuset='1'/></cputune></domain>",
		"bad emulator":   "<domain><name>x</name><vcpu>1</vcpu><cputune><emulatorpin cpuset='^1'/></cputune></domain>",
		"current > max":  "<domain><name>x</name><vcpu current='4'>2</vcpu></domain>",
		"bad quota":      "<domain><name>x</name><vcpu>1</vcpu><cputune><quota>lots</quota></cputune></domain>",
	} {
		_, err := ParseDomainXML(doc)
		if !errors.Is(err, ErrMalformedXML) {
			t.Errorf("%s: err = %v, want ErrMalformedXML", name, err)
		}
	}
}

func FuzzParseDomainXML(f *testing.F) {
	f.Add(fullXML)
	f.Add("<domain><name>x</name><vcpu>1</vcpu></domain>")
	f.Add("<domain><name>x</name><vcpu current='1'>2</vcpu><cputune><vcpupin vcpu='1' cpuset='0-3,^2'/></cputune></domain>")
	f.Fuzz(func(t *testing.T, doc string) {
		c, err := ParseDomainXML(doc)
		if err != nil {
			if !errors.Is(err, ErrMalformedXML) {
				t.Fatalf("error not wrapping ErrMalformedXML: %v", err)
			}
			return
		}
		// Whatever parses is usable: a name, vCPUs, pins within range.
		if c.Name == "" || c.VCPUs < 1 || c.VCPUs > c.MaxVCPUs {
			t.Fatalf("accepted %+v", c)
		}
		for v := range c.VCPUPins {
			if v >= c.MaxVCPUs {
				t.Fatalf("pin for vCPU %d of %d", v, c.MaxVCPUs)
			}
		}
		c.PinnedCPUs()
	})
}
