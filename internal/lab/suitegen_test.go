package lab

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

var allPrograms = Programs{StressNG: true, Redis: true}

func TestGenerateIsDeterministic(t *testing.T) {
	cpus := cpuset.Of(0, 1)
	distinct := map[string]bool{}
	for seed := int64(0); seed < 50; seed++ {
		a, err := Generate(seed, cpus, allPrograms)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Generate(seed, cpus, allPrograms)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d drew two different scenarios:\n%+v\n%+v", seed, a.Scenario, b.Scenario)
		}
		distinct[a.Describe()] = true
	}
	if len(distinct) < 40 {
		t.Errorf("50 seeds drew only %d distinct scenarios", len(distinct))
	}
}

// Over 200 seeds every kind of victim, polluter, timing and placement is
// drawn, control runs are about one in five, and every draw keeps the lab's
// rules and the suite's own.
func TestGenerateCoverageAndConstraints(t *testing.T) {
	cpus := cpuset.Of(0, 1)
	seen := map[string]int{}
	for seed := int64(1000); seed < 1200; seed++ {
		g, err := Generate(seed, cpus, allPrograms)
		if err != nil {
			t.Fatal(err)
		}
		s := g.Scenario
		seen["class/"+g.Class]++
		seen["victim/"+g.Victim]++
		seen["timing/"+g.Class+"/"+g.Timing]++
		if g.Class == ClassPolluter {
			seen["polluter/"+g.Polluter]++
			seen["placement/"+g.Placement]++
		}
		for _, b := range g.Bystanders {
			seen["bystander/"+b]++
		}
		seen["bystanders/"+string(rune('0'+len(g.Bystanders)))]++

		if s.Phase < 6*time.Second || s.Phase > 8*time.Second {
			t.Errorf("seed %d: phase %v outside 6-8 s", seed, s.Phase)
		}
		if err := s.validate(); err != nil {
			t.Errorf("seed %d: %v", seed, err)
		}
		if short, err := s.WithPhase(2 * time.Second); err != nil {
			t.Errorf("seed %d at 2 s phases: %v", seed, err)
		} else if short.Phase != 2*time.Second {
			t.Errorf("seed %d: WithPhase gave %v", seed, short.Phase)
		}
		var victim, polluter Tenant
		polluters := 0
		for _, tn := range s.Tenants {
			if !tn.CPUSet().IsSubsetOf(cpus) {
				t.Errorf("seed %d: %s on CPUs %s outside %s", seed, tn.Name, tn.CPUs, cpus)
			}
			if tn.SplitLocks() && tn.RunLength(s.Phase) > MaxSplitLockPhase {
				t.Errorf("seed %d: %s makes split locks for %v", seed, tn.Name, tn.RunLength(s.Phase))
			}
			switch tn.Role {
			case RoleVictim:
				victim = tn
			case RolePolluter:
				polluter = tn
				polluters++
			case RoleBystander:
				if tn.Load == "splitlock" || tn.Load == "stream" || (tn.Load == "cachethrash" && !strings.Contains(strings.Join(tn.Args, " "), "256KiB")) {
					t.Errorf("seed %d: bystander %s runs a polluting load %s %v", seed, tn.Name, tn.Load, tn.Args)
				}
			}
		}
		if n := len(g.Bystanders); n > 3 || len(s.Tenants) != 1+polluters+n {
			t.Errorf("seed %d: %d bystanders among %d tenants", seed, n, len(s.Tenants))
		}
		if g.Class == ClassControl {
			if polluters != 0 {
				t.Errorf("seed %d: control run with a polluter", seed)
			}
			continue
		}
		if polluters != 1 {
			t.Fatalf("seed %d: %d polluters", seed, polluters)
		}
		switch g.Placement {
		case PlaceWithVictim:
			if polluter.CPUs != victim.CPUs {
				t.Errorf("seed %d: with-victim polluter on %s, victim on %s", seed, polluter.CPUs, victim.CPUs)
			}
		case PlaceAlone, PlaceWithBystander:
			shared := 0
			for _, tn := range s.Tenants {
				if tn.Role != RolePolluter && tn.CPUs == polluter.CPUs {
					shared++
				}
			}
			if g.Placement == PlaceAlone && shared != 0 || g.Placement == PlaceWithBystander && (shared == 0 || polluter.CPUs == victim.CPUs) {
				t.Errorf("seed %d: %s polluter on %s shares it with %d tenants", seed, g.Placement, polluter.CPUs, shared)
			}
		}
		switch g.Timing {
		case TimingBeforeAgent:
			if s.PolicyStart <= polluter.Start {
				t.Errorf("seed %d: before-agent polluter starts at %v, agent at %v", seed, polluter.Start, s.PolicyStart)
			}
		case TimingPause:
			if polluter.Pause == 0 || polluter.Resume <= polluter.Pause {
				t.Errorf("seed %d: pause window %v-%v", seed, polluter.Pause, polluter.Resume)
			}
		case TimingLate:
			if polluter.Start < 500*time.Millisecond || polluter.Start > 3*time.Second {
				t.Errorf("seed %d: late start %v", seed, polluter.Start)
			}
		case TimingEarlyStop, TimingBurst:
			if polluter.Stop == 0 || polluter.Stop > s.Phase-1500*time.Millisecond {
				t.Errorf("seed %d: %s stop %v of %v", seed, g.Timing, polluter.Stop, s.Phase)
			}
		}
	}
	want := []string{
		"victim/chase-256KiB", "victim/chase-1MiB", "victim/chase-4MiB", "victim/chase-16MiB", "victim/server", "victim/redis",
		"victim/stress-ng-matrix", "victim/stress-ng-memcpy",
		"polluter/splitlock", "polluter/stream", "polluter/cachethrash", "polluter/stress-ng-lockbus", "polluter/stress-ng-stream", "polluter/stress-ng-cache",
		"timing/polluter/whole", "timing/polluter/late", "timing/polluter/early-stop", "timing/polluter/burst", "timing/polluter/before-agent", "timing/polluter/pause",
		"timing/control/whole", "timing/control/before-agent",
		"placement/alone", "placement/with-bystander", "placement/with-victim",
		"bystander/steady", "bystander/bursty", "bystander/phases", "bystander/cache-chase", "bystander/cache-thrash", "bystander/redis",
		"bystanders/0", "bystanders/1", "bystanders/2", "bystanders/3",
	}
	for _, k := range want {
		if seen[k] == 0 {
			t.Errorf("200 seeds never drew %s", k)
		}
	}
	if c := seen["class/control"]; c < 25 || c > 60 {
		t.Errorf("%d control runs of 200, want about 40", c)
	}
}

