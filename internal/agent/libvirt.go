package agent

import (
	"context"
	"log/slog"
	"os"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/libvirt"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// wireLibvirt puts libvirt between the agent and its VMs when configured
// (libvirt.enabled): the cgroup walk's VMs are enriched from libvirt's
// domain list, and VMs are throttled through libvirt's scheduler parameters
// (act.LibvirtQuota), everything else through cq. Without libvirt it
// returns disc and cq unchanged. The returned stop function ends the client.
//
// In auto mode libvirt is used when its socket exists at start — or when the
// state file holds libvirt throttles a previous run left, which must be
// undone the way they were made.
//
// ctx is Build's: the client outlives it, until the stop function.
func wireLibvirt(ctx context.Context, cfg Config, h *host.Host, log *slog.Logger, disc sense.Discoverer, detailEvery int, cq *act.CPUQuota, state *act.StateFile) (sense.Discoverer, QuotaActuator, func()) {
	lc := cfg.Libvirt
	sock := libvirt.SocketPath(h, lc.Socket)
	leftovers := len(state.RecordKeys(act.LibvirtRecordKind)) > 0
	// The wiring's lifetime: the client runs under it; the returned stop
	// function ends it. Not the caller's cancellation: the agent's
	// releases at shutdown go through libvirt after Run's context (in the
	// CLI, the one Build got) has ended.
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	switch lc.Enabled {
	case "false":
		defer cancel()
		if leftovers {
			// Undo them now, through the cgroup files; from here on VMs are
			// throttled through their cgroup files like any tenant.
			n, err := (&act.LibvirtQuota{Libvirt: offline{}, Cgroups: cq, State: state, Log: log}).RestoreAll(ctx)
			log.Warn("libvirt.enabled is false but the state file held throttles made through libvirt; undone through the VMs' cgroup files", "state", state.Path(), "restored", n, "err", err)
		}
		return disc, cq, func() {}
	case "auto":
		if _, err := os.Stat(sock); err != nil && !leftovers {
			cancel()
			log.Info("libvirt: no socket; VMs are throttled through their cgroup files", "socket", sock)
			return disc, cq, func() {}
		}
	}
	client := libvirt.New(libvirt.Options{Socket: sock, URI: lc.URI, DialTimeout: lc.Timeout, CallTimeout: lc.Timeout, Log: log})
	quota := &act.LibvirtQuota{Libvirt: client, Cgroups: cq, State: state, Log: log, Timeout: 2 * lc.Timeout}
	client.AddHooks(libvirt.Hooks{OnConnect: quota.Resync})
	done := make(chan struct{})
	go func() {
		client.Run(ctx)
		close(done)
	}()
	// The agent restores leftovers before its first interval: give the
	// connection a moment so that goes through libvirt.
	wctx, wcancel := context.WithTimeout(ctx, 2*lc.Timeout)
	if err := client.WaitConnected(wctx); err != nil {
		log.Warn("libvirt not reachable at start; VMs are not throttled until it is (throttles are lifted through cgroup files meanwhile)", "socket", sock, "err", err)
	}
	wcancel()
	enricher := &sense.LibvirtDiscoverer{Inner: disc, Libvirt: client, Log: log, Grace: max(10*cfg.Interval, lc.Timeout),
		Host: h, Layout: cq.Layout, ThreadsEvery: detailEvery}
	return enricher, quota, func() {
		cancel()
		<-done
	}
}

// act.LibvirtQuota is the agent's QuotaActuator as it is: each call runs
// under the agent's context (Run's, detached for the releases at its end),
// and lifting a throttle goes through even once that has ended
// (act.LibvirtQuota detaches lifts from cancellation, bounded by its
// timeout).
var _ QuotaActuator = (*act.LibvirtQuota)(nil)

// offline is a libvirt that is never reachable: with libvirt.enabled false,
// LibvirtQuota still undoes what a previous run did through libvirt, through
// the cgroup files.
type offline struct{}

func (offline) Connected() bool                              { return false }
func (offline) DomainByCgroup(string) (libvirt.Domain, bool) { return libvirt.Domain{}, false }
func (offline) DomainByUUID(string) (libvirt.Domain, bool)   { return libvirt.Domain{}, false }
func (offline) Refresh(context.Context) ([]libvirt.Domain, error) {
	return nil, libvirt.ErrNotConnected
}
func (offline) SchedParams(context.Context, libvirt.Domain) (libvirt.SchedParams, error) {
	return libvirt.SchedParams{}, libvirt.ErrNotConnected
}
func (offline) SetSchedParams(context.Context, libvirt.Domain, libvirt.SchedParams) error {
	return libvirt.ErrNotConnected
}
