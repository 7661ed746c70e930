package pmu

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// excerpt is testdata/pmu-events-excerpt.json: entries of the kernel's
// tools/perf/pmu-events/arch/x86 data (mapfile.csv rows and event codes),
// each with the torvalds/linux commit it was read at.
type excerpt struct {
	Source struct {
		Repo, Commit, Path string
	}
	Mapfile []struct {
		Regex string `json:"regex"`
		Dir   string `json:"dir"`
	}
	Events []struct {
		Dir       string   `json:"dir"`
		File      string   `json:"file"`
		Name      string   `json:"name"`
		EventCode string   `json:"event_code"`
		Umask     string   `json:"umask"`
		Role      string   `json:"role"`
		Parts     []string `json:"parts"`
		Commit    string   `json:"commit"`
		Repo      string   `json:"repo"`
	}
}

func loadExcerpt(t *testing.T) excerpt {
	t.Helper()
	b, err := os.ReadFile("testdata/pmu-events-excerpt.json")
	if err != nil {
		t.Fatal(err)
	}
	var x excerpt
	if err := json.Unmarshal(b, &x); err != nil {
		t.Fatal(err)
	}
	return x
}

func hex(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(s), "0x"), 16, 64)
	if err != nil {
		t.Fatalf("bad hex %q", s)
	}
	return v
}

// kernelRole is the excerpt's role for each of crosstalk's event roles.
var kernelRole = map[string]string{
	"cycles": "cycles", "instructions": "instructions",
	"llc_misses": "llc_miss", "llc_references": "llc_reference", "bus_locks": "bus_lock",
}

// Every event in the table must be the kernel's: same name, file, event code
// and umask in the microarchitecture's pmu-events directory. An event that
// ORs several kernel events (Parts) must name events that exist there with
// the same code and file, and its umask must be exactly their union.
func TestEventsMatchKernel(t *testing.T) {
	x := loadExcerpt(t)
	seen := map[string]bool{}
	for _, e := range table {
		m := e.arch
		if seen[m.Dir] {
			continue
		}
		seen[m.Dir] = true
		if m.Cycles.Zero() || m.Instructions.Zero() || m.BusLock.Zero() {
			t.Errorf("%s: cycles, instructions and bus locks are required on every known CPU", m.Dir)
		}
		covered := map[string]bool{}
		for _, ne := range m.Events() {
			role := kernelRole[ne.Role]
			covered[role] = true
			ev := ne.Event
			var found []string
			for _, k := range x.Events {
				if k.Dir != m.Dir || k.Role != role {
					continue
				}
				found = append(found, k.Name)
				if k.Name != ev.Name || k.File != ev.File ||
					hex(t, k.EventCode) != uint64(ev.Code) || hex(t, k.Umask) != uint64(ev.Umask) {
					t.Errorf("%s %s: table has %s %s %#x/%#x, kernel has %s %s %s/%s",
						m.Dir, ne.Role, ev.Name, ev.File, ev.Code, ev.Umask, k.Name, k.File, k.EventCode, k.Umask)
				}
				if !slices.Equal(k.Parts, ev.Parts) {
					t.Errorf("%s %s: parts %v, excerpt %v", m.Dir, ne.Role, ev.Parts, k.Parts)
				}
			}
			if len(found) != 1 {
				t.Errorf("%s %s: want exactly one kernel entry to check against, found %v", m.Dir, ne.Role, found)
			}
			if len(ev.Parts) == 0 {
				continue
			}
			var union uint64
			for _, p := range ev.Parts {
				ok := false
				for _, k := range x.Events {
					if k.Dir == m.Dir && k.Name == p && k.File == ev.File && hex(t, k.EventCode) == uint64(ev.Code) {
						union |= hex(t, k.Umask)
						ok = true
						break
					}
				}
				if !ok {
					t.Errorf("%s %s: part %s (%s, code %#x) not in the kernel data excerpt", m.Dir, ne.Role, p, ev.File, ev.Code)
				}
			}
			if union != uint64(ev.Umask) {
				t.Errorf("%s %s: umask %#x, union of its parts %#x", m.Dir, ne.Role, ev.Umask, union)
			}
		}
		// No excerpt entry for a role the table leaves out (Zen 1 llc_miss).
		for _, k := range x.Events {
			if k.Dir == m.Dir && slices.Contains([]string{"cycles", "instructions", "llc_miss", "llc_reference", "bus_lock"}, k.Role) && !covered[k.Role] {
				t.Errorf("%s: excerpt has a %s entry (%s) the table does not use", m.Dir, k.Role, k.Name)
			}
		}
	}
	for _, k := range x.Events {
		if len(k.Commit) != 40 {
			t.Errorf("%s %s: commit %q is not a full hash", k.Dir, k.Name, k.Commit)
		}
	}
}

