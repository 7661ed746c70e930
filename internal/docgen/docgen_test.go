package docgen_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/crosstalk-project/crosstalk/internal/cli"
	"github.com/crosstalk-project/crosstalk/internal/docgen"
)

func newRoot() *cobra.Command {
	return cli.NewRoot(cli.Build{Version: "1.2.3", Commit: "abc1234"}, io.Discard, io.Discard)
}

// visible is every command a user can run under c, c included, as its
// man page name (crosstalk-lab-run).
func visible(c *cobra.Command) []string {
	names := []string{strings.ReplaceAll(c.CommandPath(), " ", "-")}
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, visible(sub)...)
		}
	}
	return names
}

func TestMan(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1767225600") // 2026-01-01
	dir := filepath.Join(t.TempDir(), "man1")
	root := newRoot()
	if err := docgen.Man(root, "1.2.3", dir); err != nil {
		t.Fatal(err)
	}
	names := visible(root)
	if len(names) < 10 {
		t.Fatalf("the command tree has only %v", names)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(names) {
		t.Errorf("%d pages for %d commands", len(entries), len(names))
	}
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, name+".1"))
		if err != nil {
			t.Errorf("no page for %s: %v", name, err)
			continue
		}
		page := string(b)
		// go-md2man puts .nh (no hyphenation) before the title line.
		first := strings.TrimPrefix(page, ".nh\n")
		title := `.TH "` + strings.ToUpper(name) + `" "1" "Jan 2026" "crosstalk 1.2.3" "crosstalk manual"`
		if !strings.HasPrefix(first, title+"\n") {
			t.Errorf("%s.1 does not start with %s:\n%.200s", name, title, page)
		}
		for _, section := range []string{".SH NAME\n" + name + " - ", ".SH SYNOPSIS", ".SH DESCRIPTION"} {
			if !strings.Contains(page, section) {
				t.Errorf("%s.1 lacks %q", name, section)
			}
		}
		if strings.Contains(page, "spf13/cobra") {
			t.Errorf("%s.1 carries the generator's tag", name)
		}
	}
	// The top page names every subcommand, each page its children.
	for _, c := range append([]*cobra.Command{root}, root.Commands()...) {
		if !c.IsAvailableCommand() && c != root {
			continue
		}
		page, _ := os.ReadFile(filepath.Join(dir, strings.ReplaceAll(c.CommandPath(), " ", "-")+".1"))
		for _, sub := range c.Commands() {
			ref := `\fB` + strings.ReplaceAll(sub.CommandPath(), " ", "-") + `(1)\fP`
			switch named := strings.Contains(string(page), ref); {
			case sub.IsAvailableCommand() && !named:
				t.Errorf("the page of %s does not name %s", c.CommandPath(), sub.Name())
			case !sub.IsAvailableCommand() && named:
				t.Errorf("the page of %s names the hidden %s", c.CommandPath(), sub.Name())
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "crosstalk-gen.1")); err == nil {
		t.Error("the hidden gen command has a page")
	}
	// Where groff is installed, it reads every page without a warning.
	if _, err := exec.LookPath("groff"); err == nil {
		for _, name := range names {
			out, err := exec.Command("groff", "-k", "-man", "-Tutf8", "-ww", "-z", filepath.Join(dir, name+".1")).CombinedOutput()
			if err != nil || len(out) > 0 {
				t.Errorf("groff %s.1: %v\n%s", name, err, out)
			}
		}
	}
}

func TestCompletions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "completions")
	if err := docgen.Completions(newRoot(), dir); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file  string
		want  []string
		shell string // checks the syntax with -n where installed
	}{
		{docgen.BashFile, []string{"__start_crosstalk()\n", "complete -o default -F __start_crosstalk crosstalk"}, "bash"},
		{docgen.ZshFile, []string{"#compdef crosstalk\n", "_crosstalk()\n"}, "zsh"},
		{docgen.FishFile, []string{"complete -c crosstalk ", "function __crosstalk_perform_completion"}, "fish"},
	} {
		b, err := os.ReadFile(filepath.Join(dir, tc.file))
		if err != nil {
			t.Errorf("%s: %v", tc.file, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s lacks %q", tc.file, w)
			}
		}
		if _, err := exec.LookPath(tc.shell); err == nil {
			if out, err := exec.Command(tc.shell, "-n", filepath.Join(dir, tc.file)).CombinedOutput(); err != nil {
				t.Errorf("%s -n %s: %v\n%s", tc.shell, tc.file, err, out)
			}
		}
	}
}

func TestCompletionsUnwritableDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	if err := docgen.Completions(newRoot(), filepath.Join(file, "sub")); err == nil {
		t.Error("writing under a file succeeded")
	}
	if err := docgen.Man(newRoot(), "1.2.3", filepath.Join(file, "sub")); err == nil {
		t.Error("writing man pages under a file succeeded")
	}
}
