package explain

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/act"
	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/judge"
)

var update = flag.Bool("update", false, "rewrite the fixture journal and the golden files")

var t0 = time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func quota(q float64) *float64 { return &q }

const (
	noisyID = "/machine.slice/machine-qemu\\x2d1\\x2dvm\\x2dnoisy.scope"
	webID   = "/kubepods.slice/kubepods-pod1234.slice"
	dbID    = "/system.slice/docker-0a1b2c3d.scope"
)

// trial is a judge.Trial as the proof leaves it: the drop is the freed
// level over the capped one, in log-ratio.
func trial(cappedFirst bool, capped, freed []float64, outcome string, evidence float64) judge.Trial {
	lv := func(rs []float64) float64 {
		var s float64
		for _, r := range rs {
			s += math.Log(r)
		}
		return s / float64(len(rs))
	}
	drop := lv(freed) - lv(capped)
	return judge.Trial{CappedFirst: cappedFirst, Capped: capped, Freed: freed, Drop: drop, Score: min(1, drop/0.8), Outcome: outcome, Evidence: evidence}
}

// fixtureEvents is a run of the agent as it journals one: a start-up
// survey, a polluter detected, proved, throttled, tightened, relaxed and
// released when it stopped; a CPU-wait suspect proved innocent; a bus-lock
// clamp through clock modulation and a failed write; the stop.
func fixtureEvents() []act.Event {
	noisy := judge.Suspect{ID: noisyID, Name: "vm-noisy", Score: 0.91, Reasons: []string{"busy 1.95 CPU", "its usage follows the contention"}}
	web := judge.Suspect{ID: webID, Name: "shop/web", Score: 0.22, Reasons: []string{"busy 0.40 CPU"}}
	evs := []act.Event{
		{Time: at(0), Kind: "start", Detail: "interval 1s, dry-run false"},
		{Time: at(1000), Kind: "restore", Detail: "restored 0 tenant(s) left throttled by a previous run (err: <nil>)"},
		{Time: at(2000), Kind: "proof", Policy: "probe", Lever: "cpu_quota", Tenant: noisyID, Name: "vm-noisy", Quota: quota(0.002), Detail: "start-up survey: capped for a moment to read the probes' quiet level"},
		{Time: at(2000), Kind: "proof", Policy: "probe", Lever: "cpu_quota", Tenant: webID, Name: "shop/web", Quota: quota(0.001), Detail: "start-up survey: capped for a moment to read the probes' quiet level"},
		{Time: at(2025), Kind: "proof-free", Policy: "probe", Lever: "cpu_quota", Tenant: noisyID, Name: "vm-noisy", Quota: quota(0), Detail: "start-up survey done"},
		{Time: at(2025), Kind: "proof-free", Policy: "probe", Lever: "cpu_quota", Tenant: webID, Name: "shop/web", Quota: quota(0), Detail: "start-up survey done"},
	}
	reason := "contention 2.40× on L3 0 (dram probe on CPU 1); suspect score 0.91: busy 1.95 CPU; its usage follows the contention"
	evs = append(evs,
		act.Event{Time: at(10000), Kind: "detection", Tenant: noisyID, Name: "vm-noisy", Detail: reason,
			Evidence: agent.DetectionEvidence{Ratio: 2.4, Suspects: []judge.Suspect{noisy, web}}},
		act.Event{Time: at(10000), Kind: "proof", Policy: "probe", Lever: "cpu_quota", Tenant: noisyID, Name: "vm-noisy", Quota: quota(0),
			Detail: "proving it, 8 randomized capped/freed trials at most: " + reason},
	)
	// Four trials of two 250 ms slots, each capped or freed first; a
	// record is journalled where the cap state changes, and the last slot
	// ends capped, as a conviction leaves it.
	capped, ms := false, 10000
	for _, capFirst := range []bool{true, false, true, false} {
		for _, c := range []bool{capFirst, !capFirst} {
			switch {
			case c && !capped:
				evs = append(evs, act.Event{Time: at(ms), Kind: "proof", Policy: "probe", Lever: "cpu_quota", Tenant: noisyID, Name: "vm-noisy", Quota: quota(0.002), Detail: "proof: capped for a trial"})
			case !c && capped:
				evs = append(evs, act.Event{Time: at(ms), Kind: "proof-free", Policy: "probe", Lever: "cpu_quota", Tenant: noisyID, Name: "vm-noisy", Quota: quota(0), Detail: "proof: freed for a trial"})
			}
			capped = c
			ms += 250
		}
	}
	trials := []judge.Trial{
		trial(true, []float64{1.04, 1.06}, []float64{2.38, 2.45}, judge.TrialPass, 1.9),
		trial(false, []float64{1.10, 1.02}, []float64{2.50, 2.41}, judge.TrialPass, 3.6),
		trial(true, []float64{1.70, 1.62}, []float64{2.21, 2.30}, judge.TrialPartial, 4.4),
		trial(false, []float64{1.03, 1.05}, []float64{2.60, 2.44}, judge.TrialPass, 21.7),
	}
	evs = append(evs,
		act.Event{Time: at(ms), Kind: "proof", Tenant: noisyID, Name: "vm-noisy", Detail: "polluter: evidence 21.7 reached 20 (3 passed, 1 partial of 4 trials)",
			Evidence: agent.ProofEvidence{Before: 2.4, CPU: 1, Kind: "dram", Trials: trials, FalseConvictionBound: 20}},
		act.Event{Time: at(ms), Kind: "throttle", Policy: "probe", Lever: "cpu_quota", Tenant: noisyID, Name: "vm-noisy", Quota: quota(1),
			Detail: "proven polluter: evidence 21.7 reached 20 (3 passed, 1 partial of 4 trials); " + reason},
		act.Event{Time: at(14000), Kind: "tighten", Policy: "probe", Lever: "cpu_quota", Tenant: noisyID, Name: "vm-noisy", Quota: quota(0.5), Detail: "contention 1.60×"},
		act.Event{Time: at(20000), Kind: "relax", Policy: "probe", Lever: "cpu_quota", Tenant: noisyID, Name: "vm-noisy", Quota: quota(1), Detail: "contention 1.05×"},
		act.Event{Time: at(30000), Kind: "release", Policy: "probe", Lever: "cpu_quota", Tenant: noisyID, Name: "vm-noisy", Quota: quota(0), Detail: "it stopped: 0.01 CPU used of 1.00 allowed, never held back by it"},
	)
	wreason := "CPU wait: shop/db's work takes 1.8× its usual time (stretch 1.80, quiet 1.00); suspect score 0.22: busy 0.40 CPU"
	evs = append(evs,
		act.Event{Time: at(40000), Kind: "detection", Tenant: webID, Name: "shop/web", Detail: wreason,
			Evidence: agent.DetectionEvidence{CPUWaitRatio: 1.8, Victims: []judge.WaitRating{{ID: dbID, Stretch: 1.8, Baseline: 1, Ratio: 1.8, Contended: true}}, Suspects: []judge.Suspect{web}}},
		act.Event{Time: at(40000), Kind: "proof", Policy: "probe", Lever: "cpu_quota", Tenant: webID, Name: "shop/web", Quota: quota(0),
			Detail: "proving it, 8 randomized capped/freed trials at most: " + wreason},
		act.Event{Time: at(40500), Kind: "proof", Policy: "probe", Lever: "cpu_quota", Tenant: webID, Name: "shop/web", Quota: quota(0.001), Detail: "proof: capped for a trial"},
		act.Event{Time: at(41000), Kind: "proof", Tenant: webID, Name: "shop/web", Detail: "innocent: futile: the cap could not lower the wait enough in the trials left",
			Evidence: agent.ProofEvidence{Before: 1.8, CPU: 0, Signal: agent.SignalCPUWait, FalseConvictionBound: 20,
				Trials: []judge.Trial{trial(false, []float64{1.79, 1.82}, []float64{1.80, 1.78}, judge.TrialFail, 0.5)}}},
		act.Event{Time: at(41000), Kind: "proof-free", Policy: "probe", Lever: "cpu_quota", Tenant: webID, Name: "shop/web", Quota: quota(0), Detail: "innocent: futile: the cap could not lower the wait enough in the trials left"},
		act.Event{Time: at(41000), Kind: "release", Policy: "probe", Lever: "cpu_quota", Tenant: webID, Name: "shop/web", Quota: quota(0), Detail: "innocent: futile: the cap could not lower the wait enough in the trials left"},
		act.Event{Time: at(50000), Kind: "throttle", Policy: "buslocks", Lever: "clock_modulation", Tenant: dbID, Name: "shop/db", Quota: quota(0), Detail: "41234/s over its share 10000/s (2 dirty tenants, budget 20000/s)"},
		act.Event{Time: at(51000), Kind: "error", Policy: "buslocks", Tenant: dbID, Name: "shop/db", Detail: "release failed: write /dev/cpu/3/msr: input/output error"},
		act.Event{Time: at(60000), Kind: "stop"},
	)
	return evs
}

