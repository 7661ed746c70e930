package lab

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/testenv"
)

// The agent as the lab's "crosstalk" policy, on benign neighbours only (no
// polluter): it may probe and even test a suspect, but it must throttle no
// one, and the phase must end with every cgroup gone.
func TestAgentPolicyLeavesBenignTenantsAlone(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for cgroups")
	}
	testenv.LockCPUs(t, 10*time.Minute)
	h, err := host.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	online, _ := h.ReadString("/sys/devices/system/cpu/online")
	if online == "0" {
		t.Skip("needs two CPUs")
	}
	s, err := Parse([]byte(`name: benign
phase: 2s
tenants:
  - {name: victim, role: victim, load: chase, args: ["--size", "4MiB"], cpus: "1"}
  - {name: busy, role: bystander, load: cpu, cpus: "0"}
`), "benign")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Preflight(h, s); err != nil {
		t.Skipf("host cannot run the lab: %v", err)
	}
	cfg := agent.Defaults()
	cfg.Interval = 250 * time.Millisecond
	pols := DefaultPolicies()
	pols["crosstalk"] = AgentPolicy(cfg)
	res, err := Run(context.Background(), s, Options{Host: h, Self: crosstalkBin, Policies: []string{"crosstalk"}, Registry: pols, Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range res.Results[0].Actions {
		if a.Kind == "throttle" {
			t.Errorf("benign tenant throttled: %+v", a)
		}
	}
	for n, tr := range res.Results[0].Tenants {
		if tr.ThrottledSeconds > 0.5 {
			t.Errorf("%s throttled %.2fs", n, tr.ThrottledSeconds)
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/cpu/crosstalk-lab"); err == nil {
		if ents, _ := os.ReadDir("/sys/fs/cgroup/cpu/crosstalk-lab"); len(ents) > 0 {
			// Other packages' lab tests may be running now: only ours count.
			mine := fmt.Sprintf("run-%d-", os.Getpid())
			for _, e := range ents {
				if e.IsDir() && strings.HasPrefix(e.Name(), mine) {
					t.Errorf("lab cgroup left: %s", e.Name())
				}
			}
		}
	}
}
