package doctor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/testenv"
)

func hostsDir(name string) string { return filepath.Join("..", "..", "testdata", "hosts", name) }

func openHost(t *testing.T, root string) *host.Host {
	t.Helper()
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// runJSON runs doctor on a tree and decodes its JSON into generic maps, so the
// test checks the stable interface (key names and types), not Go structs.
func runJSON(t *testing.T, root string) map[string]any {
	t.Helper()
	r := Run(openHost(t, root), Options{})
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// get walks a dotted key path through decoded JSON.
func get(t *testing.T, m map[string]any, key string) any {
	t.Helper()
	var cur any = m
	for _, k := range strings.Split(key, ".") {
		obj, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("%s: %q is not an object", key, k)
		}
		cur, ok = obj[k]
		if !ok {
			t.Fatalf("%s: key %q missing", key, k)
		}
	}
	return cur
}

func statuses(t *testing.T, m map[string]any) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, c := range get(t, m, "checks").([]any) {
		o := c.(map[string]any)
		for _, k := range []string{"id", "status", "evidence", "why"} {
			if _, ok := o[k]; !ok {
				t.Errorf("check %v lacks %q", o["id"], k)
			}
		}
		out[o["id"].(string)] = o["status"].(string)
	}
	return out
}

func TestDoctorTrees(t *testing.T) {
	type busLock struct {
		name   string
		config float64
	}
	tests := []struct {
		tree      string
		mode      string
		psi       bool
		hwPMU     bool
		busLock   *busLock
		resctrl   bool
		l3Ways    any // float64 or nil
		mba       bool
		zones     []string
		cpus      float64
		numaNodes float64
		reports   bool // the kernel reports bus-locking threads
		checks    map[string]string
	}{
		{
			tree: "dev-epyc-vm", mode: "hybrid", psi: true, hwPMU: false, busLock: nil,
			resctrl: false, l3Ways: nil, mba: false, zones: []string{}, cpus: 2, numaNodes: 1,
			checks: map[string]string{
				"split_lock_detect": "info", "ksm": "ok", "ept": "info", "thp": "ok", "smt": "ok",
				"numa_balancing": "ok", "cpufreq_governor": "info", "nmi_watchdog": "ok",
				"resctrl_mount": "info", "perf_event_paranoid": "info", "psi": "ok",
			},
		},
		{
			// Captured: a 16-vCPU Firecracker guest on Emerald Rapids, with
			// bus_lock_detect passed through and cgroup v2's controllers.
			tree: "intel-emr-vm", mode: "v2", psi: true, hwPMU: false, busLock: nil,
			resctrl: false, l3Ways: nil, mba: false, zones: []string{}, cpus: 16, numaNodes: 1, reports: true,
			checks: map[string]string{
				"split_lock_detect": "ok", "ksm": "ok", "ept": "info", "thp": "ok", "smt": "ok",
				"numa_balancing": "ok", "cpufreq_governor": "info", "nmi_watchdog": "ok",
				"resctrl_mount": "info", "perf_event_paranoid": "ok", "psi": "ok",
			},
		},
		{
			tree: "intel-skx-2s", mode: "v2", psi: true, hwPMU: true, busLock: &busLock{"SQ_MISC.SPLIT_LOCK", 0x10f4},
			resctrl: true, l3Ways: 11.0, mba: true, zones: []string{"package-0", "dram", "package-1", "dram"}, cpus: 32, numaNodes: 2,
			checks: map[string]string{
				"split_lock_detect": "info", "ksm": "warn", "ept": "ok", "thp": "info", "smt": "info",
				"numa_balancing": "warn", "cpufreq_governor": "warn", "nmi_watchdog": "warn",
				"resctrl_mount": "ok", "perf_event_paranoid": "info", "psi": "ok",
			},
		},
		{
			tree: "amd-milan-1s", mode: "v1", psi: false, hwPMU: true, busLock: &busLock{"ls_locks.bus_lock", 0x125},
			resctrl: true, l3Ways: 16.0, mba: true, zones: []string{}, cpus: 32, numaNodes: 1,
			checks: map[string]string{
				"split_lock_detect": "info", "ksm": "ok", "ept": "ok", "thp": "ok", "smt": "info",
				"numa_balancing": "ok", "cpufreq_governor": "ok", "nmi_watchdog": "warn",
				"resctrl_mount": "ok", "perf_event_paranoid": "info", "psi": "warn",
			},
		},
		{
			tree: "amd-naples-2s", mode: "v2", psi: true, hwPMU: true, busLock: &busLock{"ls_locks.bus_lock", 0x125},
			resctrl: false, l3Ways: nil, mba: false, zones: []string{}, cpus: 128, numaNodes: 8,
			checks: map[string]string{
				"split_lock_detect": "info", "ksm": "ok", "ept": "ok", "thp": "ok", "smt": "info",
				"numa_balancing": "warn", "cpufreq_governor": "info", "nmi_watchdog": "warn",
				"resctrl_mount": "info", "perf_event_paranoid": "info", "psi": "ok",
			},
		},
		{
			tree: "intel-skx-4s", mode: "v2", psi: true, hwPMU: true, busLock: &busLock{"SQ_MISC.SPLIT_LOCK", 0x10f4},
			resctrl: false, l3Ways: nil, mba: false, zones: []string{}, cpus: 224, numaNodes: 4,
			checks: map[string]string{
				"split_lock_detect": "info", "ksm": "ok", "ept": "ok", "thp": "ok", "smt": "info",
				"numa_balancing": "warn", "cpufreq_governor": "ok", "nmi_watchdog": "warn",
				"resctrl_mount": "warn", "perf_event_paranoid": "info", "psi": "ok",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.tree, func(t *testing.T) {
			m := runJSON(t, hostsDir(tc.tree))
			if got := get(t, m, "capabilities.cgroup.mode"); got != tc.mode {
				t.Errorf("cgroup.mode = %v, want %v", got, tc.mode)
			}
			if got := get(t, m, "capabilities.psi"); got != tc.psi {
				t.Errorf("psi = %v, want %v", got, tc.psi)
			}
			if got := get(t, m, "capabilities.pmu.hardware"); got != tc.hwPMU {
				t.Errorf("pmu.hardware = %v, want %v", got, tc.hwPMU)
			}
			ev := get(t, m, "capabilities.pmu.bus_lock_event")
			switch {
			case tc.busLock == nil && ev != nil:
				t.Errorf("bus_lock_event = %v, want null", ev)
			case tc.busLock != nil:
				o, ok := ev.(map[string]any)
				if !ok || o["name"] != tc.busLock.name || o["config"] != tc.busLock.config {
					t.Errorf("bus_lock_event = %v, want %+v", ev, *tc.busLock)
				}
			}
			if tc.busLock == nil && get(t, m, "capabilities.pmu.bus_lock_reason") == "" {
				t.Error("no bus_lock_reason for a null event")
			}
			if got := get(t, m, "capabilities.resctrl.mounted"); got != tc.resctrl {
				t.Errorf("resctrl.mounted = %v, want %v", got, tc.resctrl)
			}
			l3 := get(t, m, "capabilities.resctrl.l3_cat")
			if tc.l3Ways == nil {
				if l3 != nil {
					t.Errorf("l3_cat = %v, want null", l3)
				}
			} else if got := get(t, m, "capabilities.resctrl.l3_cat.ways"); got != tc.l3Ways {
				t.Errorf("l3_cat.ways = %v, want %v", got, tc.l3Ways)
			}
			if got := get(t, m, "capabilities.resctrl.mba"); got != tc.mba {
				t.Errorf("resctrl.mba = %v, want %v", got, tc.mba)
			}
			var zones []string
			for _, z := range get(t, m, "capabilities.rapl.zones").([]any) {
				zones = append(zones, z.(string))
			}
			if !slices.Equal(zones, tc.zones) && !(len(zones) == 0 && len(tc.zones) == 0) {
				t.Errorf("rapl.zones = %v, want %v", zones, tc.zones)
			}
			if got := get(t, m, "capabilities.topology.cpus"); got != tc.cpus {
				t.Errorf("topology.cpus = %v, want %v", got, tc.cpus)
			}
			if got := get(t, m, "capabilities.topology.numa_nodes"); got != tc.numaNodes {
				t.Errorf("topology.numa_nodes = %v, want %v", got, tc.numaNodes)
			}
			if got := get(t, m, "capabilities.kernel_bus_lock_reports.on"); got != tc.reports {
				t.Errorf("kernel_bus_lock_reports.on = %v (%v), want %v", got, get(t, m, "capabilities.kernel_bus_lock_reports.reason"), tc.reports)
			}
			got := statuses(t, m)
			for id, want := range tc.checks {
				if got[id] != want {
					t.Errorf("check %s = %q, want %q", id, got[id], want)
				}
			}
			if len(got) != len(tc.checks) {
				t.Errorf("checks = %v, want exactly %v", got, tc.checks)
			}
		})
	}
}

func TestDoctorDetails(t *testing.T) {
	intel := Run(openHost(t, hostsDir("intel-skx-2s")), Options{})
	r := intel.Capabilities.Resctrl
	if r.MBADetail == nil || r.MBADetail.Units != "percent" || r.MBADetail.MinBandwidth != 10 || !r.MBADetail.DelayLinear {
		t.Errorf("intel MBA = %+v", r.MBADetail)
	}
	if !slices.Contains(r.Groups, "libvirt-vm1") {
		t.Errorf("intel resctrl groups = %v, want libvirt-vm1 (someone else's group)", r.Groups)
	}
	if r.Monitoring == nil || !r.Monitoring.Has("mbm_local_bytes") || r.Monitoring.NumRMIDs != 64 {
		t.Errorf("intel monitoring = %+v", r.Monitoring)
	}
	if intel.Capabilities.Cgroup.CPUControl != "v2" || intel.Capabilities.CPU.Microarch != "Skylake-SP" {
		t.Errorf("intel cpu control %q microarch %q", intel.Capabilities.Cgroup.CPUControl, intel.Capabilities.CPU.Microarch)
	}

	amd := Run(openHost(t, hostsDir("amd-milan-1s")), Options{})
	if mb := amd.Capabilities.Resctrl.MBADetail; mb == nil || mb.Units != "1/8GBps" || mb.Max != 2048 || mb.DelayLinear {
		t.Errorf("amd MBA = %+v", mb)
	}
	if amd.Capabilities.Cgroup.CPUControl != "v1" || !amd.Capabilities.Libvirt.Present {
		t.Errorf("amd cgroup %+v libvirt %+v", amd.Capabilities.Cgroup, amd.Capabilities.Libvirt)
	}
	if k := amd.Capabilities.KVM; k.Virtualization != "svm" || k.TDP == nil || !*k.TDP {
		t.Errorf("amd kvm = %+v", k)
	}
	if len(amd.Capabilities.Topology.L3) != 4 {
		t.Errorf("amd L3 domains = %d, want 4 CCDs", len(amd.Capabilities.Topology.L3))
	}

	dev := Run(openHost(t, hostsDir("dev-epyc-vm")), Options{})
	if ev := dev.Capabilities.PMU.ModelBusLockEvent; ev == nil || ev.Config != 0x125 {
		t.Errorf("dev model event = %+v, want Zen 3 ls_locks.bus_lock", ev)
	}
	if !strings.Contains(dev.Capabilities.PMU.BusLockReason, "no hardware PMU") {
		t.Errorf("dev bus-lock reason = %q", dev.Capabilities.PMU.BusLockReason)
	}
}

// Who may open counters is read from /proc/self/status, a file, so that a
// capture replays the same status as the live host it was taken on.
func TestPerfParanoidReadsCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name, paranoid, status string
		want                   Status
		summary                string
	}{
		{"allowed to all", "-1", "", OK, "cgroup-mode counters allowed"},
		{"root", "2", "Name:\tcrosstalk\nCapEff:\t000001ffffffffff\n", OK, "runs with CAP_SYS_ADMIN and CAP_PERFMON"},
		{"perfmon only", "2", "CapEff:\t0000004000000000\n", OK, "runs with CAP_PERFMON"},
		{"no capabilities", "2", "CapEff:\t0000000000000000\n", Info, "needs CAP_PERFMON"},
		{"garbled", "2", "CapEff:\tzz\n", Info, "needs CAP_PERFMON"},
		{"tree without it", "2", "", Info, "needs CAP_PERFMON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{"proc/sys/kernel/perf_event_paranoid": tc.paranoid + "\n"}
			if tc.status != "" {
				files["proc/self/status"] = tc.status
			}
			r := Run(openHost(t, writeTree(t, files)), Options{})
			for _, c := range r.Checks {
				if c.ID == "perf_event_paranoid" && (c.Status != tc.want || !strings.Contains(c.Summary, tc.summary)) {
					t.Errorf("%s %q, want %s %q", c.Status, c.Summary, tc.want, tc.summary)
				}
			}
		})
	}
}

