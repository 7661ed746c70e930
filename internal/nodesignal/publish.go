package nodesignal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/prometheus/client_golang/prometheus"
)

// What the publisher writes on the node.
const (
	// ConditionType is the node condition crosstalk owns.
	ConditionType = "CrosstalkUncontainedPolluter"
	// Label is set to "true" while the node has an uncontained polluter and
	// removed otherwise: select on it with nodeAffinity (DoesNotExist).
	Label = "crosstalk.io/uncontained-polluter"
	// TaintKey is the taint put on the node while flagged, when configured.
	TaintKey = "crosstalk.io/uncontained-polluter"
)

// Publisher writes a Status onto a node: the condition (always), the label
// (always) and the taint (when TaintEffect is set).
type Publisher struct {
	API  NodeAPI
	Node string
	// TaintEffect is "", "PreferNoSchedule" or "NoSchedule".
	TaintEffect string
	Log         *slog.Logger
}

// ValidTaintEffect reports whether e is a taint effect the publisher may set
// ("" = no taint). NoExecute is refused: evicting running tenants is the
// descheduler's decision, not a node agent's.
func ValidTaintEffect(e string) bool {
	return e == "" || e == "PreferNoSchedule" || e == "NoSchedule"
}

// Publish writes st at time now (the heartbeat).
func (p *Publisher) Publish(ctx context.Context, st Status, now time.Time) error {
	cond := map[string]any{
		"type":              ConditionType,
		"status":            "False",
		"reason":            st.Reason,
		"message":           st.Message,
		"lastHeartbeatTime": now.UTC().Format(time.RFC3339),
	}
	if st.Uncontained {
		cond["status"] = "True"
	}
	if st.Reason == ReasonAgentStopped {
		cond["status"] = "Unknown"
	}
	if !st.Since.IsZero() {
		cond["lastTransitionTime"] = st.Since.UTC().Format(time.RFC3339)
	} else {
		cond["lastTransitionTime"] = now.UTC().Format(time.RFC3339)
	}
	// Strategic merge: conditions merge by type, so the kubelet's and other
	// agents' conditions are left alone.
	body, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{cond}}})
	var errs []error
	if err := p.API.PatchNodeStatus(ctx, p.Node, StrategicMergePatch, body); err != nil {
		errs = append(errs, fmt.Errorf("condition: %w", err))
	}
	var label any // JSON null removes the label
	if st.Uncontained {
		label = "true"
	}
	body, _ = json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{Label: label}}})
	if err := p.API.PatchNode(ctx, p.Node, MergePatch, body); err != nil {
		errs = append(errs, fmt.Errorf("label: %w", err))
	}
	if p.TaintEffect != "" {
		if err := p.syncTaint(ctx, st.Uncontained && p.TaintEffect != "", now); err != nil {
			errs = append(errs, fmt.Errorf("taint: %w", err))
		}
	}
	return errors.Join(errs...)
}

// syncTaint adds or removes crosstalk's taint. Taints are a list without a
// merge key, so it reads the node, edits the list and writes it back with
// the resourceVersion it read: a concurrent change makes the write fail
// (409) and it tries again, rather than overwrite another writer's taints.
func (p *Publisher) syncTaint(ctx context.Context, want bool, now time.Time) error {
	for attempt := 0; ; attempt++ {
		n, err := p.API.GetNode(ctx, p.Node)
		if err != nil {
			return err
		}
		taints := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t Taint) bool { return t.Key == TaintKey })
		had := len(taints) != len(n.Spec.Taints)
		if want {
			if i := slices.IndexFunc(n.Spec.Taints, func(t Taint) bool { return t.Key == TaintKey }); i >= 0 && n.Spec.Taints[i].Effect == p.TaintEffect {
				return nil // already there
			}
			taints = append(taints, Taint{Key: TaintKey, Value: "true", Effect: p.TaintEffect, TimeAdded: now.UTC().Format(time.RFC3339)})
		} else if !had {
			return nil // nothing to remove
		}
		if taints == nil {
			taints = []Taint{}
		}
		body, _ := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": n.Metadata.ResourceVersion},
			"spec":     map[string]any{"taints": taints},
		})
		err = p.API.PatchNode(ctx, p.Node, MergePatch, body)
		if err == nil || !IsConflict(err) || attempt >= 3 {
			return err
		}
	}
}

