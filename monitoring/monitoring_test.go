// Package monitoring_test checks the Prometheus rules and Grafana dashboards
// against the metrics the agent really exports, with promtool, and end to
// end: a real Prometheus server scraping a real agent on loopback.
package monitoring_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/judge"
	"github.com/crosstalk-project/crosstalk/internal/nodesignal"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

const (
	rulesFile     = "prometheus/crosstalk-rules.yml"
	rulesTestFile = "prometheus/crosstalk-rules_test.yml"
)

var dashboards = []string{"grafana/crosstalk-host.json", "grafana/crosstalk-fleet.json"}

// fullState has every kind of series the agent exports: tenants (one
// throttled, with perf counters), probes, a proof, actions and proofs, and
// the hardware policies' state.
type fullState struct{}

func (fullState) Latest() (api.State, bool) {
	psiSeconds := 0.5
	return api.State{
		Time: time.Now(), Interval: 0.5, Host: "h1", Version: "test", PMU: true, Contention: true, ContentionRatio: 2.5,
		Tenants: []api.TenantState{
			{ID: "/vm/a", Kind: "vm", Name: "a", CPU: 1, Duty: 1, Counters: map[string]float64{"bus_locks": 1e5, "llc_misses": 1e6},
				CPUSeconds: 10, PSISomeSeconds: &psiSeconds, PerfEvents: map[string]float64{"bus_locks": 1e6, "llc_misses": 1e7}, KernelBusLockReports: 3},
			{ID: "/vm/b", Kind: "vm", Name: "b", CPU: 0.1, Throttled: true, Duty: 1.0 / 16, Quota: 0.0625, Score: 3,
				Holds:     []api.HoldState{{Policy: "buslocks", Lever: "clock_modulation", Duty: 0.125}},
				Pollution: 58000, Watts: 20, LLCOccupancy: 14 << 20, MemBandwidth: 8.5e9, CPIRatio: 1.6},
		},
		Probes:       []api.ProbeState{{Domain: 0, CPU: 1, Kind: "dram", LatencyNs: 250, BaselineNs: 100, Ratio: 2.5}},
		ProbeCPU:     []api.ProbeCPUState{{CPU: 1, Reading: "proof", Seconds: 0.04}},
		Proof:        &api.ProofState{Tenant: "/vm/a", Name: "a", Started: time.Now()},
		ActionsTotal: map[string]uint64{"throttle": 1}, ProofsTotal: map[string]uint64{"polluter": 1},
		IntervalCPU: 0.001, PerfFDs: 6,
		Sensors: []api.SensorState{{Sensor: "discovery", Success: true, DurationSeconds: 0.002},
			{Sensor: "probe", DurationSeconds: 0.001, Errors: 2, LastError: "cpu 1: no such device"}},
		Hardware: &api.HardwareState{
			BusLocks: &judge.BusLockStatus{HostRate: 120000, Share: 56000, Dirty: 1},
			Permits:  []judge.PermitStatus{{Tenant: "/vm/b", Name: "b", Booking: 20000, Credit: -1500, State: "OVER"}},
			Power:    []judge.PowerSocketStatus{{ID: 0, Watts: 160, State: "over"}},
			Packages: []sense.PackageAttribution{{PackagePower: sense.PackagePower{Package: 0, Watts: 160}}},
			LLC:      []judge.BiasVerdict{{Domain: 0, Smoothed: 0.91, Busy: true}},
		},
	}, true
}

