// Package libvirt is crosstalk's view of a host's libvirt daemon: the
// domains it runs, their vCPUs and where those run, their scheduler
// parameters and statistics, and their lifecycle events. It speaks
// libvirt's RPC protocol over the daemon's unix socket with
// github.com/digitalocean/go-libvirt (pure Go, no libvirt.so) and parses
// domain XML with libvirt.org/go/libvirtxml.
//
// A Client keeps one connection and survives the daemon: Run reconnects
// with backoff when libvirtd restarts, every call has a deadline (a daemon
// that stops answering has its connection cut, so no caller hangs), and the
// domain list is kept current by lifecycle events and a periodic re-list,
// so readers on the agent's hot path (Domains, DomainByCgroup) never wait on
// the daemon.
package libvirt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

// DefaultSocket is libvirtd's (and virtqemud's) read-write socket, below the host root.
const DefaultSocket = "/run/libvirt/libvirt-sock"

// DefaultURI is the system QEMU driver.
const DefaultURI = "qemu:///system"

// Errors callers can test for with errors.Is.
var (
	// ErrNotConnected: libvirtd is not reachable now (down, restarting, not
	// answering). The call was not made, or its outcome is unknown.
	ErrNotConnected = errors.New("libvirt is not reachable")
	// ErrDomainGone: the domain no longer exists or no longer runs.
	ErrDomainGone = errors.New("domain is gone")
)

// SocketPath locates the libvirt socket through the host root: with
// --root /host (a DaemonSet) the host's /run/libvirt/libvirt-sock is
// /host/run/libvirt/libvirt-sock. socket "" means DefaultSocket.
func SocketPath(h *host.Host, socket string) string {
	if socket == "" {
		socket = DefaultSocket
	}
	return h.Path(socket)
}

// Options configure a Client.
type Options struct {
	// Socket is the socket's path as this process sees it (see SocketPath).
	Socket string
	// URI is the driver to open (default qemu:///system).
	URI string
	// DialTimeout bounds connecting (default 2s); CallTimeout bounds every
	// call (default 5s): a daemon that does not answer in time has its
	// connection cut and is reconnected.
	DialTimeout, CallTimeout time.Duration
	// Refresh is how often the domain list is re-read while connected, on
	// top of lifecycle events (default 10s).
	Refresh time.Duration
	// MaxBackoff caps the wait between reconnection attempts (default 30s;
	// the first retry is after 250ms).
	MaxBackoff time.Duration
	Log        *slog.Logger

	dial dialFunc // tests replace the socket
}

// Hooks are called from the client's goroutine.
type Hooks struct {
	// OnConnect runs after every (re)connection, once the domain list is
	// read, under the client's Run context.
	OnConnect func(ctx context.Context)
	// OnEvent runs for every lifecycle event, after the domain list is updated.
	OnEvent func(Event)
}

// Client is a connection to libvirtd that outlives the daemon's restarts.
type Client struct {
	o    Options
	log  *slog.Logger
	dial dialFunc

	mu     sync.Mutex
	sess   session // nil while disconnected
	ncpus  int     // host CPUs (for cpumaps), per session
	doms   map[string]Domain
	listed bool // doms was read on the current session
	hooks  []Hooks
	badXML map[string]string // UUID -> last XML error logged
	// settled and firstSeen track which domains libvirt is done starting
	// (see Domain.Settled).
	settled   map[string]bool
	firstSeen map[string]time.Time
	refreshC  chan struct{}
}

// New returns a client; call Run to connect.
func New(o Options) *Client {
	if o.URI == "" {
		o.URI = DefaultURI
	}
	if o.Socket == "" {
		o.Socket = DefaultSocket
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 2 * time.Second
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 5 * time.Second
	}
	if o.Refresh <= 0 {
		o.Refresh = 10 * time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	c := &Client{o: o, log: o.Log.With("libvirt", o.Socket), doms: map[string]Domain{}, badXML: map[string]string{},
		settled: map[string]bool{}, firstSeen: map[string]time.Time{}, refreshC: make(chan struct{}, 1)}
	c.dial = o.dial
	if c.dial == nil {
		c.dial = dialSocket(o.Socket, o.URI, o.DialTimeout)
	}
	return c
}

// AddHooks registers callbacks; call it before Run.
func (c *Client) AddHooks(h Hooks) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hooks = append(c.hooks, h)
}

// Connected says whether a connection is up now.
func (c *Client) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sess != nil
}

// WaitConnected returns once connected and the domain list read, or with
// ctx's error.
func (c *Client) WaitConnected(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		c.mu.Lock()
		ok := c.sess != nil && c.listed
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", ErrNotConnected, ctx.Err())
		case <-t.C:
		}
	}
}

