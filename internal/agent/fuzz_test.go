package agent

import (
	"math"
	"strings"
	"testing"
)

// The configuration decoder never panics, and what it accepts is within
// its documented bounds: finite numbers, a usable listen address, a probe
// the host can afford.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("interval: 1s\nlisten: 127.0.0.1:9477\n"))
	f.Add([]byte("judge:\n  ratio: .nan\n"))
	f.Add([]byte("probe:\n  llc_bytes: 900000000000000\n  chunks: 2000000000\n"))
	f.Add([]byte("max_throttled: 0\n"))
	f.Add([]byte("throttle:\n  hold: -1s\n  steps: 16\n"))
	f.Add([]byte("state_dir: /tmp/x\ntenants:\n  globs: [\"/a/*\"]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b, "fuzz.yaml")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		th := c.Thresholds()
		for _, v := range []float64{th.Ratio, th.Strong, th.Tolerance, c.CPUWait.Ratio, c.CPUWait.Strong} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("accepted a non-finite threshold: %+v", th)
			}
		}
		if c.Probe.LLCBytes > 256<<20 || c.Probe.Chunks > 64 || c.MaxThrottled < 1 || c.Judge.Window < 2 {
			t.Fatalf("accepted out-of-bounds values: probe %+v, max_throttled %d, window %d", c.Probe, c.MaxThrottled, c.Judge.Window)
		}
		if err := checkListen(c.Listen); err != nil {
			t.Fatalf("accepted listen %q: %v", c.Listen, err)
		}
	})
}

// StateDirOf reads one key from anything without panicking.
func FuzzStateDirOf(f *testing.F) {
	f.Add([]byte("state_dir: /var/lib/crosstalk\nbogus: 1\n"))
	f.Add([]byte("state_dir: [1, 2]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if dir, ok := StateDirOf(b); ok && dir == "" {
			t.Fatal("ok with an empty state_dir")
		}
	})
}
