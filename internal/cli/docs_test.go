package cli

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/crosstalk-project/crosstalk/internal/agent"
)

// The documentation's examples are run here, so that what a reader copies
// works:
//
//   - every line of a ```sh block is a command. crosstalk commands that only
//     read (doctor, plan of a spec or of status files, sim list, a simulated
//     built-in scenario, lab list, lab suite --list, --help) run for real
//     against the cobra root, and a `| jq FILTER` after them is evaluated on
//     their JSON; the others (the agent, the lab's live tenants, loads,
//     restore) must name a real command with flags and arguments it accepts,
//     and the repository files they name must exist. make targets must exist
//     in the Makefile, commands of other programs must name repository
//     paths that exist.
//   - a plain ``` block whose first line is `$ crosstalk …` is recorded
//     output: the command runs, and every line shown (but lines cut with …)
//     appears in its output, in order.
//   - a ```yaml block starts with a comment that says what it is: the path of
//     a repository file it must mean the same as, or "agent configuration"
//     (it must load as one).
//
// cobra's Example of every command is held to the same rules as a ```sh
// block. Links between the documents must resolve, anchors included.

// docFiles are the documents whose examples and links are checked, relative
// to the repository root.
func docFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	for _, d := range docs {
		rel, _ := filepath.Rel(repoRoot, d)
		files = append(files, rel)
	}
	if len(files) < 2 {
		t.Fatalf("no documents under docs/: %v", files)
	}
	return files
}

const repoRoot = "../.."

type fence struct {
	file  string
	line  int // of the opening fence, 1-based
	info  string
	lines []string
}

func (f fence) String() string { return fmt.Sprintf("%s:%d", f.file, f.line) }

// fences returns the fenced code blocks of a Markdown file, and its text
// outside them.
func fences(t *testing.T, file string) (blocks []fence, prose []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	var cur *fence
	for i, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			if cur == nil {
				cur = &fence{file: file, line: i + 1, info: strings.TrimSpace(strings.TrimPrefix(line, "```"))}
			} else {
				blocks = append(blocks, *cur)
				cur = nil
			}
			continue
		}
		if cur != nil {
			cur.lines = append(cur.lines, line)
		} else {
			prose = append(prose, line)
		}
	}
	if cur != nil {
		t.Errorf("%s: a code block opened at line %d is never closed", file, cur.line)
	}
	return blocks, prose
}

