package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crosstalk-project/crosstalk/internal/cgroup"
	"github.com/crosstalk-project/crosstalk/internal/lab"
	"github.com/crosstalk-project/crosstalk/internal/testenv"
)

// The lab starts its tenants through this very binary (os.Executable):
// `BIN __tenant-exec -- BIN load …`. So this test binary must act as
// crosstalk for those two subcommands, and as a test otherwise.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == lab.ExecShim || os.Args[1] == "load") {
		os.Exit(Execute(Build{Version: "v0.0.0-test"}, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// liveSuite skips where the suite cannot run for real: not root, or no
// cgroup cpu controller; and holds the CPU lock for the rest of the test.
func liveSuite(t *testing.T) {
	t.Helper()
	testenv.LiveCgroups(t)
	testenv.LockCPUs(t, 10*time.Minute)
}

// labLeftovers lists the lab cgroups of this test process still present.
func labLeftovers(t *testing.T) []string {
	t.Helper()
	h, l := testenv.LiveCgroups(t)
	var left []string
	for _, d := range cgroup.Open(h, l, "/crosstalk-lab").Dirs() {
		ents, _ := h.ReadDir(d)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), fmt.Sprintf("run-%d-", os.Getpid())) {
				left = append(left, filepath.Join(d, e.Name()))
			}
		}
	}
	return left
}

// One generated run with a split-lock polluter, end to end with the real
// agent as the crosstalk policy, at 2 s phases: a verdict is reached, the
// scores are there, and nothing is left capped (every lab cgroup, with
// whatever quota it had, is gone).
func TestLabSuiteSmoke(t *testing.T) {
	liveSuite(t)
	h, _ := testenv.LiveCgroups(t)
	cpus, err := lab.AllowedCPUs(h)
	if err != nil {
		t.Fatal(err)
	}
	progs := lab.FindPrograms(exec.LookPath)
	seed := int64(-1)
	for s := int64(1); s < 500; s++ {
		g, err := lab.Generate(s, cpus, progs)
		if err != nil {
			t.Fatal(err)
		}
		if g.Polluter == "splitlock" {
			seed = s
			break
		}
	}
	if seed < 0 {
		t.Fatal("no seed below 500 draws a split-lock polluter")
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stdout, stderr, err := runCtx(ctx, "lab", "suite", "--seed", fmt.Sprint(seed), "--runs", "1", "--duration", "2s",
		"--json", "--out", out, "--log-level", "warn")
	if err != nil {
		t.Fatalf("suite: %v\n%s", err, stderr)
	}
	var res lab.SuiteResult
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout)
	}
	if len(res.Runs) != 1 {
		t.Fatalf("%d runs, want 1", len(res.Runs))
	}
	r := res.Runs[0]
	if r.Error != "" {
		t.Fatalf("run failed: %s", r.Error)
	}
	t.Logf("seed %d: %s", seed, strings.TrimSpace(stderr))
	if v := r.Verdict(); v != "caught" && v != "missed" && v != "caught+false" {
		t.Errorf("verdict %q for a polluter run", v)
	}
	if r.Polluter != "splitlock" || r.Seed == nil || *r.Seed != seed {
		t.Errorf("run %+v is not seed %d's split-lock run", r, seed)
	}
	for _, p := range []string{"none", "crosstalk"} {
		if v, ok := r.VictimSlowdown[p]; !ok || v == nil || *v <= 0 {
			t.Errorf("no victim slowdown under %s: %v", p, r.VictimSlowdown)
		}
	}
	// --out keeps the agent's journal of the run, and explain reads it;
	// every proof the live agent ran gives its verdict again from the
	// readings it journalled.
	if want := filepath.Join(out, "journals", r.Name+"-1", "r1-crosstalk.jsonl"); r.Journal != want {
		t.Errorf("journal %q, want %q", r.Journal, want)
	}
	told, _, err := run(t, "explain", "--verify", "--journal", r.Journal)
	if err != nil {
		t.Errorf("explain --verify --journal %s: %v\n%s", r.Journal, err, told)
	} else if r.Convicted && (!strings.Contains(told, "polluter") || !strings.Contains(told, "verified: every one of")) {
		t.Errorf("explain of a run that convicted the polluter does not name it, or checked no proof:\n%s", told)
	}
	// A polluter on the victim's CPUs has its harm beyond CPU use measured
	// (a cpu load in its place), and only such a polluter.
	if shared := r.Placement == lab.PlaceWithVictim; shared != (r.HarmBeyondCPU != nil) {
		t.Errorf("placement %s: harm beyond its CPU use %v", r.Placement, r.HarmBeyondCPU)
	}
	if r.Convicted && r.ConvictionSeconds == nil || r.FirstCapSeconds == nil && r.ConvictionSeconds != nil {
		t.Errorf("inconsistent scores: %+v", r)
	}
	if res.Total.Runs != 1 || res.Total.Recall == nil || res.Total.FalseConvictionRate == nil {
		t.Errorf("totals = %+v", res.Total)
	}
	for _, f := range []string{"suite.json", "suite.html"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	if !strings.Contains(stderr, "gen-") {
		t.Errorf("no progress line on stderr:\n%s", stderr)
	}
	if left := labLeftovers(t); len(left) > 0 {
		t.Errorf("lab cgroups left behind: %v", left)
	}
}

