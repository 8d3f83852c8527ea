package stacks

import (
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/internal/crafted"
)

// Files another user controls (issue 23): the tracer runs as root and
// symbolizes every module of every traced process.

func within(t *testing.T, d time.Duration, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("did not return within %v", d)
	}
}

// A .gnu_debuglink naming a FIFO beside the library: opening it for the
// CRC blocked forever; one naming /dev/zero by "..": refused.
func TestDebugLinkFIFO(t *testing.T) {
	for _, link := range []string{"fifo.debug", "../../../../../../../../../../../dev/zero"} {
		dir := t.TempDir()
		if err := unix.Mkfifo(filepath.Join(dir, "fifo.debug"), 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := crafted.File{Sections: []crafted.Section{
			{Name: ".gnu_debuglink", Type: elf.SHT_PROGBITS, Data: crafted.DebugLink(link, 0)},
		}}.Write(dir, "lib.so")
		if err != nil {
			t.Fatal(err)
		}
		c := NewCache()
		c.Debug.Roots = []string{}
		f, err := c.OpenFile(p)
		if err != nil {
			t.Fatal(err)
		}
		within(t, 5*time.Second, func() {
			if df := f.debug(); df != nil {
				t.Errorf("%s: debug file %s", link, df.Path)
			}
		})
	}
}

// A library truncated by its owner while the tracer holds it: reading it
// through a shared mapping raised SIGBUS, which ends the tracer.
func TestTruncatedWhileHeld(t *testing.T) {
	src := "/lib/x86_64-linux-gnu/libc.so.6"
	in, err := os.Open(src)
	if err != nil {
		t.Skip(err)
	}
	defer in.Close()
	p := filepath.Join(t.TempDir(), "libc.so.6")
	out, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	out.Close()
	c := NewCache()
	c.Debug.Roots = []string{} // symbols from this file only
	f, err := c.OpenFile(p)
	if err != nil {
		t.Fatal(err)
	}
	text := f.elf.Section(".text")
	if err := os.Truncate(p, 4096); err != nil {
		t.Fatal(err)
	}
	f.loadCFI()
	fr := f.resolve(text.Addr + 64)
	if fr.Function != "" {
		t.Errorf("a symbol from a truncated file: %+v", fr)
	}
	if r := f.rowFor(text.Addr + 64); r != nil {
		t.Errorf("an unwind row from a truncated file")
	}
}
