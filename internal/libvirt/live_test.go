package libvirt

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

// TestLive talks to a real libvirtd: CT_LIBVIRT_SOCKET names its socket and
// CT_LIBVIRT_DOMAIN a running domain it may retune (the e2e script sets
// both). It reads everything the client reads and round-trips the live
// scheduler parameters and pinning, restoring them.
func TestLive(t *testing.T) {
	sock, name := os.Getenv("CT_LIBVIRT_SOCKET"), os.Getenv("CT_LIBVIRT_DOMAIN")
	if sock == "" || name == "" {
		t.Skip("live libvirt test: set CT_LIBVIRT_SOCKET and CT_LIBVIRT_DOMAIN (e2e/libvirt/run.sh does)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := New(Options{Socket: sock, Log: testLogger(t)})
	go c.Run(ctx)
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	doms, current := c.Domains()
	if !current {
		t.Fatal("connected but the domain list is not current")
	}
	var d Domain
	for _, x := range doms {
		if x.Name == name {
			d = x
		}
	}
	if d.UUID == "" {
		t.Fatalf("domain %s not listed: %+v", name, doms)
	}
	if d.Config == nil {
		t.Fatalf("domain %s: no config: %v", name, d.ConfigErr)
	}
	pinned, all := d.Config.PinnedCPUs()
	t.Logf("domain %s id %d uuid %s state %s vcpus %d pinned %s (all %v)", d.Name, d.ID, d.UUID, d.State, d.VCPUs, pinned, all)

	h, err := host.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	layout, err := cgroup.Detect(h)
	if err != nil {
		t.Fatal(err)
	}
	vcpus, err := c.VCPUs(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	domCgroup := "/machine/" + MachineName("qemu", d.ID, d.Name) + ".libvirt-qemu"
	if err := VCPUThreads(h, layout, domCgroup, vcpus); err != nil {
		t.Fatal(err)
	}
	for _, v := range vcpus {
		t.Logf("vcpu %d: %s on CPU %d, affinity %s, cgroup %s, threads %v", v.Index, v.State, v.HostCPU, v.Affinity, v.Cgroup, v.Threads)
		if len(v.Threads) == 0 {
			t.Errorf("vcpu %d: no thread found in %s", v.Index, domCgroup)
		}
	}
	if got, ok := c.DomainByCgroup(domCgroup); !ok || got.UUID != d.UUID {
		t.Errorf("DomainByCgroup(%s) = %v, %v", domCgroup, got.Name, ok)
	}
	st, err := c.Stats(ctx, d)
	if err != nil || len(st) != 1 {
		t.Fatalf("stats: %v %v", st, err)
	}
	t.Logf("stats: cpu.time %s vcpus %+v", st[0].CPUTime, st[0].VCPUs)
	if st[0].CPUTime <= 0 || len(st[0].VCPUs) == 0 || !st[0].VCPUs[0].HasDelay {
		t.Errorf("stats lack cpu.time or vcpu.0.delay: %+v", st[0])
	}

	orig, err := c.SchedParams(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("scheduler parameters: %s", orig)
	if orig.GlobalQuota == nil || orig.GlobalPeriod == nil || orig.VCPUQuota == nil {
		t.Fatalf("scheduler parameters lack global/vcpu quota: %s", orig)
	}
	want := SchedParams{GlobalPeriod: Ptr[uint64](16000), GlobalQuota: Ptr[int64](2000)}
	if err := c.SetSchedParams(ctx, d, want); err != nil {
		t.Fatal(err)
	}
	got, err := c.SchedParams(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	restore := SchedParams{GlobalPeriod: orig.GlobalPeriod, GlobalQuota: orig.GlobalQuota}
	if err := c.SetSchedParams(ctx, d, restore); err != nil {
		t.Fatal(err)
	}
	if *got.GlobalQuota != 2000 || *got.GlobalPeriod != 16000 {
		t.Errorf("after set: %s", got)
	}
	q, err := cgroup.Open(h, layout, domCgroup).CPUQuota()
	if err != nil || q.Quota != -1 && orig.GlobalQuota != nil && *orig.GlobalQuota <= 0 {
		t.Errorf("domain cgroup quota after restore: %v %v", q, err)
	}

	if len(vcpus) > 0 && !vcpus[0].Affinity.IsEmpty() {
		before := vcpus[0].Affinity
		one := cpuset.Of(before.First())
		if err := c.PinVCPU(ctx, d, 0, one); err != nil {
			t.Fatal(err)
		}
		after, err := c.VCPUs(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		if !after[0].Affinity.Equal(one) {
			t.Errorf("vcpu 0 affinity after pinning to %s: %s", one, after[0].Affinity)
		}
		if err := c.PinVCPU(ctx, d, 0, before); err != nil {
			t.Fatal(err)
		}
		if d.Config.EmulatorPin.Len() > 0 {
			if err := c.PinEmulator(ctx, d, d.Config.EmulatorPin); err != nil {
				t.Fatal(err)
			}
		}
	}
}
