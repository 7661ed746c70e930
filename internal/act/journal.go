package act

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Event is one line of the journal: a detection, a proof, an action, a
// release or an error, with the evidence that led to it.
type Event struct {
	Time time.Time `json:"time"`
	Kind string    `json:"kind"` // start, stop, detection, proof, throttle, tighten, relax, release, isolate, restore, error
	// Policy that acted (probe, buslocks, permits, power, llc, mba) and the
	// lever it acted through (cpu_quota, clock_modulation, cpufreq, cat,
	// mba), for actions.
	Policy string `json:"policy,omitempty"`
	Lever  string `json:"lever,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	Name   string `json:"name,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Quota in CPUs after the event (0 = unlimited), for actions.
	Quota    *float64 `json:"quota,omitempty"`
	Evidence any      `json:"evidence,omitempty"`
	DryRun   bool     `json:"dry_run,omitempty"`
}

// Journal appends events as JSON lines. It rotates once the file passes
// MaxBytes (to path.1), so it cannot fill the disk.
type Journal struct {
	mu       sync.Mutex
	path     string
	f        *os.File
	size     int64
	MaxBytes int64
	// write replaces the file write in tests (a disk that fills mid-line).
	write func([]byte) (int, error)
}

// OpenJournal opens (or creates) the journal for appending; an empty path
// gives a journal that discards.
func OpenJournal(path string) (*Journal, error) {
	j := &Journal{path: path, MaxBytes: 64 << 20}
	if path == "" {
		return j, nil
	}
	if err := j.open(); err != nil {
		return nil, err
	}
	return j, nil
}

func (j *Journal) open() error {
	f, err := OpenNoFollow(j.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("journal: %w", err)
	}
	j.f, j.size = f, st.Size()
	j.write = f.Write
	return nil
}

// Write appends one event as a whole line or not at all: a write cut short
// (a full disk) is cut back off, so a reader never meets a torn line and
// the next event starts on a line of its own.
func (j *Journal) Write(e Event) error {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	if j.size+int64(len(b))+1 > j.MaxBytes {
		j.f.Close()
		os.Rename(j.path, j.path+".1")
		if err := j.open(); err != nil {
			return err
		}
	}
	line := append(b, '\n')
	n, err := j.write(line)
	if err != nil || n != len(line) {
		if n > 0 {
			if terr := j.f.Truncate(j.size); terr != nil {
				// The torn tail stays: the size is what the file holds.
				j.size += int64(n)
				return fmt.Errorf("journal: %w (and the partial line could not be cut off: %v)", writeErr(err), terr)
			}
		}
		return fmt.Errorf("journal: %w", writeErr(err))
	}
	j.size += int64(n)
	return nil
}

func writeErr(err error) error {
	if err == nil {
		return io.ErrShortWrite
	}
	return err
}

// Close closes the journal file.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}
