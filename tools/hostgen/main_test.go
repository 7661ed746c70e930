package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// The committed trees are exactly what the generator writes, and it writes
// the same bytes every time: nobody edits a generated file by hand.
func TestTreesMatchGenerator(t *testing.T) {
	for _, tr := range []*tree{intelSKX2S(), amdMilan1S(), amdNaples2S(), intelSKX4S()} {
		t.Run(tr.name, func(t *testing.T) {
			again := map[string]string{}
			for _, x := range []*tree{intelSKX2S(), amdMilan1S(), amdNaples2S(), intelSKX4S()} {
				if x.name == tr.name {
					again = x.files
				}
			}
			committed := filepath.Join("..", "..", "testdata", "hosts", tr.name)
			seen := 0
			err := filepath.WalkDir(committed, func(p string, e fs.DirEntry, err error) error {
				if err != nil || e.IsDir() {
					return err
				}
				rel, _ := filepath.Rel(committed, p)
				want, ok := tr.files[filepath.ToSlash(rel)]
				if !ok {
					t.Errorf("%s: committed but not generated", rel)
					return nil
				}
				got, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				if !bytes.Equal(got, []byte(want)) {
					t.Errorf("%s differs from the generator's output", rel)
				}
				if again[filepath.ToSlash(rel)] != want {
					t.Errorf("%s: two runs of the generator differ", rel)
				}
				seen++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if seen != len(tr.files) {
				t.Errorf("%d files committed, %d generated: run go run ./tools/hostgen -out testdata/hosts", seen, len(tr.files))
			}
		})
	}
}
