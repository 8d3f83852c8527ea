package session

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tttrace/tttrace/elfx"
	"github.com/tttrace/tttrace/ttmetal"
)

// TestPreparedAhead checks that a library prepared while BPF loads gives
// Library what preparing it then would have: the same verdict and error,
// and that a file replaced in between is prepared again, not taken.
func TestPreparedAhead(t *testing.T) {
	dir := t.TempDir()
	so := buildLayoutsFixture(t, dir)
	opts := ttmetal.Options{Debug: elfx.Debug{Roots: []string{}}}
	b := &bpfBackend{cfg: &Config{Analysis: opts}}
	type outcome struct {
		lib  bool
		v    Verdict
		err  string
		prep bool
	}
	run := func(path string, recognise bool) outcome {
		lib, prep, v, err := b.prepared(path, recognise)
		o := outcome{lib: lib != nil, v: v, prep: prep != nil}
		if err != nil {
			o.err = err.Error()
		}
		if lib != nil {
			lib.Close()
		}
		return o
	}
	for _, recognise := range []bool{true, false} {
		explicit := ""
		if !recognise {
			explicit = so
		}
		b.ahead = nil
		want := run(so, recognise)
		b.ahead = prepareAhead([]string{so, so}, explicit, opts)
		if len(b.ahead) != 1 {
			t.Fatalf("%d libraries prepared for one path", len(b.ahead))
		}
		if got := run(so, recognise); got != want {
			t.Errorf("recognise=%v: prepared ahead %+v, then %+v", recognise, got, want)
		}
		if len(b.ahead) != 0 {
			t.Errorf("recognise=%v: the library prepared ahead is still held", recognise)
		}
	}
	// Prepared ahead (and refused: not TT-Metal), then the path names
	// another file, not an ELF: what was prepared ahead is not taken.
	b.ahead = prepareAhead([]string{so}, so, opts)
	<-b.ahead[so].done
	if b.ahead[so].err == nil {
		t.Fatal("a library that is not TT-Metal prepared without error")
	}
	if err := os.WriteFile(filepath.Join(dir, "x"), []byte("not an ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "x"), so); err != nil {
		t.Fatal(err)
	}
	got := run(so, false)
	if got.v != LibRefused || got.err == "" || got.lib {
		t.Errorf("replaced file: %+v, want refused as not a library", got)
	}
	b.ahead = nil
	if want := run(so, false); got != want {
		t.Errorf("replaced file: prepared ahead %+v, then %+v", got, want)
	}
	b.dropAhead()
}
