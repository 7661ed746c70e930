package sense

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/testenv"
)

// Container IDs as the runtimes make them (64 hex digits).
const (
	hexA = "3f2a9c1b04de7a61c5f0e9d8b7a6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8"
	hexB = "b0c9d8e7f6a5b4c3d2e1f0a9b83f2a9c1b04de7a61c5f0e9d8b7a6c5d4e3f2a1"
	hexC = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d"
	uid1 = "8d5e0f2c-6f4b-4c1e-9a57-3c2a1f0e9b11"
	uid2 = "1c7f3a90-2b4d-4e6f-8a1c-5d9e7b3f2a60"
	uid3 = "f4e3d2c1-b0a9-4877-a665-544332211000"
)

// Layouts as cgroup.Detect reports them on the three kinds of host.
var (
	layoutHybrid = cgroup.Layout{Mode: cgroup.ModeHybrid, V2: "/sys/fs/cgroup/unified", V1: map[string]string{
		"cpu": "/sys/fs/cgroup/cpu", "cpuacct": "/sys/fs/cgroup/cpuacct", "cpuset": "/sys/fs/cgroup/cpuset", "memory": "/sys/fs/cgroup/memory"}}
	layoutV1 = cgroup.Layout{Mode: cgroup.ModeV1, V1: map[string]string{
		"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct", "cpuset": "/sys/fs/cgroup/cpuset"}}
	layoutV2 = cgroup.Layout{Mode: cgroup.ModeV2, V2: "/sys/fs/cgroup", V2Controllers: []string{"cpuset", "cpu", "io", "memory", "pids"}}
)

func systemdUID(s string) string { return strings.ReplaceAll(s, "-", "_") }

