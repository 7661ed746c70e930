package resctrlfs_test

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/resctrl"
	"github.com/crosstalk-project/crosstalk/internal/resctrl/resctrlfs"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// The production sensor, judge and actuator in a loop on the emulated SKX
// host, with a toy cache model standing in for the hardware: the abuser
// alone is isolated, the victims get cache back, nobody innocent gets a
// class, and RestoreAll leaves the tree as it found it. (The simulator's
// contention model is the real test of the policy; this one proves the
// pieces fit.)
func TestLoopOnEmulatedHost(t *testing.T) {
	src := filepath.Join("..", "..", "..", "testdata", "hosts", "intel-skx-2s")
	h, k, err := resctrlfs.OpenTree(filepath.Join(t.TempDir(), "skx"), src, resctrlfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	rootSchemata, _ := os.ReadFile(h.Path(resctrl.DefaultMount + "/schemata"))
	clk := time.Unix(0, 0)
	mon, err := sense.NewResctrlMonitor(h, func(string) bool { return false }, false, sense.ResctrlMonitorOptions{Now: func() time.Time { return clk }})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := act.OpenState(filepath.Join(t.TempDir(), "state.json"))
	classes := &act.ResctrlClasses{Host: h, Info: mon.Info(), State: st}
	bias := judge.NewBiasIsolation(judge.AlitaBias())

	const llc, ways = 11 << 20, 11 // one SKX socket: 11 MB, 11 ways, 16 CPUs
	tenants := []sense.Tenant{
		{ID: "/attacker", Name: "attacker", Threads: []int{100, 101}},
		{ID: "/victim1", Name: "victim1", Threads: []int{200}},
		{ID: "/victim2", Name: "victim2", Threads: []int{300}},
	}
	demand := map[string]float64{"/attacker": 30 << 20, "/victim1": 3 << 20, "/victim2": 3 << 20}
	byThread := map[int]string{100: "/attacker", 101: "/attacker", 200: "/victim1", 300: "/victim2"}

	// occupancy shares domain 0 by demand; a tenant in a class gets at
	// most its mask's part of the cache.
	occupancy := func() map[string]float64 {
		occ := map[string]float64{}
		left, free := float64(llc), map[string]float64{}
		for id, d := range demand {
			ti, _ := k.Task(tenantThread(tenants, id))
			m, _ := k.Value(ti.CLOSID, "L3", 0)
			if w := resctrl.Ways(m); w < ways {
				occ[id] = math.Min(d, llc*float64(w)/ways)
				left -= occ[id]
				continue
			}
			free[id] = d
		}
		var sum float64
		for _, d := range free {
			sum += d
		}
		for id, d := range free {
			occ[id] = math.Min(d, left*d/sum)
		}
		return occ
	}
	var firstVictim, lastVictim float64
	classed := map[string]bool{}
	for i := 0; i < 60; i++ {
		clk = clk.Add(5 * time.Second)
		if err := mon.Sync(t.Context(), tenants); err != nil {
			t.Fatalf("interval %d sync: %v", i, err)
		}
		occ := occupancy()
		// The hardware tags lines with the RMID of the thread's group.
		perRMID := map[int]float64{}
		for tid, id := range byThread {
			ti, _ := k.Task(tid)
			perRMID[ti.RMID] += occ[id] / float64(countThreads(byThread, id))
		}
		var samples []resctrlfs.Sample
		for r, o := range perRMID {
			samples = append(samples, resctrlfs.Sample{RMID: r, Domain: 0, OccupancyBytes: uint64(o)})
		}
		if err := k.Account(samples...); err != nil {
			t.Fatal(err)
		}
		usage, err := mon.Read(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		dom := judge.BiasDomain{ID: 0, SizeBytes: llc, Ways: ways, CPUs: 16}
		for _, tn := range tenants {
			d, _ := usage[tn.ID].Domain(0)
			dom.Tenants = append(dom.Tenants, judge.BiasTenant{ID: tn.ID, CPUs: 4, OccupancyBytes: d.OccupancyBytes})
		}
		res := bias.Step(judge.BiasInput{Now: clk, Domains: []judge.BiasDomain{dom}})
		for _, a := range res.Actions {
			tn := tenantByID(tenants, a.Tenant)
			if a.Release {
				err = classes.ReleaseCache(a.Tenant, a.Domain)
			} else {
				err = classes.SetCacheWays(act.ClassTenant{ID: tn.ID, Name: tn.Name, Threads: tn.Threads}, a.Domain, a.Ways, a.Slot)
				classed[a.Tenant] = true
			}
			if err != nil {
				t.Fatalf("interval %d %+v: %v", i, a, err)
			}
		}
		if i == 0 {
			firstVictim = occ["/victim1"]
		}
		lastVictim = occ["/victim1"]
	}
	if len(classed) != 1 || !classed["/attacker"] {
		t.Errorf("classed %v, want the attacker alone", classed)
	}
	if lastVictim < 2*firstVictim {
		t.Errorf("victim occupancy %.1f MB at the end vs %.1f MB at the start: isolation did not give cache back", lastVictim/(1<<20), firstVictim/(1<<20))
	}
	t.Logf("victim1 occupancy %.2f MB unprotected, %.2f MB at the end; isolated: %+v", firstVictim/(1<<20), lastVictim/(1<<20), bias.Isolated())
	if _, err := classes.RestoreAll(); err != nil {
		t.Fatal(err)
	}
	mon.Close()
	if b, _ := os.ReadFile(h.Path(resctrl.DefaultMount + "/schemata")); string(b) != string(rootSchemata) {
		t.Errorf("default group's schemata changed: %q", b)
	}
	if groups := k.Groups(); len(groups) != 2 {
		t.Errorf("groups left: %v", groups)
	}
}

func tenantThread(ts []sense.Tenant, id string) int { return tenantByID(ts, id).Threads[0] }

func tenantByID(ts []sense.Tenant, id string) sense.Tenant {
	for _, t := range ts {
		if t.ID == id {
			return t
		}
	}
	return sense.Tenant{}
}

func countThreads(m map[int]string, id string) int {
	n := 0
	for _, v := range m {
		if v == id {
			n++
		}
	}
	return n
}