// Lookup must pick the directory the kernel's mapfile.csv picks, for every
// family/model/stepping in the families we cover. perf builds the id as
// "Vendor-Family-MODEL[-STEPPING]" (family decimal, model and stepping
// uppercase hex) and takes the first row whose regex matches all of it.
func TestLookupMatchesMapfile(t *testing.T) {
	x := loadExcerpt(t)
	type row struct {
		re       *regexp.Regexp
		dir      string
		stepping bool
	}
	var rows []row
	for _, m := range x.Mapfile {
		re := strings.ReplaceAll(m.Regex, "[[:xdigit:]]", "[0-9A-Fa-f]")
		// perf's is_full_cpuid(): a row names a stepping when it holds exactly
		// three '-' (dashes inside a bracket expression count too).
		rows = append(rows, row{regexp.MustCompile("^(?:" + re + ")$"), m.Dir, strings.Count(m.Regex, "-") == 3})
	}
	kernelDir := func(vendor string, family, model, stepping int) string {
		for _, r := range rows {
			id := fmt.Sprintf("%s-%d-%X", vendor, family, model)
			if r.stepping {
				id += fmt.Sprintf("-%X", stepping)
			}
			if r.re.MatchString(id) {
				return r.dir
			}
		}
		return ""
	}
	families := []struct {
		vendor string
		family int
	}{{"GenuineIntel", 6}, {"AuthenticAMD", 0x17}, {"AuthenticAMD", 0x19}, {"AuthenticAMD", 0x1a}}
	checked := 0
	for _, f := range families {
		for model := 0; model < 256; model++ {
			for stepping := 0; stepping < 16; stepping++ {
				want := kernelDir(f.vendor, f.family, model, stepping)
				m, ok := Lookup(f.vendor, f.family, model, stepping)
				got := ""
				if ok {
					got = m.Dir
				}
				if got != want {
					t.Fatalf("%s family %#x model %#x stepping %d: Lookup = %q, kernel mapfile = %q", f.vendor, f.family, model, stepping, got, want)
				}
				if ok {
					checked++
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no model matched: excerpt and table disagree completely")
	}
}

func TestConfigEncoding(t *testing.T) {
	tests := []struct {
		vendor string
		family int
		model  int
		step   int
		name   string
		config uint64
	}{
		{"GenuineIntel", 6, 0x55, 4, "SQ_MISC.SPLIT_LOCK", 0x10f4},
		{"GenuineIntel", 6, 0x55, 7, "SQ_MISC.SPLIT_LOCK", 0x10f4}, // Cascade Lake
		{"GenuineIntel", 6, 0x6a, 6, "SQ_MISC.BUS_LOCK", 0x10f4},
		{"GenuineIntel", 6, 0x8f, 8, "SQ_MISC.BUS_LOCK", 0x102c},
		{"GenuineIntel", 6, 0xad, 1, "SQ_MISC.BUS_LOCK", 0x102c},
		{"AuthenticAMD", 0x17, 0x31, 0, "ls_locks.bus_lock", 0x125},
		{"AuthenticAMD", 0x19, 0x01, 1, "ls_locks.bus_lock", 0x125},
		{"AuthenticAMD", 0x19, 0x11, 1, "ls_locks.bus_lock", 0x125},
		{"AuthenticAMD", 0x1a, 0x02, 0, "ls_locks.bus_lock", 0x125},
	}
	for _, tc := range tests {
		m, ok := Lookup(tc.vendor, tc.family, tc.model, tc.step)
		if !ok || m.BusLock.Name != tc.name || m.BusLockConfig() != tc.config {
			t.Errorf("%s %#x/%#x: %+v config %#x, want %s %#x", tc.vendor, tc.family, tc.model, m.BusLock, m.BusLockConfig(), tc.name, tc.config)
		}
	}
	// AMD's extended event select bits 8-11 go to config bits 32-35.
	amd := Microarch{Vendor: "AuthenticAMD"}
	if got := amd.Config(Event{Code: 0x165, Umask: 0x1}); got != 0x1_0000_0165 {
		t.Errorf("AMD extended event config = %#x", got)
	}
	for _, miss := range [][4]int{{6, 0x9e, 0, 0}, {6, 0xaf, 0, 0}, {0x1a, 0x50, 0, 0}, {0x10, 0, 0, 0}} {
		if m, ok := Lookup("GenuineIntel", miss[0], miss[1], miss[2]); ok && miss[0] == 6 {
			t.Errorf("Intel model %#x matched %s; no verified event expected", miss[1], m.Dir)
		}
	}
	if _, ok := Lookup("HygonGenuine", 0x18, 0, 0); ok {
		t.Error("Hygon matched")
	}
	if NoEventReason("GenuineIntel", 6, 0xaf) == "" || NoEventReason("", 0, 0) != "CPU vendor unknown" {
		t.Error("NoEventReason")
	}
}

// The encodings the agent opens for the roles, per vendor: Intel events in
// bits 0-15, AMD with the extended event select and ORed unit masks.
func TestRoleConfigs(t *testing.T) {
	type want struct{ cycles, inst, miss, ref uint64 }
	for _, tc := range []struct {
		vendor              string
		family, model, step int
		want                want
		noMiss              bool
	}{
		{"GenuineIntel", 6, 0x55, 4, want{0x3c, 0xc0, 0x412e, 0x4f2e}, false},
		{"GenuineIntel", 6, 0x8f, 8, want{0x3c, 0xc0, 0x412e, 0x4f2e}, false},
		{"AuthenticAMD", 0x17, 0x01, 0, want{0x76, 0xc0, 0, 0x0964}, true},
		{"AuthenticAMD", 0x17, 0x31, 0, want{0x76, 0xc0, 0x5843, 0x5a43}, false},
		{"AuthenticAMD", 0x19, 0x01, 1, want{0x76, 0xc0, 0x5c44, 0x5e44}, false},
		{"AuthenticAMD", 0x19, 0x11, 1, want{0x76, 0xc0, 0xdc44, 0xde44}, false},
		{"AuthenticAMD", 0x1a, 0x02, 0, want{0x76, 0xc0, 0xdc44, 0xde44}, false},
	} {
		m, ok := Lookup(tc.vendor, tc.family, tc.model, tc.step)
		if !ok {
			t.Fatalf("%s %#x/%#x unknown", tc.vendor, tc.family, tc.model)
		}
		got := want{m.Config(m.Cycles), m.Config(m.Instructions), m.Config(m.LLCMisses), m.Config(m.LLCReferences)}
		if tc.noMiss {
			if !m.LLCMisses.Zero() {
				t.Errorf("%s: llc_misses should be absent", m.Dir)
			}
			got.miss = 0
		}
		if got != tc.want {
			t.Errorf("%s: configs %#v, want %#v", m.Dir, got, tc.want)
		}
	}
}