// Every line of the text report of every captured host fits 80 columns,
// and the verdict comes first, with the canary probe, CPU wait and the
// CPU-quota lever, and each policy given, one entry each.
func TestWriteTextFitsAndLeadsWithVerdict(t *testing.T) {
	ents, err := os.ReadDir(hostsDir(""))
	if err != nil {
		t.Fatal(err)
	}
	hosts := 0
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		hosts++
		t.Run(e.Name(), func(t *testing.T) {
			r := Run(openHost(t, hostsDir(e.Name())), Options{})
			r.Policies = []Policy{{Name: "buslocks", On: true}, {Name: "llc", Why: "resctrl unavailable: not mounted and the CPU shows no RDT/PQoS flags: no cache (the canary probe)"}}
			for _, width := range []int{80, 60, 40} {
				var buf bytes.Buffer
				if err := WriteText(&buf, r, width); err != nil {
					t.Fatal(err)
				}
				out := buf.String()
				for i, l := range strings.Split(out, "\n") {
					if n := utf8.RuneCountInString(l); n > width {
						t.Errorf("width %d, line %d is %d wide: %q", width, i+1, n, l)
					}
					if strings.HasSuffix(l, " ") {
						t.Errorf("line %d has trailing blanks: %q", i+1, l)
					}
				}
				if width != 80 {
					continue
				}
				verdict := strings.Index(out, "\nVERDICT")
				if verdict < 0 || verdict > strings.Index(out, "\nCAPABILITIES") {
					t.Errorf("verdict not first:\n%s", out)
				}
				for _, want := range []string{
					`\n  runs  canary probe +lock, LLC, DRAM latency in `,
					`\n  runs  CPU wait +run delay of every tenant`,
					`\n  runs  cpu_quota +caps the polluter's CPU \(cgroup v`,
					`\n  runs  buslocks +holds each tenant to a share of a bus-lock budget\n`,
					`\n  off   llc +resctrl unavailable\n`,
				} {
					if !regexp.MustCompile(want).MatchString(out) {
						t.Errorf("no %q in:\n%s", want, out)
					}
				}
			}
		})
	}
	if hosts < 5 {
		t.Errorf("%d captured hosts, want the 5 of testdata/hosts", hosts)
	}
}

