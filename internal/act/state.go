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
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Entry is one cgroup whose quota crosstalk changed, with the value to
// restore. Quotas are kept in microseconds, as the kernel writes them.
type Entry struct {
	Cgroup string `json:"cgroup"`
	Tenant string `json:"tenant"`
	// OriginalQuotaUS < 0 means the original was unlimited.
	OriginalQuotaUS  int64 `json:"original_quota_us"`
	OriginalPeriodUS int64 `json:"original_period_us"`
	// Applied is the last value crosstalk knows is in the cgroup: the
	// original until its first write lands.
	AppliedQuotaUS  int64 `json:"applied_quota_us"`
	AppliedPeriodUS int64 `json:"applied_period_us"`
	// Next is the write-ahead intent: the value crosstalk is about to write,
	// saved before the write. A kill between saving and writing leaves
	// Applied in the cgroup, a kill after the write leaves Next: restore
	// takes either for crosstalk's own (NextPeriodUS 0: no intent).
	NextQuotaUS  int64     `json:"next_quota_us,omitempty"`
	NextPeriodUS int64     `json:"next_period_us,omitempty"`
	Since        time.Time `json:"since"`
}

// Ours reports whether a quota read from the cgroup (in microseconds) is
// one crosstalk wrote or is about to write, or the original it found: any
// other value is someone else's change.
func (e Entry) Ours(quotaUS, periodUS int64) bool {
	return (quotaUS == e.AppliedQuotaUS && periodUS == e.AppliedPeriodUS) ||
		(e.NextPeriodUS != 0 && quotaUS == e.NextQuotaUS && periodUS == e.NextPeriodUS) ||
		(quotaUS == e.OriginalQuotaUS && periodUS == e.OriginalPeriodUS)
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

// ErrStateNotSaved says a change to the state could not be written to disk
// (disk full, read-only directory): the state in memory is left as it was,
// so it never claims more than the disk holds.
var ErrStateNotSaved = errors.New("state file not updated")

// CorruptStateError says the state file exists but cannot be decoded.
type CorruptStateError struct {
	Path string
	Err  error
}

func (e *CorruptStateError) Error() string {
	return fmt.Sprintf("state file %s is corrupt: %v", e.Path, e.Err)
}

func (e *CorruptStateError) Unwrap() error { return e.Err }

// MoveAside renames a corrupt state file out of the way (to
// state.json.corrupt-TIMESTAMP, kept for a person to read), so an agent can
// start with an empty state instead of failing in a restart loop. It returns
// the new name.
func MoveAside(path string, now time.Time) (string, error) {
	dst := fmt.Sprintf("%s.corrupt-%s", path, now.UTC().Format("20060102T150405.000000000Z"))
	if err := os.Rename(path, dst); err != nil {
		return "", fmt.Errorf("move corrupt state file aside: %w", err)
	}
	syncDir(filepath.Dir(path))
	return dst, nil
}

// StateFile persists Entries with atomic replaces (write, fsync, rename,
// fsync the directory), so a reader after any crash sees either the old or
// the new content, never a torn one. A change whose save fails is undone in
// memory too.
type StateFile struct {
	mu   sync.Mutex
	path string
	doc  stateDoc
	// save, when set, runs before (saved false) and after (saved true)
	// every write; an error it returns before fails the write as a full
	// disk would. The tests' hook to kill the process or fill the disk at
	// an exact write.
	save func(saved bool) error
	// failures counts saves that did not reach the disk.
	failures uint64
	// lingering are entries forgotten in memory whose removal is not yet
	// saved (ForgetLater): the disk still has them, which is safe (restore
	// finds such a cgroup at its original value and leaves it), and an
	// Apply that writes the same intent again needs no save. The next save
	// of anything drops them from the disk.
	lingering map[string]Entry
}

// SaveFailures is how many saves did not reach the disk.
func (s *StateFile) SaveFailures() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failures
}

// SetSaveHook runs hook before (saved false) and after (saved true) every
// save of the state file; an error it returns before the save fails it as a
// full disk would. For tests that stop a process at an exact write.
func (s *StateFile) SetSaveHook(hook func(saved bool) error) {
	s.mu.Lock()
	s.save = hook
	s.mu.Unlock()
}

// OpenState loads the state file at path (absent = empty).
func OpenState(path string) (*StateFile, error) {
	s := &StateFile{path: path, doc: stateDoc{Version: 1, Entries: map[string]Entry{}}}
	b, err := ReadNoFollow(path, maxStateBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("state file: %w", err)
	}
	doc, err := decodeState(b)
	if err != nil {
		return nil, &CorruptStateError{Path: path, Err: err}
	}
	s.doc = doc
	return s, nil
}

// maxStateBytes bounds what OpenState reads: a state file holds one entry
// per throttled tenant and lever, far below this.
const maxStateBytes = 64 << 20

// decodeState decodes a state file and checks what restore relies on: every
// entry keyed by its own cgroup, an absolute clean cgroup path (a path that
// climbs out of the cgroup tree would make restore write elsewhere). The
// values are checked where they are written (cgroup.Quota.Validate).
func decodeState(b []byte) (stateDoc, error) {
	var doc stateDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return doc, err
	}
	if doc.Entries == nil {
		doc.Entries = map[string]Entry{}
	}
	for k, e := range doc.Entries {
		if err := checkEntry(k, e); err != nil {
			return doc, err
		}
	}
	return doc, nil
}

func checkEntry(key string, e Entry) error {
	switch {
	case key != e.Cgroup:
		return fmt.Errorf("entry %q names cgroup %q", key, e.Cgroup)
	case !ValidCgroupPath(e.Cgroup):
		return fmt.Errorf("entry %q: not a clean absolute cgroup path", key)
	}
	return nil
}

