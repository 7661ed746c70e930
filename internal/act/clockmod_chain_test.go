package act_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/sense"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

// skxPowerHost is a copy of the Skylake-SP tree whose counters a test
// advances: /proc/stat, RAPL energy and coretemp readings, as a simulator
// would.
type skxPowerHost struct {
	t      *testing.T
	root   string
	h      *host.Host
	ticks  map[int]uint64 // busy jiffies per CPU
	idle   map[int]uint64
	energy uint64 // package-0 µJ
}

func newSKXPowerHost(t *testing.T) *skxPowerHost {
	root := filepath.Join(t.TempDir(), "skx")
	src := filepath.Join("..", "..", "testdata", "hosts", "intel-skx-2s")
	for _, sub := range []string{"proc", "dev", "sys/devices/system/cpu", "sys/class"} {
		if err := os.CopyFS(filepath.Join(root, sub), os.DirFS(filepath.Join(src, sub))); err != nil {
			t.Fatal(err)
		}
	}
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	s := &skxPowerHost{t: t, root: root, h: h, ticks: map[int]uint64{}, idle: map[int]uint64{}}
	for p := 0; p < 2; p++ {
		d := fmt.Sprintf("sys/class/hwmon/hwmon%d/", p)
		s.put(d+"name", "coretemp\n")
		s.put(d+"temp1_label", fmt.Sprintf("Package id %d\n", p))
		s.put(d+"temp1_input", "50000\n")
		for c := 0; c < 8; c++ {
			s.put(fmt.Sprintf("%stemp%d_label", d, c+2), fmt.Sprintf("Core %d\n", c))
			s.put(fmt.Sprintf("%stemp%d_input", d, c+2), "40000\n")
		}
	}
	return s
}

