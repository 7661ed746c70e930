package topology

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/testenv"
)

// lscpuExpected is what util-linux's lscpu printed for one of its test
// dumps: the summary ("Socket(s): 2") and the two parsable tables, `lscpu
// -p` (logical IDs, numbered in order of appearance) and `lscpu -p -y`
// (physical IDs: the kernel's core_id, physical_package_id, node and cache
// id).
type lscpuExpected struct {
	summary  map[string]string
	logical  []lscpuRow
	physical []lscpuRow
}

// lscpuRow is one CPU of a parsable table, by column name ("Core", "L3");
// a column lscpu left empty is absent.
type lscpuRow struct {
	cpu  int
	cols map[string]int
}

func readLscpuExpected(t *testing.T, p string) lscpuExpected {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	exp := lscpuExpected{summary: map[string]string{}}
	var tables [][]lscpuRow
	var header []string // columns of the table being read; nil outside one
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "# CPU,"):
			header = strings.Split(strings.TrimPrefix(line, "# "), ",")
			tables = append(tables, nil)
		case strings.HasPrefix(line, "#"):
		case strings.TrimSpace(line) == "":
			header = nil
		case header != nil:
			fields := strings.Split(line, ",")
			if len(fields) != len(header) {
				t.Fatalf("%s:%d: %d fields under a %d-column header", p, n, len(fields), len(header))
			}
			row := lscpuRow{cols: map[string]int{}}
			for i, v := range fields {
				if v == "" {
					continue
				}
				x, err := strconv.Atoi(v)
				if err != nil {
					t.Fatalf("%s:%d: column %s: %v", p, n, header[i], err)
				}
				if header[i] == "CPU" {
					row.cpu = x
				} else {
					row.cols[header[i]] = x
				}
			}
			tables[len(tables)-1] = append(tables[len(tables)-1], row)
		case len(tables) == 0:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				t.Fatalf("%s:%d: summary line without a colon: %q", p, n, line)
			}
			exp.summary[k] = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(tables) != 2 {
		t.Fatalf("%s: %d parsable tables, want lscpu -p and lscpu -p -y", p, len(tables))
	}
	exp.logical, exp.physical = tables[0], tables[1]
	return exp
}

func (e lscpuExpected) summaryInt(t *testing.T, key string) int {
	t.Helper()
	n, err := strconv.Atoi(e.summary[key])
	if err != nil {
		t.Fatalf("lscpu summary %q = %q: %v", key, e.summary[key], err)
	}
	return n
}

var instancesRE = regexp.MustCompile(`\((\d+) instances?\)$`)

