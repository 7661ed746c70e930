package host

import (
	"slices"
	"strings"
	"testing"
)

func TestParseMountinfo(t *testing.T) {
	data := `22 27 0:21 / /proc rw,relatime - proc proc rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:9 - cgroup cgroup rw,cpu,cpuacct
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:4 master:1 - cgroup2 cgroup2 rw,nsdelegate
50 23 0:40 / /sys/fs/resctrl rw,relatime - resctrl resctrl rw,cdp
60 27 8:1 /data /mnt/with\040space rw - ext4 /dev/sda1 rw
garbage line
`
	m, err := ParseMountinfo(data)
	if err == nil || !strings.Contains(err.Error(), "line 7") {
		t.Errorf("want error naming line 7, got %v", err)
	}
	if len(m) != 6 {
		t.Fatalf("got %d mounts, want 6 despite the bad line", len(m))
	}
	if m[2].MountPoint != "/sys/fs/cgroup/cpu,cpuacct" || m[2].FSType != "cgroup" || !m[2].HasOption("cpu") || !m[2].HasOption("cpuacct") || m[2].HasOption("memory") {
		t.Errorf("v1 mount = %+v", m[2])
	}
	if m[3].FSType != "cgroup2" || !m[3].HasOption("nsdelegate") {
		t.Errorf("v2 mount = %+v", m[3])
	}
	if m[4].FSType != "resctrl" || !m[4].HasOption("cdp") {
		t.Errorf("resctrl mount = %+v", m[4])
	}
	if m[5].MountPoint != "/mnt/with space" || m[5].Root != "/data" {
		t.Errorf("escaped mount point = %q", m[5].MountPoint)
	}
}

func TestParseCmdline(t *testing.T) {
	c := ParseCmdline(`BOOT_IMAGE=/vmlinuz root=UUID=ab-cd ro quiet split_lock_detect=ratelimit:100 foo="a b" split_lock_detect=warn -- init=/x split_lock_detect=off` + "\n")
	keys := []string{}
	for _, p := range c {
		keys = append(keys, p.Key)
	}
	want := []string{"BOOT_IMAGE", "root", "ro", "quiet", "split_lock_detect", "foo", "split_lock_detect"}
	if !slices.Equal(keys, want) {
		t.Errorf("keys = %v, want %v", keys, want)
	}
	if v, ok := c.Get("split_lock_detect"); !ok || v != "warn" {
		t.Errorf("split_lock_detect = %q %v; last before -- wins", v, ok)
	}
	if v, _ := c.Get("foo"); v != "a b" {
		t.Errorf("quoted value = %q", v)
	}
	if v, _ := c.Get("root"); v != "UUID=ab-cd" {
		t.Errorf("value with = inside: %q", v)
	}
	if _, ok := c.Get("init"); ok {
		t.Error("parameter after -- taken as kernel's")
	}
	if p := c[2]; p.HasValue || p.Key != "ro" {
		t.Errorf("bare flag = %+v", p)
	}
	// Quotes as the kernel strips them: around a whole token, around a value,
	// and nowhere else (`--"` is a parameter; `"--"` ends the list as `--` does).
	q := ParseCmdline(`"a=b c" d="e" --"`)
	if len(q) != 3 || q[0].Key != "a" || q[0].Value != "b c" || q[1].Value != "e" || q[2].Key != `--"` {
		t.Errorf("quoted tokens = %+v", q)
	}
	if r := ParseCmdline(`x "--" y`); len(r) != 1 || r[0].Key != "x" {
		t.Errorf(`"--" did not end the list: %+v`, r)
	}
}

func FuzzParseCmdline(f *testing.F) {
	for _, s := range []string{`a=b c "d e"`, `x="unterminated`, "-- a", "  ", `=`, `a==b`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, p := range ParseCmdline(s) {
			// parse_args() ends at a bare "--"; "--=x" is a parameter.
			if p.Key == "--" && !p.HasValue {
				t.Fatalf("-- returned as a parameter in %q", s)
			}
			if strings.ContainsAny(p.Key, " \t\n") && !strings.Contains(s, `"`) {
				t.Fatalf("key %q holds white space without quotes in %q", p.Key, s)
			}
		}
	})
}

func FuzzParseMountinfo(f *testing.F) {
	f.Add("41 31 0:38 / /sys/fs/cgroup/unified rw shared:4 - cgroup2 cgroup2 rw\n")
	f.Add("1 2 3 4 5 6 - \n")
	f.Add(`1 2 0:1 / /a\134b\04 rw - t s o`)
	f.Fuzz(func(t *testing.T, s string) {
		ms, _ := ParseMountinfo(s)
		for _, m := range ms {
			if m.FSType == "" {
				t.Fatalf("mount without fs type from %q", s)
			}
		}
	})
}
