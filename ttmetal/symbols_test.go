package ttmetal

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// buildLib compiles a shared object whose symbols are exactly the given
// mangled names (functions unless they start with _ZTV: vtables).
func buildLib(t *testing.T, names []string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	var src strings.Builder
	for i, n := range names {
		if strings.HasPrefix(n, "_ZTV") {
			src.WriteString("const void *v" + strconv.Itoa(i) + "[4] __asm__(\"" + n + "\") = {0};\n")
			continue
		}
		src.WriteString("void f" + strconv.Itoa(i) + "(void) __asm__(\"" + n + "\");\n")
		src.WriteString("void f" + strconv.Itoa(i) + "(void) { __asm__ volatile(\"nop\"); }\n")
	}
	dir := t.TempDir()
	c := filepath.Join(dir, "lib.c")
	if err := os.WriteFile(c, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(dir, "libtt_metal.so")
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-O1", "-o", so, c).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return so
}

var fullNames = []string{
	symTrackAllocate, symTrackDeallocate, symTrackAllocateCB, symTrackDeallocateCB,
	symBufferCreateViewPrefix + "RKNS0_18BufferShardingArgsESt8optionalIbE",
	symBufferCreateViewPrefix + "RKNS0_18BufferShardingArgsESt8optionalIbE.cold",
	symMarkAsDeallocated, symAllocateCBs, symDeallocateCBs, symGenerateDispatch, symProgramImplD1, symProgramImplD2,
	symProgramSetRuntimeID, symDeviceClose, symMeshDeviceClose, symVtableDevice, symVtableMeshDevice,
	symTrackAllocate + ".isra.0",
	symInitializeAllocatorPrefix + "RKNS0_15AllocatorConfigE",
	symBankManagerVecC2Prefix + "mbRKNS1_21AllocatorDependenciesE",
	symBankManagerVecC1Prefix + "mbRKNS1_21AllocatorDependenciesE",
	symBankManagerMapC2Prefix + "mbRKNS1_21AllocatorDependenciesE",
	symBankManagerAllocatePrefix + symAllocatorIDParam + "0_" + symAllocatorIDTagName,
	symDeviceBeginTrace, symDeviceEndTrace, symDeviceReplayTrace, symDeviceReleaseTrace, symMeshBeginTraceNoID,
	symMeshBeginTracePrefix + "N4ttsl10StrongTypeIjNS1_14MeshTraceIdTagEEE",
	symMeshEndTracePrefix + "N4ttsl10StrongTypeIjNS1_14MeshTraceIdTagEEE",
	symMeshReplayTracePrefix + "N4ttsl10StrongTypeIjNS1_14MeshTraceIdTagEEEb",
	symMeshReleaseTracePrefix + "N4ttsl10StrongTypeIjNS1_14MeshTraceIdTagEEE",
	symDeviceReplayTraceBlocking, symMeshBeginTraceMCQ,
	symMeshBeginTraceMCQIDPrefix + "N4ttsl10StrongTypeIjNS1_14MeshTraceIdTagEEE",
	symMeshEndTraceMCQPrefix + "N4ttsl10StrongTypeIjNS1_14MeshTraceIdTagEEE",
	symMeshReplayTraceMCQPrefix + "N4ttsl10StrongTypeIjNS1_14MeshTraceIdTagEEEb",
}

func TestResolveSymbols(t *testing.T) {
	so := buildLib(t, fullNames)
	lib, syms := openResolved(t, so)
	if err := syms.Check(lib); err != nil {
		t.Fatalf("check: %v", err)
	}
	if len(syms.Missing) != 0 {
		t.Errorf("missing: %+v", syms.Missing)
	}
	// Independent truth: debug/elf's own symbol table.
	ef, err := elf.Open(so)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	all, _ := ef.DynamicSymbols()
	value := map[string]uint64{}
	for _, s := range all {
		value[s.Name] = s.Value
	}
	byProg := map[Program][]AttachPoint{}
	for _, s := range syms.AttachPoints {
		if strings.Contains(s.Symbol, ".") {
			t.Errorf("attached to a clone: %s", s.Symbol)
		}
		if s.Addr != value[s.Symbol] {
			t.Errorf("%s at %#x, ELF says %#x", s.Symbol, s.Addr, value[s.Symbol])
		}
		off, err := fileOffsetOf(ef, s.Addr)
		if err != nil || off != s.Offset {
			t.Errorf("%s: offset %#x, want %#x (%v)", s.Symbol, s.Offset, off, err)
		}
		byProg[s.Program] = append(byProg[s.Program], s)
	}
	for _, p := range attachTable {
		if len(byProg[p.Program]) != 1 {
			t.Errorf("%s: %d sites, want 1: %+v", p.Program, len(byProg[p.Program]), byProg[p.Program])
		}
	}
	if got := byProg[ProgBankManagerVec]; len(got) == 1 && !strings.HasPrefix(got[0].Symbol, symBankManagerVecC2Prefix) {
		t.Errorf("BankManager: %s, want the base-object constructor C2", got[0].Symbol)
	}
	if got := byProg["program_destroy"]; len(got) == 1 && got[0].Symbol != symProgramImplD2 {
		t.Errorf("destructor: %s, want the base-object destructor D2", got[0].Symbol)
	}
	if syms.VtableDevice != value[symVtableDevice]+16 || syms.VtableMesh != value[symVtableMeshDevice]+16 {
		t.Errorf("vtable address points %#x %#x, want symbol+16 of %#x %#x",
			syms.VtableDevice, syms.VtableMesh, value[symVtableDevice], value[symVtableMeshDevice])
	}
	if !IsTTMetal(lib) {
		t.Error("IsTTMetal = false")
	}
}

func fileOffsetOf(ef *elf.File, vaddr uint64) (uint64, error) {
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && vaddr >= p.Vaddr && vaddr < p.Vaddr+p.Filesz {
			return vaddr - p.Vaddr + p.Off, nil
		}
	}
	return 0, os.ErrNotExist
}

