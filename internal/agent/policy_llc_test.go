package agent

import (
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// A tenant's share of the cache follows the CPU it may use: all its CPUs
// in the domain, or, while its quota holds it back, the part it used.
func TestEntitledCPUs(t *testing.T) {
	on4 := sense.Tenant{ID: "t", CPUs: cpuset.Of(0, 1, 2, 3)}
	for _, tc := range []struct {
		name     string
		s        sample
		inDomain int
		want     float64
	}{
		{"free", sample{t: on4, usage: 3.5}, 4, 4},
		{"free, idle", sample{t: on4, usage: 0}, 4, 4},
		{"held on the deep floor", sample{t: on4, usage: 4.0 / 128, thrRatio: 0.99, heldBack: true}, 4, 4.0 / 128},
		{"held, half its CPUs in the domain", sample{t: on4, usage: 1, thrRatio: 0.5, heldBack: true}, 2, 0.5},
		{"held, using more than its CPUs there", sample{t: on4, usage: 4, thrRatio: 0.1, heldBack: true}, 2, 2},
		{"no CPUs known", sample{t: sense.Tenant{ID: "t"}, usage: 1, thrRatio: 0.5, heldBack: true}, 0, 0},
	} {
		if got := entitledCPUs(tc.s, tc.inDomain); got != tc.want {
			t.Errorf("%s: entitledCPUs = %v, want %v", tc.name, got, tc.want)
		}
	}
}
