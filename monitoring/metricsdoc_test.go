package monitoring_test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/nodesignal"
)

const metricsDoc = "../docs/metrics.md"

// TestMetricsReference keeps docs/metrics.md equal to what the registry
// exports: every crosstalk_ metric with its type, labels, unit and help.
// CROSSTALK_UPDATE_DOCS=1 rewrites the file instead of comparing.
func TestMetricsReference(t *testing.T) {
	reg := registry(t)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// Every metric the collectors describe must be in the gathered sample:
	// one the full state does not produce would go missing from the doc.
	gathered := map[string]bool{}
	for _, mf := range mfs {
		gathered[mf.GetName()] = true
	}
	for _, name := range described(t) {
		if strings.HasPrefix(name, "crosstalk_") && !gathered[name] {
			t.Errorf("%s is described but the test state does not produce it: extend fullState", name)
		}
	}

	want := renderMetricsDoc(mfs)
	if os.Getenv("CROSSTALK_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(metricsDoc, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatalf("%v (CROSSTALK_UPDATE_DOCS=1 go test ./monitoring -run TestMetricsReference writes it)", err)
	}
	if string(got) != want {
		t.Errorf("%s differs from the registry; regenerate it with CROSSTALK_UPDATE_DOCS=1 go test ./monitoring -run TestMetricsReference\n--- want:\n%s", metricsDoc, want)
	}
}

var fqNameRe = regexp.MustCompile(`fqName: "([^"]+)"`)

// described lists the names of every metric the collectors of the
// registry describe, whether or not they have a series now.
func described(t *testing.T) []string {
	t.Helper()
	cfg := agent.Defaults()
	sig, err := nodesignal.FromConfig(cfg.Kubernetes, cfg.FloorDuty(), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	cs := append(agent.Collectors(fullState{}, "test", "abc"), sig, agent.NewSafety())
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range cs {
			c.Describe(ch)
		}
		close(ch)
	}()
	var names []string
	for d := range ch {
		if m := fqNameRe.FindStringSubmatch(d.String()); m != nil {
			names = append(names, m[1])
		}
	}
	if len(names) < 30 {
		t.Fatalf("only %d metrics described: the extraction is broken", len(names))
	}
	return names
}

func renderMetricsDoc(mfs []*dto.MetricFamily) string {
	var b strings.Builder
	b.WriteString(`# Metrics reference

The agent serves these metrics on ` + "`/metrics`" + ` (127.0.0.1:9477 unless ` + "`listen`" + ` says otherwise),
besides the Go runtime (` + "`go_*`" + `) and process (` + "`process_*`" + `) metrics of client_golang.
Counters (` + "`_total`" + `) start when the agent, or its first sight of a tenant, starts: query them
with ` + "`rate()`" + ` or ` + "`increase()`" + `. Tenant series carry ` + "`tenant`" + ` (the ID), ` + "`kind`" + ` (vm, pod, container, cgroup)
and ` + "`name`" + `; a tenant that is gone has no series.

This file is generated from the agent's registry by a test (` + "`monitoring/metricsdoc_test.go`" + `), which
fails when the two differ.

| Metric | Type | Labels | Unit | Description |
|---|---|---|---|---|
`)
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "crosstalk_") {
			continue
		}
		labels := map[string]bool{}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = true
			}
		}
		var ls []string
		for l := range labels {
			ls = append(ls, "`"+l+"`")
		}
		slices.Sort(ls)
		lcol := strings.Join(ls, ", ")
		if lcol == "" {
			lcol = "—"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", name, strings.ToLower(mf.GetType().String()), lcol, unitOf(name),
			strings.ReplaceAll(mf.GetHelp(), "|", `\|`))
	}
	return b.String()
}

// unitOf reads a metric's unit from its name, as Prometheus's naming
// conventions put it there.
func unitOf(name string) string {
	switch {
	case strings.HasSuffix(name, "_timestamp_seconds"):
		return "seconds (Unix time)"
	case strings.HasSuffix(name, "_bytes_per_second"):
		return "bytes per second"
	case strings.HasSuffix(name, "_seconds"), strings.HasSuffix(name, "_seconds_total"):
		return "seconds"
	case strings.HasSuffix(name, "_bytes"):
		return "bytes"
	case strings.HasSuffix(name, "_watts"):
		return "watts"
	case strings.HasSuffix(name, "_ratio"):
		return "ratio"
	case strings.HasSuffix(name, "_per_second"):
		return "per second"
	case strings.HasSuffix(name, "_cpus"):
		return "CPUs"
	case strings.HasSuffix(name, "_total"):
		return "count"
	case strings.HasSuffix(name, "_info"):
		return "info (always 1)"
	}
	return "—"
}