// writeJournal writes events with the agent's journal writer.
func writeJournal(t *testing.T, path string, evs []act.Event) {
	t.Helper()
	j, err := act.OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if err := j.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
}

// fixture writes the fixture journal in a fresh directory.
func fixture(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "journal.jsonl")
	writeJournal(t, p, fixtureEvents())
	return p
}

// The journal under testdata (read by the README's example) is what the
// writer writes for the fixture's events.
func TestFixtureJournalIsTheWritersOutput(t *testing.T) {
	got, err := os.ReadFile(fixture(t))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "journal.jsonl", got)
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it); got:\n%s", name, got)
	}
}

func TestGoldenText(t *testing.T) {
	path := fixture(t)
	for _, c := range []struct {
		name string
		opt  Options
	}{
		{"all.txt", Options{}},
		{"noisy-all-slots.txt", Options{Tenant: "vm-noisy", All: true}},
		{"web-since.txt", Options{Tenant: webID, Since: at(40500)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := Explain(path, c.opt)
			if err != nil {
				t.Fatal(err)
			}
			r.Files = []string{"journal.jsonl"} // the temp dir changes
			var b bytes.Buffer
			if err := Render(&b, r); err != nil {
				t.Fatal(err)
			}
			golden(t, c.name, b.Bytes())
		})
	}
}

