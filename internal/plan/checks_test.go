package plan

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// The talk's STREAM numbers: a 64-core host with 64 MB of L3 and 512 KB of
// L2 per core copies non-temporally above 6 MB; a VM with QEMU's 16 MB L3
// over 64 cores above 3 MB; STREAM's 763 MB arrays over 128 threads copy
// 5.96 MB at a time, between the two.
func TestCopyThresholdTalkNumbers(t *testing.T) {
	host := CopyThreshold(64<<20, 512<<10, 64)
	vm := CopyThreshold(16<<20, 512<<10, 64)
	if host != 6<<20 || vm != 3<<20 {
		t.Fatalf("host %d, vm %d; want 6 MiB and 3 MiB", host, vm)
	}
	chunk := int64(763<<20) / 128
	if !(chunk > vm && chunk < host) {
		t.Errorf("chunk %d not between %d and %d", chunk, vm, host)
	}
	if CopyThreshold(1<<20, 0, 0) != 4<<20 {
		t.Error("0 cores must count as 1")
	}
}

func TestRAMTop(t *testing.T) {
	tests := []struct {
		mem, maxMem uint64 // KiB
		slots       int
		machine     string
		want        uint64
	}{
		// The talk's guest: e820 ends at 0x2b57fffffff.
		{2772 << 20, 0, 0, "pc-q35-7.2", 0x2b580000000},
		{1 << 20, 0, 0, "q35", 1 << 30},
		{4 << 20, 0, 0, "q35", 6 << 30},           // 2 GiB low, 2 GiB from 4 GiB up
		{2 << 20, 0, 0, "pc-q35-7.2", 2 << 30},    // below the 2.75 GiB switch: all low
		{4 << 20, 0, 0, "pc-i440fx-7.2", 5 << 30}, // 3 GiB low, 1 GiB high
		{3 << 20, 0, 0, "pc-i440fx-7.2", 3 << 30},
		{4 << 20, 8 << 20, 2, "q35", 6<<30 + 4<<30 + 2<<30},
	}
	for _, tc := range tests {
		if got := RAMTop(tc.mem, tc.maxMem, tc.slots, tc.machine); got != tc.want {
			t.Errorf("RAMTop(%d KiB, %d KiB, %d, %q) = %#x, want %#x", tc.mem, tc.maxMem, tc.slots, tc.machine, got, tc.want)
		}
	}
}

