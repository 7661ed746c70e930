package host

import "strings"

// Param is one kernel command-line parameter.
type Param struct {
	Key      string
	Value    string
	HasValue bool // "key=value" rather than a bare "key"
}

// Cmdline is a parsed /proc/cmdline.
type Cmdline []Param

// ParseCmdline splits a kernel command line the way the kernel's
// next_arg() does: parameters separated by white space, double quotes
// protecting spaces in a value (`a="b c"`), and `--` ending the kernel's
// parameters (everything after it belongs to init).
func ParseCmdline(s string) Cmdline {
	var out Cmdline
	i := 0
	for {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i >= len(s) {
			return out
		}
		start, inQuote := i, false
		for i < len(s) && (inQuote || !isSpace(s[i])) {
			if s[i] == '"' {
				inQuote = !inQuote
			}
			i++
		}
		// As next_arg(): a token that starts with a quote loses it and its
		// closing quote; a value that starts with a quote loses that pair.
		tok := s[start:i]
		if t, ok := strings.CutPrefix(tok, `"`); ok {
			tok = strings.TrimSuffix(t, `"`)
		}
		if tok == "--" {
			return out
		}
		key, val, has := strings.Cut(tok, "=")
		if v, ok := strings.CutPrefix(val, `"`); ok {
			val = strings.TrimSuffix(v, `"`)
		}
		out = append(out, Param{Key: key, Value: val, HasValue: has})
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// Get returns the value of the last occurrence of key (the one the kernel acts
// on for ordinary parameters) and whether key appears at all.
func (c Cmdline) Get(key string) (string, bool) {
	for i := len(c) - 1; i >= 0; i-- {
		if c[i].Key == key {
			return c[i].Value, true
		}
	}
	return "", false
}