// words splits a command line as the shell would for these examples:
// quotes group, an unquoted # starts a comment, | and && separate commands.
func words(line string) [][]string {
	var cmds [][]string
	var cmd []string
	var w strings.Builder
	inWord, quote := false, rune(0)
	flush := func() {
		if inWord {
			cmd = append(cmd, w.String())
			w.Reset()
			inWord = false
		}
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				w.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			flush()
		case r == '#' && !inWord:
			flush()
			return append(cmds, cmd)
		case r == '|' || r == '&' && i+1 < len(rs) && rs[i+1] == '&':
			flush()
			if r == '&' {
				i++
				cmd = append(cmd, "&&")
			} else {
				cmd = append(cmd, "|")
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	flush()
	return append(cmds, cmd)
}

// pipeline is one example: a command, then jq filters it is piped into.
type pipeline struct {
	argv []string
	jq   []string
}

// parseExample turns an example line into the commands it runs (several
// when joined by &&).
func parseExample(line string) ([]pipeline, error) {
	var out []pipeline
	for _, toks := range words(line) {
		var cur *pipeline
		redirect := false
		for _, tok := range toks {
			switch {
			case redirect:
				// A redirection's file is the reader's.
				redirect = false
			case tok == ">" || tok == ">>":
				redirect = true
			case tok == "&&":
				cur = nil
			case tok == "|":
				if cur == nil {
					return nil, fmt.Errorf("a pipe with nothing before it")
				}
				cur.jq = append(cur.jq, "")
			case cur == nil:
				out = append(out, pipeline{argv: []string{tok}})
				cur = &out[len(out)-1]
			case len(cur.jq) > 0:
				cur.jq[len(cur.jq)-1] += " " + tok
			default:
				cur.argv = append(cur.argv, tok)
			}
		}
	}
	for i := range out {
		// sudo, taskset and VAR=value prefixes change who runs it and
		// where, not what runs.
		argv := out[i].argv
		for len(argv) > 0 {
			switch {
			case argv[0] == "sudo" || regexp.MustCompile(`^[A-Z_]+=`).MatchString(argv[0]):
				argv = argv[1:]
				continue
			case argv[0] == "taskset" && len(argv) > 2 && argv[1] == "-c":
				argv = argv[3:]
				continue
			}
			break
		}
		if len(argv) == 0 {
			return nil, fmt.Errorf("no command in %q", line)
		}
		out[i].argv = argv
		for j, f := range out[i].jq {
			out[i].jq[j] = strings.TrimSpace(f)
		}
	}
	return out, nil
}

// exampleChecker checks examples against the repository at root (the
// working directory while crosstalk commands run: examples name paths
// relative to it, as a reader runs them).
type exampleChecker struct {
	root    string
	targets []string // the Makefile's
}

func newExampleChecker(t *testing.T) exampleChecker {
	t.Helper()
	t.Chdir(repoRoot)
	return exampleChecker{root: ".", targets: makeTargets(t, ".")}
}

// command runs or checks one documented command; it returns the output of a
// crosstalk command that ran.
func (c exampleChecker) command(t *testing.T, p pipeline) (ran bool, stdout string) {
	t.Helper()
	prog, args := p.argv[0], p.argv[1:]
	switch prog {
	case "crosstalk", "./crosstalk":
		return c.crosstalk(t, args, p.jq)
	case "make":
		for _, a := range args {
			if !strings.Contains(a, "=") && !slices.Contains(c.targets, a) {
				t.Errorf("make %s: no such target in the Makefile", a)
			}
		}
	case "go", "helm", "systemctl", "tar", "scripts/fuzz.sh", "e2e/libvirt/run.sh", ".ci/run":
		if strings.Contains(prog, "/") {
			if st, err := os.Stat(filepath.Join(c.root, prog)); err != nil || st.Mode()&0o111 == 0 {
				t.Errorf("%s is not an executable of the repository: %v", prog, err)
			}
		}
		if prog == "systemctl" && slices.Contains(args, "crosstalk") {
			c.mustExist(t, "deploy/systemd/crosstalk.service")
		}
		for _, a := range args {
			if strings.HasPrefix(a, "./") || strings.Contains(a, "/") && !strings.HasPrefix(a, "/") && !strings.Contains(a, "=") {
				c.mustExist(t, strings.TrimSuffix(a, "/..."))
			}
		}
	default:
		t.Errorf("%s: a program this test does not know how to check; teach it, or show the example as output", prog)
	}
	if len(p.jq) > 0 && prog != "crosstalk" && prog != "./crosstalk" {
		t.Errorf("%s piped into %v: only crosstalk's JSON is checked", prog, p.jq)
	}
	return false, ""
}

func (c exampleChecker) mustExist(t *testing.T, rel string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(c.root, rel)); err != nil {
		t.Errorf("the example names %s, which the repository does not have", rel)
	}
}

// readOnly reports whether a crosstalk command only reads (the host, a
// tree, a spec) and is quick, so the test runs it for real.
func readOnly(cmd *cobra.Command, args []string) bool {
	has := func(f string) bool { return slices.Contains(args, f) }
	if has("--help") || has("-h") {
		return true
	}
	switch cmd.CommandPath() {
	case "crosstalk doctor":
		return !has("--capture")
	case "crosstalk plan":
		// A spec the repository has, or the status files of a tree (this
		// host may run no domains).
		if has("--apply") || has("--from-libvirt") {
			return false
		}
		if pos := cmd.Flags().Args(); len(pos) == 1 {
			_, err := os.Stat(pos[0])
			return err == nil
		}
		return cmd.Flags().Changed("root")
	case "crosstalk sim list", "crosstalk lab list", "crosstalk version":
		return true
	case "crosstalk lab suite":
		return has("--list")
	case "crosstalk sim suite":
		// A listing, or a few runs (a tenth of a second each) with nothing
		// written to disk.
		runs, err := cmd.Flags().GetInt("runs")
		return has("--list") || err == nil && runs <= 5 && !has("--out")
	case "crosstalk lab report":
		// Printing a saved result's text report only reads it.
		return !has("--out")
	case "crosstalk sim run":
		// A built-in scenario other than the 1,000-tenant one (15 s), with
		// nothing kept on disk.
		pos := cmd.Flags().Args()
		return len(pos) == 1 && !strings.Contains(pos[0], ".") && pos[0] != "scale" && !has("--keep-tree") && !has("--out")
	}
	return false
}

func (c exampleChecker) crosstalk(t *testing.T, args, jq []string) (bool, string) {
	t.Helper()
	root := NewRoot(Build{Version: "v0.0.0-test", Commit: "abc123"}, &strings.Builder{}, &strings.Builder{})
	cmd, rest, err := root.Find(args)
	if err != nil {
		t.Errorf("crosstalk %s: %v", strings.Join(args, " "), err)
		return false, ""
	}
	if cmd == root && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		t.Errorf("crosstalk %s: no such command", args[0])
		return false, ""
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Errorf("crosstalk %s: %v", strings.Join(args, " "), err)
		return false, ""
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		t.Errorf("crosstalk %s: %v", strings.Join(args, " "), err)
	}
	if err := cmd.ValidateRequiredFlags(); err != nil {
		t.Errorf("crosstalk %s: %v", strings.Join(args, " "), err)
	}
	for _, a := range args {
		// Repository files the example names; absolute paths are the
		// reader's (a state directory, an output directory).
		if strings.Contains(a, "/") && !strings.HasPrefix(a, "/") && !strings.HasPrefix(a, "-") {
			c.mustExist(t, a)
		}
	}
	if !readOnly(cmd, args) {
		return false, ""
	}
	stdout, stderr, err := run(t, append(slices.Clone(args), "--log-level", "warn")...)
	if err != nil {
		t.Errorf("crosstalk %s: %v\n%s", strings.Join(args, " "), err, stderr)
		return true, stdout
	}
	for _, f := range jq {
		if err := checkJQ(stdout, f); err != nil {
			t.Errorf("crosstalk %s | %s: %v", strings.Join(args, " "), f, err)
		}
	}
	return true, stdout
}

