package sense

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// uses parses "a:1 b:2.5" into tenants with their CPU use.
func uses(t *testing.T, s string) []TenantUse {
	t.Helper()
	var out []TenantUse
	for _, f := range strings.Fields(s) {
		id, u, _ := strings.Cut(f, ":")
		x, err := strconv.ParseFloat(u, 64)
		if err != nil {
			t.Fatalf("use %q: %v", f, err)
		}
		out = append(out, TenantUse{Tenant: Tenant{ID: id}, Usage: x})
	}
	return out
}

func TestMonitorOrder(t *testing.T) {
	type call struct {
		tenants string // "id:usage ..."
		unmon   string // IDs without a monitoring group now
		times   int    // calls like it (0: one)
		want    string // the order, IDs
	}
	// Calls 2 to monitorRerank keep the first ranking; the one after
	// re-ranks.
	const between = monitorRerank - 1
	for _, tc := range []struct {
		name  string
		calls []call
	}{
		{
			name:  "ranked by CPU use, ties by ID",
			calls: []call{{tenants: "c:1 a:1 b:3", want: "b a c"}},
		},
		{
			name: "between re-rankings the order stands, the gone dropped and newcomers last",
			calls: []call{
				{tenants: "a:1 b:3 c:2", want: "b c a"},
				{tenants: "a:5 c:2 d:9", times: between, want: "c a d"},
				// Smoothed: a 1 → 1.8, ×1.5 = 2.7; c 2 ×1.5 = 3; d new, 9.
				{tenants: "a:5 c:2 d:9", want: "d c a"},
			},
		},
		{
			name: "a monitored tenant keeps its place from one not half again as busy",
			calls: []call{
				{tenants: "a:1 b:1", want: "a b"},
				{tenants: "a:1 b:1", times: between, want: "a b"},
				// b smoothed 1 → 1.4, under a's 1 × 1.5.
				{tenants: "a:1 b:3", unmon: "b", want: "a b"},
			},
		},
		{
			name: "one half again as busy takes its place",
			calls: []call{
				{tenants: "a:1 b:1", want: "a b"},
				{tenants: "a:1 b:1", times: between, want: "a b"},
				// b smoothed 1 → 1.6, over a's 1 × 1.5.
				{tenants: "a:1 b:4", unmon: "b", want: "b a"},
			},
		},
		{
			name: "a tenant without an RMID has no place to keep",
			calls: []call{
				{tenants: "a:1 b:1", want: "a b"},
				{tenants: "a:1 b:1", times: between, want: "a b"},
				// b smoothed 1 → 1.08 ×1.5; a unmonitored, 1.
				{tenants: "a:1 b:1.4", unmon: "a", want: "b a"},
			},
		},
		{
			name: "a newcomer at a re-ranking is ranked by its use alone",
			calls: []call{
				{tenants: "a:2", want: "a"},
				{tenants: "a:2", times: between, want: "a"},
				{tenants: "a:2 n:2.9", want: "a n"},
				{tenants: "a:2 n:2.9", times: between, want: "a n"},
				// n smoothed 2.9 → 3.1 ×1.5 = 4.65 over a's 3.
				{tenants: "a:2 n:3.9", want: "n a"},
			},
		},
		{
			name: "a tenant that left is ranked anew when it returns",
			calls: []call{
				{tenants: "a:4 b:1", want: "a b"},
				{tenants: "b:1", times: between, want: "b"},
				{tenants: "b:1", want: "b"}, // re-ranked: a forgotten
				{tenants: "a:1 b:1", times: between, want: "b a"},
				// a new again at 1, b 1 ×1.5.
				{tenants: "a:1.4 b:1", want: "b a"},
			},
		},
		{
			name: "no tenants, then one",
			calls: []call{
				{want: ""},
				{tenants: "a:1", want: "a"},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o MonitorOrder
			n := 0
			for _, c := range tc.calls {
				var unmon []UnmonitoredTenant
				for _, id := range strings.Fields(c.unmon) {
					unmon = append(unmon, UnmonitoredTenant{ID: id, Reason: "no RMID"})
				}
				for range max(1, c.times) {
					n++
					var got []string
					for _, t := range o.Rank(uses(t, c.tenants), unmon) {
						got = append(got, t.ID)
					}
					if want := strings.Fields(c.want); !slices.Equal(got, want) {
						t.Fatalf("call %d (%s): %v, want %v", n, c.tenants, got, want)
					}
				}
			}
		})
	}
}
