package sim

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/resctrl/resctrlfs"
)

// simHost is one simulated machine for one policy run: the host tree in a
// temporary directory, its kernel emulation, the model and what the
// simulator has accumulated (the counters the tree's files show).
type simHost struct {
	sc      *Scenario
	m       Machine
	tenants []*Tenant
	root    string
	h       *host.Host
	cg      *CgroupFS
	model   *Model
	levers  *Levers
	state   *State
	// published is the state the canary probe reads (set with setState).
	published atomic.Pointer[State]
	now       time.Duration

	present  []bool
	period   []float64      // CFS period of each tenant's cpu.max, seconds
	byCgroup map[string]int // tenant cgroup (below the cgroup root) → index

	dirtyQuota   map[int]bool
	dirtyResctrl bool
	dirtyFreq    bool
	msr          []*os.File

	cum      []tenantCounters
	written  []writtenStats
	energy   []float64 // µJ per socket
	noise    *rand.Rand
	lastFreq []float64
	// busy is each CPU's busy time so far (seconds), for /proc/stat.
	busy []float64
	// lastPublish is when the sensor files were last written.
	lastPublish time.Duration

	// rc is the resctrl emulation (nil without resctrl); place is where
	// each tenant's threads are in it, mbmPending the bytes each RMID moved
	// per socket since the last publish, rmidOcc each RMID's occupancy as
	// last published.
	rc *resctrlfs.FS
	// raw are the raw perf configs the CPU model counts (perfOpener).
	raw        map[uint64]counterKind
	place      []placement
	mbmPending map[int][]float64
	rmidOcc    map[int][]float64
	// klog is the kernel's split-lock and bus-lock reports (nil where the
	// CPU detects neither, or Features.KernelReports is off).
	klog *kernelLog
}

// tenantCounters are a tenant's cumulative counters.
type tenantCounters struct {
	usage, throttled, psi, delay                                        float64 // seconds
	periods, nrThrottled                                                float64
	cycles, refCycles, instructions, llcRefs, llcMisses, busLocks, ctxs float64
	traffic                                                             []float64 // bytes per socket
}

type writtenStats struct {
	usageUS, thrUS, psiUS, delayNS int64
}

// newSimHost builds the tree and the emulation for a scenario.
func newSimHost(sc *Scenario, dir string) (*simHost, error) {
	s := &simHost{sc: sc, m: sc.Machine, tenants: sc.tenants, root: filepath.Join(dir, "root"),
		byCgroup: map[string]int{}, dirtyQuota: map[int]bool{}, noise: newRNG(sc.Seed, 0xc0de),
		mbmPending: map[int][]float64{}, rmidOcc: map[int][]float64{}}
	if err := os.MkdirAll(s.root, 0o755); err != nil {
		return nil, err
	}
	if err := writeStatic(s.root, sc); err != nil {
		return nil, fmt.Errorf("writing the host tree: %w", err)
	}
	online := cpuset.Of(seq(s.m.CPUs())...)
	s.cg = NewCgroupFS(cgroupRoot, online)
	k := &simKernel{cgroups: s.cg, changed: s.changed}
	if on(s.m.Features.CPUFreq) {
		k.cpufreq = newCpufreqFS()
	}
	if hasResctrl(s.m) {
		s.rc = s.newResctrl()
		k.resctrl = s.rc
	}
	h, err := host.Open(s.root, host.WithKernel(k))
	if err != nil {
		return nil, err
	}
	s.h = h
	// The model exists before resctrl is mounted: its threads' weights
	// need the CPU layout.
	s.model = NewModel(s.m, s.tenants)
	if s.rc != nil {
		if err := s.rc.Mount(h); err != nil {
			h.Close()
			return nil, err
		}
	}
	for _, slice := range []string{"/machine.slice", "/system.slice"} {
		if err := h.Mkdir(cgroupRoot+slice, 0o755); err != nil {
			return nil, err
		}
	}
	s.levers = NewLevers(len(s.tenants), s.m.CPUs(), s.m.Sockets)
	s.present = make([]bool, len(s.tenants))
	s.period = make([]float64, len(s.tenants))
	s.cum = make([]tenantCounters, len(s.tenants))
	s.written = make([]writtenStats, len(s.tenants))
	for i := range s.cum {
		s.cum[i].traffic = make([]float64, s.m.Sockets)
		s.written[i] = writtenStats{-1, -1, -1, -1}
	}
	s.energy = make([]float64, s.m.Sockets)
	s.lastFreq = make([]float64, s.m.CPUs())
	s.busy = make([]float64, s.m.CPUs())
	s.place = make([]placement, len(s.tenants))
	if on(s.m.Features.MSR) {
		for c := 0; c < s.m.CPUs(); c++ {
			f, err := os.Open(filepath.Join(s.root, "dev", "cpu", strconv.Itoa(c), "msr"))
			if err != nil {
				return nil, err
			}
			s.msr = append(s.msr, f)
		}
	}
	if trap := s.m.busLockTrap(); trap != "" && on(s.m.Features.KernelReports) {
		if s.klog, err = newKernelLog(s.root, trap, sc.Seed); err != nil {
			h.Close()
			return nil, err
		}
	}
	s.dirtyResctrl, s.dirtyFreq = true, true
	return s, nil
}