// checkJQ evaluates a jq path filter (.a.b[].c or .[].a, with -r or -c) on a
// document and fails when it would yield nothing or null, as jq's would on a
// key that is not there.
func checkJQ(doc, filter string) error {
	fields := strings.Fields(filter)
	if len(fields) == 0 || fields[0] != "jq" {
		return fmt.Errorf("piped into %q, not jq", filter)
	}
	var path string
	for _, f := range fields[1:] {
		switch {
		case f == "-r" || f == "-c":
		case strings.HasPrefix(f, "."):
			if path != "" {
				return fmt.Errorf("two filters in %q", filter)
			}
			path = f
		default:
			return fmt.Errorf("jq argument %q is beyond what this test evaluates", f)
		}
	}
	if !regexp.MustCompile(`^(\.\[\])?(\.[A-Za-z_][A-Za-z0-9_]*(\[\])?)+$`).MatchString(path) {
		return fmt.Errorf("filter %q is beyond the paths this test evaluates (.key, .key[], a leading .[])", path)
	}
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		return fmt.Errorf("the output is not JSON: %v", err)
	}
	vals := []any{v}
	if rest, ok := strings.CutPrefix(path, ".[]"); ok {
		arr, ok := v.([]any)
		if !ok {
			return fmt.Errorf(".[]: the output is not an array")
		}
		vals, path = arr, rest
	}
	for _, step := range regexp.MustCompile(`\.[A-Za-z_][A-Za-z0-9_]*(\[\])?`).FindAllString(path, -1) {
		key, iter := strings.TrimSuffix(step[1:], "[]"), strings.HasSuffix(step, "[]")
		var next []any
		for _, cur := range vals {
			m, ok := cur.(map[string]any)
			if !ok {
				return fmt.Errorf("%s: not an object", step)
			}
			x, ok := m[key]
			if !ok || x == nil {
				return fmt.Errorf("%s: no such key in the output (it has %v)", step, slices.Sorted(maps.Keys(m)))
			}
			if !iter {
				next = append(next, x)
				continue
			}
			arr, ok := x.([]any)
			if !ok {
				return fmt.Errorf("%s: not an array", step)
			}
			next = append(next, arr...)
		}
		vals = next
	}
	if len(vals) == 0 {
		return fmt.Errorf("%s yields nothing", path)
	}
	return nil
}

