package sim

import (
	"strings"
	"testing"
	"time"
)

func TestParseErrors(t *testing.T) {
	base := "name: p\nmachine: {cpu: skylakex, sockets: 1, cores_per_socket: 4}\n"
	for _, c := range []struct{ yaml, want string }{
		{base + "tenants:\n  - name: a\n    role: victim\n    cpus: \"0\"\n    colour: red\n", `line 7: unknown key "colour"`},
		{base + "tenants:\n  - {name: a, role: victim, cpus: \"0\", phases: [{from: 0s, bus_lock: 1}]}\n", `unknown key "bus_lock" (did you mean "bus_locks"?)`},
		{base + "tenants:\n  - name: a\n    role: hero\n    cpus: \"0\"\n", `line 4: tenant "a": role "hero"`},
		{base + "tenants:\n  - {name: a, role: victim, cpus: \"0-9\"}\n", "the machine has CPUs 0-3"},
		{base + "tenants:\n  - {name: a, role: victim, cpus: \"0\", phases: [{from: 0s, working_set: lots}]}\n", `"lots" is not a size`},
		{base + "tenants:\n  - {name: a, role: victim, cpus: \"0\", phases: [{from: 0s, cpu: 2}]}\n", "cpu 2 outside 0-1"},
		{base + "tenants:\n  - {name: a, role: victim, cpus: \"0\", phases: [{from: 0s}, {from: 0s}]}\n", "must be after"},
		{base + "tenants:\n  - {name: a, role: victim, cpus: auto}\n", "cpus auto needs vcpus"},
		{base + "tenants:\n  - {name: a, role: victim, cpus: \"0\"}\n  - {name: a, role: victim, cpus: \"1\"}\n", `name "a" repeats`},
		{"name: p\nmachine: {cpu: pentium, sockets: 1, cores_per_socket: 4}\ntenants: [{name: a, role: victim, cpus: \"0\"}]\n", `cpu: "pentium" unknown`},
		{base + "agent: {interval: 1ms}\ntenants: [{name: a, role: victim, cpus: \"0\"}]\n", "interval: 1ms outside"},
		{base + "agent: {intervall: 1s}\ntenants: [{name: a, role: victim, cpus: \"0\"}]\n", `unknown key "intervall" (did you mean "interval"?)`},
		{base, "tenants: at least one"},
	} {
		_, err := Parse([]byte(c.yaml), "t.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant …%s…", c.yaml, err, c.want)
		}
	}
}

func TestParseResolves(t *testing.T) {
	sc := mustParse(t, `
name: r
machine: {cpu: icelakex, sockets: 1, cores_per_socket: 4, threads_per_core: 2}
tenants:
  - {name: pinned, role: victim, cpus: "0,4"}
  - name: crowd
    kind: container
    role: bystander
    count: 3
    cpus: auto
    vcpus: 2
    vary: 0.5
    phases:
      - {from: 0s, cpu: 0.4, llc_refs: 1M, power: 10W}
      - {from: 10s, bus_locks: 5k}
`)
	ts := sc.Resolved()
	if len(ts) != 4 || ts[1].Name != "crowd-0001" || ts[3].Name != "crowd-0003" {
		t.Fatalf("tenants %v", ts)
	}
	// auto packs over the CPUs nobody is pinned to: 1,2,3,5,6,7.
	var got []string
	for _, tn := range ts[1:] {
		got = append(got, tn.CPUSet.String())
	}
	if strings.Join(got, " ") != "1-2 3,5 6-7" {
		t.Errorf("auto CPUs %v", got)
	}
	c := ts[2]
	if len(c.Phases) != 2 || c.Phases[1].LLCRefs != c.Phases[0].LLCRefs || c.Phases[1].BusLocks != 5000 || c.Phases[0].BusLocks != 0 {
		t.Errorf("phase inheritance: %+v", c.Phases)
	}
	if f := c.Phases[0].Power / 10; f < 0.5 || f > 1.5 || c.Phases[0].CPU != 0.4*f {
		t.Errorf("vary: power %g cpu %g", c.Phases[0].Power, c.Phases[0].CPU)
	}
	if ts[0].Threads != 3 || ts[1].Threads != 2 {
		t.Errorf("threads: vm %d container %d", ts[0].Threads, ts[1].Threads)
	}
	if sc.Duration != time.Minute || sc.Step != 50*time.Millisecond || sc.Noise != 0.02 || sc.Seed != 1 {
		t.Errorf("defaults: %s %s %g %d", sc.Duration, sc.Step, sc.Noise, sc.Seed)
	}
	if ts[0].PhaseAt(0) != 0 || ts[2].PhaseAt(11*time.Second) != 1 {
		t.Error("PhaseAt")
	}
}

func TestBuiltinsParse(t *testing.T) {
	want := []string{"alita-buslock", "alita-llc", "alita-membw", "alita-power", "crowd", "kyoto-permits", "scale"}
	if got := Builtins(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("built-ins %v, want %v", got, want)
	}
	for _, name := range want {
		sc, err := Load(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		roles := map[string]int{}
		for _, tn := range sc.Resolved() {
			roles[tn.Role]++
		}
		if roles[RoleVictim] == 0 || roles[RolePolluter] == 0 {
			t.Errorf("%s: roles %v: needs a victim and a polluter", name, roles)
		}
	}
	if sc, _ := Load("scale"); len(sc.Resolved()) != 1000 || sc.Machine.CPUs() != 224 || sc.Machine.Sockets != 2 {
		t.Errorf("scale: %d tenants on %d CPUs", len(sc.Resolved()), sc.Machine.CPUs())
	}
	if _, err := Load("nope"); err == nil || !strings.Contains(err.Error(), "no built-in scenario") {
		t.Errorf("unknown scenario: %v", err)
	}
}

func TestUnits(t *testing.T) {
	for s, want := range map[string]int64{"4MiB": 4 << 20, "1.375MiB": 1441792, "33MB": 33e6, "64KiB": 65536, "4096": 4096, "2G": 2 << 30} {
		if got, err := ParseBytes(s); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, bad := range []string{"", "MiB", "-1MiB", "4 apples"} {
		if _, err := ParseBytes(bad); err == nil {
			t.Errorf("ParseBytes(%q) accepted", bad)
		}
	}
	sc := mustParse(t, "name: u\nmachine: {cpu: zen4, sockets: 1, cores_per_socket: 2, memory_bandwidth: 12.5GB/s, tdp: 90W}\ntenants: [{name: a, role: victim, cpus: \"0\", phases: [{from: 0s, bus_locks: 2.5M, memory_bandwidth: 6.4GB/s}]}]\n")
	b := sc.Resolved()[0].Phases[0]
	if sc.Machine.MemoryBandwidth != 12.5e9 || sc.Machine.TDP != 90 || b.BusLocks != 2.5e6 || b.LLCRefs != 1e8 {
		t.Errorf("units: %v %v %v %v", sc.Machine.MemoryBandwidth, sc.Machine.TDP, b.BusLocks, b.LLCRefs)
	}
}
