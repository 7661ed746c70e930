package nodesignal

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/api"
	"github.com/prometheus/client_golang/prometheus"
)

// request is one request the fake API server received.
type request struct {
	Method, Path, ContentType, Auth string
	Body                            any // decoded JSON, nil without a body
}

// fakeAPI is a TLS API server holding one node; it records every request
// and applies label and taint patches the way the real server does, so a
// test sees the node's state too.
type fakeAPI struct {
	mu       sync.Mutex
	reqs     []request
	labels   map[string]string
	taints   []Taint
	rv       int
	status   []any // conditions as last patched
	conflict int   // answer the next N taint writes with 409
	fail     int   // answer every request with this code (0: none)
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, _ := io.ReadAll(r.Body)
	req := request{Method: r.Method, Path: r.URL.Path, ContentType: r.Header.Get("Content-Type"), Auth: r.Header.Get("Authorization")}
	var body map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &body); err != nil {
			http.Error(w, "bad json", 400)
			return
		}
		req.Body = body
	}
	f.reqs = append(f.reqs, req)
	if f.fail != 0 {
		w.WriteHeader(f.fail)
		json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "message": `nodes "n1" is forbidden: User "system:serviceaccount:crosstalk:crosstalk" cannot patch resource "nodes"`})
		return
	}
	switch {
	case r.Method == "GET" && r.URL.Path == "/api/v1/nodes/n1":
		var n Node
		n.Metadata.Name, n.Metadata.Labels, n.Metadata.ResourceVersion = "n1", f.labels, itoa(f.rv)
		n.Spec.Taints = f.taints
		json.NewEncoder(w).Encode(n)
	case r.Method == "PATCH" && r.URL.Path == "/api/v1/nodes/n1/status":
		f.status = body["status"].(map[string]any)["conditions"].([]any)
		w.Write([]byte("{}"))
	case r.Method == "PATCH" && r.URL.Path == "/api/v1/nodes/n1":
		md, _ := body["metadata"].(map[string]any)
		if rv, ok := md["resourceVersion"]; ok && (rv != itoa(f.rv) || f.conflict > 0) {
			f.conflict--
			f.rv++ // someone else wrote meanwhile
			w.WriteHeader(http.StatusConflict)
			json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "message": "the object has been modified"})
			return
		}
		if labels, ok := md["labels"].(map[string]any); ok {
			for k, v := range labels {
				if v == nil {
					delete(f.labels, k)
				} else {
					f.labels[k] = v.(string)
				}
			}
		}
		if spec, ok := body["spec"].(map[string]any); ok {
			tb, _ := json.Marshal(spec["taints"])
			f.taints = nil
			json.Unmarshal(tb, &f.taints)
		}
		f.rv++
		w.Write([]byte("{}"))
	default:
		http.NotFound(w, r)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func (f *fakeAPI) take() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.reqs
	f.reqs = nil
	return r
}

// newFake starts the fake API server and a real Client for it, with token
// and CA files as a pod has them.
func newFake(t *testing.T) (*fakeAPI, *Client, string) {
	t.Helper()
	f := &fakeAPI{labels: map[string]string{"kubernetes.io/hostname": "n1"}, taints: []Taint{{Key: "other.io/maintenance", Effect: "NoSchedule"}}, rv: 1}
	srv := httptest.NewTLSServer(f)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	token, ca := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	os.WriteFile(token, []byte("tok-1\n"), 0o600)
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644)
	u := strings.Replace(srv.URL, "https://127.0.0.1:", "", 1)
	t.Setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", u)
	c, err := NewClient("", token, ca, "crosstalk/test")
	if err != nil {
		t.Fatal(err)
	}
	return f, c, token
}

func condition(status, reason, msg, hb, tr string) map[string]any {
	return map[string]any{"type": ConditionType, "status": status, "reason": reason, "message": msg,
		"lastHeartbeatTime": hb, "lastTransitionTime": tr}
}

