package lab

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// Each start-up report an agent logs while it is built passes once for all
// the phases of a lab process; warnings, records that differ in an
// attribute or in the logger's own attributes, and whatever an agent logs
// once built always pass.
func TestStartupOnceKeepsOneCopyOfEachStartupReport(t *testing.T) {
	var buf bytes.Buffer
	base := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	once := &StartupOnce{}
	phase := func(building bool, log func(*slog.Logger)) {
		l, built := once.Logger(base)
		if !building {
			built()
		}
		log(l.With("policy", "crosstalk"))
	}
	startup := func(l *slog.Logger) {
		l.Info("hardware policy off", "name", "llc", "why", "resctrl unavailable")
		l.Info("hardware policy off", "name", "mba", "why", "resctrl unavailable")
		l.Warn("probe unavailable on CPU 3")
		l.Debug("detail")
	}
	phase(true, startup)
	phase(true, startup)
	phase(true, func(l *slog.Logger) {
		l.With("socket", "other").Info("hardware policy off", "name", "llc", "why", "resctrl unavailable")
	})
	phase(false, startup)
	if l, built := once.Logger(nil); l != nil {
		t.Error("a nil logger wrapped is not nil")
	} else {
		built()
	}
	var none *StartupOnce
	if l, built := none.Logger(base); l != base {
		t.Error("a nil StartupOnce wrapped the logger")
	} else {
		built()
	}
	out := buf.String()
	for _, c := range []struct {
		line string
		want int
	}{
		{"name=llc", 3}, // once built, the other logger's attribute, once running
		{"name=mba", 2}, // once built, once running
		{"probe unavailable", 3},
		{"msg=detail", 3},
		{"policy=crosstalk", 11},
	} {
		if got := strings.Count(out, c.line); got != c.want {
			t.Errorf("%q logged %d times, want %d:\n%s", c.line, got, c.want, out)
		}
	}
}
