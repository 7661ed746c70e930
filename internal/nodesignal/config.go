package nodesignal

import (
	"errors"
	"log/slog"
	"os"
	"time"
)

// Config is the agent configuration's kubernetes section: it publishes
// the node-level signal, a node condition, label and optional taint saying the node has an
// uncontained polluter.
type Config struct {
	// NodeSignal turns publishing on (default false; the DaemonSet sets it).
	NodeSignal bool `yaml:"node_signal"`
	// NodeName is this node's name (default: $NODE_NAME, from the downward API).
	NodeName string `yaml:"node_name"`
	// UncontainedAfter is how long contention must persist, uncontained,
	// before the node is flagged (default 5m); ClearAfter how long it must
	// stay away before the flag is lifted (default 2m).
	UncontainedAfter time.Duration `yaml:"uncontained_after"`
	ClearAfter       time.Duration `yaml:"clear_after"`
	// Taint also taints a flagged node: "" (none), PreferNoSchedule or NoSchedule.
	Taint string `yaml:"taint"`
	// APIServer, TokenFile and CAFile default to the pod's in-cluster
	// service account (KUBERNETES_SERVICE_HOST/PORT, /var/run/secrets/...).
	APIServer string `yaml:"api_server"`
	TokenFile string `yaml:"token_file"`
	CAFile    string `yaml:"ca_file"`
}

// FromConfig builds the node signal of an agent configuration's
// kubernetes section k; floorDuty is the throttle's floor (the duty of its
// floor step), below which a held tenant counts as uncontained. It always
// tracks (the crosstalk_uncontained_polluter gauge is exported on every
// host); it publishes to the node only with kubernetes.node_signal, for the
// node named by kubernetes.node_name or $NODE_NAME.
func FromConfig(k Config, floorDuty float64, version string, log *slog.Logger) (*Signal, error) {
	s := &Signal{Log: log, Tracker: NewTracker(Settings{
		After: k.UncontainedAfter, ClearAfter: k.ClearAfter, FloorDuty: floorDuty,
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
