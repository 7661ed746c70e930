package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/lab"
	"github.com/crosstalk-project/crosstalk/internal/testenv"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// crosstalkBinary builds the CLI once: the lab runs its loads through it.
func crosstalkBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "crosstalk-agent-test")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "crosstalk")
		cmd := exec.Command("go", "build", "-o", binPath, "../../cmd/crosstalk")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// The agent as the lab's "crosstalk" policy, on benign neighbours only (no
// polluter): it may probe and even test a suspect, but it must throttle no
// one, and the phase must end with every cgroup gone.
func TestLabPolicyLeavesBenignTenantsAlone(t *testing.T) {
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
	s, err := lab.Parse([]byte(`name: benign
phase: 2s
tenants:
  - {name: victim, role: victim, load: chase, args: ["--size", "4MiB"], cpus: "1"}
  - {name: busy, role: bystander, load: cpu, cpus: "0"}
`), "benign")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lab.Preflight(h, s); err != nil {
		t.Skipf("host cannot run the lab: %v", err)
	}
	cfg := Defaults()
	cfg.Interval = 250 * time.Millisecond
	pols := lab.DefaultPolicies()
	pols["crosstalk"] = LabPolicy(cfg)
	res, err := lab.Run(context.Background(), s, lab.Options{Host: h, Self: crosstalkBinary(t), Policies: []string{"crosstalk"}, Registry: pols, Interval: 100 * time.Millisecond})
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
