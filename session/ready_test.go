package session

import (
	"os"
	"path/filepath"
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
