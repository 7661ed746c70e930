package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/crosstalk-project/crosstalk/internal/load"
)

func newLoadCmd(g *globals) *cobra.Command {
	var (
		duration, interval time.Duration
		sizeStr, until     string
		rate               float64
		threads            int
	)
	cmd := &cobra.Command{
		Use:   "load KIND",
		Short: "Run a built-in workload: a victim, a polluter or a bystander",
		Long: `load runs one of crosstalk's built-in workloads, the lab's instruments: victims
whose slowdown we measure, polluters that each pollute one shared resource, and
a bystander that is busy but must never be blamed.

Kinds (metric, unit, which direction is better):

` + kindsHelp() + `
Every load stops by itself after --duration (default 10s), or earlier on
SIGINT/SIGTERM or at --until, and still prints its summary. splitlock refuses a --duration
over ` + load.MaxSplitLockDuration.String() + `: split locks stall the memory bus of the whole physical host.

--size is the working set of chase, server, stream and cachethrash: bytes, or
a number with a unit: K, M, G, T, KiB, MiB, GiB, TiB (powers of 1024) or KB,
MB, GB, TB (powers of 1000). --rate caps splitlock's locked operations per
second (default unlimited) and sets server's requests per second (default
2000). --threads runs that many workers, each on its own OS thread.

Output: a first JSON line on stdout when the work begins, its setup done
({"type":"start","at":TIME}), one per --interval ({"type":"progress",...}),
then the summary as the last JSON line ({"type":"summary",...}); a one-line
human summary on stderr.`,
		Example: `  crosstalk load chase --duration 30s
  crosstalk load chase --size 256MiB
  taskset -c 0 crosstalk load splitlock --duration 5s --rate 100000
  crosstalk load server --rate 5000 | jq -c 'select(.type=="summary")'`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: load.Names(),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind := args[0]
			if threads < 1 {
				return fmt.Errorf("--threads must be >= 1, got %d", threads)
			}
			opt := load.Options{Duration: duration, Interval: interval, Rate: rate, Threads: threads}
			if until != "" {
				at, err := time.Parse(time.RFC3339Nano, until)
				if err != nil {
					return fmt.Errorf("--until %q: want an RFC 3339 time, e.g. 2026-11-27T08:30:00Z: %w", until, err)
				}
				opt.Until = at
			}
			if sizeStr != "" {
				n, err := load.ParseSize(sizeStr)
				if err != nil {
					return fmt.Errorf("--size: %w", err)
				}
				if n == 0 {
					return fmt.Errorf("--size must be > 0")
				}
				opt.Size = n
			}
			if _, err := load.Validate(kind, opt); err != nil {
				return err
			}

			parent := cmd.Context()
			if parent == nil {
				parent = context.Background()
			}
			ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()

			enc := json.NewEncoder(g.out)
			var werr error
			sum, err := load.Run(ctx, kind, opt, func(p load.Progress) {
				if werr != nil {
					return
				}
				if werr = enc.Encode(p); werr != nil {
					cancel() // nobody reads us: stop the load
				}
			})
			if err != nil {
				return err
			}
			if werr != nil {
				return fmt.Errorf("writing progress: %w", werr)
			}
			if err := enc.Encode(sum); err != nil {
				return fmt.Errorf("writing summary: %w", err)
			}
			fmt.Fprintln(g.errOut, humanSummary(sum))
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&duration, "duration", 10*time.Second, "how long the load runs; it stops by itself (splitlock: at most "+load.MaxSplitLockDuration.String()+")")
	f.StringVar(&until, "until", "", "stop at this time (RFC 3339) at the latest, setup included, even before --duration has run out")
	f.DurationVar(&interval, "interval", load.DefaultInterval, "time between progress lines")
	f.StringVar(&sizeStr, "size", "", "working set of chase, server, stream, cachethrash, e.g. 4MiB, 256M, 32KiB or bytes (default: the kind's)")
	f.Float64Var(&rate, "rate", 0, "splitlock: most locked ops per second (0: unlimited); server: requests per second (0: 2000)")
	f.IntVar(&threads, "threads", 1, "worker threads, each goroutine locked to its own OS thread")
	return cmd
}

// kindsHelp lists the kinds for the long help, from load.Kinds.
func kindsHelp() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, k := range load.Kinds() {
		size := ""
		if d := load.DefaultSize(k.Name); d > 0 {
			size = ", default size " + load.FormatSize(d)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s (%s, %s is better%s)\n", k.Name, k.Role, k.Metric, k.Unit, k.Direction, size)
	}
	tw.Flush()
	b.WriteString("\n")
	for _, k := range load.Kinds() {
		fmt.Fprintf(&b, "  %s: %s.\n", k.Name, k.Description)
	}
	return b.String()
}

// humanSummary is the one-line summary for stderr.
func humanSummary(s load.Summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "load %s (%s): %s = %.4g %s (%s is better) over %.2f s, %d ops (%s) at %.4g/s, %d thread",
		s.Load, s.Role, s.Metric, s.Value, s.Unit, s.Direction, s.Seconds, s.Ops, s.OpName, s.Rate, s.Threads)
	if s.Threads != 1 {
		b.WriteString("s")
	}
	if s.Size > 0 {
		b.WriteString(", size " + load.FormatSize(s.Size))
	}
	if s.Load == "server" {
		fmt.Fprintf(&b, ", p50/p95/p99 %.1f/%.1f/%.1f us, %d sent, %d unanswered", s.P50us, s.P95us, s.P99us, s.Sent, s.Unanswered)
	}
	if s.RateLimit > 0 {
		fmt.Fprintf(&b, ", capped at %g/s", s.RateLimit)
	}
	if s.Impl != "" {
		b.WriteString(", " + s.Impl)
	}
	if s.Stopped != "duration" {
		b.WriteString(", " + s.Stopped)
	}
	return b.String()
}
