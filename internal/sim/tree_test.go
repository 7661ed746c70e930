package sim

import (
	"slices"
	"strings"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/doctor"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// Doctor, reading a generated tree, reports the declared machine: the
// tree speaks the kernel's formats well enough for the production readers.
func TestDoctorReportsTheDeclaredMachine(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		check      func(t *testing.T, c doctor.Capabilities)
	}{
		{"skylakex bare metal", `
name: d1
machine: {cpu: skylakex, sockets: 2, cores_per_socket: 6, threads_per_core: 2, max_mhz: 3100, min_mhz: 1000, l3_size: 16.5MiB, l3_ways: 11}
tenants: [{name: a, role: victim, cpus: "0"}]
`, func(t *testing.T, c doctor.Capabilities) {
			tp := c.Topology
			if tp.CPUs != 24 || tp.Packages != 2 || tp.Cores != 12 || tp.ThreadsPerCore != 2 || tp.NUMANodes != 2 {
				t.Errorf("topology %d CPUs %d packages %d cores %d threads %d nodes", tp.CPUs, tp.Packages, tp.Cores, tp.ThreadsPerCore, tp.NUMANodes)
			}
			if len(tp.L3) != 2 || tp.L3[0].Ways != 11 || tp.L3[0].SizeBytes != 16896<<10 || tp.L3[0].CPUs.String() != "0-5,12-17" {
				t.Errorf("L3 %+v", tp.L3)
			}
			if c.CPU.Vendor != "GenuineIntel" || c.CPU.Model != 0x55 || !strings.Contains(c.CPU.Microarch, "Skylake") {
				t.Errorf("cpu %+v", c.CPU)
			}
			if c.Cgroup.Mode != cgroup.ModeV2 || c.Cgroup.CPUControl != "v2" || !c.PSI {
				t.Errorf("cgroup %+v psi %v", c.Cgroup, c.PSI)
			}
			if c.PMU.BusLockEvent == nil || c.PMU.BusLockEvent.Config != 0x10f4 {
				t.Errorf("bus-lock event %+v (%s)", c.PMU.BusLockEvent, c.PMU.BusLockReason)
			}
			if !c.Resctrl.Mounted || c.Resctrl.L3CAT == nil || c.Resctrl.L3CAT.Ways != 11 || !c.Resctrl.MBA || c.Resctrl.Monitoring == nil {
				t.Errorf("resctrl %+v", c.Resctrl)
			}
			if !slices.Equal(c.RAPL.Zones, []string{"package-0", "package-1"}) {
				t.Errorf("RAPL zones %v (%s)", c.RAPL.Zones, c.RAPL.Reason)
			}
			if !c.CPUFreq.Present || c.CPUFreq.Policies != 24 || c.CPUFreq.HWMaxKHz != 3100000 || c.CPUFreq.HWMinKHz != 1000000 {
				t.Errorf("cpufreq %+v", c.CPUFreq)
			}
			if !c.MSR.Present || c.MSR.CPUs != 24 {
				t.Errorf("msr %+v", c.MSR)
			}
		}},
		{"zen3 without PMU, resctrl, RAPL, cpufreq or MSRs", `
name: d2
machine: {cpu: zen3, sockets: 1, cores_per_socket: 8, features: {pmu: false, cat: false, mba: false, mbm: false, rapl: false, cpufreq: false, msr: false}}
tenants: [{name: a, role: victim, cpus: "0"}]
`, func(t *testing.T, c doctor.Capabilities) {
			if c.Topology.CPUs != 8 || c.CPU.Vendor != "AuthenticAMD" || !strings.Contains(c.CPU.Microarch, "Zen 3") {
				t.Errorf("topology %d CPUs, cpu %+v", c.Topology.CPUs, c.CPU)
			}
			if c.PMU.Hardware || c.PMU.BusLockEvent != nil || c.PMU.ModelBusLockEvent == nil || c.PMU.ModelBusLockEvent.Config != 0x125 {
				t.Errorf("pmu %+v", c.PMU)
			}
			if c.Resctrl.Mounted || c.RAPL.Reason == "" || c.CPUFreq.Present || c.MSR.Present {
				t.Errorf("absent features reported present: resctrl %v rapl %v cpufreq %v msr %v", c.Resctrl.Mounted, c.RAPL.Zones, c.CPUFreq.Present, c.MSR.Present)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sc := mustParse(t, c.yaml)
			s, err := newSimHost(sc, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer s.close()
			rep := doctor.Run(s.h, doctor.Options{})
			if len(rep.Capabilities.Topology.Warnings) > 0 {
				t.Errorf("topology warnings: %v", rep.Capabilities.Topology.Warnings)
			}
			c.check(t, rep.Capabilities)
		})
	}
}

// The agent's discovery finds the tenants where libvirt and docker put
// them, with their kinds, names, CPUs and threads.
func TestDiscoveryFindsTenants(t *testing.T) {
	sc := mustParse(t, `
name: disc
machine: {cpu: icelakex, sockets: 1, cores_per_socket: 8}
tenants:
  - {name: web-vm, kind: vm, role: victim, cpus: "0-1"}
  - {name: batch, kind: container, role: polluter, cpus: "2-5", vcpus: 3}
  - {name: late, kind: vm, role: bystander, cpus: "6", start: 5s}
`)
	s, err := newSimHost(sc, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	for i, tn := range sc.Resolved() {
		if tn.Start == 0 {
			if err := s.appear(i); err != nil {
				t.Fatal(err)
			}
		}
	}
	l, err := cgroup.Detect(s.h)
	if err != nil {
		t.Fatal(err)
	}
	d, err := sense.NewCgroupDiscoverer(s.h, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.Discover(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("found %d tenants, want 2: %+v", len(got), got)
	}
	byKind := map[string]sense.Tenant{}
	for _, tn := range got {
		byKind[tn.Kind] = tn
	}
	vm, ct := byKind[sense.KindVM], byKind[sense.KindContainer]
	if vm.Name != "web-vm" || vm.CPUs.String() != "0-1" || len(vm.Threads) != 3 {
		t.Errorf("VM %+v", vm)
	}
	if ct.Name != containerID("batch")[:12] || ct.CPUs.String() != "2-5" || len(ct.Threads) != 3 {
		t.Errorf("container %+v", ct)
	}
	// A tenant that ends vanishes from the tree.
	if err := s.vanish(0); err != nil {
		t.Fatal(err)
	}
	if err := s.appear(2); err != nil {
		t.Fatal(err)
	}
	got, _ = d.Discover(t.Context())
	var names []string
	for _, tn := range got {
		names = append(names, tn.Name)
	}
	slices.Sort(names)
	if want := []string{containerID("batch")[:12], "late"}; !slices.Equal(names, want) {
		t.Errorf("after one left and one came: %v, want %v", names, want)
	}
}
