package sense

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

// powerTree copies the parts of a testdata/hosts tree power sensing reads
// into a temporary directory, so a test can move its counters.
func powerTree(t *testing.T, name string) (string, *host.Host) {
	t.Helper()
	root := filepath.Join(t.TempDir(), name)
	src := filepath.Join("..", "..", "testdata", "hosts", name)
	for _, sub := range []string{"proc", "sys/devices/system/cpu", "sys/class"} {
		if _, err := os.Stat(filepath.Join(src, sub)); err != nil {
			continue
		}
		if err := os.CopyFS(filepath.Join(root, sub), os.DirFS(filepath.Join(src, sub))); err != nil {
			t.Fatal(err)
		}
	}
	h, err := host.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return root, h
}

func put(t *testing.T, root, p, v string) {
	t.Helper()
	full := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(v), 0o644); err != nil {
		t.Fatal(err)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6*math.Max(1, math.Abs(b)) }

func TestRAPLDelta(t *testing.T) {
	const max = 262143328850 // SKX package: 2^32 units of 61.04 µJ
	for _, c := range []struct{ prev, cur, want uint64 }{
		{1000, 151_001_000, 151_000_000},
		{max - 328850, 1_000_000, 1_328_850}, // wrapped once
		{5, 5, 0},
	} {
		if got := RAPLDelta(c.prev, c.cur, max); got != c.want {
			t.Errorf("RAPLDelta(%d, %d) = %d, want %d", c.prev, c.cur, got, c.want)
		}
	}
}