// docCommands returns the commands starting with prefix in the fenced code
// blocks of a markdown file, without their trailing comments.
func docCommands(t *testing.T, file, prefix string) []string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cmds []string
	inCode := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
			continue
		}
		if inCode && strings.HasPrefix(line, prefix) {
			cmd, _, _ := strings.Cut(line, "#")
			cmds = append(cmds, strings.TrimSpace(cmd))
		}
	}
	return cmds
}

// Every `crosstalk lab suite` command docs/lab.md shows runs here as it is
// written: --list ones anywhere, the others as root.
func TestLabSuiteDocExamples(t *testing.T) {
	cmds := docCommands(t, "../../docs/lab.md", "crosstalk lab suite")
	if len(cmds) < 2 {
		t.Fatalf("docs/lab.md shows %d lab suite commands, want the list and a run", len(cmds))
	}
	for _, c := range cmds {
		t.Run(c, func(t *testing.T) {
			// From the repository's root, where the commands name files.
			t.Chdir("../..")
			args := strings.Fields(strings.TrimPrefix(c, "crosstalk "))
			list := strings.Contains(c, "--list")
			if !list {
				liveSuite(t)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			stdout, stderr, err := runCtx(ctx, append(args, "--log-level", "warn")...)
			if err != nil {
				t.Fatalf("%v\n%s", err, stderr)
			}
			if list {
				runs := 0
				for i, a := range args {
					if a == "--runs" {
						fmt.Sscan(args[i+1], &runs)
					}
				}
				if n := strings.Count(stdout, "\ngen-") + strings.Count(stdout[:min(4, len(stdout))], "gen-"); n != runs {
					t.Errorf("listed %d generated runs, want %d:\n%s", n, runs, stdout)
				}
				for _, a := range args {
					if name, ok := strings.CutSuffix(filepath.Base(a), ".yaml"); ok && !strings.Contains(stdout, name) {
						t.Errorf("scenario file %s not listed:\n%s", a, stdout)
					}
				}
				return
			}
			if !strings.Contains(stdout, "RECALL") || strings.Contains(stdout, "error:") {
				t.Errorf("no clean totals:\n%s", stdout)
			}
			if left := labLeftovers(t); len(left) > 0 {
				t.Errorf("lab cgroups left behind: %v", left)
			}
		})
	}
}

// --list draws the same runs for the same seed, and each generated run's
// line comes from its own seed alone.
func TestLabSuiteList(t *testing.T) {
	a, _, err := run(t, "lab", "suite", "--seed", "40", "--runs", "5", "--list")
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := run(t, "lab", "suite", "--seed", "42", "--runs", "3", "--list", "--builtins")
	if err != nil {
		t.Fatal(err)
	}
	la, lb := strings.Split(strings.TrimSpace(a), "\n"), strings.Split(strings.TrimSpace(b), "\n")
	if len(la) != 5 || len(lb) != 3+len(lab.Builtins()) {
		t.Fatalf("listed %d and %d runs:\n%s\n%s", len(la), len(lb), a, b)
	}
	for i := range 3 {
		if la[2+i] != lb[i] {
			t.Errorf("seed %d listed differently:\n%s\n%s", 42+i, la[2+i], lb[i])
		}
	}
	// Named scenarios run alone, unless --runs asks for generated ones too.
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"buslock", "latency"}, []string{"buslock", "latency"}},
		{[]string{"buslock", "--runs", "2", "--seed", "42"}, []string{"gen-42", "gen-43", "buslock"}},
	} {
		out, _, err := run(t, append([]string{"lab", "suite", "--list"}, c.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			got = append(got, strings.Fields(l)[0])
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("lab suite --list %s listed %v, want %v", strings.Join(c.args, " "), got, c.want)
		}
	}
	if _, _, err := run(t, "lab", "suite", "--runs", "0", "--list"); err == nil || !strings.Contains(err.Error(), "nothing to run") {
		t.Errorf("an empty suite: %v", err)
	}
	if _, _, err := run(t, "lab", "suite", "--runs", "1", "--policy", "none"); err == nil || !strings.Contains(err.Error(), "crosstalk policy must be among") {
		t.Errorf("a suite without the crosstalk policy: %v", err)
	}
}
