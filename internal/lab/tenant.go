package lab

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/load"
)

// ExecShim is the hidden subcommand that starts every tenant: the lab starts
// `crosstalk __tenant-exec -- CMD…`, moves that process into the tenant's
// cgroups, and only then lets it exec CMD. So a tenant never runs a single
// instruction outside its cgroups and CPUs, on v1 and v2 alike.
const ExecShim = "__tenant-exec"

// TenantExec is the shim's body: wait for the lab's go-ahead on fd 3, then
// replace this process with argv. If the lab dies first, the pipe closes
// without a go-ahead and the shim exits without running anything.
func TenantExec(argv []string) error {
	if len(argv) == 0 {
		return errors.New("tenant-exec: no command")
	}
	gate := os.NewFile(3, "gate")
	var b [1]byte
	n, _ := gate.Read(b[:])
	gate.Close()
	if n != 1 || b[0] != 'g' {
		return errors.New("tenant-exec: lab went away before starting the tenant")
	}
	bin, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("tenant-exec: %w", err)
	}
	return syscall.Exec(bin, argv, os.Environ())
}

// Sample is one point of a tenant's metric over time.
type Sample struct {
	T     float64 `json:"t"` // seconds since the phase started
	Value float64 `json:"v"`
	// Ops is what a built-in load did in the interval the sample ends (0:
	// not known, as for a program's metric).
	Ops uint64 `json:"ops,omitempty"`
}

// proc is one running tenant.
type proc struct {
	t       Tenant
	group   *cgroup.Group
	cmd     *exec.Cmd
	startAt time.Duration // offset into the phase when it started
	// onset is when its work began, where it said so (a built-in load's
	// start line, a command's Onset line); nil until then.
	onset *time.Duration

	mu        sync.Mutex
	samples   []Sample
	summary   *load.Summary
	matches   []float64
	tail      []string // last lines of stderr, for error messages
	killed    bool     // the lab stopped it on purpose
	paused    bool     // SIGSTOPped by its pause window, not yet resumed
	resumed   bool     // its pause window is over
	done      chan struct{}
	waitErr   error
	exitedAt  time.Duration
	phaseTime func() time.Duration
}

// argv builds the tenant's command line for a run of the given length.
//
// A built-in load is also told the wall-clock time its run ends (--until):
// its clock starts after its setup, and a load stopped by a pause window
// before that (SIGSTOP) would otherwise run its whole duration after the
// resume, past its stop and the phase.
func (t Tenant) argv(self string, runFor, interval time.Duration, now time.Time) []string {
	if t.Load == "" {
		return t.Command
	}
	a := []string{self, "load", t.Load, "--duration", runFor.String(), "--interval", interval.String(),
		"--until", now.Add(runFor).Format(time.RFC3339Nano)}
	return append(a, t.Args...)
}

// startProc launches a tenant through the shim into its group.
func startProc(self string, t Tenant, g *cgroup.Group, runFor, interval time.Duration, phaseTime func() time.Duration) (*proc, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(self, append([]string{ExecShim, "--"}, t.argv(self, runFor, interval, time.Now())...)...)
	cmd.ExtraFiles = []*os.File{r}
	// Its own process group, so a stop kills helpers it forked; and killed
	// with us if the lab itself dies (kill -9, crash).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		w.Close()
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		w.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("start tenant %s: %w", t.Name, err)
	}
	p := &proc{t: t, group: g, cmd: cmd, startAt: phaseTime(), done: make(chan struct{}), phaseTime: phaseTime}
	if err := g.AddProc(cmd.Process.Pid); err != nil {
		w.Close() // the shim exits without exec'ing
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("tenant %s: %w", t.Name, err)
	}
	if _, err := w.Write([]byte{'g'}); err != nil {
		w.Close()
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("tenant %s: release shim: %w", t.Name, err)
	}
	w.Close()

	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); p.read(stdout, false) }()
	go func() { defer readers.Done(); p.read(stderr, true) }()
	go func() {
		readers.Wait()
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.exitedAt = phaseTime()
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) read(r io.Reader, isStderr bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		now := p.phaseTime().Seconds()
		p.mu.Lock()
		if isStderr && strings.TrimSpace(line) != "" {
			p.tail = append(p.tail, line)
			if len(p.tail) > 20 {
				p.tail = p.tail[1:]
			}
		}
		if p.onset == nil && p.t.onsetRe != nil && p.t.onsetRe.MatchString(line) {
			d := time.Duration(now * float64(time.Second))
			p.onset = &d
		}
		switch {
		case p.t.Load != "" && !isStderr:
			p.parseLoadLine(line)
		case p.t.re != nil:
			if m := p.t.re.FindStringSubmatch(line); m != nil {
				if v, err := strconv.ParseFloat(strings.ReplaceAll(m[1], ",", ""), 64); err == nil {
					p.matches = append(p.matches, v)
					p.samples = append(p.samples, Sample{T: now, Value: v})
				}
			}
		}
		p.mu.Unlock()
	}
}

