package cli

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/agent"
)

// configReloader is what a reload needs of the agent.
type configReloader interface {
	Reload(ctx context.Context, cfg agent.Config) (agent.ConfigChange, error)
}

// reloadAgent re-reads the configuration file on SIGHUP and hands it to the
// agent, flags applied on top as at start; a file that does not parse or
// validate leaves the running configuration as it is, and the log says why.
func reloadAgent(ctx context.Context, a configReloader, file string, overrides func(*agent.Config), level *slog.LevelVar, log *slog.Logger) {
	if file == "" {
		log.Warn("SIGHUP: no --config file to reload; the running configuration stays")
		return
	}
	cfg, err := agent.LoadConfig(file)
	if err == nil {
		overrides(&cfg)
		err = cfg.Validate()
	}
	var change agent.ConfigChange
	if err == nil {
		change, err = a.Reload(ctx, cfg)
	}
	if err != nil {
		log.Error("configuration reload failed; the running configuration stays", "file", file, "err", err)
		return
	}
	if l, err := agent.ParseLogLevel(cfg.LogLevel); err == nil && slices.Contains(change.Applied, "log_level") {
		level.Set(l)
	}
	log.Info("configuration reloaded", "file", file, "applied", strings.Join(change.Applied, ","),
		"released", strings.Join(change.Released, ","))
	if len(change.Restart) > 0 {
		log.Warn("configuration keys changed that apply only after a restart; their running values stay",
			"keys", strings.Join(change.Restart, ","))
	}
}

// warnShortWatchdog warns when systemd's watchdog timeout leaves the loop
// too little time: a ping goes out at most every half of it, after a pass
// of the loop, and passes come every watch period at the longest (plus the
// pass itself).
func warnShortWatchdog(log *slog.Logger, watchdog, every time.Duration) {
	if watchdog > 0 && 4*every > watchdog {
		log.Warn("the systemd watchdog (WatchdogSec=) is short for the agent's interval: raise it to at least four watch periods",
			"watchdog", watchdog, "watch_every", every)
	}
}
