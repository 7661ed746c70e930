package topology

import "testing"

func TestIdentityFromCPUInfo(t *testing.T) {
	data := "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nstepping\t: 8\nflags\t\t: fpu vmx split_lock_detect bus_lock_detect\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n"
	id, err := IdentityFromCPUInfo(data)
	if err != nil {
		t.Fatal(err)
	}
	if !id.IsIntel() || id.IsAMD() || id.Family != 6 || id.Model != 0x8f || id.Stepping != 8 || id.ModelName != "Intel(R) Xeon(R) Platinum 8480+" {
		t.Errorf("identity = %+v", id)
	}
	if !id.HasFlag("split_lock_detect") || !id.HasFlag("vmx") || id.HasFlag("svm") {
		t.Errorf("flags = %v", id.Flags)
	}
	if s := id.String(); s != "GenuineIntel family 6 model 0x8f stepping 8 (Intel(R) Xeon(R) Platinum 8480+)" {
		t.Errorf("String = %q", s)
	}
	stanzas, _ := ParseCPUInfo(data)
	if len(stanzas) != 2 {
		t.Errorf("stanzas = %d", len(stanzas))
	}
	for _, bad := range []string{"", "processor : 0\n", "vendor_id : AuthenticAMD\ncpu family : x\nmodel : 1\nstepping : 0\n", "vendor_id : AuthenticAMD\nmodel : 1\n"} {
		if _, err := IdentityFromCPUInfo(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func FuzzIdentityFromCPUInfo(f *testing.F) {
	f.Add("vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nstepping\t: 1\nflags\t\t: svm\n")
	f.Add("processor : 0\nprocessor : 1\n\n\n:::\n")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := IdentityFromCPUInfo(s)
		if err == nil && (id.Vendor == "" || id.Family < 0 || id.Model < 0) {
			t.Fatalf("accepted incomplete identity %+v from %q", id, s)
		}
		for i := 1; i < len(id.Flags); i++ {
			if id.Flags[i-1] >= id.Flags[i] {
				t.Fatalf("flags not sorted and unique: %v", id.Flags)
			}
		}
	})
}