// ValidCgroupPath reports whether p is a clean absolute path below a cgroup
// root ("/" itself excluded): no "..", no doubled or trailing slash.
func ValidCgroupPath(p string) bool {
	return len(p) > 1 && p[0] == '/' && path.Clean(p) == p && !strings.Contains(p, "/../") && !strings.HasSuffix(p, "/..")
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
	old, had := s.doc.Records[kind][key]
	s.doc.Records[kind][key] = b
	if err := s.saveLocked(); err != nil {
		if had {
			s.doc.Records[kind][key] = old
		} else {
			s.deleteRecordLocked(kind, key)
		}
		return err
	}
	return nil
}

func (s *StateFile) deleteRecordLocked(kind, key string) {
	delete(s.doc.Records[kind], key)
	if len(s.doc.Records[kind]) == 0 {
		delete(s.doc.Records, kind)
	}
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
	return slices.Sorted(maps.Keys(s.doc.Records[kind]))
}

// RecordKinds lists the actuator kinds that have records, sorted.
func (s *StateFile) RecordKinds() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.doc.Records))
}

// ForgetRecord removes the record of kind at key and saves.
func (s *StateFile) ForgetRecord(kind, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.doc.Records[kind][key]
	if !ok {
		return nil
	}
	s.deleteRecordLocked(kind, key)
	if err := s.saveLocked(); err != nil {
		if s.doc.Records == nil {
			s.doc.Records = map[string]map[string]json.RawMessage{}
		}
		if s.doc.Records[kind] == nil {
			s.doc.Records[kind] = map[string]json.RawMessage{}
		}
		s.doc.Records[kind][key] = old
		return err
	}
	return nil
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

// Put records an entry and saves before returning. An entry the disk
// already holds as it is (in memory, or lingering after ForgetLater) is
// not saved again: a proof that caps and frees its suspect trial after
// trial writes its intent once, not twice a trial, and each fsync'd save on
// a busy host's disk costs milliseconds of cap.
func (s *StateFile) Put(e Entry) error { return s.PutAll([]Entry{e}) }

// PutAll records several entries with one save (none when the disk holds
// them all already, see Put); on a failed save none is recorded, and the
// state in memory is left as it was.
func (s *StateFile) PutAll(entries []Entry) error {
	for _, e := range entries {
		if err := checkEntry(e.Cgroup, e); err != nil {
			return fmt.Errorf("state entry: %w", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := maps.Clone(s.doc.Entries)
	oldLingering := maps.Clone(s.lingering)
	changed := false
	for _, e := range entries {
		cur, had := s.doc.Entries[e.Cgroup]
		switch l, lingers := s.lingering[e.Cgroup]; {
		case had && cur.same(e):
			continue
		case !had && lingers && l.same(e):
			delete(s.lingering, e.Cgroup)
		default:
			changed = true
		}
		s.doc.Entries[e.Cgroup] = e
	}
	if !changed {
		return nil
	}
	if err := s.saveLocked(); err != nil {
		s.doc.Entries, s.lingering = old, oldLingering
		return err
	}
	return nil
}

// same reports whether two entries say the same (Since compared as an
// instant).
func (e Entry) same(o Entry) bool {
	a, b := e, o
	a.Since, b.Since = time.Time{}, time.Time{}
	return a == b && e.Since.Equal(o.Since)
}

// ForgetLater removes an entry from memory without saving: the disk keeps
// it until the next save (of anything) or Flush. For a cgroup just put
// back at its original value, where the entry left on disk is harmless
// and a save would only delay the agent: see lingering.
func (s *StateFile) ForgetLater(cgroup string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.doc.Entries[cgroup]
	if !ok {
		return
	}
	delete(s.doc.Entries, cgroup)
	if s.lingering == nil {
		s.lingering = map[string]Entry{}
	}
	s.lingering[cgroup] = e
}

// Lingering returns the entry ForgetLater removed from memory for a
// cgroup, while the disk still has it.
func (s *StateFile) Lingering(cgroup string) (Entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.lingering[cgroup]
	return e, ok
}

// Flush saves the removals ForgetLater left unsaved, if any.
func (s *StateFile) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.lingering) == 0 {
		return nil
	}
	return s.saveLocked()
}

// Forget removes an entry and saves (an entry only lingering on disk
// included).
func (s *StateFile) Forget(cgroup string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.doc.Entries[cgroup]
	if !ok {
		if _, lingers := s.lingering[cgroup]; lingers {
			return s.saveLocked()
		}
		return nil
	}
	delete(s.doc.Entries, cgroup)
	if err := s.saveLocked(); err != nil {
		s.doc.Entries[cgroup] = old
		return err
	}
	return nil
}

// saveLocked writes the document; its errors wrap ErrStateNotSaved. The
// directory is not created here: the agent and restore check it (owner,
// mode) before they open the state, and a directory that vanished since is
// an error, not something to recreate unchecked.
func (s *StateFile) saveLocked() error {
	if s.save != nil {
		if err := s.save(false); err != nil {
			s.failures++
			return fmt.Errorf("%w: %s: %w", ErrStateNotSaved, s.path, err)
		}
	}
	if err := s.writeLocked(); err != nil {
		s.failures++
		return fmt.Errorf("%w: %w", ErrStateNotSaved, err)
	}
	// The disk now holds exactly what memory does.
	clear(s.lingering)
	if s.save != nil {
		s.save(true)
	}
	return nil
}

func (s *StateFile) writeLocked() error {
	s.doc.PID = os.Getpid()
	s.doc.Updated = time.Now().UTC()
	b, err := json.MarshalIndent(s.doc, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(s.path)
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
	// rename replaces whatever is at path, a symlink included, without
	// following it.
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("state file: %w", err)
	}
	syncDir(dir)
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
