package plan

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

func mustSpec(t *testing.T, yaml string) *Spec {
	t.Helper()
	s, err := Parse([]byte(yaml), "spec")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func pinList(pl *Placement) []string {
	out := make([]string, len(pl.Pins))
	for i, p := range pl.Pins {
		out[i] = p.String()
	}
	return out
}

// The talk's slide: a 1-to-1 VM with virtual SMT on the 8-node host whose
// CPUs interleave nodes gets vCPU 0→0, 1→64, 2→8, 3→72, … 16→2, 17→66.
func TestPlanTalkPinning(t *testing.T) {
	_, hc := openTree(t, "amd-naples-2s")
	p, err := Make(hc, mustSpec(t, "vms:\n  - {name: talk, vcpus: 32, memory: 64GiB, policy: 1to1, smt: true}\n"), cpuset.Set{})
	if err != nil {
		t.Fatal(err)
	}
	pl := p.VMs[0]
	// As printed on the slide (vcpu 0-17), then the same pattern to 31.
	slide := []string{"0", "64", "8", "72", "16", "80", "24", "88", "32", "96", "40", "104", "48", "112", "56", "120", "2", "66"}
	for _, node := range []int{1} {
		for idx := 1; idx < 8; idx++ {
			first := idx*8 + 2*node
			slide = append(slide, fmt.Sprint(first), fmt.Sprint(first+64))
		}
	}
	if got := pinList(pl); !slices.Equal(got, slide) {
		t.Errorf("pins\n got %v\nwant %v", got, slide)
	}
	if pl.Topology != (VTopology{Sockets: 2, Dies: 2, Cores: 4, Threads: 2}) {
		t.Errorf("topology %s, want 2 sockets (nodes) × 2 dies (CCXs) × 4 cores × 2 threads", pl.Topology)
	}
	if len(pl.Cells) != 2 || pl.Cells[0].VCPUs.String() != "0-15" || pl.Cells[1].HostNodes.String() != "1" || pl.Cells[0].MemoryKiB != 32<<20 {
		t.Errorf("cells %+v", pl.Cells)
	}
	if !slices.Equal(pl.Nodes, []int{0, 1}) || pl.MemNodes.String() != "0-1" || pl.Cache != CachePassthrough {
		t.Errorf("nodes %v mem %s cache %s", pl.Nodes, pl.MemNodes, pl.Cache)
	}
	for _, c := range pl.Checks {
		if c.Status != OK {
			t.Errorf("planned XML fails %s: %s", c.ID, c.Summary)
		}
	}
	for _, want := range []string{`<vcpupin vcpu="17" cpuset="66"/>`, `<topology sockets="2" dies="2" cores="4" threads="2"/>`, `<memnode cellid="1" mode="strict" nodeset="1"/>`, `<cell id="1" cpus="16-31" memory="33554432" unit="KiB"/>`, `<cache mode="passthrough"/>`} {
		if !strings.Contains(pl.XML, want) {
			t.Errorf("XML lacks %s:\n%s", want, pl.XML)
		}
	}
}

// Small cases on the 2-socket Xeon (node0 = 0-7,16-23, siblings n and n+16).
func TestPlanExactSKX2S(t *testing.T) {
	_, hc := openTree(t, "intel-skx-2s")
	p, err := Make(hc, mustSpec(t, `vms:
  - {name: web, vcpus: 4, memory: 8GiB, policy: 1to1, smt: true}
  - {name: solo, vcpus: 2, memory: 4GiB, policy: 1to1}
  - {name: batch, vcpus: 4, memory: 4GiB, policy: per-node}
  - {name: llc, vcpus: 2, memory: 2GiB, policy: per-llc}
`), cpuset.Set{})
	if err != nil {
		t.Fatal(err)
	}
	web, solo, batch, llc := p.VMs[0], p.VMs[1], p.VMs[2], p.VMs[3]
	if got := pinList(web); !slices.Equal(got, []string{"0", "16", "1", "17"}) || web.Topology != (VTopology{1, 1, 2, 2}) || len(web.Cells) != 0 || web.MemNodes.String() != "0" {
		t.Errorf("web: pins %v topology %s cells %v mem %s", got, web.Topology, web.Cells, web.MemNodes)
	}
	// No SMT wanted: a whole core per vCPU, the siblings kept idle and used
	// for the VM's own emulator threads.
	if got := pinList(solo); !slices.Equal(got, []string{"2", "3"}) || solo.IdleSiblings.String() != "18-19" || solo.Emulator.String() != "18-19" || solo.Topology != (VTopology{1, 1, 2, 1}) {
		t.Errorf("solo: pins %v idle %s emulator %s topology %s", got, solo.IdleSiblings, solo.Emulator, solo.Topology)
	}
	if p.Dedicated.String() != "0-3,16-19" {
		t.Errorf("dedicated %s", p.Dedicated)
	}
	// per-llc goes first among the pools, to the less loaded L3 (socket 1:
	// 2 vCPUs on 16 CPUs beats 2 on the 8 the 1to1 VMs left on socket 0);
	// per-node then counts those 2 too: 6 on 16 beats 4 on 8.
	if got := llc.Pins[0].String(); got != "8-15,24-31" || llc.MemNodes.String() != "1" {
		t.Errorf("llc pinned to %s (mem %s)", got, llc.MemNodes)
	}
	if got := batch.Pins[3].String(); got != "8-15,24-31" || batch.Topology != (VTopology{1, 1, 4, 1}) {
		t.Errorf("batch pinned to %s, topology %s", got, batch.Topology)
	}
	if len(p.Warnings) != 0 {
		t.Errorf("warnings %v", p.Warnings)
	}
}

// Reserved CPUs are never given to vCPUs and carry the emulator threads.
func TestPlanReserve(t *testing.T) {
	_, hc := openTree(t, "intel-skx-2s")
	p, err := Make(hc, mustSpec(t, "vms:\n  - {name: a, vcpus: 4, memory: 1GiB, policy: 1to1, smt: true}\n  - {name: b, vcpus: 4, memory: 1GiB, policy: shared}\n"), cpuset.Of(0, 16))
	if err != nil {
		t.Fatal(err)
	}
	if got := pinList(p.VMs[0]); !slices.Equal(got, []string{"1", "17", "2", "18"}) || p.VMs[0].Emulator.String() != "0,16" {
		t.Errorf("a: %v emulator %s", got, p.VMs[0].Emulator)
	}
	if got := p.VMs[1].Pins[0].String(); got != "3-15,19-31" {
		t.Errorf("b shares %s", got)
	}
	if _, err := Make(hc, mustSpec(t, "vms:\n  - {name: a, vcpus: 1, memory: 1GiB, policy: shared}\n"), cpuset.Of(40)); err == nil || !strings.Contains(err.Error(), "not online") {
		t.Errorf("offline reserve: %v", err)
	}
}

func TestPlanErrors(t *testing.T) {
	tests := []struct{ tree, spec, want string }{
		{"dev-epyc-vm", "vms:\n  - {name: a, vcpus: 3, memory: 1GiB, policy: 1to1}\n", `line 2: vm "a" (1to1, 3 vCPUs, 1GiB): needs 3 free whole cores`},
		{"intel-skx-2s", "vms:\n  - {name: a, vcpus: 3, memory: 1GiB, policy: 1to1, smt: true}\n", "cannot be split into cores of 2 threads"},
		{"intel-skx-2s", "vms:\n  - {name: a, vcpus: 34, memory: 1GiB, policy: shared}\n", "only 32 CPUs"},
		{"intel-skx-2s", "vms:\n  - {name: a, vcpus: 17, memory: 1GiB, policy: per-node}\n", "no node has room"},
		{"intel-skx-2s", "vms:\n  - {name: a, vcpus: 4, memory: 200GiB, policy: 1to1}\n", "needs 4 free whole cores"},
		{"intel-skx-2s", "vms:\n  - {name: a, vcpus: 28, memory: 1GiB, policy: 1to1, smt: true}\n  - {name: b, vcpus: 4, memory: 1GiB, policy: 1to1}\n", `vm "b" (1to1, 4 vCPUs, 1GiB): needs 4 free whole cores split evenly over nodes and L3 domains (and 1GiB of node memory); free: node0 1, node1 1`},
	}
	for _, tc := range tests {
		_, hc := openTree(t, tc.tree)
		_, err := Make(hc, mustSpec(t, tc.spec), cpuset.Set{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: %v, want %q", tc.tree, tc.spec, err, tc.want)
		}
	}
}

// mixes are VM sizes that fit each tree under every policy, with and
// without SMT; together with the trees' layouts they exercise single-L3,
// multi-L3, multi-node and interleaved placement.
var mixes = map[string][]int{
	"dev-epyc-vm":   {1, 1},
	"intel-skx-2s":  {2, 4, 6},
	"amd-milan-1s":  {2, 4, 8},
	"amd-naples-2s": {4, 8, 16, 32},
	"intel-skx-4s":  {4, 8, 28, 56},
}

func TestPlanInvariantsEveryTree(t *testing.T) {
	hosts := map[string]*Host{}
	for tree := range mixes {
		_, hosts[tree] = openTree(t, tree)
	}
	for tree, sizes := range mixes {
		for _, pol := range Policies {
			for _, smt := range []bool{false, true} {
				for _, reserve := range []string{"", "0"} {
					name := fmt.Sprintf("%s/%s/smt=%v/reserve=%q", tree, pol, smt, reserve)
					t.Run(name, func(t *testing.T) {
						if tree == "dev-epyc-vm" && reserve != "" && pol == OneToOne {
							t.Skip("two 1-vCPU 1to1 VMs need both of the dev machine's CPUs")
						}
						hc := hosts[tree]
						var y strings.Builder
						y.WriteString("vms:\n")
						for i, n := range sizes {
							fmt.Fprintf(&y, "  - {name: vm%d, vcpus: %d, memory: %dGiB, policy: %s, smt: %v}\n", i, n, n, pol, smt && n%2 == 0)
						}
						spec := mustSpec(t, y.String())
						res := cpuset.MustParse(reserve)
						p, err := Make(hc, spec, res)
						if err != nil {
							t.Fatal(err)
						}
						checkInvariants(t, hc, spec, res, p)
					})
				}
			}
		}
		t.Run(tree+"/mixed", func(t *testing.T) {
			hc := hosts[tree]
			var y strings.Builder
			y.WriteString("vms:\n")
			for i, n := range sizes {
				fmt.Fprintf(&y, "  - {name: vm%d, vcpus: %d, memory: 1GiB, policy: %s, smt: %v}\n", i, n, Policies[i%len(Policies)], n%2 == 0)
			}
			spec := mustSpec(t, y.String())
			p, err := Make(hc, spec, cpuset.Set{})
			if err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, hc, spec, cpuset.Set{}, p)
		})
	}
}

// checkInvariants holds for every plan: pins on online, unreserved CPUs; no
// pCPU shared by two 1to1 vCPUs, nor by a 1to1 VM and anyone else; virtual
// threads on physical siblings and no-SMT 1to1 VMs never on siblings; NUMA
// and cache locality per policy; the XML parses back to the same pinning.
func checkInvariants(t *testing.T, hc *Host, spec *Spec, reserve cpuset.Set, p *Plan) {
	t.Helper()
	owner := map[int]string{}
	for i, pl := range p.VMs {
		vm := spec.VMs[i]
		if pl == nil || pl.VM.Name != vm.Name || len(pl.Pins) != vm.VCPUs {
			t.Fatalf("vm %d: placement %+v", i, pl)
		}
		threads := pl.Topology.Threads
		if pl.Topology.Sockets*pl.Topology.Dies*pl.Topology.Cores*threads != vm.VCPUs {
			t.Errorf("%s: topology %s for %d vCPUs", vm.Name, pl.Topology, vm.VCPUs)
		}
		for v, pin := range pl.Pins {
			if pin.IsEmpty() || !pin.IsSubsetOf(hc.Topo.Online) || !pin.Intersect(reserve).IsEmpty() {
				t.Errorf("%s vCPU %d pinned to %s (online %s, reserved %s)", vm.Name, v, pin, hc.Topo.Online, reserve)
			}
			if vm.Policy == OneToOne {
				if pin.Len() != 1 {
					t.Errorf("%s vCPU %d: 1to1 pin %s", vm.Name, v, pin)
				}
				if o, dup := owner[pin.First()]; dup {
					t.Errorf("CPU %d given to %s and %s vCPU %d", pin.First(), o, vm.Name, v)
				}
				owner[pin.First()] = vm.Name
			} else if !pin.Intersect(p.Dedicated).IsEmpty() {
				t.Errorf("%s (%s) vCPU %d may run on CPUs %s dedicated to 1to1 VMs", vm.Name, vm.Policy, v, pin.Intersect(p.Dedicated))
			}
			if vm.Policy != Shared && len(hc.NodesOf(pin)) != 1 {
				t.Errorf("%s vCPU %d spans nodes %v", vm.Name, v, hc.NodesOf(pin))
			}
			if vm.Policy == PerLLC || vm.Policy == OneToOne {
				if _, idx, _ := hc.L3Of(pin.First()); pin.Len() > 0 {
					for _, c := range pin.List() {
						if _, i2, _ := hc.L3Of(c); i2 != idx {
							t.Errorf("%s vCPU %d spans L3s", vm.Name, v)
						}
					}
				}
			}
		}
		if !pl.Emulator.IsSubsetOf(hc.Topo.Online) || pl.Emulator.IsEmpty() {
			t.Errorf("%s emulator %s", vm.Name, pl.Emulator)
		}
		if vm.Policy == OneToOne {
			cores := map[string][]int{}
			for v, pin := range pl.Pins {
				k := hc.siblings(pin.First()).String()
				cores[k] = append(cores[k], v)
			}
			for k, vs := range cores {
				switch {
				case threads == 1 && len(vs) > 1:
					t.Errorf("%s: vCPUs %v on siblings %s without SMT", vm.Name, vs, k)
				case threads > 1 && (len(vs) != threads || vs[0]%threads != 0 || vs[len(vs)-1] != vs[0]+threads-1):
					t.Errorf("%s: core %s has vCPUs %v, want one virtual core's %d threads", vm.Name, k, vs, threads)
				}
			}
			if vm.SMT && hc.Topo.SMT > 1 && threads != hc.Topo.SMT {
				t.Errorf("%s wants SMT: threads %d", vm.Name, threads)
			}
		}
		// Cells mirror nodes; memory bound where the vCPUs run.
		var pinNodes []int
		for _, pin := range pl.Pins {
			pinNodes = append(pinNodes, hc.NodesOf(pin)...)
		}
		slices.Sort(pinNodes)
		pinNodes = slices.Compact(pinNodes)
		if vm.Policy != Shared && pl.MemNodes.String() != cpuset.Of(pinNodes...).String() {
			t.Errorf("%s: memory on %s, vCPUs on %v", vm.Name, pl.MemNodes, pinNodes)
		}
		if len(pinNodes) > 1 && vm.Policy != Shared && len(pl.Cells) != len(pinNodes) {
			t.Errorf("%s spans %v with %d cells", vm.Name, pinNodes, len(pl.Cells))
		}
		var cellMem uint64
		for _, c := range pl.Cells {
			cellMem += c.MemoryKiB
			for _, v := range c.VCPUs.List() {
				if got := hc.NodesOf(pl.Pins[v]); !slices.Equal(got, c.HostNodes.List()) {
					t.Errorf("%s cell %d vCPU %d on nodes %v, cell bound to %s", vm.Name, c.ID, v, got, c.HostNodes)
				}
			}
		}
		if len(pl.Cells) > 0 && cellMem != uint64(vm.Memory) {
			t.Errorf("%s: cells hold %d KiB of %d", vm.Name, cellMem, vm.Memory)
		}
		// The XML, parsed back, says the same.
		d := pl.Domain
		if d == nil || d.MaxVCPUs != vm.VCPUs || d.Topology != pl.Topology || !d.EmulatorPin.Equal(pl.Emulator) || len(d.Cells) != len(pl.Cells) {
			t.Fatalf("%s: XML parsed back as %+v", vm.Name, d)
		}
		for v := range pl.Pins {
			if !d.Pins[v].Equal(pl.Pins[v]) {
				t.Errorf("%s vCPU %d: XML pins %s, plan %s", vm.Name, v, d.Pins[v], pl.Pins[v])
			}
		}
		// The plan's own checks: 1to1 and per-llc placements keep NUMA,
		// SMT and L3 sharing consistent; per-node keeps NUMA and SMT.
		for _, c := range pl.Checks {
			strict := map[Policy][]string{
				OneToOne: {CheckNUMASpan, CheckSMTSiblings, CheckL3Sharing, CheckPhysBits},
				PerLLC:   {CheckNUMASpan, CheckSMTSiblings, CheckL3Sharing, CheckPhysBits},
				PerNode:  {CheckNUMASpan, CheckSMTSiblings, CheckPhysBits},
				Shared:   {CheckSMTSiblings, CheckPhysBits},
			}[vm.Policy]
			if slices.Contains(strict, c.ID) && c.Status != OK {
				t.Errorf("%s (%s): %s = %s: %s", vm.Name, vm.Policy, c.ID, c.Status, c.Summary)
			}
		}
	}
}

// copyTree copies a host tree so a test can edit it.
func copyTree(t *testing.T, name string) string {
	t.Helper()
	dst := t.TempDir()
	src := treeDir(name)
	err := filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if e.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// An offline CPU is never used, even where stale node and sibling lists
// still name it, and its lone sibling cannot carry a virtual thread pair.
func TestPlanNeverUsesOfflineCPUs(t *testing.T) {
	root := copyTree(t, "intel-skx-2s")
	if err := os.WriteFile(filepath.Join(root, "sys/devices/system/cpu/online"), []byte("0-4,6-31\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	hc, err := ReadHost(h)
	if err != nil {
		t.Fatal(err)
	}
	for _, pol := range Policies {
		for _, smt := range []bool{true, false} {
			// Large enough that node 0 (with CPU 5) must be used.
			spec := mustSpec(t, fmt.Sprintf("vms:\n  - {name: a, vcpus: 8, memory: 1GiB, policy: %s, smt: %v}\n  - {name: b, vcpus: 6, memory: 1GiB, policy: %s, smt: %v}\n", pol, smt, pol, smt))
			p, err := Make(hc, spec, cpuset.Set{})
			if err != nil {
				t.Fatalf("%s smt=%v: %v", pol, smt, err)
			}
			for _, pl := range p.VMs {
				for v, pin := range pl.Pins {
					if pin.Contains(5) {
						t.Errorf("%s smt=%v: %s vCPU %d on offline CPU 5", pol, smt, pl.VM.Name, v)
					}
				}
				if pl.Emulator.Contains(5) {
					t.Errorf("%s: emulator on offline CPU 5", pl.VM.Name)
				}
				if pl.VM.Policy == OneToOne && pl.VM.SMT {
					for _, pin := range pl.Pins {
						if pin.First() == 21 {
							t.Errorf("CPU 21 (sibling of offline 5) carries a virtual thread pair")
						}
					}
				}
			}
			checkInvariants(t, hc, spec, cpuset.Set{}, p)
		}
	}
}

// Over-committed pools are reported, not refused.
func TestPlanOvercommitWarning(t *testing.T) {
	_, hc := openTree(t, "intel-skx-2s")
	p, err := Make(hc, mustSpec(t, `vms:
  - {name: a, vcpus: 16, memory: 1GiB, policy: per-node}
  - {name: b, vcpus: 16, memory: 1GiB, policy: per-node}
  - {name: c, vcpus: 16, memory: 1GiB, policy: per-node}
`), cpuset.Set{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, w := range p.Warnings {
		if strings.Contains(w, "over-commit: 32 vCPUs confined to the 16 CPUs of node") && strings.Contains(w, "2.00") {
			found = true
		}
	}
	if !found {
		t.Errorf("warnings %v, want node over-commit 2.00", p.Warnings)
	}
	for _, pool := range p.Pools {
		if pool.What == "all CPUs not reserved or dedicated" && (pool.VCPUs != 48 || pool.CPUs.Len() != 32) {
			t.Errorf("overall pool %+v", pool)
		}
	}
}
