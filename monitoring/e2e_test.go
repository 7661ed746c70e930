package monitoring_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/testenv"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// started is a process this test started, stopped by pid at the end.
func start(t *testing.T, name string, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	log, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		stop(cmd)
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s log (tail):\n%s", name, b)
		}
		log.Close()
	})
	return cmd
}

// stop sends SIGTERM to the process (by its pid) and waits up to 10 s
// before SIGKILL.
func stop(cmd *exec.Cmd) {
	if cmd.ProcessState != nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

type promAPI struct{ base string }

// get decodes the data of a Prometheus HTTP API answer.
func (p promAPI) get(path string, q url.Values, data any) error {
	resp, err := http.Get(p.base + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var env struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		return err
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s", path, env.Error)
	}
	return json.Unmarshal(env.Data, data)
}

type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (p promAPI) query(q string) ([]sample, error) {
	var d struct {
		Result []sample `json:"result"`
	}
	err := p.get("/api/v1/query", url.Values{"query": {q}}, &d)
	return d.Result, err
}

// waitFor polls cond every 500 ms until it holds or timeout passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, detail := cond()
		if ok {
			return
		}
		last = detail
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s (last: %s)", timeout, what, last)
}

// A real Prometheus server (Debian's package) scrapes a real `crosstalk run`
// on loopback with our rules loaded: the agent's tenant series arrive, every
// rule evaluates healthy, the recording rules produce series, and when the
// agent stops CrosstalkAgentDown goes pending.
func TestPrometheusScrapesARealAgent(t *testing.T) {
	testenv.LockAgent(t) // one agent per host: the other packages' live agents wait
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not installed (apt-get install prometheus; .ci/run installs it)")
	}
	h, l := testenv.LiveCgroups(t) // the agent watches a real cgroup the test creates
	parent := fmt.Sprintf("/crosstalk-ops-prom-%d", os.Getpid())
	if _, err := cgroup.Create(h, l, parent+"/web", cpuset.Of(0)); err != nil {
		t.Fatal(err)
	}
	defer cgroup.RemoveTree(h, l, parent, 2*time.Second)

	dir := t.TempDir()
	bin := filepath.Join(dir, "crosstalk")
	build := exec.Command("go", "build", "-o", bin, "./cmd/crosstalk")
	build.Dir, build.Env = "..", append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	agentPort, promPort := freePort(t), freePort(t)
	cfg := filepath.Join(dir, "crosstalk.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("interval: 250ms\nlisten: 127.0.0.1:%d\nstate_dir: %s\ndry_run: true\n"+
		"tenants:\n  builtin: false\n  globs: [%q]\n", agentPort, filepath.Join(dir, "state"), parent+"/*")), 0o644)
	agentCmd := start(t, "crosstalk", exec.Command(bin, "run", "--config", cfg))

	rules, _ := filepath.Abs(rulesFile)
	promCfg := filepath.Join(dir, "prometheus.yml")
	os.WriteFile(promCfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: crosstalk
    static_configs:
      - targets: ["127.0.0.1:%d"]
`, rules, agentPort)), 0o644)
	start(t, "prometheus", exec.Command(prom, "--config.file="+promCfg, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", promPort), "--log.level=warn"))
	api := promAPI{base: fmt.Sprintf("http://127.0.0.1:%d", promPort)}

	waitFor(t, "the agent's tenant series in Prometheus", 60*time.Second, func() (bool, string) {
		s, err := api.query(`crosstalk_tenant_cpu_seconds_total{job="crosstalk", name="web"}`)
		if err != nil {
			return false, err.Error()
		}
		return len(s) == 1 && s[0].Metric["kind"] != "", fmt.Sprint(s)
	})
	for _, q := range []string{`up{job="crosstalk"} == 1`, `crosstalk_tenants >= 1`, `crosstalk_dry_run == 1`, `crosstalk_uncontained_polluter == 0`,
		`crosstalk_build_info`, `crosstalk_actions_total{kind="throttle"}`, `crosstalk_probe_ratio`} {
		s, err := api.query(q)
		if err != nil || len(s) == 0 {
			t.Errorf("query %s: %v %v", q, s, err)
		}
	}

	// Every rule evaluated, none unhealthy (the recording group runs every 30 s).
	type rule struct {
		Name, Health, LastError, Type string
	}
	// As many rules as the file defines.
	ruleText, err := os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}
	want := len(regexp.MustCompile(`(?m)^\s*- (alert|record): `).FindAll(ruleText, -1))
	if want < 20 {
		t.Fatalf("only %d rules found in %s", want, rules)
	}
	waitFor(t, "every rule evaluated and healthy", 75*time.Second, func() (bool, string) {
		var d struct {
			Groups []struct {
				Name  string
				Rules []rule
			}
		}
		if err := api.get("/api/v1/rules", nil, &d); err != nil {
			return false, err.Error()
		}
		n := 0
		var bad []string
		for _, g := range d.Groups {
			for _, r := range g.Rules {
				n++
				if r.Health != "ok" {
					bad = append(bad, r.Name+"="+r.Health+" "+r.LastError)
				}
			}
		}
		return n == want && len(bad) == 0, fmt.Sprintf("%d of %d rules, not ok: %v", n, want, bad)
	})
	// A rule is healthy after its first evaluation even if that came before
	// the agent's first scrape and recorded nothing; its group runs every
	// 30 s, so wait for what it records.
	for _, q := range []string{`crosstalk:fleet_agents_up:count == 1`, `crosstalk:contention_ratio:max_over_5m`, `crosstalk:agent_cpu:ratio < 0.5`} {
		waitFor(t, "recording rule "+q, 75*time.Second, func() (bool, string) {
			s, err := api.query(q)
			if err != nil {
				return false, err.Error()
			}
			return len(s) > 0, fmt.Sprint(s)
		})
	}

	// The agent stops: the scrape fails, and the down alert is pending.
	stop(agentCmd)
	waitFor(t, "CrosstalkAgentDown pending", 30*time.Second, func() (bool, string) {
		var d struct {
			Alerts []struct {
				Labels map[string]string
				State  string
			}
		}
		if err := api.get("/api/v1/alerts", nil, &d); err != nil {
			return false, err.Error()
		}
		for _, a := range d.Alerts {
			if a.Labels["alertname"] == "CrosstalkAgentDown" && a.State == "pending" {
				return true, ""
			}
		}
		return false, fmt.Sprint(d.Alerts)
	})
}
