package explain

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/judge"
)

// timeLayout is how entries show their time (UTC, as journalled).
const timeLayout = "2006-01-02 15:04:05.000"

// Render writes the report as text: a header, then one line an entry, a
// proof's trials indented under its verdict.
func Render(w io.Writer, r *Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "journal %s", strings.Join(r.Files, ", "))
	if r.Skipped > 0 {
		fmt.Fprintf(&b, " (%d unreadable line(s) skipped)", r.Skipped)
	}
	b.WriteString(": ")
	switch len(r.Entries) {
	case 0:
		b.WriteString("nothing")
	case 1:
		b.WriteString("1 entry")
	default:
		fmt.Fprintf(&b, "%d entries", len(r.Entries))
	}
	if len(r.Tenants) > 0 {
		var ts []string
		for _, t := range r.Tenants {
			ts = append(ts, fmt.Sprintf("%s (%s)", t.Name, t.ID))
		}
		fmt.Fprintf(&b, " for %s", strings.Join(ts, ", "))
	}
	if r.Since != nil {
		fmt.Fprintf(&b, " since %s UTC", r.Since.UTC().Format(timeLayout))
	}
	b.WriteString("\n")
	for _, e := range r.Entries {
		fmt.Fprintf(&b, "%s  %s\n", e.Time.UTC().Format(timeLayout), e.Text)
		if e.Proof != nil {
			for i, t := range e.Proof.Evidence.Trials {
				fmt.Fprintf(&b, "%25s trial %d %s\n", "", i+1, trialText(t))
			}
			if c := e.Proof.Check; c != nil {
				fmt.Fprintf(&b, "%25s %s\n", "", checkText(e.Proof, c))
			}
		}
	}
	if r.Verified {
		switch {
		case r.Checked == 0:
			b.WriteString("verified: no proof with recorded trials to score again\n")
		case r.Unreproduced == 0:
			fmt.Fprintf(&b, "verified: every one of %d proof(s) gives its recorded verdict from its readings\n", r.Checked)
		default:
			fmt.Fprintf(&b, "verified: %d of %d proof(s) NOT REPRODUCED from their readings\n", r.Unreproduced, r.Checked)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// sentence tells one entry.
func sentence(e *Entry) string {
	who := e.Name
	if who == "" {
		who = e.Tenant
	}
	var s string
	switch {
	case e.Kind == "start":
		s = "agent started: " + e.Reason
	case e.Kind == "stop":
		s = "agent stopped"
	case e.Kind == "restore":
		s = "agent restored at start-up: " + e.Reason
	case e.Kind == "reload":
		s = "configuration reloaded: " + e.Reason
	case e.Kind == "unowned":
		s = fmt.Sprintf("%s is at a crosstalk-shaped quota no state covers (not taken for its original): %s", who, e.Reason)
	case e.Kind == "error" && who == "":
		s = "error: " + e.Reason
	case e.Kind == "error":
		s = fmt.Sprintf("error acting on %s%s: %s", who, by(e), e.Reason)
	case e.Kind == "detection":
		s = fmt.Sprintf("%s suspected: %s", who, e.Reason)
		if d := e.Detection; d != nil && len(d.Suspects) > 1 {
			var ranked []string
			for _, c := range d.Suspects[:min(len(d.Suspects), 4)] {
				ranked = append(ranked, fmt.Sprintf("%s %.2f", c.Name, c.Score))
			}
			s += " [suspects by score: " + strings.Join(ranked, ", ") + "]"
		}
	case e.Kind == "survey":
		s = fmt.Sprintf("%s surveyed at start: %s", who, strings.TrimPrefix(e.Reason, "start-up CPI survey: "))
	case e.Step == StepStart && e.DryRun:
		s = who + ": would prove it now, but nothing is capped in a dry run"
	case e.Step == StepStart:
		head, _, _ := strings.Cut(e.Reason, ": ")
		s = fmt.Sprintf("%s: proof begun (%s)", who, head)
	case e.Step == StepVerdict:
		s = verdictText(who, e)
	case e.Step == StepSurvey:
		s = fmt.Sprintf("%s capped outside any proof%s: %s", who, slotsText(e.Slots), e.Reason)
	case e.Step == StepSlot && e.Kind == "proof":
		s = fmt.Sprintf("%s capped to %s: %s", who, cpus(*e.QuotaCPUs), e.Reason)
	case e.Step == StepSlot:
		s = fmt.Sprintf("%s freed: %s", who, e.Reason)
	case e.Kind == "release":
		s = fmt.Sprintf("%s released%s: %s", who, by(e), e.Reason)
	case e.Kind == "throttle", e.Kind == "tighten", e.Kind == "relax", e.Kind == "isolate":
		verb := map[string]string{"throttle": "throttled", "tighten": "tightened", "relax": "relaxed", "isolate": "isolated"}[e.Kind]
		to := ""
		if e.Lever == string(judge.LeverCPUQuota) && e.QuotaCPUs != nil && *e.QuotaCPUs > 0 {
			to = " to " + cpus(*e.QuotaCPUs)
		}
		s = fmt.Sprintf("%s %s%s%s: %s", who, verb, to, by(e), e.Reason)
	default:
		s = strings.TrimSpace(fmt.Sprintf("%s %s", e.Kind, who))
		if e.Reason != "" {
			s += ": " + e.Reason
		}
	}
	if e.DryRun && e.Step != StepStart {
		s += " (dry run: nothing written)"
	}
	return s
}

// by names the policy and lever of an action.
func by(e *Entry) string {
	switch {
	case e.Policy != "" && e.Lever != "":
		return fmt.Sprintf(" by %s through %s", e.Policy, e.Lever)
	case e.Policy != "":
		return " by " + e.Policy
	case e.Lever != "":
		return " through " + e.Lever
	}
	return ""
}

func cpus(q float64) string { return fmt.Sprintf("%.3g CPU", q) }

func slotsText(sl *Slots) string {
	if sl == nil || sl.Caps == 0 {
		return ""
	}
	d := time.Duration(sl.CappedSeconds * float64(time.Second)).Round(time.Millisecond)
	if sl.Caps == 1 {
		return fmt.Sprintf(" for %s", d)
	}
	return fmt.Sprintf(" %d times, %s in all", sl.Caps, d)
}

func verdictText(who string, e *Entry) string {
	p := e.Proof
	var b strings.Builder
	switch p.Verdict {
	case judge.ProofGuilty:
		fmt.Fprintf(&b, "%s proved a polluter", who)
	case judge.ProofInnocent:
		fmt.Fprintf(&b, "%s proved innocent", who)
	case judge.ProofInconclusive:
		fmt.Fprintf(&b, "%s: proof inconclusive", who)
	default:
		fmt.Fprintf(&b, "%s: proof ended %s", who, p.Verdict)
	}
	fmt.Fprintf(&b, " after %d trial(s)", p.Trials)
	var counts []string
	for _, c := range []struct {
		n    int
		what string
	}{{p.Passed, "passed"}, {p.Partial, "partial"}, {p.Failed, "failed"}, {p.Quiet, "quiet"}, {p.Void, "void"}} {
		if c.n > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if len(counts) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(counts, ", "))
	}
	if p.Started != nil {
		fmt.Fprintf(&b, " in %s", e.Time.Sub(*p.Started).Round(time.Millisecond))
	}
	fmt.Fprintf(&b, ": %s", p.Why)
	ev := p.Evidence
	if ev.FalseConvictionBound > 0 {
		fmt.Fprintf(&b, "; evidence %.3g", p.FinalEvidence)
		if ev.Carry > 0 && ev.Carry != 1 {
			// A chain: the bound holds for it as one proof.
			fmt.Fprintf(&b, " (begun at %.3g, where its last proof left it)", ev.Carry)
		}
		fmt.Fprintf(&b, ", conviction at %.3g", ev.FalseConvictionBound)
	}
	switch {
	case ev.Signal == agent.SignalCPUWait:
		fmt.Fprintf(&b, "; read the victims' CPU wait, %.2f× before", ev.Before)
	case ev.Signal == agent.SignalCPI:
		fmt.Fprintf(&b, "; read the victims' CPI, %.2f× before", ev.Before)
	case ev.Before > 0:
		kind := ev.Kind
		if kind == "" {
			kind = "every"
		}
		fmt.Fprintf(&b, "; read the %s probe on CPU %d, %.2f× before", kind, ev.CPU, ev.Before)
	}
	if st := slotsText(e.Slots); st != "" {
		fmt.Fprintf(&b, "; capped%s", st)
	}
	return b.String()
}

// trialText tells one trial: what the contention read freed and capped,
// how much of it the cap took off, and the evidence after it.
func trialText(t judge.Trial) string {
	word := map[string]string{judge.TrialPass: "passed", judge.TrialPartial: "partial", judge.TrialFail: "failed",
		judge.TrialQuiet: "quiet", judge.TrialVoid: "void (a slot got no reading)"}[t.Outcome]
	if word == "" {
		word = t.Outcome
	}
	first := "freed first"
	if t.CappedFirst {
		first = "capped first"
	}
	return fmt.Sprintf("%s: freed %s, capped %s (%s): the cap took %.2f× off; evidence %.3g",
		word, level(t.Freed), level(t.Capped), first, math.Exp(t.Drop), t.Evidence)
}

// level is a slot's readings as one ratio (their geometric mean, as the
// proof weighs them).
func level(rs []float64) string {
	var sum float64
	n := 0
	for _, r := range rs {
		if r > 0 {
			sum += math.Log(r)
			n++
		}
	}
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", math.Exp(sum/float64(n)))
}

// checkText tells a proof scored again from its readings.
func checkText(p *Proof, c *Check) string {
	got := c.Verdict
	if got == "" {
		got = "no verdict yet"
	}
	switch {
	case c.Reproduced && c.Verdict == "":
		return fmt.Sprintf("checked: its readings, scored again, give every trial as recorded and no verdict yet (evidence %.3g): the proof was stopped before they decided", c.Evidence)
	case c.Reproduced:
		return fmt.Sprintf("checked: its readings, scored again, give every trial as recorded and the same verdict (%s, evidence %.3g)", got, c.Evidence)
	case c.Diverged > 0:
		return fmt.Sprintf("NOT REPRODUCED: trial %d scores otherwise from its readings (they give %s after %d trial(s), evidence %.3g, against %s after %d recorded): another build, or other proof settings (--config)",
			c.Diverged, got, c.Trials, c.Evidence, p.Verdict, p.Trials)
	}
	return fmt.Sprintf("NOT REPRODUCED: its readings give %s after %d trial(s), evidence %.3g, against %s after %d recorded: another build, or other proof settings (--config)",
		got, c.Trials, c.Evidence, p.Verdict, p.Trials)
}