func (s *simHost) close() {
	for _, f := range s.msr {
		f.Close()
	}
	if s.klog != nil {
		s.klog.close()
	}
	s.h.Close()
}

// setState makes st the current state.
func (s *simHost) setState(st *State) {
	s.state = st
	s.published.Store(st)
}

// changed is the kernel's note that p was written, made or removed.
func (s *simHost) changed(p string) {
	switch {
	case strings.HasPrefix(p, cgroupRoot+"/"):
		rel := strings.TrimPrefix(p, cgroupRoot)
		for {
			if i, ok := s.byCgroup[rel]; ok {
				s.dirtyQuota[i] = true
				return
			}
			if rel == "/" || rel == "." || rel == "" {
				return
			}
			rel = path.Dir(rel)
		}
	case strings.HasPrefix(p, resctrlRoot):
		s.dirtyResctrl = true
	case strings.HasPrefix(p, cpufreqRoot):
		s.dirtyFreq = true
	}
}

// appear makes a tenant's cgroups and puts its threads in them, as libvirt
// or docker would.
func (s *simHost) appear(i int) error {
	t := s.tenants[i]
	cg := t.cgroupPath()
	dirs := []string{cg}
	if t.Kind == KindVM {
		dirs = append(dirs, cg+"/libvirt")
		for k := range t.VCPUs {
			dirs = append(dirs, fmt.Sprintf("%s/libvirt/vcpu%d", cg, k))
		}
		dirs = append(dirs, cg+"/libvirt/emulator")
	}
	for _, d := range dirs {
		if err := s.h.Mkdir(cgroupRoot+d, 0o755); err != nil {
			return fmt.Errorf("tenant %s: %w", t.Name, err)
		}
	}
	if err := s.h.WriteFile(cgroupRoot+cg+"/cpuset.cpus", []byte(t.CPUSet.String())); err != nil {
		return err
	}
	if t.Kind == KindVM {
		for k, c := range t.VCPUs {
			if err := s.h.WriteFile(fmt.Sprintf("%s%s/libvirt/vcpu%d/cpuset.cpus", cgroupRoot, cg, k), []byte(strconv.Itoa(c))); err != nil {
				return err
			}
		}
	}
	for k, sub := range t.threadCgroups() {
		file := "cgroup.threads"
		if sub == "" {
			file = "cgroup.procs"
		}
		if err := s.h.WriteFile(cgroupRoot+cg+sub+"/"+file, []byte(strconv.Itoa(t.TID(k)))); err != nil {
			return err
		}
		if err := writeFile(s.root, fmt.Sprintf("proc/%d/schedstat", t.TID(k)), "0 0 0\n"); err != nil {
			return err
		}
	}
	s.byCgroup[cg] = i
	s.present[i] = true
	s.dirtyQuota[i] = true
	s.written[i] = writtenStats{-1, -1, -1, -1}
	return nil
}

// vanish is the tenant's end: its threads exit and its cgroups are removed.
func (s *simHost) vanish(i int) error {
	t := s.tenants[i]
	var tids []int
	for k := 0; k < t.Threads; k++ {
		tids = append(tids, t.TID(k))
	}
	if err := s.cg.Exit(s.h, tids...); err != nil {
		return err
	}
	s.resctrlExit(tids)
	cg := t.cgroupPath()
	var dirs []string
	if t.Kind == KindVM {
		for k := range t.VCPUs {
			dirs = append(dirs, fmt.Sprintf("%s/libvirt/vcpu%d", cg, k))
		}
		dirs = append(dirs, cg+"/libvirt/emulator", cg+"/libvirt")
	}
	dirs = append(dirs, cg)
	for _, d := range dirs {
		if err := s.h.Remove(cgroupRoot + d); err != nil {
			return fmt.Errorf("tenant %s: %w", t.Name, err)
		}
	}
	for _, tid := range tids {
		os.RemoveAll(filepath.Join(s.root, "proc", strconv.Itoa(tid)))
	}
	delete(s.byCgroup, cg)
	s.present[i] = false
	s.levers.Quota[i] = math.Inf(1)
	return nil
}

