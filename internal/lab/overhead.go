package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/host"
)

// OverheadOptions configures the agent overhead benchmark.
type OverheadOptions struct {
	Tenants  int           // idle tenant cgroups to create (default 100)
	Interval time.Duration // the agent's interval (default 1s)
	Warmup   time.Duration // before measuring (default 5s)
	Duration time.Duration // measured (default 30s)
	// CPUProfile, when set, has the agent write a Go CPU profile of its
	// whole run there (`crosstalk run --cpuprofile`).
	CPUProfile string
}

// Overhead is what the agent cost while it watched idle tenants.
type Overhead struct {
	Tenants      int     `json:"tenants"`
	Seen         int     `json:"tenants_seen"` // what the agent's state API reported
	Interval     float64 `json:"interval_seconds"`
	Seconds      float64 `json:"measured_seconds"`
	CPUSeconds   float64 `json:"cpu_seconds"`
	CorePercent  float64 `json:"core_percent"` // CPU time over wall time, % of one core
	RSSMiB       float64 `json:"rss_mib"`
	PeakRSSMiB   float64 `json:"peak_rss_mib"`
	IntervalCPUs float64 `json:"agent_interval_cpu_seconds"` // the agent's own view of its last interval
	// Switches is how often a second the agent's threads were switched
	// in (voluntary and not, over the threads alive at the end). On a VM
	// each switch costs tens of microseconds, so this, more than the work
	// done, sets the agent's CPU share on an idle host.
	Switches float64 `json:"switches_per_second"`
	// Reference is the same measurement, over the same window, of a
	// process that does nothing but wake at the agent's look pace and
	// read /proc/stat (the benchmark itself): the host's price of waking
	// that often, which no agent that looks as often pays less than.
	Reference Reference `json:"reference"`
}

// Reference is what waking at a pace cost the benchmark's own process.
type Reference struct {
	Every       float64 `json:"every_seconds"`
	CPUSeconds  float64 `json:"cpu_seconds"`
	CorePercent float64 `json:"core_percent"`
	Switches    float64 `json:"switches_per_second"`
}

