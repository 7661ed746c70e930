package libvirt

import (
	"context"
	"fmt"
	"strings"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
)

// SchedParams are a domain's CFS scheduler parameters as libvirt names them
// (virsh schedinfo), in microseconds. A nil field is not reported (Get) or
// left unchanged (Set). A quota of -1 (or any value <= 0) is unlimited.
//
//   - vcpu_*: each vCPU's own cgroup (vcpuN), so the domain may use up to
//     vCPUs × quota per period;
//   - global_*: the domain's cgroup, all of its threads together;
//   - emulator_*, iothread_*: the emulator's and the iothreads' cgroups.
type SchedParams struct {
	Shares         *uint64
	VCPUPeriod     *uint64
	VCPUQuota      *int64
	GlobalPeriod   *uint64
	GlobalQuota    *int64
	EmulatorPeriod *uint64
	EmulatorQuota  *int64
	IOThreadPeriod *uint64
	IOThreadQuota  *int64
}

// Ptr returns a pointer to v, for filling SchedParams.
func Ptr[T any](v T) *T { return &v }

func (p SchedParams) String() string {
	var parts []string
	u := func(name string, v *uint64) {
		if v != nil {
			parts = append(parts, fmt.Sprintf("%s=%d", name, *v))
		}
	}
	i := func(name string, v *int64) {
		if v != nil {
			parts = append(parts, fmt.Sprintf("%s=%d", name, *v))
		}
	}
	u("cpu_shares", p.Shares)
	u("vcpu_period", p.VCPUPeriod)
	i("vcpu_quota", p.VCPUQuota)
	u("global_period", p.GlobalPeriod)
	i("global_quota", p.GlobalQuota)
	u("emulator_period", p.EmulatorPeriod)
	i("emulator_quota", p.EmulatorQuota)
	u("iothread_period", p.IOThreadPeriod)
	i("iothread_quota", p.IOThreadQuota)
	return strings.Join(parts, " ")
}

// params lists p's set fields as libvirt typed parameters (periods are
// unsigned long long, quotas long long: libvirt checks the types).
func (p SchedParams) params() []golibvirt.TypedParam {
	var out []golibvirt.TypedParam
	u := func(name string, v *uint64) {
		if v != nil {
			out = append(out, golibvirt.TypedParam{Field: name, Value: *golibvirt.NewTypedParamValueUllong(*v)})
		}
	}
	i := func(name string, v *int64) {
		if v != nil {
			out = append(out, golibvirt.TypedParam{Field: name, Value: *golibvirt.NewTypedParamValueLlong(*v)})
		}
	}
	u("cpu_shares", p.Shares)
	u("vcpu_period", p.VCPUPeriod)
	i("vcpu_quota", p.VCPUQuota)
	u("global_period", p.GlobalPeriod)
	i("global_quota", p.GlobalQuota)
	u("emulator_period", p.EmulatorPeriod)
	i("emulator_quota", p.EmulatorQuota)
	u("iothread_period", p.IOThreadPeriod)
	i("iothread_quota", p.IOThreadQuota)
	return out
}

func schedFrom(ps []golibvirt.TypedParam) SchedParams {
	var p SchedParams
	for _, tp := range ps {
		v, ok := paramInt(tp.Value)
		if !ok {
			continue
		}
		uv := uint64(v)
		switch tp.Field {
		case "cpu_shares":
			p.Shares = &uv
		case "vcpu_period":
			p.VCPUPeriod = &uv
		case "vcpu_quota":
			p.VCPUQuota = &v
		case "global_period":
			p.GlobalPeriod = &uv
		case "global_quota":
			p.GlobalQuota = &v
		case "emulator_period":
			p.EmulatorPeriod = &uv
		case "emulator_quota":
			p.EmulatorQuota = &v
		case "iothread_period":
			p.IOThreadPeriod = &uv
		case "iothread_quota":
			p.IOThreadQuota = &v
		}
	}
	return p
}

// maxSchedParams is the most scheduler parameters the remote protocol
// carries (REMOTE_DOMAIN_SCHEDULER_PARAMETERS_MAX).
const maxSchedParams = 16

// SchedParams reads a running domain's live scheduler parameters.
func (c *Client) SchedParams(ctx context.Context, d Domain) (SchedParams, error) {
	ref, err := d.ref()
	if err != nil {
		return SchedParams{}, err
	}
	var ps []golibvirt.TypedParam
	err = c.call(ctx, "scheduler parameters of "+d.Name, func(r rpc) error {
		var err error
		ps, err = r.DomainGetSchedulerParametersFlags(ref, maxSchedParams, uint32(golibvirt.DomainAffectLive))
		return err
	})
	if err != nil {
		return SchedParams{}, err
	}
	return schedFrom(ps), nil
}