// step runs the host for one model step at s.now: tenants come and go,
// the levers the actuators wrote are read, the model is solved and its
// counters accumulated. The caller advances s.now.
func (s *simHost) step(step time.Duration) error {
	for i, t := range s.tenants {
		switch act := t.Active(s.now); {
		case act && !s.present[i]:
			if err := s.appear(i); err != nil {
				return err
			}
		case !act && s.present[i]:
			if err := s.vanish(i); err != nil {
				return err
			}
		}
	}
	if err := s.readLevers(); err != nil {
		return err
	}
	s.setState(s.model.Solve(s.now, s.levers, s.state, step))
	s.advance(step.Seconds())
	if s.klog != nil {
		return s.logBusLocks(step)
	}
	return nil
}

// readLevers refreshes the levers the actuators may have changed.
func (s *simHost) readLevers() error {
	for i := range s.dirtyQuota {
		delete(s.dirtyQuota, i)
		if !s.present[i] {
			continue
		}
		str, err := s.h.ReadString(cgroupRoot + s.tenants[i].cgroupPath() + "/cpu.max")
		if err != nil {
			return err
		}
		q, err := cgroup.ParseCPUMax(str)
		if err != nil {
			return err
		}
		s.levers.Quota[i] = math.Inf(1)
		s.period[i] = q.Period.Seconds()
		if !q.Unlimited() {
			s.levers.Quota[i] = q.CPUs()
		}
	}
	if s.dirtyFreq && on(s.m.Features.CPUFreq) {
		s.dirtyFreq = false
		// acpi-cpufreq runs the highest P-state at or under the limit;
		// intel_pstate any ratio (100 MHz) under it.
		var pstates []int
		if cpuModels[s.m.CPU].vendor == "AuthenticAMD" {
			pstates = s.m.pStates()
		}
		for c := 0; c < s.m.CPUs(); c++ {
			khz, err := s.h.ReadInt(fmt.Sprintf("%s/policy%d/scaling_max_freq", cpufreqRoot, c))
			if err != nil {
				return err
			}
			mhz := float64(khz) / 1000
			if pstates != nil {
				pick := float64(pstates[len(pstates)-1])
				for _, p := range pstates {
					if float64(p) <= mhz {
						pick = max(pick, float64(p))
					}
				}
				mhz = pick
			}
			s.levers.MaxMHz[c] = mhz
		}
	}
	if len(s.msr) > 0 {
		var b [8]byte
		for c, f := range s.msr {
			if _, err := f.ReadAt(b[:], MSRClockModulation); err != nil {
				return fmt.Errorf("cpu %d msr: %w", c, err)
			}
			s.levers.Duty[c] = ClockModulationDuty(binary.LittleEndian.Uint64(b[:]))
		}
	}
	if s.dirtyResctrl && s.rc != nil {
		s.dirtyResctrl = false
		s.readResctrl()
	}
	return nil
}

// ClockModulationDuty decodes IA32_CLOCK_MODULATION: bit 4 enables on-demand
// clock modulation, bits 3:0 are the duty in 6.25% steps (extended
// encoding; the legacy 8-step encoding uses bits 3:1, which reads the same
// with bit 0 clear). Disabled, or a reserved duty of 0, is full speed.
func ClockModulationDuty(v uint64) float64 {
	if v&0x10 == 0 || v&0xf == 0 {
		return 1
	}
	return float64(v&0xf) / 16
}

// leverOn reports whether any lever holds tenant i back now.
func (s *simHost) leverOn(i int) bool {
	lv := s.levers
	if !math.IsInf(lv.Quota[i], 1) {
		return true
	}
	full := uint64(1)<<uint(s.m.L3Ways) - 1
	for d := 0; d < s.m.Sockets; d++ {
		if m := lv.Mask[i][d] & full; m != 0 && m != full {
			return true
		}
		if v := lv.MBA[i][d]; v > 0 && v < 100 && cpuModels[s.m.CPU].vendor != "AuthenticAMD" {
			return true
		}
		if v := lv.MBA[i][d]; v > 0 && cpuModels[s.m.CPU].vendor == "AuthenticAMD" {
			return true
		}
	}
	for _, c := range s.model.cpus[i] {
		if x := lv.MaxMHz[c]; x > 0 && x < float64(s.m.MaxMHz) {
			return true
		}
		if lv.Duty[c] < 1 {
			return true
		}
	}
	return false
}

