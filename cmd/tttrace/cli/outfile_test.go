package cli

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// outputKinds are the ways tttrace makes a file: an output renamed into
// place when complete, one streamed (--all), a snapshot's FILE.STAMP.
var outputKinds = []struct {
	name string
	open func(t *testing.T, path string) io.WriteCloser
}{
	{"output", func(t *testing.T, path string) io.WriteCloser {
		o, err := newOutFile(path, false)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}},
	{"streamed", func(t *testing.T, path string) io.WriteCloser {
		o, err := newOutFile(path, true)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}},
	{"snapshot", func(t *testing.T, path string) io.WriteCloser {
		dot := strings.LastIndexByte(path, '.')
		w, name, err := snapshotFiles(path[:dot])(path[dot+1:])
		if err != nil || name != path {
			t.Fatalf("snapshot file %s: %v", name, err)
		}
		return w
	}},
}

// sharedDir is a directory like /tmp: anyone may create files, only their
// owner (or root) remove them.
func sharedDir(t *testing.T) string {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A file another user created at an output's path before tttrace (root)
// writes there is replaced by a file of tttrace's own, 0600: it does not
// stay theirs, and what tttrace writes never reaches their file (they may
// hold it open).
func TestOutFilePrecreatedByAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (to make a file of another user)")
	}
	const nobody = 65534
	dir := sharedDir(t)
	for _, k := range outputKinds {
		t.Run(k.name, func(t *testing.T) {
			path := filepath.Join(dir, k.name+".20261124T073000.123Z")
			if err := os.WriteFile(path, []byte("planted"), 0o666); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, 0o666); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(path, nobody, nobody); err != nil {
				t.Fatal(err)
			}
			theirs, err := os.Open(path) // the other user keeps it open
			if err != nil {
				t.Fatal(err)
			}
			defer theirs.Close()

			w := k.open(t, path)
			if _, err := w.Write([]byte("root's summary")); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}

			if b, _ := os.ReadFile(path); string(b) != "root's summary" {
				t.Errorf("%s holds %q", path, b)
			}
			st, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			sys := st.Sys().(*syscall.Stat_t)
			if int(sys.Uid) != os.Geteuid() || st.Mode().Perm() != 0o600 || !st.Mode().IsRegular() {
				t.Errorf("%s: owner %d, mode %v; want %d, 0600 (a file of tttrace's own)", path, sys.Uid, st.Mode(), os.Geteuid())
			}
			if b, _ := io.ReadAll(theirs); string(b) != "planted" {
				t.Errorf("the other user's file now holds %q: written through", b)
			}
		})
	}
}

// A hard link planted at an output's path (fs.protected_hardlinks=0) to a
// file tttrace's user owns elsewhere: the output replaces the link, the
// file keeps its content, and the output does not take the linked file's
// mode.
func TestOutFileHardLink(t *testing.T) {
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "secret")
	if err := os.WriteFile(secret, []byte("root only\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(secret, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := sharedDir(t)
	for _, k := range outputKinds {
		t.Run(k.name, func(t *testing.T) {
			path := filepath.Join(dir, k.name+".20261124T073000.123Z")
			if err := os.Link(secret, path); err != nil {
				t.Fatal(err)
			}
			w := k.open(t, path)
			if _, err := w.Write([]byte("summary")); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(secret); string(b) != "root only\n" {
				t.Errorf("the linked file now holds %q", b)
			}
			if b, _ := os.ReadFile(path); string(b) != "summary" {
				t.Errorf("%s holds %q", path, b)
			}
			st, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if n := st.Sys().(*syscall.Stat_t).Nlink; n != 1 || st.Mode().Perm() != 0o600 {
				t.Errorf("%s: %d links, mode %v; want a file of its own, 0600", path, n, st.Mode().Perm())
			}
		})
	}
	if st, _ := os.Stat(secret); st.Sys().(*syscall.Stat_t).Nlink != 1 || st.Mode().Perm() != 0o644 {
		t.Errorf("the linked file: %d links, mode %v; want 1, 0644", st.Sys().(*syscall.Stat_t).Nlink, st.Mode().Perm())
	}
}

// An output in a directory tttrace cannot create files in (root can
// access(2) sysfs for writing, but not create there) fails before tracing
// starts (newOutFile), with one line that says where and why.
func TestOutFileDirNotWritable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (access(2) is right for other users)")
	}
	if f, err := os.CreateTemp("/sys", "tttrace-*"); err == nil {
		f.Close()
		os.Remove(f.Name())
		t.Skip("/sys is writable here")
	}
	_, err := newOutFile("/sys/tttrace.ndjson", false)
	if err == nil {
		t.Fatal("an output in /sys was accepted")
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "/sys/tttrace.ndjson: cannot create files in /sys (permission denied)") {
		t.Errorf("error %q, want one line saying files cannot be created in /sys", msg)
	}
}
