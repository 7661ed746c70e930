package libvirt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
)

// fakeDaemon is a libvirtd for tests: domains with XML and scheduler
// parameters, lifecycle events, and the failures the client must survive —
// a daemon that is down, one that stops answering, a connection dropped
// (a restart), a domain that vanishes, XML that does not parse.
type fakeDaemon struct {
	mu     sync.Mutex
	doms   map[golibvirt.UUID]*fakeDom
	nextID int32
	down   bool // dials fail
	hang   bool // calls block until the session is closed
	// delay holds every call this long before it is carried out (a busy
	// daemon), or until the session is closed.
	delay    time.Duration
	dials    int
	sessions []*fakeSession
	// xmlErr fails every domain's XML read (a call cut mid-restart).
	xmlErr error
	sets   []string // scheduler parameter writes, "name field=value"
	pins   []string
}

type fakeDom struct {
	dom   golibvirt.Domain
	state int64
	vcpus int
	xml   string
	// xmlErr fails reading the XML (a call cut mid-restart).
	xmlErr error
	sched  map[string]golibvirt.TypedParam
}

func newFakeDaemon() *fakeDaemon {
	return &fakeDaemon{doms: map[golibvirt.UUID]*fakeDom{}, nextID: 1}
}

func fakeUUID(n byte) golibvirt.UUID {
	var u golibvirt.UUID
	for i := range u {
		u[i] = n
	}
	return u
}

// domXML is a small valid domain definition pinned to cpus.
func domXML(name string, u golibvirt.UUID, vcpus int, cpus string) string {
	pins := ""
	for i := range vcpus {
		pins += fmt.Sprintf("<vcpupin vcpu='%d' cpuset='%s'/>", i, cpus)
	}
	return fmt.Sprintf(`<domain type='qemu'><name>%s</name><uuid>%s</uuid><memory unit='MiB'>128</memory>
<vcpu placement='static'>%d</vcpu><cputune>%s<emulatorpin cpuset='%s'/></cputune>
<os><type arch='x86_64'>hvm</type></os></domain>`, name, formatUUID(u), vcpus, pins, cpus)
}

// start runs a domain and sends "started" to every session.
func (f *fakeDaemon) start(name string, n byte, vcpus int, cpus string) golibvirt.Domain {
	f.mu.Lock()
	u := fakeUUID(n)
	d := golibvirt.Domain{Name: name, UUID: u, ID: f.nextID}
	f.nextID++
	f.doms[u] = &fakeDom{dom: d, state: int64(golibvirt.DomainRunning), vcpus: vcpus, xml: domXML(name, u, vcpus, cpus), sched: map[string]golibvirt.TypedParam{
		"cpu_shares":    {Field: "cpu_shares", Value: *golibvirt.NewTypedParamValueUllong(1024)},
		"vcpu_period":   {Field: "vcpu_period", Value: *golibvirt.NewTypedParamValueUllong(100000)},
		"vcpu_quota":    {Field: "vcpu_quota", Value: *golibvirt.NewTypedParamValueLlong(-1)},
		"global_period": {Field: "global_period", Value: *golibvirt.NewTypedParamValueUllong(100000)},
		"global_quota":  {Field: "global_quota", Value: *golibvirt.NewTypedParamValueLlong(-1)},
	}}
	f.mu.Unlock()
	f.event(d, golibvirt.DomainEventStarted)
	return d
}

// stop removes a domain and sends "stopped".
func (f *fakeDaemon) stop(d golibvirt.Domain) {
	f.mu.Lock()
	delete(f.doms, d.UUID)
	f.mu.Unlock()
	f.event(d, golibvirt.DomainEventStopped)
}

// vanish removes a domain without an event (it died between two calls).
func (f *fakeDaemon) vanish(d golibvirt.Domain) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.doms, d.UUID)
}

