package cli

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeSpec(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "vms.yaml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const talkSpec = `vms:
  - name: talk
    vcpus: 32
    memory: 64GiB
    policy: 1to1
    smt: true
  - name: web
    vcpus: 4
    memory: 8GiB
    policy: per-llc
`

func TestPlanText(t *testing.T) {
	out, _, err := run(t, "plan", "--root", tree("amd-naples-2s"), writeSpec(t, talkSpec))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"kvm-naples-01: 128 CPUs (64 cores × 2 threads), 2 package(s), 8 NUMA node(s), 16 L3 domain(s)",
		"talk  1to1     32     64GiB   2/2/4/2           0,1    2      passthrough",
		"0 64 8 72 16 80 24 88 … 122",
		"talk         all 5 ok",
		"<!-- talk -->", `<vcpupin vcpu="16" cpuset="2"/>`, `<emulatorpin cpuset=`,
		"SHARED POOLS",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestPlanJSON(t *testing.T) {
	out, _, err := run(t, "plan", "--root", tree("intel-skx-2s"), writeSpec(t, talkSpec[:0]+"vms:\n  - {name: a, vcpus: 4, memory: 1GiB, policy: 1to1, smt: true}\n"), "--json", "--reserve", "0,16")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Host struct {
			CPUs           int `json:"cpus"`
			ThreadsPerCore int `json:"threads_per_core"`
		} `json:"host"`
		Plan struct {
			Reserved string `json:"reserved"`
			VMs      []struct {
				Pins     []string              `json:"pins"`
				XML      string                `json:"xml"`
				Topology struct{ Threads int } `json:"topology"`
				Checks   []struct {
					ID, Status string
				} `json:"checks"`
			} `json:"vms"`
		} `json:"plan"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	vm := m.Plan.VMs[0]
	if m.Host.CPUs != 32 || m.Host.ThreadsPerCore != 2 || m.Plan.Reserved != "0,16" || strings.Join(vm.Pins, " ") != "1 17 2 18" || vm.Topology.Threads != 2 || len(vm.Checks) != 5 || !strings.Contains(vm.XML, "<cputune>") {
		t.Errorf("json = %+v", m)
	}
}

func TestPlanFromStatus(t *testing.T) {
	out, _, err := run(t, "plan", "--root", tree("intel-skx-4s"), "--from-status", "--policy", "1to1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"TOPOLOGY CHECKS OF THE RUNNING DOMAINS",
		"sap-hana (/run/libvirt/qemu/sap-hana.xml)", "[warn]    vm_phys_bits",
		"smt-wrong    [warn]    vm_smt_siblings",
		"PLAN FOR THEM (policy 1to1)",
		// memory forces db-remote over two nodes: sap-hana leaves 62 GiB on each
		"db-remote  1to1    8      64GiB    2/1/4/1           0,1      2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	_, after, _ := strings.Cut(out, "PLAN FOR THEM")
	for _, bad := range []string{"vm_smt_siblings", "vm_numa_span", "vm_l3_sharing", "vm_phys_bits"} {
		if strings.Contains(after, bad) {
			t.Errorf("the plan for the running domains still trips %s:\n%s", bad, after)
		}
	}
	out, _, err = run(t, "plan", "--root", tree("intel-skx-4s"), "--from-status", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Current []struct{ Name string } `json:"current"`
		Plan    struct{ VMs []any }     `json:"plan"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil || len(m.Current) != 3 || len(m.Plan.VMs) != 3 {
		t.Errorf("from-status json: %v %+v", err, m)
	}
}

func TestPlanErrorsCLI(t *testing.T) {
	tests := []struct {
		args []string
		want string
		code int // 0: a plain error (exit 2)
	}{
		{[]string{"plan"}, "give a spec file, --from-status or --from-libvirt", 0},
		{[]string{"plan", "--from-status", "--from-libvirt"}, "one of them", 0},
		{[]string{"plan", "--apply", writeSpec(t, "vms: []\n")}, "use it with --from-libvirt", 0},
		{[]string{"plan", "--root", tree("intel-skx-2s"), "--from-libvirt", "--libvirt-socket", "/run/ct-no-such.sock"}, "no libvirt socket at", 1},
		{[]string{"plan", "--root", tree("intel-skx-2s"), writeSpec(t, "vms:\n  - {name: a, vcpus: 2, memory: 1GiB, policy: 1to1, colour: red}\n")}, `line 2: unknown key "colour"`, 0},
		{[]string{"plan", "--root", tree("intel-skx-2s"), writeSpec(t, "vms:\n  - {name: a, vcpus: 40, memory: 1GiB, policy: 1to1}\n")}, "needs 40 free whole cores", 1},
		{[]string{"plan", "--root", tree("intel-skx-2s"), "--from-status"}, "no running domains", 1},
		{[]string{"plan", "--root", tree("intel-skx-2s"), "--reserve", "x", writeSpec(t, "vms:\n  - {name: a, vcpus: 2, memory: 1GiB, policy: shared}\n")}, "--reserve", 0},
		{[]string{"plan", "--policy", "1to1", writeSpec(t, "vms: []\n")}, "--policy is for --from-status", 0},
		{[]string{"plan", "--root", "/nonexistent-plan-root", "--from-status"}, "host root", 1},
	}
	for _, tc := range tests {
		_, _, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
			continue
		}
		var ee exitError
		if got := errors.As(err, &ee); got != (tc.code != 0) || (got && ee.code != tc.code) {
			t.Errorf("%v: exit error %v (%+v), want code %d", tc.args, got, ee, tc.code)
		}
	}
}

// doctor --capture keeps the libvirt status files and node memory the
// domain checks read, so a capture replays them, and plan works on it too.
func TestCaptureRoundTripWithDomains(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "cap")
	orig, _, err := run(t, "doctor", "--root", tree("amd-naples-2s"), "--json", "--capture", dst)
	if err != nil {
		t.Fatal(err)
	}
	again, _, err := run(t, "doctor", "--root", dst, "--json")
	if err != nil {
		t.Fatal(err)
	}
	domains := func(s string) string {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(m["domains"])
		return string(b)
	}
	if d := domains(orig); d != domains(again) || !strings.Contains(d, "talk-1to1") {
		t.Errorf("domains differ after capture:\n%s\n%s", d, domains(again))
	}
	if _, err := os.Stat(filepath.Join(dst, "run/libvirt/qemu/stream.xml")); err != nil {
		t.Error(err)
	}
	if _, _, err := run(t, "plan", "--root", dst, "--from-status"); err != nil {
		t.Errorf("plan on the capture: %v", err)
	}
}
