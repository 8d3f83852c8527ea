package ttmetal

import (
	"debug/elf"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// buildC compiles C source into a shared object in a temporary directory.
func buildC(t *testing.T, src string, flags ...string) string {
	t.Helper()
	return compile(t, "gcc", "lib.c", src, "lib.so", []string{"-shared", "-fPIC", "-O2"}, flags...)
}

// callsSrc: callee is called twice from caller1, tail-called from caller2
// and called once from caller3 on a cold path (GCC splits it into
// caller3.cold); other is never called.
const callsSrc = `
#include <stdlib.h>
__attribute__((noinline)) int callee(int x) { return x * 3 + 1; }
__attribute__((noinline)) int other(int x) { return x - 7; }
int caller1(int x) { int a = callee(x); return callee(a) + 2; }
int caller2(int x) { return callee(x + 1); }
int caller3(int x) {
	if (__builtin_expect(x == 12345, 0)) {
		x = callee(x);
		if (x > 100) abort();
	}
	return x + 5;
}
`

func openTestLib(t *testing.T, so string) *Library {
	t.Helper()
	lib, err := OpenLibrary(so)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lib.Close() })
	return lib
}

// openResolved opens the library at so (closed when the test ends) and
// resolves its symbols.
func openResolved(t *testing.T, so string) (*Library, *Symbols) {
	t.Helper()
	lib := openTestLib(t, so)
	syms, err := ResolveSymbols(lib)
	if err != nil {
		t.Fatal(err)
	}
	return lib, syms
}

func funcSym(t *testing.T, lib *Library, name string) Symbol {
	t.Helper()
	m, err := lib.lookup([]string{name})
	if err != nil || m[name].Value == 0 {
		t.Fatalf("no symbol %s: %v", name, err)
	}
	return m[name]
}

// Every function with a size in .symtab has an FDE of exactly that range.
func TestFDERangesMatchSymbols(t *testing.T) {
	so := buildC(t, callsSrc)
	lib := openTestLib(t, so)
	c, err := lib.code()
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(so)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, _ := ef.Symbols()
	n := 0
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 || s.Section == elf.SHN_UNDEF {
			continue
		}
		r, ok := c.fdeStarting(s.Value)
		if !ok || r.End != s.Value+s.Size {
			t.Errorf("%s [%#x, %#x): FDE %+v %v", s.Name, s.Value, s.Value+s.Size, r, ok)
		}
		n++
	}
	if n < 6 {
		t.Fatalf("only %d functions checked", n)
	}
}

func TestCallSitesThroughPLTGOTAndTailCalls(t *testing.T) {
	for _, v := range []struct {
		name  string
		flags []string
		via   string
	}{
		{"plt", nil, "plt"},
		{"noplt", []string{"-fno-plt"}, "got"},
		{"direct", []string{"-fvisibility=hidden"}, "direct"},
	} {
		t.Run(v.name, func(t *testing.T) {
			so := buildC(t, callsSrc, v.flags...)
			lib := openTestLib(t, so)
			c, err := lib.code()
			if err != nil {
				t.Fatal(err)
			}
			callee, other := funcSym(t, lib, "callee"), funcSym(t, lib, "other")
			sites, unconfirmed, err := c.callSites([]Symbol{callee, other})
			if err != nil || unconfirmed != 0 {
				t.Fatalf("callSites: %v, %d unconfirmed", err, unconfirmed)
			}
			// Independent count: objdump lines calling or jumping to callee.
			out, err := exec.Command("objdump", "-d", "--no-show-raw-insn", so).Output()
			if err != nil {
				t.Fatal(err)
			}
			want := len(regexp.MustCompile(`(?m)\t(call|jmp)\s+.*<callee(@plt)?>$`).FindAll(out, -1))
			if v.via == "got" {
				want = len(regexp.MustCompile(`(?m)\t(call|jmp)\s+\*.*<callee@GLIBC|(call|jmp)\s+\*0x[0-9a-f]+\(%rip\)\s+# [0-9a-f]+ <callee`).FindAll(out, -1))
			}
			if len(sites["callee"]) != want || want < 4 {
				t.Errorf("%d call sites of callee, objdump shows %d: %+v", len(sites["callee"]), want, sites["callee"])
			}
			tails := 0
			for _, s := range sites["callee"] {
				if s.Via != v.via {
					t.Errorf("call site %+v, want via %s", s, v.via)
				}
				if s.Tail {
					tails++
				}
			}
			if tails != 1 {
				t.Errorf("%d tail calls, want 1 (caller2)", tails)
			}
			if len(sites["other"]) != 0 {
				t.Errorf("other is never called, found %+v", sites["other"])
			}
		})
	}
}

