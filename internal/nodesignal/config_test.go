package nodesignal_test

import (
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/nodesignal"
)

// The documented example spells out the kubernetes defaults.
func TestExampleConfigKubernetesIsTheDefaults(t *testing.T) {
	c, err := agent.LoadConfig("../../examples/crosstalk.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if d := agent.Defaults(); c.Kubernetes != d.Kubernetes {
		t.Errorf("example kubernetes section %+v, defaults %+v", c.Kubernetes, d.Kubernetes)
	}
}

func TestFromConfig(t *testing.T) {
	cfg := agent.Defaults()
	s, err := nodesignal.FromConfig(cfg.Kubernetes, cfg.FloorDuty(), "test", nil)
	if err != nil || s.Publisher != nil {
		t.Fatalf("node_signal off: %+v, %v", s, err)
	}
	if set := s.Tracker.Settings(); set.After != 5*time.Minute || set.ClearAfter != 2*time.Minute || set.FloorDuty != 1.0/16 {
		t.Errorf("tracker settings from defaults: %+v", set)
	}
	cfg.Kubernetes.NodeSignal = true
	t.Setenv("NODE_NAME", "")
	if _, err := nodesignal.FromConfig(cfg.Kubernetes, cfg.FloorDuty(), "test", nil); err == nil || !strings.Contains(err.Error(), "NODE_NAME") {
		t.Errorf("no node name: %v", err)
	}
	t.Setenv("NODE_NAME", "n1")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := nodesignal.FromConfig(cfg.Kubernetes, cfg.FloorDuty(), "test", nil); err == nil || !strings.Contains(err.Error(), "not in a pod") {
		t.Errorf("outside a cluster: %v", err)
	}
	for in, want := range map[string]string{
		"kubernetes:\n  taint: NoExecute\n":      "kubernetes.taint",
		"kubernetes:\n  uncontained_after: 1s\n": "at least 10 intervals",
		"kubernetes:\n  node_sigal: true\n":      `unknown key "node_sigal" (did you mean "node_signal"?)`,
	} {
		if _, err := agent.ParseConfig([]byte(in), "c.yaml"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}
