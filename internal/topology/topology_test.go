package topology

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

func openTree(t *testing.T, root string) *host.Host {
	t.Helper()
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func TestReadTrees(t *testing.T) {
	tests := []struct {
		tree                          string
		cpus, pkgs, cores, smt, nodes int
		l3                            []string // L3 domains' CPUs
		l3Size                        int64
		l3Ways                        int
		siblings                      map[int]string
		nodeOf                        map[int]int
	}{
		{
			tree: "dev-epyc-vm", cpus: 2, pkgs: 1, cores: 2, smt: 1, nodes: 1,
			l3: []string{"0-1"}, l3Size: 32 << 20, l3Ways: 16,
			siblings: map[int]string{0: "0", 1: "1"}, nodeOf: map[int]int{1: 0},
		},
		{
			tree: "intel-skx-2s", cpus: 32, pkgs: 2, cores: 16, smt: 2, nodes: 2,
			l3: []string{"0-7,16-23", "8-15,24-31"}, l3Size: 11264 << 10, l3Ways: 11,
			siblings: map[int]string{3: "3,19", 19: "3,19", 8: "8,24"},
			nodeOf:   map[int]int{20: 0, 9: 1, 31: 1},
		},
		{
			tree: "amd-milan-1s", cpus: 32, pkgs: 1, cores: 16, smt: 2, nodes: 1,
			l3:     []string{"0-3,16-19", "4-7,20-23", "8-11,24-27", "12-15,28-31"},
			l3Size: 32 << 20, l3Ways: 16,
			siblings: map[int]string{1: "1,17", 30: "14,30"}, nodeOf: map[int]int{30: 0},
		},
	}
	for _, tc := range tests {
		t.Run(tc.tree, func(t *testing.T) {
			tp, err := Read(openTree(t, filepath.Join("..", "..", "testdata", "hosts", tc.tree)))
			if err != nil {
				t.Fatal(err)
			}
			if len(tp.Warnings) > 0 {
				t.Errorf("warnings on a good tree: %v", tp.Warnings)
			}
			if tp.Online.Len() != tc.cpus || len(tp.Packages) != tc.pkgs || tp.Cores() != tc.cores || tp.SMT != tc.smt || len(tp.Nodes) != tc.nodes {
				t.Errorf("cpus %d pkgs %d cores %d smt %d nodes %d; want %d %d %d %d %d",
					tp.Online.Len(), len(tp.Packages), tp.Cores(), tp.SMT, len(tp.Nodes), tc.cpus, tc.pkgs, tc.cores, tc.smt, tc.nodes)
			}
			l3 := tp.CacheLevel(3)
			if len(l3) != len(tc.l3) {
				t.Fatalf("L3 domains = %d, want %d", len(l3), len(tc.l3))
			}
			for i, c := range l3 {
				if c.CPUs.String() != tc.l3[i] || c.SizeBytes != tc.l3Size || c.Ways != tc.l3Ways {
					t.Errorf("L3[%d] = %s %d %d-way, want %s %d %d-way", i, c.CPUs, c.SizeBytes, c.Ways, tc.l3[i], tc.l3Size, tc.l3Ways)
				}
			}
			for cpu, want := range tc.siblings {
				c, ok := tp.CPU(cpu)
				if !ok || c.Siblings.String() != want {
					t.Errorf("cpu%d siblings = %s, want %s", cpu, c.Siblings, want)
				}
			}
			for cpu, want := range tc.nodeOf {
				if c, _ := tp.CPU(cpu); c.Node != want {
					t.Errorf("cpu%d node = %d, want %d", cpu, c.Node, want)
				}
			}
			for _, p := range tp.Packages {
				if p.Cores*tc.smt != p.CPUs.Len() {
					t.Errorf("package %d: %d cores × %d threads != %d CPUs", p.ID, p.Cores, tc.smt, p.CPUs.Len())
				}
			}
		})
	}
}

// writeSynthetic writes a sysfs tree for the given CPUs: siblings maps each
// CPU to its core's thread list, nodes lists each node's CPUs, l3 each L3 domain.
func writeSynthetic(t *testing.T, online string, siblings map[int]string, nodes []string, l3 []string, withCacheID bool) string {
	t.Helper()
	root := t.TempDir()
	w := func(p, c string) {
		full := filepath.Join(root, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(c+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w("sys/devices/system/cpu/online", online)
	for n, cpus := range nodes {
		w(fmt.Sprintf("sys/devices/system/node/node%d/cpulist", n), cpus)
	}
	for cpu, sib := range siblings {
		base := fmt.Sprintf("sys/devices/system/cpu/cpu%d", cpu)
		w(base+"/topology/physical_package_id", "0")
		w(base+"/topology/core_id", fmt.Sprint(cpuset.MustParse(sib).First()))
		w(base+"/topology/thread_siblings_list", sib)
		for id, dom := range l3 {
			if cpuset.MustParse(dom).Contains(cpu) {
				w(base+"/cache/index3/level", "3")
				w(base+"/cache/index3/type", "Unified")
				w(base+"/cache/index3/size", "16384K")
				w(base+"/cache/index3/ways_of_associativity", "16")
				w(base+"/cache/index3/shared_cpu_list", dom)
				if withCacheID {
					w(base+"/cache/index3/id", fmt.Sprint(id))
				}
			}
		}
	}
	return root
}

// The 8-node interleaved layout of the KVM Forum topology talk (node k holds
// every 8th CPU), scaled down to 16 CPUs: nothing may assume contiguity.
func TestInterleavedNumbering(t *testing.T) {
	siblings := map[int]string{}
	var nodes []string
	for n := 0; n < 8; n++ {
		a, b := n, n+8
		siblings[a] = fmt.Sprintf("%d,%d", a, b)
		siblings[b] = siblings[a]
		nodes = append(nodes, fmt.Sprintf("%d,%d", a, b))
	}
	// L3 shared by nodes pairwise, as on a CCX-per-node part.
	l3 := []string{"0-1,8-9", "2-3,10-11", "4-5,12-13", "6-7,14-15"}
	tp, err := Read(openTree(t, writeSynthetic(t, "0-15", siblings, nodes, l3, false)))
	if err != nil {
		t.Fatal(err)
	}
	if len(tp.Nodes) != 8 || tp.Nodes[5].CPUs.String() != "5,13" {
		t.Errorf("nodes = %+v", tp.Nodes)
	}
	if c, _ := tp.CPU(13); c.Node != 5 || c.Siblings.String() != "5,13" {
		t.Errorf("cpu13 = %+v", c)
	}
	if got := tp.CacheLevel(3); len(got) != 4 || got[2].CPUs.String() != "4-5,12-13" {
		t.Errorf("L3 = %+v", got)
	}
	if c, ok := tp.CacheOf(11, 3); !ok || c.CPUs.String() != "2-3,10-11" {
		t.Errorf("CacheOf(11) = %+v %v", c, ok)
	}
	if tp.Cores() != 8 || tp.SMT != 2 {
		t.Errorf("cores %d smt %d", tp.Cores(), tp.SMT)
	}
}

// Sparse numbering with offline CPUs: online 0-3,8-11; CPUs 4-7 have no
// topology directory. A missing node directory means one node.
func TestSparseOnline(t *testing.T) {
	siblings := map[int]string{}
	for _, c := range cpuset.MustParse("0-3,8-11").List() {
		siblings[c] = fmt.Sprint(c)
	}
	tp, err := Read(openTree(t, writeSynthetic(t, "0-3,8-11", siblings, nil, []string{"0-3,8-11"}, true)))
	if err != nil {
		t.Fatal(err)
	}
	if len(tp.CPUs) != 8 || tp.Online.String() != "0-3,8-11" || len(tp.Nodes) != 1 || !tp.Nodes[0].CPUs.Equal(tp.Online) {
		t.Errorf("cpus %d online %s nodes %+v", len(tp.CPUs), tp.Online, tp.Nodes)
	}
	if _, ok := tp.CPU(5); ok {
		t.Error("offline cpu5 reported")
	}
}

func TestReadEmptyTree(t *testing.T) {
	if _, err := Read(openTree(t, t.TempDir())); err == nil {
		t.Error("empty tree read without error")
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"32K": 32 << 10, "11264K": 11264 << 10, "1M": 1 << 20, "512": 512} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "K", "-1K", "12Q", "99999999999999G"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}

// A node's CPUs come from cpulist, else from the cpumap mask that lscpu's
// dumps (and any capture of only what lscpu reads) keep instead.
func TestReadNodeCPUs(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		want    string
		wantErr string
	}{
		{name: "cpulist", files: map[string]string{"cpulist": "0-5,48-53"}, want: "0-5,48-53"},
		{name: "cpumap only", files: map[string]string{"cpumap": "00000000,003f0000,0000003f"}, want: "0-5,48-53"},
		{name: "short leading word", files: map[string]string{"cpumap": "0000,22222222,22222222"}, want: "1,5,9,13,17,21,25,29,33,37,41,45,49,53,57,61"},
		{name: "memory-only node", files: map[string]string{"cpumap": "00000000,00000000"}, want: ""},
		// The kernel writes both from one mask; cpulist is read first.
		{name: "cpulist first", files: map[string]string{"cpulist": "0-1", "cpumap": "f0"}, want: "0-1"},
		{name: "bad cpulist", files: map[string]string{"cpulist": "0-x", "cpumap": "3"}, wantErr: "cpulist"},
		{name: "bad cpumap", files: map[string]string{"cpumap": "0000000g"}, wantErr: "cpumap"},
		{name: "empty cpumap", files: map[string]string{"cpumap": ""}, wantErr: "cpumap"},
		{name: "neither", files: map[string]string{"distance": "10"}, wantErr: "no cpulist"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "sys/devices/system/node/node2")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for name, body := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := readNodeCPUs(openTree(t, root), "/sys/devices/system/node/node2")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("readNodeCPUs = %s, %v; want error naming %s", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Errorf("readNodeCPUs = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// Nodes named 0, 2 and 3 by cpumap alone, CPUs interleaved across them, as
// on util-linux's 4-socket X7550 dump: every CPU gets its own node's number,
// and no node 1 appears.
func TestNodesByCPUMapNonContiguous(t *testing.T) {
	siblings := map[int]string{}
	for c := range 8 {
		siblings[c] = fmt.Sprint(c)
	}
	root := writeSynthetic(t, "0-7", siblings, nil, []string{"0-7"}, true)
	for node, mask := range map[int]string{0: "00000055", 2: "00000022", 3: "00000088"} {
		p := filepath.Join(root, fmt.Sprintf("sys/devices/system/node/node%d/cpumap", node))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(mask+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tp, err := Read(openTree(t, root))
	if err != nil {
		t.Fatal(err)
	}
	if len(tp.Warnings) > 0 {
		t.Errorf("warnings: %v", tp.Warnings)
	}
	var got []string
	for _, n := range tp.Nodes {
		got = append(got, fmt.Sprintf("%d:%s", n.ID, n.CPUs))
	}
	if want := []string{"0:0,2,4,6", "2:1,5", "3:3,7"}; !slices.Equal(got, want) {
		t.Errorf("nodes = %v, want %v", got, want)
	}
	for cpu, want := range map[int]int{0: 0, 1: 2, 3: 3, 6: 0, 7: 3} {
		if c, _ := tp.CPU(cpu); c.Node != want {
			t.Errorf("cpu%d node = %d, want %d", cpu, c.Node, want)
		}
	}
}
