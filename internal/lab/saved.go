package lab

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// Saved is a result read back from its JSON: a lab run's, a matrix's, a
// suite's or a visibility reading's, exactly one of them set. Reports are rendered from it as from
// the result the run returned, so a kept result.json is as good as the
// run's own report.
type Saved struct {
	Kind       string // KindRun, KindMatrix, KindSuite or KindVisibility
	Run        *Result
	Matrix     *Matrix
	Suite      *SuiteResult
	Visibility *Visibility
}

// LoadSaved reads a saved result file (see ParseSaved).
func LoadSaved(path string) (*Saved, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := ParseSaved(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// ParseSaved decodes a result. Its kind is its meta's; a result saved
// without meta is known by the fields only its kind has. Anything else is
// an error that says what the file would need to be.
func ParseSaved(b []byte) (*Saved, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("not a lab result (a JSON object written by lab run, lab matrix, lab suite or lab visibility): %w", err)
	}
	kind := ""
	if raw, ok := probe["meta"]; ok {
		var m struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("meta: %w", err)
		}
		kind = m.Kind
	}
	has := func(keys ...string) bool {
		for _, k := range keys {
			if _, ok := probe[k]; !ok {
				return false
			}
		}
		return true
	}
	if kind == "" {
		switch {
		case has("scenario", "solo", "results"):
			kind = KindRun
		case has("victims", "polluters", "slowdown"):
			kind = KindMatrix
		case has("runs", "policies", "total"):
			kind = KindSuite
		case has("thresholds", "quiet", "loads"):
			kind = KindVisibility
		default:
			return nil, errors.New("not a lab result: it has neither a lab run's fields (scenario, solo, results), a matrix's (victims, polluters, slowdown), a suite's (runs, policies, total) nor a visibility reading's (thresholds, quiet, loads)")
		}
	}
	s := &Saved{Kind: kind}
	var target any
	switch kind {
	case KindRun:
		s.Run = &Result{}
		target = s.Run
	case KindMatrix:
		s.Matrix = &Matrix{}
		target = s.Matrix
	case KindSuite:
		s.Suite = &SuiteResult{}
		target = s.Suite
	case KindVisibility:
		s.Visibility = &Visibility{}
		target = s.Visibility
	default:
		return nil, fmt.Errorf("a result of kind %q, which this crosstalk does not know (it knows %s, %s, %s and %s)", kind, KindRun, KindMatrix, KindSuite, KindVisibility)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(target); err != nil {
		return nil, fmt.Errorf("reading a %s result: %w", kind, err)
	}
	if s.Suite != nil && s.Suite.Breakdowns == nil {
		// Saved before suites broke their runs down: the runs say it all.
		s.Suite.breakDown()
	}
	return s, nil
}

// ReportName is the file name the command that made the result gives its
// HTML report.
func (s *Saved) ReportName() string {
	switch s.Kind {
	case KindMatrix:
		return "matrix.html"
	case KindSuite:
		return "suite.html"
	case KindVisibility:
		return "visibility.html"
	}
	return "report.html"
}

// WriteHTML renders the result's HTML report.
func (s *Saved) WriteHTML(w io.Writer) error {
	switch {
	case s.Run != nil:
		return WriteReport(w, s.Run)
	case s.Matrix != nil:
		return WriteMatrixReport(w, s.Matrix)
	case s.Suite != nil:
		return WriteSuiteReport(w, s.Suite)
	case s.Visibility != nil:
		return WriteVisibilityReport(w, s.Visibility)
	}
	return errors.New("report: an empty saved result")
}

// WriteText renders the result's text report, as its command printed it.
func (s *Saved) WriteText(w io.Writer) error {
	switch {
	case s.Run != nil:
		return WriteText(w, s.Run)
	case s.Matrix != nil:
		return WriteMatrixText(w, s.Matrix)
	case s.Suite != nil:
		return WriteSuiteText(w, s.Suite)
	case s.Visibility != nil:
		return WriteVisibilityText(w, s.Visibility)
	}
	return errors.New("report: an empty saved result")
}