// SetSchedParams changes a running domain's scheduler parameters live
// (not its persistent definition): libvirt writes the cgroups and updates
// the live XML, so virsh schedinfo and dumpxml show the change.
func (c *Client) SetSchedParams(ctx context.Context, d Domain, p SchedParams) error {
	ref, err := d.ref()
	if err != nil {
		return err
	}
	ps := p.params()
	if len(ps) == 0 {
		return nil
	}
	return c.call(ctx, fmt.Sprintf("set %s on %s", p, d.Name), func(r rpc) error {
		return r.DomainSetSchedulerParametersFlags(ref, ps, uint32(golibvirt.DomainAffectLive))
	})
}

// hostCPUs is the number of host CPUs libvirt's cpumaps cover, read once
// per connection.
func (c *Client) hostCPUs(ctx context.Context) (int, error) {
	c.mu.Lock()
	n := c.ncpus
	c.mu.Unlock()
	if n > 0 {
		return n, nil
	}
	err := c.call(ctx, "host CPU count", func(r rpc) error {
		_, _, ret, err := r.NodeGetCPUMap(0, 0, 0)
		n = int(ret)
		return err
	})
	if err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, fmt.Errorf("host CPU count: libvirt reported %d", n)
	}
	c.mu.Lock()
	c.ncpus = n
	c.mu.Unlock()
	return n, nil
}

// cpumap encodes a cpuset as libvirt's byte map (CPU i is bit i%8 of byte i/8).
func cpumap(cpus cpuset.Set, ncpus int) ([]byte, error) {
	if cpus.IsEmpty() {
		return nil, fmt.Errorf("empty cpuset")
	}
	m := make([]byte, (ncpus+7)/8)
	for _, cpu := range cpus.List() {
		if cpu >= ncpus {
			return nil, fmt.Errorf("CPU %d: the host has %d", cpu, ncpus)
		}
		m[cpu/8] |= 1 << (cpu % 8)
	}
	return m, nil
}

// fromCPUMap decodes a byte map.
func fromCPUMap(m []byte) cpuset.Set {
	var ids []int
	for i, b := range m {
		for bit := range 8 {
			if b&(1<<bit) != 0 {
				ids = append(ids, i*8+bit)
			}
		}
	}
	return cpuset.Of(ids...)
}

// PinVCPU pins one vCPU of a running domain to cpus, live (virsh vcpupin
// --live): libvirt sets the vCPU thread's affinity and its cgroup's cpuset.
func (c *Client) PinVCPU(ctx context.Context, d Domain, vcpu int, cpus cpuset.Set) error {
	ref, err := d.ref()
	if err != nil {
		return err
	}
	n, err := c.hostCPUs(ctx)
	if err != nil {
		return err
	}
	m, err := cpumap(cpus, n)
	if err != nil {
		return fmt.Errorf("pin vCPU %d of %s: %w", vcpu, d.Name, err)
	}
	if vcpu < 0 {
		return fmt.Errorf("pin vCPU %d of %s: no such vCPU", vcpu, d.Name)
	}
	err = c.call(ctx, fmt.Sprintf("pin vCPU %d of %s to %s", vcpu, d.Name, cpus), func(r rpc) error {
		return r.DomainPinVcpuFlags(ref, uint32(vcpu), m, uint32(golibvirt.DomainAffectLive))
	})
	if err == nil {
		c.RequestRefresh()
	}
	return err
}

// PinEmulator pins a running domain's emulator threads to cpus, live.
func (c *Client) PinEmulator(ctx context.Context, d Domain, cpus cpuset.Set) error {
	ref, err := d.ref()
	if err != nil {
		return err
	}
	n, err := c.hostCPUs(ctx)
	if err != nil {
		return err
	}
	m, err := cpumap(cpus, n)
	if err != nil {
		return fmt.Errorf("pin the emulator of %s: %w", d.Name, err)
	}
	err = c.call(ctx, fmt.Sprintf("pin the emulator of %s to %s", d.Name, cpus), func(r rpc) error {
		return r.DomainPinEmulator(ref, m, golibvirt.DomainAffectLive)
	})
	if err == nil {
		c.RequestRefresh()
	}
	return err
}
