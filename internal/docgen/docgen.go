// Package docgen writes what a distribution installs beside the binary from
// the command tree itself: man pages and shell completions, so that they
// never drift from the flags and subcommands the binary has.
package docgen

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// The completion files Completions writes; installers rename them into each
// shell's directory (bash wants the bare command name there).
const (
	BashFile = "crosstalk.bash"
	ZshFile  = "_crosstalk"
	FishFile = "crosstalk.fish"
)

// Man writes one section-1 page per available command of root's tree into
// dir (created if missing): crosstalk.1, crosstalk-lab.1, crosstalk-lab-run.1…
// The date in the pages is SOURCE_DATE_EPOCH's when it is set, so that a
// release build gives the same bytes. It marks the tree DisableAutoGenTag:
// the pages say which release they describe, not which tool wrote them.
func Man(root *cobra.Command, version, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	disableAutoGenTag(root)
	err := doc.GenManTreeFromOpts(root, doc.GenManTreeOptions{
		Header: &doc.GenManHeader{
			Section: "1",
			Source:  "crosstalk " + version,
			Manual:  "crosstalk manual",
		},
		Path:             dir,
		CommandSeparator: "-",
	})
	if err != nil {
		return fmt.Errorf("man pages in %s: %w", dir, err)
	}
	return nil
}

func disableAutoGenTag(c *cobra.Command) {
	c.DisableAutoGenTag = true
	for _, sub := range c.Commands() {
		disableAutoGenTag(sub)
	}
}

// Completions writes the bash, zsh and fish completion scripts of root into
// dir (created if missing), as BashFile, ZshFile and FishFile. The scripts
// ask the binary itself for candidates (its hidden __complete command), so
// they stay right as subcommands and flags change.
func Completions(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("completions: %w", err)
	}
	for _, s := range []struct {
		file string
		gen  func(io.Writer) error
	}{
		{BashFile, func(w io.Writer) error { return root.GenBashCompletionV2(w, true) }},
		{ZshFile, root.GenZshCompletion},
		{FishFile, func(w io.Writer) error { return root.GenFishCompletion(w, true) }},
	} {
		if err := writeFile(filepath.Join(dir, s.file), s.gen); err != nil {
			return fmt.Errorf("completions: %w", err)
		}
	}
	return nil
}

func writeFile(path string, gen func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := gen(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}
