// Package explain tells an agent's journal in plain sentences: why each
// tenant was suspected, how its proof went, and why it was throttled,
// tightened, relaxed and released, with the evidence. A proof's dozens of
// per-slot cap and release records are folded into the proof they belong
// to.
package explain

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/judge"
)

// Options choose what a report tells.
type Options struct {
	// Tenant is a tenant's ID, name or cgroup path; "" tells them all.
	Tenant string
	// Since drops what happened before it; zero keeps everything.
	Since time.Time
	// All keeps every proof slot's cap and release as an entry of its own.
	All bool
	// Verify, where set, scores each proof's recorded trials again under
	// these proof settings (see judge.Replay) and says whether they give
	// the recorded verdict.
	Verify *judge.ProofConfig
}

// Report is the journal told: entries in time order.
type Report struct {
	// Files are the journal files read, oldest first.
	Files []string `json:"files"`
	// Tenants are the tenants asked about (a name may be several cgroups);
	// empty for all.
	Tenants []Tenant   `json:"tenants,omitempty"`
	Since   *time.Time `json:"since,omitempty"`
	// Skipped counts the lines that were not events.
	Skipped int     `json:"skipped_lines"`
	Entries []Entry `json:"entries"`
	// Verified says the proofs were scored again (Options.Verify);
	// Checked and Unreproduced count those told and those whose readings
	// did not give their record.
	Verified     bool `json:"verified,omitempty"`
	Checked      int  `json:"checked_proofs,omitempty"`
	Unreproduced int  `json:"unreproduced_proofs,omitempty"`
}