// Every domain in the trees' libvirt status files, and what each check
// says about it: one guest placed as the talk recommends, others tripping
// each check.
func TestChecksOnTreeDomains(t *testing.T) {
	type want map[string]Status
	tests := []struct {
		tree, domain string
		want         want
		evidence     []string // substrings the evidence must hold
	}{
		{"amd-naples-2s", "talk-1to1", want{CheckNUMASpan: OK, CheckSMTSiblings: OK, CheckL3Sharing: OK, CheckCopyThreshold: OK, CheckPhysBits: OK}, nil},
		{"amd-naples-2s", "stream", want{CheckNUMASpan: Warn, CheckSMTSiblings: OK, CheckL3Sharing: Warn, CheckCopyThreshold: Warn, CheckPhysBits: OK},
			[]string{"(16 MiB / 16 cores + 512 KiB) × 4 = 6 MiB", "(8 MiB / 4 cores + 512 KiB) × 4 = 10 MiB", "spans 4 physical L3s"}},
		{"amd-naples-2s", "floating", want{CheckNUMASpan: Warn, CheckSMTSiblings: OK, CheckL3Sharing: OK, CheckCopyThreshold: Warn, CheckPhysBits: OK},
			[]string{"not pinned", "(16 MiB / 1 cores + 512 KiB) × 4 = 66 MiB"}},
		{"intel-skx-4s", "sap-hana", want{CheckNUMASpan: OK, CheckSMTSiblings: OK, CheckL3Sharing: OK, CheckCopyThreshold: Warn, CheckPhysBits: Warn},
			[]string{"0x2b57fffffff", "<maxphysaddr mode='emulate' bits='42'/>", "l1tf bug: true", "(38.5 MiB / 14 cores + 1 MiB) × 4 = 15 MiB"}},
		{"intel-skx-4s", "db-remote", want{CheckNUMASpan: Warn, CheckSMTSiblings: OK, CheckL3Sharing: OK, CheckCopyThreshold: Warn, CheckPhysBits: OK},
			[]string{"mode='strict' nodeset='2'", "node1/cpulist = 28-55,140-167"}},
		{"intel-skx-4s", "smt-wrong", want{CheckNUMASpan: OK, CheckSMTSiblings: Warn, CheckL3Sharing: OK, CheckCopyThreshold: Warn, CheckPhysBits: OK},
			[]string{"sockets/dies/cores/threads 1/1/2/2"}},
	}
	seen := map[string]map[string]bool{}
	for _, tc := range tests {
		t.Run(tc.tree+"/"+tc.domain, func(t *testing.T) {
			h, hc := openTree(t, tc.tree)
			doms, errs, err := LoadDomains(context.Background(), StatusDir{Host: h})
			if err != nil || len(errs) > 0 {
				t.Fatalf("loading: %v %v", err, errs)
			}
			if seen[tc.tree] == nil {
				seen[tc.tree] = map[string]bool{}
				for _, d := range doms {
					seen[tc.tree][d.Name] = false
				}
			}
			var d *Domain
			for _, x := range doms {
				if x.Name == tc.domain {
					d = x
				}
			}
			if d == nil {
				t.Fatalf("no domain %s in %s", tc.domain, tc.tree)
			}
			seen[tc.tree][tc.domain] = true
			checks := CheckDomain(hc, d)
			if len(checks) != len(CheckIDs) {
				t.Fatalf("%d checks", len(checks))
			}
			var all strings.Builder
			for _, c := range checks {
				if c.Status != tc.want[c.ID] {
					t.Errorf("%s = %s (%s), want %s", c.ID, c.Status, c.Summary, tc.want[c.ID])
				}
				if c.Summary == "" || c.Why == "" || len(c.Evidence) == 0 {
					t.Errorf("%s lacks summary, why or evidence", c.ID)
				}
				if c.Status == Warn && c.Advice == "" {
					t.Errorf("%s warns without advice", c.ID)
				}
				for _, e := range c.Evidence {
					fmt.Fprintf(&all, "%s = %s\n", e.File, e.Value)
				}
				all.WriteString(c.Summary + "\n" + c.Advice + "\n")
			}
			for _, s := range tc.evidence {
				if !strings.Contains(all.String(), s) {
					t.Errorf("checks do not mention %q:\n%s", s, all.String())
				}
			}
		})
	}
	for tree, doms := range seen {
		for name, ok := range doms {
			if !ok {
				t.Errorf("%s: domain %s has no expectations here", tree, name)
			}
		}
	}
}

// smt-wrong's advice names the sibling of each virtual core's first thread.
func TestSMTAdviceIsExactXML(t *testing.T) {
	h, hc := openTree(t, "intel-skx-4s")
	doms, _, _ := LoadDomains(context.Background(), StatusDir{Host: h})
	for _, d := range doms {
		if d.Name != "smt-wrong" {
			continue
		}
		c := CheckDomain(hc, d)[1]
		for _, want := range []string{"<vcpupin vcpu='0' cpuset='84'/><vcpupin vcpu='1' cpuset='196'/>", "<vcpupin vcpu='2' cpuset='86'/><vcpupin vcpu='3' cpuset='198'/>"} {
			if !strings.Contains(c.Advice, want) {
				t.Errorf("advice %q lacks %q", c.Advice, want)
			}
		}
		return
	}
	t.Fatal("no smt-wrong domain")
}

