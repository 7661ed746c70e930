package libvirt

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
)

// runClient starts a client on a fake daemon with short timeouts.
func runClient(t *testing.T, f *fakeDaemon, hooks ...Hooks) (*Client, *logBuf) {
	t.Helper()
	log, buf := newLog(t)
	c := New(Options{Socket: "/fake/libvirt-sock", Log: log, DialTimeout: 200 * time.Millisecond, CallTimeout: 300 * time.Millisecond,
		Refresh: time.Hour, MaxBackoff: 50 * time.Millisecond, dial: f.dial})
	for _, h := range hooks {
		c.AddHooks(h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
	return c, buf
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func wait(t *testing.T, c *Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
}

func names(doms []Domain) string {
	var s []string
	for _, d := range doms {
		s = append(s, d.Name)
	}
	return strings.Join(s, ",")
}

func TestClientListsDomainsWithConfig(t *testing.T) {
	f := newFakeDaemon()
	f.start("web", 1, 2, "2-3")
	f.start("db", 2, 1, "1")
	c, _ := runClient(t, f)
	wait(t, c)
	doms, current := c.Domains()
	if !current || names(doms) != "db,web" {
		t.Fatalf("Domains() = %s, current %v", names(doms), current)
	}
	web := doms[1]
	if web.ID != 1 || web.VCPUs != 2 || web.State != "running" || web.UUID != "01010101-0101-0101-0101-010101010101" {
		t.Errorf("web = %+v", web)
	}
	if web.Config == nil {
		t.Fatalf("web has no config: %v", web.ConfigErr)
	}
	if pinned, all := web.Config.PinnedCPUs(); !all || pinned.String() != "2-3" {
		t.Errorf("web pinned to %s (all %v), want 2-3", pinned, all)
	}
	for _, cg := range []string{"/machine/qemu-1-web.libvirt-qemu", `/machine.slice/machine-qemu\x2d1\x2dweb.scope`} {
		if d, ok := c.DomainByCgroup(cg); !ok || d.Name != "web" {
			t.Errorf("DomainByCgroup(%s) = %q, %v", cg, d.Name, ok)
		}
	}
	// Another daemon's domain 1 has another name: not ours.
	if d, ok := c.DomainByCgroup("/machine/qemu-1-other.libvirt-qemu"); ok {
		t.Errorf("matched another daemon's domain to %s", d.Name)
	}
}

func TestClientFollowsLifecycleEvents(t *testing.T) {
	f := newFakeDaemon()
	var events atomic.Int32
	c, buf := runClient(t, f, Hooks{OnEvent: func(Event) { events.Add(1) }})
	wait(t, c)
	d := f.start("late", 3, 1, "0")
	eventually(t, "the started domain to be listed", func() bool {
		_, ok := c.DomainByUUID(formatUUID(d.UUID))
		return ok
	})
	f.stop(d)
	eventually(t, "the stopped domain to be dropped", func() bool {
		_, ok := c.DomainByUUID(formatUUID(d.UUID))
		return !ok
	})
	// OnEvent runs after the list is updated (and the event logged), so
	// the drop may be seen before either.
	eventually(t, "OnEvent for both events", func() bool { return events.Load() == 2 })
	if !buf.contains("domain started", "late") || !buf.contains("domain stopped", "late") {
		t.Error("lifecycle events were not logged")
	}
	if n := events.Load(); n != 2 {
		t.Errorf("OnEvent ran %d times, want 2", n)
	}
}

// libvirtd restarting: the connection drops, dials fail for a while, then
// succeed; the client logs it, reconnects, re-lists and runs OnConnect again.
func TestClientReconnectsWhenLibvirtdRestarts(t *testing.T) {
	f := newFakeDaemon()
	f.start("web", 1, 1, "1")
	var connects atomic.Int32
	c, buf := runClient(t, f, Hooks{OnConnect: func(context.Context) { connects.Add(1) }})
	wait(t, c)
	f.setDown(true)
	eventually(t, "the client to notice the daemon left", func() bool { return !c.Connected() })
	if _, current := c.Domains(); current {
		t.Error("domain list still reported current while disconnected")
	}
	ctx := context.Background()
	d, _ := c.DomainByUUID("01010101-0101-0101-0101-010101010101")
	if _, err := c.SchedParams(ctx, d); !errors.Is(err, ErrNotConnected) {
		t.Errorf("call while down: %v, want ErrNotConnected", err)
	}
	n := f.dialCount()
	eventually(t, "retries", func() bool { return f.dialCount() >= n+2 })
	f.vanish(golibvirt.Domain{UUID: fakeUUID(1)})
	f.start("web2", 4, 1, "1")
	f.setDown(false)
	eventually(t, "reconnection", func() bool { return connects.Load() == 2 })
	doms, current := c.Domains()
	if !current || names(doms) != "web2" {
		t.Errorf("after reconnect: %s (current %v), want web2", names(doms), current)
	}
	if !buf.contains("libvirt connection lost") || !buf.contains("connected to libvirt") {
		t.Error("loss and reconnection were not logged")
	}
}

// oneDomain runs a client against a fake daemon with one domain, "web",
// and then changes the daemon with set (under its lock).
func oneDomain(t *testing.T, set func(*fakeDaemon)) (*fakeDaemon, *Client, *logBuf, Domain) {
	t.Helper()
	f := newFakeDaemon()
	f.start("web", 1, 1, "1")
	c, buf := runClient(t, f)
	wait(t, c)
	d, _ := c.DomainByUUID("01010101-0101-0101-0101-010101010101")
	f.mu.Lock()
	set(f)
	f.mu.Unlock()
	return f, c, buf, d
}

// A daemon that accepts calls but never answers must not hang a caller:
// the call fails after CallTimeout and the connection is reset.
func TestClientCallDeadlineCutsAHungDaemon(t *testing.T) {
	f, c, _, d := oneDomain(t, func(f *fakeDaemon) { f.hang = true })
	start := time.Now()
	err := c.SetSchedParams(context.Background(), d, SchedParams{GlobalQuota: Ptr[int64](1000)})
	if !errors.Is(err, ErrNotConnected) || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("hung call: %v", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("hung call returned after %s", el)
	}
	f.mu.Lock()
	f.hang = false
	f.mu.Unlock()
	eventually(t, "reconnection after the reset", func() bool {
		_, current := c.Domains()
		return current && f.dialCount() >= 2
	})
}

// A caller whose context ends while its call is on the wire gets the
// call's real outcome, and the connection stays up: an agent stopping in
// the middle of a rewrite still lifts its throttles through libvirt, after
// that rewrite. A call under an ended context is not sent at all.
func TestClientCallerCancelKeepsTheConnection(t *testing.T) {
	// Each call held 100 ms, under the 300 ms call deadline.
	f, c, buf, d := oneDomain(t, func(f *fakeDaemon) { f.delay = 100 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	if err := c.SetSchedParams(ctx, d, SchedParams{GlobalQuota: Ptr[int64](1000)}); err != nil {
		t.Fatalf("a call whose caller went away meanwhile: %v, want its outcome (done)", err)
	}
	f.mu.Lock()
	f.delay = 0
	sets := slices.Clone(f.sets)
	f.mu.Unlock()
	if !slices.Contains(sets, "web global_quota=1000") {
		t.Errorf("daemon's writes %q: the call did not land", sets)
	}
	if !c.Connected() || f.dialCount() != 1 || buf.contains("connection lost") {
		t.Errorf("connected %v after %d dial(s): the caller's cancellation cut the connection", c.Connected(), f.dialCount())
	}
	if err := c.SetSchedParams(ctx, d, SchedParams{GlobalQuota: Ptr[int64](2000)}); !errors.Is(err, context.Canceled) {
		t.Errorf("a call under an ended context: %v, want it not sent (context.Canceled)", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if slices.Contains(f.sets, "web global_quota=2000") {
		t.Error("a call under an ended context reached the daemon")
	}
}

// A domain whose XML does not parse stays listed, without a config, and
// the problem is logged once.
func TestClientMalformedXML(t *testing.T) {
	f := newFakeDaemon()
	d := f.start("broken", 5, 1, "1")
	f.mu.Lock()
	f.doms[d.UUID].xml = "<domain><name>broken</name><vcpu>1</vcpu><cputune><vcpupin vcpu='0' cpuset='zz'/>"
	f.mu.Unlock()
	c, buf := runClient(t, f)
	wait(t, c)
	doms, _ := c.Domains()
	if len(doms) != 1 || doms[0].Config != nil || !errors.Is(doms[0].ConfigErr, ErrMalformedXML) {
		t.Fatalf("domains: %+v", doms)
	}
	c.Refresh(context.Background())
	if n := buf.count("cannot use domain XML"); n != 1 {
		t.Errorf("malformed XML logged %d times over two listings, want once", n)
	}
	if _, err := c.Config(context.Background(), doms[0]); !errors.Is(err, ErrMalformedXML) {
		t.Errorf("Config: %v", err)
	}
}

// A running domain whose XML cannot be read this time (a call cut while
// libvirtd restarts) keeps the pinning last read; one never read, or a
// new run of it, has none.
func TestClientKeepsTheLastXMLWhenAReadFails(t *testing.T) {
	f := newFakeDaemon()
	d := f.start("web", 7, 1, "1")
	c, buf := runClient(t, f)
	wait(t, c)
	f.mu.Lock()
	f.doms[d.UUID].xmlErr = errors.New("internal error: client socket is closed")
	f.mu.Unlock()
	doms, err := c.Refresh(context.Background())
	if err != nil || len(doms) != 1 {
		t.Fatalf("refresh: %v, %d domains", err, len(doms))
	}
	if doms[0].Config == nil || doms[0].ConfigErr == nil {
		t.Fatalf("last pinning not kept: config %v, err %v", doms[0].Config, doms[0].ConfigErr)
	}
	if pinned, all := doms[0].Config.PinnedCPUs(); !all || pinned.String() != "1" {
		t.Errorf("kept pinning %s (all %v), want 1", pinned, all)
	}
	if !buf.contains("keeping the pinning last read") {
		t.Error("the unread XML was not logged")
	}
	// The same domain run anew (another ID) on CPU 0 while every read of
	// XML fails, its stop unseen (no event): the old run's pinning is not
	// the new one's.
	f.mu.Lock()
	f.xmlErr = errors.New("internal error: client socket is closed")
	f.mu.Unlock()
	f.vanish(d)
	f.start("web", 7, 1, "0")
	doms, _ = c.Refresh(context.Background())
	if len(doms) != 1 || doms[0].ID == int(d.ID) {
		t.Fatalf("domains after the new run: %+v", doms)
	}
	if doms[0].Config != nil {
		pinned, _ := doms[0].Config.PinnedCPUs()
		t.Errorf("a new run of the domain kept the old run's pinning %s", pinned)
	}
}

// A domain that vanishes between being listed and being acted on gives
// ErrDomainGone, not a generic error.
func TestClientDomainVanishesMidAction(t *testing.T) {
	f := newFakeDaemon()
	gone := f.start("gone", 6, 1, "1")
	c, _ := runClient(t, f)
	wait(t, c)
	d, ok := c.DomainByUUID(formatUUID(gone.UUID))
	if !ok {
		t.Fatal("not listed")
	}
	f.vanish(gone)
	ctx := context.Background()
	for what, err := range map[string]error{
		"set":   c.SetSchedParams(ctx, d, SchedParams{GlobalQuota: Ptr[int64](1000), GlobalPeriod: Ptr[uint64](16000)}),
		"pin":   c.PinVCPU(ctx, d, 0, cpuset.Of(0)),
		"emu":   c.PinEmulator(ctx, d, cpuset.Of(0)),
		"stats": func() error { _, err := c.Stats(ctx, d); return err }(),
		"vcpus": func() error { _, err := c.VCPUs(ctx, d); return err }(),
	} {
		if !errors.Is(err, ErrDomainGone) {
			t.Errorf("%s on a vanished domain: %v, want ErrDomainGone", what, err)
		}
	}
	if _, err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.DomainByUUID(d.UUID); ok {
		t.Error("vanished domain still listed after a refresh")
	}
}

func TestClientSchedParamsRoundTrip(t *testing.T) {
	f := newFakeDaemon()
	f.start("web", 1, 2, "2-3")
	c, _ := runClient(t, f)
	wait(t, c)
	ctx := context.Background()
	d, _ := c.DomainByUUID("01010101-0101-0101-0101-010101010101")
	p, err := c.SchedParams(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.String(); got != "cpu_shares=1024 vcpu_period=100000 vcpu_quota=-1 global_period=100000 global_quota=-1" {
		t.Errorf("SchedParams = %s", got)
	}
	// The fake checks the wire types as libvirt does (periods ullong, quotas llong).
	if err := c.SetSchedParams(ctx, d, SchedParams{GlobalPeriod: Ptr[uint64](16000), GlobalQuota: Ptr[int64](2000), VCPUQuota: Ptr[int64](-1)}); err != nil {
		t.Fatal(err)
	}
	p, _ = c.SchedParams(ctx, d)
	if *p.GlobalPeriod != 16000 || *p.GlobalQuota != 2000 {
		t.Errorf("after set: %s", p)
	}
	if err := c.PinVCPU(ctx, d, 1, cpuset.Of(3)); err != nil {
		t.Fatal(err)
	}
	if err := c.PinEmulator(ctx, d, cpuset.MustParse("2-3")); err != nil {
		t.Fatal(err)
	}
	if err := c.PinVCPU(ctx, d, 0, cpuset.Of(9)); err == nil || !strings.Contains(err.Error(), "the host has 4") {
		t.Errorf("pinning to a CPU the host lacks: %v", err)
	}
	if got := strings.Join(f.pins, "; "); got != "web vcpu1 3; web emulator 2-3" {
		t.Errorf("pins = %s", got)
	}
	vcpus, err := c.VCPUs(ctx, d)
	if err != nil || len(vcpus) != 2 || vcpus[1].Affinity.String() != "1" || vcpus[1].HostCPU != 1 {
		t.Errorf("VCPUs = %+v, %v", vcpus, err)
	}
	st, err := c.Stats(ctx)
	if err != nil || len(st) != 1 || st[0].CPUTime != 5*time.Second || st[0].VCPUs[0].Delay != 2*time.Second || !st[0].VCPUs[0].HasDelay {
		t.Errorf("Stats = %+v, %v", st, err)
	}
}

func TestClientRetriesWhileDaemonAbsent(t *testing.T) {
	f := newFakeDaemon()
	f.setDown(true)
	c, buf := runClient(t, f)
	eventually(t, "several attempts", func() bool { return f.dialCount() >= 3 })
	if c.Connected() {
		t.Fatal("connected to a daemon that is down")
	}
	if warns := buf.count("level=WARN"); warns != 1 {
		t.Errorf("%d warnings for one outage, want 1 (retries log at debug)", warns)
	}
	f.setDown(false)
	wait(t, c)
}

// Domains running when the client connects are settled; one that appears
// later settles with its "started" event (libvirt ends the start job first).
func TestClientSettledDomains(t *testing.T) {
	f := newFakeDaemon()
	f.start("old", 1, 1, "1")
	c, _ := runClient(t, f)
	wait(t, c)
	if d, _ := c.DomainByUUID(formatUUID(fakeUUID(1))); !d.Settled {
		t.Error("a domain running at connection is not settled")
	}
	// Listed before its event: starting.
	f.mu.Lock()
	u := fakeUUID(2)
	f.doms[u] = &fakeDom{dom: golibvirt.Domain{Name: "new", UUID: u, ID: 9}, state: 1, vcpus: 1, xml: domXML("new", u, 1, "1")}
	f.mu.Unlock()
	c.Refresh(context.Background())
	if d, ok := c.DomainByUUID(formatUUID(u)); !ok || d.Settled {
		t.Errorf("a domain listed before its started event: %+v, %v", d, ok)
	}
	f.event(golibvirt.Domain{Name: "new", UUID: u, ID: 9}, golibvirt.DomainEventStarted)
	eventually(t, "the started event to settle it", func() bool {
		d, _ := c.DomainByUUID(formatUUID(u))
		return d.Settled
	})
	c.Refresh(context.Background())
	if d, _ := c.DomainByUUID(formatUUID(u)); !d.Settled {
		t.Error("a refresh unsettled it")
	}
}