// registry is a real registry as `crosstalk run` builds it: the agent's
// collectors, the node signal and the safety checks.
func registry(t *testing.T) *prometheus.Registry {
	t.Helper()
	reg := agent.NewRegistry(fullState{}, "test", "abc")
	cfg := agent.Defaults()
	sig, err := nodesignal.FromConfig(cfg.Kubernetes, cfg.FloorDuty(), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(sig, agent.NewSafety())
	return reg
}

// exported renders the registry and returns every metric family name in it.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	mfs, err := registry(t).Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	return names
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record string `yaml:"record"`
			Alert  string `yaml:"alert"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(false)
	if err := dec.Decode(&rf); err != nil {
		t.Fatal(err)
	}
	return rf
}

type dashboard struct {
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		X, Y, W, H int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

func loadDashboard(t *testing.T, file string) dashboard {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return d
}

// exprs lists every PromQL expression of the rules and dashboards, with where it is.
func exprs(t *testing.T) map[string]string {
	out := map[string]string{}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			out[rulesFile+": "+r.Record+r.Alert] = r.Expr
		}
	}
	for _, f := range dashboards {
		for _, p := range loadDashboard(t, f).Panels {
			for _, tg := range p.Targets {
				out[f+": "+p.Title+" "+tg.RefID] = tg.Expr
			}
		}
	}
	return out
}

var (
	metricRe    = regexp.MustCompile(`\b((?:crosstalk|process|go)_[a-z0-9_]+)\b`)
	recordingRe = regexp.MustCompile(`\bcrosstalk:[a-z0-9_:]+`)
)

// Every metric the rules and dashboards query is one the agent exports, and
// every recording rule they use is defined.
func TestQueriedMetricsExist(t *testing.T) {
	have := exported(t)
	records := map[string]bool{}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				records[r.Record] = true
			}
		}
	}
	used := map[string]bool{}
	for where, e := range exprs(t) {
		for _, m := range metricRe.FindAllStringSubmatch(e, -1) {
			used[m[1]] = true
			if !have[m[1]] {
				t.Errorf("%s queries %s, which the agent does not export", where, m[1])
			}
		}
		for _, r := range recordingRe.FindAllString(e, -1) {
			if !records[r] {
				t.Errorf("%s uses recording rule %s, which is not defined", where, r)
			}
		}
	}
	if len(used) < 15 {
		t.Errorf("only %d metrics found in the queries: the extraction is broken", len(used))
	}
	// The check can fail: a renamed metric is caught.
	if have["crosstalk_tenant_cpu_cores"] {
		t.Error("registry exports a name that should not exist")
	}
	var unused []string
	for n := range have {
		if strings.HasPrefix(n, "crosstalk_") && !used[n] {
			unused = append(unused, n)
		}
	}
	slices.Sort(unused)
	t.Logf("agent metrics not in any rule or dashboard: %v", unused)
}

func TestDashboardsAreWellFormed(t *testing.T) {
	uids := map[string]bool{}
	for _, f := range dashboards {
		d := loadDashboard(t, f)
		if d.UID == "" || uids[d.UID] || d.Title == "" {
			t.Errorf("%s: uid %q title %q", f, d.UID, d.Title)
		}
		uids[d.UID] = true
		ids := map[int]bool{}
		for _, p := range d.Panels {
			if ids[p.ID] || p.ID == 0 {
				t.Errorf("%s: panel id %d repeated or zero", f, p.ID)
			}
			ids[p.ID] = true
			if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("%s: panel %q gridPos %+v", f, p.Title, p.GridPos)
			}
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", f, p.Title)
			}
			if !slices.Contains([]string{"row", "stat", "timeseries", "table", "state-timeline"}, p.Type) {
				t.Errorf("%s: panel %q of type %q", f, p.Title, p.Type)
			}
		}
	}
}

func needPromtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (apt-get install prometheus): CI installs it")
	}
	return p
}

// promtool checks the rules, runs their unit tests, and parses every
// dashboard query (as rules, with Grafana's variables substituted).
func TestPromtool(t *testing.T) {
	promtool := needPromtool(t)
	if out, err := exec.Command(promtool, "check", "rules", rulesFile).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
	cmd := exec.Command(promtool, "test", "rules", filepath.Base(rulesTestFile))
	cmd.Dir = filepath.Dir(rulesTestFile)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
	var rules []map[string]string
	repl := strings.NewReplacer("$instance", "h1:9477", "$__rate_interval", "1m", "$__interval", "30s")
	for _, f := range dashboards {
		for _, p := range loadDashboard(t, f).Panels {
			for i, tg := range p.Targets {
				rules = append(rules, map[string]string{"record": "dashboard:q" + strings.Repeat("x", i) + ":" + strings.ToLower(regexp.MustCompile(`[^a-zA-Z0-9]+`).ReplaceAllString(p.Title, "_")), "expr": repl.Replace(tg.Expr)})
			}
		}
	}
	b, _ := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboards", "rules": rules}}})
	f := filepath.Join(t.TempDir(), "dashboards.yml")
	os.WriteFile(f, b, 0o644)
	if out, err := exec.Command(promtool, "check", "rules", f).CombinedOutput(); err != nil {
		t.Errorf("a dashboard query does not parse: %v\n%s", err, out)
	}
}
