package sim

// The simulator's resctrl. The kernel side is internal/resctrl/resctrlfs,
// the same emulation the resctrl actuator and sensor tests run against:
// CLOSID and RMID allocation (ENOSPC, RMIDs in limbo while their lines
// occupy the cache), the kernel's schemata validation and layout, one-task
// moves, rmdir handing tasks back. The simulator talks to it only through
// its simulator-side API, never by parsing the files the agent reads:
//
//   - the levers: which control group (CLOSID) and monitoring group (RMID)
//     each tenant thread is in (FS.Task), and the cache mask and MB value
//     of each CLOSID (FS.Value);
//   - the monitoring data: what the model says each RMID occupies and moves
//     to memory in each L3 domain (FS.Account), which the emulation renders
//     into mon_data the way the kernel sums a control group and its
//     monitoring groups.

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/crosstalk-project/crosstalk/internal/resctrl/resctrlfs"
)

// occupancyUnit is the granularity of llc_occupancy: the hardware counts
// lines and the kernel multiplies by CPUID.0xF.1:EBX's conversion factor
// (64 KiB on the Xeon SP parts; the tree's max_threshold_occupancy).
const occupancyUnit = 65536

// orphanDecayMax bounds the time constant with which the lines of an RMID
// that no thread uses any more leave the cache: untouched lines survive
// about the characteristic time T of the socket's cache, and even when
// every working set fits, the host's own processes and the kernel evict
// them within about a second.
const orphanDecayMax = 1.0

// rmidShare is the part of a tenant's activity on a socket its threads in
// one monitoring group (RMID) carry.
type rmidShare struct {
	rmid int
	w    float64
}

// placement is where a tenant's threads are in resctrl, per socket: the
// control group (CLOSID) most of its work there runs in, and its RMIDs.
type placement struct {
	closid []int
	rmids  [][]rmidShare
}

// newResctrl returns the resctrl emulation for the host tree, mounted by
// newSimHost once the Host is open. A tenant's threads exist while the
// tenant is present; when it vanishes they exit (resctrlExit).
func (s *simHost) newResctrl() *resctrlfs.FS {
	return resctrlfs.New(resctrlfs.Options{Mount: resctrlRoot, TaskExists: s.taskExists})
}

// taskExists says whether a thread ID is a live thread of a present tenant.
func (s *simHost) taskExists(tid int) bool {
	if tid < tidBase {
		return false
	}
	i, k := (tid-tidBase)/tidStride, (tid-tidBase)%tidStride
	return i < len(s.tenants) && k < s.tenants[i].Threads && s.present[i]
}

// resctrlExit ends tenant threads in resctrl: they leave every group, as
// the kernel's exit path does.
func (s *simHost) resctrlExit(tids []int) {
	if s.rc == nil {
		return
	}
	s.rc.Exit(tids...)
	s.dirtyResctrl = true
}

// threadWeight is thread k's share of tenant t's work on socket d: a VM's
// vCPU k runs on its pinned CPU, its emulator thread does next to nothing;
// a container's threads run anywhere in its cpuset.
func (s *simHost) threadWeight(t *Tenant, k, d int) float64 {
	if t.Kind == KindVM {
		if k < len(t.VCPUs) && s.model.Socket(t.VCPUs[k]) == d {
			return 1
		}
		return 0
	}
	return s.model.frac[t.Index][d]
}

