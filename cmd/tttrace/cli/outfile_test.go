package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
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
	o, err := newOutFile(old, false)
	if err != nil {
		t.Fatal(err)
	}
	o.Close()
	if s, _ := read(old); s != "previous" {
		t.Errorf("closed unused: %q, want the previous content", s)
	}

	fresh := filepath.Join(dir, "fresh")
	o, _ = newOutFile(fresh, false)
	o.Close()
	if _, ok := read(fresh); ok {
		t.Error("closed unused: a file was made")
	}

	// Tracing ran with nothing to write (the sink closed its file first).
	o, _ = newOutFile(old, false)
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

	o, _ = newOutFile(fresh, false)
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

	if _, err := newOutFile(dir, false); err == nil {
		t.Error("a directory was accepted")
	}
	if _, err := newOutFile(filepath.Join(dir, "no", "such"), false); err == nil {
		t.Error("a file in a missing directory was accepted")
	}
}

// Output files are not followed through links planted where tttrace (root)
// writes: a link at the path is refused up front, and one planted after the
// check is replaced by the rename, not followed. New files are 0600 whatever
// the umask; an existing file keeps its mode; until the output is complete
// the old file stays as it was (a crash leaves no truncated file).
func TestOutFileHostile(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "trace.ndjson")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	if _, err := newOutFile(link, false); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("a symbolic link was accepted: %v", err)
	}

	// Planted between the check and the first write.
	late := filepath.Join(dir, "late.ndjson")
	o, err := newOutFile(late, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, late); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Write([]byte("trace")); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Errorf("the link's target was written: %q", b)
	}
	st, err := os.Lstat(late)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 {
		t.Errorf("late.ndjson: %v, %v; want a regular file, 0600", st.Mode(), err)
	}

	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := newOutFile(fifo, false); err == nil {
		t.Error("a FIFO was accepted")
	}

	// A new file is 0600 even under umask 0.
	old := unix.Umask(0)
	fresh := filepath.Join(dir, "fresh")
	o, _ = newOutFile(fresh, false)
	o.Write([]byte("x"))
	o.Close()
	unix.Umask(old)
	if st, err := os.Stat(fresh); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("new file mode %v, %v; want 0600", st.Mode().Perm(), err)
	}

	// An existing file keeps its mode; until Close it holds its old content.
	kept := filepath.Join(dir, "kept")
	os.WriteFile(kept, []byte("old run"), 0o640)
	os.Chmod(kept, 0o640)
	o, err = newOutFile(kept, false)
	if err != nil {
		t.Fatal(err)
	}
	o.Write([]byte("half of the new"))
	if b, _ := os.ReadFile(kept); string(b) != "old run" {
		t.Errorf("while writing (a crash now): %q, want the old content", b)
	}
	o.Close()
	if b, _ := os.ReadFile(kept); string(b) != "half of the new" {
		t.Errorf("after close: %q", b)
	}
	if st, _ := os.Stat(kept); st.Mode().Perm() != 0o640 {
		t.Errorf("existing file mode became %v, want 0640", st.Mode().Perm())
	}
	// No temporary file is left behind.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tttrace-") {
			t.Errorf("left behind: %s", e.Name())
		}
	}

	// A character device is written in place.
	o, err = newOutFile("/dev/null", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat("/dev/null"); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("/dev/null is no longer a device: %v %v", st.Mode(), err)
	}
}

// Streamed (--all), a file is written in place as it grows, still never
// through a link and 0600 when new.
func TestOutFileStreamed(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("precious"), 0o644)
	path := filepath.Join(dir, "all.ndjson")
	o, err := newOutFile(path, true)
	if err != nil {
		t.Fatal(err)
	}
	o.Write([]byte("line 1\n"))
	if b, _ := os.ReadFile(path); string(b) != "line 1\n" {
		t.Errorf("while tracing: %q, want what was written so far", b)
	}
	o.Close()
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, %v; want 0600", st.Mode().Perm(), err)
	}
	// A link planted after the check is not followed.
	late := filepath.Join(dir, "late")
	o, _ = newOutFile(late, true)
	os.Symlink(victim, late)
	if _, err := o.Write([]byte("x")); err == nil {
		t.Error("wrote through a link planted after the check")
	}
	o.Close()
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Errorf("the link's target was written: %q", b)
	}
	if _, err := newOutFile(late, true); err == nil {
		t.Error("a symbolic link was accepted")
	}
}
