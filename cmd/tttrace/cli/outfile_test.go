package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// An output file is made only when written to or kept: a run that cannot
// start leaves an existing file alone and makes none.
func TestOutFile(t *testing.T) {
	dir := t.TempDir()
	read := func(p string) (string, bool) {
		b, err := os.ReadFile(p)
		return string(b), err == nil
	}

	old := filepath.Join(dir, "old")
	os.WriteFile(old, []byte("previous"), 0o644)
	o, err := newOutFile(old)
	if err != nil {
		t.Fatal(err)
	}
	o.Close()
	if s, _ := read(old); s != "previous" {
		t.Errorf("closed unused: %q, want the previous content", s)
	}

	fresh := filepath.Join(dir, "fresh")
	o, _ = newOutFile(fresh)
	o.Close()
	if _, ok := read(fresh); ok {
		t.Error("closed unused: a file was made")
	}

	// Tracing ran with nothing to write (the sink closed its file first).
	o, _ = newOutFile(old)
	o.Close()
	if err := o.Keep(); err != nil {
		t.Fatal(err)
	}
	if s, ok := read(old); !ok || s != "" {
		t.Errorf("kept after close: %q (exists %v), want empty", s, ok)
	}
	if err := o.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}

	o, _ = newOutFile(fresh)
	if _, err := o.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := o.Keep(); err != nil {
		t.Fatal(err)
	}
	o.Close()
	if s, _ := read(fresh); s != "new" {
		t.Errorf("written: %q", s)
	}
	if _, err := o.Write([]byte("x")); err == nil {
		t.Error("write after close succeeded")
	}

	if _, err := newOutFile(dir); err == nil {
		t.Error("a directory was accepted")
	}
	if _, err := newOutFile(filepath.Join(dir, "no", "such")); err == nil {
		t.Error("a file in a missing directory was accepted")
	}
}
