package act

import (
	"encoding/json"
	"testing"
)

// The state decoder meets whatever a crash, a full disk or a person left
// in state.json: it never panics, and what it accepts holds only clean
// cgroup paths keyed by themselves and survives a round trip.
func FuzzDecodeState(f *testing.F) {
	f.Add([]byte(`{"version":1,"entries":{"/a":{"cgroup":"/a","original_quota_us":-1,"original_period_us":100000,"applied_quota_us":-1,"applied_period_us":100000,"next_quota_us":1000,"next_period_us":16000}}}`))
	f.Add([]byte(`{"entries":{"/../x":{"cgroup":"/../x"}}}`))
	f.Add([]byte(`{"records":{"unowned_cpu_quota":{"/a":{"quota_us":3000,"period_us":16000}}}}`))
	f.Add([]byte(`{not json`))
	f.Fuzz(func(t *testing.T, b []byte) {
		doc, err := decodeState(b)
		if err != nil {
			return
		}
		for k, e := range doc.Entries {
			if k != e.Cgroup || !ValidCgroupPath(k) {
				t.Fatalf("accepted entry %q %+v", k, e)
			}
		}
		out, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeState(out); err != nil {
			t.Fatalf("round trip: %v", err)
		}
	})
}
