package top

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/crosstalk-project/crosstalk/internal/humanize"
)

// ErrNoState means the agent answered but has not published its first
// interval yet.
var ErrNoState = errors.New("no state yet: its first interval has not finished")

// ErrNoAgent means nothing answered at the address.
var ErrNoAgent = errors.New("no agent")

// maxStateBytes bounds what Fetch reads: a State for thousands of tenants is
// a few MiB.
const maxStateBytes = 64 << 20

// fetchTimeout bounds one GET of the state.
const fetchTimeout = 5 * time.Second

// NewClient returns the HTTP client top uses: no proxy (the agent is on this
// host or its network), bounded connect and overall time.
func NewClient() *http.Client {
	return &http.Client{
		Timeout: fetchTimeout,
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
			MaxIdleConns:        2,
			IdleConnTimeout:     30 * time.Second,
			TLSHandshakeTimeout: 2 * time.Second,
		},
	}
}

// StateURL is the /api/state URL of the agent at addr ("host:port", or a
// base URL with scheme).
func StateURL(addr string) string {
	base := addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return strings.TrimRight(base, "/") + "/api/state"
}

// Fetch gets the agent's latest State from addr. Its errors say what went
// wrong in words for the operator; they wrap ErrNoAgent when nothing answers
// and ErrNoState before the agent's first interval.
func Fetch(ctx context.Context, client *http.Client, addr string) (api.State, error) {
	var s api.State
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, StateURL(addr), nil)
	if err != nil {
		return s, fmt.Errorf("--addr %q: %w", addr, err)
	}
	req.Header.Set("Accept", "application/json")
	res, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return s, ctx.Err()
		}
		return s, fmt.Errorf("%w at %s: is `crosstalk run` running? (%v)", ErrNoAgent, addr, unwrapURLError(err))
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxStateBytes+1))
	if err != nil {
		return s, fmt.Errorf("agent at %s: reading the state: %w", addr, err)
	}
	switch {
	case res.StatusCode == http.StatusServiceUnavailable:
		return s, fmt.Errorf("agent at %s: %w", addr, ErrNoState)
	case res.StatusCode == http.StatusNotFound:
		return s, fmt.Errorf("%s answers but is not a crosstalk agent (GET /api/state: 404)", addr)
	case res.StatusCode != http.StatusOK:
		return s, fmt.Errorf("agent at %s: GET /api/state: %s: %s", addr, res.Status, firstLine(body))
	case len(body) > maxStateBytes:
		return s, fmt.Errorf("agent at %s: state larger than %d MiB", addr, maxStateBytes>>20)
	}
	if err := json.Unmarshal(body, &s); err != nil {
		return api.State{}, fmt.Errorf("agent at %s sent a state top cannot read (version mismatch?): %w", addr, err)
	}
	return s, nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return clean(humanize.Truncate(s, 200))
}

// Options configure Run.
type Options struct {
	Addr    string
	Refresh time.Duration
	// Once prints one frame, without ANSI codes, and returns.
	Once bool
	// Color highlights with ANSI colours in the live view.
	Color bool
	// Width returns the terminal width; it is asked before every frame so a
	// resized terminal is followed. Nil means 120.
	Width func() int
	// Height returns the terminal height, asked like Width; 0 or a nil func
	// means no limit (the frame is as tall as it needs).
	Height func() int
	// Sort, Filter and Limit choose and order the tenants listed (View).
	Sort   SortKey
	Filter string
	Limit  int
	Client *http.Client
	// Now is the clock (for the live footer and staleness); nil means time.Now.
	Now func() time.Time
}

// ANSI: clear the screen and move the cursor home.
const clearHome = "\x1b[2J\x1b[H"

// staleIntervals is how many of the agent's intervals old a state may be
// before a frame marks it STALE.
const staleIntervals = 3