// parseLoadLine reads the JSON lines `crosstalk load` prints.
func (p *proc) parseLoadLine(line string) {
	if !strings.HasPrefix(line, "{") {
		return
	}
	var head struct {
		Type string `json:"type"`
	}
	if json.Unmarshal([]byte(line), &head) != nil {
		return
	}
	switch head.Type {
	case "start":
		var pr load.Progress
		if json.Unmarshal([]byte(line), &pr) != nil || p.onset != nil {
			return
		}
		if at, err := time.Parse(time.RFC3339Nano, pr.At); err == nil {
			// The phase time of its wall-clock stamp, not of this read:
			// the line may wait in the pipe while its CPUs are busy.
			d := max(p.startAt, p.phaseTime()-time.Since(at))
			p.onset = &d
		}
	case "progress":
		var pr load.Progress
		if json.Unmarshal([]byte(line), &pr) == nil && pr.Ops > 0 {
			// Its clock starts at its onset: on a busy CPU tenths of a
			// second after its process.
			from := p.startAt
			if p.onset != nil {
				from = *p.onset
			}
			p.samples = append(p.samples, Sample{T: from.Seconds() + pr.T, Value: pr.Metric, Ops: pr.Ops})
		}
	case "summary":
		var s load.Summary
		if json.Unmarshal([]byte(line), &s) == nil {
			p.summary = &s
		}
	}
}

// value is the tenant's metric for its whole run.
func (p *proc) value() (float64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.t.Load != "" {
		if p.summary == nil || p.summary.Ops == 0 {
			return 0, false
		}
		return p.summary.Value, true
	}
	if len(p.matches) == 0 {
		return 0, false
	}
	agg := "last"
	if p.t.Metric != nil && p.t.Metric.Aggregate != "" {
		agg = p.t.Metric.Aggregate
	}
	switch agg {
	case "mean":
		sum := 0.0
		for _, v := range p.matches {
			sum += v
		}
		return sum / float64(len(p.matches)), true
	case "min":
		return slices.Min(p.matches), true
	case "max":
		return slices.Max(p.matches), true
	}
	return p.matches[len(p.matches)-1], true
}

// stop kills the tenant's whole process group and anything left in its cgroup.
func (p *proc) stop() {
	p.mu.Lock()
	again := p.killed
	p.killed = true
	p.mu.Unlock()
	if again {
		return
	}
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	p.group.Kill()
}

// pauseStep applies the tenant's pause window at phase time now: it stops
// every process of the tenant at Pause and continues them at Resume. It
// returns "pause" or "resume" when it did either, "" otherwise.
func (p *proc) pauseStep(now time.Duration) string {
	if p.t.Pause == 0 {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.killed {
		return ""
	}
	switch {
	case !p.paused && !p.resumed && now >= p.t.Pause:
		p.paused = true
		p.signal(syscall.SIGSTOP)
		return "pause"
	case p.paused && now >= p.t.Resume:
		p.paused, p.resumed = false, true
		p.signal(syscall.SIGCONT)
		return "resume"
	}
	return ""
}

// signal sends sig to the tenant's process group and to every process in
// its cgroup, so helpers in a process group of their own are reached too.
func (p *proc) signal(sig syscall.Signal) {
	syscall.Kill(-p.cmd.Process.Pid, sig)
	pids, _ := p.group.Procs()
	for _, pid := range pids {
		syscall.Kill(pid, sig)
	}
}

// noMetric explains a command that the lab stopped (at its stop offset or
// the phase end) before it printed its metric even once: the usual mistake
// is a benchmark that runs longer than the phase and reports only at its
// end. It returns nil for tenants without a metric regex or that exited
// by themselves.
func (p *proc) noMetric(phase time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.t.Load != "" || p.t.Metric == nil || !p.killed || len(p.matches) > 0 {
		return nil
	}
	// Its last words on stderr tell a benchmark that never got going (a
	// server that could not start) from one that runs too long.
	tail := strings.Join(p.tail, "\n  ")
	if tail != "" {
		tail = "; its last output on stderr:\n  " + tail
	}
	return fmt.Errorf("tenant %s (%s) was stopped at the end of its %s run before it printed a line matching its metric regex %q: "+
		"run it in a loop (command: [\"sh\", \"-c\", \"while :; do …; done\"], with metric aggregate: mean) so it reports during the phase, "+
		"or make one run of it shorter than %s%s",
		p.t.Name, p.t.What(), p.t.RunLength(phase), p.t.Metric.Regex, p.t.RunLength(phase), tail)
}

// failure returns why the tenant failed, or nil if it ran fine (or was
// stopped by the lab).
func (p *proc) failure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waitErr == nil || p.killed {
		return nil
	}
	tail := strings.Join(p.tail, "\n  ")
	if tail != "" {
		tail = "; its last output:\n  " + tail
	}
	return fmt.Errorf("tenant %s (%s) failed: %v%s", p.t.Name, p.t.What(), p.waitErr, tail)
}

// What names what the tenant runs: "load chase" or the command.
func (t Tenant) What() string {
	if t.Load != "" {
		return "load " + t.Load
	}
	return strings.Join(t.Command, " ")
}
