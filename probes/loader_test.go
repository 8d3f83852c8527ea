package probes

import (
	"testing"

	"github.com/tttrace/tttrace/probes/probestest"
)

// TestLoadVerifier loads every program through the kernel verifier with the
// V1 layout and checks the attach table names only programs that exist.
func TestLoadVerifier(t *testing.T) {
	probestest.RequireRoot(t)
	tr, err := Load(Options{RingSize: 1 << 16, FollowChildren: true})
	if err != nil {
		t.Fatalf("load: %+v", err)
	}
	defer tr.Close()
	progs := tr.programs()
	for _, p := range attachTable {
		if progs[p.Program] == nil {
			t.Errorf("attach table names %q, which is not a loaded program", p.Program)
		}
	}
	for _, p := range []string{progAllocEnter, progAllocExit, progCreateEnter, progCreateExit, progFree, progFreeOwned, progDestroyTeardown, progFreeDispose} {
		if progs[p] == nil {
			t.Errorf("the lifecycle plan names %q, which is not a loaded program", p)
		}
	}
	if want := len(attachTable) + 8; len(progs) != want {
		t.Errorf("%d programs loaded, want %d (attach table and lifecycle plan)", len(progs), want)
	}
	if n, err := tr.LostTotal(); err != nil || n != 0 {
		t.Errorf("lost total on a fresh load = %d, %v; want 0, nil", n, err)
	}
	// Close is nil-safe and idempotent.
	if err := tr.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	var nilTracer *Tracer
	if err := nilTracer.Close(); err != nil {
		t.Errorf("nil close: %v", err)
	}
}

func TestLoadRejectsBadRingSize(t *testing.T) {
	if _, err := Load(Options{RingSize: 3 << 12}); err == nil {
		t.Fatal("ring size not a power of two was accepted")
	}
}