// Each check's other branches, on hand-written domains on the 2-socket SMT
// Xeon (CPUs 0-7 + siblings 16-23 on node 0, one 11 MiB L3 per socket).
func TestCheckBranches(t *testing.T) {
	_, hc := openTree(t, "intel-skx-2s")
	dom := func(body string) *Domain {
		t.Helper()
		d, err := ParseDomainFile([]byte("<domain type='kvm'><name>t</name><os><type machine='pc-q35-7.2'>hvm</type></os>"+body+"</domain>"), "t.xml")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	pins := func(cpus ...int) string {
		var b strings.Builder
		b.WriteString("<cputune>")
		for i, c := range cpus {
			fmt.Fprintf(&b, "<vcpupin vcpu='%d' cpuset='%d'/>", i, c)
		}
		return b.String() + "</cputune>"
	}
	tests := []struct {
		name, body, check string
		want              Status
		summary           string
	}{
		{"threads=1 on siblings", "<memory unit='GiB'>4</memory><vcpu>2</vcpu>" + pins(3, 19) + "<cpu mode='host-passthrough'><topology sockets='1' dies='1' cores='2' threads='1'/></cpu>",
			CheckSMTSiblings, Info, "sibling threads of one physical core"},
		{"threads=2 on siblings", "<memory unit='GiB'>4</memory><vcpu>4</vcpu>" + pins(3, 19, 4, 20) + "<cpu mode='host-passthrough'><topology sockets='1' dies='1' cores='2' threads='2'/></cpu>",
			CheckSMTSiblings, OK, "pinned 1-to-1"},
		{"threads=2 floating", "<memory unit='GiB'>4</memory><vcpu cpuset='0-7'>4</vcpu><cpu mode='host-passthrough'><topology sockets='1' dies='1' cores='2' threads='2'/></cpu>",
			CheckSMTSiblings, Warn, "not pinned 1-to-1"},
		{"flat sockets inside one L3", "<memory unit='GiB'>4</memory><vcpu>2</vcpu>" + pins(1, 2) + "<cpu mode='host-passthrough'/>",
			CheckL3Sharing, Info, "the guest does not know"},
		{"one die across sockets", "<memory unit='GiB'>4</memory><vcpu>2</vcpu>" + pins(1, 9) + "<cpu mode='host-passthrough'><topology sockets='1' dies='1' cores='2' threads='1'/></cpu>",
			CheckL3Sharing, Warn, "spans 2 physical L3s"},
		{"one die per socket", "<memory unit='GiB'>4</memory><vcpu>2</vcpu>" + pins(1, 9) + "<cpu mode='host-passthrough'><topology sockets='2' dies='1' cores='1' threads='1'/></cpu>",
			CheckL3Sharing, OK, "matches"},
		{"node without numatune", "<memory unit='GiB'>4</memory><vcpu>2</vcpu>" + pins(1, 2), CheckNUMASpan, Info, "memory is not bound"},
		{"node with numatune", "<memory unit='GiB'>4</memory><vcpu>2</vcpu>" + pins(1, 2) + "<numatune><memory mode='strict' nodeset='0'/></numatune>", CheckNUMASpan, OK, "vCPUs and memory on node 0"},
		{"pinned to CPUs the host lacks", "<memory unit='GiB'>4</memory><vcpu cpuset='70'>2</vcpu>", CheckNUMASpan, Warn, "on none of this host's 2 NUMA nodes"},
		{"cells, memory unbound", "<memory unit='GiB'>4</memory><vcpu>2</vcpu>" + pins(1, 9) +
			"<cpu mode='host-passthrough'><topology sockets='2' dies='1' cores='1' threads='1'/><numa><cell id='0' cpus='0' memory='2' unit='GiB'/><cell id='1' cpus='1' memory='2' unit='GiB'/></numa></cpu>",
			CheckNUMASpan, Info, "is not bound to node"},
		{"cells swapped", "<memory unit='GiB'>4</memory><vcpu>4</vcpu>" + pins(1, 9, 2, 10) +
			"<cpu mode='host-passthrough'><topology sockets='2' dies='1' cores='2' threads='1'/><numa><cell id='0' cpus='0-1' memory='2' unit='GiB'/><cell id='1' cpus='2-3' memory='2' unit='GiB'/></numa></cpu>",
			CheckNUMASpan, Warn, "run on 2 NUMA nodes"},
		{"cache disabled", "<memory unit='GiB'>4</memory><vcpu>2</vcpu>" + pins(1, 2) + "<cpu mode='host-passthrough'><cache mode='disable'/></cpu>",
			CheckCopyThreshold, Info, "no cache information"},
		{"copy threshold matches", "<memory unit='GiB'>4</memory><vcpu>8</vcpu>" + pins(0, 1, 2, 3, 4, 5, 6, 7) + "<cpu mode='host-passthrough'><topology sockets='1' dies='1' cores='8' threads='1'/><cache mode='passthrough'/></cpu>",
			CheckCopyThreshold, OK, "same strategy"},
		{"named model, 40 bits", "<memory unit='GiB'>600</memory><vcpu>2</vcpu><cpu mode='custom'><model>Skylake-Server</model></cpu>",
			CheckPhysBits, Warn, "above MAX_PA/2 = 512 GiB of its 40 address bits"},
		{"beyond the address space", "<memory unit='TiB'>2</memory><vcpu>2</vcpu><cpu mode='custom'><model>Skylake-Server</model></cpu>",
			CheckPhysBits, Warn, "beyond what 40 address bits"},
		{"qemu commandline host-phys-bits", "<memory unit='GiB'>600</memory><vcpu>2</vcpu><cpu mode='custom'><model>Skylake-Server</model></cpu><commandline xmlns='http://libvirt.org/schemas/domain/qemu/1.0'><arg value='-cpu'/><arg value='host,host-phys-bits=on'/></commandline>",
			CheckPhysBits, OK, "46 address bits"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range CheckDomain(hc, dom(tc.body)) {
				if c.ID != tc.check {
					continue
				}
				if c.Status != tc.want || !strings.Contains(c.Summary, tc.summary) {
					t.Errorf("%s = %s %q, want %s with %q", c.ID, c.Status, c.Summary, tc.want, tc.summary)
				}
				return
			}
			t.Fatalf("no check %s", tc.check)
		})
	}
}

