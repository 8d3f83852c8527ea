package ttmetal

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// A FIFO named like the library in a directory searched for candidates:
// it was returned, and opening it blocked tttrace -p for good (issue 23).
// Only regular files are candidates.
func TestCandidatesSkipFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(dir, "libtt_metal.so"), 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "lib")
	os.Mkdir(lib, 0o755)
	real := filepath.Join(lib, "libtt_metal.so.1")
	if err := os.WriteFile(real, []byte("not ELF, but a regular file"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := CandidateLibraries(0, []string{filepath.Join(dir, "run.py")})
	found := false
	for _, c := range got {
		if c == filepath.Join(dir, "libtt_metal.so") {
			t.Errorf("FIFO %s is a candidate", c)
		}
		found = found || c == real
	}
	if !found {
		t.Errorf("the regular file %s is not a candidate: %q", real, got)
	}
}
