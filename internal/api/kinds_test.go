package api

import "testing"

func TestPowerSocketPolicy(t *testing.T) {
	for socket, want := range map[int]Policy{0: "power:0", 3: "power:3"} {
		if got := PowerSocketPolicy(socket); got != want {
			t.Errorf("PowerSocketPolicy(%d) = %q, want %q", socket, got, want)
		}
	}
}