// analyze finds every ret of a function, including in its .cold part, and
// its tail calls; and what it calls.
func TestAnalyzeExitsAndParts(t *testing.T) {
	so := buildC(t, callsSrc)
	lib := openTestLib(t, so)
	c, err := lib.code()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("objdump", "-d", "--no-show-raw-insn", so).Output()
	if err != nil {
		t.Fatal(err)
	}
	// objdump's rets of each function and its .cold part.
	rets := map[string][]uint64{}
	cur := ""
	for _, line := range strings.Split(string(out), "\n") {
		if m := regexp.MustCompile(`^[0-9a-f]+ <([^>]+)>:$`).FindStringSubmatch(line); m != nil {
			cur = strings.TrimSuffix(m[1], ".cold")
			continue
		}
		if m := regexp.MustCompile(`^\s+([0-9a-f]+):\s+(rep )?ret`).FindStringSubmatch(line); m != nil {
			a, _ := strconv.ParseUint(m[1], 16, 64)
			rets[cur] = append(rets[cur], a)
		}
	}
	callee := funcSym(t, lib, "callee")
	for _, name := range []string{"caller1", "caller2", "caller3", "callee"} {
		f, err := c.analyze(funcSym(t, lib, name))
		if err != nil {
			t.Fatal(err)
		}
		var got []uint64
		tail := 0
		for _, x := range f.Exits {
			switch {
			case x.Why == "ret":
				got = append(got, x.Addr)
			case strings.HasPrefix(x.Why, "tail call to callee"):
				tail++
			}
		}
		if fmt.Sprintf("%x", got) != fmt.Sprintf("%x", rets[name]) {
			t.Errorf("%s: rets %x, objdump %x", name, got, rets[name])
		}
		if name == "caller2" && tail != 1 {
			t.Errorf("caller2: %d tail-call exits, want 1: %+v", tail, f.Exits)
		}
		if calls := f.calls(callee); calls != (name != "callee") {
			t.Errorf("%s calls callee: %v", name, calls)
		}
		if name == "caller3" && len(f.Parts) < 2 {
			t.Errorf("caller3: its cold part was not found: %+v", f.Parts)
		}
	}
}

func TestCheckProbeableDecodes(t *testing.T) {
	so := buildC(t, `
__asm__(".globl locked\n.type locked,@function\nlocked: lock incl (%rdi)\n ret\n.size locked, .-locked\n");
__asm__(".globl dsjump\n.type dsjump,@function\ndsjump: notrack jmp *%rax\n.size dsjump, .-dsjump\n");
__asm__(".globl trap\n.type trap,@function\ntrap: int3\n ret\n.size trap, .-trap\n");
__asm__(".globl withendbr\n.type withendbr,@function\nwithendbr: endbr64\n lock incl (%rdi)\n ret\n.size withendbr, .-withendbr\n");
__asm__(".globl plain\n.type plain,@function\nplain: test %rsi, %rsi\n ret\n.size plain, .-plain\n");
__asm__(".globl rip\n.type rip,@function\nrip: mov 16(%rip), %rax\n ret\n.size rip, .-rip\n");
`)
	lib := openTestLib(t, so)
	for name, want := range map[string]string{"locked": "lock prefix", "dsjump": "segment prefix", "trap": "cannot be probed",
		"withendbr": "", "plain": "", "rip": ""} {
		err := CheckProbeable(lib, funcSym(t, lib, name).Value)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want an error saying %q", name, err, want)
		}
	}
	// endbr64 is one instruction of four bytes.
	in, err := lib.decodeAt(funcSym(t, lib, "withendbr").Value)
	if err != nil || !in.endbr || in.Len != 4 {
		t.Errorf("endbr64 decoded as %v len %d, %v", in, in.Len, err)
	}
}

func TestV0Name(t *testing.T) {
	for in, want := range map[string]string{
		symTrackAllocate:    "_ZN2tt8tt_metal2v012GraphTracker14track_allocateEPKNS1_6BufferE",
		symTrackAllocateCB:  "_ZN2tt8tt_metal2v012GraphTracker17track_allocate_cbERK12CoreRangeSetmmbPKNS1_7IDeviceE",
		symVtableMeshDevice: "_ZTVN2tt8tt_metal2v011distributed10MeshDeviceE",
		symPimplSize:        "_ZNK2tt8tt_metal2v06Buffer4sizeEv",
		// As g++ mangles the replica's create in namespace v0 (S8_ -> S9_).
		"_ZN2tt8tt_metal6Buffer6createEPNS0_7IDeviceEmmNS0_10BufferTypeERKNS0_18BufferShardingArgsESt8optionalIbES8_INS0_11SubDeviceIdEE": "_ZN2tt8tt_metal2v06Buffer6createEPNS1_7IDeviceEmmNS1_10BufferTypeERKNS1_18BufferShardingArgsESt8optionalIbES9_INS1_11SubDeviceIdEE",
		"_ZN2tt8tt_metal2v06Buffer13allocate_implEv": "_ZN2tt8tt_metal2v06Buffer13allocate_implEv",
		"_ZNSt6vectorIiSaIiEE9push_backEv":           "_ZNSt6vectorIiSaIiEE9push_backEv",
	} {
		if got := v0Name(in); got != want {
			t.Errorf("v0Name(%s)\n = %s\nwant %s", in, got, want)
		}
	}
}

// TestSpellings: a name's spellings are itself, its v0 spelling, and for
// track_allocate_cb the 2026 one with CoreRangeSet in tt::tt_metal, which
// isSpelling takes as the same function.
func TestSpellings(t *testing.T) {
	got := spellings(symTrackAllocateCB, symTrackAllocate)
	want := []string{symTrackAllocateCB, symTrackAllocate, v0Name(symTrackAllocateCB), v0Name(symTrackAllocate), symTrackAllocateCBNS}
	if !slices.Equal(got, want) {
		t.Errorf("spellings:\n%q\nwant\n%q", got, want)
	}
	for _, n := range []string{symTrackAllocateCB, v0Name(symTrackAllocateCB), symTrackAllocateCBNS} {
		if !isSpelling(n, symTrackAllocateCB) {
			t.Errorf("%s is not a spelling of track_allocate_cb", n)
		}
	}
	if isSpelling(symTrackAllocate, symTrackAllocateCB) {
		t.Error("track_allocate is a spelling of track_allocate_cb")
	}
}
