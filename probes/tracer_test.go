package probes

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/probes/probestest"
	"github.com/tttrace/tttrace/probes/tables"
	"github.com/tttrace/tttrace/ttmetal"
)

// TestLoadVerifier loads every program through the kernel verifier with the
// V1 layout and checks the attach table names only programs that exist.
func TestLoadVerifier(t *testing.T) {
	probestest.RequireRoot(t)
	tr, err := Load(Options{RingSize: 1 << 16, FollowChildren: true, Ops: true})
	if err != nil {
		t.Fatalf("load: %+v", err)
	}
	defer tr.Close()
	progs, err := tr.loadAll()
	if err != nil {
		t.Fatalf("load: %+v", err)
	}
	table := ttmetal.AttachTablePrograms()
	for _, p := range table {
		if progs[p] == nil {
			t.Errorf("attach table names %q, which is not a loaded program", p)
		}
	}
	for _, p := range ttmetal.LifecyclePrograms {
		if progs[p] == nil {
			t.Errorf("the lifecycle plan names %q, which is not a loaded program", p)
		}
	}
	if progs[ttmetal.ProgOpEnter] == nil {
		t.Errorf("no program %q (TT-NN ops)", ttmetal.ProgOpEnter)
	}
	if want := len(table) + len(ttmetal.LifecyclePrograms) + 5; len(progs) != want {
		t.Errorf("%d programs loaded, want %d (attach table, lifecycle plan, fork, exit, loader, code objects' deallocation, op entries)", len(progs), want)
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

// TestAttachAfterPathGone: the library is read through a path that stops
// resolving before the uprobes go on (under --all, a /proc/PID/root path
// of a process that ended): they go on the inode that was read.
func TestAttachAfterPathGone(t *testing.T) {
	probestest.RequireRoot(t)
	src := filepath.Join(probestest.Replica(t, "gcc-O2"), "libtt_metal.so")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "libtt_metal.so")
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	lib, err := ttmetal.OpenLibrary(path)
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	syms, err := ttmetal.ResolveSymbols(lib)
	if err != nil {
		t.Fatal(err)
	}
	layout, err := ttmetal.ResolveLayout(lib, syms, ttmetal.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	plan, err := ttmetal.ChoosePlan(lib, syms, layout.Layout, ttmetal.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	tr, err := Load(Options{RingSize: 1 << 16})
	if err != nil {
		t.Fatalf("load: %+v", err)
	}
	defer tr.Close()
	if err := tr.AttachPlan(lib, syms, plan, layout.Layout); err != nil {
		t.Fatalf("attach after the path went away: %v", err)
	}
	if len(tr.AttachPoints) != len(plan.AttachPoints) || len(tr.links) == 0 {
		t.Errorf("%d sites and %d links attached, want the plan's %d sites", len(tr.AttachPoints), len(tr.links), len(plan.AttachPoints))
	}
}

// TestVerifierWork bounds the instructions the verifier walks for each
// program with stacks and known stacks on (tttrace's defaults): its time is
// paid by every run before tracing starts. A bpf_loop callback whose
// context holds a counter starting as a known constant is checked again at
// every step on Linux 6.7+ (the Python frame walk once cost 72,000
// instructions and 0.1 s per alloc program, three times over), and a walk
// inlined into a program is checked again on every path that reaches it
// (the known-stack walk inlined: ~30,000 per stack-capturing program); the
// budget catches either coming back. The heaviest program takes ~15,900 on
// Linux 6.18: ~9,300 before the known-stack tables became arrays read
// under a sequence count, two slots a set (bpf/stack.h: +~4,000; ~28,000
// when the walk compared a chain with a branch per frame), and the Python
// walk took its frames from one copy of the data stack (bpf/python.h:
// +~2,300).
func TestVerifierWork(t *testing.T) {
	probestest.RequireRoot(t)
	// 20,000 since the threads' memo of their last known native chain
	// (bpf/stack.h, stack_memo_token: ~1,300, its 32 frames compared in
	// one branch-free global function; a j < n mask written in C, which
	// clang made a branch per frame, cost ~13,000), and of their last
	// known Python chain (bpf/pyknown.h, py_memo_token and py_memo_keep:
	// ~1,000 more, the same way; with the mask in C, ~24,000). A known
	// Python chain has up to 64 frames, which py_memo_token compares
	// eight at a time in a global function (py_memo_frames): unrolled
	// over all 64 in one, the heaviest program took 21,175; so, 18,845.
	const budget = 20000
	spec, err := loadTttrace()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"capture_stacks", "known_stacks", "ops_on"} {
		if err := spec.Variables[v].Set(uint8(1)); err != nil {
			t.Fatal(err)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}})
	if err != nil {
		t.Fatalf("load: %+v", err)
	}
	defer coll.Close()
	processed := regexp.MustCompile(`processed (\d+) insns`)
	for name, p := range coll.Programs {
		m := processed.FindStringSubmatch(p.VerifierLog)
		if m == nil {
			t.Errorf("%s: no instruction count in the verifier's statistics:\n%s", name, p.VerifierLog)
			continue
		}
		n, _ := strconv.Atoi(m[1])
		if n > budget {
			t.Errorf("%s: the verifier walked %d instructions, more than %d", name, n, budget)
		}
	}
}

func TestLoadRejectsBadRingSize(t *testing.T) {
	if _, err := Load(Options{RingSize: 3 << 12}); err == nil {
		t.Fatal("ring size not a power of two was accepted")
	}
}

// TestUprobeMechanism: uprobe_multi links are detected exactly on kernels
// that have them (Linux 6.6 and later, from uname), used by default there,
// and SingleUprobes loads the programs as classic uprobes (the fallback of
// older kernels), which the verifier accepts too.
func TestUprobeMechanism(t *testing.T) {
	probestest.RequireRoot(t)
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	release := unix.ByteSliceToString(u.Release[:])
	var major, minor int
	if _, err := fmt.Sscanf(release, "%d.%d", &major, &minor); err != nil {
		t.Fatalf("kernel release %q: %v", release, err)
	}
	want := major > 6 || major == 6 && minor >= 6
	err := HaveUprobeMulti()
	if (err == nil) != want {
		t.Errorf("kernel %s: HaveUprobeMulti() = %v, want supported = %v", release, err, want)
	}
	for _, single := range []bool{false, true} {
		tr, err := Load(Options{RingSize: 1 << 16, SingleUprobes: single})
		if err != nil {
			t.Fatalf("load (single uprobes %v): %+v", single, err)
		}
		if got := tr.UsesUprobeMulti(); got != (want && !single) {
			t.Errorf("single uprobes %v on %s: UsesUprobeMulti() = %v", single, release, got)
		}
		// The loader probe, limited to this process: the link the kernel
		// made says which mechanism the programs were loaded for.
		if err := tr.AttachLoaderTo("/lib64/ld-linux-x86-64.so.2", os.Getpid()); err != nil {
			t.Fatalf("single uprobes %v: attach the loader probe: %v", single, err)
		}
		info, err := tr.links[len(tr.links)-1].Info()
		if err != nil {
			t.Fatal(err)
		}
		wantType := link.PerfEventType
		if want && !single {
			wantType = link.UprobeMultiType
		}
		if info.Type != wantType {
			t.Errorf("single uprobes %v on %s: loader link of type %v, want %v", single, release, info.Type, wantType)
		}
		tr.Close()
	}
}

// TestPlanMapsShared: a map only plan programs use is not made by Load,
// and is made once, before the first program that uses it: programs
// loaded by different loaders, and at different times, share it. The
// growing hash maps are made without preallocation exactly where the
// kernel allows it in tracing programs (6.1).
func TestPlanMapsShared(t *testing.T) {
	probestest.RequireRoot(t)
	tr, err := Load(Options{RingSize: 1 << 16})
	if err != nil {
		t.Fatalf("load: %+v", err)
	}
	defer tr.Close()
	for _, n := range planMaps {
		if tr.maps[n] != nil {
			t.Errorf("map %s made by Load, before any program uses it", n)
		}
	}
	if tr.objs.LcCalls != nil {
		t.Error("lc_calls assigned by Load")
	}
	mapIDs := func(p *ebpf.Program) []ebpf.MapID {
		info, err := p.Info()
		if err != nil {
			t.Fatal(err)
		}
		ids, _ := info.MapIDs()
		return ids
	}
	// The enter program in one call, the exit programs in another, in two
	// loaders.
	enter := []ttmetal.Program{"lc_alloc_enter", "lc_create_enter"}
	if _, err := tr.programsFor(enter[:1]); err != nil {
		t.Fatalf("load: %+v", err)
	}
	if tr.objs.LcCalls == nil {
		t.Fatal("lc_calls not made with the first program that uses it")
	}
	progs, err := tr.programsFor([]ttmetal.Program{"lc_create_enter", "lc_alloc_exit", "lc_create_exit"})
	if err != nil {
		t.Fatalf("load: %+v", err)
	}
	info, err := tr.objs.LcCalls.Info()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := info.ID()
	for _, n := range []ttmetal.Program{"lc_alloc_enter", "lc_create_enter", "lc_alloc_exit", "lc_create_exit"} {
		if !slices.Contains(mapIDs(progs[n]), want) {
			t.Errorf("%s does not use the tracer's lc_calls (map %d): maps %v", n, want, mapIDs(progs[n]))
		}
	}
	for _, n := range growingMaps {
		info, err := tr.maps[n].Info()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := info.Flags&unix.BPF_F_NO_PREALLOC != 0, kernelAtLeast(6, 1); got != want {
			t.Errorf("map %s: not preallocated = %v, want %v (kernel 6.1 or later)", n, got, want)
		}
	}
}

// TestPidTable: what the tracer writes to its mapping of the pid table is
// what the map holds (read back with the bpf syscall), neighbouring pids
// in a word are left alone, and TracesNone follows the traced bits.
func TestPidTable(t *testing.T) {
	probestest.RequireRoot(t)
	tr, err := Load(Options{RingSize: 1 << 16})
	if err != nil {
		t.Fatalf("load: %+v", err)
	}
	defer tr.Close()
	flagsOf := func() []byte {
		v := make([]byte, tr.objs.TracedPids.ValueSize())
		if err := tr.objs.TracedPids.Lookup(uint32(0), v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if !tr.TracesNone() {
		t.Fatal("a new tracer traces some process")
	}
	const last = 1<<22 - 1
	for _, pid := range []uint32{4, 5, 7, last} {
		if err := tr.AddPID(pid); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.AddPID(1 << 22); err == nil {
		t.Error("a pid past the kernel's limit was added")
	}
	if err := tr.SetPython(5, make([]byte, tr.objs.PyProcs.ValueSize())); err != nil {
		t.Fatal(err)
	}
	if err := tr.RemovePID(7); err != nil {
		t.Fatal(err)
	}
	f := flagsOf()
	want := map[int]tables.PidFlag{4: tables.PidTraced, 5: tables.PidTraced | tables.PidPython, last: tables.PidTraced}
	for pid, b := range f {
		if tables.PidFlag(b) != want[pid] {
			t.Errorf("pid %d: flags %#x in the map, want %#x", pid, b, want[pid])
		}
	}
	if !tr.Traced(4) || !tr.Traced(5) || tr.Traced(6) || tr.Traced(7) || tr.TracesNone() {
		t.Error("Traced / TracesNone disagree with the table")
	}
	tr.ClearPython(5)
	for _, pid := range []uint32{4, 5, last} {
		if err := tr.RemovePID(pid); err != nil {
			t.Fatal(err)
		}
	}
	for pid, b := range flagsOf() {
		if b != 0 {
			t.Errorf("pid %d: flags %#x left", pid, b)
		}
	}
	if !tr.TracesNone() {
		t.Error("TracesNone false with no process traced")
	}
}

// TestDetachLater: the uprobe_multi links handed to another process stay
// attached while it holds them, the tracer keeps no reference to them,
// and they are gone once that process exits; the other links (the
// process events) are closed by the tracer. A failed start changes
// nothing.
func TestDetachLater(t *testing.T) {
	probestest.RequireRoot(t)
	if HaveUprobeMulti() != nil {
		t.Skip("no uprobe_multi links on this kernel")
	}
	tr, err := Load(Options{RingSize: 1 << 16})
	if err != nil {
		t.Fatalf("load: %+v", err)
	}
	defer tr.Close()
	if err := tr.AttachProcessEvents(); err != nil {
		t.Fatal(err)
	}
	if err := tr.AttachLoaderTo("/lib64/ld-linux-x86-64.so.2", os.Getpid()); err != nil {
		t.Fatal(err)
	}
	var ids []link.ID
	var multi link.ID
	for _, l := range tr.links {
		info, err := l.Info()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
		if info.Type == link.UprobeMultiType {
			multi = info.ID
		}
	}
	alive := func(id link.ID) bool {
		l, err := link.NewFromID(id)
		if err != nil {
			return false
		}
		l.Close()
		return true
	}
	if err := tr.DetachLater(func([]*os.File) (func(), error) { return nil, errors.New("no") }); err == nil || len(tr.links) != len(ids) {
		t.Fatalf("a failed start: err %v, %d links left of %d", err, len(tr.links), len(ids))
	}
	// The holder: cat, which ends when its stdin closes.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	holder := exec.Command("cat")
	holder.Stdin = r
	var handed []*os.File
	released := false
	err = tr.DetachLater(func(files []*os.File) (func(), error) {
		handed = files
		holder.ExtraFiles = files
		// The holder is let go only once the tracer holds no reference
		// of its own: the last reference pays the grace periods.
		return func() {
			released = true
			if len(tr.links) != 0 {
				t.Errorf("released with %d links still open in the tracer", len(tr.links))
			}
			for _, f := range handed {
				if f.Fd() != ^uintptr(0) {
					t.Errorf("released with the duplicate %s still open", f.Name())
				}
			}
		}, holder.Start()
	})
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !released {
		t.Error("the holder was never released")
	}
	if len(handed) != 1 || len(tr.links) != 0 {
		t.Fatalf("%d links handed (want the loader's 1), %d left with the tracer", len(handed), len(tr.links))
	}
	for _, id := range ids {
		if got, want := alive(id), id == multi; got != want {
			t.Errorf("link %d (uprobe_multi: %v) alive while the holder runs: %v", id, id == multi, got)
		}
	}
	w.Close()
	if err := holder.Wait(); err != nil {
		t.Fatal(err)
	}
	if alive(multi) {
		t.Error("the uprobe_multi link outlived the process that held it")
	}

	// Classic uprobes (the fallback): nothing to hand, all closed here.
	single, err := Load(Options{RingSize: 1 << 16, SingleUprobes: true})
	if err != nil {
		t.Fatalf("load: %+v", err)
	}
	defer single.Close()
	if err := single.AttachLoaderTo("/lib64/ld-linux-x86-64.so.2", os.Getpid()); err != nil {
		t.Fatal(err)
	}
	err = single.DetachLater(func([]*os.File) (func(), error) {
		t.Error("classic uprobe links handed to a holder")
		return func() {}, nil
	})
	if err != nil || len(single.links) != 0 {
		t.Errorf("classic uprobes: err %v, %d links left", err, len(single.links))
	}
}

// TestPreload: the programs Preload names are loaded by Load, with the
// tracer's own; a name the object does not have is ignored.
func TestPreload(t *testing.T) {
	probestest.RequireRoot(t)
	asked := false
	tr, err := Load(Options{RingSize: 1 << 16, Preload: func() []ttmetal.Program {
		asked = true
		return []ttmetal.Program{"track_allocate", "lc_alloc_enter", "no_such_program"}
	}})
	if err != nil {
		t.Fatalf("load: %+v", err)
	}
	defer tr.Close()
	if !asked {
		t.Fatal("Preload not called")
	}
	for _, n := range []ttmetal.Program{progProcessFork, progProcessExit, progDlDebugState, "track_allocate", "lc_alloc_enter"} {
		if tr.progs[n] == nil {
			t.Errorf("%s not loaded by Load", n)
		}
	}
	if tr.objs.LcCalls == nil {
		t.Error("lc_calls not made for a preloaded program that uses it")
	}
	if len(tr.progs) != 5 {
		t.Errorf("%d programs loaded, want 5", len(tr.progs))
	}
	plain, err := Load(Options{RingSize: 1 << 16})
	if err != nil {
		t.Fatalf("load: %+v", err)
	}
	defer plain.Close()
	if plain.progs["track_allocate"] != nil {
		t.Error("track_allocate loaded without Preload")
	}
}

// TestAwakeFlagShared: the ring reader's reader_awake is the programs'
// own .bss word: what the reader stores, a look-up of the map reads.
func TestAwakeFlagShared(t *testing.T) {
	probestest.RequireRoot(t)
	tr, err := Load(Options{RingSize: 1 << 16})
	if err != nil {
		t.Fatalf("load: %+v", err)
	}
	defer tr.Close()
	if tr.rd.AwakeFlag() == nil {
		t.Fatal("the reader has no reader_awake flag")
	}
	bss := tr.maps[".bss"]
	off := tr.spec.Variables["reader_awake"].Offset()
	for _, v := range []uint32{0, 1, 0} {
		atomic.StoreUint32(tr.rd.AwakeFlag(), v)
		buf := make([]byte, bss.ValueSize())
		if err := bss.Lookup(uint32(0), &buf); err != nil {
			t.Fatal(err)
		}
		if got := binary.LittleEndian.Uint32(buf[off:]); got != v {
			t.Fatalf("stored %d through the reader's flag, the map holds %d", v, got)
		}
	}
}

// TestReaderAfterClose: a goroutine that outlives the tracer may still
// wake its reader (the session's Wake): refused, not a crash.
func TestReaderAfterClose(t *testing.T) {
	probestest.RequireRoot(t)
	tr, err := Load(Options{RingSize: 1 << 16})
	if err != nil {
		t.Fatalf("load: %+v", err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Reader().Flush(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Flush after Close: %v, want os.ErrClosed", err)
	}
	if err := tr.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestAttachCodeDeallocBounded: the code-object deallocation probe goes on
// a CPython file once, at one offset (a file has one code_dealloc: another
// offset, also through another name of the same file, is refused), and on
// at most MaxCodeDeallocFiles files: each sits in every process that runs
// its file.
func TestAttachCodeDeallocBounded(t *testing.T) {
	probestest.RequireRoot(t)
	b, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	open := func(name string) *os.File {
		t.Helper()
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	for i := range MaxCodeDeallocFiles + 1 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(dir, "0"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	tr, err := Load(Options{RingSize: 1 << 16})
	if err != nil {
		t.Fatalf("load: %+v", err)
	}
	defer tr.Close()
	const off, other = 0x1000, 0x1010
	if err := tr.AttachCodeDealloc(open("0"), off); err != nil {
		t.Fatal(err)
	}
	links := len(tr.links)
	if err := tr.AttachCodeDealloc(open("0"), off); err != nil || len(tr.links) != links {
		t.Errorf("the same file and offset again: %v, %d links (want %d)", err, len(tr.links), links)
	}
	for _, name := range []string{"0", "link"} {
		if err := tr.AttachCodeDealloc(open(name), other); err == nil {
			t.Errorf("%s: a second offset in one file was probed", name)
		}
	}
	for i := 1; i < MaxCodeDeallocFiles; i++ {
		if err := tr.AttachCodeDealloc(open(fmt.Sprint(i)), off); err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
	}
	if err := tr.AttachCodeDealloc(open(fmt.Sprint(MaxCodeDeallocFiles)), off); err == nil {
		t.Errorf("file %d probed, past the bound of %d", MaxCodeDeallocFiles+1, MaxCodeDeallocFiles)
	}
	if len(tr.links) != links+MaxCodeDeallocFiles-1 {
		t.Errorf("%d links, want %d", len(tr.links), links+MaxCodeDeallocFiles-1)
	}
}
