package lab

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
)

func TestSlowdown(t *testing.T) {
	tests := []struct {
		solo, colo float64
		dir        string
		want       float64
		ok         bool
	}{
		{20, 160, "lower", 8, true},
		{1000, 250, "higher", 4, true},
		{1000, 2000, "higher", 0.5, true},
		{0, 5, "lower", 0, false},
		{5, 0, "higher", 0, false},
		{math.NaN(), 1, "lower", 0, false},
	}
	for _, tc := range tests {
		got, ok := Slowdown(tc.solo, tc.colo, tc.dir)
		if ok != tc.ok || (ok && math.Abs(got-tc.want) > 1e-9) {
			t.Errorf("Slowdown(%v, %v, %s) = %v %v", tc.solo, tc.colo, tc.dir, got, ok)
		}
	}
	if m, ok := median([]float64{3, 1, 2}); !ok || m != 2 {
		t.Error("median odd")
	}
	if m, _ := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Error("median even")
	}
	if _, ok := median(nil); ok {
		t.Error("median of nothing")
	}
}

// Alita's static baseline: the CPUs in use, split by each tenant's CPU count.
func TestStaticShares(t *testing.T) {
	ts := []PolicyTenant{
		{Name: "victim", CPUs: cpuset.Of(1)},
		{Name: "polluter", CPUs: cpuset.Of(0)},
		{Name: "bystander", CPUs: cpuset.Of(0)},
	}
	got := StaticShares(ts)
	for n, want := range map[string]float64{"victim": 2.0 / 3, "polluter": 2.0 / 3, "bystander": 2.0 / 3} {
		if math.Abs(got[n]-want) > 1e-9 {
			t.Errorf("%s share = %v, want %v", n, got[n], want)
		}
	}
	// Disjoint tenants keep their CPUs: nothing to cap.
	got = StaticShares([]PolicyTenant{{Name: "a", CPUs: cpuset.Of(0, 1)}, {Name: "b", CPUs: cpuset.Of(2, 3)}})
	if got["a"] != 2 || got["b"] != 2 {
		t.Errorf("disjoint shares = %v", got)
	}
}

func sampleResult() *Result {
	return &Result{
		Scenario: "buslock", Phase: 5, Repetitions: 1, Victim: "victim",
		Solo: map[string]Solo{
			"victim":   {Metric: "ns_per_access", Unit: "ns", Direction: "lower", Value: ptr(20), Values: []float64{20}},
			"polluter": {Metric: "locks_per_sec", Direction: "higher", Value: ptr(1e6), Values: []float64{1e6}},
		},
		Results: []PolicyResult{
			{Policy: "none", VictimSlowdown: ptr(8), Tenants: map[string]TenantResult{
				"victim":   {Role: RoleVictim, Metric: "ns_per_access", Value: ptr(160), Slowdown: ptr(8)},
				"polluter": {Role: RolePolluter, Metric: "locks_per_sec", Value: ptr(1e6), Slowdown: ptr(1)},
			}, Actions: []Action{}},
			{Policy: "crosstalk", VictimSlowdown: ptr(1.05), FirstActionSeconds: ptr(0.6), ReleaseSeconds: ptr(1.2), Tenants: map[string]TenantResult{
				"victim":   {Role: RoleVictim, Value: ptr(21), Slowdown: ptr(1.05)},
				"polluter": {Role: RolePolluter, Value: ptr(1e5), Slowdown: ptr(10), ThrottledSeconds: 4.2},
			}, Actions: []Action{{T: 0.6, Tenant: "polluter", Kind: "throttle", Quota: 0.1}}},
		},
	}
}

func TestWriteTextAndJSON(t *testing.T) {
	r := sampleResult()
	var buf bytes.Buffer
	if err := WriteText(&buf, r); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"scenario buslock", "none", "victim", "8.00×", "ns_per_access ↓", "4.2s", "throttled 0.60s", "released 1.20s", "actions (last repetition): 0.60s throttle polluter"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	// The JSON keys the issue fixes.
	b, _ := json.Marshal(r)
	var m map[string]any
	json.Unmarshal(b, &m)
	res := m["results"].([]any)[0].(map[string]any)
	if res["policy"] != "none" || res["victim_slowdown"] != 8.0 {
		t.Errorf("result json = %v", res)
	}
	ten := res["tenants"].(map[string]any)["victim"].(map[string]any)
	for _, k := range []string{"role", "slowdown", "throttled_seconds"} {
		if _, ok := ten[k]; !ok {
			t.Errorf("tenant json lacks %q", k)
		}
	}
	if m["scenario"] != "buslock" {
		t.Errorf("scenario = %v", m["scenario"])
	}
}

func TestReactionTimes(t *testing.T) {
	s, _ := Load("buslock-burst")
	out := phaseOut{
		events: []TenantEvent{{T: 1.0, Tenant: "polluter", Kind: "start"}, {T: 4.0, Tenant: "polluter", Kind: "stop"}},
		actions: []Action{
			{T: 0.5, Tenant: "polluter", Kind: "throttle"}, // before its start: ignored
			{T: 1.7, Tenant: "polluter", Kind: "throttle", Quota: 0.1},
			{T: 4.5, Tenant: "polluter", Kind: "release", Quota: 0.5},
			{T: 5.2, Tenant: "polluter", Kind: "release", Quota: 0},
		},
	}
	first, release := reactionTimes(s, out)
	if first == nil || math.Abs(*first-0.7) > 1e-9 || release == nil || math.Abs(*release-1.2) > 1e-9 {
		t.Errorf("first %v release %v", first, release)
	}
	// Where it said when its work began, the first throttle counts from there.
	onset := out
	onset.events = append([]TenantEvent{{T: 1.2, Tenant: "polluter", Kind: "onset"}}, out.events...)
	if first, _ := reactionTimes(s, onset); first == nil || math.Abs(*first-0.5) > 1e-9 {
		t.Errorf("first %v after an onset at 1.2s, want 0.5", first)
	}
	s2, _ := Load("buslock") // polluter runs to the end: no release time
	if _, rel := reactionTimes(s2, out); rel != nil {
		t.Errorf("release for a polluter that never stops early: %v", *rel)
	}
}
