// Package systemdunit decodes systemd unit names as they appear in cgroup
// paths, shared by tenant discovery and the libvirt machine-name parser.
package systemdunit

import (
	"strconv"
	"strings"
)

// Unescape decodes systemd's unit-name escapes ("\x2d" for "-", see
// systemd-escape(1)). A malformed escape is kept verbatim: a cgroup name is
// data from the host, and a half-decoded name is worse than the raw one.
func Unescape(s string) string {
	if !strings.Contains(s, `\x`) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] == 'x' {
			if v, err := strconv.ParseUint(s[i+2:i+4], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