// Signal runs the tracker on an agent's states and keeps the node and a
// Prometheus gauge up to date.
type Signal struct {
	Tracker   *Tracker
	Publisher *Publisher // nil: metrics only
	// Heartbeat re-publishes an unchanged status this often (default 5m),
	// so the condition's lastHeartbeatTime shows the agent is alive.
	Heartbeat time.Duration
	Log       *slog.Logger

	uncontained atomic.Bool
	errors      atomic.Uint64
}

// StateSource is the running agent as the signal reads it: its latest
// published state, and whether one exists yet.
type StateSource interface {
	Latest() (api.State, bool)
}

// Run polls src every interval until ctx ends, publishing on every change,
// on every heartbeat, and after a failed write until one succeeds. When ctx
// ends it marks the node Unknown (AgentStopped) and removes the label and
// taint: a node without a running agent is not known to be polluted.
func (s *Signal) Run(ctx context.Context, src StateSource, interval time.Duration) {
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	if s.Heartbeat <= 0 {
		s.Heartbeat = 5 * time.Minute
	}
	if interval <= 0 {
		interval = time.Second
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var lastPub time.Time
	dirty := true // publish the initial status once
	for {
		select {
		case <-ctx.Done():
			if s.Publisher != nil {
				st := Status{Reason: ReasonAgentStopped, Message: "the crosstalk agent on this node stopped", Since: time.Now()}
				pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				if err := s.Publisher.Publish(pctx, st, time.Now()); err != nil {
					s.errors.Add(1)
					s.Log.Warn("node signal: clearing on stop", "err", err)
				}
				cancel()
			}
			s.uncontained.Store(false)
			return
		case now := <-tick.C:
			if state, ok := src.Latest(); ok {
				st, changed := s.Tracker.Observe(state)
				s.uncontained.Store(st.Uncontained)
				if changed {
					dirty = true
					s.Log.Warn("node signal", "uncontained", st.Uncontained, "reason", st.Reason, "message", st.Message)
				}
			}
			if s.Publisher == nil || (!dirty && now.Sub(lastPub) < s.Heartbeat) {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := s.Publisher.Publish(pctx, s.Tracker.Status(), now)
			cancel()
			if err != nil {
				s.errors.Add(1)
				s.Log.Warn("node signal: publishing to the node failed; retrying next interval", "node", s.Publisher.Node, "err", err)
				continue
			}
			dirty, lastPub = false, now
		}
	}
}

// descs are the signal's metrics.
func descs() (uncontained, errs *prometheus.Desc) {
	return prometheus.NewDesc("crosstalk_uncontained_polluter",
			"1 while the node has an uncontained polluter: contention persisting for kubernetes.uncontained_after while a convicted polluter is held at the floor duty or nobody could be convicted, else 0.", nil, nil),
		prometheus.NewDesc("crosstalk_node_signal_errors_total",
			"Failed attempts to publish the node signal (condition, label, taint) to the Kubernetes API.", nil, nil)
}

// Describe implements prometheus.Collector.
func (s *Signal) Describe(ch chan<- *prometheus.Desc) {
	u, e := descs()
	ch <- u
	ch <- e
}

// Collect implements prometheus.Collector.
func (s *Signal) Collect(ch chan<- prometheus.Metric) {
	v := 0.0
	if s.uncontained.Load() {
		v = 1
	}
	u, e := descs()
	ch <- prometheus.MustNewConstMetric(u, prometheus.GaugeValue, v)
	ch <- prometheus.MustNewConstMetric(e, prometheus.CounterValue, float64(s.errors.Load()))
}
