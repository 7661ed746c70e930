package libvirt

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

// VCPU is one vCPU of a running domain and where it runs on the host.
type VCPU struct {
	Index int
	State string // offline, running, blocked
	// HostCPU is the host CPU it ran on last (-1: unknown).
	HostCPU int
	Time    time.Duration
	// Affinity is where it may run now (its thread's affinity).
	Affinity cpuset.Set
	// Cgroup is its own cgroup (libvirt's vcpuN below the domain's), relative
	// to the hierarchy root; "" when not found. Threads are the thread IDs in
	// it: the vCPU thread.
	Cgroup  string
	Threads []int
}

func vcpuState(s int32) string {
	switch s {
	case 0:
		return "offline"
	case 1:
		return "running"
	case 2:
		return "blocked"
	}
	return "state-" + strconv.Itoa(int(s))
}

// VCPUs reads a running domain's online vCPUs: state, CPU time, the host
// CPU each ran on last and where each may run.
func (c *Client) VCPUs(ctx context.Context, d Domain) ([]VCPU, error) {
	ref, err := d.ref()
	if err != nil {
		return nil, err
	}
	n, err := c.hostCPUs(ctx)
	if err != nil {
		return nil, err
	}
	maxinfo := max(d.VCPUs, 1)
	if d.Config != nil {
		maxinfo = max(maxinfo, d.Config.MaxVCPUs)
	}
	maplen := (n + 7) / 8
	var infos []golibvirt.VcpuInfo
	var maps []byte
	err = c.call(ctx, "vCPUs of "+d.Name, func(r rpc) error {
		var err error
		infos, maps, err = r.DomainGetVcpus(ref, int32(maxinfo), int32(maplen))
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]VCPU, 0, len(infos))
	for i, in := range infos {
		v := VCPU{Index: int(in.Number), State: vcpuState(in.State), HostCPU: int(in.CPU), Time: time.Duration(in.CPUTime)}
		if lo, hi := i*maplen, (i+1)*maplen; hi <= len(maps) {
			v.Affinity = fromCPUMap(maps[lo:hi])
		}
		out = append(out, v)
	}
	return out, nil
}

// VCPUThreads fills each vCPU's Cgroup and Threads from the cgroup tree
// through h: libvirt puts vCPU N's thread in "vcpuN" below the domain's
// cgroup (cgroup v1 and hybrid hosts, libvirt 9.0 checked on one: vcpuN and
// emulator in the cpu and cpuset hierarchies, the same names mirrored in the
// named cgroup2 hierarchy), or below its nested "libvirt" cgroup on cgroup v2
// (virCgroupNewNested).
func VCPUThreads(h *host.Host, l cgroup.Layout, domCgroup string, vcpus []VCPU) error {
	root, file := "", ""
	switch l.CPUControl() {
	case "v1":
		root, file = l.V1["cpu"], "tasks"
	case "v2":
		root, file = l.V2, "cgroup.threads"
	default:
		return fmt.Errorf("vCPU threads of %s: no cgroup hierarchy with the cpu controller", domCgroup)
	}
	var errs []error
	for i := range vcpus {
		name := "vcpu" + strconv.Itoa(vcpus[i].Index)
		for _, rel := range []string{path.Join(domCgroup, name), path.Join(domCgroup, "libvirt", name)} {
			s, err := h.ReadString(path.Join(root, rel, file))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				errs = append(errs, err)
				break
			}
			vcpus[i].Cgroup = rel
			vcpus[i].Threads = nil
			for _, f := range strings.Fields(s) {
				if tid, err := strconv.Atoi(f); err == nil {
					vcpus[i].Threads = append(vcpus[i].Threads, tid)
				}
			}
			slices.Sort(vcpus[i].Threads)
			break
		}
	}
	return errors.Join(errs...)
}

// Stats are a domain's CPU statistics (virsh domstats --cpu-total --vcpu).
type Stats struct {
	Domain string
	UUID   string
	// CPUTime is cpu.time: all of the domain's threads.
	CPUTime time.Duration
	VCPUs   []VCPUStats
}

// VCPUStats are one vCPU's counters: Time running, Delay runnable but
// waiting for a host CPU (vcpu.N.delay, from schedstat: the steal its guest
// sees), Wait waiting for I/O.
type VCPUStats struct {
	Index              int
	State              int
	Time, Delay, Wait  time.Duration
	HasDelay, HasState bool
}

// Stats reads CPU statistics of the given running domains (every active
// domain when none are given).
func (c *Client) Stats(ctx context.Context, doms ...Domain) ([]Stats, error) {
	refs := make([]golibvirt.Domain, 0, len(doms))
	for _, d := range doms {
		ref, err := d.ref()
		if err != nil {
			return nil, err
		}
		refs = append(refs, ref)
	}
	flags := uint32(0)
	if len(refs) == 0 {
		flags = uint32(golibvirt.ConnectGetAllDomainsStatsActive)
	}
	var recs []golibvirt.DomainStatsRecord
	err := c.call(ctx, "domain statistics", func(r rpc) error {
		var err error
		recs, err = r.ConnectGetAllDomainStats(refs, uint32(golibvirt.DomainStatsCPUTotal|golibvirt.DomainStatsVCPU), flags)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]Stats, 0, len(recs))
	for _, rec := range recs {
		out = append(out, statsFrom(rec))
	}
	return out, nil
}

// statsFrom reads "cpu.time" and "vcpu.<n>.{state,time,wait,delay}".
func statsFrom(rec golibvirt.DomainStatsRecord) Stats {
	st := Stats{Domain: rec.Dom.Name, UUID: formatUUID(rec.Dom.UUID)}
	byIndex := map[int]*VCPUStats{}
	for _, p := range rec.Params {
		v, ok := paramInt(p.Value)
		if !ok {
			continue
		}
		if p.Field == "cpu.time" {
			st.CPUTime = time.Duration(v)
			continue
		}
		rest, ok := strings.CutPrefix(p.Field, "vcpu.")
		if !ok {
			continue
		}
		idx, field, ok := strings.Cut(rest, ".")
		n, err := strconv.Atoi(idx)
		if !ok || err != nil {
			continue // vcpu.current, vcpu.maximum
		}
		vs := byIndex[n]
		if vs == nil {
			vs = &VCPUStats{Index: n}
			byIndex[n] = vs
		}
		switch field {
		case "state":
			vs.State, vs.HasState = int(v), true
		case "time":
			vs.Time = time.Duration(v)
		case "wait":
			vs.Wait = time.Duration(v)
		case "delay":
			vs.Delay, vs.HasDelay = time.Duration(v), true
		}
	}
	for _, vs := range byIndex {
		st.VCPUs = append(st.VCPUs, *vs)
	}
	slices.SortFunc(st.VCPUs, func(a, b VCPUStats) int { return a.Index - b.Index })
	return st
}
