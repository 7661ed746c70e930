package top

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/api"
)

type source struct {
	mu sync.Mutex
	s  api.State
	ok bool
}

func (f *source) Latest() (api.State, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.s, f.ok
}

func (f *source) set(s api.State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.s, f.ok = s, true
}

// agentServer serves the real agent API from src.
func agentServer(t *testing.T, src *source) (addr string, srv *httptest.Server) {
	t.Helper()
	srv = httptest.NewServer(agent.Handler(src, agent.NewRegistry(src, "test", "test")))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), srv
}

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// syncBuffer is a bytes.Buffer safe to read while Run writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestFetch(t *testing.T) {
	ctx := context.Background()
	src := &source{}
	addr, srv := agentServer(t, src)
	c := NewClient()

	_, err := Fetch(ctx, c, addr)
	if !errors.Is(err, ErrNoState) {
		t.Errorf("before the first interval: %v", err)
	}

	src.set(sample())
	s, err := Fetch(ctx, c, addr)
	if err != nil {
		t.Fatal(err)
	}
	if s.Host != "node-7" || len(s.Tenants) != 4 || !s.Time.Equal(t0) {
		t.Errorf("fetched %+v", s)
	}
	// A base URL works too.
	if _, err := Fetch(ctx, c, srv.URL+"/"); err != nil {
		t.Errorf("with a URL: %v", err)
	}

	dead := closedAddr(t)
	_, err = Fetch(ctx, c, dead)
	if !errors.Is(err, ErrNoAgent) || !strings.Contains(err.Error(), "no agent at "+dead+": is `crosstalk run` running?") {
		t.Errorf("nothing listening: %v", err)
	}
}

func TestFetchNotAnAgent(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		h    http.HandlerFunc
		want string
	}{
		{func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, "is not a crosstalk agent"},
		{func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom\nmore", 500) }, "500 Internal Server Error: boom"},
		{func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"tenants": 7}`)) }, "cannot read"},
	} {
		srv := httptest.NewServer(tc.h)
		_, err := Fetch(ctx, NewClient(), srv.URL)
		srv.Close()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want %q, got %v", tc.want, err)
		}
	}
}

func TestRunOnce(t *testing.T) {
	src := &source{}
	src.set(sample())
	addr, _ := agentServer(t, src)
	var out bytes.Buffer
	err := Run(context.Background(), &out, Options{Addr: addr, Once: true, Color: true, Width: func() int { return 80 },
		Now: func() time.Time { return t0.Add(time.Second) }})
	if err != nil {
		t.Fatal(err)
	}
	want := render(t, sample(), 80, false)
	if out.String() != want {
		t.Errorf("--once frame differs from Render:\n%s\nwant:\n%s", out.String(), want)
	}

	err = Run(context.Background(), &out, Options{Addr: closedAddr(t), Once: true})
	if !errors.Is(err, ErrNoAgent) {
		t.Errorf("--once with no agent: %v", err)
	}
}

func TestRunLive(t *testing.T) {
	src := &source{}
	addr, srv := agentServer(t, src)
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, &out, Options{
			Addr: addr, Refresh: 10 * time.Millisecond, Color: true,
			Width: func() int { return 100 },
			Now:   func() time.Time { return t0.Add(1500 * time.Millisecond) },
		})
	}()
	waitFor := func(what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), what) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in:\n%s", what, out.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// Before the first interval it waits.
	waitFor("waiting for the agent at " + addr)
	src.set(sample())
	waitFor("noisy-neighbour")
	waitFor("updated 1.5s ago  refresh 10ms  Ctrl-C quits")
	if !strings.HasPrefix(out.String(), clearHome) || !strings.Contains(out.String(), sRed+"2.50×"+sReset) {
		t.Errorf("live frames: no clear+home or no colour:\n%q", out.String())
	}
	// The agent goes away: the last frame stays, with the error under it.
	srv.Close()
	waitFor("! no agent at " + addr)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after Ctrl-C: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
	frames := strings.Split(out.String(), clearHome)
	lastFrame := frames[len(frames)-1]
	if !strings.Contains(lastFrame, "noisy-neighbour") || !strings.Contains(lastFrame, "showing the state of 09:26:53") {
		t.Errorf("last frame:\n%s", lastFrame)
	}
}

func TestRunLiveNoAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	dead := closedAddr(t)
	err := Run(ctx, &out, Options{Addr: dead, Refresh: 10 * time.Millisecond})
	if !errors.Is(err, ErrNoAgent) || !strings.Contains(err.Error(), "is `crosstalk run` running?") {
		t.Errorf("live with no agent: %v", err)
	}
	if out.Len() != 0 {
		t.Errorf("drew something: %q", out.String())
	}
}

func TestStateURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:9477":         "http://127.0.0.1:9477/api/state",
		"[::1]:9477":             "http://[::1]:9477/api/state",
		"http://node-7:9477/":    "http://node-7:9477/api/state",
		"https://node-7/agent-7": "https://node-7/agent-7/api/state",
	} {
		if got := StateURL(in); got != want {
			t.Errorf("StateURL(%q) = %q, want %q", in, got, want)
		}
	}
}
