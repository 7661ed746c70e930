package resctrl

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

func TestParseSchemata(t *testing.T) {
	// As 5.15 prints it: right-aligned names, MB before L3.
	s, err := ParseSchemata("    MB:0=100;1=100\n    L3:0=7ff;1=7ff\n")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := s.CacheMask("L3", 1); err != nil || m != 0x7ff {
		t.Errorf("L3 domain 1 = %#x, %v", m, err)
	}
	if v, ok := s.Value("MB", 0); !ok || v != "100" {
		t.Errorf("MB 0 = %q %v", v, ok)
	}
	if _, err := s.CacheMask("L3", 7); err == nil {
		t.Error("missing domain accepted")
	}
	if got := s.String(); got != "MB:0=100;1=100\nL3:0=7ff;1=7ff\n" {
		t.Errorf("String = %q", got)
	}
	for _, bad := range []string{"L3", "L3:0", "L3:x=1", "L3:0=", ":0=1", "L3:0=1;0=2", "L3:", "L3:-1=f"} {
		if _, err := ParseSchemata(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func FuzzParseSchemata(f *testing.F) {
	f.Add("L3:0=7ff;1=7ff\nMB:0=100;1=100\n")
	f.Add("    L3CODE:0=f;1=f\n    L3DATA:0=f0\n")
	f.Add("L3:0=;1=\n")
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseSchemata(in)
		if err != nil {
			return
		}
		again, err := ParseSchemata(s.String())
		if err != nil {
			t.Fatalf("re-parse of %q: %v", s.String(), err)
		}
		if again.String() != s.String() {
			t.Fatalf("round trip %q -> %q", s.String(), again.String())
		}
	})
}

func openTree(t *testing.T, name string) *host.Host {
	t.Helper()
	h, err := host.Open(filepath.Join("..", "..", "testdata", "hosts", name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func TestReadInfoTrees(t *testing.T) {
	h := openTree(t, "intel-skx-2s")
	mount, opts, ok := MountPoint(h)
	if !ok || mount != DefaultMount {
		t.Fatalf("mount = %q %v", mount, ok)
	}
	in := ReadInfo(h, mount, opts, false)
	if len(in.Warnings) > 0 {
		t.Errorf("warnings: %v", in.Warnings)
	}
	if in.L3 == nil || in.L3.Ways != 11 || in.L3.CBMMask != 0x7ff || in.L3.NumClosids != 16 || in.L3.MinCBMBits != 1 {
		t.Errorf("L3 = %+v", in.L3)
	}
	if in.MB == nil || in.MB.NumClosids != 8 || in.MB.Granularity != 10 || in.MB.Units != "percent" || in.MB.ThrottleMode != "max" {
		t.Errorf("MB = %+v", in.MB)
	}
	if !slices.Equal(in.Groups, []string{"libvirt-vm1"}) {
		t.Errorf("groups = %v", in.Groups)
	}
	if m, _ := in.Root.CacheMask("L3", 1); m != 0x7ff {
		t.Errorf("root L3 mask = %#x", m)
	}

	a := openTree(t, "amd-milan-1s")
	mount, opts, _ = MountPoint(a)
	in = ReadInfo(a, mount, opts, true)
	if in.L3 == nil || in.L3.Ways != 16 || in.MB == nil || in.MB.Units != "1/8GBps" || in.MB.Max != 2048 || in.MB.DelayLinear {
		t.Errorf("amd L3 %+v MB %+v", in.L3, in.MB)
	}
	if v, _ := in.Root.Value("MB", 3); v != "2048" {
		t.Errorf("amd root MB domain 3 = %q", v)
	}
	if in.Mon == nil || in.Mon.NumRMIDs != 256 || !in.Mon.Has("llc_occupancy") {
		t.Errorf("amd mon = %+v", in.Mon)
	}

	if _, _, ok := MountPoint(openTree(t, "dev-epyc-vm")); ok {
		t.Error("dev machine has no resctrl")
	}
}

func TestCPUSupport(t *testing.T) {
	flags := map[string]bool{"cat_l3": true, "mba": true, "avx": true}
	got := CPUSupport(func(f string) bool { return flags[f] })
	if !slices.Equal(got, []string{"cat_l3", "mba"}) {
		t.Errorf("CPUSupport = %v", got)
	}
}
