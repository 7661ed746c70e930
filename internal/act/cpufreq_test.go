package act

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/sense"
	"github.com/crosstalk-project/crosstalk/internal/topology"
)

func TestKHzForStep(t *testing.T) {
	skx := sense.FreqPolicy{HWMinKHz: 800000, HWMaxKHz: 3000000}
	milan := sense.FreqPolicy{HWMinKHz: 1500000, HWMaxKHz: 3000000, AvailableKHz: []int64{1500000, 2200000, 3000000}}
	for _, c := range []struct {
		d           sense.FreqPolicy
		step, steps int
		want        int64
	}{
		// 800 MHz + 2200 MHz × (step-1)/15, rounded down to 100 MHz.
		{skx, 1, 16, 800000},
		{skx, 2, 16, 900000},  // 946,666 → 900,000
		{skx, 8, 16, 1800000}, // 1,826,666
		{skx, 15, 16, 2800000},
		{skx, 16, 16, 3000000},
		{skx, 4, 8, 1700000}, // 800 + 2200×3/7 = 1742.8 MHz
		// acpi-cpufreq's P-states: the highest listed at or below the line.
		{milan, 1, 16, 1500000},
		{milan, 8, 16, 2200000},  // exactly 2,200,000
		{milan, 15, 16, 2200000}, // 2,900,000 → P1
		{milan, 16, 16, 3000000},
		{milan, 0, 16, 1500000}, // below the range: the lowest
	} {
		if got := KHzForStep(c.d, c.step, c.steps); got != c.want {
			t.Errorf("%d-%d kHz step %d/%d = %d, want %d", c.d.HWMinKHz, c.d.HWMaxKHz, c.step, c.steps, got, c.want)
		}
	}
}

func newCPUFreq(t *testing.T, tree string, opts ...host.Option) (string, *CPUFreq, string) {
	t.Helper()
	root, h := hostCopy(t, tree, "proc", "sys/devices/system/cpu")
	if len(opts) > 0 {
		h.Close()
		var err error
		if h, err = host.Open(root, opts...); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
	}
	topo, err := topology.Read(h)
	if err != nil {
		t.Fatal(err)
	}
	statePath := filepath.Join(t.TempDir(), "state.json")
	st, err := OpenState(statePath)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCPUFreq(h, st, topo, CPUFreqConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return root, c, statePath
}

func policyFile(t *testing.T, root, policy, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "sys/devices/system/cpu/cpufreq", policy, file))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func setPolicyFile(t *testing.T, root, policy, file, v string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(root, "sys/devices/system/cpu/cpufreq", policy, file), []byte(v), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCPUFreqWrites checks the exact scaling_max_freq contents after every
// step and after restore, on a copy of the Skylake-SP tree (intel_pstate,
// one policy per CPU, 800-3000 MHz; cpu 3's sibling is cpu 19).
func TestCPUFreqWrites(t *testing.T) {
	root, c, _ := newCPUFreq(t, "intel-skx-2s")
	tenant := cpuset.MustParse("3,19")
	for _, s := range []struct {
		step int
		want string
	}{{15, "2800000"}, {8, "1800000"}, {1, "800000"}, {2, "900000"}} {
		if err := c.Apply(t.Context(), "vm-a", tenant, s.step); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"policy3", "policy19"} {
			if got := policyFile(t, root, p, "scaling_max_freq"); got != s.want {
				t.Errorf("step %d: %s scaling_max_freq %q, want %q", s.step, p, got, s.want)
			}
		}
		for _, p := range []string{"policy2", "policy4", "policy18", "policy20"} {
			if got := policyFile(t, root, p, "scaling_max_freq"); got != "3000000\n" {
				t.Errorf("step %d: neighbour %s changed to %q", s.step, p, got)
			}
		}
	}
	if got := c.Limited(); !got["vm-a"].Equal(tenant) {
		t.Errorf("Limited() = %v", got)
	}
	if err := c.Apply(t.Context(), "vm-a", cpuset.Of(3), 4); err == nil || !strings.Contains(err.Error(), "SMT") {
		t.Errorf("half a core: %v", err)
	}
	if err := c.Apply(t.Context(), "vm-a", tenant, 16); err != nil { // step Steps: release
		t.Fatal(err)
	}
	for _, p := range []string{"policy3", "policy19"} {
		if got := policyFile(t, root, p, "scaling_max_freq"); got != "3000000" {
			t.Errorf("after release %s = %q", p, got)
		}
	}
	if keys := c.State.RecordKeys(RecordCPUFreq); len(keys) != 0 {
		t.Errorf("records left: %v", keys)
	}
}

