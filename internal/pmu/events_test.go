package pmu

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
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
		Dir       string `json:"dir"`
		File      string `json:"file"`
		Name      string `json:"name"`
		EventCode string `json:"event_code"`
		Umask     string `json:"umask"`
		Role      string `json:"role"`
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

// Every bus-lock event in the table must be the kernel's: same name, file,
// event code and umask in the microarchitecture's pmu-events directory.
func TestBusLockEventsMatchKernel(t *testing.T) {
	x := loadExcerpt(t)
	seen := map[string]bool{}
	for _, e := range table {
		m := e.arch
		if seen[m.Dir] {
			continue
		}
		seen[m.Dir] = true
		found := false
		for _, k := range x.Events {
			if k.Dir != m.Dir || k.Role != "bus_lock" {
				continue
			}
			found = true
			if k.Name != m.BusLock.Name || k.File != m.BusLock.File ||
				hex(t, k.EventCode) != uint64(m.BusLock.Code) || hex(t, k.Umask) != uint64(m.BusLock.Umask) {
				t.Errorf("%s: table has %s %s %#x/%#x, kernel has %s %s %s/%s",
					m.Dir, m.BusLock.Name, m.BusLock.File, m.BusLock.Code, m.BusLock.Umask, k.Name, k.File, k.EventCode, k.Umask)
			}
		}
		if !found {
			t.Errorf("%s: no kernel bus-lock entry in the excerpt to check against", m.Dir)
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
