package libvirt

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
)

// Domain is one running (or paused) domain.
type Domain struct {
	Name string `json:"name"`
	UUID string `json:"uuid"`
	// ID is the running domain's ID (part of its machine and cgroup name).
	ID    int    `json:"id"`
	State string `json:"state"` // running, paused, blocked, shutdown, crashed, pmsuspended
	VCPUs int    `json:"vcpus"` // online vCPUs
	// Settled says libvirt is done starting it: its "started" event arrived,
	// it was running when the client connected, or it was listed long ago.
	// While libvirt starts a domain it holds the domain's job, and any call
	// that changes the domain waits for it (up to 30 s), so crosstalk acts
	// only on settled domains.
	Settled bool `json:"settled"`
	// Config is its live XML, parsed; nil when it could not be read or
	// parsed, and ConfigErr says why (the domain is still listed).
	Config    *DomainConfig `json:"-"`
	ConfigErr error         `json:"-"`
}

// ref is the RPC's handle for d.
func (d Domain) ref() (golibvirt.Domain, error) {
	u, err := parseUUID(d.UUID)
	if err != nil {
		return golibvirt.Domain{}, fmt.Errorf("domain %s: %w", d.Name, err)
	}
	return golibvirt.Domain{Name: d.Name, UUID: u, ID: int32(d.ID)}, nil
}

func parseUUID(s string) (golibvirt.UUID, error) {
	var u golibvirt.UUID
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil || len(b) != len(u) {
		return u, fmt.Errorf("bad UUID %q", s)
	}
	copy(u[:], b)
	return u, nil
}

func formatUUID(u golibvirt.UUID) string {
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// stateName names virDomainState values.
func stateName(s int64) string {
	switch golibvirt.DomainState(s) {
	case golibvirt.DomainRunning:
		return "running"
	case golibvirt.DomainBlocked:
		return "blocked"
	case golibvirt.DomainPaused:
		return "paused"
	case golibvirt.DomainShutdown:
		return "shutdown"
	case golibvirt.DomainShutoff:
		return "shutoff"
	case golibvirt.DomainCrashed:
		return "crashed"
	case golibvirt.DomainPmsuspended:
		return "pmsuspended"
	}
	return "nostate"
}

// Domains returns the active domains as last listed (sorted by name), and
// whether the list is current: false while libvirt is not reachable, when
// the list is what was known before the connection was lost.
func (c *Client) Domains() ([]Domain, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Domain, 0, len(c.doms))
	for _, d := range c.doms {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b Domain) int { return strings.Compare(a.Name, b.Name) })
	return out, c.sess != nil && c.listed
}

// DomainByUUID returns a listed domain.
func (c *Client) DomainByUUID(uuid string) (Domain, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.doms[uuid]
	return d, ok
}

