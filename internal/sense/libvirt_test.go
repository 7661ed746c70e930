package sense

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/libvirt"
)

// fakeDomains is a libvirt client's cached domain list.
type fakeDomains struct {
	doms    []libvirt.Domain
	current bool
}

func (f *fakeDomains) Domains() ([]libvirt.Domain, bool) { return f.doms, f.current }

// domain builds a listed domain from a minimal XML, as the client does.
func domain(t *testing.T, id int, name, uuid string, vcpus int, pins string) libvirt.Domain {
	t.Helper()
	cputune := ""
	if pins != "" {
		for i := range vcpus {
			cputune += fmt.Sprintf("<vcpupin vcpu='%d' cpuset='%s'/>", i, pins)
		}
		cputune = "<cputune>" + cputune + "<emulatorpin cpuset='" + pins + "'/></cputune>"
	}
	cfg, err := libvirt.ParseDomainXML(fmt.Sprintf("<domain type='qemu'><name>%s</name><uuid>%s</uuid><vcpu>%d</vcpu>%s</domain>", name, uuid, vcpus, cputune))
	if err != nil {
		t.Fatal(err)
	}
	return libvirt.Domain{Name: name, UUID: uuid, ID: id, State: "running", VCPUs: vcpus, Config: cfg}
}

const (
	uuidWeb   = "11111111-2222-3333-4444-555555555555"
	uuidProd  = "22222222-2222-3333-4444-555555555555"
	uuidLater = "33333333-2222-3333-4444-555555555555"
)

// The real cgroup walk over libvirt's layout on a hybrid host without
// systemd (as libvirt 9.0 made it on the dev machine: the domain cgroup with
// vcpuN and emulator below it, in cpu and cpuset), enriched from libvirt.
func TestLibvirtDiscovererEnrichesTheWalk(t *testing.T) {
	cpu, cs := "sys/fs/cgroup/cpu/machine/", "sys/fs/cgroup/cpuset/machine/"
	web, prod, other := "qemu-3-web.libvirt-qemu/", "qemu-4-myvmprod.libvirt-qemu/", "qemu-1-ct-other.libvirt-qemu/"
	root := cgTree(t, map[string]string{
		"sys/devices/system/cpu/online": "0-3\n",
		cpu + web + "tasks":             "", cpu + web + "vcpu0/tasks": "101\n", cpu + web + "emulator/tasks": "100\n102\n",
		cs + web + "cpuset.effective_cpus": "0-3\n", cs + web + "vcpu0/cpuset.effective_cpus": "2\n",
		cpu + prod + "tasks": "", cpu + prod + "vcpu0/tasks": "201\n", cpu + prod + "vcpu1/tasks": "202\n",
		cs + prod + "cpuset.effective_cpus": "0-3\n",
		cpu + other + "tasks":               "", cpu + other + "vcpu0/tasks": "301\n",
		cs + other + "cpuset.effective_cpus":      "0-3\n",
		"sys/fs/cgroup/cpu/crosstalk-lab/x/tasks": "401\n",
	})
	walk, err := NewCgroupDiscoverer(openCgroupHost(t, root), layoutHybrid, []string{"/crosstalk-lab/*"})
	if err != nil {
		t.Fatal(err)
	}
	lv := &fakeDomains{current: true, doms: []libvirt.Domain{
		domain(t, 3, "web", uuidWeb, 1, "2"),
		domain(t, 4, "my_vm (prod)", uuidProd, 2, ""), // unpinned: keeps the cgroup's CPUs
	}}
	d := &LibvirtDiscoverer{Inner: walk, Libvirt: lv, Host: walk.Host, Layout: layoutHybrid}
	got, err := d.Discover(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]Tenant{}
	for _, t := range got {
		byID[t.ID] = t
	}
	w := byID["/machine/qemu-3-web.libvirt-qemu"]
	// Its threads narrowed to its vCPU's (vcpu0: 101), without the emulator's.
	if w.Name != "web" || w.UUID != uuidWeb || w.VCPUs != 1 || w.CPUs.String() != "2" || fmt.Sprint(w.Threads) != "[101]" {
		t.Errorf("web = %+v", w)
	}
	p := byID["/machine/qemu-4-myvmprod.libvirt-qemu"]
	if p.Name != "my_vm (prod)" || p.UUID != uuidProd || p.VCPUs != 2 || p.CPUs.String() != "0-3" || fmt.Sprint(p.Threads) != "[201 202]" {
		t.Errorf("prod = %+v (its real name comes from libvirt; unpinned, it keeps its cgroup's CPUs)", p)
	}
	// Domain 1 of another libvirt daemon: the walk's view, no UUID.
	o := byID["/machine/qemu-1-ct-other.libvirt-qemu"]
	if o.Name != "ct-other" || o.UUID != "" || o.Kind != KindVM || fmt.Sprint(o.Threads) != "[301]" {
		t.Errorf("other daemon's VM = %+v", o)
	}
	if x := byID["/crosstalk-lab/x"]; x.UUID != "" || x.Name != "x" {
		t.Errorf("non-VM tenant changed: %+v", x)
	}
}

