package host

import (
	"errors"
	"strings"
)

// ProcStatFields splits a /proc/PID/stat (or /proc/TID/stat) line after
// its command name: the state (field 3 of proc(5)) first. The command name
// is in parentheses and may itself hold spaces and parentheses, so the
// last ')' ends it.
func ProcStatFields(s string) ([]string, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+1 < len(s) && s[i+1] != ' ' {
		return nil, errors.New("malformed /proc stat line: no command name in parentheses")
	}
	f := strings.Fields(s[i+1:])
	if len(f) == 0 {
		return nil, errors.New("malformed /proc stat line: nothing after the command name")
	}
	return f, nil
}