// On an AMD host (no L1TF) RAM above MAX_PA/2 is fine; a host without SMT
// cannot back virtual threads.
func TestChecksOnAMDAndNoSMT(t *testing.T) {
	_, naples := openTree(t, "amd-naples-2s")
	d, err := ParseDomainFile([]byte("<domain><name>big</name><memory unit='GiB'>600</memory><vcpu>2</vcpu><cpu mode='custom'><model>EPYC</model></cpu></domain>"), "big.xml")
	if err != nil {
		t.Fatal(err)
	}
	if c := CheckDomain(naples, d)[4]; c.Status != OK || !strings.Contains(c.Summary, "not affected by L1TF") {
		t.Errorf("phys bits on AMD = %s %q", c.Status, c.Summary)
	}
	if c := CheckDomain(naples, d)[3]; !strings.Contains(c.Evidence[2].Value, "CPU model EPYC: QEMU's table for it gives L3 8 MiB") {
		t.Errorf("EPYC model caches: %+v", c.Evidence)
	}
	_, dev := openTree(t, "dev-epyc-vm")
	d, err = ParseDomainFile([]byte("<domain><name>ht</name><memory unit='GiB'>1</memory><vcpu>2</vcpu><cputune><vcpupin vcpu='0' cpuset='0'/><vcpupin vcpu='1' cpuset='1'/></cputune><cpu mode='host-passthrough'><topology sockets='1' dies='1' cores='1' threads='2'/></cpu></domain>"), "ht.xml")
	if err != nil {
		t.Fatal(err)
	}
	checks := CheckDomain(dev, d)
	if c := checks[1]; c.Status != Warn || !strings.Contains(c.Summary, "host has no SMT") {
		t.Errorf("virtual SMT on a no-SMT host = %s %q", c.Status, c.Summary)
	}
	if c := checks[0]; c.Status != OK || !strings.Contains(c.Summary, "one NUMA node") {
		t.Errorf("numa on a one-node host = %s %q", c.Status, c.Summary)
	}
}
