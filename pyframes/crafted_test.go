package pyframes

import (
	"debug/elf"
	"testing"
	"time"

	"github.com/tttrace/tttrace/internal/crafted"
)

// DWARF whose type chains loop (issue 23): a typedef of itself overflowed
// Go's stack inside debug/dwarf (fatal, no recover), a const of itself
// looped. Every process's executable is read under --all.
func TestDWARFTypeLoops(t *testing.T) {
	for name, dies := range map[string][]crafted.DIE{
		"typedef": crafted.LoopTypedef("PyCodeObject"),
		"const":   crafted.LoopConst("PyCodeObject"),
	} {
		t.Run(name, func(t *testing.T) {
			p, err := crafted.File{Sections: crafted.DWARFSections(dies)}.Write(t.TempDir(), "python3.12")
			if err != nil {
				t.Fatal(err)
			}
			ef, err := elf.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer ef.Close()
			done := make(chan error, 1)
			go func() {
				_, err := offsetsFromDWARF(ef, 12, Offsets{})
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil {
					t.Error("offsets from a looping type")
				}
				t.Log(err)
			case <-time.After(5 * time.Second):
				t.Fatal("offsetsFromDWARF did not return")
			}
		})
	}
}