func makeTargets(t *testing.T, root string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`).FindAllStringSubmatch(string(b), -1) {
		targets = append(targets, m[1])
	}
	return targets
}

func TestDocsExamples(t *testing.T) {
	var blocks []fence
	for _, file := range docFiles(t) {
		bs, _ := fences(t, file)
		blocks = append(blocks, bs...)
	}
	c := newExampleChecker(t)
	ranAny := false
	{
		for _, b := range blocks {
			switch {
			case b.info == "sh":
				for i, line := range b.lines {
					if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
						continue
					}
					t.Run(fmt.Sprintf("%s:%d", b.file, b.line+1+i), func(t *testing.T) {
						ps, err := parseExample(line)
						if err != nil {
							t.Fatal(err)
						}
						for _, p := range ps {
							if ran, _ := c.command(t, p); ran {
								ranAny = true
							}
						}
					})
				}
			case b.info == "" && len(b.lines) > 0 && strings.HasPrefix(b.lines[0], "$ crosstalk "):
				t.Run(b.String(), func(t *testing.T) { c.recordedOutput(t, b) })
			case b.info == "yaml":
				t.Run(b.String(), func(t *testing.T) { c.yamlBlock(t, b) })
			case b.info != "":
				t.Errorf("%s: a ```%s block; this test knows sh, yaml and plain output", b, b.info)
			}
		}
	}
	if !ranAny {
		t.Error("no documented command ran for real")
	}
}

// checkRecordedOutput runs a `$ crosstalk …` block's command and finds each
// line it shows in the output, in order; lines with … are cut and skipped.
func (c exampleChecker) recordedOutput(t *testing.T, b fence) {
	ps, err := parseExample(strings.TrimPrefix(b.lines[0], "$ "))
	if err != nil || len(ps) != 1 {
		t.Fatalf("%q: %v", b.lines[0], err)
	}
	ran, out := c.command(t, ps[0])
	if !ran {
		t.Fatalf("%q is shown as output but is not a command this test may run", b.lines[0])
	}
	got := strings.Split(out, "\n")
	for i := range got {
		got[i] = strings.TrimRight(got[i], " ")
	}
	at := 0
	for _, want := range b.lines[1:] {
		want = strings.TrimRight(want, " ")
		if want == "" || strings.Contains(want, "…") {
			continue
		}
		j := slices.Index(got[at:], want)
		if j < 0 {
			t.Errorf("the document shows a line the command does not print (in this order):\n%s\noutput:\n%s", want, out)
			return
		}
		at += j + 1
	}
}

// checkYAMLBlock holds a YAML example to what its first comment says it is.
func (c exampleChecker) yamlBlock(t *testing.T, b fence) {
	if len(b.lines) == 0 || !strings.HasPrefix(b.lines[0], "# ") {
		t.Fatal("a YAML example must start with a comment saying what it is: a repository path or \"agent configuration\"")
	}
	what := strings.TrimPrefix(b.lines[0], "# ")
	text := strings.Join(b.lines, "\n")
	if what == "agent configuration" {
		if _, err := agent.ParseConfig([]byte(text), b.String()); err != nil {
			t.Error(err)
		}
		return
	}
	file, err := os.ReadFile(filepath.Join(c.root, what))
	if err != nil {
		t.Fatalf("%q names no repository file: %v", what, err)
	}
	var doc, ref any
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(file, &ref); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(doc, ref) {
		t.Errorf("the example differs from %s:\n%v\n%v", what, doc, ref)
	}
}