// cgTree writes files (path relative to the root: content) into a fresh
// directory; a path ending in "/" is an empty directory.
func cgTree(t testing.TB, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func openCgroupHost(t testing.TB, root string) *host.Host {
	t.Helper()
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// wantTenant is a tenant as a test expects it: CPUs as a list, Cgroup == ID.
type wantTenant struct {
	id, kind, name, cpus string
	threads              []int
}

func checkTenants(t *testing.T, got []Tenant, wants []wantTenant) {
	t.Helper()
	if len(got) != len(wants) {
		var ids []string
		for _, g := range got {
			ids = append(ids, g.Kind+" "+g.ID)
		}
		t.Fatalf("got %d tenants, want %d:\n  %s", len(got), len(wants), strings.Join(ids, "\n  "))
	}
	for i, w := range wants {
		g := got[i]
		if g.ID != w.id || g.Cgroup != w.id || g.Kind != w.kind || g.Name != w.name || g.CPUs.String() != w.cpus || !slices.Equal(g.Threads, w.threads) {
			t.Errorf("tenant %d:\n got  {id %q kind %q name %q cgroup %q cpus %q threads %v}\n want {id %q kind %q name %q cpus %q threads %v}",
				i, g.ID, g.Kind, g.Name, g.Cgroup, g.CPUs, g.Threads, w.id, w.kind, w.name, w.cpus, w.threads)
		}
	}
}

func TestDiscoverLayouts(t *testing.T) {
	const v2 = "sys/fs/cgroup/"
	tests := []struct {
		name    string
		layout  cgroup.Layout
		files   map[string]string
		globs   []string
		builtin bool
		want    []wantTenant
	}{{
		// This dev machine: cgroup v1 hybrid, libvirtd without systemd.
		name: "libvirt without systemd, v1 hybrid", layout: layoutHybrid, builtin: true,
		files: map[string]string{
			"sys/devices/system/cpu/online":                                    "0-1\n",
			"sys/fs/cgroup/cpu/tasks":                                          "1\n2\n",
			"sys/fs/cgroup/cpu/machine/tasks":                                  "",
			"sys/fs/cgroup/cpu/machine/qemu-1-vm1.libvirt-qemu/tasks":          "",
			"sys/fs/cgroup/cpu/machine/qemu-1-vm1.libvirt-qemu/emulator/tasks": "1000\n1003\n",
			"sys/fs/cgroup/cpu/machine/qemu-1-vm1.libvirt-qemu/vcpu0/tasks":    "1001\n",
			"sys/fs/cgroup/cpu/machine/qemu-1-vm1.libvirt-qemu/vcpu1/tasks":    "1002\n1001\n",
			"sys/fs/cgroup/cpu/machine/qemu-2-old-kernel.libvirt-qemu/tasks":   "2300\n",
			// Old kernels (before 3.14) have no cpuset.effective_cpus.
			"sys/fs/cgroup/cpuset/machine/qemu-2-old-kernel.libvirt-qemu/cpuset.cpus":    "0\n",
			"sys/fs/cgroup/cpu/machine/legacy.libvirt-qemu/tasks":                        "2000\n",
			"sys/fs/cgroup/cpu/machine/not-a-vm/tasks":                                   "2100\n",
			"sys/fs/cgroup/cpu/user/1000.user/1.session/tasks":                           "2200\n",
			"sys/fs/cgroup/cpuset/machine/qemu-1-vm1.libvirt-qemu/cpuset.effective_cpus": "1\n",
			"sys/fs/cgroup/cpuset/machine/qemu-1-vm1.libvirt-qemu/cpuset.cpus":           "1\n",
			// Empty cpusets: the CPUs come from /sys/devices/system/cpu/online.
			"sys/fs/cgroup/cpuset/machine/legacy.libvirt-qemu/cpuset.effective_cpus": "\n",
			"sys/fs/cgroup/cpuset/machine/legacy.libvirt-qemu/cpuset.cpus":           "\n",
		},
		want: []wantTenant{
			{"/machine/legacy.libvirt-qemu", KindVM, "legacy", "0-1", []int{2000}},
			{"/machine/qemu-1-vm1.libvirt-qemu", KindVM, "vm1", "1", []int{1000, 1001, 1002, 1003}},
			{"/machine/qemu-2-old-kernel.libvirt-qemu", KindVM, "old-kernel", "0", []int{2300}},
		},
	}, {
		name: "systemd-machined VMs, v2 with nested libvirt cgroup", layout: layoutV2, builtin: true,
		files: map[string]string{
			"sys/devices/system/cpu/online":                                                     "0-7\n",
			v2 + "cpuset.cpus.effective":                                                        "0-7\n",
			v2 + "machine.slice/cgroup.threads":                                                 "",
			v2 + "machine.slice/cpuset.cpus.effective":                                          "0-3\n",
			v2 + `machine.slice/machine-qemu\x2d1\x2dvm1.scope/cgroup.threads`:                  "",
			v2 + `machine.slice/machine-qemu\x2d1\x2dvm1.scope/cpuset.cpus.effective`:           "2-3\n",
			v2 + `machine.slice/machine-qemu\x2d1\x2dvm1.scope/libvirt/cgroup.threads`:          "",
			v2 + `machine.slice/machine-qemu\x2d1\x2dvm1.scope/libvirt/emulator/cgroup.threads`: "3000\n3001\n",
			v2 + `machine.slice/machine-qemu\x2d1\x2dvm1.scope/libvirt/vcpu0/cgroup.threads`:    "3002\n",
			v2 + `machine.slice/machine-qemu\x2d1\x2dvm1.scope/libvirt/vcpu1/cgroup.threads`:    "3003\n",
			// libvirt cut this name at 64 bytes: the name is what is left.
			v2 + `machine.slice/machine-qemu\x2d12\x2dkstest\x2dnetwork\x2ddevice\x2ddefault\x2dhttpksc9eed63e\x2d981e\x2d48ec.scope/cgroup.threads`: "4000\n",
			// Unescaped, as some tools write it.
			v2 + "machine.slice/machine-qemu-3-plain.scope/cgroup.threads": "5000\n",
			// systemd-nspawn containers are machines too, but not VMs.
			v2 + "machine.slice/machine-box.scope/cgroup.threads":                      "5100\n",
			v2 + "machine.slice/systemd-nspawn@box.service/cgroup.threads":             "5101\n",
			v2 + "system.slice/libvirtd.service/cgroup.threads":                        "10\n",
			v2 + `machine.slice/machine-qemu\x2d4\x2dcold.scope/cpuset.cpus.effective`: "\n", // empty: cpuset.cpus is next
			v2 + `machine.slice/machine-qemu\x2d4\x2dcold.scope/cpuset.cpus`:           "5\n",
			v2 + `machine.slice/machine-qemu\x2d4\x2dcold.scope/cgroup.threads`:        "",
		},
		want: []wantTenant{
			{`/machine.slice/machine-qemu-3-plain.scope`, KindVM, "plain", "0-3", []int{5000}},
			{`/machine.slice/machine-qemu\x2d12\x2dkstest\x2dnetwork\x2ddevice\x2ddefault\x2dhttpksc9eed63e\x2d981e\x2d48ec.scope`, KindVM, "kstest-network-device-default-httpksc9eed63e-981e-48ec", "0-3", []int{4000}},
			{`/machine.slice/machine-qemu\x2d1\x2dvm1.scope`, KindVM, "vm1", "2-3", []int{3000, 3001, 3002, 3003}},
			{`/machine.slice/machine-qemu\x2d4\x2dcold.scope`, KindVM, "cold", "5", nil},
		},
	}, {
		name: "kubernetes systemd driver, v2", layout: layoutV2, builtin: true,
		files: map[string]string{
			"sys/devices/system/cpu/online":      "0-3\n",
			v2 + "cpuset.cpus.effective":         "0-3\n",
			v2 + "kubepods.slice/cgroup.threads": "",
			v2 + "kubepods.slice/kubepods-pod" + systemdUID(uid1) + ".slice/cgroup.threads":                                                            "",
			v2 + "kubepods.slice/kubepods-pod" + systemdUID(uid1) + ".slice/cpuset.cpus.effective":                                                     "2-3\n",
			v2 + "kubepods.slice/kubepods-pod" + systemdUID(uid1) + ".slice/cri-containerd-" + hexA + ".scope/cgroup.threads":                          "101\n100\n",
			v2 + "kubepods.slice/kubepods-pod" + systemdUID(uid1) + ".slice/cri-containerd-" + hexB + ".scope/cgroup.threads":                          "102\n",
			v2 + "kubepods.slice/kubepods-burstable.slice/cgroup.threads":                                                                              "",
			v2 + "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + systemdUID(uid2) + ".slice/cgroup.threads":                         "",
			v2 + "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + systemdUID(uid2) + ".slice/crio-" + hexC + ".scope/cgroup.threads": "200\n",
			v2 + "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + systemdUID(uid3) + ".slice/cgroup.threads":                       "",
			// A docker-<id>.scope inside a pod is the pod's, not a container tenant.
			v2 + "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + systemdUID(uid3) + ".slice/docker-" + hexA + ".scope/cgroup.threads": "300\n",
			v2 + "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + systemdUID(uid3) + ".slice/docker-" + hexB + ".scope/cgroup.threads": "301\n302\n",
		},
		want: []wantTenant{
			{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + systemdUID(uid3) + ".slice", KindPod, uid3, "0-3", []int{300, 301, 302}},
			{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + systemdUID(uid2) + ".slice", KindPod, uid2, "0-3", []int{200}},
			{"/kubepods.slice/kubepods-pod" + systemdUID(uid1) + ".slice", KindPod, uid1, "2-3", []int{100, 101, 102}},
		},
	}, {
		name: "kubernetes cgroupfs driver, v1", layout: layoutV1, builtin: true,
		files: map[string]string{
			"sys/devices/system/cpu/online":                                                   "0-1\n",
			"sys/fs/cgroup/cpu,cpuacct/kubepods/tasks":                                        "",
			"sys/fs/cgroup/cpu,cpuacct/kubepods/pod" + uid1 + "/tasks":                        "",
			"sys/fs/cgroup/cpu,cpuacct/kubepods/pod" + uid1 + "/" + hexA + "/tasks":           "400\n401\n",
			"sys/fs/cgroup/cpu,cpuacct/kubepods/pod" + uid1 + "/" + hexB + "/tasks":           "402\n",
			"sys/fs/cgroup/cpu,cpuacct/kubepods/burstable/tasks":                              "",
			"sys/fs/cgroup/cpu,cpuacct/kubepods/burstable/pod" + uid2 + "/" + hexC + "/tasks": "500\n",
			"sys/fs/cgroup/cpu,cpuacct/kubepods/burstable/pod" + uid2 + "/tasks":              "",
			"sys/fs/cgroup/cpu,cpuacct/kubepods/besteffort/pod" + uid3 + "/tasks":             "600\n",
			"sys/fs/cgroup/cpuset/kubepods/pod" + uid1 + "/cpuset.effective_cpus":             "1\n",
			"sys/fs/cgroup/cpuset/kubepods/burstable/pod" + uid2 + "/cpuset.effective_cpus":   "0-1\n",
		},
		want: []wantTenant{
			{"/kubepods/besteffort/pod" + uid3, KindPod, uid3, "0-1", []int{600}},
			{"/kubepods/burstable/pod" + uid2, KindPod, uid2, "0-1", []int{500}},
			{"/kubepods/pod" + uid1, KindPod, uid1, "1", []int{400, 401, 402}},
		},
	}, {
		name: "docker and nerdctl, systemd driver, v2", layout: layoutV2, builtin: true,
		files: map[string]string{
			"sys/devices/system/cpu/online":                                     "0-3\n",
			v2 + "cpuset.cpus.effective":                                        "0-3\n",
			v2 + "system.slice/docker-" + hexA + ".scope/cgroup.threads":        "700\n701\n",
			v2 + "system.slice/docker-" + hexA + ".scope/cpuset.cpus.effective": "1\n",
			v2 + "system.slice/docker.service/cgroup.threads":                   "11\n",
			v2 + "system.slice/containerd.service/cgroup.threads":               "12\n",
			v2 + "system.slice/docker-abc.scope/cgroup.threads":                 "13\n", // no 64-hex ID: not docker's
			v2 + "system.slice/nerdctl-" + hexB + ".scope/cgroup.threads":       "800\n",
		},
		want: []wantTenant{
			{"/system.slice/docker-" + hexA + ".scope", KindContainer, hexA[:12], "1", []int{700, 701}},
			{"/system.slice/nerdctl-" + hexB + ".scope", KindContainer, hexB[:12], "0-3", []int{800}},
		},
	}, {
		name: "docker, containerd and podman, cgroupfs driver, v1", layout: layoutV1, builtin: true,
		files: map[string]string{
			"sys/devices/system/cpu/online":                                                  "0-1\n",
			"sys/fs/cgroup/cpu,cpuacct/docker/tasks":                                         "",
			"sys/fs/cgroup/cpu,cpuacct/docker/" + hexA + "/tasks":                            "900\n",
			"sys/fs/cgroup/cpu,cpuacct/default/" + hexB + "/tasks":                           "901\n",
			"sys/fs/cgroup/cpu,cpuacct/default/myjob/tasks":                                  "902\n", // ctr run: any ID
			"sys/fs/cgroup/cpu,cpuacct/libpod_parent/libpod-" + hexC + "/tasks":              "903\n",
			"sys/fs/cgroup/cpu,cpuacct/libpod_parent/" + hexB + "/libpod-" + hexA + "/tasks": "905\n", // in a pod
			"sys/fs/cgroup/cpu,cpuacct/libpod_parent/conmon/tasks":                           "904\n",
			"sys/fs/cgroup/cpu,cpuacct/system.slice/docker.service/tasks":                    "11\n",
			"sys/fs/cgroup/cpuset/docker/" + hexA + "/cpuset.effective_cpus":                 "0\n",
		},
		want: []wantTenant{
			{"/default/" + hexB, KindContainer, hexB[:12], "0-1", []int{901}},
			{"/default/myjob", KindContainer, "myjob", "0-1", []int{902}},
			{"/docker/" + hexA, KindContainer, hexA[:12], "0", []int{900}},
			{"/libpod_parent/" + hexB + "/libpod-" + hexA, KindContainer, hexA[:12], "0-1", []int{905}},
			{"/libpod_parent/libpod-" + hexC, KindContainer, hexC[:12], "0-1", []int{903}},
		},
	}, {
		name: "podman, systemd driver, v2", layout: layoutV2, builtin: true,
		files: map[string]string{
			"sys/devices/system/cpu/online":                                                                            "0-3\n",
			v2 + "cpuset.cpus.effective":                                                                               "0-3\n",
			v2 + "machine.slice/libpod-" + hexA + ".scope/cgroup.threads":                                              "",
			v2 + "machine.slice/libpod-" + hexA + ".scope/container/cgroup.threads":                                    "1100\n1101\n",
			v2 + "machine.slice/libpod-conmon-" + hexA + ".scope/cgroup.threads":                                       "1099\n",
			v2 + "machine.slice/machine-libpod_pod_" + hexC + ".slice/libpod-" + hexB + ".scope/cgroup.threads":        "1200\n",
			v2 + "machine.slice/machine-libpod_pod_" + hexC + ".slice/libpod-conmon-" + hexB + ".scope/cgroup.threads": "1199\n",
		},
		want: []wantTenant{
			{"/machine.slice/libpod-" + hexA + ".scope", KindContainer, hexA[:12], "0-3", []int{1100, 1101}},
			{"/machine.slice/machine-libpod_pod_" + hexC + ".slice/libpod-" + hexB + ".scope", KindContainer, hexB[:12], "0-3", []int{1200}},
		},
	}, {
		name: "globs next to built-ins, v1", layout: layoutV1, builtin: true,
		globs: []string{"/crosstalk-lab/*/*/*", "batch.slice/*.scope", "/docker/*"},
		files: map[string]string{
			"sys/devices/system/cpu/online":                                                     "0-1\n",
			"sys/fs/cgroup/cpu,cpuacct/crosstalk-lab/run-7-1/tasks":                             "",
			"sys/fs/cgroup/cpu,cpuacct/crosstalk-lab/run-7-1/r1-static/tasks":                   "",
			"sys/fs/cgroup/cpu,cpuacct/crosstalk-lab/run-7-1/r1-static/victim/tasks":            "1300\n",
			"sys/fs/cgroup/cpu,cpuacct/crosstalk-lab/run-7-1/r1-static/polluter/tasks":          "1301\n1302\n",
			"sys/fs/cgroup/cpu,cpuacct/crosstalk-lab/run-7-1/r1-static/polluter/worker/tasks":   "1303\n",
			"sys/fs/cgroup/cpu,cpuacct/batch.slice/job-1.scope/tasks":                           "1400\n",
			"sys/fs/cgroup/cpu,cpuacct/batch.slice/job-1.service/tasks":                         "1401\n",
			"sys/fs/cgroup/cpu,cpuacct/docker/" + hexA + "/tasks":                               "900\n",
			"sys/fs/cgroup/cpuset/crosstalk-lab/run-7-1/r1-static/victim/cpuset.effective_cpus": "1\n",
		},
		want: []wantTenant{
			{"/batch.slice/job-1.scope", KindCgroup, "job-1.scope", "0-1", []int{1400}},
			{"/crosstalk-lab/run-7-1/r1-static/polluter", KindCgroup, "polluter", "0-1", []int{1301, 1302, 1303}},
			{"/crosstalk-lab/run-7-1/r1-static/victim", KindCgroup, "victim", "1", []int{1300}},
			{"/docker/" + hexA, KindContainer, hexA[:12], "0-1", []int{900}}, // built-in first
		},
	}, {
		name: "globs only", layout: layoutV1, builtin: false,
		globs: []string{"/crosstalk-lab/*/*/victim"},
		files: map[string]string{
			"sys/devices/system/cpu/online":                                            "0-1\n",
			"sys/fs/cgroup/cpu,cpuacct/crosstalk-lab/run-7-1/r1-static/victim/tasks":   "1300\n",
			"sys/fs/cgroup/cpu,cpuacct/crosstalk-lab/run-7-1/r1-static/polluter/tasks": "1301\n",
			"sys/fs/cgroup/cpu,cpuacct/docker/" + hexA + "/tasks":                      "900\n",
		},
		want: []wantTenant{{"/crosstalk-lab/run-7-1/r1-static/victim", KindCgroup, "victim", "0-1", []int{1300}}},
	}, {
		name: "no tenants", layout: layoutV2, builtin: true,
		files: map[string]string{
			v2 + "cgroup.threads":                           "1\n",
			v2 + "system.slice/sshd.service/cgroup.threads": "100\n",
			v2 + "init.scope/cgroup.threads":                "1\n",
		},
		want: nil,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := NewCgroupDiscoverer(openCgroupHost(t, cgTree(t, tc.files)), tc.layout, tc.globs)
			if err != nil {
				t.Fatal(err)
			}
			d.Builtin = tc.builtin
			got, err := d.Discover(t.Context())
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			checkTenants(t, got, tc.want)
		})
	}
}

func TestDiscoverMaxDepth(t *testing.T) {
	h := openCgroupHost(t, cgTree(t, map[string]string{
		"sys/devices/system/cpu/online":                       "0\n",
		"sys/fs/cgroup/cpu,cpuacct/docker/" + hexA + "/tasks": "1\n",
		"sys/fs/cgroup/cpu,cpuacct/a/b/c/tasks":               "2\n",
	}))
	d, err := NewCgroupDiscoverer(h, layoutV1, []string{"/a/*/*"})
	if err != nil {
		t.Fatal(err)
	}
	d.MaxDepth = 2 // /docker/<id> is 2 deep, /a/b/c 3
	// The glob is deeper than the walk goes: say so rather than never match.
	if got, err := d.Discover(t.Context()); err == nil || !strings.Contains(err.Error(), `"/a/*/*"`) {
		t.Errorf("glob deeper than MaxDepth: %v, %v", got, err)
	}
	d.Globs = nil
	got, err := d.Discover(t.Context())
	if err != nil || len(got) != 1 || got[0].ID != "/docker/"+hexA {
		t.Errorf("MaxDepth 2: %v, %v", got, err)
	}
	d.MaxDepth = 1
	if got, err = d.Discover(t.Context()); err != nil || len(got) != 0 {
		t.Errorf("MaxDepth 1: %v, %v", got, err)
	}
}

func TestDiscoverErrors(t *testing.T) {
	h := openCgroupHost(t, cgTree(t, map[string]string{"sys/fs/cgroup/cgroup.threads": ""}))
	for _, g := range []string{"/bad/[x", "", "  ", "/", "../x", "/a/../../b", "/1/2/3/4/5/6/7/8/9"} {
		_, err := NewCgroupDiscoverer(h, layoutV2, []string{"/ok/*", g})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", g)) {
			t.Errorf("glob %q: err = %v, want an error naming it", g, err)
		}
	}
	// A literal CgroupDiscoverer is checked by Discover.
	if _, err := (&CgroupDiscoverer{Host: h, Layout: layoutV2, Globs: []string{"/x/[a-"}}).Discover(t.Context()); err == nil || !strings.Contains(err.Error(), `"/x/[a-"`) {
		t.Errorf("literal with bad glob: %v", err)
	}
	if _, err := (&CgroupDiscoverer{Layout: layoutV2}).Discover(t.Context()); err == nil {
		t.Error("no host: no error")
	}
	if _, err := NewCgroupDiscoverer(nil, layoutV2, nil); err == nil {
		t.Error("NewCgroupDiscoverer(nil host): no error")
	}
	for _, l := range []cgroup.Layout{
		{Mode: cgroup.ModeNone},
		{Mode: cgroup.ModeV2, V2: "/sys/fs/cgroup", V2Controllers: []string{"memory", "pids"}},
		{Mode: cgroup.ModeHybrid, V2: "/sys/fs/cgroup/unified", V1: map[string]string{"cpuset": "/sys/fs/cgroup/cpuset", "memory": "/sys/fs/cgroup/memory"}},
	} {
		d, err := NewCgroupDiscoverer(h, l, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Discover(t.Context()); err == nil || !strings.Contains(err.Error(), "cpu controller") {
			t.Errorf("layout %+v: err = %v, want no cpu controller", l, err)
		}
	}
	// The hierarchy's root missing is an error, not "no tenants".
	d, _ := NewCgroupDiscoverer(h, layoutV1, nil)
	if got, err := d.Discover(t.Context()); err == nil {
		t.Errorf("missing hierarchy root: %v, no error", got)
	}
}

// A cgroup removed between the listing that found it and the reads is left
// out silently; a descendant removed that way just adds no threads.
func TestDiscoverVanished(t *testing.T) {
	const v2 = "sys/fs/cgroup/"
	vm := `machine.slice/machine-qemu\x2d1\x2dvm1.scope`
	root := cgTree(t, map[string]string{
		"sys/devices/system/cpu/online":                                         "0-3\n",
		v2 + "system.slice/docker-" + hexA + ".scope/cgroup.threads":            "700\n",
		v2 + "system.slice/docker-" + hexB + ".scope/cgroup.threads":            "800\n",
		v2 + vm + "/cgroup.threads":                                             "",
		v2 + vm + "/libvirt/cgroup.threads":                                     "",
		v2 + vm + "/libvirt/vcpu0/cgroup.threads":                               "3002\n",
		v2 + vm + "/libvirt/vcpu1/cgroup.threads":                               "3003\n",
		v2 + "system.slice/gone.slice/docker-" + hexC + ".scope/cgroup.threads": "900\n",
	})
	d, err := NewCgroupDiscoverer(openCgroupHost(t, root), layoutV2, nil)
	if err != nil {
		t.Fatal(err)
	}
	var removed []string
	d.listed = func(dir string) {
		var victim string
		switch dir {
		case "/sys/fs/cgroup/system.slice":
			victim = "system.slice/docker-" + hexB + ".scope" // a tenant, after its parent was listed
		case "/sys/fs/cgroup/" + vm + "/libvirt":
			victim = vm + "/libvirt/vcpu1" // a descendant of a tenant
		case "/sys/fs/cgroup/system.slice/gone.slice":
			return
		default:
			return
		}
		if err := os.RemoveAll(filepath.Join(root, v2, victim)); err != nil {
			t.Fatal(err)
		}
		removed = append(removed, victim)
	}
	// And a directory listed by its parent but gone before it is listed itself.
	d.listed = chainHooks(d.listed, func(dir string) {
		if dir == "/sys/fs/cgroup/system.slice" {
			os.RemoveAll(filepath.Join(root, v2, "system.slice/gone.slice"))
		}
	})
	got, err := d.Discover(t.Context())
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if len(removed) != 2 {
		t.Fatalf("removed %v; the hook did not run where expected; got %+v", removed, got)
	}
	checkTenants(t, got, []wantTenant{
		{"/machine.slice/machine-qemu\\x2d1\\x2dvm1.scope", KindVM, "vm1", "0-3", []int{3002}},
		{"/system.slice/docker-" + hexA + ".scope", KindContainer, hexA[:12], "0-3", []int{700}},
	})
}

func chainHooks(fs ...func(string)) func(string) {
	return func(s string) {
		for _, f := range fs {
			f(s)
		}
	}
}

// Read errors other than "gone" come back, joined, with every tenant found.
func TestDiscoverReadErrors(t *testing.T) {
	const v2 = "sys/fs/cgroup/"
	root := cgTree(t, map[string]string{
		"sys/devices/system/cpu/online":                                     "0-3\n",
		v2 + "system.slice/docker-" + hexA + ".scope/cgroup.threads":        "700\n",
		v2 + "system.slice/docker-" + hexB + ".scope/cgroup.threads":        "800\nnot-a-tid\n",
		v2 + "system.slice/docker-" + hexC + ".scope/cgroup.threads/":       "", // a directory: EISDIR
		v2 + "system.slice/docker-" + hexC + ".scope/cpuset.cpus.effective": "0-3,\n",
	})
	d, err := NewCgroupDiscoverer(openCgroupHost(t, root), layoutV2, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.Discover(t.Context())
	if err == nil {
		t.Fatal("no error for unreadable and garbled files")
	}
	for _, s := range []string{"not a thread ID list", "docker-" + hexC + ".scope/cgroup.threads", "cpuset.cpus.effective"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	checkTenants(t, got, []wantTenant{
		{"/system.slice/docker-" + hexA + ".scope", KindContainer, hexA[:12], "0-3", []int{700}},
		{"/system.slice/docker-" + hexC + ".scope", KindContainer, hexC[:12], "0-3", nil},
		{"/system.slice/docker-" + hexB + ".scope", KindContainer, hexB[:12], "0-3", []int{800}},
	})
}

func TestBuiltinNames(t *testing.T) {
	tests := []struct {
		path, kind, name string // kind "" = no tenant
	}{
		{`/machine.slice/machine-qemu\x2d1\x2dvm1.scope`, KindVM, "vm1"},
		{`/machine.slice/machine-qemu\x2dold.scope`, KindVM, "old"}, // libvirt < 1.3: no domain ID
		{`/machine.slice/machine-qemu\x2dembed\x2d0991f456\x2d1\x2ddemo.scope`, KindVM, "demo"},
		{`/machine.slice/machine-ch\x2d2\x2dcloud.scope`, KindVM, "cloud"}, // cloud-hypervisor
		{`/prod.slice/machine-qemu\x2d7\x2dweb\x2d1.scope`, KindVM, "web-1"},
		{`/machine.slice/machine-lxc\x2d1234\x2dweb.scope`, "", ""},
		{`/machine.slice/machine-qemu\x2d1\x2d.scope`, "", ""},
		{"/machine/qemu-1-vm1.libvirt-qemu", KindVM, "vm1"},
		{"/machine/web.libvirt-qemu", KindVM, "web"},
		{"/machine/_cpu.web.libvirt-qemu", KindVM, "cpu.web"},
		{"/production.partition/qemu-2-db.libvirt-qemu", KindVM, "db"},
		{"/machine/.libvirt-qemu", "", ""},
		{"/machine/qemu-3-.libvirt-qemu", KindVM, "qemu-3-"},
		{"/kubepods.slice/kubepods-pod" + systemdUID(uid1) + ".slice", KindPod, uid1},
		{"/kubepods.slice/kubepods-burstable.slice", "", ""},
		{"/kubepods.slice/kubepods-besteffort.slice", "", ""},
		{"/custom.slice/custom-kubepods.slice/custom-kubepods-burstable.slice/custom-kubepods-burstable-pod" + systemdUID(uid2) + ".slice", KindPod, uid2},
		{"/kubepods.slice/kubepods-pod.slice", "", ""},
		{"/user.slice/user-1000.slice", "", ""},
		{"/kubepods/pod" + uid1, KindPod, uid1},
		{"/kubepods/burstable/pod" + uid2, KindPod, uid2},
		{"/kubepods/guaranteed/pod" + uid2, "", ""},
		{"/burstable/pod" + uid2, "", ""},
		{"/system.slice/docker-" + hexA + ".scope", KindContainer, hexA[:12]},
		{"/system.slice/docker-" + hexA[:63] + ".scope", "", ""},
		{"/system.slice/docker-" + strings.ToUpper(hexA) + ".scope", "", ""},
		{"/docker/" + hexA, KindContainer, hexA[:12]},
		{"/docker/" + hexA + "x", "", ""},
		{"/system.slice/nerdctl-" + hexB + ".scope", KindContainer, hexB[:12]},
		{"/machine.slice/libpod-" + hexC + ".scope", KindContainer, hexC[:12]},
		{"/machine.slice/libpod-conmon-" + hexC + ".scope", "", ""},
		{"/libpod_parent/libpod-" + hexC, KindContainer, hexC[:12]},
		{"/libpod_parent/" + hexA + "/libpod-" + hexC, KindContainer, hexC[:12]},
		{"/libpod_parent/conmon", "", ""},
		{"/x/libpod-" + hexC, "", ""},
		{"/default/x", KindContainer, "x"},
		{"/a/default/x", "", ""},
	}
	for _, tc := range tests {
		parts := strings.Split(tc.path[1:], "/")
		kind, name, ok := matchBuiltin(parts[:len(parts)-1], parts[len(parts)-1])
		if kind != tc.kind || name != tc.name || ok != (tc.kind != "") {
			t.Errorf("%s: %q %q %v, want %q %q", tc.path, kind, name, ok, tc.kind, tc.name)
		}
		// Every ancestor of a tenant must be walked into.
		if tc.kind != "" {
			for i := range parts[:len(parts)-1] {
				if !descendBuiltin(parts[:i], parts[i]) {
					t.Errorf("%s: the walk does not enter %q", tc.path, strings.Join(parts[:i+1], "/"))
				}
			}
		}
	}
	for _, p := range []string{"/system.slice/sshd.service", "/init.scope", "/user.slice/user-1000.slice/session-1.scope", "/machine/x"} {
		parts := strings.Split(p[1:], "/")
		if descendBuiltin(parts[:len(parts)-1], parts[len(parts)-1]) {
			t.Errorf("the walk enters %s", p)
		}
	}
}

func FuzzParseCgroupTenant(f *testing.F) {
	f.Add("machine.slice", `machine-qemu\x2d1\x2dvm1.scope`, []byte("1\n2\n"))
	f.Add("kubepods", "pod"+uid1, []byte(""))
	f.Add("kubepods.slice", "kubepods-pod"+systemdUID(uid1)+".slice", []byte("x"))
	f.Add("machine", "qemu-1-.libvirt-qemu", []byte("99999999999\n"))
	f.Add("", "default", []byte("1"))
	f.Add("libpod_parent", "libpod-"+hexA, []byte("1\n\n2"))
	f.Fuzz(func(t *testing.T, parent, name string, tasks []byte) {
		var anc []string // parent "" is the hierarchy root
		if parent != "" {
			anc = strings.Split(parent, "/")
		}
		if kind, tname, ok := matchBuiltin(anc, name); ok && (kind == "" || tname == "") {
			t.Errorf("matchBuiltin(%q, %q) = %q %q", parent, name, kind, tname)
		}
		descendBuiltin(anc, name)
		tids, err := parseTIDs(tasks, nil)
		if err == nil {
			for _, n := range tids {
				if n < 0 {
					t.Errorf("negative TID %d from %q", n, tasks)
				}
			}
		}
	})
}

// On the real cgroupfs (root only): two cgroups made with cgroup.Create, a
// glob to find them, a sleep in one.
func TestLiveDiscover(t *testing.T) {
	h, l := testenv.LiveCgroups(t)
	base := fmt.Sprintf("/crosstalk-test-discover/run-%d", os.Getpid())
	t.Cleanup(func() {
		if err := cgroup.RemoveTree(h, l, base, 2*time.Second); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		cgroup.Open(h, l, "/crosstalk-test-discover").Remove() // fails while another run uses it
	})
	busy, err := cgroup.Create(h, l, base+"/busy", cpuset.Of(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cgroup.Create(h, l, base+"/idle", cpuset.Set{}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := busy.AddProc(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}

	d, err := NewCgroupDiscoverer(h, l, []string{"/crosstalk-test-discover/*/*"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.Discover(t.Context())
	if err != nil {
		t.Logf("Discover reported (tenants found anyway): %v", err)
	}
	online, err := h.ReadString("/sys/devices/system/cpu/online")
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]Tenant{}
	for _, tn := range got {
		byID[tn.ID] = tn
	}
	b, ok := byID[base+"/busy"]
	if !ok || b.Kind != KindCgroup || b.Name != "busy" || !slices.Equal(b.Threads, []int{cmd.Process.Pid}) || b.CPUs.String() != "0" {
		t.Errorf("busy = %+v (found %v), want the sleep's TID %d on CPU 0", b, ok, cmd.Process.Pid)
	}
	i, ok := byID[base+"/idle"]
	if !ok || i.Name != "idle" || len(i.Threads) != 0 || i.CPUs.String() != cpuset.MustParse(online).String() {
		t.Errorf("idle = %+v (found %v), want no threads on CPUs %s", i, ok, online)
	}
}

// BenchmarkDiscover: 200 pods (systemd driver, burstable QoS, 2 containers
// each) on cgroup v2, every directory holding a cgroup's usual number of
// files so listings cost what they do on cgroupfs.
func BenchmarkDiscover(b *testing.B) {
	const v2 = "sys/fs/cgroup/"
	files := map[string]string{
		"sys/devices/system/cpu/online":                    "0-63\n",
		v2 + "cpuset.cpus.effective":                       "0-63\n",
		v2 + "system.slice/sshd.service/cgroup.threads":    "100\n",
		v2 + "system.slice/kubelet.service/cgroup.threads": "200\n201\n",
	}
	filler := []string{"cgroup.procs", "cgroup.controllers", "cgroup.subtree_control", "cgroup.events", "cpu.max", "cpu.stat", "cpu.weight", "cpu.pressure", "memory.current", "memory.max", "memory.stat", "pids.current", "io.stat", "cpuset.cpus", "cpuset.mems"}
	addCgroup := func(dir, threads string) {
		files[dir+"/cgroup.threads"] = threads
		for _, f := range filler {
			files[dir+"/"+f] = ""
		}
	}
	addCgroup(v2+"kubepods.slice", "")
	addCgroup(v2+"kubepods.slice/kubepods-burstable.slice", "")
	tid := 1000
	for p := 0; p < 200; p++ {
		pod := fmt.Sprintf("%s/kubepods-burstable-pod%08x_1111_4222_8333_%012x.slice", v2+"kubepods.slice/kubepods-burstable.slice", p, p)
		addCgroup(pod, "")
		files[pod+"/cpuset.cpus.effective"] = "0-63\n"
		for c := 0; c < 2; c++ {
			ctr := fmt.Sprintf("%s/cri-containerd-%064x.scope", pod, p*2+c)
			addCgroup(ctr, fmt.Sprintf("%d\n%d\n%d\n", tid, tid+1, tid+2))
			tid += 3
		}
	}
	d, err := NewCgroupDiscoverer(openCgroupHost(b, cgTree(b, files)), layoutV2, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		got, err := d.Discover(b.Context())
		if err != nil || len(got) != 200 || len(got[0].Threads) != 6 {
			b.Fatalf("%d tenants, %v", len(got), err)
		}
	}
}

// Threads reads a tenant's threads now: a process that joined its cgroup
// after Discover read the tenant's details is there, as are those of its
// descendants; a cgroup that is gone says so.
func TestDiscovererThreadsReadsNow(t *testing.T) {
	const v2 = "sys/fs/cgroup/"
	ctr := "system.slice/docker-" + hexA + ".scope"
	root := cgTree(t, map[string]string{
		"sys/devices/system/cpu/online": "0-3\n",
		v2 + ctr + "/cgroup.threads":    "",
	})
	d, err := NewCgroupDiscoverer(openCgroupHost(t, root), layoutV2, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.DetailEvery = 100 // its details are not read again for a while
	got, err := d.Discover(t.Context())
	if err != nil || len(got) != 1 || len(got[0].Threads) != 0 {
		t.Fatalf("Discover = %+v, %v; want one tenant with no threads yet", got, err)
	}
	tenant := got[0]
	for p, c := range map[string]string{ctr + "/cgroup.threads": "712\n710\n", ctr + "/init/cgroup.threads": "711\n"} {
		full := filepath.Join(root, v2, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if again, _ := d.Discover(t.Context()); len(again) != 1 || len(again[0].Threads) != 0 {
		t.Fatalf("Discover read the details again (%+v): the test would prove nothing", again)
	}
	tids, err := d.Threads(tenant)
	if err != nil || !slices.Equal(tids, []int{710, 711, 712}) {
		t.Errorf("Threads = %v, %v; want [710 711 712]", tids, err)
	}
	os.RemoveAll(filepath.Join(root, v2, ctr))
	if _, err := d.Threads(tenant); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Threads of a removed cgroup: %v, want fs.ErrNotExist", err)
	}
}