// Every redis server a run draws listens below Linux's ephemeral port range
// (32768-60999 by default), whatever the seed: there, redis-benchmark's
// client connections of an earlier run, in TIME_WAIT for a minute, can hold
// the port and the server cannot bind it. A run's servers have ports of
// their own.
func TestGenerateRedisPortsOutsideEphemeralRange(t *testing.T) {
	port := regexp.MustCompile(`redis-server --port (\d+)`)
	servers := 0
	for seed := int64(0); seed < 100000; seed += 37 {
		g, err := Generate(seed, cpuset.Of(0, 1), allPrograms)
		if err != nil {
			t.Fatal(err)
		}
		used := map[int]bool{}
		for _, tn := range g.Scenario.Tenants {
			m := port.FindStringSubmatch(strings.Join(tn.Command, " "))
			if m == nil {
				continue
			}
			servers++
			p, _ := strconv.Atoi(m[1])
			if p < 1024 || p >= 32768 {
				t.Errorf("seed %d: %s's redis on port %d, inside the ephemeral range", seed, tn.Name, p)
			}
			if used[p] {
				t.Errorf("seed %d: two redis servers on port %d", seed, p)
			}
			used[p] = true
		}
	}
	if servers < 100 {
		t.Fatalf("only %d redis servers drawn", servers)
	}
}

