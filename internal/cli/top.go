package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/top"
)

// minRefresh keeps top from hammering the agent.
const minRefresh = 100 * time.Millisecond

func newTopCmd(g *globals) *cobra.Command {
	var (
		addr          string
		refresh       time.Duration
		once, noColor bool
		width, height int
		sortBy        string
		filter        string
		limit         int
	)
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Live view of a running agent: contention, probes, tenants, suspects, actions",
		Long: `top draws what a running agent ('crosstalk run') sees, redrawn every --refresh
until Ctrl-C: the contention verdict and the canary probes' latency against
their quiet baseline (SLOW from 1.3x), every tenant sorted by suspect score then
CPU (CPU, run delay, CPU pressure, bus locks/s, IPC, LLC misses/s when counted,
quota, duty, THROTTLED/PROTECTED), the suspects and why, the proof in progress
and the last actions.

The frame fits the terminal: the header stays on top, the tenants take the
lines left (the rest counted in a "… N more" line), and the sections under them
give up rows first when even that is too tall. --sort orders the tenants
(score, cpu, throttle, name), --filter keeps those whose name matches (a glob
with * ? [...], else a substring; case ignored), --limit lists at most N.
A state older than 3 of the agent's intervals is marked STALE in the header.

It reads the agent's JSON state API (GET http://ADDR/api/state). --once prints
one frame without colours or screen control and exits, for scripts and bug
reports. The width is --width, else $COLUMNS, else the terminal's, else 120;
the height is --height, else $LINES, else the terminal's, else unlimited.`,
		Example: `  crosstalk top
  crosstalk top --addr 127.0.0.1:9477 --refresh 2s
  crosstalk top --sort throttle --filter 'web-*' --limit 10
  crosstalk top --once > frame.txt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if refresh < minRefresh {
				return fmt.Errorf("--refresh must be at least %s, got %s", minRefresh, refresh)
			}
			if width < 0 {
				return fmt.Errorf("--width must be >= 0, got %d", width)
			}
			if height < 0 {
				return fmt.Errorf("--height must be >= 0, got %d", height)
			}
			if limit < 0 {
				return fmt.Errorf("--limit must be >= 0, got %d", limit)
			}
			key, err := top.ParseSort(sortBy)
			if err != nil {
				return err
			}
			if _, err := top.ParseFilter(filter); err != nil {
				return err
			}
			parent := cmd.Context()
			if parent == nil {
				parent = context.Background()
			}
			ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
			defer stop()

			_, noColorEnv := os.LookupEnv("NO_COLOR")
			err = top.Run(ctx, g.out, top.Options{
				Addr:    addr,
				Refresh: refresh,
				Once:    once,
				Color:   !noColor && !noColorEnv,
				Width:   func() int { return termWidth(width, g.out) },
				Height:  func() int { return termHeight(height, g.out) },
				Sort:    key,
				Filter:  filter,
				Limit:   limit,
			})
			if err != nil {
				if errors.Is(err, top.ErrNoAgent) || errors.Is(err, top.ErrNoState) {
					return exitError{code: 1, err: err}
				}
				return err
			}
			if !once {
				fmt.Fprintln(g.out)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", agent.DefaultAddr, "address of the agent's API (host:port, or a URL)")
	f.DurationVar(&refresh, "refresh", time.Second, "time between redraws")
	f.BoolVar(&once, "once", false, "print one frame without ANSI codes and exit")
	f.BoolVar(&noColor, "no-color", false, "no colours in the live view (also: NO_COLOR set)")
	f.IntVar(&width, "width", 0, "frame width in columns (0: $COLUMNS, else the terminal's, else 120)")
	f.IntVar(&height, "height", 0, "frame height in lines (0: $LINES, else the terminal's, else unlimited)")
	f.StringVar(&sortBy, "sort", string(top.SortScore), "order of the tenants: score, cpu, throttle or name")
	f.StringVar(&filter, "filter", "", "list only tenants whose name matches (glob with * ? [...], else substring)")
	f.IntVar(&limit, "limit", 0, "list at most N tenants (0: as many as fit)")
	return cmd
}

// termWidth is the width to draw at: the flag, $COLUMNS, the terminal's
// width when out is one, else 120.
func termWidth(flag int, out any) int {
	return termSize(flag, "COLUMNS", out, func(ws *unix.Winsize) uint16 { return ws.Col }, 120)
}

// termHeight is the height to draw in: the flag, $LINES, the terminal's
// height when out is one, else 0 (no limit: a pipe or a file takes all).
func termHeight(flag int, out any) int {
	return termSize(flag, "LINES", out, func(ws *unix.Winsize) uint16 { return ws.Row }, 0)
}

func termSize(flag int, env string, out any, dim func(*unix.Winsize) uint16, fallback int) int {
	if flag > 0 {
		return flag
	}
	if n, err := strconv.Atoi(os.Getenv(env)); err == nil && n > 0 {
		return n
	}
	if f, ok := out.(*os.File); ok {
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && dim(ws) > 0 {
			return int(dim(ws))
		}
	}
	return fallback
}