func TestPublishSendsExactlyTheseRequests(t *testing.T) {
	f, c, tokenFile := newFake(t)
	p := &Publisher{API: c, Node: "n1", TaintEffect: "PreferNoSchedule"}
	now := time.Date(2026, 11, 24, 12, 5, 0, 0, time.UTC)
	since := now.Add(-time.Second)
	flagged := Status{Uncontained: true, Reason: ReasonPolluterAtFloor, Message: "held vm-7 at its floor", Since: since}
	if err := p.Publish(context.Background(), flagged, now); err != nil {
		t.Fatal(err)
	}
	want := []request{
		{"PATCH", "/api/v1/nodes/n1/status", StrategicMergePatch, "Bearer tok-1", map[string]any{"status": map[string]any{"conditions": []any{
			condition("True", ReasonPolluterAtFloor, "held vm-7 at its floor", "2026-11-24T12:05:00Z", "2026-11-24T12:04:59Z")}}}},
		{"PATCH", "/api/v1/nodes/n1", MergePatch, "Bearer tok-1", map[string]any{"metadata": map[string]any{"labels": map[string]any{Label: "true"}}}},
		{"GET", "/api/v1/nodes/n1", "", "Bearer tok-1", nil},
		{"PATCH", "/api/v1/nodes/n1", MergePatch, "Bearer tok-1", map[string]any{
			"metadata": map[string]any{"resourceVersion": "2"},
			"spec": map[string]any{"taints": []any{
				map[string]any{"key": "other.io/maintenance", "effect": "NoSchedule"},
				map[string]any{"key": TaintKey, "value": "true", "effect": "PreferNoSchedule", "timeAdded": "2026-11-24T12:05:00Z"},
			}}}},
	}
	if got := f.take(); !reflect.DeepEqual(got, want) {
		t.Fatalf("requests:\n got %+v\nwant %+v", got, want)
	}
	if f.labels[Label] != "true" || len(f.taints) != 2 || f.labels["kubernetes.io/hostname"] != "n1" {
		t.Errorf("node after flagging: labels %v taints %v", f.labels, f.taints)
	}

	// Publishing again: the taint is there, no second write; the token was
	// rotated and the new one is used.
	os.WriteFile(tokenFile, []byte("tok-2"), 0o600)
	if err := p.Publish(context.Background(), flagged, now.Add(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	got := f.take()
	if len(got) != 3 || got[2].Method != "GET" || got[0].Auth != "Bearer tok-2" {
		t.Errorf("republish: %+v", got)
	}

	// Cleared: condition False, label removed (JSON null), only our taint removed.
	cleared := Status{Reason: ReasonContained, Message: "contention resolved", Since: now.Add(10 * time.Minute)}
	if err := p.Publish(context.Background(), cleared, now.Add(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	got = f.take()
	if len(got) != 4 {
		t.Fatalf("clear: %d requests: %+v", len(got), got)
	}
	if lb := got[1].Body.(map[string]any)["metadata"].(map[string]any)["labels"].(map[string]any); lb[Label] != nil {
		t.Errorf("label patch on clear = %v, want null", lb)
	}
	if c := f.status[0].(map[string]any); c["status"] != "False" || c["reason"] != ReasonContained {
		t.Errorf("condition after clear: %v", c)
	}
	if _, ok := f.labels[Label]; ok || len(f.taints) != 1 || f.taints[0].Key != "other.io/maintenance" {
		t.Errorf("node after clearing: labels %v taints %v", f.labels, f.taints)
	}
}

// A taint write that races with another writer is retried on the fresh
// node, never forced over it.
func TestPublishRetriesTaintOnConflict(t *testing.T) {
	f, c, _ := newFake(t)
	f.conflict = 1
	p := &Publisher{API: c, Node: "n1", TaintEffect: "NoSchedule"}
	if err := p.Publish(context.Background(), Status{Uncontained: true, Reason: ReasonNoConviction}, time.Now()); err != nil {
		t.Fatal(err)
	}
	var methods []string
	for _, r := range f.take() {
		methods = append(methods, r.Method)
	}
	if strings.Join(methods, " ") != "PATCH PATCH GET PATCH GET PATCH" {
		t.Errorf("requests: %v, want the taint read and written twice", methods)
	}
	if len(f.taints) != 2 || f.taints[1].Effect != "NoSchedule" {
		t.Errorf("taints: %v", f.taints)
	}
}

func TestPublishReportsAPIErrors(t *testing.T) {
	f, c, _ := newFake(t)
	f.fail = http.StatusForbidden
	err := (&Publisher{API: c, Node: "n1"}).Publish(context.Background(), Status{Reason: ReasonContained}, time.Now())
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != 403 || !strings.Contains(err.Error(), "cannot patch resource") {
		t.Errorf("error = %v", err)
	}
}

func TestNewClientErrors(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := NewClient("", "", "", ""); err == nil || !strings.Contains(err.Error(), "not in a pod") {
		t.Errorf("outside a cluster: %v", err)
	}
	if _, err := NewClient("http://10.0.0.1", "", "", ""); err == nil || !strings.Contains(err.Error(), "https") {
		t.Errorf("plain http: %v", err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "t"), []byte("x"), 0o600)
	os.WriteFile(filepath.Join(dir, "ca"), []byte("not pem"), 0o600)
	if _, err := NewClient("https://10.0.0.1", filepath.Join(dir, "t"), filepath.Join(dir, "ca"), ""); err == nil || !strings.Contains(err.Error(), "PEM") {
		t.Errorf("bad CA: %v", err)
	}
	if _, err := NewClient("https://10.0.0.1", filepath.Join(dir, "missing"), filepath.Join(dir, "ca"), ""); err == nil {
		t.Error("missing token accepted")
	}
}

// fakeNodeAPI records what the Signal publishes.
type fakeNodeAPI struct {
	mu       sync.Mutex
	statuses []string // condition status of each status patch
	labels   []any
}

func (f *fakeNodeAPI) GetNode(context.Context, string) (Node, error) { return Node{}, nil }
func (f *fakeNodeAPI) PatchNode(_ context.Context, _, _ string, body []byte) error {
	var b struct {
		Metadata struct{ Labels map[string]any }
	}
	json.Unmarshal(body, &b)
	f.mu.Lock()
	f.labels = append(f.labels, b.Metadata.Labels[Label])
	f.mu.Unlock()
	return nil
}
func (f *fakeNodeAPI) PatchNodeStatus(_ context.Context, _, _ string, body []byte) error {
	var b struct {
		Status struct{ Conditions []map[string]any }
	}
	json.Unmarshal(body, &b)
	f.mu.Lock()
	f.statuses = append(f.statuses, b.Status.Conditions[0]["status"].(string))
	f.mu.Unlock()
	return nil
}

// states plays back agent States, one per call.
type states struct {
	mu sync.Mutex
	i  int
}

func (s *states) Latest() (api.State, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.i++
	return interval(s.i, true, map[string]float64{"polluter": 1.0 / 16}), true
}

// Run flags the node once the tracker does, exports the gauge, and marks the
// node Unknown with the label removed when the agent stops.
func TestSignalRun(t *testing.T) {
	api := &fakeNodeAPI{}
	sig := &Signal{Tracker: NewTracker(Settings{After: 20 * time.Second, ClearAfter: 20 * time.Second}),
		Publisher: &Publisher{API: api, Node: "n1"}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(sig)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sig.Run(ctx, &states{}, time.Millisecond); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for sig.Tracker.Status().Uncontained == false && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // let the flag be published
	if v := gauge(t, reg); v != 1 {
		t.Errorf("crosstalk_uncontained_polluter = %v while flagged", v)
	}
	cancel()
	<-done
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.statuses) < 3 || api.statuses[0] != "False" || api.statuses[1] != "True" || api.statuses[len(api.statuses)-1] != "Unknown" {
		t.Errorf("condition statuses published: %v, want False (start), True (flagged), …, Unknown (stopped)", api.statuses)
	}
	if api.labels[1] != "true" || api.labels[len(api.labels)-1] != nil {
		t.Errorf("labels published: %v", api.labels)
	}
}

// gauge reads crosstalk_uncontained_polluter from reg.
func gauge(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "crosstalk_uncontained_polluter" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("crosstalk_uncontained_polluter not exported")
	return 0
}
