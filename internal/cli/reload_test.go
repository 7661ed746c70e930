package cli

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/agent"
)

// fakeReloader records the configurations handed to the agent.
type fakeReloader struct {
	got    []agent.Config
	change agent.ConfigChange
}

func (f *fakeReloader) Reload(_ context.Context, cfg agent.Config) (agent.ConfigChange, error) {
	f.got = append(f.got, cfg)
	return f.change, nil
}

// SIGHUP's reload: a broken file never reaches the agent and the log says
// why; a good one reaches it with the flags applied on top, and the log
// names what applied and what needs a restart.
func TestReloadAgent(t *testing.T) {
	file := filepath.Join(t.TempDir(), "crosstalk.yaml")
	var logs bytes.Buffer
	level := new(slog.LevelVar)
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: level}))
	overrides := func(c *agent.Config) { c.Interval = 2 * time.Second } // as --interval 2s
	a := &fakeReloader{}

	for _, bad := range []string{"intervall: 1s\n", "judge:\n  ratio: .nan\n", "log_level: loud\n"} {
		logs.Reset()
		os.WriteFile(file, []byte(bad), 0o644)
		reloadAgent(context.Background(), a, file, overrides, level, log)
		if len(a.got) != 0 {
			t.Fatalf("%q reached the agent", bad)
		}
		if !strings.Contains(logs.String(), "configuration reload failed; the running configuration stays") || !strings.Contains(logs.String(), file) {
			t.Errorf("%q: log %s", bad, logs.String())
		}
	}

	logs.Reset()
	os.WriteFile(file, []byte("interval: 1s\nlog_level: debug\nlisten: off\n"), 0o644)
	a.change = agent.ConfigChange{Applied: []string{"log_level"}, Restart: []string{"listen"}}
	reloadAgent(context.Background(), a, file, overrides, level, log)
	if len(a.got) != 1 || a.got[0].Interval != 2*time.Second || a.got[0].Listen != "off" {
		t.Fatalf("agent got %+v", a.got)
	}
	if level.Level() != slog.LevelDebug {
		t.Errorf("log level %v after a reload to debug", level.Level())
	}
	for _, want := range []string{`msg="configuration reloaded"`, "applied=log_level", "apply only after a restart", "keys=listen"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}

	logs.Reset()
	reloadAgent(context.Background(), a, "", overrides, level, log)
	if len(a.got) != 1 || !strings.Contains(logs.String(), "no --config file") {
		t.Errorf("without a file: %d reloads, log %s", len(a.got), logs.String())
	}
}