func TestVerdictWithoutCPUControl(t *testing.T) {
	r := Run(openHost(t, t.TempDir()), Options{})
	got := map[string]VerdictItem{}
	for _, v := range Verdict(r) {
		got[v.Name] = v
	}
	for name, want := range map[string]string{
		"canary probe": "topology unknown", "cpu_quota": "no cgroup CPU controller", "PMU counters": "no hardware PMU: the canary probe alone finds polluters (what it sees here: crosstalk lab visibility)",
		"CPI": "no cycles and instructions per tenant",
	} {
		if v := got[name]; v.On || !strings.Contains(v.What, want) {
			t.Errorf("%s = %+v, want off: %q", name, v, want)
		}
	}
}

// Where the PMU counts each tenant's cycles and instructions, the CPI
// signal runs.
func TestVerdictCPIWithAPMU(t *testing.T) {
	r := Run(openHost(t, hostsDir("intel-skx-2s")), Options{})
	for _, v := range Verdict(r) {
		if v.Name == "CPI" {
			if !v.On || !strings.Contains(v.What, "cycles per instruction") {
				t.Errorf("CPI = %+v on a host with a PMU, want on", v)
			}
			return
		}
	}
	t.Error("no CPI in the verdict")
}

func TestShortReason(t *testing.T) {
	for in, want := range map[string]string{
		"resctrl unavailable: not mounted (the canary probe: still)":                                   "resctrl unavailable",
		"disabled (power.enabled: false): a socket budget is a property of the SKU":                    "disabled (power.enabled: false)",
		"no llc_cap booked (permits.default, permits.classes, permits.tenants)":                        "no llc_cap booked",
		"AMD CPUs have no IA32_CLOCK_MODULATION (MSR 0x19a is Intel's): power and bus":                 "AMD CPUs have no IA32_CLOCK_MODULATION",
		"the root /a/very/long/path/to/a/tree is not this machine (its CPU is X), so CPUID cannot say": "the root /a/very/long/path/to/a/tree is not this machine",
		"": "",
	} {
		if got := shortReason(in); got != want {
			t.Errorf("shortReason(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParaWraps(t *testing.T) {
	tx := &text{width: 20}
	tx.para("  key ", "      ", "one two three four /a/path/longer/than/a/line end")
	want := "  key one two three\n      four\n      /a/path/longer\n      /than/a/line\n      end\n"
	if got := tx.b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// A live probe failure must withhold the event even when sysfs lists a PMU.
func TestDoctorLiveProbeFailure(t *testing.T) {
	r := Run(openHost(t, hostsDir("intel-skx-2s")), Options{ProbePerf: func() error { return os.ErrPermission }})
	if r.Capabilities.PMU.BusLockEvent != nil || !strings.Contains(r.Capabilities.PMU.BusLockReason, "cannot be opened") {
		t.Errorf("pmu = %+v", r.Capabilities.PMU)
	}
}

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// An empty tree: every check is unknown (none guessed), no panic, and the
// required keys are all there.
func TestDoctorEmptyTree(t *testing.T) {
	m := runJSON(t, t.TempDir())
	for id, st := range statuses(t, m) {
		if st != "unknown" {
			t.Errorf("check %s = %s on an empty tree, want unknown", id, st)
		}
	}
	if get(t, m, "capabilities.topology.error") == "" || get(t, m, "capabilities.cpu.error") == "" {
		t.Error("empty tree should explain topology and cpu errors")
	}
	if get(t, m, "capabilities.pmu.bus_lock_event") != nil {
		t.Error("bus-lock event invented on an empty tree")
	}
}

// Garbage in sysfs and procfs values: unknown with a reason, never a panic.
func TestDoctorGarbageTree(t *testing.T) {
	root := writeTree(t, map[string]string{
		"proc/cpuinfo":                                             "vendor_id : GenuineIntel\ncpu family : six\n",
		"proc/cmdline":                                             "split_lock_detect=\"\x00\xff",
		"proc/1/mountinfo":                                         "this is not mountinfo\n",
		"proc/sys/kernel/numa_balancing":                           "banana\n",
		"proc/sys/kernel/nmi_watchdog":                             "7\n",
		"proc/sys/kernel/perf_event_paranoid":                      "-x\n",
		"sys/kernel/mm/ksm/run":                                    "maybe\n",
		"sys/kernel/mm/transparent_hugepage/enabled":               "always madvise never\n",
		"sys/devices/system/cpu/online":                            "0-zz\n",
		"sys/devices/system/cpu/smt/control":                       "sideways\n",
		"sys/devices/system/cpu/cpu0/topology/physical_package_id": "-9999999999999\n",
		"sys/devices/system/cpu/cpu0/topology/core_id":             "\n",
		"sys/devices/system/cpu/cpu0/cache/index3/level":           "3\n",
		"sys/devices/system/cpu/cpu0/cache/index3/shared_cpu_list": "5-1\n",
		"sys/devices/system/cpu/cpufreq/policy0/scaling_governor":  "\n",
		"sys/fs/resctrl/info/L3/cbm_mask":                          "zz\n",
		"sys/bus/event_source/devices/cpu/type":                    "4\n",
		"sys/class/powercap/intel-rapl:0/name":                     "package-0\n",
		"sys/class/powercap/intel-rapl:0/energy_uj":                "-1\n",
		"sys/module/kvm_intel/parameters/ept":                      "perhaps\n",
	})
	r := Run(openHost(t, root), Options{})
	got := map[string]Status{}
	for _, c := range r.Checks {
		got[c.ID] = c.Status
		if c.Summary == "" || c.Why == "" {
			t.Errorf("check %s has no summary or why", c.ID)
		}
	}
	for _, id := range []string{"split_lock_detect", "ksm", "ept", "thp", "smt", "numa_balancing", "nmi_watchdog", "perf_event_paranoid"} {
		if got[id] != Unknown {
			t.Errorf("check %s = %s on garbage, want unknown", id, got[id])
		}
	}
	if r.Capabilities.CPU.Error == "" || r.Capabilities.Topology.Error == "" {
		t.Errorf("garbage cpuinfo/topology not reported: %+v %+v", r.Capabilities.CPU, r.Capabilities.Topology)
	}
	if !r.Capabilities.Resctrl.Mounted || r.Capabilities.Resctrl.L3CAT != nil || len(r.Capabilities.Resctrl.Warnings) == 0 {
		t.Errorf("garbled resctrl = %+v", r.Capabilities.Resctrl)
	}
	if z := r.Capabilities.RAPL.ZoneDetail; len(z) != 1 || z[0].EnergyReadable {
		t.Errorf("rapl zones = %+v", z)
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, r, 100); err != nil || !strings.Contains(buf.String(), "[unknown]") {
		t.Errorf("text render: %v\n%s", err, buf.String())
	}
}

func TestWriteText(t *testing.T) {
	r := Run(openHost(t, hostsDir("intel-skx-2s")), Options{})
	var buf bytes.Buffer
	if err := WriteText(&buf, r, 100); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"CAPABILITIES", "CHECKS", "k8s-worker-skx-03",
		"node0: 0-7,16-23", "SQ_MISC.SPLIT_LOCK (raw config 0x10f4",
		"L3 CAT 11 ways", "package-0, dram, package-1, dram",
		"[warn]    ksm", "advice:", "sysctl -w kernel.nmi_watchdog=0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q", want)
		}
	}
}

// Running libvirt domains get the plan package's topology checks, in the
// checks' shape, under the new "domains" key; the documented keys are as
// they were.
func TestDoctorDomains(t *testing.T) {
	want := map[string]map[string]map[string]string{
		"amd-naples-2s": {
			"floating":  {"vm_numa_span": "warn", "vm_smt_siblings": "ok", "vm_l3_sharing": "ok", "vm_copy_threshold": "warn", "vm_phys_bits": "ok"},
			"stream":    {"vm_numa_span": "warn", "vm_smt_siblings": "ok", "vm_l3_sharing": "warn", "vm_copy_threshold": "warn", "vm_phys_bits": "ok"},
			"talk-1to1": {"vm_numa_span": "ok", "vm_smt_siblings": "ok", "vm_l3_sharing": "ok", "vm_copy_threshold": "ok", "vm_phys_bits": "ok"},
		},
		"intel-skx-4s": {
			"db-remote": {"vm_numa_span": "warn", "vm_smt_siblings": "ok", "vm_l3_sharing": "ok", "vm_copy_threshold": "warn", "vm_phys_bits": "ok"},
			"sap-hana":  {"vm_numa_span": "ok", "vm_smt_siblings": "ok", "vm_l3_sharing": "ok", "vm_copy_threshold": "warn", "vm_phys_bits": "warn"},
			"smt-wrong": {"vm_numa_span": "ok", "vm_smt_siblings": "warn", "vm_l3_sharing": "ok", "vm_copy_threshold": "warn", "vm_phys_bits": "ok"},
		},
		"intel-skx-2s": {},
		"dev-epyc-vm":  {},
	}
	for tree, doms := range want {
		m := runJSON(t, hostsDir(tree))
		got := map[string]map[string]string{}
		for _, d := range get(t, m, "domains").([]any) {
			o := d.(map[string]any)
			if !strings.HasPrefix(o["source"].(string), "/run/libvirt/qemu/") {
				t.Errorf("%s: source %v", tree, o["source"])
			}
			got[o["name"].(string)] = statuses(t, o)
		}
		if len(got) != len(doms) {
			t.Errorf("%s: domains %v, want %v", tree, got, doms)
		}
		for name, checks := range doms {
			for id, st := range checks {
				if got[name][id] != st {
					t.Errorf("%s/%s: %s = %q, want %q", tree, name, id, got[name][id], st)
				}
			}
		}
		if len(statuses(t, m)) != 11 {
			t.Errorf("%s: host checks changed: %v", tree, statuses(t, m))
		}
	}
	r := Run(openHost(t, hostsDir("intel-skx-4s")), Options{})
	var buf bytes.Buffer
	if err := WriteText(&buf, r, 100); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"DOMAINS", "sap-hana (112 vCPUs, /run/libvirt/qemu/sap-hana.xml): 3 of 5 checks ok", "[warn]    vm_phys_bits", "0x2b57fffffff", "<maxphysaddr mode='passthrough'/>", "3 domain(s): 9 ok, 0 info, 6 warn, 0 unknown."} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("text lacks %q", want)
		}
	}
}