// A limit someone set before us is never loosened, and restored as it was;
// scaling_min_freq bounds the limit from below.
func TestCPUFreqKeepsTighterLimits(t *testing.T) {
	root, c, _ := newCPUFreq(t, "intel-skx-2s")
	setPolicyFile(t, root, "policy5", "scaling_max_freq", "2000000\n")
	setPolicyFile(t, root, "policy21", "scaling_min_freq", "1200000\n")
	tenant := cpuset.MustParse("5,21")
	if err := c.Apply(t.Context(), "vm-a", tenant, 15); err != nil {
		t.Fatal(err)
	}
	if got := policyFile(t, root, "policy5", "scaling_max_freq"); got != "2000000" {
		t.Errorf("policy5 with an admin limit of 2 GHz: %q", got)
	}
	if got := policyFile(t, root, "policy21", "scaling_max_freq"); got != "2800000" {
		t.Errorf("policy21 step 15: %q", got)
	}
	if err := c.Apply(t.Context(), "vm-a", tenant, 1); err != nil {
		t.Fatal(err)
	}
	if got := policyFile(t, root, "policy21", "scaling_max_freq"); got != "1200000" {
		t.Errorf("policy21 step 1 with min 1.2 GHz: %q", got)
	}
	if err := c.RestoreTenant("vm-a"); err != nil {
		t.Fatal(err)
	}
	if a, b := policyFile(t, root, "policy5", "scaling_max_freq"), policyFile(t, root, "policy21", "scaling_max_freq"); a != "2000000" || b != "3000000" {
		t.Errorf("after restore: %q, %q", a, b)
	}
}

// A policy that scales CPUs of another tenant together with the polluter's
// is never limited.
func TestCPUFreqRefusesSharedPolicy(t *testing.T) {
	root, c, _ := newCPUFreq(t, "intel-skx-2s")
	setPolicyFile(t, root, "policy3", "related_cpus", "3 4 19 20\n")
	err := c.Apply(t.Context(), "vm-a", cpuset.MustParse("3,19"), 4)
	if err == nil || !strings.Contains(err.Error(), "policy3") || !strings.Contains(err.Error(), "4,20") {
		t.Fatalf("shared policy: %v", err)
	}
	if got := policyFile(t, root, "policy3", "scaling_max_freq"); got != "3000000\n" {
		t.Errorf("policy3 written anyway: %q", got)
	}
	if keys := c.State.RecordKeys(RecordCPUFreq); len(keys) != 0 {
		t.Errorf("records for a refused limit: %v", keys)
	}
}

// recordFirst is a simulated kernel that fails the test if scaling_max_freq
// is written before the state file holds the way back.
type recordFirst struct {
	t      *testing.T
	state  **StateFile
	writes int
}

func (k *recordFirst) Mkdir(*host.Host, string) error          { return nil }
func (k *recordFirst) Remove(*host.Host, string) (bool, error) { return false, nil }
func (k *recordFirst) Write(h *host.Host, p string, data []byte) (bool, error) {
	if !strings.HasSuffix(p, "/scaling_max_freq") || *k.state == nil {
		return false, nil
	}
	k.writes++
	policy := filepath.Base(filepath.Dir(p))
	var rec cpufreqRecord
	if ok, _ := (*k.state).GetRecord(RecordCPUFreq, policy, &rec); !ok && string(data) != "3000000" {
		k.t.Errorf("%s written (%s) before its original was recorded", p, data)
	}
	return false, nil
}

