package sim

// The contract between the simulated host and the hardware
// components: each production sensor and actuator, driven directly (no
// agent), reads what the model computed and moves the model the way the
// hardware would. The agent's wiring relies on exactly these paths.

import (
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/pmu"
	"github.com/crosstalk-project/crosstalk/internal/resctrl"
	"github.com/crosstalk-project/crosstalk/internal/sense"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

// compHost is a scenario's simulated host driven by a test.
type compHost struct {
	t   *testing.T
	s   *simHost
	dir string
	id  topology.Identity
	// tenants are the discovered tenants, by scenario name.
	tenants map[string]sense.Tenant
}

// newCompHost builds the host of a scenario (noise off) and runs it to at.
func newCompHost(t *testing.T, sc *Scenario, at time.Duration) *compHost {
	t.Helper()
	sc.Noise = 0
	dir := simTestDir(t)
	s, err := newSimHost(sc, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	c := &compHost{t: t, s: s, dir: dir}
	b, err := s.h.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Fatal(err)
	}
	if c.id, err = topology.IdentityFromCPUInfo(string(b)); err != nil {
		t.Fatal(err)
	}
	c.run(at)
	return c
}

// simTestDir is a test's directory for a host tree: in memory where there
// is /dev/shm, as the simulator's runs (a tree is thousands of files).
func simTestDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp(tempDir(""), "crosstalk-sim-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func loadScenario(t *testing.T, name string) *Scenario {
	t.Helper()
	sc, err := Load(name)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// run advances the host by d and writes the sensor files, as the
// simulator does before each agent interval.
func (c *compHost) run(d time.Duration) {
	c.t.Helper()
	for end := c.s.now + d; c.s.now < end; c.s.now += c.s.sc.Step {
		if err := c.s.step(c.s.sc.Step); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := c.s.publish(); err != nil {
		c.t.Fatal(err)
	}
	c.discover()
}

func (c *compHost) now() time.Time { return Epoch.Add(c.s.now) }

// discover finds the tenants with the agent's own discovery.
func (c *compHost) discover() {
	c.t.Helper()
	l, err := cgroup.Detect(c.s.h)
	if err != nil {
		c.t.Fatal(err)
	}
	d, err := sense.NewCgroupDiscoverer(c.s.h, l, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	ts, err := d.Discover(c.t.Context())
	if err != nil {
		c.t.Fatal(err)
	}
	byPath := map[string]string{}
	for i, t := range c.s.tenants {
		if c.s.present[i] {
			byPath[t.cgroupPath()] = t.Name
		}
	}
	c.tenants = map[string]sense.Tenant{}
	for _, st := range ts {
		if n, ok := byPath[st.ID]; ok {
			c.tenants[n] = st
		}
	}
}

func (c *compHost) tenant(name string) sense.Tenant {
	c.t.Helper()
	t, ok := c.tenants[name]
	if !ok {
		c.t.Fatalf("tenant %s not discovered", name)
	}
	return t
}

func (c *compHost) list(names ...string) []sense.Tenant {
	var out []sense.Tenant
	for _, n := range names {
		out = append(out, c.tenant(n))
	}
	return out
}

func (c *compHost) index(name string) int {
	for i, t := range c.s.tenants {
		if t.Name == name {
			return i
		}
	}
	c.t.Fatalf("no tenant %s", name)
	return -1
}

// state is a tenant's modelled state now.
func (c *compHost) state(name string) TenantState { return c.s.state.Tenants[c.index(name)] }

func (c *compHost) classTenant(name string) act.ClassTenant {
	t := c.tenant(name)
	return act.ClassTenant{ID: t.ID, Name: t.Name, Threads: t.Threads}
}

func (c *compHost) stateFile() *act.StateFile {
	c.t.Helper()
	d, err := os.MkdirTemp(c.dir, "state-")
	if err != nil {
		c.t.Fatal(err)
	}
	st, err := act.OpenState(filepath.Join(d, "state.json"))
	if err != nil {
		c.t.Fatal(err)
	}
	return st
}

func (c *compHost) topology() *topology.Topology {
	c.t.Helper()
	topo, err := topology.Read(c.s.h)
	if err != nil {
		c.t.Fatal(err)
	}
	return topo
}

func within(got, want, rel float64) bool {
	if want == 0 {
		return got == 0
	}
	return math.Abs(got-want)/math.Abs(want) <= rel
}

// sense.ResctrlMonitor on the simulated host: a monitoring group per
// tenant, and Read returns the occupancy and memory bandwidth the model
// computed for each.
func TestResctrlMonitorReadsTheModel(t *testing.T) {
	c := newCompHost(t, loadScenario(t, "alita-llc"), 8*time.Second)
	mon, err := sense.NewResctrlMonitor(c.s.h, c.id.HasFlag, c.id.IsAMD(), sense.ResctrlMonitorOptions{Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	names := []string{"victim", "attacker1", "attacker2", "bystander"}
	if err := mon.Sync(t.Context(), c.list(names...)); err != nil {
		t.Fatal(err)
	}
	if u := mon.Unmonitored(); len(u) > 0 {
		t.Fatalf("unmonitored: %+v", u)
	}
	if _, err := mon.Read(t.Context()); err != nil { // primes the bandwidth counters
		t.Fatal(err)
	}
	c.run(2 * time.Second)
	usage, err := mon.Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		ts := c.state(n)
		u := usage[c.tenant(n).ID]
		for d := 0; d < c.s.m.Sockets; d++ {
			du, ok := u.Domain(d)
			if !ok || !du.OccupancyOK || !du.BandwidthOK {
				t.Fatalf("%s domain %d: %+v (ok %v)", n, d, du, ok)
			}
			occ, bw := float64(du.OccupancyBytes), du.TotalBytesPerSec
			if occ > ts.Occupancy[d] || occ < ts.Occupancy[d]-occupancyUnit {
				t.Errorf("%s domain %d: occupancy %.0f, model %.0f", n, d, occ, ts.Occupancy[d])
			}
			if !within(bw, ts.Traffic[d], 0.01) || du.LocalBytesPerSec != bw {
				t.Errorf("%s domain %d: bandwidth %.4g (local %.4g) B/s, model %.4g", n, d, bw, du.LocalBytesPerSec, ts.Traffic[d])
			}
		}
		t.Logf("%s: occupancy %.1f MiB on socket 0, %.2f GB/s", n, ts.Occupancy[0]/(1<<20), ts.Traffic[0]/1e9)
	}
	// The streams evict the victim: it holds less than its 10 MiB.
	if v := c.state("victim").Occupancy[0]; v > 9<<20 {
		t.Errorf("victim occupies %.1f MiB of a polluted L3", v/(1<<20))
	}
}

// act.ResctrlClasses on the simulated host: isolating the abusers in a few
// ways at one end of the L3 changes the model's LLC split (their occupancy
// falls to their ways, the victim's rises) and the victim runs faster;
// the monitor follows the abusers into their class; releasing undoes it.
func TestCacheClassesMoveTheModel(t *testing.T) {
	c := newCompHost(t, loadScenario(t, "alita-llc"), 10*time.Second)
	info, err := resctrl.Open(c.s.h, c.id.HasFlag, c.id.IsAMD())
	if err != nil {
		t.Fatal(err)
	}
	mon, err := sense.NewResctrlMonitor(c.s.h, c.id.HasFlag, c.id.IsAMD(), sense.ResctrlMonitorOptions{Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	names := []string{"victim", "attacker1", "attacker2", "bystander"}
	if err := mon.Sync(t.Context(), c.list(names...)); err != nil {
		t.Fatal(err)
	}
	c.run(time.Second)
	before := c.state("victim")
	attBefore := c.state("attacker1")

	classes := &act.ResctrlClasses{Host: c.s.h, Info: info, State: c.stateFile(), Now: c.now}
	// Alita: ceil(11 ways × 4 CPUs / 48 CPUs) + 1 = 2 ways each, both at
	// slot 0 (they share them).
	for _, n := range []string{"attacker1", "attacker2"} {
		if err := classes.SetCacheWays(c.classTenant(n), 0, 2, 0); err != nil {
			t.Fatal(err)
		}
	}
	c.run(time.Second)
	if err := mon.Sync(t.Context(), c.list(names...)); err != nil {
		t.Fatal(err)
	}
	if _, err := mon.Read(t.Context()); err != nil {
		t.Fatal(err)
	}
	c.run(time.Second)
	usage, err := mon.Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	full := uint64(1)<<uint(c.s.m.L3Ways) - 1
	for _, n := range []string{"attacker1", "attacker2"} {
		i := c.index(n)
		if m := c.s.levers.Mask[i][0]; bits.OnesCount64(m) != 2 || (m != 3 && m != full&^(full>>2)) {
			t.Errorf("%s mask on socket 0 %#x, want 2 ways at one end", n, m)
		}
		twoWays := 2 * float64(c.s.m.L3Size) / float64(c.s.m.L3Ways)
		if o := c.state(n).Occupancy[0]; o > twoWays*1.001 {
			t.Errorf("%s occupies %.1f MiB, more than its 2 ways (%.1f MiB)", n, o/(1<<20), twoWays/(1<<20))
		}
		d, _ := usage[c.tenant(n).ID].Domain(0)
		if got, want := float64(d.OccupancyBytes), c.state(n).Occupancy[0]; got > want || got < want-occupancyUnit {
			t.Errorf("monitor: %s occupancy %.0f in its class, model %.0f", n, got, want)
		}
	}
	if m := c.s.levers.Mask[c.index("victim")][0]; m != full {
		t.Errorf("victim's mask %#x: an innocent was restricted", m)
	}
	after := c.state("victim")
	t.Logf("victim: hit %.3f → %.3f, occupancy %.1f → %.1f MiB, slowdown %.2f× → %.2f×; attacker1 occupancy %.1f → %.1f MiB",
		before.Hit, after.Hit, before.Occupancy[0]/(1<<20), after.Occupancy[0]/(1<<20),
		before.Solo/before.Progress, after.Solo/after.Progress, attBefore.Occupancy[0]/(1<<20), c.state("attacker1").Occupancy[0]/(1<<20))
	if after.Hit <= before.Hit+0.05 || after.Occupancy[0] <= before.Occupancy[0] {
		t.Errorf("victim's hit ratio %.3f → %.3f, occupancy %.0f → %.0f: isolation gave it no cache", before.Hit, after.Hit, before.Occupancy[0], after.Occupancy[0])
	}
	if after.Progress/after.Solo <= before.Progress/before.Solo*1.05 {
		t.Errorf("victim's speed %.3f → %.3f of solo: isolation did not help it", before.Progress/before.Solo, after.Progress/after.Solo)
	}
	// Releasing gives everything back.
	for _, n := range []string{"attacker1", "attacker2"} {
		if err := classes.Release(c.tenant(n).ID); err != nil {
			t.Fatal(err)
		}
	}
	c.run(time.Second)
	for i := range c.s.tenants {
		if c.s.leverOn(i) {
			t.Errorf("%s still restricted after release", c.s.tenants[i].Name)
		}
	}
	if v := c.state("victim"); !within(v.Hit, before.Hit, 0.01) {
		t.Errorf("victim's hit ratio %.3f after release, %.3f before isolation", v.Hit, before.Hit)
	}
}

// act.ResctrlClasses.SetBandwidth on the simulated host: Intel's
// percentage and AMD's absolute 1/8 GB/s both cap the streamer's DRAM
// traffic in the model, and the memory-bound victim runs faster.
func TestMBALowersTheStreamersBandwidth(t *testing.T) {
	amd := mustParse(t, strings.Replace(scenarioText(t, "alita-membw"), "cpu: skylakex", "cpu: zen3", 1))
	for _, tc := range []struct {
		name     string
		sc       *Scenario
		fraction float64
		units    string
	}{
		{"intel percent", loadScenario(t, "alita-membw"), 0.3, "percent"},
		{"amd 1/8 GB/s", amd, 0.25, "1/8GBps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCompHost(t, tc.sc, 12*time.Second)
			info, err := resctrl.Open(c.s.h, c.id.HasFlag, c.id.IsAMD())
			if err != nil {
				t.Fatal(err)
			}
			if info.MB == nil || info.MB.Units != tc.units {
				t.Fatalf("MBA info %+v, want units %s", info.MB, tc.units)
			}
			before, victim := c.state("streamer"), c.state("victim")
			classes := &act.ResctrlClasses{Host: c.s.h, Info: info, State: c.stateFile(), Now: c.now}
			ref := before.Traffic[0]
			if err := classes.SetBandwidth(c.classTenant("streamer"), 0, tc.fraction, ref); err != nil {
				t.Fatal(err)
			}
			c.run(time.Second)
			after := c.state("streamer")
			i := c.index("streamer")
			var limit float64
			if tc.units == "percent" {
				limit = c.s.levers.MBA[i][0] / 100 * coreBandwidth * float64(len(c.s.tenants[i].VCPUs))
			} else {
				limit = c.s.levers.MBA[i][0] * amdMBAUnit
			}
			t.Logf("MB value %g: streamer %.1f → %.1f GB/s (limit %.1f GB/s); victim speed %.3f → %.3f of solo",
				c.s.levers.MBA[i][0], before.Traffic[0]/1e9, after.Traffic[0]/1e9, limit/1e9, victim.Progress/victim.Solo, c.state("victim").Progress/c.state("victim").Solo)
			if c.s.levers.MBA[i][0] <= 0 || after.Traffic[0] > limit*1.001 || after.Traffic[0] > before.Traffic[0]/2 {
				t.Errorf("streamer's bandwidth %.3g → %.3g B/s under MB %g (limit %.3g)", before.Traffic[0], after.Traffic[0], c.s.levers.MBA[i][0], limit)
			}
			if v := c.state("victim"); v.Progress/v.Solo <= victim.Progress/victim.Solo*1.02 {
				t.Errorf("victim's speed %.3f → %.3f of solo under the streamer's MBA", victim.Progress/victim.Solo, v.Progress/v.Solo)
			}
			if vi := c.index("victim"); c.s.levers.MBA[vi][0] != 0 && c.s.levers.MBA[vi][0] != 100 {
				t.Errorf("victim got MB %g", c.s.levers.MBA[vi][0])
			}
			if err := classes.ReleaseBandwidth(c.tenant("streamer").ID, 0); err != nil {
				t.Fatal(err)
			}
			c.run(time.Second)
			if c.s.leverOn(i) || !within(c.state("streamer").Traffic[0], before.Traffic[0], 0.01) {
				t.Errorf("after release: lever on %v, bandwidth %.3g (before %.3g)", c.s.leverOn(i), c.state("streamer").Traffic[0], before.Traffic[0])
			}
		})
	}
}

func scenarioText(t *testing.T, name string) string {
	t.Helper()
	b, err := builtinFS.ReadFile("scenarios/" + name + ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// powerInputs are the tenants as power attribution takes them, with the
// model's CPU use (the agent takes it from cgroup usage).
func (c *compHost) powerInputs(names ...string) []sense.PowerTenantInput {
	var out []sense.PowerTenantInput
	for _, n := range names {
		tn := c.tenant(n)
		out = append(out, sense.PowerTenantInput{ID: tn.ID, CPUs: tn.CPUs, Usage: c.state(n).Alloc})
	}
	return out
}

// sense.PowerSensor on the simulated host: RAPL watts per package are the
// model's socket power, /proc/stat's busy time is the model's, coretemp
// gives per-core temperatures, and the virus is attributed most of its
// socket.
func TestPowerSensorReadsTheModel(t *testing.T) {
	c := newCompHost(t, loadScenario(t, "alita-power"), 15*time.Second)
	ps, err := sense.NewPowerSensor(c.s.h, c.topology())
	if err != nil {
		t.Fatal(err)
	}
	if ps.Temps == nil || ps.Temps.Source() != "coretemp" {
		t.Fatalf("temperatures: %v (%s)", ps.Temps, ps.TempsWhy)
	}
	names := []string{"victim", "virus", "bystander"}
	if _, ok, err := ps.Read(t.Context(), c.now(), c.powerInputs(names...)); ok || err != nil {
		t.Fatalf("first read primes: ok %v err %v", ok, err)
	}
	// Two intervals: the idle reference temperature is learned in the first.
	var r sense.PowerReading
	for range 2 {
		c.run(2 * time.Second)
		var ok bool
		if r, ok, err = ps.Read(t.Context(), c.now(), c.powerInputs(names...)); !ok || err != nil {
			t.Fatalf("read: ok %v err %v", ok, err)
		}
	}
	host := c.s.state.Host
	for _, p := range r.Packages {
		if !within(p.Watts, host.SocketPower[p.Package], 0.01) {
			t.Errorf("package %d: %.1f W, model %.1f W", p.Package, p.Watts, host.SocketPower[p.Package])
		}
	}
	for cpu, b := range r.CPUBusy {
		if math.Abs(b-host.CPUBusy[cpu]) > 0.01 {
			t.Errorf("cpu %d busy %.3f, model %.3f", cpu, b, host.CPUBusy[cpu])
		}
	}
	if len(r.CPUBusy) != c.s.m.CPUs() {
		t.Errorf("busy for %d CPUs of %d", len(r.CPUBusy), c.s.m.CPUs())
	}
	p0 := r.Packages[0]
	if !p0.PerCoreTemps || !p0.TempWeighted {
		t.Errorf("package 0: per-core temps %v, weighted %v (%s)", p0.PerCoreTemps, p0.TempWeighted, p0.TempReason)
	}
	w := map[string]float64{}
	var sum float64
	for _, tp := range r.Tenants {
		if tp.Package == 0 {
			w[tp.ID] = tp.Watts
			sum += tp.Watts
		}
	}
	virus, victim := w[c.tenant("virus").ID], w[c.tenant("victim").ID]
	t.Logf("package 0 %.1f W (model %.1f W, TDP %g W): virus %.1f W, victim %.1f W, unattributed %.1f W", p0.Watts, host.SocketPower[0], float64(c.s.m.TDP), virus, victim, p0.Unattributed)
	if virus < 0.9*p0.Watts || victim <= 0 || victim > virus/20 || sum > p0.Watts*1.0001 {
		t.Errorf("attribution: virus %.1f W, victim %.1f W, sum %.1f W of %.1f W", virus, victim, sum, p0.Watts)
	}
	if p0.Watts < float64(c.s.m.TDP)*0.99 {
		t.Errorf("the virus should hold socket 0 at its %g W limit: %.1f W", float64(c.s.m.TDP), p0.Watts)
	}
}

// On an AMD host the sensor reads k10temp per socket and says why it
// cannot weigh tenants by temperature.
func TestPowerSensorOnAMD(t *testing.T) {
	c := newCompHost(t, mustParse(t, `
name: amdpower
machine: {cpu: zen4, sockets: 2, cores_per_socket: 8, threads_per_core: 2, max_mhz: 3500, min_mhz: 1500, tdp: 120W, idle_power: 30W}
tenants:
  - {name: hot, kind: vm, role: polluter, cpus: "0-7,16-23", phases: [{from: 0s, power: 200W}]}
  - {name: cool, kind: vm, role: victim, cpus: "8", phases: [{from: 0s, power: 3W}]}
`), 5*time.Second)
	ps, err := sense.NewPowerSensor(c.s.h, c.topology())
	if err != nil {
		t.Fatal(err)
	}
	if ps.Temps == nil || ps.Temps.Source() != "k10temp" {
		t.Fatalf("temperatures: %v (%s)", ps.Temps, ps.TempsWhy)
	}
	ps.Read(t.Context(), c.now(), c.powerInputs("hot", "cool"))
	c.run(2 * time.Second)
	r, ok, err := ps.Read(t.Context(), c.now(), c.powerInputs("hot", "cool"))
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	if !within(r.Packages[0].Watts, c.s.state.Host.SocketPower[0], 0.01) || r.Packages[0].PerCoreTemps || r.Packages[0].TempReason == "" {
		t.Errorf("package 0: %+v (model %.1f W)", r.Packages[0], c.s.state.Host.SocketPower[0])
	}
	if temp, ok := r.Temps.Package[0]; !ok || temp < ambientC+5 {
		t.Errorf("socket 0 temperature %v (%v): a socket at its power limit should be hot", temp, ok)
	}
}

// The power virus, its CPUs and the CPU set it occupies whole cores of.
func (c *compHost) virus() (sense.Tenant, cpuset.Set) {
	v := c.tenant("virus")
	return v, v.CPUs
}

// act.ClockModulation on the simulated host: the duty written to MSR
// 0x19A of the virus's CPUs slows it, takes its socket under the power
// limit and lets the victim's core run at full frequency; restoring puts
// the register and the model back.
func TestClockModulationMovesTheModel(t *testing.T) {
	c := newCompHost(t, loadScenario(t, "alita-power"), 15*time.Second)
	topo := c.topology()
	// A simulated root is not this machine: CPUID cannot say whether the
	// simulated CPU has ECMD, so the agent needs it configured.
	if _, err := act.ClockModSupport(c.s.h, c.id, act.ClockModConfig{}); err != nil && !strings.Contains(err.Error(), "extended_duty") {
		t.Errorf("without levers.clock_modulation.extended_duty: %v", err)
	}
	ext := c.s.m.ExtendedClockModulation()
	cm, err := act.NewClockModulation(c.s.h, c.stateFile(), topo, c.id, act.ClockModConfig{ExtendedDuty: &ext}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cm.Steps() != 16 {
		t.Fatalf("Xeon 8163 with ECMD: %d duty steps", cm.Steps())
	}
	virus, cpus := c.virus()
	before, victim := c.state("virus"), c.state("victim")
	powerBefore := c.s.state.Host.SocketPower[0]
	if err := cm.Apply(t.Context(), virus.ID, cpus, 4); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(c.s.h.Path("/dev/cpu/0/msr"))
	if err != nil {
		t.Fatal(err)
	}
	if got := b[MSRClockModulation : MSRClockModulation+8]; string(got) != "\x14\x00\x00\x00\x00\x00\x00\x00" {
		t.Errorf("MSR 0x19a of cpu 0 = % x, want 14 00 … (enable, duty 4/16)", got)
	}
	c.run(time.Second)
	after, victimAfter := c.state("virus"), c.state("victim")
	for _, cpu := range cpus.List() {
		if c.s.levers.Duty[cpu] != 0.25 {
			t.Fatalf("cpu %d duty %g, want 0.25", cpu, c.s.levers.Duty[cpu])
		}
	}
	if c.s.levers.Duty[22] != 1 {
		t.Errorf("the victim's cpu 22 modulated: duty %g", c.s.levers.Duty[22])
	}
	t.Logf("virus speed %.3f → %.3f of solo; socket 0 %.1f → %.1f W; victim %.0f → %.0f MHz, speed %.3f → %.3f",
		before.Progress/before.Solo, after.Progress/after.Solo, powerBefore, c.s.state.Host.SocketPower[0], victim.MHz, victimAfter.MHz,
		victim.Progress/victim.Solo, victimAfter.Progress/victimAfter.Solo)
	if after.Progress >= before.Progress || c.s.state.Host.SocketPower[0] >= powerBefore*0.9 || victimAfter.MHz <= victim.MHz ||
		victimAfter.MHz != float64(c.s.m.MaxMHz) || victimAfter.Progress <= victim.Progress {
		t.Error("clock modulation of the virus did not move the model as the hardware would")
	}
	if err := cm.RestoreTenant(virus.ID); err != nil {
		t.Fatal(err)
	}
	c.run(time.Second)
	if v, err := act.ReadMSR(c.s.h, 0, act.MSRClockModulation); err != nil || v != 0 {
		t.Errorf("restored MSR %#x, %v", v, err)
	}
	if c.s.levers.Duty[0] != 1 || !within(c.s.state.Host.SocketPower[0], powerBefore, 0.01) {
		t.Errorf("after restore: duty %g, socket %.1f W (before %.1f W)", c.s.levers.Duty[0], c.s.state.Host.SocketPower[0], powerBefore)
	}
}

// act.CPUFreq on the simulated host: scaling_max_freq on the virus's
// policies lowers its frequency and power and raises the victim's; the
// kernel's cpufreq rules apply to the writes.
func TestCPUFreqMovesTheModel(t *testing.T) {
	c := newCompHost(t, loadScenario(t, "alita-power"), 15*time.Second)
	cf, err := act.NewCPUFreq(c.s.h, c.stateFile(), c.topology(), act.CPUFreqConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	virus, cpus := c.virus()
	before, victim := c.state("virus"), c.state("victim")
	powerBefore := c.s.state.Host.SocketPower[0]
	if err := cf.Apply(t.Context(), virus.ID, cpus, 4); err != nil {
		t.Fatal(err)
	}
	if got := readTree(t, c.s.root, "sys/devices/system/cpu/cpufreq/policy0/scaling_max_freq"); got != "1400000\n" {
		t.Errorf("policy0 scaling_max_freq %q, want step 4 of 16 from 1.0 to 3.1 GHz: 1400000", got)
	}
	c.run(time.Second)
	after, victimAfter := c.state("virus"), c.state("victim")
	if c.s.levers.MaxMHz[0] != 1400 || c.s.levers.MaxMHz[22] != float64(c.s.m.MaxMHz) {
		t.Errorf("levers: cpu 0 %g MHz, victim's cpu 22 %g MHz", c.s.levers.MaxMHz[0], c.s.levers.MaxMHz[22])
	}
	t.Logf("virus %.0f → %.0f MHz, speed %.3f → %.3f; socket 0 %.1f → %.1f W; victim %.0f → %.0f MHz",
		before.MHz, after.MHz, before.Progress/before.Solo, after.Progress/after.Solo, powerBefore, c.s.state.Host.SocketPower[0], victim.MHz, victimAfter.MHz)
	if after.MHz != 1400 || after.Progress >= before.Progress || c.s.state.Host.SocketPower[0] >= powerBefore*0.8 ||
		victimAfter.MHz != float64(c.s.m.MaxMHz) || victimAfter.Progress <= victim.Progress {
		t.Error("a frequency cap on the virus did not move the model as the hardware would")
	}
	// The kernel's rules: not a number is EINVAL, a limit is clamped to
	// the hardware's range, and max wins over a higher min.
	pol := "/sys/devices/system/cpu/cpufreq/policy30/"
	for _, w := range []struct{ file, data, max, min string }{
		{"scaling_max_freq", "99999999", "3100000\n", "1000000\n"},
		{"scaling_max_freq", "10", "1000000\n", "1000000\n"},
		{"scaling_max_freq", "2000000\n", "2000000\n", "1000000\n"},
		{"scaling_min_freq", "2500000", "2000000\n", "2000000\n"},
		{"scaling_max_freq", "3100000", "3100000\n", "2500000\n"},
	} {
		if err := c.s.h.WriteFile(pol+w.file, []byte(w.data)); err != nil {
			t.Fatalf("%s %q: %v", w.file, w.data, err)
		}
		if mx, mn := readTree(t, c.s.root, pol[1:]+"scaling_max_freq"), readTree(t, c.s.root, pol[1:]+"scaling_min_freq"); mx != w.max || mn != w.min {
			t.Errorf("after %s=%s: max %q min %q, want %q %q", w.file, w.data, mx, mn, w.max, w.min)
		}
	}
	for _, bad := range []string{"abc", "", "-5"} {
		if err := c.s.h.WriteFile(pol+"scaling_max_freq", []byte(bad)); err == nil || !strings.Contains(err.Error(), "invalid argument") {
			t.Errorf("scaling_max_freq %q: %v, want EINVAL", bad, err)
		}
	}
	if err := c.s.h.WriteFile(pol+"cpuinfo_max_freq", []byte("1")); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("write to cpuinfo_max_freq: %v, want EACCES", err)
	}
	if err := cf.RestoreTenant(virus.ID); err != nil {
		t.Fatal(err)
	}
	c.run(time.Second)
	if c.s.levers.MaxMHz[0] != float64(c.s.m.MaxMHz) || !within(c.s.state.Host.SocketPower[0], powerBefore, 0.01) {
		t.Errorf("after restore: cpu 0 %g MHz, socket %.1f W (before %.1f W)", c.s.levers.MaxMHz[0], c.s.state.Host.SocketPower[0], powerBefore)
	}
}

// acpi-cpufreq (AMD) lists its P-states; the actuator snaps to them and
// the model runs the P-state the driver would.
func TestCPUFreqPStatesOnAMD(t *testing.T) {
	c := newCompHost(t, mustParse(t, `
name: amdfreq
machine: {cpu: zen3, sockets: 1, cores_per_socket: 8, threads_per_core: 2, max_mhz: 3500, min_mhz: 1500}
tenants:
  - {name: virus, kind: vm, role: polluter, cpus: "0-3,8-11", phases: [{from: 0s, power: 120W}]}
  - {name: victim, kind: vm, role: victim, cpus: "4"}
`), time.Second)
	if got := readTree(t, c.s.root, "sys/devices/system/cpu/cpufreq/policy0/scaling_available_frequencies"); got != "3500000 2500000 1500000\n" {
		t.Errorf("P-states %q", got)
	}
	cf, err := act.NewCPUFreq(c.s.h, c.stateFile(), c.topology(), act.CPUFreqConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	virus, cpus := c.virus()
	if err := cf.Apply(t.Context(), virus.ID, cpus, 10); err != nil { // 1.5 + 2.0×9/15 = 2.7 GHz → the 2.5 GHz P-state
		t.Fatal(err)
	}
	c.run(time.Second)
	if got := readTree(t, c.s.root, "sys/devices/system/cpu/cpufreq/policy0/scaling_max_freq"); got != "2500000\n" || c.state("virus").MHz != 2500 {
		t.Errorf("scaling_max_freq %q, virus at %.0f MHz; want the 2.5 GHz P-state", got, c.state("virus").MHz)
	}
	// A limit between P-states is resolved to the one below it (a minimum
	// to the one above), and the victim runs it.
	pol := "/sys/devices/system/cpu/cpufreq/policy4/"
	for _, w := range []struct{ file, data, max, min string }{
		{"scaling_max_freq", "3000000", "2500000\n", "1500000\n"},
		{"scaling_min_freq", "1600000", "2500000\n", "2500000\n"},
		{"scaling_min_freq", "0", "2500000\n", "1500000\n"},
	} {
		if err := c.s.h.WriteFile(pol+w.file, []byte(w.data)); err != nil {
			t.Fatal(err)
		}
		if mx, mn := readTree(t, c.s.root, pol[1:]+"scaling_max_freq"), readTree(t, c.s.root, pol[1:]+"scaling_min_freq"); mx != w.max || mn != w.min {
			t.Errorf("after %s=%s: max %q min %q, want %q %q", w.file, w.data, mx, mn, w.max, w.min)
		}
	}
	c.run(time.Second)
	if f := c.state("victim").MHz; f != 2500 {
		t.Errorf("victim at %.0f MHz under a 3.0 GHz limit, want the 2.5 GHz P-state", f)
	}
}

// sense.PerfCounters with sense.PerfEventsFor's events, opened through the
// simulator's opener, count the model's rates per tenant for every CPU
// model the simulator offers: the raw encodings of the PMU table where
// pmu.Lookup knows the model, the generic events where it does not; and
// Kyoto's pollution rate follows from them.
func TestPerfCountersReadTheModel(t *testing.T) {
	for _, model := range cpuModelNames() {
		t.Run(model, func(t *testing.T) {
			c := newCompHost(t, mustParse(t, `
name: perf-`+model+`
machine: {cpu: `+model+`, sockets: 1, cores_per_socket: 4, max_mhz: 3000, min_mhz: 1000, l3_size: 16MiB, l3_ways: 16}
tenants:
  - {name: locker, kind: vm, role: polluter, cpus: "0-1", phases: [{from: 0s, memory_bound: 0.3, working_set: 64MiB, llc_refs: 5e7, bus_locks: 200k}]}
  - {name: worker, kind: container, role: victim, cpus: "2-3", phases: [{from: 0s, cpu: 0.5, memory_bound: 0.4, working_set: 8MiB, llc_refs: 2e7}]}
`), 2*time.Second)
			cm := cpuModels[model]
			arch, known := pmu.Lookup(c.id.Vendor, c.id.Family, c.id.Model, c.id.Stepping)
			pres := pmu.Detect(c.s.h)
			if !pres.Hardware {
				t.Fatalf("no core PMU detected: %s", pres.Reason)
			}
			events := sense.PerfEventsFor(pres, arch, known)
			raw := rawEvents(c.s.m)
			if known && len(raw) != len(arch.Events()) {
				t.Fatalf("the simulator counts %d of the %d raw events the PMU table gives %s", len(raw), len(arch.Events()), arch.Display)
			}
			l, err := cgroup.Detect(c.s.h)
			if err != nil {
				t.Fatal(err)
			}
			pc, err := sense.NewPerfCounters(c.s.h, l, events, 4096, perfOpener{c.s})
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			pc.SetClock(c.now)
			ts := c.list("locker", "worker")
			if err := pc.Sync(t.Context(), ts); err != nil {
				t.Fatal(err)
			}
			if _, err := pc.Read(t.Context()); err != nil {
				t.Fatal(err)
			}
			c.run(2 * time.Second)
			if err := pc.Sync(t.Context(), ts); err != nil {
				t.Fatal(err)
			}
			rates, err := pc.Read(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			nominal, source, err := sense.NominalFreq(c.s.h)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range []string{"locker", "worker"} {
				got, want := rates[c.tenant(n).ID], c.state(n).Rates
				for _, e := range events {
					var w float64
					switch e.Name {
					case sense.EventCycles:
						w = want.Cycles
					case sense.EventInstructions:
						w = want.Instructions
					case sense.EventLLCMisses:
						w = want.LLCMisses
					case sense.EventLLCReferences:
						w = want.LLCRefs
					case sense.EventBusLocks:
						w = want.BusLocks
					case sense.EventTaskClock:
						w = want.TaskClock
					default:
						continue
					}
					if g, ok := got[e.Name]; !ok || !within(g, w, 0.01) {
						t.Errorf("%s %s (type %d config %#x): %.4g/s, model %.4g/s (counted %v)", n, e.Name, e.Type, e.Config, g, w, ok)
					}
				}
				pol, ok := sense.TenantPollution(got, float64(nominal))
				switch {
				case known && arch.LLCMisses.Zero():
					if ok {
						t.Errorf("%s: a pollution rate without an LLC-miss event", n)
					}
				case !ok:
					t.Errorf("%s: no pollution rate from %v", n, got)
				case !within(pol, want.LLCMisses*float64(nominal)/want.Cycles, 0.01):
					t.Errorf("%s: llc_cap_act %.4g, model %.4g", n, pol, want.LLCMisses*float64(nominal)/want.Cycles)
				}
			}
			if _, ok := rates[c.tenant("locker").ID][sense.EventBusLocks]; known != ok {
				t.Errorf("bus_locks counted %v for a model the PMU table knows %v", ok, known)
			}
			wantSource := sense.FreqFromBaseFrequency
			switch {
			case cm.vendor == "AuthenticAMD":
				wantSource = sense.FreqFromACPIMax
			case !cm.hwp:
				wantSource = sense.FreqFromModelName
			}
			if source != wantSource {
				t.Errorf("nominal frequency %d kHz from %s, want from %s", nominal, source, wantSource)
			}
			t.Logf("%s (%s, events %d raw): nominal %d kHz from %s; locker %.0f bus locks/s", model, arch.Display, len(raw), nominal, source, rates[c.tenant("locker").ID][sense.EventBusLocks])
		})
	}
}

// On the 1,000-tenant host the RMIDs run out (223 besides the default
// group's): the monitor gives them to the tenants in the order given and
// says why the others are not monitored; what it reads is the model's.
func TestResctrlMonitorRMIDExhaustionAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the 1,000-tenant host: not in -short")
	}
	c := newCompHost(t, loadScenario(t, "scale"), time.Second)
	mon, err := sense.NewResctrlMonitor(c.s.h, c.id.HasFlag, c.id.IsAMD(), sense.ResctrlMonitorOptions{Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	var all []sense.Tenant
	for i, tn := range c.s.tenants {
		if c.s.present[i] {
			all = append(all, c.tenant(tn.Name))
		}
	}
	if err := mon.Sync(t.Context(), all); err != nil {
		t.Fatal(err)
	}
	free, _ := c.s.rc.RMIDs()
	if u := mon.Unmonitored(); len(u) != len(all)-223 || free != 0 {
		t.Fatalf("%d of %d tenants unmonitored, %d RMIDs free; want %d and 0", len(u), len(all), free, len(all)-223)
	} else if !strings.Contains(u[0].Reason, "RMID") && !strings.Contains(u[0].Reason, "space") {
		t.Errorf("unmonitored %s: %q does not say the RMIDs ran out", u[0].ID, u[0].Reason)
	}
	mon.Read(t.Context())
	c.run(time.Second)
	c0 := processCPU()
	if err := mon.Sync(t.Context(), all); err != nil {
		t.Fatal(err)
	}
	c1 := processCPU()
	usage, err := mon.Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("one interval of the monitor with %d tenants: Sync %v, Read %v of CPU (the emulation's side included)", len(all), c1-c0, processCPU()-c1)
	if len(usage) != 223 {
		t.Errorf("read %d tenants, want 223", len(usage))
	}
	for _, n := range []string{"victim-a", "victim-b"} { // first in the scenario: monitored
		i := c.index(n)
		d, ok := usage[c.tenant(n).ID].Domain(c.s.model.Socket(c.s.tenants[i].VCPUs[0]))
		if !ok || !within(d.TotalBytesPerSec, c.state(n).Traffic[c.s.model.Socket(c.s.tenants[i].VCPUs[0])], 0.01) {
			t.Errorf("%s: %+v, model traffic %v", n, d, c.state(n).Traffic)
		}
	}
}