// Run connects and keeps the connection until ctx ends: it reconnects with
// backoff (250ms doubling up to MaxBackoff) whenever the daemon goes away,
// follows lifecycle events and re-lists domains every Refresh.
func (c *Client) Run(ctx context.Context) {
	backoff := 250 * time.Millisecond
	failures := 0
	for ctx.Err() == nil {
		dctx, cancel := context.WithTimeout(ctx, c.o.DialTimeout)
		s, err := c.dial(dctx)
		cancel()
		if err != nil {
			failures++
			if failures == 1 {
				c.log.Warn("libvirt not reachable; retrying in the background (VMs are not acted on through libvirt meanwhile)", "err", err)
			} else {
				c.log.Debug("libvirt still not reachable", "attempt", failures, "err", err)
			}
			if !sleepCtx(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, c.o.MaxBackoff)
			continue
		}
		since := time.Now()
		c.serve(ctx, s, failures)
		failures = 0
		if time.Since(since) > c.o.MaxBackoff {
			backoff = 250 * time.Millisecond
		}
		if ctx.Err() == nil {
			c.log.Warn("libvirt connection lost (libvirtd restarting?); reconnecting", "after", time.Since(since).Round(time.Millisecond))
			if !sleepCtx(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, c.o.MaxBackoff)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// serve runs one session until it is lost or ctx ends.
func (c *Client) serve(ctx context.Context, s session, failures int) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.mu.Lock()
	c.sess, c.ncpus, c.listed = s, 0, false
	clear(c.settled) // re-learned from this session's first listing and events
	hooks := slices.Clone(c.hooks)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if c.sess == s {
			c.sess, c.listed = nil, false
		}
		c.mu.Unlock()
		s.Close()
	}()

	var version string
	_ = c.callOn(s, ctx, "version", func(r rpc) error {
		v, err := r.ConnectGetLibVersion()
		version = fmt.Sprintf("%d.%d.%d", v/1000000, v/1000%1000, v%1000)
		return err
	})
	events, err := c.subscribe(sctx, s)
	if err != nil {
		c.log.Warn("libvirt lifecycle events unavailable; relying on periodic re-listing", "err", err)
	}
	doms, err := c.Refresh(ctx)
	if err != nil && !errors.Is(err, ErrNotConnected) {
		c.log.Warn("libvirt: listing domains", "err", err)
	}
	level := slog.LevelInfo
	c.log.Log(ctx, level, "connected to libvirt", "version", version, "domains", len(doms), "after_failures", failures)
	for _, h := range hooks {
		if h.OnConnect != nil {
			h.OnConnect(ctx)
		}
	}

	tick := time.NewTicker(c.o.Refresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.Disconnected():
			return
		case <-tick.C:
			if _, err := c.Refresh(ctx); err != nil && !errors.Is(err, ErrNotConnected) {
				c.log.Warn("libvirt: listing domains", "err", err)
			}
		case <-c.refreshC:
			c.Refresh(ctx)
		case ev, ok := <-events:
			if !ok {
				events = nil // the stream ended with the connection: Disconnected follows
				continue
			}
			c.handleEvent(ctx, ev, hooks)
		}
	}
}

// subscribe registers for lifecycle events on s.
func (c *Client) subscribe(ctx context.Context, s session) (<-chan golibvirt.DomainEventLifecycleMsg, error) {
	var ch <-chan golibvirt.DomainEventLifecycleMsg
	err := c.callOn(s, ctx, "subscribe to lifecycle events", func(r rpc) error {
		var err error
		ch, err = r.LifecycleEvents(ctx)
		return err
	})
	return ch, err
}

// current returns the session, or ErrNotConnected.
func (c *Client) current() (session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == nil {
		return nil, ErrNotConnected
	}
	return c.sess, nil
}

// call runs f on the current session with the call deadline.
func (c *Client) call(ctx context.Context, what string, f func(rpc) error) error {
	s, err := c.current()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return c.callOn(s, ctx, what, f)
}

// callOn runs f with a deadline. A call that does not return in time cuts
// the connection (Run reconnects): a hung daemon must not hang the agent.
//
// The caller's ctx decides only whether a call starts. Once sent, a call
// is waited for (up to the deadline) even if ctx ends meanwhile: the
// request is on the wire and libvirt will carry it out, so walking away
// would report a change as not made when it was, and cutting the
// connection to stop waiting would take libvirt away from whatever must
// follow — an agent stopping mid-rewrite still has its throttles to lift
// through libvirt, after that rewrite and not before it.
func (c *Client) callOn(s session, ctx context.Context, what string, f func(rpc) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: not sent: %w", what, err)
	}
	deadline := time.NewTimer(c.o.CallTimeout)
	defer deadline.Stop()
	done := make(chan error, 1)
	go func() { done <- f(s) }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%s: %w", what, classify(err))
		}
		return nil
	case <-deadline.C:
		s.Close()
		return fmt.Errorf("%s: libvirt did not answer within %s (connection reset): %w", what, c.o.CallTimeout, ErrNotConnected)
	}
}

// classify maps go-libvirt's errors onto ErrDomainGone and ErrNotConnected.
func classify(err error) error {
	var le golibvirt.Error
	if errors.As(err, &le) {
		switch golibvirt.ErrorNumber(le.Code) {
		case golibvirt.ErrNoDomain:
			return fmt.Errorf("%w: %s", ErrDomainGone, le.Message)
		case golibvirt.ErrOperationInvalid:
			if strings.Contains(le.Message, "not running") {
				return fmt.Errorf("%w: %s", ErrDomainGone, le.Message)
			}
		}
		return err
	}
	if errors.Is(err, golibvirt.ErrInterrupted) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
		return fmt.Errorf("%w: %v", ErrNotConnected, err)
	}
	return err
}

// RequestRefresh asks Run to re-list domains soon (after a change made elsewhere).
func (c *Client) RequestRefresh() {
	select {
	case c.refreshC <- struct{}{}:
	default:
	}
}
