package systemdunit

import "testing"

func TestUnescape(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain name unchanged", "plain", "plain"},
		{"empty", "", ""},
		{"dashes", `qemu\x2d3\x2ddemo`, "qemu-3-demo"},
		{"whole name is one escape", `\x2e`, "."},
		{"escape at the end", `web\x2d`, "web-"},
		{"upper-case hex", `a\x2Db`, "a-b"},
		{"multi-byte UTF-8", `lxc\x2dbull\xf0\x9f\x92\xa9`, "lxc-bull\U0001f4a9"},
		{"escaped backslash is not re-read", `a\x5cx2d`, `a\x2d`},
		{"truncated escape kept", `bad\x2`, `bad\x2`},
		{"bare prefix kept", `bad\x`, `bad\x`},
		{"non-hex digits kept", `bad\xzz`, `bad\xzz`},
		{"sign is not a digit", `bad\x+f`, `bad\x+f`},
		{"other backslash kept", `a\nb`, `a\nb`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Unescape(tt.in); got != tt.want {
				t.Errorf("Unescape(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func FuzzUnescape(f *testing.F) {
	f.Add(`machine-qemu\x2d1\x2dvm1.scope`)
	f.Add(`\x`)
	f.Fuzz(func(t *testing.T, s string) {
		got := Unescape(s)
		if len(got) > len(s) {
			t.Errorf("Unescape(%q) = %q grew the name", s, got)
		}
	})
}