// l3Instances is the "L3 cache: 128 MiB (16 instances)" count, 0 without L3.
func (e lscpuExpected) l3Instances(t *testing.T) int {
	t.Helper()
	v, ok := e.summary["L3 cache"]
	if !ok {
		return 0
	}
	m := instancesRE.FindStringSubmatch(v)
	if m == nil {
		t.Fatalf("lscpu summary L3 cache = %q: no instance count", v)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// groups partitions a table's CPUs by the value of one column: which CPUs
// share a core, a socket, a node, an L3. The partition is what lscpu's
// logical IDs and the kernel's IDs agree on.
func groups(rows []lscpuRow, col string) []string {
	by := map[int][]int{}
	for _, r := range rows {
		if v, ok := r.cols[col]; ok {
			by[v] = append(by[v], r.cpu)
		}
	}
	var out []string
	for _, cpus := range by {
		out = append(out, cpuset.Of(cpus...).String())
	}
	slices.Sort(out)
	return out
}

func setStrings(sets []cpuset.Set) []string {
	seen := map[string]bool{}
	for _, s := range sets {
		if !s.IsEmpty() {
			seen[s.String()] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// Real machines, as util-linux's lscpu tests captured them: our topology of
// each dump must say what lscpu says about it.
func TestLscpuDumps(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "lscpu")
	tarballs, err := filepath.Glob(filepath.Join(dir, "*.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	// The lscpu names of the dumps this test was written against: a dump
	// dropped from testdata must not silently shrink the table.
	want := []string{"vbox-win", "vmware_fpe", "x86_64-64cpu", "x86_64-64cpu-linux6.2", "x86_64-dell_e4310", "x86_64-epyc_7451"}
	var have []string
	for _, tb := range tarballs {
		have = append(have, strings.TrimSuffix(filepath.Base(tb), ".tar.gz"))
	}
	slices.Sort(have)
	if !slices.Equal(have, want) {
		t.Fatalf("dumps in %s = %v, want %v", dir, have, want)
	}
	for _, name := range have {
		t.Run(name, func(t *testing.T) {
			exp := readLscpuExpected(t, filepath.Join(dir, name+".expected"))
			tp, err := Read(openTree(t, testenv.UnpackTree(t, filepath.Join(dir, name+".tar.gz"))))
			if err != nil {
				t.Fatal(err)
			}
			if len(tp.Warnings) > 0 {
				t.Errorf("warnings on a real capture: %v", tp.Warnings)
			}

			// Counts, against lscpu's summary.
			sockets := exp.summaryInt(t, "Socket(s)")
			for _, c := range []struct {
				what      string
				got, want int
			}{
				{"CPUs", tp.Online.Len(), exp.summaryInt(t, "CPU(s)")},
				{"sockets", len(tp.Packages), sockets},
				{"cores", tp.Cores(), sockets * exp.summaryInt(t, "Core(s) per socket")},
				{"threads per core", tp.SMT, exp.summaryInt(t, "Thread(s) per core")},
				{"NUMA nodes", len(tp.Nodes), exp.summaryInt(t, "NUMA node(s)")},
				{"L3 domains", len(tp.CacheLevel(3)), exp.l3Instances(t)},
			} {
				if c.got != c.want {
					t.Errorf("%s = %d, lscpu says %d", c.what, c.got, c.want)
				}
			}

			// Groupings, against lscpu -p.
			var cores, pkgs, nodes, l3 []cpuset.Set
			for _, c := range tp.CPUs {
				cores = append(cores, c.Siblings)
			}
			for _, p := range tp.Packages {
				pkgs = append(pkgs, p.CPUs)
			}
			for _, n := range tp.Nodes {
				nodes = append(nodes, n.CPUs)
			}
			for _, c := range tp.CacheLevel(3) {
				l3 = append(l3, c.CPUs)
			}
			for _, g := range []struct {
				col  string
				ours []cpuset.Set
			}{{"Core", cores}, {"Socket", pkgs}, {"Node", nodes}, {"L3", l3}} {
				if got, want := setStrings(g.ours), groups(exp.logical, g.col); !slices.Equal(got, want) {
					t.Errorf("CPUs sharing a %s: %v, lscpu -p says %v", g.col, got, want)
				}
			}

			// Kernel IDs per CPU, against lscpu -p -y.
			if len(exp.physical) != len(tp.CPUs) {
				t.Errorf("lscpu -p -y lists %d CPUs, we read %d", len(exp.physical), len(tp.CPUs))
			}
			nodeIDs := map[int]bool{}
			for _, row := range exp.physical {
				c, ok := tp.CPU(row.cpu)
				if !ok {
					t.Errorf("cpu%d: not read", row.cpu)
					continue
				}
				nodeIDs[row.cols["Node"]] = true
				got := fmt.Sprintf("core %d socket %d node %d", c.Core, c.Package, c.Node)
				want := fmt.Sprintf("core %d socket %d node %d", row.cols["Core"], row.cols["Socket"], row.cols["Node"])
				if got != want {
					t.Errorf("cpu%d: %s, lscpu -p -y says %s", row.cpu, got, want)
				}
				// Without a cache id file (kernels before 4.14) lscpu -y
				// numbers L3s itself; only the kernel's own id is comparable.
				if l3, ok := tp.CacheOf(row.cpu, 3); ok && l3.ID >= 0 && l3.ID != row.cols["L3"] {
					t.Errorf("cpu%d: L3 id %d, lscpu -p -y says %d", row.cpu, l3.ID, row.cols["L3"])
				}
			}
			var ourNodeIDs []int
			for _, n := range tp.Nodes {
				ourNodeIDs = append(ourNodeIDs, n.ID)
			}
			if want := slices.Sorted(maps.Keys(nodeIDs)); !slices.Equal(ourNodeIDs, want) {
				t.Errorf("node IDs %v, lscpu -p -y says %v", ourNodeIDs, want)
			}
		})
	}
}