func TestCPUFreqRecordsBeforeWriting(t *testing.T) {
	k := &recordFirst{t: t}
	_, c, _ := newCPUFreq(t, "intel-skx-2s", host.WithKernel(k))
	k.state = &c.State
	if err := c.Apply(t.Context(), "vm-a", cpuset.MustParse("7,23"), 3); err != nil {
		t.Fatal(err)
	}
	if k.writes != 2 {
		t.Errorf("%d writes seen, want 2", k.writes)
	}
}

// TestCPUFreqRestartRestores is the kill -9 path.
func TestCPUFreqRestartRestores(t *testing.T) {
	root, c, statePath := newCPUFreq(t, "intel-skx-2s")
	if err := c.Apply(t.Context(), "vm-a", cpuset.MustParse("1,17,9,25"), 5); err != nil {
		t.Fatal(err)
	}
	setPolicyFile(t, root, "policy25", "scaling_max_freq", "2500000") // someone else's since
	st2, err := OpenState(statePath)
	if err != nil {
		t.Fatal(err)
	}
	n, err := RestoreCPUFreq(c.Host, st2, nil)
	if err != nil || n != 3 {
		t.Fatalf("restored %d, %v; want 3", n, err)
	}
	for p, want := range map[string]string{"policy1": "3000000", "policy17": "3000000", "policy9": "3000000", "policy25": "2500000"} {
		if got := policyFile(t, root, p, "scaling_max_freq"); got != want {
			t.Errorf("%s after restart restore: %q, want %q", p, got, want)
		}
	}
	if keys := st2.RecordKeys(RecordCPUFreq); len(keys) != 0 {
		t.Errorf("records left: %v", keys)
	}
}

func TestCPUFreqAMD(t *testing.T) {
	root, c, _ := newCPUFreq(t, "amd-milan-1s")
	for _, p := range []string{"policy3", "policy19"} {
		setPolicyFile(t, root, p, "scaling_available_frequencies", "3000000 2200000 1500000 \n")
	}
	if err := c.Apply(t.Context(), "vm-a", cpuset.MustParse("3,19"), 9); err != nil {
		t.Fatal(err)
	}
	// 1500 + 1500×8/15 = 2300 MHz → the P-state below, 2200 MHz.
	if got := policyFile(t, root, "policy19", "scaling_max_freq"); got != "2200000" {
		t.Errorf("Milan step 9: %q", got)
	}
	if err := c.RestoreTenant("vm-a"); err != nil {
		t.Fatal(err)
	}
	if got := policyFile(t, root, "policy3", "scaling_max_freq"); got != "3000000" {
		t.Errorf("Milan restore: %q", got)
	}
}

func TestCPUFreqSupport(t *testing.T) {
	_, h := hostCopy(t, "dev-epyc-vm", "sys")
	err := CPUFreqSupport(h, CPUFreqConfig{})
	if err == nil || !strings.Contains(err.Error(), "no cpufreq policies") {
		t.Errorf("dev VM: %v", err)
	}
	_, h = hostCopy(t, "intel-skx-2s", "sys/devices/system/cpu")
	no := false
	if err := CPUFreqSupport(h, CPUFreqConfig{Enabled: &no}); err == nil || !strings.Contains(err.Error(), "disabled by configuration") {
		t.Errorf("disabled: %v", err)
	}
	if err := CPUFreqSupport(h, CPUFreqConfig{}); err != nil {
		t.Errorf("SKX: %v", err)
	}
	if err := (&CPUFreqConfig{Steps: 1}).Validate(); err == nil {
		t.Error("1 step accepted")
	}
}
