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
	"strconv"
	"strings"
	"syscall"
	"time"

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
	cpu0, err := procCPU(cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := sleepCtx(ctx, oo.Duration); err != nil {
		return nil, err
	}
	cpu1, err := procCPU(cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	wall := time.Since(t0)
	o := &Overhead{Tenants: oo.Tenants, Interval: oo.Interval.Seconds(), Seconds: wall.Seconds(), CPUSeconds: (cpu1 - cpu0).Seconds()}
	o.CorePercent = 100 * o.CPUSeconds / o.Seconds
	o.RSSMiB, o.PeakRSSMiB = procRSS(cmd.Process.Pid)
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

// procRSS returns VmRSS and VmHWM in MiB.
func procRSS(pid int) (rss, peak float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && (f[0] == "VmRSS:" || f[0] == "VmHWM:") {
			kb, _ := strconv.ParseFloat(f[1], 64)
			if f[0] == "VmRSS:" {
				rss = kb / 1024
			} else {
				peak = kb / 1024
			}
		}
	}
	return rss, peak
}