func (f *fakeDaemon) event(d golibvirt.Domain, kind golibvirt.DomainEventType) {
	f.mu.Lock()
	sessions := append([]*fakeSession(nil), f.sessions...)
	f.mu.Unlock()
	for _, s := range sessions {
		s.mu.Lock()
		ch := s.events
		s.mu.Unlock()
		if ch == nil {
			continue
		}
		select {
		case ch <- golibvirt.DomainEventLifecycleMsg{Dom: d, Event: int32(kind)}:
		case <-s.closed:
		}
	}
}

// restart drops every connection, as libvirtd exiting does.
func (f *fakeDaemon) restart() {
	f.mu.Lock()
	sessions := f.sessions
	f.sessions = nil
	f.mu.Unlock()
	for _, s := range sessions {
		s.Close()
	}
}

func (f *fakeDaemon) setDown(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
	if down {
		f.restart()
	}
}

func (f *fakeDaemon) dial(ctx context.Context) (session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dials++
	if f.down {
		return nil, errors.New("dial unix /run/libvirt/libvirt-sock: connect: no such file or directory")
	}
	s := &fakeSession{d: f, closed: make(chan struct{})}
	f.sessions = append(f.sessions, s)
	return s, nil
}

func (f *fakeDaemon) dialCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dials
}

type fakeSession struct {
	d      *fakeDaemon
	mu     sync.Mutex
	once   sync.Once
	closed chan struct{}
	events chan golibvirt.DomainEventLifecycleMsg
}

func (s *fakeSession) Close() { s.once.Do(func() { close(s.closed) }) }

func (s *fakeSession) Disconnected() <-chan struct{} { return s.closed }

// enter starts a call: it fails on a closed session and blocks while the
// daemon hangs.
func (s *fakeSession) enter() error {
	select {
	case <-s.closed:
		return golibvirt.ErrInterrupted
	default:
	}
	s.d.mu.Lock()
	hang, delay := s.d.hang, s.d.delay
	s.d.mu.Unlock()
	if hang {
		<-s.closed
		return golibvirt.ErrInterrupted
	}
	if delay > 0 {
		select {
		case <-s.closed:
			return golibvirt.ErrInterrupted
		case <-time.After(delay):
		}
	}
	return nil
}

func noDomain(d golibvirt.Domain) error {
	return golibvirt.Error{Code: uint32(golibvirt.ErrNoDomain), Message: "Domain not found: no domain with matching uuid '" + formatUUID(d.UUID) + "' (" + d.Name + ")"}
}

func (s *fakeSession) lookup(d golibvirt.Domain) (*fakeDom, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	fd, ok := s.d.doms[d.UUID]
	if !ok {
		return nil, noDomain(d)
	}
	return fd, nil
}

func (s *fakeSession) ConnectGetLibVersion() (uint64, error) { return 9000000, s.enter() }

func (s *fakeSession) NodeGetCPUMap(needMap, needOnline int32, flags uint32) ([]byte, uint32, int32, error) {
	return nil, 0, 4, s.enter()
}

func (s *fakeSession) ConnectGetAllDomainStats(doms []golibvirt.Domain, stats, flags uint32) ([]golibvirt.DomainStatsRecord, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	var out []golibvirt.DomainStatsRecord
	add := func(fd *fakeDom) {
		out = append(out, golibvirt.DomainStatsRecord{Dom: fd.dom, Params: []golibvirt.TypedParam{
			{Field: "state.state", Value: *golibvirt.NewTypedParamValueInt(int32(fd.state))},
			{Field: "cpu.time", Value: *golibvirt.NewTypedParamValueUllong(5e9)},
			{Field: "vcpu.current", Value: *golibvirt.NewTypedParamValueUint(uint32(fd.vcpus))},
			{Field: "vcpu.maximum", Value: *golibvirt.NewTypedParamValueUint(uint32(fd.vcpus))},
			{Field: "vcpu.0.state", Value: *golibvirt.NewTypedParamValueInt(1)},
			{Field: "vcpu.0.time", Value: *golibvirt.NewTypedParamValueUllong(4e9)},
			{Field: "vcpu.0.wait", Value: *golibvirt.NewTypedParamValueUllong(0)},
			{Field: "vcpu.0.delay", Value: *golibvirt.NewTypedParamValueUllong(2e9)},
		}})
	}
	if len(doms) == 0 {
		for _, fd := range s.d.doms {
			add(fd)
		}
		return out, nil
	}
	for _, d := range doms {
		fd, ok := s.d.doms[d.UUID]
		if !ok {
			return nil, noDomain(d)
		}
		add(fd)
	}
	return out, nil
}

