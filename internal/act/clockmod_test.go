package act

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

// hostCopy copies a tree of testdata/hosts into a temporary directory, so
// actuators can write to it, and opens it; with only, just those
// subdirectories of it (a whole tree is 1,600 files).
func hostCopy(t *testing.T, name string, only ...string) (string, *host.Host) {
	t.Helper()
	root := filepath.Join(t.TempDir(), name)
	src := filepath.Join("..", "..", "testdata", "hosts", name)
	if len(only) == 0 {
		only = []string{"."}
	}
	for _, sub := range only {
		if _, err := os.Stat(filepath.Join(src, sub)); err != nil {
			continue // the tree does not have it: absence is part of what it models
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

func identity(t *testing.T, h *host.Host) topology.Identity {
	t.Helper()
	s, err := h.ReadString("/proc/cpuinfo")
	if err != nil {
		t.Fatal(err)
	}
	id, err := topology.IdentityFromCPUInfo(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// msrBytes is what dev/cpu/N/msr holds at offset 0x19A, and the file's length.
func msrBytes(t *testing.T, root string, cpu int) ([]byte, int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "dev", "cpu", itoa(cpu), "msr"))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < MSRClockModulation+8 {
		return nil, len(b)
	}
	return b[MSRClockModulation : MSRClockModulation+8], len(b)
}

func itoa(n int) string { return cpuKey(n)[3:] }

func le(v uint64) []byte {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return b[:]
}

func TestEncodeClockModulation(t *testing.T) {
	for _, c := range []struct {
		prev        uint64
		step, steps int
		want        uint64
		bad         bool
	}{
		// ECMD: bits 3:0 are the duty in 1/16ths, bit 4 enables.
		{0, 1, 16, 0x11, false},  // 6.25%
		{0, 8, 16, 0x18, false},  // 50%
		{0, 15, 16, 0x1F, false}, // 93.75%
		{0, 16, 16, 0x00, false}, // full speed: modulation off
		// Without ECMD: bits 3:1 in 1/8ths, bit 0 stays 0.
		{0, 1, 8, 0x12, false}, // 12.5%
		{0, 3, 8, 0x16, false}, // 37.5%
		{0, 7, 8, 0x1E, false}, // 87.5%
		{0, 8, 8, 0x00, false},
		// Bits above the low five are someone else's: kept.
		{0xABC0_0000_0000_0020, 4, 16, 0xABC0_0000_0000_0034, false},
		{0x1F, 16, 16, 0, false}, // an earlier duty is replaced, not or-ed
		{0, 0, 16, 0, true},      // 0000B is reserved
		{0, 17, 16, 0, true},
		{0, 4, 12, 0, true},
	} {
		got, err := EncodeClockModulation(c.prev, c.step, c.steps)
		if (err != nil) != c.bad {
			t.Errorf("Encode(%#x, %d/%d): err %v", c.prev, c.step, c.steps, err)
			continue
		}
		if !c.bad && got != c.want {
			t.Errorf("Encode(%#x, %d/%d) = %#x, want %#x", c.prev, c.step, c.steps, got, c.want)
		}
		if !c.bad {
			step, steps := DecodeClockModulation(got, c.steps == 16)
			if step != c.step || steps != c.steps {
				t.Errorf("Decode(Encode(%d/%d)) = %d/%d", c.step, c.steps, step, steps)
			}
		}
	}
}

func TestDecodeSignature(t *testing.T) {
	for _, c := range []struct {
		eax                     uint32
		family, model, stepping int
	}{
		{0x00050654, 6, 0x55, 4},  // Skylake-SP stepping 4 (Xeon Silver 4108)
		{0x000806F8, 6, 0x8F, 8},  // Sapphire Rapids
		{0x00A00F11, 25, 0x01, 1}, // Zen 3 Milan (EPYC 7313)
		{0x00000F29, 15, 0x02, 9}, // Pentium 4: family 0xF, no extension
	} {
		f, m, s := DecodeSignature(c.eax)
		if f != c.family || m != c.model || s != c.stepping {
			t.Errorf("DecodeSignature(%#x) = %d/%#x/%d, want %d/%#x/%d", c.eax, f, m, s, c.family, c.model, c.stepping)
		}
	}
}

func TestClockModSupport(t *testing.T) {
	yes, no := true, false
	sig, live := liveCPU()

	t.Run("intel-skx-2s, ECMD configured", func(t *testing.T) {
		_, h := hostCopy(t, "intel-skx-2s", "proc", "dev")
		for _, ext := range []bool{true, false} {
			got, err := ClockModSupport(h, identity(t, h), ClockModConfig{ExtendedDuty: &ext})
			if err != nil || got != ext {
				t.Errorf("extended_duty %v: got %v, %v", ext, got, err)
			}
		}
	})
	t.Run("intel-skx-2s, ECMD not configured on a tree", func(t *testing.T) {
		_, h := hostCopy(t, "intel-skx-2s", "proc", "dev")
		id := identity(t, h)
		if live && sig.same(id) {
			t.Skip("this machine is the tree's CPU model: CPUID applies")
		}
		_, err := ClockModSupport(h, id, ClockModConfig{})
		if err == nil || !strings.Contains(err.Error(), "extended_duty") {
			t.Errorf("want a reason naming extended_duty, got %v", err)
		}
	})
	for _, c := range []struct {
		name, tree string
		prep       func(root string)
		cfg        ClockModConfig
		want       string
	}{
		{"AMD", "amd-milan-1s", nil, ClockModConfig{ExtendedDuty: &yes}, "AMD CPUs have no IA32_CLOCK_MODULATION"},
		{"dev VM", "dev-epyc-vm", nil, ClockModConfig{}, "AMD CPUs have no IA32_CLOCK_MODULATION"},
		{"disabled", "intel-skx-2s", nil, ClockModConfig{Enabled: &no, ExtendedDuty: &yes}, "disabled by configuration"},
		{"no msr module", "intel-skx-2s", func(root string) { os.RemoveAll(filepath.Join(root, "dev", "cpu")) }, ClockModConfig{ExtendedDuty: &yes}, "modprobe msr"},
		{"writes off", "intel-skx-2s", func(root string) {
			d := filepath.Join(root, "sys", "module", "msr", "parameters")
			os.MkdirAll(d, 0o755)
			os.WriteFile(filepath.Join(d, "allow_writes"), []byte("off\n"), 0o644)
		}, ClockModConfig{ExtendedDuty: &yes}, "allow_writes=off"},
		{"guest", "intel-skx-2s", func(root string) {
			p := filepath.Join(root, "proc", "cpuinfo")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, bytes.ReplaceAll(b, []byte("flags\t\t: "), []byte("flags\t\t: hypervisor ")), 0o644)
		}, ClockModConfig{ExtendedDuty: &yes}, "virtual machine"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root, h := hostCopy(t, c.tree, "proc", "dev", "sys/module")
			if c.prep != nil {
				c.prep(root)
			}
			_, err := ClockModSupport(h, identity(t, h), c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("want reason %q, got %v", c.want, err)
			}
		})
	}
}

func newClockMod(t *testing.T, tree string, extended bool) (string, *ClockModulation, string) {
	t.Helper()
	root, h := hostCopy(t, tree, "proc", "dev", "sys/devices/system/cpu")
	topo, err := topology.Read(h)
	if err != nil {
		t.Fatal(err)
	}
	statePath := filepath.Join(t.TempDir(), "state.json")
	st, err := OpenState(statePath)
	if err != nil {
		t.Fatal(err)
	}
	cm, err := NewClockModulation(h, st, topo, identity(t, h), ClockModConfig{ExtendedDuty: &extended}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return root, cm, statePath
}

// TestClockModulationWrites checks the exact 8 bytes at offset 0x19A of
// dev/cpu/N/msr after every step and after restore, on a copy of the
// Skylake-SP tree (cpu 3's SMT sibling is cpu 19).
func TestClockModulationWrites(t *testing.T) {
	root, cm, _ := newClockMod(t, "intel-skx-2s", true)
	// cpu 4 and its sibling 20 start with modulation someone else enabled
	// (10/16) and a high bit set: restore must give exactly that back.
	for _, cpu := range []int{4, 20} {
		f, _ := os.OpenFile(filepath.Join(root, "dev", "cpu", itoa(cpu), "msr"), os.O_WRONLY, 0)
		f.WriteAt(le(0x8000_0000_0000_001A), MSRClockModulation)
		f.Close()
	}
	if cm.Steps() != 16 {
		t.Fatalf("ECMD: %d steps", cm.Steps())
	}
	tenant := cpuset.MustParse("3,19")
	for _, c := range []struct {
		step int
		want uint64
	}{{15, 0x1F}, {8, 0x18}, {1, 0x11}, {4, 0x14}} {
		if err := cm.Apply(t.Context(), "vm-a", tenant, c.step); err != nil {
			t.Fatal(err)
		}
		for _, cpu := range tenant.List() {
			got, n := msrBytes(t, root, cpu)
			if !bytes.Equal(got, le(c.want)) || n != MSRClockModulation+8 {
				t.Errorf("step %d: cpu %d holds % x (file %d bytes), want % x", c.step, cpu, got, n, le(c.want))
			}
		}
		if s, _ := cm.Step(3); s != c.step {
			t.Errorf("Step(3) = %d, want %d", s, c.step)
		}
	}
	// Neighbours untouched: cpu 2 is still the empty stand-in.
	if _, n := msrBytes(t, root, 2); n != 0 {
		t.Errorf("cpu 2's msr written (%d bytes)", n)
	}
	// Half a core is refused: its sibling would run at full speed.
	if err := cm.Apply(t.Context(), "vm-a", cpuset.Of(3), 2); err == nil || !strings.Contains(err.Error(), "SMT") {
		t.Errorf("half a core: %v", err)
	}
	if err := cm.Apply(t.Context(), "vm-b", cpuset.MustParse("4,20"), 2); err != nil {
		t.Fatal(err)
	}
	if got, _ := msrBytes(t, root, 20); !bytes.Equal(got, le(0x8000_0000_0000_0012)) {
		t.Errorf("cpu 20 step 2: % x", got)
	}
	if got := cm.Modulated(); !got["vm-a"].Equal(tenant) || !got["vm-b"].Equal(cpuset.MustParse("4,20")) {
		t.Errorf("Modulated() = %v", got)
	}
	// Step Steps is a release.
	if err := cm.Apply(t.Context(), "vm-a", tenant, 16); err != nil {
		t.Fatal(err)
	}
	for _, cpu := range tenant.List() {
		if got, _ := msrBytes(t, root, cpu); !bytes.Equal(got, le(0)) {
			t.Errorf("after release cpu %d holds % x, want zeros", cpu, got)
		}
	}
	if err := cm.RestoreTenant("vm-b"); err != nil {
		t.Fatal(err)
	}
	for _, cpu := range []int{4, 20} {
		if got, _ := msrBytes(t, root, cpu); !bytes.Equal(got, le(0x8000_0000_0000_001A)) {
			t.Errorf("after restore cpu %d holds % x, want its original", cpu, got)
		}
	}
	if keys := cm.State.RecordKeys(RecordClockMod); len(keys) != 0 {
		t.Errorf("records left: %v", keys)
	}
}

func TestClockModulationEightSteps(t *testing.T) {
	root, cm, _ := newClockMod(t, "intel-skx-2s", false)
	if cm.Steps() != 8 {
		t.Fatalf("no ECMD: %d steps", cm.Steps())
	}
	for _, c := range []struct {
		step int
		want uint64
	}{{7, 0x1E}, {3, 0x16}, {1, 0x12}} {
		if err := cm.Apply(t.Context(), "vm-a", cpuset.MustParse("0,16"), c.step); err != nil {
			t.Fatal(err)
		}
		for _, cpu := range []int{0, 16} {
			if got, _ := msrBytes(t, root, cpu); !bytes.Equal(got, le(c.want)) {
				t.Errorf("step %d/8: cpu %d holds % x, want % x", c.step, cpu, got, le(c.want))
			}
		}
	}
	if err := cm.Apply(t.Context(), "vm-a", cpuset.MustParse("0,16"), 9); err == nil {
		t.Error("step 9 of 8 accepted")
	}
}

// TestClockModulationRestartRestores is the kill -9 path: a new process
// opens the state file the killed one left and restores from it alone.
func TestClockModulationRestartRestores(t *testing.T) {
	root, cm, statePath := newClockMod(t, "intel-skx-2s", true)
	if err := cm.Apply(t.Context(), "vm-a", cpuset.MustParse("5,21,6,22"), 3); err != nil {
		t.Fatal(err)
	}
	// Someone else reprograms cpu 22 after us: theirs to keep.
	f, _ := os.OpenFile(filepath.Join(root, "dev", "cpu", "22", "msr"), os.O_WRONLY, 0)
	f.WriteAt(le(0x19), MSRClockModulation)
	f.Close()

	st2, err := OpenState(statePath)
	if err != nil {
		t.Fatal(err)
	}
	n, err := RestoreClockModulation(cm.Host, st2, nil)
	if err != nil || n != 3 {
		t.Fatalf("restored %d, %v; want 3", n, err)
	}
	for _, cpu := range []int{5, 21, 6} {
		if got, _ := msrBytes(t, root, cpu); !bytes.Equal(got, le(0)) {
			t.Errorf("cpu %d holds % x after restart restore", cpu, got)
		}
	}
	if got, _ := msrBytes(t, root, 22); !bytes.Equal(got, le(0x19)) {
		t.Errorf("cpu 22 (changed by someone else) holds % x", got)
	}
	if keys := st2.RecordKeys(RecordClockMod); len(keys) != 0 {
		t.Errorf("records left: %v", keys)
	}
}

func TestReadMSRShortStandIn(t *testing.T) {
	root, h := hostCopy(t, "intel-skx-2s", "dev")
	if v, err := ReadMSR(h, 1, MSRClockModulation); err != nil || v != 0 {
		t.Errorf("empty stand-in: %#x, %v (want its reset value 0)", v, err)
	}
	// A file that ends inside the register is garbage, not a register.
	os.WriteFile(filepath.Join(root, "dev", "cpu", "1", "msr"), make([]byte, MSRClockModulation+3), 0o644)
	if _, err := ReadMSR(h, 1, MSRClockModulation); err == nil || !strings.Contains(err.Error(), "short read") {
		t.Errorf("truncated register: %v", err)
	}
	if _, err := ReadMSR(h, 99, MSRClockModulation); err == nil || !strings.Contains(err.Error(), "modprobe msr") {
		t.Errorf("missing device: %v", err)
	}
}

// The proposed `levers:` section decodes into the actuators' configurations.
func TestLeverConfigYAML(t *testing.T) {
	var c struct {
		Levers struct {
			ClockModulation ClockModConfig `yaml:"clock_modulation"`
			CPUFreq         CPUFreqConfig  `yaml:"cpufreq"`
		} `yaml:"levers"`
	}
	dec := yaml.NewDecoder(strings.NewReader("levers:\n  clock_modulation: {enabled: true, extended_duty: false}\n  cpufreq: {enabled: false, steps: 8}\n"))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatal(err)
	}
	cm, cf := c.Levers.ClockModulation, c.Levers.CPUFreq
	if cm.ExtendedDuty == nil || *cm.ExtendedDuty || !*cm.Enabled || *cf.Enabled || cf.Steps != 8 || cf.Validate() != nil {
		t.Errorf("decoded %+v %+v", cm, cf)
	}
	var empty ClockModConfig
	empty.Fill()
	if !*empty.Enabled || empty.ExtendedDuty != nil {
		t.Errorf("defaults %+v", empty)
	}
}

// The CPUID assembly agrees with the kernel about the CPU this test runs on.
func TestLiveCPUID(t *testing.T) {
	sig, ok := liveCPU()
	if !ok {
		t.Skip("no CPUID on this architecture")
	}
	h, err := host.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	s, err := h.ReadString("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo: %v", err)
	}
	id, err := topology.IdentityFromCPUInfo(s)
	if err != nil {
		t.Skipf("cpuinfo: %v", err)
	}
	if !sig.same(id) {
		t.Errorf("CPUID says %s, /proc/cpuinfo %s", sig, id)
	}
	ext, err := ClockModSupport(h, id, ClockModConfig{})
	t.Logf("this host: %s; ECMD %v; clock modulation: %v, %v", sig, sig.ecmd, ext, err)
	if id.IsAMD() && (err == nil || !strings.Contains(err.Error(), "AMD")) {
		t.Errorf("AMD host: %v", err)
	}
}

// Any register value keeps its high bits and decodes to the step encoded.
func FuzzClockModulationEncoding(f *testing.F) {
	f.Add(uint64(0), uint8(4), true)
	f.Add(uint64(0xffff_ffff_ffff_ffff), uint8(7), false)
	f.Fuzz(func(t *testing.T, prev uint64, step uint8, extended bool) {
		steps := 8
		if extended {
			steps = 16
		}
		v, err := EncodeClockModulation(prev, int(step), steps)
		if (err != nil) != (step < 1 || int(step) > steps) {
			t.Fatalf("step %d/%d: err %v", step, steps, err)
		}
		if err != nil {
			return
		}
		if v>>5 != prev>>5 {
			t.Fatalf("high bits changed: %#x -> %#x", prev, v)
		}
		if s, n := DecodeClockModulation(v, extended); s != int(step) || n != steps {
			t.Fatalf("%#x decodes to %d/%d, encoded %d/%d", v, s, n, step, steps)
		}
	})
}
