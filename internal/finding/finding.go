// Package finding is the shape of one check's result, shared by doctor (the
// host's tuning) and plan (a VM's virtual topology), so that both print,
// count and serialise findings the same way and doctor can carry plan's
// checks of running domains as they are.
package finding

// Status is a check's verdict.
type Status string

// Check statuses, from fine to unknowable.
const (
	OK      Status = "ok"
	Info    Status = "info"
	Warn    Status = "warn"
	Unknown Status = "unknown"
)

// Evidence is one fact a check used: a file and the value found there, or a
// value the check computed (the file is then "(computed) …").
type Evidence struct {
	File  string `json:"file"`
	Value string `json:"value"`
}

// Check is one finding. Its JSON is a stable interface (doctor --json, plan
// --json).
type Check struct {
	ID       string     `json:"id"`
	Status   Status     `json:"status"`
	Summary  string     `json:"summary"`
	Evidence []Evidence `json:"evidence"`
	Why      string     `json:"why"`
	Advice   string     `json:"advice,omitempty"`
}
