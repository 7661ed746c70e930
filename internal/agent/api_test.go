package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/api"
)

type apiResp struct {
	code int
	ct   string
	body string
	hdr  http.Header
}

func do(t *testing.T, h http.Handler, method, path string) apiResp {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return apiResp{res.StatusCode, res.Header.Get("Content-Type"), string(b), res.Header}
}

func TestAPIBeforeFirstInterval(t *testing.T) {
	src := &fakeSource{}
	h := Handler(src, NewRegistry(src, "dev", "none"))

	r := do(t, h, "GET", "/api/state")
	if r.code != 503 || r.ct != "application/json" {
		t.Fatalf("/api/state: %d %q", r.code, r.ct)
	}
	var e map[string]string
	if err := json.Unmarshal([]byte(r.body), &e); err != nil || !strings.Contains(e["error"], "first interval") {
		t.Errorf("/api/state body %q (%v)", r.body, err)
	}

	r = do(t, h, "GET", "/healthz")
	if r.code != 503 || !strings.Contains(r.body, "no state yet") {
		t.Errorf("/healthz: %d %q", r.code, r.body)
	}

	r = do(t, h, "GET", "/metrics")
	if r.code != 200 || !strings.Contains(r.body, `crosstalk_build_info{commit="none",goversion="`+runtime.Version()+`",version="dev"} 1`) {
		t.Errorf("/metrics: %d\n%s", r.code, r.body)
	}
	if strings.Contains(r.body, "crosstalk_tenants") {
		t.Errorf("/metrics has state metrics before any state")
	}
}

func TestAPIState(t *testing.T) {
	src := &fakeSource{}
	want := sampleState()
	src.set(want)
	h := Handler(src, NewRegistry(src, "v0.4.0", "abc123"))

	r := do(t, h, "GET", "/api/state")
	if r.code != 200 || r.ct != "application/json" || r.hdr.Get("Cache-Control") != "no-store" {
		t.Fatalf("/api/state: %d %q %v", r.code, r.ct, r.hdr)
	}
	var got api.State
	if err := json.Unmarshal([]byte(r.body), &got); err != nil {
		t.Fatal(err)
	}
	if got.Host != want.Host || !got.Time.Equal(want.Time) || len(got.Tenants) != 2 ||
		got.Tenants[0].Counters["bus_locks"] != 250000 || got.Proof == nil || got.Proof.Tenant != "vm:noisy" ||
		got.ActionsTotal["proof"] != 3 || len(got.Probes) != 2 || got.Probes[0].Ratio != 2.5 {
		t.Errorf("round trip: %+v", got)
	}
	// The JSON keys are the State's tags.
	for _, key := range []string{`"interval_seconds":1`, `"suspect_score":0.92`, `"psi_cpu_some":0.1`, `"contention_ratio":2.5`} {
		if !strings.Contains(r.body, key) {
			t.Errorf("body lacks %s", key)
		}
	}

	r = do(t, h, "GET", "/metrics")
	if r.code != 200 || !strings.HasPrefix(r.ct, "text/plain") {
		t.Fatalf("/metrics: %d %q", r.code, r.ct)
	}
	for _, line := range []string{
		`crosstalk_tenant_suspect_score{kind="vm",name="noisy",tenant="vm:noisy"} 0.92`,
		`crosstalk_probe_ratio{domain="0",probe="lock"} 2.5`,
		`crosstalk_contention 1`,
		`go_goroutines `,
	} {
		if !strings.Contains(r.body, line) {
			t.Errorf("/metrics lacks %q", line)
		}
	}

	r = do(t, h, "GET", "/")
	if r.code != 200 || !strings.HasPrefix(r.ct, "text/plain") {
		t.Fatalf("/: %d %q", r.code, r.ct)
	}
	for _, ep := range []string{"/metrics", "/api/state", "/healthz"} {
		if !strings.Contains(r.body, ep) {
			t.Errorf("index lacks %s:\n%s", ep, r.body)
		}
	}
	if r := do(t, h, "GET", "/nope"); r.code != 404 {
		t.Errorf("/nope: %d", r.code)
	}
	if r := do(t, h, "HEAD", "/api/state"); r.code != 200 {
		t.Errorf("HEAD /api/state: %d", r.code)
	}
}

func TestAPIStateNaN(t *testing.T) {
	src := &fakeSource{}
	s := sampleState()
	s.ContentionRatio = math.NaN()
	src.set(s)
	r := do(t, Handler(src, NewRegistry(src, "", "")), "GET", "/api/state")
	if r.code != 500 || r.ct != "application/json" || !strings.Contains(r.body, `"error"`) {
		t.Errorf("NaN state: %d %q %s", r.code, r.ct, r.body)
	}
}

func TestAPIMethodNotAllowed(t *testing.T) {
	src := &fakeSource{}
	src.set(sampleState())
	h := Handler(src, NewRegistry(src, "", ""))
	for _, m := range []string{"POST", "PUT", "DELETE", "PATCH"} {
		for _, p := range []string{"/", "/metrics", "/api/state", "/healthz"} {
			r := do(t, h, m, p)
			if r.code != 405 || r.hdr.Get("Allow") != "GET, HEAD" || !strings.HasPrefix(r.ct, "text/plain") {
				t.Errorf("%s %s: %d allow=%q ct=%q", m, p, r.code, r.hdr.Get("Allow"), r.ct)
			}
		}
	}
}

func TestAPIHealthz(t *testing.T) {
	src := &fakeSource{}
	s := sampleState() // interval 1 s
	src.set(s)
	for _, tc := range []struct {
		age  time.Duration
		code int
		body string
	}{
		{0, 200, "ok\n"},
		{2900 * time.Millisecond, 200, "ok\n"},
		{3 * time.Second, 503, "stale: last update 3s ago (interval 1s, limit 3s)\n"},
		{time.Minute, 503, "stale: last update 1m0s ago (interval 1s, limit 3s)\n"},
	} {
		now := func() time.Time { return s.Time.Add(tc.age) }
		r := do(t, newHandler(src, NewRegistry(src, "", ""), now), "GET", "/healthz")
		if r.code != tc.code || r.body != tc.body || !strings.HasPrefix(r.ct, "text/plain") {
			t.Errorf("age %s: %d %q %q", tc.age, r.code, r.body, r.ct)
		}
	}

	// A 10 s interval tolerates 25 s without an update.
	s.Interval = 10
	src.set(s)
	now := func() time.Time { return s.Time.Add(25 * time.Second) }
	if r := do(t, newHandler(src, NewRegistry(src, "", ""), now), "GET", "/healthz"); r.code != 200 {
		t.Errorf("interval 10s, age 25s: %d %q", r.code, r.body)
	}
}

func TestAPIServe(t *testing.T) {
	src := &fakeSource{}
	src.set(sampleState())
	h := Handler(src, NewRegistry(src, "", ""))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveListener(ctx, ln, "", h, log) }()

	res, err := http.Get("http://" + ln.Addr().String() + "/api/state")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Errorf("GET /api/state over TCP: %d", res.StatusCode)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
	if !strings.Contains(logs.String(), "api listening") || !strings.Contains(logs.String(), ln.Addr().String()) {
		t.Errorf("logs: %s", logs.String())
	}
	if _, err := http.Get("http://" + ln.Addr().String() + "/healthz"); err == nil {
		t.Error("still serving after ctx ended")
	}
}

func TestAPIServeAddrInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = Serve(ctx, ln.Addr().String(), "", http.NotFoundHandler(), nil)
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("Serve on a busy port: %v", err)
	}
}
