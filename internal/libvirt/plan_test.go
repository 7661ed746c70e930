package libvirt

import (
	"context"
	"errors"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/plan"
)

// crosstalk plan --from-libvirt reads the running domains' live XML and
// vCPU affinity through PlanSource, plans them, and --apply pins them live
// through it: a real plan.Apply over the fake daemon.
func TestPlanSourceLoadsAndApplies(t *testing.T) {
	f := newFakeDaemon()
	f.start("db", 1, 2, "1")
	f.start("web", 2, 1, "0")
	c, _ := runClient(t, f)
	wait(t, c)
	src := PlanSource{Client: c}
	ctx := context.Background()
	doms, errs, err := plan.LoadDomains(ctx, src)
	if err != nil || len(errs) != 0 || len(doms) != 2 {
		t.Fatalf("LoadDomains: %v %v %d domains", err, errs, len(doms))
	}
	if doms[0].Name != "db" || doms[0].VCPUs != 2 || !doms[0].Pins[0].Equal(cpuset.Of(1)) || doms[0].Source != "qemu:///system" {
		t.Errorf("db as loaded: %+v", doms[0])
	}
	// Every vCPU and emulator moves to both CPUs: three vCPUs and two
	// emulators change, each through libvirt.
	p := &plan.Plan{VMs: []*plan.Placement{
		{VM: plan.VMSpec{Name: "db"}, Pins: []cpuset.Set{cpuset.Of(0, 1), cpuset.Of(0, 1)}, Emulator: cpuset.Of(0, 1)},
		{VM: plan.VMSpec{Name: "web"}, Pins: []cpuset.Set{cpuset.Of(0, 1)}, Emulator: cpuset.Of(0, 1)},
	}}
	applied, err := plan.Apply(ctx, src, p, doms, cpuset.Of(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 5 {
		t.Errorf("applied %d changes, want 5: %+v", len(applied), applied)
	}
	f.mu.Lock()
	pins := len(f.pins)
	f.mu.Unlock()
	if pins != 5 {
		t.Errorf("the daemon saw %d pin calls, want 5", pins)
	}
	// A domain that is not running cannot be pinned.
	if err := src.PinVCPU(ctx, "gone", 0, cpuset.Of(0)); !errors.Is(err, ErrDomainGone) {
		t.Errorf("pinning an unknown domain: %v", err)
	}
}
