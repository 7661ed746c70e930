// Package act is the last stage of the pipeline: it changes the host, and
// only through actuators that first write down what they are about to change
// so it can always be undone — after a normal stop, after kill -9, after a
// crash. Decisions about whom to throttle are the judge's; how much, and the
// writing, are here.
package act

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Entry is one cgroup whose quota crosstalk changed, with the value to
// restore. Quotas are kept in microseconds, as the kernel writes them.
type Entry struct {
	Cgroup string `json:"cgroup"`
	Tenant string `json:"tenant"`
	// OriginalQuotaUS < 0 means the original was unlimited.
	OriginalQuotaUS  int64     `json:"original_quota_us"`
	OriginalPeriodUS int64     `json:"original_period_us"`
	AppliedQuotaUS   int64     `json:"applied_quota_us"`
	AppliedPeriodUS  int64     `json:"applied_period_us"`
	Since            time.Time `json:"since"`
}

type stateDoc struct {
	Version int              `json:"version"`
	PID     int              `json:"pid"`
	Updated time.Time        `json:"updated"`
	Entries map[string]Entry `json:"entries"`
	// Records hold what the other actuators changed (resctrl classes,
	// cpufreq limits, MSR duty cycles, libvirt scheduler parameters), one
	// section per actuator kind, keyed by what was changed. Each actuator
	// owns its section and the shape of its values.
	Records map[string]map[string]json.RawMessage `json:"records,omitempty"`
}

// StateFile persists Entries with atomic replaces (write, fsync, rename,
// fsync the directory), so a reader after any crash sees either the old or
// the new content, never a torn one.
type StateFile struct {
	mu   sync.Mutex
	path string
	doc  stateDoc
}

// OpenState loads the state file at path (absent = empty).
func OpenState(path string) (*StateFile, error) {
	s := &StateFile{path: path, doc: stateDoc{Version: 1, Entries: map[string]Entry{}}}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("state file: %w", err)
	}
	if err := json.Unmarshal(b, &s.doc); err != nil {
		return nil, fmt.Errorf("state file %s is corrupt (%v): move it aside after restoring quotas by hand", path, err)
	}
	if s.doc.Entries == nil {
		s.doc.Entries = map[string]Entry{}
	}
	return s, nil
}

// PutRecord records, and saves before returning, what an actuator of the
// given kind changed at key (a cgroup, a resctrl group, a CPU), with the
// value it needs to undo it. An actuator must put its record before it
// writes to the host, so a crash right after the write still leaves the
// way back on disk.
func (s *StateFile) PutRecord(kind, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("state record %s/%s: %w", kind, key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.doc.Records == nil {
		s.doc.Records = map[string]map[string]json.RawMessage{}
	}
	if s.doc.Records[kind] == nil {
		s.doc.Records[kind] = map[string]json.RawMessage{}
	}
	s.doc.Records[kind][key] = b
	return s.saveLocked()
}

// GetRecord decodes the record of kind at key into v; ok is false when there
// is none.
func (s *StateFile) GetRecord(kind, key string, v any) (ok bool, err error) {
	s.mu.Lock()
	raw, ok := s.doc.Records[kind][key]
	s.mu.Unlock()
	if !ok {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("state record %s/%s: %w", kind, key, err)
	}
	return true, nil
}

// RecordKeys lists the keys recorded for kind, sorted.
func (s *StateFile) RecordKeys(kind string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.doc.Records[kind]))
	for k := range s.doc.Records[kind] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// RecordKinds lists the actuator kinds that have records, sorted.
func (s *StateFile) RecordKinds() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	kinds := make([]string, 0, len(s.doc.Records))
	for k := range s.doc.Records {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	return kinds
}

// ForgetRecord removes the record of kind at key and saves.
func (s *StateFile) ForgetRecord(kind, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.doc.Records[kind][key]; !ok {
		return nil
	}
	delete(s.doc.Records[kind], key)
	if len(s.doc.Records[kind]) == 0 {
		delete(s.doc.Records, kind)
	}
	return s.saveLocked()
}

// Path is where the state lives.
func (s *StateFile) Path() string { return s.path }

// Get returns the entry of a cgroup.
func (s *StateFile) Get(cgroup string) (Entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.doc.Entries[cgroup]
	return e, ok
}

// Entries lists every entry, sorted by cgroup.
func (s *StateFile) Entries() []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Entry, 0, len(s.doc.Entries))
	for _, e := range s.doc.Entries {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int {
		switch {
		case a.Cgroup < b.Cgroup:
			return -1
		case a.Cgroup > b.Cgroup:
			return 1
		}
		return 0
	})
	return out
}

// Put records an entry and saves before returning.
func (s *StateFile) Put(e Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.doc.Entries[e.Cgroup] = e
	return s.saveLocked()
}

// Forget removes an entry and saves.
func (s *StateFile) Forget(cgroup string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.doc.Entries[cgroup]; !ok {
		return nil
	}
	delete(s.doc.Entries, cgroup)
	return s.saveLocked()
}

func (s *StateFile) saveLocked() error {
	s.doc.PID = os.Getpid()
	s.doc.Updated = time.Now().UTC()
	b, err := json.MarshalIndent(s.doc, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(s.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".state-*")
	if err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	_, werr := tmp.Write(append(b, '\n'))
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("state file: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("state file: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
