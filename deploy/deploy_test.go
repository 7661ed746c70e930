// Package deploy_test checks the deployment files against the code: the
// systemd unit (parsed, verified by systemd-analyze, its capability set and
// system-call filter exercised live), the Kubernetes manifests (decoded
// strictly into the Kubernetes API types) and the Helm chart (rendered).
package deploy_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crosstalk-project/crosstalk/internal/host"
	"github.com/crosstalk-project/crosstalk/internal/sense"
)

// binary is a crosstalk built once for the tests that run it.
var binary string

// kmsgHelperEnv makes the test binary, re-run, only open /dev/kmsg as the
// agent does, check it as doctor does (as if the CPU detected bus locks),
// and exit: 0 if both could read it (TestUnitCapabilitiesReadKernelLog).
const kmsgHelperEnv = "CROSSTALK_TEST_OPEN_KMSG"

// realtimeHelperEnv makes the test binary, re-run, only try the probe's
// real-time priority (sense.RealtimeAllowed) and exit 1 if refused.
const realtimeHelperEnv = "CROSSTALK_TEST_REALTIME"

func TestMain(m *testing.M) {
	if os.Getenv(realtimeHelperEnv) == "1" {
		if err := sense.RealtimeAllowed(); err != nil {
			fmt.Fprintln(os.Stderr, "probe:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(kmsgHelperEnv) == "1" {
		h, err := host.Open("/")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		failed := false
		if ok, why := sense.KernelReportsBusLocks(h, func(string) bool { return true }); !ok {
			fmt.Fprintln(os.Stderr, "doctor: "+why)
			failed = true
		}
		k, err := sense.OpenKernelBusLocks(h)
		if err == nil {
			_, err = k.Read()
			k.Close()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "agent:", err)
			failed = true
		}
		if failed {
			os.Exit(1)
		}
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "crosstalk-ops-deploy-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "crosstalk")
	build := exec.Command("go", "build", "-o", binary, "./cmd/crosstalk")
	build.Dir = ".."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building crosstalk: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// unit is a parsed systemd unit file: section -> key -> values (a key may repeat).
type unit map[string]map[string][]string

func (u unit) get(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// words is every value of a list-valued key, split on spaces.
func (u unit) words(section, key string) []string {
	var out []string
	for _, v := range u[section][key] {
		out = append(out, strings.Fields(v)...)
	}
	return out
}

func parseUnit(t *testing.T, file string) (unit, string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	u := unit{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not a key=value line in a section: %q", file, n, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u, string(b)
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
