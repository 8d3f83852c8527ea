package ttmetal

import (
	"debug/elf"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// buildAsm assembles and links GNU assembly into a shared object.
func buildAsm(t *testing.T, src string) string {
	t.Helper()
	return compile(t, "gcc", "lib.s", src, "libtt_metal.so", []string{"-shared", "-nostdlib"})
}

// scanLibSrc defines, among thousands of long distractor names (so that the
// string tables span several sweep chunks), the attach path's names, names
// that extend them, names that share their first 16 bytes, and names that
// end with a wanted name (the linker stores the wanted one as the tail of
// the longer string: its name starts inside another string). Some are
// local, so they are in .symtab only.
func scanLibSrc(n int) (string, []string) {
	var b strings.Builder
	var names []string
	def := func(name string, global bool) {
		names = append(names, name)
		if global {
			fmt.Fprintf(&b, ".globl %s\n", name)
		}
		fmt.Fprintf(&b, ".type %s, @function\n%s:\n\tret\n", name, name)
	}
	b.WriteString(".text\n")
	wanted := []string{symTrackAllocate, symTrackDeallocate, symDeviceClose, symMarkAsDeallocated,
		v0Name(symTrackAllocate), symBufferCreateViewPrefix + "RKNS0_18BufferShardingArgsE",
		symBufferCreateOwningPrefix + "St8optionalIbE", symPimplSize}
	step := max(n/len(wanted), 1)
	for i := 0; i < n; i++ {
		// ~200-byte names: about 2.4 MB in each string table.
		def(fmt.Sprintf("_ZN2tt8tt_metal%d%s%dE%s", 6+len(fmt.Sprint(i)), "Filler", i, strings.Repeat("PKNS0_6BufferE", 13)), true)
		if i%step == 0 {
			w := wanted[(i/step)%len(wanted)]
			def(w, i%(2*step) != 0)
			def(w+"Ev_extended", true)
			def("tail_"+w, true)
			def(fmt.Sprintf("%sZdistract%d", w[:16], i), true)
		}
	}
	return b.String(), names
}

// oracle lists what ScanSymbols must report, from debug/elf: the defined
// symbols of .dynsym, then .symtab, whose name has one of the prefixes.
func oracle(t *testing.T, so string, prefixes []string) []string {
	t.Helper()
	ef, err := elf.Open(so)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	var out []string
	for _, get := range []func() ([]elf.Symbol, error){ef.DynamicSymbols, ef.Symbols} {
		syms, err := get()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range syms {
			if s.Section == elf.SHN_UNDEF {
				continue
			}
			for _, p := range prefixes {
				if strings.HasPrefix(s.Name, p) {
					out = append(out, fmt.Sprintf("%s %#x", s.Name, s.Value))
					break
				}
			}
		}
	}
	return out
}

// ScanSymbols, from the attach scan's cache and by a scan of its own,
// reports what debug/elf reads from the same file, in the same order.
func TestScanSymbolsMatchesDebugELF(t *testing.T) {
	src, _ := scanLibSrc(12000)
	so := buildAsm(t, src)
	if st, _ := elf.Open(so); st != nil {
		if s := st.Section(".strtab"); s == nil || s.Size < 2*uint64(chunkSize) {
			t.Fatalf("the string table should span several chunks: %v", s)
		}
		st.Close()
	}
	lib := openTestLib(t, so)
	cases := [][]string{
		spellings(symTrackAllocate), // IsTTMetal's: builds the cache
		{symBufferCreateViewPrefix, symPimplSize, symDeviceClose},
		knownPrefixes,
		{symTrackAllocate + "Ev_ext"}, // extends a cached name: from the cache
		{"_ZN2tt8tt_metal6"},          // shorter than the cached names: a scan of its own
		{"tail_", "_ZN2tt8tt_metal12GraphTracker"},
		{"_ZN2tt8tt_metal14Filler1234E"},
		{"nothing_is_named_this"},
	}
	for _, prefixes := range cases {
		var got []string
		if err := lib.ScanSymbols(prefixes, func(s Symbol) {
			got = append(got, fmt.Sprintf("%s %#x", s.Name, s.Value))
		}); err != nil {
			t.Fatal(err)
		}
		want := oracle(t, so, prefixes)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("ScanSymbols(%q): %d symbols, debug/elf %d\ngot  %q\nwant %q", prefixes, len(got), len(want), got, want)
		}
	}
	if lib.cache == nil || len(lib.cache.syms) == 0 {
		t.Error("the attach scan's cache was not built")
	}
	// A tail-merged name really starts inside another string here, or the
	// case is not exercised.
	ef, _ := elf.Open(so)
	defer ef.Close()
	dynstr, _ := ef.Section(".dynstr").Data()
	if i := strings.Index(string(dynstr), "tail_"+symTrackAllocate); i < 0 || strings.Contains(string(dynstr), "\x00"+symTrackAllocate+"\x00") {
		t.Log("the linker did not merge the tail names; suffix merging not exercised")
	}
}

// callSites sweeps the code a chunk at a time: with tiny chunks, calls
// straddle every boundary, and the call sites are still those objdump shows.
func TestCallSitesAcrossChunks(t *testing.T) {
	defer func(n int) { chunkSize = n }(chunkSize)
	chunkSize = 7
	for _, flags := range [][]string{nil, {"-fvisibility=hidden"}} {
		so := buildC(t, callsSrc, flags...)
		lib := openTestLib(t, so)
		c, err := lib.code()
		if err != nil {
			t.Fatal(err)
		}
		sites, unconfirmed, err := c.callSites([]Symbol{funcSym(t, lib, "callee")})
		if err != nil || unconfirmed != 0 {
			t.Fatalf("callSites: %v, %d unconfirmed", err, unconfirmed)
		}
		out, err := exec.Command("objdump", "-d", "--no-show-raw-insn", so).Output()
		if err != nil {
			t.Fatal(err)
		}
		want := len(regexp.MustCompile(`(?m)\t(call|jmp)\s+.*<callee(@plt)?>$`).FindAll(out, -1))
		if len(sites["callee"]) != want || want < 4 {
			t.Errorf("%v: %d call sites of callee, objdump shows %d", flags, len(sites["callee"]), want)
		}
	}
}

// The same scans with tiny chunks: names straddle every boundary.
func TestScanSymbolsTinyChunks(t *testing.T) {
	defer func(n int) { chunkSize = n }(chunkSize)
	chunkSize = 29
	src, _ := scanLibSrc(16)
	so := buildAsm(t, src)
	lib := openTestLib(t, so)
	for _, prefixes := range [][]string{spellings(symTrackAllocate), {"tail_"}, {"_ZN2tt8tt_metal6"}, {symBufferCreateViewPrefix, symPimplSize}} {
		var got []string
		if err := lib.ScanSymbols(prefixes, func(s Symbol) {
			got = append(got, fmt.Sprintf("%s %#x", s.Name, s.Value))
		}); err != nil {
			t.Fatal(err)
		}
		if want := oracle(t, so, prefixes); strings.Join(got, "\n") != strings.Join(want, "\n") || len(want) == 0 {
			t.Errorf("ScanSymbols(%q):\ngot  %q\nwant %q", prefixes, got, want)
		}
	}
}
