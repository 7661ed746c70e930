package sense

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// turnsTree is a cgroup2 host with n docker containers, container i
// running thread 1000+i; readOf counts, per Discover call, which tenants'
// threads were read (their cgroup directories listed).
func turnsTree(t *testing.T, n int) (root string, d *CgroupDiscoverer, reads *[]map[string]bool) {
	t.Helper()
	files := map[string]string{"sys/devices/system/cpu/online": "0-7\n"}
	for i := range n {
		files[fmt.Sprintf("sys/fs/cgroup/system.slice/docker-%064x.scope/cgroup.threads", i)] = fmt.Sprintf("%d\n", 1000+i)
	}
	root = cgTree(t, files)
	d, err := NewCgroupDiscoverer(openCgroupHost(t, root), layoutV2, nil)
	if err != nil {
		t.Fatal(err)
	}
	reads = &[]map[string]bool{}
	d.listed = func(dir string) {
		if id, ok := strings.CutPrefix(dir, "/sys/fs/cgroup"); ok && strings.HasSuffix(id, ".scope") {
			(*reads)[len(*reads)-1][id] = true
		}
	}
	return root, d, reads
}

func discoverCall(t *testing.T, d *CgroupDiscoverer, reads *[]map[string]bool) []Tenant {
	t.Helper()
	*reads = append(*reads, map[string]bool{})
	got, err := d.Discover(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func containerID(i int) string { return fmt.Sprintf("/system.slice/docker-%064x.scope", i) }

// Tenants found together are re-read in turns spread over DetailEvery calls:
// each once per cycle, no call re-reading much more than its share, and a
// tenant that appears meanwhile is read at once.
func TestDiscoverDetailTurns(t *testing.T) {
	const n, every = 300, 10
	root, d, reads := turnsTree(t, n)
	d.DetailEvery = every
	first := discoverCall(t, d, reads)
	if len(first) != n || len((*reads)[0]) != n {
		t.Fatalf("first call: %d tenants, %d read; want all %d read", len(first), len((*reads)[0]), n)
	}
	per := map[string]int{}
	most := 0
	for call := 1; call <= 2*every; call++ {
		if call == 7 {
			// A new container, and a known one whose threads changed.
			dir := filepath.Join(root, "sys/fs/cgroup", containerID(n))
			os.MkdirAll(dir, 0o755)
			os.WriteFile(filepath.Join(dir, "cgroup.threads"), []byte("5000\n5001\n"), 0o644)
			os.WriteFile(filepath.Join(root, "sys/fs/cgroup", containerID(3), "cgroup.threads"), []byte("1003\n1004\n"), 0o644)
		}
		got := discoverCall(t, d, reads)
		r := (*reads)[call]
		if call == 7 {
			i := slices.IndexFunc(got, func(t Tenant) bool { return t.ID == containerID(n) })
			if i < 0 || !slices.Equal(got[i].Threads, []int{5000, 5001}) || !r[containerID(n)] {
				t.Errorf("a new tenant is not read at once: %+v", got)
			}
			delete(r, containerID(n))
		}
		if call >= 7 {
			i := slices.IndexFunc(got, func(t Tenant) bool { return t.ID == containerID(3) })
			if call >= 7+every && !slices.Equal(got[i].Threads, []int{1003, 1004}) {
				t.Errorf("call %d: container 3's new thread not seen after a whole cycle: %v", call, got[i].Threads)
			}
		}
		for id := range r {
			per[id]++
		}
		most = max(most, len(r))
	}
	for i := range n {
		if got := per[containerID(i)]; got != 2 {
			t.Errorf("tenant %d re-read %d times in 2 cycles, want 2", i, got)
		}
	}
	// 300 tenants over 10 calls: 30 a call on average.
	if most > 60 {
		t.Errorf("a call re-read %d of %d tenants, want about %d", most, n, n/every)
	}
}

// MaxNew spreads the first reads of a host full of tenants over calls: each
// call reads at most MaxNew new ones, leaves the rest for later, and every
// tenant is listed once read.
func TestDiscoverMaxNew(t *testing.T) {
	const n = 25
	_, d, reads := turnsTree(t, n)
	d.DetailEvery, d.MaxNew = 100, 10
	for call, want := range []int{10, 20, 25, 25} {
		got := discoverCall(t, d, reads)
		if len(got) != want || d.Deferred() != n-want {
			t.Errorf("call %d: %d tenants (%d deferred), want %d (%d)", call, len(got), d.Deferred(), want, n-want)
		}
		if r := len((*reads)[call]); r > d.MaxNew {
			t.Errorf("call %d read %d tenants, more than MaxNew", call, r)
		}
		for _, ten := range got {
			if len(ten.Threads) != 1 {
				t.Errorf("call %d: %s listed without its threads", call, ten.ID)
			}
		}
	}
}