// RunOverhead creates idle tenant cgroups, runs `crosstalk run` on them as a
// separate process, and measures its CPU time (/proc/PID/stat) and memory
// (/proc/PID/status) while it samples them. Everything it creates is removed.
func RunOverhead(ctx context.Context, oo OverheadOptions, opt Options) (*Overhead, error) {
	if oo.Tenants <= 0 {
		oo.Tenants = 100
	}
	if oo.Interval <= 0 {
		oo.Interval = time.Second
	}
	if oo.Warmup <= 0 {
		oo.Warmup = 5 * time.Second
	}
	if oo.Duration <= 0 {
		oo.Duration = 30 * time.Second
	}
	if err := opt.fill(); err != nil {
		return nil, err
	}
	layout, err := cgroup.Detect(opt.Host)
	if err != nil {
		return nil, err
	}
	if layout.CPUControl() == "" {
		return nil, errors.New("overhead: no cgroup cpu controller")
	}
	base := fmt.Sprintf("/crosstalk-bench-%d", os.Getpid())
	defer cgroup.RemoveTree(opt.Host, layout, base, 5*time.Second)
	for i := range oo.Tenants {
		if _, err := cgroup.Create(opt.Host, layout, path.Join(base, fmt.Sprintf("t-%03d", i)), cpuset.Set{}); err != nil {
			return nil, err
		}
	}

	dir, err := os.MkdirTemp("", "crosstalk-overhead")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfg := filepath.Join(dir, "crosstalk.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("interval: %s\nlisten: %q\nstate_dir: %s\ntenants:\n  builtin: false\n  globs: [%q]\n",
		oo.Interval, addr, filepath.Join(dir, "state"), base+"/*")), 0o644); err != nil {
		return nil, err
	}
	args := []string{"run", "--config", cfg, "--log-level", "warn"}
	if oo.CPUProfile != "" {
		args = append(args, "--cpuprofile", oo.CPUProfile)
	}
	cmd := exec.Command(opt.Self, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	opt.Log.Info("overhead: agent started", "pid", cmd.Process.Pid, "tenants", oo.Tenants, "interval", oo.Interval)
	if err := sleepCtx(ctx, oo.Warmup); err != nil {
		return nil, err
	}
	pid, self := cmd.Process.Pid, os.Getpid()
	every := agent.WatchPace(oo.Interval)
	cpu0, err := procCPU(pid)
	if err != nil {
		return nil, err
	}
	sw0 := procSwitches(pid)
	ref0, _ := procCPU(self)
	refSw0 := procSwitches(self)
	t0 := time.Now()
	if err := wakeEvery(ctx, opt.Host, every, oo.Duration); err != nil {
		return nil, err
	}
	cpu1, err := procCPU(pid)
	if err != nil {
		return nil, err
	}
	sw1 := procSwitches(pid)
	ref1, _ := procCPU(self)
	refSw1 := procSwitches(self)
	wall := time.Since(t0)
	o := &Overhead{Tenants: oo.Tenants, Interval: oo.Interval.Seconds(), Seconds: wall.Seconds(), CPUSeconds: (cpu1 - cpu0).Seconds()}
	o.CorePercent = 100 * o.CPUSeconds / o.Seconds
	o.Switches = float64(sw1-sw0) / o.Seconds
	o.Reference = Reference{Every: every.Seconds(), CPUSeconds: (ref1 - ref0).Seconds(), Switches: float64(refSw1-refSw0) / o.Seconds}
	o.Reference.CorePercent = 100 * o.Reference.CPUSeconds / o.Seconds
	o.RSSMiB, o.PeakRSSMiB = procRSS(pid)
	var st struct {
		Tenants     []json.RawMessage `json:"tenants"`
		IntervalCPU float64           `json:"interval_cpu_seconds"`
	}
	if err := getJSON("http://"+addr+"/api/state", &st); err == nil {
		o.Seen, o.IntervalCPUs = len(st.Tenants), st.IntervalCPU
	} else {
		opt.Log.Warn("overhead: state API", "err", err)
	}
	return o, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func getJSON(url string, v any) error {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// procCPU is a process's user+system CPU time from /proc/PID/stat (clock
// ticks of 1/100 s, the kernel's USER_HZ on every Linux architecture).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f, err := host.ProcStatFields(string(b))
	if err != nil {
		return 0, err
	}
	if len(f) < 13 {
		return 0, errors.New("short /proc/PID/stat")
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// wakeEvery wakes every every for d and reads /proc/stat each time, as the
// agent's look does (raw reads through the host): the reference for what
// waking costs.
func wakeEvery(ctx context.Context, h *host.Host, every, d time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	end := time.After(d)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-end:
			return nil
		case <-t.C:
			h.ReadFile("/proc/stat")
		}
	}
}

// procSwitches sums the context switches (voluntary and not) of a
// process's threads.
func procSwitches(pid int) int64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	var n int64
	for _, t := range tasks {
		v := procStatus(t, "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")
		n += int64(v["voluntary_ctxt_switches"] + v["nonvoluntary_ctxt_switches"])
	}
	return n
}

// procRSS returns VmRSS and VmHWM in MiB.
func procRSS(pid int) (rss, peak float64) {
	v := procStatus(fmt.Sprintf("/proc/%d/status", pid), "VmRSS", "VmHWM")
	return v["VmRSS"] / 1024, v["VmHWM"] / 1024
}

// procStatus reads the named fields of a /proc status file ("Key:  value
// [unit]"), each the number its value begins with; a field it lacks, or
// a file it cannot read, is left out.
func procStatus(file string, keys ...string) map[string]float64 {
	out := map[string]float64{}
	b, err := os.ReadFile(file)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || !slices.Contains(keys, k) {
			continue
		}
		if f := strings.Fields(v); len(f) > 0 {
			if x, err := strconv.ParseFloat(f[0], 64); err == nil {
				out[k] = x
			}
		}
	}
	return out
}
