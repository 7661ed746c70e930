package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// Safety is what an agent knows about the safety of its own bookkeeping:
// throttles it found that no state covers, a corrupt state file it moved
// aside, state saves that failed. Build fills it (BuildOptions.Safety), the
// registry exports it.
type Safety struct {
	mu         sync.Mutex
	state      *act.StateFile
	corrupt    uint64
	movedAside string
}

// NewSafety returns an empty Safety for BuildOptions.
func NewSafety() *Safety { return &Safety{} }

func (s *Safety) attach(state *act.StateFile) {
	s.mu.Lock()
	s.state = state
	s.mu.Unlock()
}

func (s *Safety) noteCorrupt(movedTo string) {
	s.mu.Lock()
	s.corrupt++
	s.movedAside = movedTo
	s.mu.Unlock()
}

// Unowned lists the cgroups flagged with a crosstalk-shaped quota that no
// state covers.
func (s *Safety) Unowned() []string {
	s.mu.Lock()
	st := s.state
	s.mu.Unlock()
	if st == nil {
		return nil
	}
	return st.RecordKeys(act.RecordUnownedQuota)
}

// MovedAside is where a corrupt state file found at start went ("" if none).
func (s *Safety) MovedAside() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.movedAside
}

var (
	unownedDesc = prometheus.NewDesc("crosstalk_unowned_throttles",
		"Tenants at a quota shaped like crosstalk's (a throttle left behind) that no state covers: left alone; `crosstalk restore --adopt` lifts them.", nil, nil)
	stateErrorsDesc = prometheus.NewDesc("crosstalk_state_errors_total",
		"Errors of the agent's state file: corrupt (found at start and moved aside), save (a write that did not reach the disk).", []string{"kind"}, nil)
)

// Describe implements prometheus.Collector.
func (s *Safety) Describe(ch chan<- *prometheus.Desc) {
	ch <- unownedDesc
	ch <- stateErrorsDesc
}

// Collect implements prometheus.Collector.
func (s *Safety) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	st, corrupt := s.state, s.corrupt
	s.mu.Unlock()
	var unowned int
	var saves uint64
	if st != nil {
		unowned, saves = len(st.RecordKeys(act.RecordUnownedQuota)), st.SaveFailures()
	}
	ch <- prometheus.MustNewConstMetric(unownedDesc, prometheus.GaugeValue, float64(unowned))
	ch <- prometheus.MustNewConstMetric(stateErrorsDesc, prometheus.CounterValue, float64(corrupt), "corrupt")
	ch <- prometheus.MustNewConstMetric(stateErrorsDesc, prometheus.CounterValue, float64(saves), "save")
}

// openStateOrMoveAside opens the state file; a corrupt one is moved aside
// (kept for a person to read), journalled and counted, and the agent starts
// with an empty state — a restart loop under systemd would protect nobody.
// Throttles the lost file covered are then found crosstalk-shaped and
// flagged, never adopted as originals.
func openStateOrMoveAside(path string, journal *act.Journal, safety *Safety, log *slog.Logger, now time.Time) (*act.StateFile, error) {
	state, err := act.OpenState(path)
	var corrupt *act.CorruptStateError
	if !errors.As(err, &corrupt) {
		return state, err
	}
	moved, merr := act.MoveAside(path, now)
	if merr != nil {
		return nil, fmt.Errorf("%w (and it cannot be moved aside: %v)", err, merr)
	}
	detail := fmt.Sprintf("%v: moved aside to %s; starting with an empty state (throttles it covered are flagged as unowned when found)", err, moved)
	log.Error("corrupt state file moved aside", "err", err, "moved_to", moved)
	journal.Write(act.Event{Kind: "error", Detail: detail})
	safety.noteCorrupt(moved)
	return act.OpenState(path)
}

// flagUnowned looks at every tenant present at start for a crosstalk-shaped
// quota no state covers (after the leftovers the state does cover were
// restored), so a throttle whose record was lost is flagged even if the
// agent never acts on its tenant.
func flagUnowned(ctx context.Context, cq *act.CPUQuota, disc sense.Discoverer, log *slog.Logger) {
	tenants, err := disc.Discover(ctx)
	if err != nil && len(tenants) == 0 {
		log.Warn("looking for unowned throttles: discovery failed", "err", err)
		return
	}
	n := 0
	for _, t := range tenants {
		if cq.FlagIfUnowned(t.Cgroup, t.ID) {
			n++
		}
	}
	if n > 0 {
		log.Warn("tenants at crosstalk-shaped quotas that no state covers: left alone; `crosstalk restore --adopt` lifts them", "count", n)
	}
}
