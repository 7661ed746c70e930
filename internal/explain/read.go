package explain

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/crosstalk-project/crosstalk/internal/act"
)

// ErrNoJournal says there is no journal where one was looked for.
var ErrNoJournal = errors.New("no journal")

// event is one journal line read back; its evidence stays raw until the
// kind says what it holds.
type event struct {
	act.Event
	Evidence json.RawMessage `json:"evidence,omitempty"`
}

// readJournal reads the journal at path, after the part rotated away
// from it (path.1) when there is one: the oldest events first. Lines that
// are not an event (torn by a crash, edited by hand) are skipped and
// counted.
func readJournal(path string) (events []event, files []string, skipped int, err error) {
	for _, p := range []string{path + ".1", path} {
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			if p == path {
				return nil, nil, 0, fmt.Errorf("%w at %s (the agent writes STATE_DIR/journal.jsonl: name its directory with --state-dir, or the file with --journal)", ErrNoJournal, path)
			}
			continue
		}
		if err != nil {
			return nil, nil, 0, fmt.Errorf("journal: %w", err)
		}
		evs, n, err := readEvents(f)
		f.Close()
		if err != nil {
			return nil, nil, 0, fmt.Errorf("journal %s: %w", p, err)
		}
		events = append(events, evs...)
		files = append(files, p)
		skipped += n
	}
	return events, files, skipped, nil
}

// readEvents reads JSON lines of any length; a line that does not decode
// to an event with a time and a kind is counted, not fatal.
func readEvents(r io.Reader) (events []event, skipped int, err error) {
	br := bufio.NewReader(r)
	for {
		line, rerr := br.ReadBytes('\n')
		if line = bytes.TrimSpace(line); len(line) > 0 {
			var e event
			if json.Unmarshal(line, &e) != nil || e.Time.IsZero() || e.Kind == "" {
				skipped++
			} else {
				events = append(events, e)
			}
		}
		if rerr == io.EOF {
			return events, skipped, nil
		}
		if rerr != nil {
			return nil, 0, rerr
		}
	}
}