// TestAllocateBufferWithoutAllocatorID: a BankManager::allocate_buffer
// without the AllocatorID parameter (mid-2025) gets the program that does
// not read it.
func TestAllocateBufferWithoutAllocatorID(t *testing.T) {
	so := buildLib(t, []string{symTrackAllocate, symTrackDeallocate, symVtableDevice, symBankManagerAllocatePrefix})
	_, syms := openResolved(t, so)
	n := 0
	for _, s := range syms.AttachPoints {
		switch s.Program {
		case ProgBankManagerAllocate:
			t.Errorf("%s attached with the program that reads an AllocatorID", s.Symbol)
		case ProgBankManagerAllocateNoID:
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d allocate_buffer points without an AllocatorID, want 1", n)
	}
}

func TestCheckNamesWhatIsMissing(t *testing.T) {
	so := buildLib(t, []string{symTrackAllocateCB, symDeviceClose})
	lib, syms := openResolved(t, so)
	err := syms.Check(lib)
	if err == nil {
		t.Fatal("a library without track_allocate was accepted")
	}
	for _, want := range []string{"track_allocate", "track_deallocate", symVtableDevice, ".dynsym"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if IsTTMetal(lib) {
		t.Error("IsTTMetal = true for a library without the tracker")
	}
}

func TestOpenLibraryRejectsNonELF(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.so")
	os.WriteFile(p, []byte(strings.Repeat("not elf ", 20)), 0o644)
	if _, err := OpenLibrary(p); err == nil {
		t.Fatal("a text file was accepted as a library")
	}
	if _, err := OpenLibrary(filepath.Join(t.TempDir(), "absent.so")); err == nil {
		t.Fatal("a missing file was accepted")
	}
}

// Every Metal trace row of the attach table is a form of exactly one call
// (a missing form is then no loss when the call has another), and no
// other row is: a library missing one attach point of any other row still
// hears of it.
func TestTraceForms(t *testing.T) {
	seen := map[Program]int{}
	for _, f := range traceForms {
		for _, p := range f.progs {
			seen[p]++
		}
	}
	for _, p := range attachTable {
		isTrace := strings.Contains(string(p.Program), "trace")
		if isTrace && seen[p.Program] != 1 {
			t.Errorf("trace row %s is in %d groups of traceForms", p.Program, seen[p.Program])
		}
		if !isTrace && seen[p.Program] != 0 {
			t.Errorf("row %s is not a trace call but is in traceForms", p.Program)
		}
		delete(seen, p.Program)
	}
	for p := range seen {
		t.Errorf("traceForms names %s, which no row of the attach table has", p)
	}
	for p := range meshCQPrograms {
		if traceCall(p) == "" {
			t.Errorf("%s reads a MeshCommandQueue but is no trace form", p)
		}
	}
}