// The proof's slot records fold into its verdict: counted, with the time
// capped, and listed only with All.
func TestProofFoldsItsSlots(t *testing.T) {
	path := fixture(t)
	count := func(r *Report, step string) int {
		n := 0
		for _, e := range r.Entries {
			if e.Step == step {
				n++
			}
		}
		return n
	}
	r, err := Explain(path, Options{Tenant: "vm-noisy"})
	if err != nil {
		t.Fatal(err)
	}
	if n := count(r, StepSlot); n != 0 {
		t.Errorf("%d slot entries without All", n)
	}
	i := slices.IndexFunc(r.Entries, func(e Entry) bool { return e.Step == StepVerdict })
	if i < 0 {
		t.Fatalf("no verdict in %+v", r.Entries)
	}
	v := r.Entries[i]
	p := v.Proof
	if p.Verdict != judge.ProofGuilty || p.Trials != 4 || p.Passed != 3 || p.Partial != 1 || p.Failed+p.Quiet+p.Void != 0 || p.FinalEvidence != 21.7 {
		t.Errorf("proof = %+v", p)
	}
	if p.Started == nil || !p.Started.Equal(at(10000)) {
		t.Errorf("started %v, want %v", p.Started, at(10000))
	}
	// Caps of 250, 500 and 250 ms; the last is on until the verdict.
	if v.Slots == nil || v.Slots.Caps != 3 || math.Abs(v.Slots.CappedSeconds-1.0) > 1e-9 {
		t.Errorf("slots = %+v, want 3 caps, 1 s", v.Slots)
	}
	all, err := Explain(path, Options{Tenant: "vm-noisy", All: true})
	if err != nil {
		t.Fatal(err)
	}
	// The proof's five slot records and the survey's release (its cap is
	// the survey entry).
	if n := count(all, StepSlot); n != 5+1 {
		t.Errorf("%d slot entries with All, want 6", n)
	}
	if n := count(all, StepSurvey); n != 1 {
		t.Errorf("%d survey entries, want 1", n)
	}
}