// Tenant is a tenant as the journal names it.
type Tenant struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// Entry is one thing the agent did or saw, told.
type Entry struct {
	Time time.Time `json:"time"`
	// Kind is the journal's: start, stop, restore, unowned, error,
	// detection, proof, proof-free, throttle, tighten, relax, release,
	// isolate.
	Kind string `json:"kind"`
	// Step tells proof records apart: start, verdict, slot (a trial's cap
	// or release, with --all) or survey (a cap outside any proof).
	Step   string `json:"step,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	Name   string `json:"name,omitempty"`
	Policy string `json:"policy,omitempty"`
	Lever  string `json:"lever,omitempty"`
	// QuotaCPUs is the CPU quota after the event (0 = unlimited).
	QuotaCPUs *float64 `json:"quota_cpus,omitempty"`
	DryRun    bool     `json:"dry_run,omitempty"`
	// Reason is the agent's own words (the journal's detail).
	Reason string `json:"reason,omitempty"`
	// Text is the entry as a sentence.
	Text      string                   `json:"text"`
	Detection *agent.DetectionEvidence `json:"detection,omitempty"`
	Proof     *Proof                   `json:"proof,omitempty"`
	// Slots are the caps a proof or survey put on the tenant.
	Slots *Slots `json:"slots,omitempty"`
}

// Proof is a proof's verdict with its trials counted.
type Proof struct {
	Verdict string `json:"verdict"`
	Why     string `json:"why"`
	// Started is when the proof began, where the journal says.
	Started *time.Time `json:"started,omitempty"`
	Trials  int        `json:"trials"`
	Passed  int        `json:"passed"`
	Partial int        `json:"partial"`
	Failed  int        `json:"failed"`
	Quiet   int        `json:"quiet"`
	Void    int        `json:"void"`
	// FinalEvidence is the evidence after the last trial.
	FinalEvidence float64             `json:"final_evidence"`
	Evidence      agent.ProofEvidence `json:"evidence"`
	// Check is the proof scored again from its readings (Options.Verify).
	Check *Check `json:"check,omitempty"`
}

// Check is a proof's recorded trials scored again (judge.Replay).
type Check struct {
	// Reproduced: every trial scored as recorded, and the verdict is the
	// recorded one (or none, for a proof stopped before its readings
	// decided, recorded inconclusive).
	Reproduced bool `json:"reproduced"`
	// Verdict, Trials and Evidence are what the readings give ("" where
	// they reach no verdict).
	Verdict  string  `json:"verdict"`
	Trials   int     `json:"trials"`
	Evidence float64 `json:"evidence"`
	// Diverged is the first trial (from 1) scored otherwise than recorded;
	// 0 where none was.
	Diverged int `json:"diverged_trial,omitempty"`
}

// Slots counts the caps of a proof or survey.
type Slots struct {
	Caps          int     `json:"caps"`
	CappedSeconds float64 `json:"capped_seconds"`
}

// Step values.
const (
	StepStart   = "start"
	StepVerdict = "verdict"
	StepSlot    = "slot"
	StepSurvey  = "survey"
)

// kinds are the journal kinds explain tells in words of their own.
var kinds = []string{"start", "stop", "reload", "restore", "unowned", "error", "detection", "proof", "proof-free",
	"throttle", "tighten", "relax", "release", "isolate", "survey"}

// Knows says whether explain has words for a journal kind (others are told
// as "kind tenant: detail").
func Knows(kind string) bool { return slices.Contains(kinds, kind) }

// Explain reads the journal at path (and the part rotated from it) and
// tells it as opt asks.
func Explain(path string, opt Options) (*Report, error) {
	events, files, skipped, err := readJournal(path)
	if err != nil {
		return nil, err
	}
	r, err := build(events, opt)
	if err != nil {
		return nil, err
	}
	r.Files, r.Skipped = files, skipped
	return r, nil
}

// slotter folds one proof's (or survey's) per-slot records into its entry.
type slotter struct {
	entry    *Entry // the verdict, or the survey entry
	start    *time.Time
	survey   bool
	verdict  bool // the verdict was given: only the closing release may follow
	capped   bool
	cappedAt time.Time
	slots    Slots
	capTime  time.Duration
}

func (s *slotter) cap(at time.Time) {
	s.slots.Caps++
	s.capped, s.cappedAt = true, at
}

func (s *slotter) free(at time.Time) {
	if s.capped {
		s.capTime += at.Sub(s.cappedAt)
		s.capped = false
	}
}

// close books a cap still on at the end (a convicted polluter's proof cap
// gives way to its throttle).
func (s *slotter) close(at time.Time) {
	if s.capped && s.verdict {
		s.free(at)
	}
	s.slots.CappedSeconds = s.capTime.Seconds()
	if s.entry != nil {
		sl := s.slots
		s.entry.Slots = &sl
		if s.entry.Proof != nil {
			s.entry.Proof.Started = s.start
		}
	}
}

func build(events []event, opt Options) (*Report, error) {
	slices.SortStableFunc(events, func(a, b event) int { return a.Time.Compare(b.Time) })
	r := &Report{Entries: []Entry{}}
	want := map[string]bool{}
	if opt.Tenant != "" {
		ts, err := resolve(opt.Tenant, events)
		if err != nil {
			return nil, err
		}
		r.Tenants = ts
		for _, t := range ts {
			want[t.ID] = true
		}
	}
	if !opt.Since.IsZero() {
		s := opt.Since
		r.Since = &s
	}
	r.Verified = opt.Verify != nil

	var entries []*Entry
	open := map[string]*slotter{}
	verdictAt := map[*slotter]time.Time{}
	closeAll := func() {
		for id, s := range open {
			s.close(verdictAt[s])
			delete(open, id)
		}
	}
	for _, e := range events {
		if opt.Tenant != "" && e.Tenant != "" && !want[e.Tenant] {
			continue
		}
		en := &Entry{Time: e.Time, Kind: e.Kind, Tenant: e.Tenant, Name: e.Name, Policy: e.Policy, Lever: e.Lever,
			QuotaCPUs: e.Quota, DryRun: e.DryRun, Reason: e.Detail}
		switch {
		case e.Kind == "start" || e.Kind == "stop":
			// A start or stop ends whatever proof was on.
			closeAll()
		case isSlot(e):
			s := open[e.Tenant]
			capping := e.Kind == "proof"
			if s == nil || (s.verdict && capping) {
				if s != nil {
					s.close(verdictAt[s])
				}
				// A cap outside any proof: the start-up survey's.
				s = &slotter{survey: true, entry: en}
				en.Step = StepSurvey
				open[e.Tenant] = s
				entries = append(entries, en)
				en = nil
			}
			if capping {
				s.cap(e.Time)
			} else {
				s.free(e.Time)
			}
			if en == nil || !opt.All {
				continue
			}
			en.Step = StepSlot
		case e.Kind == "proof" && len(e.Evidence) > 0:
			en.Step = StepVerdict
			en.Proof = verdict(e)
			if opt.Verify != nil && len(en.Proof.Evidence.Trials) > 0 {
				en.Proof.Check = check(*opt.Verify, en.Proof)
			}
			s := open[e.Tenant]
			if s == nil || s.survey || s.verdict {
				if s != nil {
					s.close(verdictAt[s])
				}
				s = &slotter{}
				open[e.Tenant] = s
			}
			s.entry, s.verdict = en, true
			verdictAt[s] = e.Time
		case e.Kind == "proof":
			en.Step = StepStart
			if s := open[e.Tenant]; s != nil {
				s.close(verdictAt[s])
			}
			t := e.Time
			open[e.Tenant] = &slotter{start: &t}
		case e.Kind == "detection" && len(e.Evidence) > 0:
			var d agent.DetectionEvidence
			if json.Unmarshal(e.Evidence, &d) == nil {
				en.Detection = &d
			}
		}
		entries = append(entries, en)
	}
	closeAll()

	for _, en := range entries {
		if r.Since != nil && en.Time.Before(*r.Since) {
			continue
		}
		en.Text = sentence(en)
		if en.Proof != nil && en.Proof.Check != nil {
			r.Checked++
			if !en.Proof.Check.Reproduced {
				r.Unreproduced++
			}
		}
		r.Entries = append(r.Entries, *en)
	}
	return r, nil
}

// isSlot says whether an event is one trial slot's cap (a proof record
// with a quota) or release.
func isSlot(e event) bool {
	return e.Kind == "proof-free" || e.Kind == "proof" && len(e.Evidence) == 0 && e.Quota != nil && *e.Quota > 0
}

// verdict reads a proof's verdict event.
func verdict(e event) *Proof {
	p := &Proof{}
	p.Verdict, p.Why, _ = strings.Cut(e.Detail, ": ")
	if json.Unmarshal(e.Evidence, &p.Evidence) != nil {
		return p
	}
	p.Trials = len(p.Evidence.Trials)
	for _, t := range p.Evidence.Trials {
		switch t.Outcome {
		case judge.TrialPass:
			p.Passed++
		case judge.TrialPartial:
			p.Partial++
		case judge.TrialFail:
			p.Failed++
		case judge.TrialQuiet:
			p.Quiet++
		default:
			p.Void++
		}
		p.FinalEvidence = t.Evidence
	}
	return p
}

// check scores a proof's recorded trials again under cfg.
func check(cfg judge.ProofConfig, p *Proof) *Check {
	var r judge.Replayed
	if p.Evidence.Carry > 0 {
		r = judge.ReplayFrom(cfg, p.Evidence.Before, p.Evidence.Carry, p.Evidence.Trials)
	} else { // a record from before proofs kept where they began
		r = judge.Replay(cfg, p.Evidence.Before, p.Evidence.Trials)
	}
	return &Check{Reproduced: r.Reproduces(p.Verdict, p.Trials), Verdict: r.Verdict, Trials: r.Trials,
		Evidence: r.Evidence, Diverged: r.Diverged + 1}
}

// ParseSince reads --since: a duration back from now ("90m") or an RFC 3339
// time.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("--since %q: a duration back from now must not be negative", s)
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--since %q: want a duration back from now (90m, 2h) or an RFC 3339 time (2006-01-02T15:04:05Z)", s)
}