func (s *fakeSession) DomainLookupByUUID(u golibvirt.UUID) (golibvirt.Domain, error) {
	fd, err := s.lookup(golibvirt.Domain{UUID: u})
	if err != nil {
		return golibvirt.Domain{}, err
	}
	return fd.dom, nil
}

func (s *fakeSession) DomainGetXMLDesc(d golibvirt.Domain, flags golibvirt.DomainXMLFlags) (string, error) {
	fd, err := s.lookup(d)
	if err != nil {
		return "", err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if fd.xmlErr != nil {
		return "", fd.xmlErr
	}
	if s.d.xmlErr != nil {
		return "", s.d.xmlErr
	}
	return fd.xml, nil
}

func (s *fakeSession) DomainGetVcpus(d golibvirt.Domain, maxinfo, maplen int32) ([]golibvirt.VcpuInfo, []byte, error) {
	fd, err := s.lookup(d)
	if err != nil {
		return nil, nil, err
	}
	var infos []golibvirt.VcpuInfo
	var maps []byte
	for i := range fd.vcpus {
		infos = append(infos, golibvirt.VcpuInfo{Number: uint32(i), State: 1, CPUTime: 1e9, CPU: 1})
		m := make([]byte, maplen)
		m[0] = 0b10
		maps = append(maps, m...)
	}
	return infos, maps, nil
}

func (s *fakeSession) DomainGetSchedulerParametersFlags(d golibvirt.Domain, nparams int32, flags uint32) ([]golibvirt.TypedParam, error) {
	fd, err := s.lookup(d)
	if err != nil {
		return nil, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	var out []golibvirt.TypedParam
	for _, k := range []string{"cpu_shares", "vcpu_period", "vcpu_quota", "global_period", "global_quota"} {
		out = append(out, fd.sched[k])
	}
	return out, nil
}

func (s *fakeSession) DomainSetSchedulerParametersFlags(d golibvirt.Domain, params []golibvirt.TypedParam, flags uint32) error {
	fd, err := s.lookup(d)
	if err != nil {
		return err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	for _, p := range params {
		old, ok := fd.sched[p.Field]
		if !ok {
			return golibvirt.Error{Code: 8, Message: "invalid argument: parameter '" + p.Field + "' not supported"}
		}
		if old.Value.D != p.Value.D {
			return golibvirt.Error{Code: 8, Message: fmt.Sprintf("invalid argument: invalid type for parameter '%s', expected '%d'", p.Field, old.Value.D)}
		}
		fd.sched[p.Field] = p
		s.d.sets = append(s.d.sets, fmt.Sprintf("%s %s=%v", fd.dom.Name, p.Field, p.Value.I))
	}
	return nil
}

func (s *fakeSession) DomainPinVcpuFlags(d golibvirt.Domain, vcpu uint32, m []byte, flags uint32) error {
	if _, err := s.lookup(d); err != nil {
		return err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.pins = append(s.d.pins, fmt.Sprintf("%s vcpu%d %s", d.Name, vcpu, fromCPUMap(m)))
	return nil
}

func (s *fakeSession) DomainPinEmulator(d golibvirt.Domain, m []byte, flags golibvirt.DomainModificationImpact) error {
	if _, err := s.lookup(d); err != nil {
		return err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.pins = append(s.d.pins, fmt.Sprintf("%s emulator %s", d.Name, fromCPUMap(m)))
	return nil
}

func (s *fakeSession) LifecycleEvents(ctx context.Context) (<-chan golibvirt.DomainEventLifecycleMsg, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	ch := make(chan golibvirt.DomainEventLifecycleMsg)
	s.mu.Lock()
	s.events = ch
	s.mu.Unlock()
	return ch, nil
}
