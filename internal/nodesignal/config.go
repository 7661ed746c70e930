package nodesignal

import (
	"errors"
	"log/slog"
	"os"

	"github.com/crosstalk-project/crosstalk/internal/agent"
)

// FromConfig builds the node signal of an agent configuration. It always
// tracks (the crosstalk_uncontained_polluter gauge is exported on every
// host); it publishes to the node only with kubernetes.node_signal, for the
// node named by kubernetes.node_name or $NODE_NAME.
func FromConfig(cfg agent.Config, version string, log *slog.Logger) (*Signal, error) {
	k := cfg.Kubernetes
	sp := cfg.Sparsify()
	s := &Signal{Log: log, Tracker: NewTracker(Settings{
		After: k.UncontainedAfter, ClearAfter: k.ClearAfter, FloorDuty: sp.Duty(sp.FloorStep),
	})}
	if !k.NodeSignal {
		return s, nil
	}
	node := k.NodeName
	if node == "" {
		node = os.Getenv("NODE_NAME")
	}
	if node == "" {
		return nil, errors.New("kubernetes.node_signal: no node name: set kubernetes.node_name, or NODE_NAME (the DaemonSet sets it from spec.nodeName)")
	}
	if !ValidTaintEffect(k.Taint) {
		return nil, errors.New("kubernetes.taint: want \"\", PreferNoSchedule or NoSchedule")
	}
	c, err := NewClient(k.APIServer, k.TokenFile, k.CAFile, "crosstalk/"+version)
	if err != nil {
		return nil, err
	}
	s.Publisher = &Publisher{API: c, Node: node, TaintEffect: k.Taint, Log: log}
	return s, nil
}