func (s *skxPowerHost) put(p, v string) {
	full := filepath.Join(s.root, p)
	os.MkdirAll(filepath.Dir(full), 0o755)
	if err := os.WriteFile(full, []byte(v), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// duty is what cpu's IA32_CLOCK_MODULATION lets it run.
func (s *skxPowerHost) duty(cpu int) float64 {
	v, err := act.ReadMSR(s.h, cpu, act.MSRClockModulation)
	if err != nil {
		s.t.Fatal(err)
	}
	step, steps := act.DecodeClockModulation(v, true)
	return float64(step) / float64(steps)
}

// tick advances one second: the hog on cores 0-3 of package 0 runs at its
// duty (when hogging), web (cpus 4-7) at 60% on cpu 4; package 0 draws 65 W plus 12 W
// per hog CPU at full duty; a core's temperature follows its power.
func (s *skxPowerHost) tick(hogging bool) {
	busy := map[int]float64{4: 0.6}
	watts := 65.0
	for _, cpu := range []int{0, 1, 2, 3, 16, 17, 18, 19} {
		if hogging {
			busy[cpu] = s.duty(cpu)
			watts += 12 * busy[cpu]
		}
	}
	var b strings.Builder
	b.WriteString("cpu  0 0 0 0 0 0 0 0 0 0\n")
	for cpu := 0; cpu < 32; cpu++ {
		s.ticks[cpu] += uint64(100 * busy[cpu])
		s.idle[cpu] += uint64(100 - 100*busy[cpu])
		fmt.Fprintf(&b, "cpu%d %d 0 0 %d 0 0 0 0 0 0\n", cpu, s.ticks[cpu], s.idle[cpu])
	}
	s.put("proc/stat", b.String())
	s.energy += uint64(watts * 1e6)
	s.put("sys/class/powercap/intel-rapl:0/energy_uj", fmt.Sprint(s.energy))
	for c := 0; c < 8; c++ {
		temp := 40 + 30*max(busy[c], busy[c+16])
		s.put(fmt.Sprintf("sys/class/hwmon/hwmon0/temp%d_input", c+2), fmt.Sprint(int(temp*1000)))
	}
}

func (s *skxPowerHost) msr(cpu int) []byte {
	b, _ := os.ReadFile(filepath.Join(s.root, "dev", "cpu", fmt.Sprint(cpu), "msr"))
	if len(b) < act.MSRClockModulation+8 {
		return nil
	}
	return b[act.MSRClockModulation : act.MSRClockModulation+8]
}

// TestPowerChainOnTree runs sense → judge → act on the SKX tree: the power
// sensor reads RAPL, /proc/stat and coretemp, the lever chooser gives the
// hog (whole cores, alone) clock modulation and web (half cores) CPU quota,
// the power budget names the hog noise while package 0 is over 150 W (its
// cores run hotter than the package average; web, one of four CPUs busy,
// is not noise), and
// the clock-modulation actuator writes its CPUs' MSRs, which the tree's
// "hardware" obeys; when the hog stops the budget relaxes it back to full
// speed and the MSRs hold their original value again.
func TestPowerChainOnTree(t *testing.T) {
	s := newSKXPowerHost(t)
	topo, err := topology.Read(s.h)
	if err != nil {
		t.Fatal(err)
	}
	sensor, err := sense.NewPowerSensor(s.h, topo)
	if err != nil {
		t.Fatal(err)
	}
	st, err := act.OpenState(filepath.Join(t.TempDir(), "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	cpuinfo, _ := s.h.ReadString("/proc/cpuinfo")
	id, _ := topology.IdentityFromCPUInfo(cpuinfo)
	ext := true
	cm, err := act.NewClockModulation(s.h, st, topo, id, act.ClockModConfig{ExtendedDuty: &ext}, nil)
	if err != nil {
		t.Fatal(err)
	}
	hog, web := cpuset.MustParse("0-3,16-19"), cpuset.MustParse("4-7")
	lh := judge.LeverHost{Siblings: map[int]cpuset.Set{}, ClockModulation: true, ClockModSteps: cm.Steps(), QuotaSteps: 16,
		CPUFreqWhy: "not wanted here"}
	for _, c := range topo.CPUs {
		lh.Siblings[c.ID] = c.Siblings
	}
	levers := map[string]judge.LeverChoice{}
	for _, c := range judge.ChooseLevers([]judge.LeverTenant{{ID: "hog", CPUs: hog}, {ID: "web", CPUs: web}}, lh,
		[]judge.Lever{judge.LeverClockModulation, judge.LeverCPUFreq, judge.LeverCPUQuota}) {
		levers[c.Tenant] = c
	}
	if levers["hog"].Lever != judge.LeverClockModulation || levers["web"].Lever != judge.LeverCPUQuota {
		t.Fatalf("levers %+v", levers)
	}
	budget := judge.NewPowerBudget(judge.PowerBudgetConfig{Enabled: true, Period: 3 * time.Second})
	usage := map[string]float64{"hog": 0, "web": 0.6}
	tenants := map[string]cpuset.Set{"hog": hog, "web": web}
	now := time.Unix(1000, 0)
	var log []string
	run := func(seconds int, hogging bool) {
		for i := 0; i < seconds; i++ {
			s.tick(hogging)
			now = now.Add(time.Second)
			usage["hog"] = 0
			if hogging {
				usage["hog"] = 8 * s.duty(0)
			}
			var in []sense.PowerTenantInput
			for _, id := range []string{"hog", "web"} {
				in = append(in, sense.PowerTenantInput{ID: id, CPUs: tenants[id], Usage: usage[id]})
			}
			r, ok, err := sensor.Read(t.Context(), now, in)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				continue
			}
			if p := r.Packages[0]; !p.PerCoreTemps || !p.TempWeighted {
				t.Fatalf("package 0 not judged by core temperatures: %+v", p)
			}
			sample := judge.PowerSample{At: now, Duration: time.Second, CPUBusy: r.CPUBusy}
			for _, p := range r.Packages {
				sample.Sockets = append(sample.Sockets, judge.PowerSocket{ID: p.Package, Watts: p.Watts, CPUs: p.CPUs,
					AvgTemp: p.AvgTemp, HasTemp: p.HasTemp, PerCoreTemps: p.PerCoreTemps})
			}
			for _, tp := range r.Tenants {
				l := levers[tp.ID]
				sample.Tenants = append(sample.Tenants, judge.PowerTenant{ID: tp.ID, Name: tp.ID, Socket: tp.Package, CPUs: tp.CPUs,
					Watts: tp.Watts, Temp: tp.Temp, HasTemp: tp.HasTemp, Lever: l.Lever, Steps: l.Steps})
			}
			for _, d := range budget.Observe(sample) {
				log = append(log, fmt.Sprintf("%s %s %d/%d", d.Tenant, d.Action, d.Step, d.Steps))
				if d.Lever != judge.LeverClockModulation {
					t.Fatalf("decision on another lever: %+v", d)
				}
				if err := cm.Apply(t.Context(), d.Tenant, levers[d.Tenant].CPUs, d.Step); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// 65 + 96 W: 161 W over the budget; at 15/16 155 W; at 14/16 149 W,
	// inside the guard band: held there.
	run(13, true)
	want := []byte{0x1e, 0, 0, 0, 0, 0, 0, 0} // enabled, 14/16
	for _, cpu := range []int{0, 3, 16, 19} {
		if got := s.msr(cpu); string(got) != string(want) {
			t.Errorf("cpu %d MSR % x, want % x (decisions %v)", cpu, got, want, log)
		}
	}
	for _, cpu := range []int{4, 5, 6, 7, 20, 21, 8} {
		if got := s.msr(cpu); got != nil {
			t.Errorf("innocent cpu %d written: % x", cpu, got)
		}
	}
	// The hog stops: 65 W, under 140: relax one step per period to release.
	run(6, false)
	for _, cpu := range []int{0, 3, 16, 19} {
		if got := s.msr(cpu); string(got) != string(make([]byte, 8)) {
			t.Errorf("after release cpu %d MSR % x", cpu, got)
		}
	}
	if got := strings.Join(log, ", "); got != "hog tighten 15/16, hog tighten 14/16, hog relax 15/16, hog release 16/16" {
		t.Errorf("decisions: %s", got)
	}
	if keys := st.RecordKeys(act.RecordClockMod); len(keys) != 0 {
		t.Errorf("records left: %v", keys)
	}
}