func TestJSONShape(t *testing.T) {
	r, err := Explain(fixture(t), Options{Tenant: "vm-noisy", Since: at(10000)})
	if err != nil {
		t.Fatal(err)
	}
	r.Files = []string{"journal.jsonl"}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "noisy.json", append(b, '\n'))

	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if got, want := slices.Sorted(maps.Keys(doc)), []string{"entries", "files", "since", "skipped_lines", "tenants"}; !slices.Equal(got, want) {
		t.Errorf("top-level keys %v, want %v", got, want)
	}
	entries := doc["entries"].([]any)
	kinds := map[string]bool{}
	for _, e := range entries {
		m := e.(map[string]any)
		for _, k := range []string{"time", "kind", "text"} {
			if _, ok := m[k]; !ok {
				t.Errorf("entry without %q: %v", k, m)
			}
		}
		kinds[m["kind"].(string)] = true
		if m["step"] == StepVerdict {
			p := m["proof"].(map[string]any)
			if got, want := slices.Sorted(maps.Keys(p)), []string{"evidence", "failed", "final_evidence", "partial", "passed", "quiet", "started", "trials", "verdict", "void", "why"}; !slices.Equal(got, want) {
				t.Errorf("proof keys %v, want %v", got, want)
			}
			if n := len(p["evidence"].(map[string]any)["trials"].([]any)); n != 4 {
				t.Errorf("%d trials in the evidence, want 4", n)
			}
		}
	}
	for _, k := range []string{"detection", "proof", "throttle", "tighten", "relax", "release", "stop"} {
		if !kinds[k] {
			t.Errorf("no %s entry in %v", k, kinds)
		}
	}
}