// staticDiscoverer returns fixed tenants.
type staticDiscoverer struct{ tenants []Tenant }

func (s *staticDiscoverer) Discover(context.Context) ([]Tenant, error) {
	out := make([]Tenant, len(s.tenants))
	copy(out, s.tenants)
	return out, nil
}

func TestLibvirtDiscovererMismatches(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	clock := time.Unix(1000, 0)
	inner := &staticDiscoverer{tenants: []Tenant{{ID: "/machine/qemu-3-web.libvirt-qemu", Kind: KindVM, Name: "web", Cgroup: "/machine/qemu-3-web.libvirt-qemu", CPUs: cpuset.MustParse("0-3")}}}
	lv := &fakeDomains{current: true, doms: []libvirt.Domain{domain(t, 3, "web", uuidWeb, 1, "1"), domain(t, 5, "later", uuidLater, 1, "0")}}
	d := &LibvirtDiscoverer{Inner: inner, Libvirt: lv, Log: log, Grace: 5 * time.Second, Now: func() time.Time { return clock }}

	// "later" runs but has no cgroup tenant yet: nothing reported within the grace.
	for range 3 {
		d.Discover(t.Context())
		clock = clock.Add(time.Second)
	}
	if strings.Contains(logs.String(), "finds no cgroup") {
		t.Fatalf("reported a domain inside its grace period:\n%s", logs.String())
	}
	for range 5 {
		d.Discover(t.Context())
		clock = clock.Add(time.Second)
	}
	if n := strings.Count(logs.String(), "finds no cgroup"); n != 1 {
		t.Fatalf("missing domain reported %d times, want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "expected_cgroup_name=qemu-5-later.libvirt-qemu") {
		t.Errorf("report does not say which cgroup was expected:\n%s", logs.String())
	}
	// Its cgroup shows up: it is enriched and the recovery logged.
	inner.tenants = append(inner.tenants, Tenant{ID: "/machine/qemu-5-later.libvirt-qemu", Kind: KindVM, Name: "later", Cgroup: "/machine/qemu-5-later.libvirt-qemu", CPUs: cpuset.MustParse("0-3")})
	got, _ := d.Discover(t.Context())
	if len(got) != 2 || got[1].UUID != uuidLater || got[1].CPUs.String() != "0" {
		t.Errorf("after its cgroup appeared: %+v", got)
	}
	if !strings.Contains(logs.String(), "now has a cgroup tenant") {
		t.Error("recovery not logged")
	}

	// libvirt unreachable: the stale list still names the VMs it knew (a
	// running domain keeps its ID and UUID), and nothing is reported missing.
	lv.current = false
	lv.doms = lv.doms[:1]
	logs.Reset()
	for range 20 {
		got, _ = d.Discover(t.Context())
		clock = clock.Add(time.Second)
	}
	if got[0].UUID != uuidWeb || got[1].UUID != "" || got[1].Name != "later" {
		t.Errorf("with a stale list: %+v", got)
	}
	if strings.Contains(logs.String(), "finds no cgroup") {
		t.Errorf("reported missing domains from a stale list:\n%s", logs.String())
	}
	if _, err := d.LibvirtHealth(); !errors.Is(err, ErrLibvirtStale) {
		t.Errorf("health with a stale list: %v, want ErrLibvirtStale", err)
	}
	lv.current = true
	d.Discover(t.Context())
	if _, err := d.LibvirtHealth(); err != nil {
		t.Errorf("health with the list current again: %v", err)
	}
}

// A domain whose XML did not parse is still named; its CPUs stay the cgroup's.
func TestLibvirtDiscovererWithoutConfig(t *testing.T) {
	inner := &staticDiscoverer{tenants: []Tenant{{ID: "/m/qemu-2-db.libvirt-qemu", Kind: KindVM, Name: "db", Cgroup: "/m/qemu-2-db.libvirt-qemu", CPUs: cpuset.MustParse("0-1")}}}
	lv := &fakeDomains{current: true, doms: []libvirt.Domain{{Name: "db", UUID: uuidProd, ID: 2, VCPUs: 2, ConfigErr: libvirt.ErrMalformedXML}}}
	got, err := (&LibvirtDiscoverer{Inner: inner, Libvirt: lv}).Discover(t.Context())
	if err != nil || got[0].UUID != uuidProd || got[0].CPUs.String() != "0-1" || got[0].VCPUs != 2 {
		t.Errorf("got %+v, %v", got, err)
	}
}