// Every Example of every command is a sh block of its own.
func TestHelpExamples(t *testing.T) {
	root := NewRoot(Build{Version: "v0.0.0-test"}, &strings.Builder{}, &strings.Builder{})
	c := newExampleChecker(t)
	var walk func(c *cobra.Command)
	seen := 0
	walk = func(cmd *cobra.Command) {
		for _, line := range strings.Split(cmd.Example, "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			seen++
			t.Run(cmd.CommandPath()+": "+line, func(t *testing.T) {
				ps, err := parseExample(line)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range ps {
					c.command(t, p)
				}
			})
		}
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(root)
	if seen == 0 {
		t.Fatal("no command has an example")
	}
}

// githubSlug is the anchor GitHub gives a heading.
func githubSlug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestDocsLinksResolve(t *testing.T) {
	anchors := map[string][]string{} // repository-relative file → its heading slugs
	slugsOf := func(file string) []string {
		if a, ok := anchors[file]; ok {
			return a
		}
		_, prose := fences(t, file)
		var a []string
		for _, line := range prose {
			if h, ok := strings.CutPrefix(line, "#"); ok {
				a = append(a, githubSlug(strings.TrimLeft(h, "#")))
			}
		}
		anchors[file] = a
		return a
	}
	link := regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	checked := 0
	for _, file := range docFiles(t) {
		_, prose := fences(t, file)
		text := strings.Join(prose, "\n")
		// Inline code is not a link.
		text = regexp.MustCompile("`[^`]*`").ReplaceAllStringFunc(text, func(s string) string {
			if strings.Contains(s, "](") {
				return ""
			}
			return s
		})
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			path, anchor, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(filepath.Join(repoRoot, dest)); err != nil {
					t.Errorf("%s: link %s: %s does not exist", file, target, dest)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s: link %s: an anchor into a file that is not Markdown", file, target)
				continue
			}
			if !slices.Contains(slugsOf(dest), anchor) {
				t.Errorf("%s: link %s: %s has no heading #%s (it has %v)", file, target, dest, anchor, slugsOf(dest))
			}
		}
	}
	if checked == 0 {
		t.Error("no links checked")
	}
}

// The README's two set-up commands are the Makefile's run and test targets,
// make run is what the README says it is, and CI runs make test.
func TestReadmeSetUpCommands(t *testing.T) {
	blocks, prose := fences(t, "README.md")
	var first []string
	for _, b := range blocks {
		if b.info == "sh" && slices.ContainsFunc(b.lines, func(l string) bool { return strings.HasPrefix(l, "make ") }) {
			first = b.lines
			break
		}
	}
	var cmds []string
	for _, l := range first {
		cmd, _, _ := strings.Cut(l, "#")
		cmds = append(cmds, strings.TrimSpace(cmd))
	}
	if !slices.Equal(cmds, []string{"make run", "make test"}) {
		t.Errorf("the README's first make block is %q, want make run then make test", cmds)
	}
	mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^run: build\n\t\$\(BIN\) (.+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile's run target is not `run: build` and one $(BIN) command")
	}
	said := strings.Join(strings.Fields(strings.Join(prose, " ")), " ")
	if want := "./crosstalk " + string(m[1]); !strings.Contains(said, want) {
		t.Errorf("the README does not say make run is %q", want)
	}
	ci, err := os.ReadFile(filepath.Join(repoRoot, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^make test$`).Match(ci) {
		t.Error(".ci/run does not call make test, the README's test command")
	}
}

func TestCheckJQ(t *testing.T) {
	for _, tc := range []struct {
		doc, filter string
		ok          bool
	}{
		{`{"a":{"b":[{"c":1}]}}`, "jq .a.b[].c", true},
		{`{"a":{"b":[]}}`, "jq .a.b[].c", false},
		{`{"a":1}`, "jq -r .b", false},
		{`[{"name":"x"},{"name":"y"}]`, "jq -r .[].name", true},
		{`[{"name":"x"},{"other":"y"}]`, "jq .[].name", false},
		{`{"name":"x"}`, "jq .[].name", false},
		{`[]`, "jq .[].name", false},
		{`[{"a":1}]`, "jq .[0].a", false},
	} {
		if err := checkJQ(tc.doc, tc.filter); (err == nil) != tc.ok {
			t.Errorf("checkJQ(%s, %q) = %v, want ok=%v", tc.doc, tc.filter, err, tc.ok)
		}
	}
}