// A garbled status file is one domain with an error; the others are checked.
func TestDoctorMalformedDomain(t *testing.T) {
	root := writeTree(t, map[string]string{
		"sys/devices/system/cpu/online":                            "0-1\n",
		"sys/devices/system/cpu/cpu0/topology/physical_package_id": "0\n",
		"sys/devices/system/cpu/cpu1/topology/physical_package_id": "0\n",
		"sys/devices/system/cpu/cpu0/topology/core_id":             "0\n",
		"sys/devices/system/cpu/cpu1/topology/core_id":             "1\n",
		"run/libvirt/qemu/bad.xml":                                 "<domstatus><domain><name>bad",
		"run/libvirt/qemu/good.xml":                                "<domstatus state='running'><domain type='kvm'><name>good</name><memory>1048576</memory><vcpu>2</vcpu></domain></domstatus>",
	})
	r := Run(openHost(t, root), Options{})
	if len(r.Domains) != 2 {
		t.Fatalf("domains %+v", r.Domains)
	}
	bad, good := r.Domains[0], r.Domains[1]
	if bad.Error == "" || len(bad.Checks) != 0 || !strings.Contains(bad.Error, "malformed") {
		t.Errorf("bad = %+v", bad)
	}
	if good.Error != "" || len(good.Checks) != 5 || good.State != "running" {
		t.Errorf("good = %+v", good)
	}
}