// advance accumulates a step's counters.
func (s *simHost) advance(dt float64) {
	st := s.state
	for i := range s.tenants {
		ts := &st.Tenants[i]
		if !ts.Active || !s.present[i] {
			continue
		}
		c := &s.cum[i]
		n := 1.0
		if s.sc.Noise > 0 {
			n = math.Max(0.5, 1+s.sc.Noise*s.noise.NormFloat64())
		}
		r := ts.Rates
		c.usage += ts.Alloc * dt
		// CFS bandwidth accounting: with a quota, every period counts; a
		// throttled period adds its throttled time on each CPU (the kernel
		// sums it over the per-CPU run queues).
		if period := s.period[i]; period > 0 && !math.IsInf(s.levers.Quota[i], 1) {
			c.periods += dt / period
			if ts.Throttled > 0 {
				c.nrThrottled += dt / period
				c.throttled += ts.Throttled * float64(s.tenants[i].CPUSet.Len()) * dt
			}
		}
		if ts.Want > 0 && ts.Alloc < ts.Want*0.999 {
			c.psi += dt
		}
		c.delay += ts.Waiting * dt
		c.cycles += r.Cycles * dt * n
		c.refCycles += r.RefCycles * dt
		c.instructions += r.Instructions * dt * n
		c.llcRefs += r.LLCRefs * dt * n
		c.llcMisses += r.LLCMisses * dt * n
		c.busLocks += r.BusLocks * dt * n
		c.ctxs += r.ContextSw * dt
		for d := range c.traffic {
			c.traffic[d] += ts.Traffic[d] * dt
		}
	}
	for d := range s.energy {
		s.energy[d] += st.Host.SocketPower[d] * dt * 1e6
	}
	for c, b := range st.Host.CPUBusy {
		s.busy[c] += b * dt
	}
	if s.rc != nil && on(s.m.Features.MBM) {
		s.accountMBM(dt)
	}
}

// logBusLocks writes the kernel's reports of the bus locks taken in the
// step that ends now: a VM's are its vCPU threads' ("CPU k/KVM", as a KVM
// host reports a guest's), a container's its threads'.
func (s *simHost) logBusLocks(step time.Duration) error {
	dt := step.Seconds()
	var lockers []locker
	for i, t := range s.tenants {
		ts := &s.state.Tenants[i]
		if !ts.Active || !s.present[i] || ts.Rates.BusLocks <= 0 {
			continue
		}
		l := locker{locks: ts.Rates.BusLocks * dt}
		n := t.Threads
		if t.Kind == KindVM {
			n = len(t.VCPUs)
		}
		for k := range n {
			comm := t.Name
			if t.Kind == KindVM {
				comm = fmt.Sprintf("CPU %d/KVM", k)
			} else if len(comm) > 15 {
				comm = comm[:15] // TASK_COMM_LEN
			}
			l.tids, l.comm = append(l.tids, t.TID(k)), append(l.comm, comm)
		}
		if len(l.tids) > 0 {
			lockers = append(lockers, l)
		}
	}
	if len(lockers) == 0 {
		return nil
	}
	if err := s.klog.log((s.now + step).Seconds(), lockers); err != nil {
		return fmt.Errorf("kernel log: %w", err)
	}
	return nil
}

