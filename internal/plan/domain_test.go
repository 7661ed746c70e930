package plan

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

func treeDir(name string) string { return filepath.Join("..", "..", "testdata", "hosts", name) }

func openTree(t *testing.T, name string) (*host.Host, *Host) {
	t.Helper()
	h, err := host.Open(treeDir(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	hc, err := ReadHost(h)
	if err != nil {
		t.Fatal(err)
	}
	return h, hc
}

// The status file libvirt 9.0 wrote for a running TCG guest on the dev
// machine (session daemon, captured verbatim) reads as libvirt meant it.
func TestParseRealStatusFile(t *testing.T) {
	data, err := os.ReadFile("testdata/libvirt-9.0-status-plan-probe.xml")
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseDomainFile(data, "plan-probe.xml")
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "plan-probe" || d.UUID != "e7c326bd-e799-4e9a-b374-9b55c469457f" || d.State != "running" {
		t.Errorf("identity = %q %q %q", d.Name, d.UUID, d.State)
	}
	if d.MaxVCPUs != 4 || d.VCPUs != 4 || d.MemoryKiB != 131072 || d.Machine != "pc-q35-7.2" {
		t.Errorf("size = %d/%d vCPUs, %d KiB, %q", d.VCPUs, d.MaxVCPUs, d.MemoryKiB, d.Machine)
	}
	if d.Topology != (VTopology{2, 1, 1, 2}) || !d.TopologyGiven || d.Cache != "emulate" || d.CPUMode != "custom" || d.CPUModel != "qemu64" {
		t.Errorf("cpu = %+v given=%v cache=%q mode=%q model=%q", d.Topology, d.TopologyGiven, d.Cache, d.CPUMode, d.CPUModel)
	}
	want := []string{"0", "1", "0", "1"}
	for i, p := range d.Pins {
		if p.String() != want[i] {
			t.Errorf("vCPU %d pinned to %s, want %s", i, p, want[i])
		}
	}
	if d.PinSource != "vcpupin" || d.EmulatorPin.String() != "0-1" {
		t.Errorf("pin source %q emulator %s", d.PinSource, d.EmulatorPin)
	}
	if len(d.Cells) != 2 || d.Cells[1].VCPUs.String() != "2-3" || d.Cells[1].MemoryKiB != 65536 {
		t.Errorf("cells = %+v", d.Cells)
	}
}

const bareDomain = `<domain type='kvm'>
  <name>bare</name>
  <memory unit='GiB'>4</memory>
  <vcpu placement='static' cpuset='0-7,^3' current='6'>8</vcpu>
  <cputune><vcpupin vcpu='0' cpuset='1'/></cputune>
  <numatune><memory nodeset='1'/></numatune>
  <os><type machine='pc-i440fx-7.2'>hvm</type></os>
  <cpu mode='host-model'><maxphysaddr mode='emulate' bits='39'/></cpu>
</domain>`

func TestParseBareDomain(t *testing.T) {
	d, err := ParseDomainFile([]byte(bareDomain), "bare.xml")
	if err != nil {
		t.Fatal(err)
	}
	if d.VCPUs != 6 || d.MaxVCPUs != 8 || d.MemoryKiB != 4<<20 || d.State != "" {
		t.Errorf("bare = %+v", d)
	}
	if d.Pins[0].String() != "1" || d.Pins[1].String() != "0-2,4-7" || d.PinSource != "vcpupin" {
		t.Errorf("pins %v (%s)", d.Pins[:2], d.PinSource)
	}
	if d.NUMAMode != "strict" || d.NUMANodeset.String() != "1" {
		t.Errorf("numatune %q %s", d.NUMAMode, d.NUMANodeset)
	}
	if d.TopologyGiven || d.Topology != (VTopology{8, 1, 1, 1}) {
		t.Errorf("default topology = %+v", d.Topology)
	}
	if d.PhysAddr == nil || d.PhysAddr.Bits != 39 {
		t.Errorf("maxphysaddr = %+v", d.PhysAddr)
	}
}

// vcpu placement='auto': only the status file's <numad> says where libvirt
// pinned the vCPUs.
func TestParseNumadStatus(t *testing.T) {
	doc := `<domstatus state='running' reason='booted' pid='1'>
  <numad nodeset='1' cpuset='8-15,24-31'/>
  <domain type='kvm' id='3'><name>auto</name><memory>1048576</memory><vcpu placement='auto'>2</vcpu></domain>
</domstatus>`
	d, err := ParseDomainFile([]byte(doc), "auto.xml")
	if err != nil {
		t.Fatal(err)
	}
	if d.PinSource != "numad" || d.Pins[1].String() != "8-15,24-31" {
		t.Errorf("pins %v from %q", d.Pins, d.PinSource)
	}
}

func TestParseDomainErrors(t *testing.T) {
	tests := []struct{ doc, want string }{
		{"<domstatus><domain><name>x</name>", "malformed"},
		{"<domstatus state='running'></domstatus>", "no <domain> element"},
		{"not xml at all", "no <domain>"},
		{"<domain><vcpu>2</vcpu></domain>", "no <name>"},
		{"<domain><name>x</name></domain>", "no <vcpu> count"},
		{"<domain><name>x</name><vcpu>4</vcpu><cpu><topology sockets='1' cores='2' threads='1'/></cpu></domain>", "makes 2 vCPUs, <vcpu> says 4"},
		{"<domain><name>x</name><vcpu>2</vcpu><cputune><vcpupin vcpu='5' cpuset='1'/></cputune></domain>", "beyond 2 vCPUs"},
		{"<domain><name>x</name><vcpu>2</vcpu><cputune><vcpupin vcpu='0' cpuset='z'/></cputune></domain>", "cpuset=\"z\""},
		{"<domain><name>x</name><vcpu>2</vcpu><memory unit='parsec'>2</memory></domain>", "unknown memory unit"},
		{"<domain><name>x</name><vcpu>5000</vcpu></domain>", "more than 1024"},
	}
	for _, tc := range tests {
		_, err := ParseDomainFile([]byte(tc.doc), "f.xml")
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "f.xml: ") {
			t.Errorf("ParseDomainFile(%q) = %v, want %q", tc.doc, err, tc.want)
		}
	}
}

func TestToKiB(t *testing.T) {
	for _, tc := range []struct {
		v    uint
		unit string
		want uint64
	}{{4, "GiB", 4 << 20}, {4, "G", 4 << 20}, {1, "GB", 976562}, {2048, "", 2048}, {1, "TiB", 1 << 30}, {1 << 20, "b", 1024}} {
		if got, err := toKiB(tc.v, tc.unit); err != nil || got != tc.want {
			t.Errorf("toKiB(%d, %q) = %d, %v; want %d", tc.v, tc.unit, got, err, tc.want)
		}
	}
}

// QEMU's vCPU order: threads fastest, then cores, dies, sockets.
func TestVCPUPosition(t *testing.T) {
	top := VTopology{Sockets: 2, Dies: 2, Cores: 4, Threads: 2}
	for _, tc := range []struct {
		v         int
		want      vcpuPos
		die, core int
	}{
		{0, vcpuPos{0, 0, 0, 0}, 0, 0},
		{1, vcpuPos{0, 0, 0, 1}, 0, 0},
		{2, vcpuPos{0, 0, 1, 0}, 0, 1},
		{8, vcpuPos{0, 1, 0, 0}, 1, 4},
		{16, vcpuPos{1, 0, 0, 0}, 2, 8},
		{31, vcpuPos{1, 1, 3, 1}, 3, 15},
	} {
		if got := top.pos(tc.v); got != tc.want || top.dieOf(tc.v) != tc.die || top.coreOf(tc.v) != tc.core {
			t.Errorf("vCPU %d: pos %+v die %d core %d; want %+v %d %d", tc.v, got, top.dieOf(tc.v), top.coreOf(tc.v), tc.want, tc.die, tc.core)
		}
	}
}

func TestParseLibvirtCPUSet(t *testing.T) {
	if s, err := parseLibvirtCPUSet("0-7,^3,^5-6"); err != nil || !s.Equal(cpuset.Of(0, 1, 2, 4, 7)) {
		t.Errorf("got %s, %v", s, err)
	}
	for _, bad := range []string{"", "^3", "a-b"} {
		if _, err := parseLibvirtCPUSet(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzParseDomainFile(f *testing.F) {
	if data, err := os.ReadFile("testdata/libvirt-9.0-status-plan-probe.xml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte(bareDomain))
	f.Add([]byte("<domain><name>x</name><vcpu>3</vcpu><cpu><topology sockets='3' dies='1' cores='1' threads='1'/><numa><cell cpus='0-2' memory='1'/></numa></cpu></domain>"))
	h, err := host.Open(treeDir("intel-skx-2s"))
	if err != nil {
		f.Fatal(err)
	}
	hc, err := ReadHost(h)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseDomainFile(data, "fuzz.xml")
		if err != nil {
			return
		}
		if d.VCPUs < 1 || d.VCPUs > d.MaxVCPUs || len(d.Pins) != d.MaxVCPUs {
			t.Fatalf("inconsistent domain: %d/%d vCPUs, %d pins", d.VCPUs, d.MaxVCPUs, len(d.Pins))
		}
		for _, c := range CheckDomain(hc, d) {
			if c.Summary == "" || c.Status == "" {
				t.Fatalf("check %s without verdict", c.ID)
			}
			if strings.Contains(c.Summary, "internal") {
				t.Fatalf("check %s panicked: %s", c.ID, c.Why)
			}
		}
	})
}
