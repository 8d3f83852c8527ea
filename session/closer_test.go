package session

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

// TestCloserHoldsUntilReleased: the holder startCloser starts keeps the
// descriptors it was handed until release, and lets them go after it.
// The descriptor handed here is a pipe's write end: its read end sees EOF
// only once every copy is closed, the holder's too. A holder that ends at
// once (true(1)) fails the first read: the tracer's own references to the
// links would then be the last ones, and closing them would wait for the
// kernel's grace periods, one after the other.
func TestCloserHoldsUntilReleased(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	release, err := startCloser([]*os.File{w})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	// Held: nothing to read, no EOF either.
	if err := r.SetReadDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("before release: read %d bytes, %v: the holder let the descriptor go", n, err)
	}
	release()
	if err := r.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Read(buf); err != io.EOF {
		t.Fatalf("after release: read %d bytes, %v; want EOF (the holder ended)", n, err)
	}
}