// readResctrl reads each present tenant's placement and the cache mask and
// MB value of the class it runs in into the levers.
func (s *simHost) readResctrl() {
	S := s.m.Sockets
	amd := cpuModels[s.m.CPU].vendor == "AuthenticAMD"
	for i, t := range s.tenants {
		pl := &s.place[i]
		if pl.closid == nil {
			pl.closid = make([]int, S)
			pl.rmids = make([][]rmidShare, S)
		}
		for d := 0; d < S; d++ {
			pl.closid[d] = 0
			pl.rmids[d] = pl.rmids[d][:0]
			s.levers.Mask[i][d], s.levers.MBA[i][d], s.levers.MBAGroup[i][d] = 0, 0, ""
			if !s.present[i] {
				continue
			}
			var byClos map[int]float64
			var total float64
			for k := 0; k < t.Threads; k++ {
				w := s.threadWeight(t, k, d)
				if w == 0 {
					continue
				}
				ti, ok := s.rc.Task(t.TID(k))
				if !ok {
					continue
				}
				if byClos == nil {
					byClos = map[int]float64{}
				}
				byClos[ti.CLOSID] += w
				total += w
				j := slices.IndexFunc(pl.rmids[d], func(r rmidShare) bool { return r.rmid == ti.RMID })
				if j < 0 {
					pl.rmids[d] = append(pl.rmids[d], rmidShare{rmid: ti.RMID})
					j = len(pl.rmids[d]) - 1
				}
				pl.rmids[d][j].w += w
			}
			if total == 0 {
				continue
			}
			for j := range pl.rmids[d] {
				pl.rmids[d][j].w /= total
			}
			// The model gives a tenant one class per socket: the one most of
			// its work there runs in (a tenant half moved is a transient).
			best, bw := 0, -1.0
			for c, w := range byClos {
				if w > bw || (w == bw && c < best) {
					best, bw = c, w
				}
			}
			pl.closid[d] = best
			if m, ok := s.rc.Value(best, "L3", d); ok {
				s.levers.Mask[i][d] = m
			}
			if v, ok := s.rc.Value(best, "MB", d); ok {
				if amd && v >= 2048 {
					v = 0 // AMD's 2048 is "unlimited"
				}
				s.levers.MBA[i][d] = float64(v)
			}
			s.levers.MBAGroup[i][d] = fmt.Sprintf("closid %d", best)
		}
	}
}

// accountMBM adds a step's memory traffic to the RMIDs that carried it.
func (s *simHost) accountMBM(dt float64) {
	st := s.state
	for i := range s.tenants {
		ts := &st.Tenants[i]
		if !ts.Active || !s.present[i] || s.place[i].rmids == nil {
			continue
		}
		for d, rs := range s.place[i].rmids {
			for _, r := range rs {
				b := s.mbmPending[r.rmid]
				if b == nil {
					b = make([]float64, s.m.Sockets)
					s.mbmPending[r.rmid] = b
				}
				b[d] += r.w * ts.Traffic[d] * dt
			}
		}
	}
}

// publishResctrl hands the emulation each RMID's occupancy now and the
// bytes it moved since the last publish: the tenants' occupancy split by
// where their threads are; an RMID nobody uses any more keeps its lines
// until they are evicted (which is what holds a freed RMID in limbo).
func (s *simHost) publishResctrl(since float64) error {
	st := s.state
	S := s.m.Sockets
	occ := map[int][]float64{}
	for i := range s.tenants {
		ts := &st.Tenants[i]
		if !ts.Active || !s.present[i] || ts.Occupancy == nil || s.place[i].rmids == nil {
			continue
		}
		for d, rs := range s.place[i].rmids {
			for _, r := range rs {
				o := occ[r.rmid]
				if o == nil {
					o = make([]float64, S)
					occ[r.rmid] = o
				}
				o[d] += r.w * ts.Occupancy[d]
			}
		}
	}
	for rmid, prev := range s.rmidOcc {
		if _, used := occ[rmid]; used {
			continue
		}
		o := make([]float64, S)
		for d := range o {
			tau := orphanDecayMax
			if T := st.Host.CharTime[d]; T > 0 && T < tau {
				tau = T
			}
			if o[d] = prev[d] * math.Exp(-since/tau); o[d] < occupancyUnit {
				o[d] = 0
			}
		}
		occ[rmid] = o
	}
	for rmid := range s.mbmPending {
		if occ[rmid] == nil {
			occ[rmid] = make([]float64, S)
		}
	}
	rmids := slices.Sorted(maps.Keys(occ))
	samples := make([]resctrlfs.Sample, 0, len(rmids)*S)
	for _, r := range rmids {
		o := occ[r]
		if slices.ContainsFunc(o, func(x float64) bool { return x > 0 }) {
			s.rmidOcc[r] = o
		} else {
			delete(s.rmidOcc, r)
		}
		for d := 0; d < S; d++ {
			var b uint64
			if p := s.mbmPending[r]; p != nil {
				b = uint64(p[d])
			}
			occB := uint64(o[d]) / occupancyUnit * occupancyUnit
			// The model has no remote memory: every byte is local.
			samples = append(samples, resctrlfs.Sample{RMID: r, Domain: d, OccupancyBytes: occB, TotalBytes: b, LocalBytes: b})
		}
	}
	clear(s.mbmPending)
	return s.rc.Account(samples...)
}