// Without the external programs the generator draws only built-in loads;
// on one CPU every polluter shares the victim's.
func TestGenerateRespectsHost(t *testing.T) {
	for seed := int64(0); seed < 100; seed++ {
		g, err := Generate(seed, cpuset.Of(3), Programs{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tn := range g.Scenario.Tenants {
			if len(tn.Command) > 0 {
				t.Errorf("seed %d: %s runs %v without external programs", seed, tn.Name, tn.Command)
			}
			if tn.CPUs != "3" {
				t.Errorf("seed %d: %s on CPU %s, only 3 allowed", seed, tn.Name, tn.CPUs)
			}
		}
		if g.Class == ClassPolluter && g.Placement != PlaceWithVictim {
			t.Errorf("seed %d: placement %s on one CPU", seed, g.Placement)
		}
	}
	if _, err := Generate(1, cpuset.Set{}, Programs{}); err == nil {
		t.Error("generated a scenario with no CPUs")
	}
}

func TestFindPrograms(t *testing.T) {
	only := func(have ...string) func(string) (string, error) {
		return func(name string) (string, error) {
			for _, h := range have {
				if h == name {
					return "/usr/bin/" + name, nil
				}
			}
			return "", errors.New("not found")
		}
	}
	tests := []struct {
		have []string
		want Programs
	}{
		{nil, Programs{}},
		{[]string{"stress-ng"}, Programs{StressNG: true}},
		{[]string{"redis-server"}, Programs{}}, // no benchmark: no redis
		{[]string{"redis-server", "redis-benchmark", "stress-ng"}, Programs{StressNG: true, Redis: true}},
	}
	for _, tc := range tests {
		if got := FindPrograms(only(tc.have...)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("FindPrograms(%v) = %+v, want %+v", tc.have, got, tc.want)
		}
	}
}

func TestAllowedCPUs(t *testing.T) {
	tests := []struct {
		name, online, status, want string
	}{
		{"affinity narrower", "0-3", "Name:\tx\nCpus_allowed_list:\t1-2\n", "1-2"},
		{"affinity wider", "0-1", "Cpus_allowed_list:\t0-7\n", "0-1"},
		{"no status line", "0-1", "Name:\tx\n", "0-1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, map[string]string{
				"sys/devices/system/cpu/online": tc.online + "\n",
				"proc/self/status":              tc.status,
			})
			h, err := host.Open(root)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			got, err := AllowedCPUs(h)
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tc.want {
				t.Errorf("AllowedCPUs = %s, want %s", got, tc.want)
			}
		})
	}
}

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// --polluters narrows or extends the kinds drawn; naming the default kinds
// draws the default runs, and splitlock-paced is a built-in split-lock loop
// at one of its three paces.
func TestGeneratePolluterKinds(t *testing.T) {
	cpus := cpuset.Of(0, 1)
	named := allPrograms
	named.Polluters = DefaultPolluters(allPrograms)
	paced := allPrograms
	paced.Polluters = []string{PolluterSplitLockPaced}
	rates := map[string]int{}
	for seed := int64(1); seed <= 60; seed++ {
		a, err := Generate(seed, cpus, allPrograms)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Generate(seed, cpus, named)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a.Scenario, b.Scenario) {
			t.Fatalf("seed %d: the default kinds named drew another run:\n%s\n%s", seed, a.Describe(), b.Describe())
		}
		p, err := Generate(seed, cpus, paced)
		if err != nil {
			t.Fatal(err)
		}
		if p.Class == ClassControl {
			continue
		}
		if p.Polluter != PolluterSplitLockPaced {
			t.Fatalf("seed %d drew polluter %s, want %s only", seed, p.Polluter, PolluterSplitLockPaced)
		}
		for _, tn := range p.Scenario.Tenants {
			if tn.Role != RolePolluter {
				continue
			}
			if tn.Load != "splitlock" || len(tn.Args) != 2 || tn.Args[0] != "--rate" {
				t.Fatalf("seed %d: paced polluter runs %s %v", seed, tn.Load, tn.Args)
			}
			rates[tn.Args[1]]++
		}
	}
	if len(rates) != 3 {
		t.Errorf("paced polluters drew rates %v, want all three", rates)
	}
	for _, c := range []struct {
		progs Programs
		err   string
	}{
		{Programs{Polluters: []string{"nosuch"}}, `no polluter kind "nosuch"`},
		{Programs{Polluters: []string{"splitlock", "stress-ng-lockbus"}}, "stress-ng is not installed"},
		{Programs{StressNG: true, Polluters: []string{"stress-ng-lockbus", PolluterSplitLockPaced}}, ""},
	} {
		_, err := SuiteCases(SuitePlan{Seed: 1, Runs: 2, CPUs: cpus, Programs: c.progs})
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("polluters %v: %v, want %q", c.progs.Polluters, err, c.err)
		}
	}
}
