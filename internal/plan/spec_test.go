package plan

import (
	"strings"
	"testing"
)

func TestParseSpec(t *testing.T) {
	s, err := Parse([]byte(`reserve: "0,1"
vms:
  - name: db
    vcpus: 16
    memory: 64GiB
    policy: 1to1
    smt: true
    cache: passthrough
    phys_bits: host
  - name: web.1
    vcpus: 2
    memory: 1536
    policy: shared
    phys_bits: 42
`), "vms.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if s.Reserve != "0,1" || len(s.VMs) != 2 {
		t.Fatalf("spec = %+v", s)
	}
	db, web := s.VMs[0], s.VMs[1]
	if db.Name != "db" || db.VCPUs != 16 || db.Memory != 64<<20 || db.Policy != OneToOne || !db.SMT || db.Cache != CachePassthrough || db.PhysBits.Mode != "host" || db.Line != 3 {
		t.Errorf("db = %+v", db)
	}
	if web.Memory != 1536<<10 || web.PhysBits != (PhysBits{Mode: "bits", Bits: 42}) || web.PhysBits.String() != "42" || web.Line != 10 || web.Cache != CacheAuto {
		t.Errorf("web = %+v", web)
	}
}

func TestParseSpecErrors(t *testing.T) {
	tests := []struct{ yaml, want string }{
		{"", "empty spec"},
		{"vms: []\n", "at least one VM"},
		{"vms:\n  - name: a\n    vcpus: 2\n    memory: 1GiB\n    policy: 1to1\n    cpus: 3\n", `line 6: unknown key "cpus" (did you mean "vcpus"?)`},
		{"vm:\n  - name: a\n", `line 1: unknown key "vm" (did you mean "vms"?)`},
		{"vms:\n  - name: a\n    vcpus: 2\n    memory: 1GiB\n    policy: pinned\n", `line 2: vm "a": policy "pinned"`},
		{"vms:\n  - name: a\n    vcpus: 0\n    memory: 1GiB\n    policy: 1to1\n", "line 2: vm \"a\": vcpus: 0 outside"},
		{"vms:\n  - name: a\n    vcpus: 2\n    policy: 1to1\n", "memory: required"},
		{"vms:\n  - name: a\n    vcpus: 2\n    memory: 4 parsecs\n    policy: 1to1\n", "line 4: memory \"4 parsecs\""},
		{"vms:\n  - name: a\n    vcpus: 2\n    memory: 1GiB\n    policy: 1to1\n    phys_bits: 99\n", "line 6: phys_bits \"99\""},
		{"vms:\n  - name: a\n    vcpus: 2\n    memory: 1GiB\n    policy: 1to1\n    cache: huge\n", `cache "huge"`},
		{"vms:\n  - {name: a, vcpus: 1, memory: 1GiB, policy: shared}\n  - {name: a, vcpus: 1, memory: 1GiB, policy: shared}\n", `line 3: vm name "a" used twice`},
		{"vms:\n  - {name: 'a b', vcpus: 1, memory: 1GiB, policy: shared}\n", "name: 1-64"},
		{"vms:\n  - {name: a, vcpus: 1, memory: 1MiB, policy: shared}\n", "less than the 16MiB"},
	}
	for _, tc := range tests {
		_, err := Parse([]byte(tc.yaml), "x.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "x.yaml: ") {
			t.Errorf("Parse(%q) = %v, want an error with %q", tc.yaml, err, tc.want)
		}
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want Size
		str  string
	}{
		{"4GiB", 4 << 20, "4GiB"},
		{"4G", 4 << 20, "4GiB"},
		{"4GB", 4 << 20, "4GiB"},
		{"512MiB", 512 << 10, "512MiB"},
		{"1536", 1536 << 10, "1536MiB"},
		{"2TiB", 2 << 30, "2TiB"},
		{"2772GiB", 2772 << 20, "2772GiB"},
		{"100KiB", 100, "100KiB"},
	}
	for _, tc := range tests {
		got, err := ParseSize(tc.in)
		if err != nil || got != tc.want || got.String() != tc.str {
			t.Errorf("ParseSize(%q) = %d (%s), %v; want %d (%s)", tc.in, got, got, err, tc.want, tc.str)
		}
	}
	for _, bad := range []string{"", "G", "-1G", "1.5G", "12B", "0", "9999999T"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}

func FuzzParseSpec(f *testing.F) {
	f.Add([]byte("vms:\n  - {name: a, vcpus: 2, memory: 1GiB, policy: 1to1, smt: true}\n"))
	f.Add([]byte("reserve: 0-1\nvms:\n  - {name: b, vcpus: 64, memory: 1T, policy: per-llc, phys_bits: 46}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data, "fuzz")
		if err != nil {
			return
		}
		for _, vm := range s.VMs {
			if vm.VCPUs < 1 || vm.VCPUs > MaxVCPUs || vm.Memory < 16<<10 || vm.PhysBits.Mode == "" {
				t.Fatalf("invalid VM accepted: %+v", vm)
			}
		}
	})
}
