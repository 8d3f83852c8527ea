package session

import (
	"os/exec"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tttrace/tttrace/elfx"
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/ttmetal"
)

// A probed library's DWARF is read once, in the background from its
// attach, for both the bank manager's layout (ReadBankManager) and the
// root's (ReadDevices); what the readers get is what ttmetal reads from
// the library itself.
// buildLayoutsFixture builds ttmetal's allocator-layouts fixture with g++
// (and the extra flags) as libtt_metal.so in dir; skips without g++.
func buildLayoutsFixture(t *testing.T, dir string, extra ...string) string {
	t.Helper()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("g++ not installed")
	}
	so := filepath.Join(dir, "libtt_metal.so")
	args := append([]string{"-std=c++17", "-O2", "-shared", "-fPIC", "-Wno-invalid-offsetof"}, extra...)
	args = append(args, "-o", so, "../ttmetal/testdata/allocator_layouts.cpp")
	if out, err := exec.Command("g++", args...).CombinedOutput(); err != nil {
		t.Fatalf("g++: %v\n%s", err, out)
	}
	return so
}

func TestAllocatorLayoutsReadOnce(t *testing.T) {
	so := buildLayoutsFixture(t, t.TempDir(), "-g")
	open := func() *ttmetal.Library {
		lib, err := ttmetal.OpenLibrary(so)
		if err != nil {
			t.Fatal(err)
		}
		return lib
	}
	dbg := elfx.Debug{Roots: []string{}}
	lib := open()
	want := ttmetal.AllocatorLayoutsFromDWARF(lib, dbg)
	lib.Close()
	if want.BankManagerErr != nil || want.RootErr != nil {
		t.Fatalf("fixture: bank manager %v, root %v", want.BankManagerErr, want.RootErr)
	}

	var reads atomic.Int32
	read := allocatorLayouts
	allocatorLayouts = func(lib *ttmetal.Library, dbg elfx.Debug) ttmetal.AllocatorLayouts {
		reads.Add(1)
		return read(lib, dbg)
	}
	t.Cleanup(func() { allocatorLayouts = read })

	m := &memReader{debug: dbg}
	k, err := procfs.KeyOf(so)
	if err != nil {
		t.Fatal(err)
	}
	if !m.track(k, so, open()) {
		t.Fatal("a new library not tracked")
	}
	again := open()
	if m.track(k, so, again) {
		t.Fatal("a library tracked twice")
	}
	again.Close()
	p := m.attached[k]
	if p.symErr != nil || p.addr != want.Root.Contexts || p.slots != want.Root.Slots {
		t.Errorf("g_instances at %#x (%d slots; %v), want %#x (%d)", p.addr, p.slots, p.symErr, want.Root.Contexts, want.Root.Slots)
	}
	// The readers, as a process's first request and its root at attach
	// would, while the read may still be going on.
	var wg sync.WaitGroup
	got := make([]*ttmetal.AllocatorLayouts, 4)
	for i := range got {
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = p.allocLayouts() }()
	}
	wg.Wait()
	for _, g := range got {
		if !reflect.DeepEqual(g.BankManager, want.BankManager) || !reflect.DeepEqual(g.Root, want.Root) ||
			g.BankManagerErr != nil || g.RootErr != nil {
			t.Fatalf("layouts %+v %+v (%v, %v), want %+v %+v", g.BankManager, g.Root, g.BankManagerErr, g.RootErr, want.BankManager, want.Root)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("the library's DWARF read %d times, want once", n)
	}
}
