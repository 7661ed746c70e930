package agent

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/crosstalk-project/crosstalk/internal/act"
)

// Values an operator's configuration once carried that were accepted, or
// crashed the agent later: each is refused with its key, value and range.
func TestConfigRefusesHostileValues(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want []string
	}{
		{"judge:\n  ratio: .nan\n", []string{"judge.ratio", "NaN", "not a finite number"}},
		{"cpu_wait:\n  ratio: .inf\n", []string{"cpu_wait.ratio", "+Inf"}},
		{"probe:\n  llc_bytes: 900000000000000\n", []string{"probe.llc_bytes", "900000000000000", "65536-268435456"}},
		{"probe:\n  chunks: 2000000000\n", []string{"probe.chunks", "2000000000", "1-64"}},
		{"probe:\n  proof_chunks: 65\n", []string{"probe.proof_chunks", "65", "1-64"}},
		{"probe:\n  cpus_per_domain: -1\n", []string{"probe.cpus_per_domain", "-1", "1-256"}},
		{"probe:\n  spread: 17\n", []string{"probe.spread", "17", "1-16"}},
		{"judge:\n  window: -4\n", []string{"judge.window", "-4", "2-1024"}},
		{"throttle:\n  hold: -1s\n", []string{"throttle.hold", "-1s", "negative"}},
		{"max_throttled: 0\n", []string{"max_throttled: 0", "1-1000", "dry_run"}},
		{"max_throttled: -3\n", []string{"max_throttled", "-3", "1-1000"}},
		{"listen: 127.0.0.1\n", []string{"listen", "127.0.0.1", "HOST:PORT"}},
		{"listen: 127.0.0.1:99999\n", []string{"listen", "99999", "0-65535"}},
		{"listen: \"bad host!:9477\"\n", []string{"listen", "bad host!"}},
		{"perf:\n  fd_budget: 99999999999\n", []string{"perf.fd_budget", "99999999999"}},
		{"kubernetes:\n  clear_after: 10000h\n", []string{"kubernetes.clear_after", "10000h"}},
	} {
		_, err := ParseConfig([]byte(tc.yaml), "c.yaml")
		if err == nil {
			t.Errorf("%q accepted", tc.yaml)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q lacks %q", tc.yaml, err, w)
			}
		}
	}
	for _, ok := range []string{"", "max_throttled: 1\n", "listen: \"off\"\n", "listen: \":9477\"\n", "listen: \"[::1]:9477\"\n",
		"listen: node-1.example:9477\n", "probe:\n  llc_bytes: 1048576\n  chunks: 9\n"} {
		if _, err := ParseConfig([]byte(ok), "c.yaml"); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
}

func TestExposedListen(t *testing.T) {
	for listen, exposed := range map[string]bool{
		"127.0.0.1:9477": false, "[::1]:9477": false, "localhost:9477": false, "127.0.0.2:1": false, "off": false,
		"0.0.0.0:9477": true, ":9477": true, "[::]:9477": true, "10.0.0.5:9477": true, "node-1:9477": true,
	} {
		if _, got := ExposedListen(listen); got != exposed {
			t.Errorf("ExposedListen(%q) = %v, want %v", listen, got, exposed)
		}
	}
}

// A page on a rebinding name reaches 127.0.0.1 with its own name in the
// Host header: refused; localhost, addresses and the configured name pass.
func TestCheckHostRefusesRebindingNames(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, tc := range []struct {
		listen, host string
		want         int
	}{
		{"127.0.0.1:9477", "127.0.0.1:9477", 200},
		{"127.0.0.1:9477", "localhost:9477", 200},
		{"127.0.0.1:9477", "LOCALHOST.", 200},
		{"127.0.0.1:9477", "[::1]:9477", 200},
		{"0.0.0.0:9477", "10.1.2.3:9477", 200},
		{"node-1.example:9477", "node-1.example:9477", 200},
		{"127.0.0.1:9477", "attacker.example:9477", 403},
		{"127.0.0.1:9477", "localhost.attacker.example", 403},
		{"0.0.0.0:9477", "rebind.example", 403},
		{"127.0.0.1:9477", "", 403},
	} {
		r := httptest.NewRequest(http.MethodGet, "/api/state", nil)
		r.Host = tc.host
		w := httptest.NewRecorder()
		CheckHost(tc.listen, ok).ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("listen %s, Host %q: %d, want %d", tc.listen, tc.host, w.Code, tc.want)
		}
	}
}

// The safety gauge and counters follow the state file: an unowned throttle
// flagged, a corrupt state file moved aside, a save that failed.
func TestSafetyMetrics(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(StatePath(dir), []byte("{torn"), 0o600)
	j, _ := act.OpenJournal(JournalPath(dir))
	defer j.Close()
	s := NewSafety()
	st, err := openStateOrMoveAside(StatePath(dir), j, s, slog.New(slog.DiscardHandler), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s.attach(st)
	st.PutRecord(act.RecordUnownedQuota, "/a", act.UnownedQuota{QuotaUS: 3000, PeriodUS: 16000})
	st.SetSaveHook(func(saved bool) error {
		if !saved {
			return errors.New("disk full")
		}
		return nil
	})
	st.Put(act.Entry{Cgroup: "/b"})
	want := `
# HELP crosstalk_state_errors_total Errors of the agent's state file: corrupt (found at start and moved aside), save (a write that did not reach the disk).
# TYPE crosstalk_state_errors_total counter
crosstalk_state_errors_total{kind="corrupt"} 1
crosstalk_state_errors_total{kind="save"} 1
# HELP crosstalk_unowned_throttles Tenants at a quota shaped like crosstalk's (a throttle left behind) that no state covers: left alone; ` + "`crosstalk restore --adopt`" + ` lifts them.
# TYPE crosstalk_unowned_throttles gauge
crosstalk_unowned_throttles 1
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if s.MovedAside() == "" {
		t.Error("MovedAside empty")
	}
}
