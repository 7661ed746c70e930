package sense

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

func TestTaskStatesRunnable(t *testing.T) {
	stat := func(comm string, state byte) string {
		return fmt.Sprintf("4242 (%s) %c 1 4242 4242 0 -1 4194560 120 0 0 0 5 3 0 0 20 0 1 0 100 1000 100\n", comm, state)
	}
	for _, tc := range []struct {
		name     string
		threads  map[int]string // /proc/TID/stat; a thread absent here has exited
		list     []int
		runnable bool
		known    bool
		wantErr  bool
	}{
		{"one running", map[int]string{10: stat("loop", 'S'), 11: stat("loop", 'R')}, []int{10, 11}, true, true, false},
		{"all asleep", map[int]string{10: stat("qemu", 'S'), 11: stat("CPU 0/KVM", 'S')}, []int{10, 11}, false, true, false},
		{"stopped and waiting on disk", map[int]string{10: stat("a", 'T'), 11: stat("b", 'D')}, []int{10, 11}, false, true, false},
		// A command name may hold spaces and parentheses: the state is
		// after the last ')'.
		{"name with parentheses", map[int]string{10: stat("x) S (y", 'R')}, []int{10}, true, true, false},
		{"one exited", map[int]string{11: stat("loop", 'S')}, []int{10, 11}, false, true, false},
		{"all exited", map[int]string{}, []int{10, 11}, false, false, false},
		{"no threads known", map[int]string{}, nil, false, false, false},
		{"garbled", map[int]string{10: "4242 loop R"}, []int{10}, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRDHost(t)
			for tid, s := range tc.threads {
				r.write(fmt.Sprintf("proc/%d/stat", tid), s)
			}
			runnable, known, err := TaskStates{Host: r.h}.Runnable(context.Background(), Tenant{ID: "/t", Threads: tc.list})
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if runnable != tc.runnable || known != tc.known {
				t.Errorf("Runnable = %v, known %v; want %v, %v", runnable, known, tc.runnable, tc.known)
			}
		})
	}
}

// On this machine: a busy loop is runnable, a sleeping process and a
// stopped one are not.
func TestTaskStatesLive(t *testing.T) {
	h, err := host.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	start := func(script string) int {
		cmd := exec.Command("sh", "-c", script)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd.Process.Pid
	}
	busy, sleeping := start("while :; do :; done"), start("sleep 30")
	stopped := start("while :; do :; done")
	if p, err := os.FindProcess(stopped); err == nil {
		if err := p.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	wantState := func(pid int, want bool) {
		t.Helper()
		// A busy loop may be caught between time slices on a busy machine,
		// and the others need a moment to settle: a few reads decide.
		var got bool
		for range 50 {
			got, _, err = TaskStates{Host: h}.Runnable(context.Background(), Tenant{ID: strconv.Itoa(pid), Threads: []int{pid}})
			if err != nil {
				t.Fatal(err)
			}
			if got == want {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		s, _ := h.ReadString("/proc/" + strconv.Itoa(pid) + "/stat")
		t.Errorf("pid %d runnable %v, want %v (%s)", pid, got, want, strings.TrimSpace(s))
	}
	wantState(busy, true)
	wantState(sleeping, false)
	wantState(stopped, false)
}

// With a thread reader, the threads are those it reads now, not the
// tenant's list (empty when its processes joined after it was read), and
// a cgroup that holds none says so: all of it exited. Where the reader
// fails, the tenant's list is read.
func TestTaskStatesReadsThreadsAfresh(t *testing.T) {
	r := newRDHost(t)
	r.write("proc/10/stat", "10 (loop) R 1 10 10 0 -1 4194560 120 0 0 0 5 3 0 0 20 0 1 0 100 1000 100\n")
	r.write("proc/20/stat", "20 (idle) S 1 20 20 0 -1 4194560 120 0 0 0 5 3 0 0 20 0 1 0 100 1000 100\n")
	fresh := func(Tenant) ([]int, error) { return []int{10}, nil }
	failing := func(Tenant) ([]int, error) { return nil, fs.ErrNotExist }
	empty := func(Tenant) ([]int, error) { return nil, nil }
	for _, tc := range []struct {
		name     string
		threads  func(Tenant) ([]int, error)
		list     []int
		runnable bool
		known    bool
	}{
		{"its list, none fresh", nil, nil, false, false},
		{"fresh", fresh, nil, true, true},
		{"fresh over its list", fresh, []int{20}, true, true},
		{"an empty cgroup", empty, []int{20}, false, true},
		{"its list where the reader fails", failing, []int{20}, false, true},
		{"its exited list where the reader fails", failing, []int{30}, false, false},
	} {
		runnable, known, err := TaskStates{Host: r.h, Threads: tc.threads}.Runnable(t.Context(), Tenant{ID: "/t", Threads: tc.list})
		if err != nil || runnable != tc.runnable || known != tc.known {
			t.Errorf("%s: Runnable = %v, known %v, %v; want %v, %v", tc.name, runnable, known, err, tc.runnable, tc.known)
		}
	}
}
