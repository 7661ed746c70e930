package host

import (
	"fmt"
	"strings"
)

// Mount is one line of /proc/PID/mountinfo.
type Mount struct {
	MountPoint string
	Root       string // root of the mount within its filesystem
	FSType     string
	Source     string
	Options    []string // per-mount options
	SuperOpts  []string // per-superblock options (cgroup v1 controllers live here)
}

// HasOption reports whether opt is in the mount's per-mount or superblock options.
func (m Mount) HasOption(opt string) bool {
	for _, o := range m.SuperOpts {
		if o == opt {
			return true
		}
	}
	for _, o := range m.Options {
		if o == opt {
			return true
		}
	}
	return false
}

// ParseMountinfo parses /proc/PID/mountinfo (proc(5)). Lines that do not fit
// the format are reported as an error naming the line; well-formed lines
// before and after are still returned so one odd mount does not hide the rest.
func ParseMountinfo(data string) ([]Mount, error) {
	var out []Mount
	var bad []string
	for i, line := range strings.Split(data, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Fields(line)
		sep := -1
		for j := 6; j < len(f); j++ {
			if f[j] == "-" {
				sep = j
				break
			}
		}
		if len(f) < 7 || sep < 0 || sep+2 >= len(f) {
			bad = append(bad, fmt.Sprintf("line %d", i+1))
			continue
		}
		m := Mount{
			Root:       unescapeMount(f[3]),
			MountPoint: unescapeMount(f[4]),
			Options:    strings.Split(f[5], ","),
			FSType:     f[sep+1],
			Source:     unescapeMount(f[sep+2]),
		}
		if sep+3 < len(f) {
			m.SuperOpts = strings.Split(f[sep+3], ",")
		}
		out = append(out, m)
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("mountinfo: malformed %s", strings.Join(bad, ", "))
	}
	return out, nil
}

// unescapeMount undoes the octal escapes (\040 for space and so on) the kernel
// applies to paths in mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) && isOctal(s[i+1:i+4]) {
			v := (s[i+1]-'0')*64 + (s[i+2]-'0')*8 + (s[i+3] - '0')
			b.WriteByte(v)
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(s string) bool {
	if s[0] > '3' {
		return false
	}
	for i := range 3 {
		if s[i] < '0' || s[i] > '7' {
			return false
		}
	}
	return true
}

// Mounts reads the host's mount table: init's mountinfo first (the host's
// mount namespace, even when the agent runs in a container with host PID),
// else our own. It also returns which file it read, for evidence.
func (h *Host) Mounts() ([]Mount, string, error) {
	var firstErr error
	for _, p := range []string{"/proc/1/mountinfo", "/proc/self/mountinfo"} {
		data, err := h.ReadFile(p)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		m, err := ParseMountinfo(string(data))
		return m, p, err
	}
	return nil, "", firstErr
}