func TestRAPLMeter(t *testing.T) {
	root, h := powerTree(t, "intel-skx-2s")
	const rapl = "sys/class/powercap/"
	energy := func(zone string, uj uint64) { put(t, root, rapl+zone+"/energy_uj", fmt.Sprint(uj)) }
	energy("intel-rapl:0", 1_000_000_000)
	energy("intel-rapl:0:0", 50_000_000)
	energy("intel-rapl:1", 262143328850-100_000_000) // about to wrap
	energy("intel-rapl:1:0", 7)
	m, err := NewRAPLMeter(h)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	if got, err := m.Read(t0); got != nil || err != nil {
		t.Fatalf("first read primes: %v, %v", got, err)
	}
	energy("intel-rapl:0", 1_300_000_000) // +300 J
	energy("intel-rapl:0:0", 70_000_000)  // +20 J
	energy("intel-rapl:1", 100_000_000)   // +200 J across the wrap
	energy("intel-rapl:1:0", 30_000_007)  // +30 J
	got, err := m.Read(t0.Add(2 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := []PackagePower{{Package: 0, Watts: 150, DRAMWatts: 10, HasDRAM: true}, {Package: 1, Watts: 100, DRAMWatts: 15, HasDRAM: true}}
	if len(got) != 2 {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i].Package != want[i].Package || !near(got[i].Watts, want[i].Watts) || !near(got[i].DRAMWatts, want[i].DRAMWatts) || !got[i].HasDRAM {
			t.Errorf("package %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	// A vanished package counter drops its package (DRAM alone is no
	// package figure) and says why.
	os.Remove(filepath.Join(root, rapl+"intel-rapl:1/energy_uj"))
	energy("intel-rapl:0", 1_420_000_000)
	got, err = m.Read(t0.Add(3 * time.Second))
	if err == nil || len(got) != 1 || got[0].Package != 0 || !near(got[0].Watts, 120) {
		t.Errorf("after losing package-1: %+v, %v", got, err)
	}
}

func TestRAPLMeterWhyNot(t *testing.T) {
	_, h := powerTree(t, "amd-milan-1s")
	if _, err := NewRAPLMeter(h); err == nil || !strings.Contains(err.Error(), "no /sys/class/powercap") {
		t.Errorf("Milan (no powercap): %v", err)
	}
	root, h := powerTree(t, "intel-skx-2s")
	os.RemoveAll(filepath.Join(root, "sys/class/powercap/intel-rapl:0"))
	os.RemoveAll(filepath.Join(root, "sys/class/powercap/intel-rapl:1"))
	if _, err := NewRAPLMeter(h); err == nil || !strings.Contains(err.Error(), "no intel-rapl package zones") {
		t.Errorf("powercap without package zones: %v", err)
	}
	root, h = powerTree(t, "intel-skx-2s")
	os.Remove(filepath.Join(root, "sys/class/powercap/intel-rapl:1/energy_uj"))
	if _, err := NewRAPLMeter(h); err == nil || !strings.Contains(err.Error(), "root only since Linux 5.10") {
		t.Errorf("unreadable energy_uj: %v", err)
	}
}

func procStat(lines map[int][8]uint64) string {
	var b strings.Builder
	b.WriteString("cpu  1 2 3 4 5 6 7 8 0 0\n")
	for cpu := 0; cpu < 64; cpu++ {
		if v, ok := lines[cpu]; ok {
			fmt.Fprintf(&b, "cpu%d %d %d %d %d %d %d %d %d 0 0\n", cpu, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7])
		}
	}
	b.WriteString("intr 12345\nctxt 999\n")
	return b.String()
}

func TestCPUBusy(t *testing.T) {
	root, h := powerTree(t, "intel-skx-2s")
	put(t, root, "proc/stat", procStat(map[int][8]uint64{
		0: {100, 0, 0, 900, 0, 0, 0, 0},
		1: {100, 0, 0, 900, 0, 0, 0, 0},
		2: {100, 0, 0, 900, 0, 0, 0, 0},
	}))
	b := NewCPUBusy(h)
	if got, err := b.Read(); got != nil || err != nil {
		t.Fatalf("first read primes: %v %v", got, err)
	}
	put(t, root, "proc/stat", procStat(map[int][8]uint64{
		0: {160, 10, 20, 900, 0, 5, 5, 0}, // 100 busy of 100
		1: {120, 0, 10, 960, 10, 0, 0, 0}, // 30 busy of 100 (iowait is idle)
		2: {100, 0, 0, 950, 0, 0, 0, 50},  // steal is not busy
		3: {5, 0, 0, 5, 0, 0, 0, 0},       // came online: no previous line
	}))
	got, err := b.Read()
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]float64{0: 1, 1: 0.3, 2: 0}
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for cpu, w := range want {
		if !near(got[cpu], w) {
			t.Errorf("cpu %d busy %v, want %v", cpu, got[cpu], w)
		}
	}
	if _, err := ParseProcStat("intr 5\n"); err == nil {
		t.Error("no per-CPU lines accepted")
	}
}

// coretempTree adds Intel coretemp devices for both SKX packages: core c of
// package p at temps[p][c] °C, packages at 50 and 60.
func coretempTree(t *testing.T, root string, temps [2][8]float64) {
	for p := 0; p < 2; p++ {
		d := fmt.Sprintf("sys/class/hwmon/hwmon%d/", p+1)
		put(t, root, d+"name", "coretemp\n")
		put(t, root, d+"temp1_label", fmt.Sprintf("Package id %d\n", p))
		put(t, root, d+"temp1_input", fmt.Sprint(50000+p*10000))
		for c := 0; c < 8; c++ {
			put(t, root, fmt.Sprintf("%stemp%d_label", d, c+2), fmt.Sprintf("Core %d\n", c))
			put(t, root, fmt.Sprintf("%stemp%d_input", d, c+2), fmt.Sprint(int(temps[p][c]*1000)))
		}
	}
	put(t, root, "sys/class/hwmon/hwmon0/name", "acpitz\n") // not a CPU sensor
}

func readTopo(t *testing.T, h *host.Host) *topology.Topology {
	t.Helper()
	topo, err := topology.Read(h)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func TestTemperatureCoretemp(t *testing.T) {
	root, h := powerTree(t, "intel-skx-2s")
	var temps [2][8]float64
	for c := range 8 {
		temps[0][c], temps[1][c] = 40+float64(c), 70+float64(c)
	}
	coretempTree(t, root, temps)
	r, err := NewTemperatureReader(h, readTopo(t, h))
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	// cpu 3 and its sibling 19 are package 0 core 3; cpu 11 and 27 package 1 core 3.
	for cpu, want := range map[int]float64{3: 43, 19: 43, 11: 73, 27: 73, 0: 40, 31: 77} {
		if got.CPU[cpu] != want {
			t.Errorf("cpu %d: %v °C, want %v", cpu, got.CPU[cpu], want)
		}
	}
	if len(got.CPU) != 32 || got.Package[0] != 50 || got.Package[1] != 60 || got.Source != "coretemp" || got.PerCoreReason != "" {
		t.Errorf("reading %+v", got)
	}
}

func TestTemperatureK10temp(t *testing.T) {
	root, h := powerTree(t, "amd-milan-1s")
	put(t, root, "sys/class/hwmon/hwmon0/name", "k10temp\n")
	for i, l := range []struct{ label, milli string }{{"Tctl", "61250"}, {"Tdie", "51250"}, {"Tccd1", "48000"}} {
		put(t, root, fmt.Sprintf("sys/class/hwmon/hwmon0/temp%d_label", i+1), l.label+"\n")
		put(t, root, fmt.Sprintf("sys/class/hwmon/hwmon0/temp%d_input", i+1), l.milli+"\n")
	}
	r, err := NewTemperatureReader(h, readTopo(t, h))
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	if got.CPU != nil || got.Package[0] != 51.25 || !strings.Contains(got.PerCoreReason, "no per-core sensors") {
		t.Errorf("k10temp: %+v (want Tdie per package and no per-CPU values)", got)
	}
}

func TestTemperatureWhyNot(t *testing.T) {
	_, h := powerTree(t, "intel-skx-2s")
	if _, err := NewTemperatureReader(h, readTopo(t, h)); err == nil || !strings.Contains(err.Error(), "no /sys/class/hwmon") {
		t.Errorf("no hwmon: %v", err)
	}
}

// TestAttributePower divides package 0 of the SKX tree (CPUs 0-7 and
// siblings 16-23) at 120 W among tenant a (cpus 0-3, all busy), b (cpus
// 4-5, half busy) and host work on cpu 6.
func TestAttributePower(t *testing.T) {
	_, h := powerTree(t, "intel-skx-2s")
	topo := readTopo(t, h)
	busy := map[int]float64{0: 1, 1: 1, 2: 1, 3: 1, 4: 0.5, 5: 0.5, 6: 1, 7: 0}
	tenants := []PowerTenantInput{
		{ID: "a", CPUs: cpuset.MustParse("0-3"), Usage: 4},
		{ID: "b", CPUs: cpuset.MustParse("4-5"), Usage: 1},
	}
	pkgs := []PackagePower{{Package: 0, Watts: 120}}

	t.Run("CPU share", func(t *testing.T) {
		var a PowerAttributor
		pa, tp := a.Attribute(pkgs, topo, busy, Temperatures{PerCoreReason: "no sensors"}, tenants)
		// 6 busy cores: a 4/6, b 1/6, host 1/6.
		if len(tp) != 2 || !near(tp[0].Watts, 80) || !near(tp[1].Watts, 20) || !near(pa[0].Unattributed, 20) || pa[0].TempWeighted || pa[0].PerCoreTemps {
			t.Errorf("got %+v / %+v", tp, pa)
		}
		if !near(tp[0].CPUShareWatts, 80) || !near(tp[0].Busy, 4) || pa[0].TempReason != "no sensors" {
			t.Errorf("details %+v / %+v", tp[0], pa[0])
		}
	})
	t.Run("temperature weighted", func(t *testing.T) {
		temps := Temperatures{CPU: map[int]float64{}, Package: map[int]float64{0: 60}}
		for cpu := 0; cpu < 32; cpu++ {
			temps.CPU[cpu] = 40 // idle cores, cpu 7 and package 1
		}
		for _, cpu := range []int{0, 1, 2, 3, 16, 17, 18, 19} {
			temps.CPU[cpu] = 70 // a: 30 °C over idle
		}
		for _, cpu := range []int{4, 5, 6, 20, 21, 22} {
			temps.CPU[cpu] = 55 // b and the host work: 15 °C over idle
		}
		var a PowerAttributor
		pa, tp := a.Attribute(pkgs, topo, busy, temps, tenants)
		// Busy-weighted mean rise (4×30 + 1×15 + 1×15)/6 = 25: weights a
		// 1.2, b and host 0.6; a 4.8/6 of 120 W, b 0.6/6, host 0.6/6.
		if !pa[0].TempWeighted || !pa[0].PerCoreTemps || !near(pa[0].IdleRefTemp, 40) || !near(tp[0].Watts, 96) || !near(tp[1].Watts, 12) || !near(pa[0].Unattributed, 12) {
			t.Errorf("got %+v / %+v", tp, pa)
		}
		if !near(tp[0].CPUShareWatts, 80) || !tp[0].HasTemp || !near(tp[0].Temp, 70) || !near(tp[1].Temp, 55) {
			t.Errorf("details %+v", tp)
		}
		// Uniform temperatures weigh like CPU share.
		for cpu := range temps.CPU {
			if busy[cpu] > 0 {
				temps.CPU[cpu] = 65
			}
		}
		_, tp = a.Attribute(pkgs, topo, busy, temps, tenants)
		if !near(tp[0].Watts, 80) || !near(tp[1].Watts, 20) {
			t.Errorf("uniform temperatures: %+v", tp)
		}
	})
	t.Run("no idle reference yet", func(t *testing.T) {
		temps := Temperatures{CPU: map[int]float64{}}
		all := map[int]float64{}
		for cpu := 0; cpu < 32; cpu++ {
			temps.CPU[cpu] = 60 + float64(cpu%4)
			all[cpu] = 1
		}
		var a PowerAttributor
		pa, tp := a.Attribute(pkgs, topo, all, temps, tenants)
		if pa[0].TempWeighted || !strings.Contains(pa[0].TempReason, "idle reference") || !near(tp[0].Watts, 120*4.0/16) {
			t.Errorf("got %+v / %+v", tp, pa)
		}
	})
	t.Run("shared CPUs", func(t *testing.T) {
		// Two tenants share cpus 8-9 (package 1), each claiming a whole
		// core, but the CPUs ran 0.5 each: one core between them.
		var a PowerAttributor
		sh := []PowerTenantInput{{ID: "x", CPUs: cpuset.MustParse("8-9"), Usage: 1}, {ID: "y", CPUs: cpuset.MustParse("8-9"), Usage: 1}}
		_, tp := a.Attribute([]PackagePower{{Package: 1, Watts: 90}}, topo, map[int]float64{8: 0.5, 9: 0.5}, Temperatures{}, sh)
		if len(tp) != 2 || !near(tp[0].Busy, 0.5) || !near(tp[0].Watts, 45) || !near(tp[1].Watts, 45) {
			t.Errorf("got %+v", tp)
		}
	})
}

func TestPowerSensor(t *testing.T) {
	root, h := powerTree(t, "intel-skx-2s")
	topo := readTopo(t, h)
	var temps [2][8]float64
	for c := range 8 {
		temps[0][c], temps[1][c] = 45, 45
	}
	temps[0][7] = 35 // idle
	coretempTree(t, root, temps)
	stat := map[int][8]uint64{}
	for cpu := 0; cpu < 32; cpu++ {
		stat[cpu] = [8]uint64{0, 0, 0, 1000, 0, 0, 0, 0}
	}
	put(t, root, "proc/stat", procStat(stat))
	put(t, root, "sys/class/powercap/intel-rapl:0/energy_uj", "0")
	s, err := NewPowerSensor(h, topo)
	if err != nil {
		t.Fatal(err)
	}
	tenants := []PowerTenantInput{{ID: "vm", CPUs: cpuset.MustParse("0-1,16-17"), Usage: 2}}
	t0 := time.Unix(0, 0)
	if _, ok, _ := s.Read(t.Context(), t0, tenants); ok {
		t.Fatal("first read must only prime")
	}
	for _, cpu := range []int{0, 1} {
		stat[cpu] = [8]uint64{100, 0, 0, 1000, 0, 0, 0, 0} // fully busy
	}
	put(t, root, "proc/stat", procStat(stat))
	put(t, root, "sys/class/powercap/intel-rapl:0/energy_uj", "120000000") // 120 J in 1 s
	r, ok, err := s.Read(t.Context(), t0.Add(time.Second), tenants)
	if !ok {
		t.Fatalf("no reading: %v", err)
	}
	if len(r.Tenants) != 1 || r.Tenants[0].Package != 0 || !near(r.Tenants[0].Watts, 120) || !near(r.Tenants[0].Busy, 2) {
		t.Errorf("tenants %+v", r.Tenants)
	}
	if r.Packages[0].Package != 0 || !r.Packages[0].TempWeighted || r.Temps.Source != "coretemp" {
		t.Errorf("packages %+v, temps %+v", r.Packages, r.Temps)
	}
}

func FuzzParseProcStat(f *testing.F) {
	f.Add("cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 10 0 5 100 1 0 0 0 0 0\ncpu3 1 1 1 1\nintr 5\n")
	f.Add("cpu0 18446744073709551615 0 0 0 0 0 0 0\n")
	f.Add("cpu-1 1 2 3 4\n")
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseProcStat(s)
		if err != nil {
			return
		}
		for cpu, c := range m {
			if cpu < 0 || c.Busy() > c.Total() {
				t.Fatalf("cpu %d: %+v (busy %d > total %d)", cpu, c, c.Busy(), c.Total())
			}
		}
	})
}

// BenchmarkAttributePower1000 divides two 112-CPU packages among 1,000
// tenants (the sim's scale scenario), with per-core temperatures.
func BenchmarkAttributePower1000(b *testing.B) {
	topo := &topology.Topology{Packages: []topology.Package{{ID: 0, CPUs: cpuset.Range(0, 111)}, {ID: 1, CPUs: cpuset.Range(112, 223)}}}
	busy := map[int]float64{}
	temps := Temperatures{CPU: map[int]float64{}, Package: map[int]float64{0: 60, 1: 60}}
	for cpu := 0; cpu < 224; cpu++ {
		busy[cpu] = float64(cpu%10) / 10
		temps.CPU[cpu] = 40 + 30*busy[cpu]
	}
	tenants := make([]PowerTenantInput, 1000)
	for i := range tenants {
		c := (i * 7) % 223
		tenants[i] = PowerTenantInput{ID: fmt.Sprintf("/t/%d", i), CPUs: cpuset.Of(c, c+1), Usage: 0.2}
	}
	pkgs := []PackagePower{{Package: 0, Watts: 180}, {Package: 1, Watts: 150}}
	var a PowerAttributor
	b.ReportAllocs()
	for b.Loop() {
		a.Attribute(pkgs, topo, busy, temps, tenants)
	}
}
