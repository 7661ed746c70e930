package topology

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Identity is what the CPU says it is, from /proc/cpuinfo.
type Identity struct {
	Vendor    string   `json:"vendor"` // "GenuineIntel", "AuthenticAMD", "" when unknown
	Family    int      `json:"family"`
	Model     int      `json:"model"`
	Stepping  int      `json:"stepping"`
	ModelName string   `json:"model_name"`
	Microcode string   `json:"microcode,omitempty"`
	Flags     []string `json:"-"` // sorted; large, so only summarised in output
}

// HasFlag reports whether the CPU advertises a /proc/cpuinfo flag.
func (id Identity) HasFlag(f string) bool {
	_, ok := slices.BinarySearch(id.Flags, f)
	return ok
}

// IsIntel and IsAMD name the two vendors crosstalk has PMU tables for.
func (id Identity) IsIntel() bool { return id.Vendor == "GenuineIntel" }

// IsAMD reports an AMD (or Hygon, which shares AMD's PMU and resctrl) CPU.
func (id Identity) IsAMD() bool { return id.Vendor == "AuthenticAMD" || id.Vendor == "HygonGenuine" }

// String is "GenuineIntel family 6 model 0x55 (Intel(R) Xeon(R) ...)".
func (id Identity) String() string {
	return fmt.Sprintf("%s family %d model %#x stepping %d (%s)", id.Vendor, id.Family, id.Model, id.Stepping, id.ModelName)
}

// ParseCPUInfo splits /proc/cpuinfo into one key/value map per processor.
func ParseCPUInfo(data string) ([]map[string]string, error) {
	var out []map[string]string
	cur := map[string]string{}
	flush := func() {
		if len(cur) > 0 {
			out = append(out, cur)
			cur = map[string]string{}
		}
	}
	for _, line := range strings.Split(data, "\n") {
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue // stray line; the kernel always writes "key\t: value"
		}
		k = strings.TrimSpace(k)
		if _, dup := cur[k]; dup && k == "processor" {
			flush() // a stanza without a blank separator
		}
		cur[k] = strings.TrimSpace(v)
	}
	flush()
	if len(out) == 0 {
		return nil, fmt.Errorf("cpuinfo: no processor entries")
	}
	return out, nil
}

// IdentityFromCPUInfo derives the CPU identity from the first processor
// entry. Missing numeric fields are an error: PMU event choice depends on them.
func IdentityFromCPUInfo(data string) (Identity, error) {
	stanzas, err := ParseCPUInfo(data)
	if err != nil {
		return Identity{}, err
	}
	s := stanzas[0]
	id := Identity{
		Vendor:    s["vendor_id"],
		ModelName: s["model name"],
		Microcode: s["microcode"],
	}
	flags := strings.Fields(s["flags"])
	slices.Sort(flags)
	id.Flags = slices.Compact(flags)
	if id.Vendor == "" {
		return id, fmt.Errorf("cpuinfo: no vendor_id (not an x86 CPU?)")
	}
	for _, f := range []struct {
		key string
		dst *int
	}{{"cpu family", &id.Family}, {"model", &id.Model}, {"stepping", &id.Stepping}} {
		v, ok := s[f.key]
		if !ok {
			return id, fmt.Errorf("cpuinfo: no %q field", f.key)
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return id, fmt.Errorf("cpuinfo: %q = %q is not a number", f.key, v)
		}
		*f.dst = n
	}
	return id, nil
}