// staleness says why s is stale at now ("" when it is not): the agent has
// not published for staleIntervals of its intervals (it is stuck, or its
// clock and ours disagree).
func staleness(s api.State, now time.Time) string {
	if s.Time.IsZero() || s.Interval <= 0 {
		return ""
	}
	age := now.Sub(s.Time)
	if age.Seconds() <= staleIntervals*s.Interval {
		return ""
	}
	if age >= time.Minute {
		return fmt.Sprintf("%s old", age.Round(time.Second))
	}
	return fmt.Sprintf("%s old", age.Round(100*time.Millisecond))
}

// Run draws the agent's state on w: one plain frame with Once, else a live
// view redrawn every Refresh until ctx ends (then it returns nil). It returns
// an error at once when no agent answers at the start; once connected it keeps
// the last frame on screen, marked STALE, and says what failed while it retries.
func Run(ctx context.Context, w io.Writer, o Options) error {
	if o.Client == nil {
		o.Client = NewClient()
	}
	if o.Width == nil {
		o.Width = func() int { return 120 }
	}
	if o.Height == nil {
		o.Height = func() int { return 0 }
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if _, err := ParseFilter(o.Filter); err != nil {
		return err
	}
	view := func(color bool, height int, stale string) View {
		return View{Width: o.Width(), Height: height, Color: color, Sort: o.Sort, Filter: o.Filter, Limit: o.Limit, Stale: stale}
	}
	if o.Once {
		s, err := Fetch(ctx, o.Client, o.Addr)
		if err != nil {
			return err
		}
		return Render(w, s, view(false, o.Height(), staleness(s, o.Now())))
	}
	if o.Refresh <= 0 {
		o.Refresh = time.Second
	}

	var (
		last    api.State
		have    bool
		tick    = time.NewTicker(o.Refresh)
		buf     bytes.Buffer
		started = false
	)
	defer tick.Stop()
	for {
		s, err := Fetch(ctx, o.Client, o.Addr)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			last, have = s, true
		} else if !have && !started && errors.Is(err, ErrNoAgent) {
			return err
		}
		started = true

		// The footer first: the frame takes the lines it leaves.
		width := o.Width()
		stale := ""
		if have {
			stale = staleness(last, o.Now())
			if err != nil && stale == "" {
				stale = "the agent did not answer"
			}
		}
		f := &frame{width: max(width, minWidth), color: o.Color}
		switch {
		case err != nil && errors.Is(err, ErrNoState) && !have:
			f.line(seg{fmt.Sprintf("waiting for the agent at %s to finish its first interval…", o.Addr), sYellow})
		case err != nil:
			items := [][]seg{{{"! " + clean(err.Error()), sRed}}}
			if have {
				items = append(items, []seg{{fmt.Sprintf("(showing the state of %s; retrying every %s)", last.Time.Format("15:04:05"), o.Refresh), ""}})
			}
			f.flow("  ", items...)
		default:
			age := o.Now().Sub(last.Time).Round(100 * time.Millisecond)
			st, mark := sDim, ""
			if stale != "" {
				st, mark = sRed, "  STALE"
			}
			f.line(seg{fmt.Sprintf("%s  updated %s ago%s  refresh %s  Ctrl-C quits", o.Addr, age, mark, o.Refresh), st})
		}
		footer := f.b.String()

		buf.Reset()
		buf.WriteString(clearHome)
		if have {
			height := o.Height()
			if height > 0 {
				// A blank line and the footer under the frame; a frame of
				// at least one line (the header's first) whatever is left.
				height = max(1, height-1-lineCount(footer))
			}
			if rerr := Render(&buf, last, view(o.Color, height, stale)); rerr != nil {
				return rerr
			}
			buf.WriteByte('\n')
		}
		// No newline after the last line: on a full screen it would scroll
		// the header away.
		buf.WriteString(strings.TrimSuffix(footer, "\n"))
		if _, werr := w.Write(buf.Bytes()); werr != nil {
			return werr
		}

		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