// publish writes the sensor files the agent reads.
func (s *simHost) publish() error {
	st := s.state
	hostPSI, err := s.publishTenants()
	if err != nil {
		return err
	}
	if err := os.WriteFile(s.h.Path("/proc/pressure/cpu"), []byte(pressure(int64(hostPSI*1e6))), 0o644); err != nil {
		return err
	}
	since := (s.now - s.lastPublish).Seconds()
	s.lastPublish = s.now
	if s.rc != nil && on(s.m.Features.MBM) {
		if err := s.publishResctrl(since); err != nil {
			return err
		}
	}
	if err := s.publishProcStat(); err != nil {
		return err
	}
	if on(s.m.Features.RAPL) {
		for d, e := range s.energy {
			v := int64(math.Mod(e, energyRange))
			if err := os.WriteFile(s.h.Path(fmt.Sprintf("%s/intel-rapl:%d/energy_uj", powercapRoot, d)), []byte(strconv.FormatInt(v, 10)+"\n"), 0o644); err != nil {
				return err
			}
		}
	}
	if on(s.m.Features.Hwmon) {
		if err := s.publishTemps(); err != nil {
			return err
		}
	}
	if on(s.m.Features.CPUFreq) {
		for c, f := range st.Host.CPUMHz {
			if math.Abs(f-s.lastFreq[c]) < 1 {
				continue
			}
			s.lastFreq[c] = f
			v := []byte(strconv.Itoa(int(f*1000)) + "\n")
			for _, name := range []string{"scaling_cur_freq", "cpuinfo_cur_freq"} {
				if err := os.WriteFile(s.h.Path(fmt.Sprintf("%s/policy%d/%s", cpufreqRoot, c, name)), v, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// publishTenants writes each tenant's CPU counters (cpu.stat, cpu.pressure,
// its threads' schedstat). It returns the tenants' PSI summed.
func (s *simHost) publishTenants() (hostPSI float64, err error) {
	for i, t := range s.tenants {
		if !s.present[i] {
			continue
		}
		c := &s.cum[i]
		hostPSI += c.psi
		w := writtenStats{int64(c.usage * 1e6), int64(c.throttled * 1e6), int64(c.psi * 1e6), int64(c.delay * 1e9)}
		old := s.written[i]
		dir := s.h.Path(cgroupRoot + t.cgroupPath())
		if w.usageUS != old.usageUS || w.thrUS != old.thrUS {
			if err := os.WriteFile(dir+"/cpu.stat", []byte(cpuStat(w.usageUS, int64(c.periods), int64(c.nrThrottled), w.thrUS)), 0o644); err != nil {
				return 0, err
			}
		}
		if w.psiUS != old.psiUS {
			if err := os.WriteFile(dir+"/cpu.pressure", []byte(pressure(w.psiUS)), 0o644); err != nil {
				return 0, err
			}
		}
		if w.delayNS != old.delayNS {
			// Run delay per thread: the vCPUs share it evenly.
			per := w.delayNS / int64(t.Threads)
			run := int64(c.usage * 1e9 / float64(t.Threads))
			for k := 0; k < t.Threads; k++ {
				if err := os.WriteFile(s.h.Path(fmt.Sprintf("/proc/%d/schedstat", t.TID(k))), []byte(fmt.Sprintf("%d %d %d\n", run, per, int64(c.ctxs)/int64(t.Threads))), 0o644); err != nil {
					return 0, err
				}
			}
		}
		s.written[i] = w
	}
	return hostPSI, nil
}

func (s *simHost) publishTemps() error {
	st := s.state
	amd := cpuModels[s.m.CPU].vendor == "AuthenticAMD"
	per := s.m.Sockets * s.m.CoresPerSocket
	for d := 0; d < s.m.Sockets; d++ {
		dir := s.h.Path(fmt.Sprintf("%s/hwmon%d", hwmonRoot, d))
		pkg := 0.0
		for c := 0; c < s.m.CoresPerSocket; c++ {
			cpu := d*s.m.CoresPerSocket + c
			t := st.Host.CPUTemp[cpu]
			if s.m.ThreadsPerCore > 1 {
				t = max(t, st.Host.CPUTemp[cpu+per])
			}
			pkg = max(pkg, t)
			if !amd {
				if err := os.WriteFile(fmt.Sprintf("%s/temp%d_input", dir, c+2), []byte(strconv.Itoa(int(t*1000))+"\n"), 0o644); err != nil {
					return err
				}
			}
		}
		if err := os.WriteFile(dir+"/temp1_input", []byte(strconv.Itoa(int(pkg*1000))+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// userHZ is the unit of /proc/stat's CPU times (USER_HZ).
const userHZ = 100

// procStat renders /proc/stat for CPUs busy busy[c] seconds of elapsed:
// the busy time as user time (a VM's guest time is user time to the host
// kernel too; the guest columns are left 0), the rest idle.
func procStat(busy []float64, elapsed float64) string {
	var b strings.Builder
	lines := make([]string, len(busy))
	var user, idle int64
	for c, x := range busy {
		u := int64(x * userHZ)
		i := max(int64(elapsed*userHZ)-u, 0)
		user += u
		idle += i
		lines[c] = fmt.Sprintf("cpu%d %d 0 0 %d 0 0 0 0 0 0\n", c, u, i)
	}
	fmt.Fprintf(&b, "cpu  %d 0 0 %d 0 0 0 0 0 0\n", user, idle)
	for _, l := range lines {
		b.WriteString(l)
	}
	fmt.Fprintf(&b, "intr 0\nctxt 0\nbtime %d\nprocesses 1\nprocs_running 1\nprocs_blocked 0\nsoftirq 0 0 0 0 0 0 0 0 0 0 0\n", Epoch.Unix())
	return b.String()
}

// publishProcStat writes /proc/stat: the power sensor's per-CPU busy time.
func (s *simHost) publishProcStat() error {
	return os.WriteFile(s.h.Path("/proc/stat"), []byte(procStat(s.busy, s.now.Seconds())), 0o644)
}
