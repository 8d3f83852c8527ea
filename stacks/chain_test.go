package stacks

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tttrace/tttrace/procfs"
)

// The truth for these tests is the call chain the programs in
// testdata/chain are built to have, plus binutils (nm, addr2line) on the
// unstripped builds for addresses and lines.

// chainVariant is one way to build the chain program.
type chainVariant struct {
	name  string
	cxx   string
	flags []string
	strip bool // strip --strip-all: only .dynsym is left
	// debugFrame: no .eh_frame for the chain's code, .debug_frame only.
	debugFrame bool
	dwarf      bool
	// splitDebug: the library's DWARF moved to .debug/libchain.so.debug,
	// named by .gnu_debuglink.
	splitDebug bool
}

var chainVariants = []chainVariant{
	{name: "gcc-O2", cxx: "g++"},
	{name: "clang-O2", cxx: "clang++"},
	{name: "gcc-O2-g", cxx: "g++", flags: []string{"-g"}, dwarf: true},
	{name: "clang-O2-g", cxx: "clang++", flags: []string{"-g"}, dwarf: true},
	{name: "gcc-O2-stripped", cxx: "g++", strip: true},
	{name: "clang-O2-stripped", cxx: "clang++", strip: true},
	{name: "clang-O2-debuglink", cxx: "clang++", flags: []string{"-g"}, dwarf: true, splitDebug: true},
	{name: "gcc-O2-debug-frame", cxx: "g++", debugFrame: true, dwarf: true,
		flags: []string{"-g", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-fno-exceptions"}},
	{name: "clang-O2-debug-frame", cxx: "clang++", debugFrame: true, dwarf: true,
		flags: []string{"-g", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-fno-exceptions"}},
}

// chainBuild is a built and run chain program.
type chainBuild struct {
	dir      string // holds chain, libchain.so and what capture() wrote
	exe, lib string // the files that ran (stripped for strip variants)
	fullExe  string // unstripped copies, for nm
	fullLib  string
}

func run(t testing.TB, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// builds caches one build per variant for the whole test binary, in
// buildRoot (removed by TestMain).
var (
	buildMu   sync.Mutex
	builds    = map[string]*chainBuild{}
	buildRoot string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildRoot != "" {
		os.RemoveAll(buildRoot)
	}
	os.Exit(code)
}

// buildChain returns the chain program built for v (built once).
func buildChain(t testing.TB, v chainVariant) *chainBuild {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if b := builds[v.name]; b != nil {
		return b
	}
	if buildRoot == "" {
		d, err := os.MkdirTemp("", "stacks-chain-")
		if err != nil {
			t.Fatal(err)
		}
		buildRoot = d
	}
	dir, err := os.MkdirTemp(buildRoot, v.name+"-")
	if err != nil {
		t.Fatal(err)
	}
	b := buildChainIn(t, v, dir)
	builds[v.name] = b
	return b
}

// buildChainIn compiles the chain program for v into dir.
func buildChainIn(t testing.TB, v chainVariant, dir string) *chainBuild {
	t.Helper()
	if _, err := exec.LookPath(v.cxx); err != nil {
		t.Skipf("%s not installed (scripts/deps.sh build installs it)", v.cxx)
	}
	src, err := filepath.Abs("testdata/chain")
	if err != nil {
		t.Fatal(err)
	}
	flags := append([]string{"-O2", "-fomit-frame-pointer", "-I" + src}, v.flags...)
	run(t, dir, nil, v.cxx, append(flags, "-shared", "-fPIC", "-o", "libchain.so", filepath.Join(src, "lib.cpp"))...)
	run(t, dir, nil, v.cxx, append(flags, "-o", "chain", filepath.Join(src, "main.cpp"), "-L.", "-lchain", "-Wl,-rpath,$ORIGIN")...)
	b := &chainBuild{dir: dir, exe: filepath.Join(dir, "chain"), lib: filepath.Join(dir, "libchain.so")}
	b.fullExe, b.fullLib = b.exe, b.lib
	if v.splitDebug {
		if err := os.Mkdir(filepath.Join(dir, ".debug"), 0o755); err != nil {
			t.Fatal(err)
		}
		run(t, dir, nil, "objcopy", "--only-keep-debug", "libchain.so", ".debug/libchain.so.debug")
		run(t, dir, nil, "objcopy", "--strip-debug", "--add-gnu-debuglink=.debug/libchain.so.debug", "libchain.so")
	}
	if v.strip {
		full := filepath.Join(dir, "full")
		if err := os.Mkdir(full, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"chain", "libchain.so"} {
			run(t, dir, nil, "cp", f, filepath.Join(full, f))
			run(t, dir, nil, "strip", "--strip-all", f)
		}
		b.fullExe, b.fullLib = filepath.Join(full, "chain"), filepath.Join(full, "libchain.so")
	}
	return b
}

// capture runs the chain with CAPTURE_BYTES=n (0: the program's default)
// into a new directory and returns what it wrote.
func (b *chainBuild) capture(t testing.TB, n int, args ...string) (Regs, []byte, []procfs.Mapping) {
	t.Helper()
	out := t.TempDir()
	var env []string
	if n > 0 {
		env = append(env, "CAPTURE_BYTES="+strconv.Itoa(n))
	}
	run(t, b.dir, env, b.exe, append([]string{out}, args...)...)
	return readCapture(t, out)
}

// readCapture reads what capture() wrote into out.
func readCapture(t testing.TB, out string) (Regs, []byte, []procfs.Mapping) {
	t.Helper()
	hdr, err := os.ReadFile(filepath.Join(out, "regs"))
	if err != nil || len(hdr) != 32 {
		t.Fatalf("regs: %v (%d bytes)", err, len(hdr))
	}
	stack, err := os.ReadFile(filepath.Join(out, "stack"))
	if err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint64(hdr[24:]); got != uint64(len(stack)) {
		t.Fatalf("stack file has %d bytes, header says %d", len(stack), got)
	}
	mapsText, err := os.ReadFile(filepath.Join(out, "maps"))
	if err != nil {
		t.Fatal(err)
	}
	maps, err := procfs.ParseMaps(mapsText)
	if err != nil {
		t.Fatal(err)
	}
	regs := Regs{IP: binary.LittleEndian.Uint64(hdr), SP: binary.LittleEndian.Uint64(hdr[8:]), BP: binary.LittleEndian.Uint64(hdr[16:])}
	return regs, stack, maps
}

// bindByPath binds maps to files by path (the process is gone; its files
// are not).
func bindByPath(c *Cache, maps []procfs.Mapping) *Modules {
	return c.Bind(maps, func(m procfs.Mapping) (*os.File, error) { return os.Open(m.Path) })
}

// nmRange returns [start, end) of the function symbol named sym (mangled)
// in path, from nm.
func nmRange(t *testing.T, path, sym string) (uint64, uint64) {
	t.Helper()
	out := run(t, "", nil, "nm", "-S", "--defined-only", path)
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 4 && f[3] == sym {
			v, err1 := strconv.ParseUint(f[0], 16, 64)
			n, err2 := strconv.ParseUint(f[1], 16, 64)
			if err1 == nil && err2 == nil {
				return v, v + n
			}
		}
	}
	t.Fatalf("nm %s: no %s", path, sym)
	return 0, 0
}

// addr2line returns base(file):line of addr in path, "" when unknown.
func addr2line(t *testing.T, path string, addr uint64) string {
	t.Helper()
	out := strings.TrimSpace(run(t, "", nil, "addr2line", "-e", path, fmt.Sprintf("%#x", addr)))
	out, _, _ = strings.Cut(out, " ")
	file, line, ok := strings.Cut(out, ":")
	if !ok || file == "??" || line == "0" || line == "?" {
		return ""
	}
	return filepath.Base(file) + ":" + line
}

// chainFrames is the known chain, innermost first: mangled name, demangled
// name, and whether it lives in the library (else the executable).
var chainFrames = []struct {
	mangled, name string
	inLib         bool
}{
	{"_ZN5chain7captureEPKc", "chain::capture(char const*)", true},
	{"_ZN5chain2f2ElPKc", "chain::f2(long, char const*)", true},
	{"_ZN5chain6HolderIiE2f1EiPKc", "chain::Holder<int>::f1(int, char const*)", true},
	{"_ZN5chain9lib_entryEiPKc", "chain::lib_entry(int, char const*)", true},
	{"main", "main", false},
}

func TestUnwindKnownChain(t *testing.T) {
	for _, v := range chainVariants {
		t.Run(v.name, func(t *testing.T) {
			b := buildChain(t, v)
			regs, stack, maps := b.capture(t, 0)
			c := NewCache()
			mods := bindByPath(c, maps)
			locs, trunc := Unwind(mods, regs, stack, 0, nil)
			frames := Symbolize(locs)
			for i, f := range frames {
				t.Logf("#%d %#x %s %s", i, f.PC, filepath.Base(f.Module), f)
			}
			if trunc {
				t.Errorf("truncated; the copy (%d bytes) reaches the stack's end", len(stack))
			}
			if len(frames) < len(chainFrames)+2 {
				t.Fatalf("%d frames, want the chain, libc's start and _start", len(frames))
			}
			if v.debugFrame {
				lib, _ := c.OpenFile(b.lib)
				if e, err := lib.loadCFI().find(locs[0].Addr); err != nil || !e.sec.debug {
					t.Errorf("capture's FDE is not from .debug_frame (%v): the variant does not test it", err)
				}
			}
			for i, want := range chainFrames {
				f, l := frames[i], locs[i]
				path, full := b.exe, b.fullExe
				if want.inLib {
					path, full = b.lib, b.fullLib
				}
				if f.Module != path {
					t.Errorf("#%d module %s, want %s", i, f.Module, path)
				}
				// The frame's address (the call, for callers) is in the
				// function's nm range in the unstripped file.
				at := l.Addr
				if i > 0 {
					at--
				}
				lo, hi := nmRange(t, full, want.mangled)
				if at < lo || at >= hi {
					t.Errorf("#%d %#x is outside %s [%#x, %#x)", i, at, want.name, lo, hi)
				}
				wantName := want.name
				if v.strip && !want.inLib {
					wantName = "" // main is not in .dynsym
				}
				if f.Function != wantName {
					t.Errorf("#%d function %q, want %q", i, f.Function, wantName)
				}
				if wantName != "" && f.Offset != l.Addr-lo {
					t.Errorf("#%d offset %#x, want %#x", i, f.Offset, l.Addr-lo)
				}
				if wantName == "" && f.Offset != l.Addr {
					t.Errorf("#%d offset %#x, want the module address %#x", i, f.Offset, l.Addr)
				}
				gotLine := ""
				if f.File != "" {
					gotLine = filepath.Base(f.File) + ":" + strconv.Itoa(f.Line)
				}
				if wantLine := addr2line(t, full, at); gotLine != wantLine || (v.dwarf && wantLine == "") {
					t.Errorf("#%d line %q, addr2line says %q", i, gotLine, wantLine)
				}
			}
			// Past main: libc's __libc_start_call_main (named when libc's
			// symbols are installed, e.g. Debian's libc6-dbg), then on to
			// _start, the outermost frame.
			libc := frames[len(chainFrames)]
			if !strings.Contains(filepath.Base(libc.Module), "libc.so") {
				t.Errorf("caller of main in %s, want libc", libc.Module)
			}
			if l := locs[len(chainFrames)]; l.File.debug() != nil || l.File.elf.Section(".symtab") != nil {
				if libc.Function != "__libc_start_call_main" {
					t.Errorf("caller of main is %q, want __libc_start_call_main", libc.Function)
				}
			} else {
				t.Logf("libc has no symbols installed: its frames are module+offset")
			}
			last := frames[len(frames)-1]
			if last.Module != b.exe || (!v.strip && last.Function != "_start") {
				t.Errorf("outermost frame %s in %s, want _start in %s", last, last.Module, b.exe)
			}
		})
	}
}

// A copy cut short gives the chain's innermost frames, then stops with
// truncated set.
func TestUnwindShortCopy(t *testing.T) {
	b := buildChain(t, chainVariants[0])
	regs, stack, maps := b.capture(t, 0)
	c := NewCache()
	mods := bindByPath(c, maps)
	full, _ := Unwind(mods, regs, stack, 0, nil)
	for _, n := range []int{0, 7, 64, 4096, 4300, 4400, 4500} {
		if n > len(stack) {
			continue
		}
		locs, trunc := Unwind(mods, regs, stack[:n], 0, nil)
		if !trunc {
			t.Errorf("%d bytes: not truncated", n)
		}
		if len(locs) == 0 || len(locs) >= len(full) {
			t.Errorf("%d bytes: %d frames of %d", n, len(locs), len(full))
			continue
		}
		for i := range locs {
			if locs[i] != full[i] {
				t.Errorf("%d bytes: frame %d %#x, full unwind has %#x", n, i, locs[i].PC, full[i].PC)
			}
		}
	}
	// The program's own cut: a copy of 4400 bytes from capture().
	regs2, stack2, maps2 := b.capture(t, 4400)
	locs, trunc := Unwind(bindByPath(c, maps2), regs2, stack2, 0, nil)
	if !trunc || len(locs) == 0 || len(locs) >= len(full) {
		t.Errorf("4400-byte capture: %d frames, truncated %v", len(locs), trunc)
	}
	// The depth limit.
	locs, trunc = Unwind(mods, regs, stack, 2, nil)
	if len(locs) != 2 || !trunc {
		t.Errorf("max 2: %d frames, truncated %v", len(locs), trunc)
	}
}

// Garbage registers, a shifted stack or a pc in no module never fail: a
// short stack, truncated. A pc in no module ends the stack, with no file.
func TestUnwindGarbage(t *testing.T) {
	b := buildChain(t, chainVariants[0])
	regs, stack, maps := b.capture(t, 0)
	mods := bindByPath(NewCache(), maps)
	for _, r := range []Regs{{IP: 0x10, SP: regs.SP}, {IP: regs.IP, SP: 0}, {IP: regs.IP, SP: regs.SP + 8},
		{IP: regs.IP, SP: regs.SP - 8}, {IP: ^uint64(0), SP: ^uint64(0)}} {
		locs, trunc := Unwind(mods, r, stack, 0, nil)
		if !trunc || len(locs) == 0 {
			t.Errorf("%+v: %d frames, truncated %v", r, len(locs), trunc)
		}
	}
	junk := bytes.Repeat([]byte{0x41}, len(stack))
	locs, trunc := Unwind(mods, regs, junk, 0, nil)
	if !trunc || len(locs) != 2 || locs[1].PC != 0x4141414141414141 || locs[1].File != nil {
		t.Errorf("junk stack: %+v, truncated %v", locs, trunc)
	}
}

// Interning: the same stack captured twice (two runs of one build) is one
// stack per run's map; repeated adds do not grow the table.
func TestTableInterns(t *testing.T) {
	b := buildChain(t, chainVariants[0])
	regs, stack, maps := b.capture(t, 0)
	c := NewCache()
	mods := bindByPath(c, maps)
	tab := NewTable()
	id, trunc := tab.Add(mods, regs, stack)
	if id == 0 || trunc {
		t.Fatalf("stack %d truncated %v", id, trunc)
	}
	for i := 0; i < 100; i++ {
		if got, _ := tab.Add(mods, regs, stack); got != id {
			t.Fatalf("add %d: stack %d, want %d", i, got, id)
		}
	}
	short, _ := tab.Add(mods, regs, stack[:4400])
	if short == id || tab.Len() != 2 {
		t.Errorf("short stack %d (full %d), %d stacks", short, id, tab.Len())
	}
	if allocs := testing.AllocsPerRun(100, func() { tab.Add(mods, regs, stack) }); allocs != 0 {
		t.Errorf("a repeated stack allocates %v times", allocs)
	}
	fr := tab.Frames(id)
	if len(fr) == 0 || fr[0].Function != chainFrames[0].name {
		t.Errorf("stack frames %v", fr)
	}
	// A second Cache sees the same files as new: file identity is per
	// cache, and the files stay open.
	if f, err := c.OpenFile(b.lib); err != nil || f != fr0File(tab, id) {
		t.Errorf("reopening %s: %v, another File", b.lib, err)
	}
}

// TestTableStops: a stop (SetStops, the interpreter's evaluation loop in
// a Python process) ends a stack at the first caller frame whose return
// address it holds, as the outermost frame: the chain is the full
// unwind's up to that frame, not truncated, fixed, its last step End; a
// stop at the innermost pc or at no pc of the chain changes nothing.
func TestTableStops(t *testing.T) {
	b := buildChain(t, chainVariants[0])
	regs, stack, maps := b.capture(t, 0)
	mods := bindByPath(NewCache(), maps)
	full, _ := Unwind(mods, regs, stack, 0, nil)
	if len(full) < 5 {
		t.Fatalf("%d frames", len(full))
	}
	for _, k := range []int{1, 3} {
		tab := NewTable()
		pc := full[k].PC
		if !tab.SetStops([]Range{{Lo: pc - 1, Hi: pc}}) || tab.SetStops([]Range{{Lo: pc - 1, Hi: pc}}) {
			t.Fatal("SetStops: changed is wrong")
		}
		id, trunc, steps, fixed := tab.AddSteps(mods, regs, stack, nil)
		st, _ := tab.Stack(id)
		if trunc || !fixed || len(st.Locs) != k+1 {
			t.Fatalf("stop at frame %d: %d frames, truncated %v, fixed %v", k, len(st.Locs), trunc, fixed)
		}
		for i, l := range st.Locs {
			if l.PC != full[i].PC {
				t.Errorf("stop at frame %d: #%d %#x, want %#x", k, i, l.PC, full[i].PC)
			}
		}
		if len(steps) != k+1 || !steps[k].End || steps[k].PC != pc || steps[k].First {
			t.Errorf("stop at frame %d: steps %+v, want %d ending with End at %#x", k, steps, k+1, pc)
		}
		if again, _ := tab.Add(mods, regs, stack); again != id {
			t.Errorf("stop at frame %d: Add gives stack %d, AddSteps %d", k, again, id)
		}
	}
	for name, r := range map[string]Range{
		"innermost": {Lo: full[0].PC, Hi: full[0].PC + 1},
		"elsewhere": {Lo: 1, Hi: 2},
	} {
		tab := NewTable()
		tab.SetStops([]Range{r})
		id, _ := tab.Add(mods, regs, stack)
		if st, _ := tab.Stack(id); len(st.Locs) != len(full) {
			t.Errorf("stop %s: %d frames, want all %d", name, len(st.Locs), len(full))
		}
	}
}

func fr0File(tab *Table, id StackID) *File {
	s, _ := tab.Stack(id)
	return s.Locs[0].File
}

// The file stays usable once deleted: its contents are mapped.
func TestFileOutlivesPath(t *testing.T) {
	b := buildChainIn(t, chainVariants[2], t.TempDir())
	regs, stack, maps := b.capture(t, 0)
	c := NewCache()
	mods := bindByPath(c, maps)
	tab := NewTable()
	id, _ := tab.Add(mods, regs, stack)
	if err := os.RemoveAll(b.dir); err != nil {
		t.Fatal(err)
	}
	fr := tab.Frames(id)
	if len(fr) < 5 || fr[4].Function != "main" || fr[0].Line == 0 {
		t.Errorf("after removal: %v", fr)
	}
}

func BenchmarkUnwindIntern(b *testing.B) {
	bd := buildChain(b, chainVariants[0])
	regs, stack, maps := bd.capture(b, 0)
	mods := bindByPath(NewCache(), maps)
	tab := NewTable()
	tab.Add(mods, regs, stack) // rules memoized, as in a steady state
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tab.Add(mods, regs, stack)
	}
}

// The cost of a stack never seen: every unwind rule is computed afresh
// (the memo is cleared, the files stay mapped and parsed).
func BenchmarkUnwindCold(b *testing.B) {
	bd := buildChain(b, chainVariants[0])
	regs, stack, maps := bd.capture(b, 0)
	mods := bindByPath(NewCache(), maps)
	locs, _ := Unwind(mods, regs, stack, 0, nil)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, m := range mods.mods {
			m.file.mu.Lock()
			clear(m.file.rows)
			m.file.mu.Unlock()
		}
		locs, _ = Unwind(mods, regs, stack, 0, locs[:0])
	}
}

// Symbolizing a new stack: every pc resolved afresh (symbols and DWARF
// lines are loaded once, before the timer).
func BenchmarkSymbolizeCold(b *testing.B) {
	bd := buildChain(b, chainVariants[2])
	regs, stack, maps := bd.capture(b, 0)
	mods := bindByPath(NewCache(), maps)
	locs, _ := Unwind(mods, regs, stack, 0, nil)
	Symbolize(locs)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, m := range mods.mods {
			m.file.mu.Lock()
			clear(m.file.resolved)
			m.file.mu.Unlock()
		}
		Symbolize(locs)
	}
}

// From a second thread the stack ends in libc's thread start: the copy
// reaches the end of the thread's stack mapping, and the unwind its
// outermost frame (clone3's undefined return address).
func TestUnwindThread(t *testing.T) {
	for _, v := range chainVariants[:2] {
		t.Run(v.name, func(t *testing.T) {
			b := buildChain(t, v)
			regs, stack, maps := b.capture(t, 0, "thread")
			locs, trunc := Unwind(bindByPath(NewCache(), maps), regs, stack, 0, nil)
			frames := Symbolize(locs)
			for i, f := range frames {
				t.Logf("#%d %s %s", i, filepath.Base(f.Module), f)
			}
			if trunc {
				t.Errorf("truncated (copy of %d bytes)", len(stack))
			}
			for i, want := range chainFrames[:4] {
				if i >= len(frames) || frames[i].Function != want.name {
					t.Fatalf("#%d is not %s", i, want.name)
				}
			}
			last := frames[len(frames)-1]
			if !strings.Contains(filepath.Base(last.Module), "libc.so") {
				t.Errorf("outermost frame %s in %s, want libc's clone", last, last.Module)
			}
			if locs[len(locs)-1].File.debug() != nil && (!hasFunction(frames, "start_thread") || !strings.Contains(last.Function, "clone")) {
				t.Errorf("no start_thread, or the outermost is not clone*")
			}
		})
	}
}

func hasFunction(fr []Frame, name string) bool {
	for _, f := range fr {
		if f.Function == name {
			return true
		}
	}
	return false
}

// gdb's backtrace is the truth for the return addresses and the names of
// every caller of chain::capture (gdb has its own unwinder and demangler).
// The program captures its stack, then waits inside capture() for gdb to
// attach (attaching reads the loaded libraries from the process, where a
// breakpoint at a library's load can be missed when other tools probe
// ld.so); our unwind of that capture must give gdb's callers exactly.
func TestUnwindMatchesGDB(t *testing.T) {
	if _, err := exec.LookPath("gdb"); err != nil {
		t.Skip("gdb not installed")
	}
	for _, v := range chainVariants[:2] {
		t.Run(v.name, func(t *testing.T) {
			b := buildChain(t, v)
			out := t.TempDir()
			cmd := exec.Command(b.exe, out)
			cmd.Env = append(os.Environ(), "CAPTURE_WAIT=1")
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			defer stdin.Close()
			line := make([]byte, 6)
			if _, err := io.ReadFull(stdout, line); err != nil || string(line) != "ready\n" {
				t.Fatalf("chain: %q %v", line, err)
			}
			text := run(t, b.dir, nil, "gdb", "-nx", "-batch", "-ex", "set debuginfod enabled off",
				"-ex", "set backtrace past-main on", "-ex", "bt", "-p", strconv.Itoa(cmd.Process.Pid))
			stdin.Close()
			type gframe struct {
				pc   uint64
				name string
			}
			var bt []gframe
			inChain := false
			for _, line := range strings.Split(text, "\n") {
				f := strings.Fields(line)
				if len(f) < 4 || !strings.HasPrefix(f[0], "#") || f[2] != "in" {
					continue
				}
				pc, err := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
				if err != nil {
					continue
				}
				name := line[strings.Index(line, " in ")+4:]
				for _, sep := range []string{" from ", " at "} {
					if i := strings.Index(name, sep); i >= 0 {
						name = name[:i]
					}
				}
				if strings.HasSuffix(name, " ()") {
					name = strings.TrimSuffix(name, " ()")
				} else if i := strings.Index(name, " ("); i >= 0 {
					name = name[:i] // a frame with debug info: its arguments follow
				}
				if inChain {
					bt = append(bt, gframe{pc, name})
				}
				inChain = inChain || name == chainFrames[0].name
			}
			if len(bt) < 6 {
				t.Fatalf("gdb backtrace:\n%s", text)
			}
			regs, stack, maps := readCapture(t, out)
			locs, _ := Unwind(bindByPath(NewCache(), maps), regs, stack, 0, nil)
			frames := Symbolize(locs)
			if len(frames)-1 != len(bt) {
				t.Errorf("%d callers, gdb has %d:\n%s", len(frames)-1, len(bt), text)
			}
			for i := 0; i < len(bt) && i+1 < len(frames); i++ {
				f := frames[i+1]
				if f.PC != bt[i].pc || f.Function != bt[i].name {
					t.Errorf("#%d %#x %q, gdb %#x %q", i+1, f.PC, f.Function, bt[i].pc, bt[i].name)
				}
			}
		})
	}
}
