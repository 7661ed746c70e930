package lab

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
)

// StartupOnce lets each of the agent's start-up reports through once for
// all the phases of a lab or simulator process: what the host lets the agent do ("no
// hardware PMU", "hardware policy off", …) is the same in every phase, and
// a suite of 78 runs would repeat each of them 78 times between the lines
// that say how the runs went. Only INFO records logged while an agent is
// being built are kept to one copy; warnings and errors, and everything an
// agent logs while it runs, always pass, and each phase's journal keeps its
// own account.
type StartupOnce struct {
	seen sync.Map // record keys already let through
}

// Logger wraps log for the build of one agent: until built is called, an
// INFO record the same as one let through before (its message and
// attributes, the logger's own included) is dropped; after, every record
// passes. A nil s or a nil log gives log itself and a built that does
// nothing.
func (s *StartupOnce) Logger(log *slog.Logger) (wrapped *slog.Logger, built func()) {
	if s == nil || log == nil {
		return log, func() {}
	}
	building := new(atomic.Bool)
	building.Store(true)
	return slog.New(&onceHandler{next: log.Handler(), seen: &s.seen, building: building}), func() { building.Store(false) }
}

type onceHandler struct {
	next     slog.Handler
	seen     *sync.Map
	building *atomic.Bool
	prefix   string // the attributes and groups of With and WithGroup
}

func (h *onceHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *onceHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo && h.building.Load() {
		var b strings.Builder
		b.WriteString(h.prefix)
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.String())
			return true
		})
		if _, dup := h.seen.LoadOrStore(b.String(), struct{}{}); dup {
			return nil
		}
	}
	return h.next.Handle(ctx, r)
}

func (h *onceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	for _, a := range as {
		b.WriteString(a.String() + " ")
	}
	return &onceHandler{next: h.next.WithAttrs(as), seen: h.seen, building: h.building, prefix: h.prefix + b.String()}
}

func (h *onceHandler) WithGroup(name string) slog.Handler {
	return &onceHandler{next: h.next.WithGroup(name), seen: h.seen, building: h.building, prefix: h.prefix + name + "."}
}