// DomainByCgroup returns the listed domain whose cgroup this is
// ("/machine/qemu-3-web.libvirt-qemu", "/machine.slice/machine-qemu\x2d3\x2dweb.scope").
func (c *Client) DomainByCgroup(cgroupPath string) (Domain, bool) {
	ref, ok := ParseMachineCgroup(cgroupPath)
	if !ok {
		return Domain{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range c.doms {
		if ref.Matches(d) {
			return d, true
		}
	}
	return Domain{}, false
}

// statsFlags are the groups the domain list reads: state and vCPU counts
// (vcpu.current) in one call for every domain.
const listStats = uint32(golibvirt.DomainStatsState | golibvirt.DomainStatsVCPU)

// Refresh re-lists the active domains now (with their live XML) and returns them.
func (c *Client) Refresh(ctx context.Context) ([]Domain, error) {
	s, err := c.current()
	if err != nil {
		return nil, fmt.Errorf("list domains: %w", err)
	}
	var recs []golibvirt.DomainStatsRecord
	err = c.callOn(s, ctx, "list domains", func(r rpc) error {
		var err error
		// NOWAIT: a domain libvirt is busy with (starting, migrating) is
		// listed with what can be read at once instead of blocking the list.
		recs, err = r.ConnectGetAllDomainStats(nil, listStats, uint32(golibvirt.ConnectGetAllDomainsStatsActive|golibvirt.ConnectGetAllDomainsStatsNowait))
		return err
	})
	if err != nil {
		return nil, err
	}
	doms := map[string]Domain{}
	for _, rec := range recs {
		d, ok := c.describe(ctx, s, rec)
		if ok {
			doms[d.UUID] = d
		}
	}
	c.mu.Lock()
	if c.sess == s {
		first := !c.listed
		for uuid, d := range doms {
			if first {
				c.settled[uuid] = true // running when we connected
			}
			d.Settled = c.isSettledLocked(uuid)
			doms[uuid] = d
		}
		c.doms, c.listed = doms, true
	}
	c.mu.Unlock()
	out := make([]Domain, 0, len(doms))
	for _, d := range doms {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b Domain) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// settleAfter is when a domain counts as settled without its started event
// (events unavailable): libvirt gives up waiting for a domain job after 30 s.
const settleAfter = 30 * time.Second

// isSettledLocked reports whether a listed domain is settled, noting when it
// was first seen.
func (c *Client) isSettledLocked(uuid string) bool {
	if c.settled[uuid] {
		return true
	}
	first, ok := c.firstSeen[uuid]
	if !ok {
		c.firstSeen[uuid] = time.Now()
		return false
	}
	return time.Since(first) >= settleAfter
}

// describe turns a stats record into a Domain, reading its live XML. It
// returns false for a domain that is not active (any more).
func (c *Client) describe(ctx context.Context, s session, rec golibvirt.DomainStatsRecord) (Domain, bool) {
	d := Domain{Name: rec.Dom.Name, UUID: formatUUID(rec.Dom.UUID), ID: int(rec.Dom.ID), State: "running"}
	for _, p := range rec.Params {
		switch p.Field {
		case "state.state":
			if v, ok := paramInt(p.Value); ok {
				d.State = stateName(v)
			}
		case "vcpu.current":
			if v, ok := paramInt(p.Value); ok {
				d.VCPUs = int(v)
			}
		}
	}
	if d.State == "shutoff" || d.ID < 0 {
		return d, false
	}
	var doc string
	err := c.callOn(s, ctx, "domain "+d.Name+" XML", func(r rpc) error {
		var err error
		doc, err = r.DomainGetXMLDesc(rec.Dom, 0)
		return err
	})
	unread := false
	switch {
	case errors.Is(err, ErrDomainGone):
		return d, false // stopped between the list and now
	case err == nil:
		d.Config, err = ParseDomainXML(doc)
	default:
		unread = true
	}
	d.ConfigErr = err
	c.mu.Lock()
	if old, ok := c.doms[d.UUID]; unread && ok && old.ID == d.ID && old.Config != nil {
		// Not read this time (a call cut while libvirtd restarts): the
		// same running domain's last XML still says how it is pinned. A
		// domain taken for unpinned would be throttled for all the host's
		// CPUs instead of its own.
		d.Config = old.Config
	}
	prev, logged := c.badXML[d.UUID]
	warn := err != nil && prev != err.Error()
	switch {
	case warn:
		c.badXML[d.UUID] = err.Error()
	case err == nil && logged:
		delete(c.badXML, d.UUID)
	}
	c.mu.Unlock()
	// Once per domain and error: its pinning and tuning are unknown (or as
	// last read), everything else about it still works.
	switch {
	case warn && d.Config != nil:
		c.log.Warn("libvirt: cannot read domain XML; keeping the pinning last read", "domain", d.Name, "uuid", d.UUID, "err", err)
	case warn:
		c.log.Warn("libvirt: cannot use domain XML; its pinning is unknown", "domain", d.Name, "uuid", d.UUID, "err", err)
	}
	if d.VCPUs == 0 && d.Config != nil {
		d.VCPUs = d.Config.VCPUs
	}
	return d, true
}

// Config reads and parses a domain's live XML now.
func (c *Client) Config(ctx context.Context, d Domain) (*DomainConfig, error) {
	doc, err := c.XML(ctx, d)
	if err != nil {
		return nil, err
	}
	cfg, err := ParseDomainXML(doc)
	if err != nil {
		return nil, fmt.Errorf("domain %s: %w", d.Name, err)
	}
	return cfg, nil
}

// Event is a domain lifecycle event.
type Event struct {
	Domain string
	UUID   string
	ID     int
	// Kind: defined, undefined, started, suspended, resumed, stopped,
	// shutdown, pmsuspended, crashed.
	Kind   string
	Detail int
}

func eventKind(e int32) string {
	switch golibvirt.DomainEventType(e) {
	case golibvirt.DomainEventDefined:
		return "defined"
	case golibvirt.DomainEventUndefined:
		return "undefined"
	case golibvirt.DomainEventStarted:
		return "started"
	case golibvirt.DomainEventSuspended:
		return "suspended"
	case golibvirt.DomainEventResumed:
		return "resumed"
	case golibvirt.DomainEventStopped:
		return "stopped"
	case golibvirt.DomainEventShutdown:
		return "shutdown"
	case golibvirt.DomainEventPmsuspended:
		return "pmsuspended"
	case golibvirt.DomainEventCrashed:
		return "crashed"
	}
	return fmt.Sprintf("event-%d", e)
}

// handleEvent updates the domain list for one lifecycle event.
func (c *Client) handleEvent(ctx context.Context, m golibvirt.DomainEventLifecycleMsg, hooks []Hooks) {
	ev := Event{Domain: m.Dom.Name, UUID: formatUUID(m.Dom.UUID), ID: int(m.Dom.ID), Kind: eventKind(m.Event), Detail: int(m.Detail)}
	switch ev.Kind {
	case "stopped", "crashed", "undefined":
		c.mu.Lock()
		delete(c.doms, ev.UUID)
		delete(c.badXML, ev.UUID)
		delete(c.settled, ev.UUID)
		delete(c.firstSeen, ev.UUID)
		c.mu.Unlock()
		c.log.Info("libvirt: domain "+ev.Kind, "domain", ev.Domain, "uuid", ev.UUID, "detail", ev.Detail)
	case "started", "resumed", "suspended", "pmsuspended":
		if ev.Kind == "started" || ev.Kind == "resumed" {
			// libvirt ends the start job before it sends the event.
			c.mu.Lock()
			c.settled[ev.UUID] = true
			c.mu.Unlock()
		}
		if err := c.refreshOne(ctx, m.Dom); err != nil {
			c.log.Debug("libvirt: reading domain after event", "domain", ev.Domain, "event", ev.Kind, "err", err)
		}
		if ev.Kind == "started" {
			c.log.Info("libvirt: domain started", "domain", ev.Domain, "uuid", ev.UUID, "id", ev.ID)
		}
	default:
		c.log.Debug("libvirt: domain event", "domain", ev.Domain, "event", ev.Kind, "detail", ev.Detail)
	}
	for _, h := range hooks {
		if h.OnEvent != nil {
			h.OnEvent(ev)
		}
	}
}

// refreshOne re-reads one domain into the list (or drops it when it is no
// longer active).
func (c *Client) refreshOne(ctx context.Context, dom golibvirt.Domain) error {
	s, err := c.current()
	if err != nil {
		return err
	}
	var recs []golibvirt.DomainStatsRecord
	err = c.callOn(s, ctx, "domain "+dom.Name+" state", func(r rpc) error {
		var err error
		recs, err = r.ConnectGetAllDomainStats([]golibvirt.Domain{dom}, listStats, uint32(golibvirt.ConnectGetAllDomainsStatsNowait))
		return err
	})
	uuid := formatUUID(dom.UUID)
	if errors.Is(err, ErrDomainGone) {
		recs, err = nil, nil
	}
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if formatUUID(rec.Dom.UUID) != uuid {
			continue
		}
		if d, ok := c.describe(ctx, s, rec); ok {
			c.mu.Lock()
			d.Settled = c.isSettledLocked(d.UUID)
			c.doms[d.UUID] = d
			c.mu.Unlock()
			return nil
		}
	}
	c.mu.Lock()
	delete(c.doms, uuid)
	c.mu.Unlock()
	return nil
}

// paramInt reads an integer typed parameter of any width.
func paramInt(v golibvirt.TypedParamValue) (int64, bool) {
	switch x := v.I.(type) {
	case int32:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int64:
		return x, true
	case uint64:
		return int64(x), true
	}
	return 0, false
}
