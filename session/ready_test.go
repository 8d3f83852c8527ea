package session

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// The ready file is made 0600, and a link at its path is refused, its
// target left alone.
func TestWriteReady(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "ready")
	if err := writeReady(p); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("ready file: %v, %v; want mode 0600", st, err)
	}
	target, link := filepath.Join(dir, "target"), filepath.Join(dir, "link")
	if err := os.WriteFile(target, []byte("keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := writeReady(link); err == nil {
		t.Fatal("a symbolic link was followed")
	}
	if b, _ := os.ReadFile(target); string(b) != "keep\n" {
		t.Fatalf("the link's target was written: %q", b)
	}
}

// A file at the ready file's path that another user made first, or a hard
// link planted there to a file elsewhere, is replaced by a new file of
// tttrace's own (0600): the linked file is not written, and the other
// user's file does not get the ready line.
func TestWriteReadyReplaces(t *testing.T) {
	secretDir, dir := t.TempDir(), t.TempDir()
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(secretDir, "secret")
	if err := os.WriteFile(secret, []byte("root only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "ready")
	if err := os.Link(secret, link); err != nil {
		t.Fatal(err)
	}
	if err := writeReady(link); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(secret); string(b) != "root only\n" {
		t.Errorf("the linked file now holds %q", b)
	}
	if b, _ := os.ReadFile(link); string(b) != "ready\n" {
		t.Errorf("ready file: %q", b)
	}

	if os.Geteuid() != 0 {
		t.Skip("needs root (to make a file of another user)")
	}
	theirs := filepath.Join(dir, "theirs")
	if err := os.WriteFile(theirs, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(theirs)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := writeReady(theirs); err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(theirs)
	if err != nil {
		t.Fatal(err)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; int(uid) != os.Geteuid() || st.Mode().Perm() != 0o600 {
		t.Errorf("ready file: owner %d, mode %v; want %d, 0600", uid, st.Mode().Perm(), os.Geteuid())
	}
	if b, _ := io.ReadAll(held); len(b) != 0 {
		t.Errorf("the other user's file now holds %q", b)
	}
}