func TestSince(t *testing.T) {
	path := fixture(t)
	r, err := Explain(path, Options{Since: at(30000)})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range r.Entries {
		if e.Time.Before(at(30000)) {
			t.Errorf("entry before --since: %s %s", e.Time, e.Text)
		}
	}
	if len(r.Entries) == 0 || r.Entries[0].Kind != "release" {
		t.Errorf("first entry since 30 s: %+v, want vm-noisy's release", r.Entries)
	}
	// A proof begun before Since still tells its verdict, and when it began.
	r, err = Explain(path, Options{Since: at(10500)})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(r.Entries, func(e Entry) bool { return e.Step == StepVerdict })
	if i < 0 || r.Entries[i].Proof.Started == nil {
		t.Errorf("verdict of a proof begun before --since: %+v", r.Entries)
	}

	now := t0.Add(time.Hour)
	for _, c := range []struct {
		in   string
		want time.Time
		err  string
	}{
		{"90m", now.Add(-90 * time.Minute), ""},
		{"2025-03-01T10:00:30Z", at(30000), ""},
		{"2025-03-01T11:00:30+01:00", at(30000), ""},
		{"-5m", time.Time{}, "negative"},
		{"yesterday", time.Time{}, "RFC 3339"},
	} {
		got, err := ParseSince(c.in, now)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseSince(%q) = %v, want an error with %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || !got.Equal(c.want) {
			t.Errorf("ParseSince(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

func TestTenantMatching(t *testing.T) {
	path := fixture(t)
	for _, c := range []struct {
		q, want string
	}{
		{noisyID, noisyID},
		{"vm-noisy", noisyID},
		{"VM-Noisy", noisyID},
		{"/sys/fs/cgroup" + noisyID, noisyID},
		{"/sys/fs/cgroup/unified" + webID + "/", webID},
		{"docker-0a1b2c3d.scope", dbID},
		{"shop/db", dbID},
	} {
		r, err := Explain(path, Options{Tenant: c.q})
		if err != nil {
			t.Errorf("%q: %v", c.q, err)
			continue
		}
		if len(r.Tenants) != 1 || r.Tenants[0].ID != c.want {
			t.Errorf("%q matched %+v, want %s", c.q, r.Tenants, c.want)
		}
		for _, e := range r.Entries {
			if e.Tenant != "" && e.Tenant != c.want {
				t.Errorf("%q: an entry of %s: %s", c.q, e.Tenant, e.Text)
			}
		}
	}

	_, err := Explain(path, Options{Tenant: "shop/wbe"})
	var unknown *UnknownTenantError
	if !errors.As(err, &unknown) {
		t.Fatalf("unknown tenant: %v", err)
	}
	var names []string
	for _, k := range unknown.Known {
		names = append(names, k.Name)
	}
	if want := []string{"shop/web", "shop/db", "vm-noisy"}; !slices.Equal(names, want) {
		t.Errorf("known tenants %v, want closest first %v", names, want)
	}
	if !strings.Contains(err.Error(), `no tenant "shop/wbe"`) || !strings.Contains(err.Error(), "shop/web ("+webID+")") {
		t.Errorf("message: %v", err)
	}
}

func TestJournalErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Explain(filepath.Join(dir, "journal.jsonl"), Options{})
	if !errors.Is(err, ErrNoJournal) || !strings.Contains(err.Error(), "--state-dir") {
		t.Errorf("missing journal: %v", err)
	}

	// A torn line, a line that is not JSON and one that is no event are
	// skipped and counted; the rest is told.
	p := fixture(t)
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"time":"2025-03-01T10:01:05Z","kind":"thr` + "\n" + "garbage\n" + `{"hello":1}` + "\n")
	f.Close()
	writeJournal(t, p, []act.Event{{Time: at(70000), Kind: "start", Detail: "interval 1s, dry-run true"}})
	r, err := Explain(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Skipped != 3 {
		t.Errorf("skipped %d lines, want 3", r.Skipped)
	}
	if last := r.Entries[len(r.Entries)-1]; last.Kind != "start" || !last.Time.Equal(at(70000)) {
		t.Errorf("the line after the bad ones: %+v", last)
	}
	var b bytes.Buffer
	Render(&b, r)
	if !strings.Contains(b.String(), "3 unreadable line(s) skipped") {
		t.Errorf("the count is not told:\n%s", b.String())
	}

	// The part rotated away is read first.
	rot := filepath.Join(t.TempDir(), "journal.jsonl")
	writeJournal(t, rot+".1", []act.Event{{Time: at(0), Kind: "start", Detail: "older"}})
	writeJournal(t, rot, []act.Event{{Time: at(5000), Kind: "stop"}})
	r, err = Explain(rot, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Entries) != 2 || r.Entries[0].Reason != "older" || len(r.Files) != 2 || r.Files[0] != rot+".1" {
		t.Errorf("rotated journal: files %v, entries %+v", r.Files, r.Entries)
	}
}

// A long proof's line (hundreds of readings) is read whole.
func TestLongLines(t *testing.T) {
	var trials []judge.Trial
	for range 1000 {
		trials = append(trials, trial(true, []float64{1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5}, []float64{2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5}, judge.TrialPass, 2))
	}
	p := filepath.Join(t.TempDir(), "journal.jsonl")
	writeJournal(t, p, []act.Event{{Time: at(0), Kind: "proof", Tenant: noisyID, Name: "vm-noisy", Detail: "polluter: yes", Evidence: agent.ProofEvidence{Trials: trials}}})
	if st, _ := os.Stat(p); st.Size() < 128<<10 {
		t.Fatalf("line only %d bytes", st.Size())
	}
	r, err := Explain(p, Options{})
	if err != nil || r.Skipped != 0 || len(r.Entries) != 1 || r.Entries[0].Proof.Trials != 1000 {
		t.Errorf("long line: %v, %+v", err, r)
	}
}

// told writes evs as a journal and returns how explain tells it, for opt.
func told(t *testing.T, evs []act.Event, opt Options) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	writeJournal(t, path, evs)
	r, err := Explain(path, opt)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := Render(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A configuration reload is told with what it changed.
func TestReload(t *testing.T) {
	got := told(t, []act.Event{{Time: at(0), Kind: "reload", Detail: "applied: interval; need a restart: none; released: none"}}, Options{})
	if !strings.Contains(got, "configuration reloaded: applied: interval") {
		t.Errorf("reload told as:\n%s", got)
	}
}

// The CPI start-up survey's finding is told as such, for the tenant capped.
func TestCPISurvey(t *testing.T) {
	got := told(t, []act.Event{{Time: at(0), Kind: "survey", Tenant: "/lab/streamer", Name: "streamer",
		Detail: "start-up CPI survey: its cap lowered its neighbours' CPI, whose usual starts there: victim 2.10× (0.80 cycles an instruction with it capped, 1.68 free)"}}, Options{})
	if !strings.Contains(got, "streamer surveyed at start: its cap lowered its neighbours' CPI, whose usual starts there: victim 2.10×") {
		t.Errorf("survey told as:\n%s", got)
	}
}

// A proof read on the victims' CPI says so, as one read on their CPU wait
// or on a probe does.
func TestCPIProofSaysWhatItRead(t *testing.T) {
	reason := "CPI: shop/db runs at 1.43 cycles an instruction, 1.5× its usual 0.96; suspect score 3.68: LLC misses 96.5M/s, 86% of the host's"
	evs := []act.Event{
		{Time: at(0), Kind: "start", Detail: "agent started"},
		{Time: at(1000), Kind: "detection", Tenant: webID, Name: "shop/web", Detail: reason,
			Evidence: agent.DetectionEvidence{CPIRatio: 1.5, CPIVictims: []judge.CPIRating{{ID: dbID, CPI: 1.43, Baseline: 0.96, Ratio: 1.5, Contended: true}}}},
		{Time: at(1000), Kind: "proof", Policy: "probe", Lever: "cpu_quota", Tenant: webID, Name: "shop/web", Quota: quota(0),
			Detail: "proving it, 24 randomized capped/freed trials at most: " + reason},
		{Time: at(1400), Kind: "proof", Tenant: webID, Name: "shop/web", Detail: "polluter: the victims' CPI read 1.47× higher with it free than capped",
			Evidence: agent.ProofEvidence{Before: 1.5, Signal: agent.SignalCPI, FalseConvictionBound: 100,
				Trials: []judge.Trial{trial(true, []float64{1.01, 1.02}, []float64{1.49, 1.48}, judge.TrialPass, 1.8)}}},
	}
	got := told(t, evs, Options{Tenant: "shop/web"})
	for _, want := range []string{"read the victims' CPI, 1.50× before", "CPI: shop/db runs at 1.43 cycles an instruction"} {
		if !strings.Contains(got, want) {
			t.Errorf("explain does not say %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "probe on CPU") {
		t.Errorf("a CPI proof told as a probe's:\n%s", got)
	}
}

// A proof that continued an earlier one's evidence says where it began:
// its evidence is the chain's, and the bound holds for the chain.
func TestProofSaysWhereItsEvidenceBegan(t *testing.T) {
	proof := func(carry float64) []act.Event {
		return []act.Event{
			{Time: at(0), Kind: "start", Detail: "agent started"},
			{Time: at(1000), Kind: "proof", Tenant: noisyID, Name: "vm-noisy", Detail: "polluter: the probe read 2.1× higher with it free than capped",
				Evidence: agent.ProofEvidence{Before: 5, CPU: 1, Kind: "dram", FalseConvictionBound: 100, Carry: carry,
					Trials: []judge.Trial{trial(true, []float64{1.01, 1.02}, []float64{4.9, 5.1}, judge.TrialPass, 5.8*carry)}}},
		}
	}
	if got := told(t, proof(32), Options{}); !strings.Contains(got, "evidence 186 (begun at 32, where its last proof left it), conviction at 100") {
		t.Errorf("a continued proof does not say where it began:\n%s", got)
	}
	for _, carry := range []float64{1, 0} { // a fresh proof; a record from before carries were kept
		if got := told(t, proof(carry), Options{}); strings.Contains(got, "begun at") || !strings.Contains(got, ", conviction at 100") {
			t.Errorf("carry %g: %s", carry, got)
		}
	}
}
