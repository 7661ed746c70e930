package libvirt

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
)

// rpc is the part of go-libvirt's *Libvirt the client uses. The real one
// speaks libvirt's RPC protocol over the daemon's unix socket; tests put a
// fake behind it.
type rpc interface {
	ConnectGetLibVersion() (uint64, error)
	NodeGetCPUMap(needMap, needOnline int32, flags uint32) ([]byte, uint32, int32, error)
	ConnectGetAllDomainStats(doms []golibvirt.Domain, stats, flags uint32) ([]golibvirt.DomainStatsRecord, error)
	DomainLookupByUUID(uuid golibvirt.UUID) (golibvirt.Domain, error)
	DomainGetXMLDesc(dom golibvirt.Domain, flags golibvirt.DomainXMLFlags) (string, error)
	DomainGetVcpus(dom golibvirt.Domain, maxinfo, maplen int32) ([]golibvirt.VcpuInfo, []byte, error)
	DomainGetSchedulerParametersFlags(dom golibvirt.Domain, nparams int32, flags uint32) ([]golibvirt.TypedParam, error)
	DomainSetSchedulerParametersFlags(dom golibvirt.Domain, params []golibvirt.TypedParam, flags uint32) error
	DomainPinVcpuFlags(dom golibvirt.Domain, vcpu uint32, cpumap []byte, flags uint32) error
	DomainPinEmulator(dom golibvirt.Domain, cpumap []byte, flags golibvirt.DomainModificationImpact) error
	LifecycleEvents(ctx context.Context) (<-chan golibvirt.DomainEventLifecycleMsg, error)
	// Disconnected is closed when the connection is lost.
	Disconnected() <-chan struct{}
}

// session is one connection to libvirtd.
type session interface {
	rpc
	// Close ends the connection at once, even when the daemon does not
	// answer: calls in flight return an error.
	Close()
}

// dialFunc opens a session; the client calls it with a deadline.
type dialFunc func(ctx context.Context) (session, error)

// socketSession is a go-libvirt connection over a unix socket whose
// net.Conn crosstalk holds, so it can cut a connection to a daemon that
// stopped answering (go-libvirt's own Disconnect waits for a reply first).
type socketSession struct {
	*golibvirt.Libvirt
	mu   sync.Mutex
	conn net.Conn
}

func (s *socketSession) Close() {
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// socketDialer is go-libvirt's socket.Dialer for one unix socket path.
type socketDialer struct {
	s       *socketSession
	path    string
	timeout time.Duration
}

func (d socketDialer) Dial() (net.Conn, error) {
	c, err := net.DialTimeout("unix", d.path, d.timeout)
	if err != nil {
		return nil, err
	}
	d.s.mu.Lock()
	d.s.conn = c
	d.s.mu.Unlock()
	return c, nil
}

// dialSocket connects to the libvirt daemon listening on path and opens uri.
func dialSocket(path, uri string, timeout time.Duration) dialFunc {
	return func(ctx context.Context) (session, error) {
		s := &socketSession{}
		s.Libvirt = golibvirt.NewWithDialer(socketDialer{s: s, path: path, timeout: timeout})
		done := make(chan error, 1)
		go func() { done <- s.ConnectToURI(golibvirt.ConnectURI(uri)) }()
		select {
		case err := <-done:
			if err != nil {
				s.Close()
				return nil, fmt.Errorf("connect to libvirt at %s: %w", path, err)
			}
			return s, nil
		case <-ctx.Done():
			// The daemon accepted the connection but does not answer.
			s.Close()
			return nil, fmt.Errorf("connect to libvirt at %s: no answer: %w", path, ctx.Err())
		}
	}
}