// A real machine's dump as util-linux's lscpu tests keep it: nodes described
// by cpumap alone (no cpulist) and eight of them, two CCX L3s per node.
// Everything else doctor reads is absent, which it must report, not trip on.
func TestDoctorLscpuEpyc7451(t *testing.T) {
	root := testenv.UnpackTree(t, filepath.Join("..", "..", "testdata", "lscpu", "x86_64-epyc_7451.tar.gz"))
	m := runJSON(t, root)
	if got := get(t, m, "capabilities.topology.numa_nodes"); got != 8.0 {
		t.Errorf("numa_nodes = %v, want 8", got)
	}
	nodes := get(t, m, "capabilities.topology.nodes").([]any)
	if len(nodes) != 8 {
		t.Fatalf("nodes = %v", nodes)
	}
	if n := nodes[7].(map[string]any); n["id"] != 7.0 || n["cpus"] != "42-47,90-95" {
		t.Errorf("node7 = %v, want CPUs 42-47,90-95", n)
	}
	l3 := get(t, m, "capabilities.topology.l3").([]any)
	if len(l3) != 16 {
		t.Fatalf("%d L3 domains, want 16", len(l3))
	}
	if c := l3[1].(map[string]any); c["cpus"] != "3-5,51-53" || c["size_bytes"] != float64(8<<20) {
		t.Errorf("L3[1] = %v, want CPUs 3-5,51-53 and 8 MiB", c)
	}
	if w := get(t, m, "capabilities.topology"); w.(map[string]any)["warnings"] != nil {
		t.Errorf("topology warnings: %v", w.(map[string]any)["warnings"])
	}

	var buf bytes.Buffer
	if err := WriteText(&buf, Run(openHost(t, root), Options{}), 200); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"96 CPUs (0-95), 2 package(s), 48 cores, 2 thread(s)/core, 8 NUMA node(s)",
		"node0: 0-5,48-53", "node7: 42-47,90-95",
		"L3 #0: CPUs 0-2,48-50, 8MiB, 16-way", "L3 #15: CPUs 45-47,93-95, 8MiB, 16-way",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q", want)
		}
	}
	if n := strings.Count(out, "  L3 #"); n != 16 {
		t.Errorf("text output lists %d L3 domains, want 16", n)
	}
}

// A kernel before 4.14 names no cache ids: the L3 line shows the CPUs
// without an invented "#-1".
func TestWriteTextL3WithoutID(t *testing.T) {
	cache := "sys/devices/system/cpu/cpu%d/cache/index3/"
	files := map[string]string{"sys/devices/system/cpu/online": "0-1\n"}
	for cpu := range 2 {
		files[fmt.Sprintf("sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu)] = "0\n"
		files[fmt.Sprintf("sys/devices/system/cpu/cpu%d/topology/core_id", cpu)] = fmt.Sprintf("%d\n", cpu)
		files[fmt.Sprintf(cache+"level", cpu)] = "3\n"
		files[fmt.Sprintf(cache+"type", cpu)] = "Unified\n"
		files[fmt.Sprintf(cache+"size", cpu)] = "18432K\n"
		files[fmt.Sprintf(cache+"ways_of_associativity", cpu)] = "24\n"
		files[fmt.Sprintf(cache+"shared_cpu_list", cpu)] = "0-1\n"
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, Run(openHost(t, writeTree(t, files)), Options{}), 80); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "L3: CPUs 0-1, 18MiB, 24-way") || strings.Contains(out, "#-1") {
		t.Errorf("L3 line without a cache id:\n%s", out)
	}
}
