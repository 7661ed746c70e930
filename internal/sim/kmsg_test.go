package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// kmsgReports reads the simulated host's dev/kmsg as the agent's sensor
// parses it; ok is false where the file is absent.
func kmsgReports(t *testing.T, root string) (reps []sense.BusLockReport, ok bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "dev", "kmsg"))
	if os.IsNotExist(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		r, ok := sense.ParseBusLockRecord(line)
		if !ok {
			t.Fatalf("dev/kmsg holds a line the agent does not read as a report: %q", line)
		}
		reps = append(reps, r)
	}
	return reps, true
}

// The kernel's reports as the simulated host writes them: #AC once per
// thread on an Ice Lake Xeon, #DB within the printk limit (ten lines per
// five seconds) on Zen 3, none on Skylake (no detection) or with
// kernel_reports off; only the tenant that takes locks is named, a VM by
// its vCPU threads.
func TestSimKernelReports(t *testing.T) {
	const tenants = `
tenants:
  - {name: locker, kind: vm, role: polluter, cpus: "0-1", phases: [{from: 0s, cpu: 1, bus_locks: 300k}]}
  - {name: quiet, kind: container, role: victim, cpus: "2", phases: [{from: 0s, cpu: 1, memory_bound: 0.5}]}
`
	for _, tc := range []struct {
		name, machine string
		present       bool
		want          int // reports after 12 s
		trap          string
	}{
		{"icelake #AC", "{cpu: icelakex, sockets: 1, cores_per_socket: 4}", true, 2, "split_lock"},
		{"zen3 #DB", "{cpu: zen3, sockets: 1, cores_per_socket: 4}", true, 30, "bus_lock"},
		{"skylake: no detection", "{cpu: skylakex, sockets: 1, cores_per_socket: 4}", false, 0, ""},
		{"reports off", "{cpu: zen3, sockets: 1, cores_per_socket: 4, features: {kernel_reports: false}}", false, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := mustParse(t, "name: k\nduration: 20s\nmachine: "+tc.machine+"\n"+tenants)
			c := newCompHost(t, sc, 12*time.Second)
			reps, ok := kmsgReports(t, c.s.root)
			if ok != tc.present {
				t.Fatalf("dev/kmsg present = %v, want %v", ok, tc.present)
			}
			if len(reps) != tc.want {
				t.Errorf("%d reports after 12 s, want %d: %+v", len(reps), tc.want, reps)
			}
			vm := c.s.tenants[0]
			threads := map[int]string{vm.TID(0): "CPU 0/KVM", vm.TID(1): "CPU 1/KVM"}
			seen := map[int]int{}
			for _, r := range reps {
				if threads[r.TID] != r.Comm || r.Trap != tc.trap {
					t.Errorf("report %+v: not one of the locker's vCPU threads %v with trap %s", r, threads, tc.trap)
				}
				seen[r.TID]++
			}
			if tc.trap == "split_lock" && (seen[vm.TID(0)] != 1 || seen[vm.TID(1)] != 1) {
				t.Errorf("#AC reports per thread = %v, want one each", seen)
			}
		})
	}
}
