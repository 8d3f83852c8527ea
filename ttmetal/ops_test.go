package ttmetal

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tttrace/tttrace/internal/crafted"
)

// opsTruth is, for the functions testdata/ttnn_ops.cpp defines, which are
// ops and what they are named, as patterns over the names `nm -C` prints
// (the compiler's own view, independent of FindOps' demangling); the
// addresses come from nm. $1 in a name is the pattern's first group.
type opsTruth struct {
	re   *regexp.Regexp
	name string
	kind OpKind
}

var opsTruthAll = []opsTruth{
	// A free function of namespace ttnn is an op in every era.
	{regexp.MustCompile(`^ttnn::op_summary\[abi:cxx11\]\(`), "ttnn.op_summary", OpTop},
	// The launch templates of every era; the adapter's argument is
	// MeshDeviceOperationAdapter<Op>.
	{regexp.MustCompile(`(?:^| )ttnn::device_operation::detail::(?:launch|invoke|launch_on_single_device|launch_on_worker_thread)<ttnn::operations::[a-z]+::(\w+)[<>]`), "$1", OpDevice},
	{regexp.MustCompile(`(?:^| )ttnn::device_operation::detail::launch_operation_with_adapter<ttnn::device_operation::MeshDeviceOperationAdapter<ttnn::operations::[a-z]+::(\w+)[<>]`), "$1", OpDevice},
}

var opsTruthEra = map[int][]opsTruth{
	2026: {
		{regexp.MustCompile(`^ttnn::(matmul|add|subtract|linear)\(`), "ttnn.$1", OpTop},
		{regexp.MustCompile(`^ttnn::experimental::(nlp_concat_heads)\(`), "ttnn.experimental.$1", OpTop},
		{regexp.MustCompile(`^ttnn::transformer::(attention_softmax)\(`), "ttnn.transformer.$1", OpTop},
	},
	2025: opsTruthG1,
	2024: opsTruthG1,
}

// The fixture's registered_operation_t: op_t::invoke named by the
// registration's string (ttnn::prim::matmul's PrimMatmul and the
// unregistered NotRegistered are not ops).
var opsTruthG1 = []opsTruth{
	{regexp.MustCompile(`^ttnn::operations::matmul::MatmulOperation::invoke\(`), "ttnn.matmul", OpTop},
	{regexp.MustCompile(`^ttnn::operations::binary::BinaryOperation<\(ttnn::operations::binary::BinaryOpType\)0>::invoke\(`), "ttnn.add", OpTop},
	{regexp.MustCompile(`^ttnn::operations::binary::BinaryOperation<\(ttnn::operations::binary::BinaryOpType\)1>::invoke\(`), "ttnn.subtract", OpTop},
	{regexp.MustCompile(`^ttnn::operations::experimental::NlpConcatHeadsOperation::invoke\(`), "ttnn.experimental.nlp_concat_heads", OpTop},
}

var opsFormsEra = map[int][]string{
	2026: {FormFreeFunction, FormLaunch, FormAdapter},
	2025: {FormFreeFunction, FormRegisteredRTTI, FormInvoke, FormSingleDevice, FormAdapter},
	2024: {FormFreeFunction, FormRegisteredRTTI, FormInvoke, FormSingleDevice, FormWorkerThread},
}

// nmOps lists, from nm's output for lib (dynamic: .dynsym only), the op
// functions the truth names: address -> "kind name".
func nmOps(t *testing.T, lib string, era int, dynamic bool) map[uint64]string {
	t.Helper()
	args := []string{"-C", "--defined-only"}
	if dynamic {
		args = append(args, "-D")
	}
	out, err := exec.Command("nm", append(args, lib)...).Output()
	if err != nil {
		t.Fatalf("nm %s: %v", lib, err)
	}
	rules := append(append([]opsTruth(nil), opsTruthAll...), opsTruthEra[era]...)
	want := map[uint64]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 3)
		if len(f) < 3 || !strings.ContainsAny(f[1], "TtWw") {
			continue // functions only (text, weak)
		}
		name := f[2]
		if strings.Contains(name, "[clone .part") || strings.Contains(name, "[clone .cold") {
			continue
		}
		addr, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			t.Fatalf("nm line %q: %v", sc.Text(), err)
		}
		for _, r := range rules {
			if m := r.re.FindStringSubmatchIndex(name); m != nil {
				got := string(r.re.ExpandString(nil, r.name, name, m))
				want[addr] = r.kind.String() + " " + got
				break
			}
		}
	}
	return want
}

// buildOps compiles testdata/ttnn_ops.cpp for an era with cc.
func buildOps(t *testing.T, cc string, era int) string {
	t.Helper()
	src, err := os.ReadFile("testdata/ttnn_ops.cpp")
	if err != nil {
		t.Fatal(err)
	}
	return compile(t, cc, "ttnn_ops.cpp", string(src), "_ttnncpp.so",
		[]string{"-std=c++20", "-O2", "-shared", "-fPIC", "-DTTNN_ERA=" + strconv.Itoa(era)})
}

// stripped copies so with only .dynsym left.
func stripped(t *testing.T, so string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "_ttnncpp.so")
	if b, err := exec.Command("strip", "--strip-all", "-o", out, so).CombinedOutput(); err != nil {
		t.Fatalf("strip: %v\n%s", err, b)
	}
	return out
}

// TestFindOps compares FindOps on the fixture of each era, built by gcc and
// clang, with and without .symtab, with nm's view of the same file: the
// same functions at the same addresses, named the same, nothing else; the
// file offset of each holds the bytes of its address.
func TestFindOps(t *testing.T) {
	for _, cc := range []string{"g++", "clang++"} {
		for _, era := range []int{2024, 2025, 2026} {
			for _, strip := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%d/stripped=%v", cc, era, strip), func(t *testing.T) {
					so := buildOps(t, cc, era)
					if strip {
						so = stripped(t, so)
					}
					want := nmOps(t, so, era, strip)
					lib, err := OpenLibrary(so)
					if err != nil {
						t.Fatal(err)
					}
					defer lib.Close()
					if lib.HasSymtab == strip {
						t.Fatalf(".symtab present: %v", lib.HasSymtab)
					}
					tab, err := FindOps(lib)
					if err != nil {
						t.Fatal(err)
					}
					got := map[uint64]string{}
					for i, o := range tab.Ops {
						got[o.Addr] = o.Kind.String() + " " + o.Name
						if i > 0 && tab.Ops[i-1].Addr >= o.Addr {
							t.Errorf("ops not sorted by address, one per address: %#x after %#x", o.Addr, tab.Ops[i-1].Addr)
						}
						checkOffset(t, so, o)
					}
					if !mapsEqual(got, want) {
						t.Errorf("FindOps:\n%s\nnm:\n%s", listOps(got), listOps(want))
					}
					if tab.Truncated || tab.Unread != 0 {
						t.Errorf("truncated %v, unread %d", tab.Truncated, tab.Unread)
					}
					for _, f := range tab.Forms {
						if !slices.Contains(opsFormsEra[era], f) {
							t.Errorf("form %s found, not one of the era's %v", f, opsFormsEra[era])
						}
					}
					if !slices.Contains(tab.Forms, FormFreeFunction) || len(tab.Forms) < 2 {
						t.Errorf("forms %v", tab.Forms)
					}
				})
			}
		}
	}
}

// checkOffset checks that o's file offset holds the bytes of the section
// that holds its address.
func checkOffset(t *testing.T, so string, o Op) {
	t.Helper()
	f, err := elf.Open(so)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, s := range f.Sections {
		if s.Type != elf.SHT_PROGBITS || o.Addr < s.Addr || o.Addr+8 > s.Addr+s.Size {
			continue
		}
		want := make([]byte, 8)
		s.ReadAt(want, int64(o.Addr-s.Addr))
		raw, _ := os.ReadFile(so)
		if o.Offset+8 > uint64(len(raw)) || !bytes.Equal(raw[o.Offset:o.Offset+8], want) {
			t.Errorf("%s at %#x: file offset %#x does not hold its code", o.Name, o.Addr, o.Offset)
		}
		return
	}
	t.Errorf("%s at %#x: in no section", o.Name, o.Addr)
}

func mapsEqual(a, b map[uint64]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func listOps(m map[uint64]string) string {
	var keys []uint64
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %#x %s\n", k, m[k])
	}
	return b.String()
}

// TestFindOpsWith: the registrations of one library name the op_t::invoke
// another defines (the Python module's typeinfo, the C++ library's
// functions); without them, no invoke is an op.
func TestFindOpsWith(t *testing.T) {
	open := func(so string) *Library {
		lib, err := OpenLibrary(so)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lib.Close() })
		return lib
	}
	src, err := os.ReadFile("testdata/ttnn_ops.cpp")
	if err != nil {
		t.Fatal(err)
	}
	pre := []string{"-std=c++20", "-O2", "-shared", "-fPIC", "-DTTNN_ERA=2025"}
	module := open(compile(t, "g++", "ttnn_ops.cpp", string(src), "_ttnn.so", pre))
	cpp := open(stripped(t, compile(t, "g++", "ttnn_ops.cpp", string(src), "_ttnncpp.so", append(pre, "-DTTNN_NO_TYPEID"))))
	regs, err := FindOpRegistrations(module)
	if err != nil {
		t.Fatal(err)
	}
	if regs.Len() != 4 { // matmul, add, subtract, experimental.nlp_concat_heads; not prim::matmul
		t.Fatalf("registrations: %v", regs.byType)
	}
	if own, err := FindOpRegistrations(cpp); err != nil || own.Len() != 0 {
		t.Fatalf("registrations of the library without typeinfo: %v, %v", own.byType, err)
	}
	invokes := func(regs ...*OpRegistrations) []string {
		tab, err := FindOpsWith(cpp, regs...)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, o := range tab.Ops {
			if o.Form == FormRegisteredRTTI {
				names = append(names, o.Name)
			}
		}
		slices.Sort(names)
		return names
	}
	if got := invokes(); len(got) != 0 {
		t.Errorf("without registrations, invoke ops %v", got)
	}
	// nm -D of the stripped library: the exported invoke functions.
	want := nmOps(t, cpp.Path, 2025, true)
	var wantNames []string
	for _, v := range want {
		if n, ok := strings.CutPrefix(v, "op ttnn."); ok && n != "op_summary" {
			wantNames = append(wantNames, "ttnn."+n)
		}
	}
	slices.Sort(wantNames)
	if got := invokes(regs); !slices.Equal(got, wantNames) || len(got) < 4 {
		t.Errorf("with the module's registrations, invoke ops %v, nm: %v", got, wantNames)
	}
}

// symLib builds a library whose .dynsym has a FUNC symbol for each of
// syms (an index into names and an address) and returns its path.
func symLib(t *testing.T, names []string, syms [][2]uint64) string {
	t.Helper()
	str := []byte{0}
	offs := make([]uint32, len(names))
	for i, n := range names {
		offs[i] = uint32(len(str))
		str = append(append(str, n...), 0)
	}
	sym := make([]byte, 24*(len(syms)+1))
	for i, s := range syms {
		e := sym[24*(i+1):]
		binary.LittleEndian.PutUint32(e[0:], offs[s[0]])
		e[4] = byte(elf.STB_GLOBAL)<<4 | byte(elf.STT_FUNC)
		binary.LittleEndian.PutUint16(e[6:], 1)
		binary.LittleEndian.PutUint64(e[8:], s[1])
		binary.LittleEndian.PutUint64(e[16:], 16)
	}
	return writeCrafted(t, crafted.File{Sections: []crafted.Section{
		{Name: ".dynsym", Type: elf.SHT_DYNSYM, Flags: elf.SHF_ALLOC, Data: sym, Link: 2, Entsize: 24},
		{Name: ".dynstr", Type: elf.SHT_STRTAB, Flags: elf.SHF_ALLOC, Data: str},
	}})
}

// TestFindOpsHostile: symbol tables that would make FindOps hold, parse or
// print without bound give a bounded table, quickly, in bounded memory.
func TestFindOpsHostile(t *testing.T) {
	launch := mangledDeviceDetail + "6launchI"
	cases := []struct {
		name      string
		names     []string
		syms      func(n int) [][2]uint64
		ops       int
		truncated bool
		unread    int
	}{
		{
			// More op functions than MaxOps, each named once.
			name: "many-ops",
			names: func() []string {
				var ns []string
				for i := range MaxOps + 100 {
					id := fmt.Sprintf("op%d", i)
					ns = append(ns, fmt.Sprintf("%s%d%sERKi", mangledTTNN, len(id), id))
				}
				return ns
			}(),
			syms: func(n int) [][2]uint64 {
				var s [][2]uint64
				for i := range n {
					s = append(s, [2]uint64{uint64(i), uint64(64 + i)})
				}
				return s
			},
			ops: MaxOps, truncated: true,
		},
		{
			// 200000 symbols at distinct addresses naming one op.
			name:  "one-name-many-symbols",
			names: []string{mangledTTNN + "3addERKi"},
			syms: func(int) [][2]uint64 {
				var s [][2]uint64
				for i := range 200000 {
					s = append(s, [2]uint64{0, uint64(64 + i)})
				}
				return s
			},
			ops: MaxOps, truncated: true,
		},
		{
			// A launch's name running on for 1 MiB.
			name:   "huge-name",
			names:  []string{launch + strings.Repeat("N4ttnn1aE", 1<<20/9) + "EvRKi"},
			syms:   func(int) [][2]uint64 { return [][2]uint64{{0, 64}} },
			unread: 1,
		},
		{
			// A launch nested 2000 templates deep, within maxOpSymbol.
			name:   "deep-nesting",
			names:  []string{launch + strings.Repeat("N1aI", 2000) + strings.Repeat("EE", 2000) + "EvRKi"},
			syms:   func(int) [][2]uint64 { return [][2]uint64{{0, 64}} },
			unread: 1,
		},
		{
			// A free function of ttnn with a name of 300 bytes, and one
			// nested in namespaces 100 deep: no op.
			name: "long-identifiers",
			names: []string{mangledTTNN + "300" + strings.Repeat("a", 300) + "Ei",
				mangledTTNN + strings.Repeat("12experimental", 100) + "1fEi"},
			syms: func(int) [][2]uint64 { return [][2]uint64{{0, 64}, {1, 80}} },
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := symLib(t, c.names, c.syms(len(c.names)))
			within(t, 20*time.Second, 256<<20, func() {
				lib, err := OpenLibrary(p)
				if err != nil {
					t.Error(err)
					return
				}
				defer lib.Close()
				tab, err := FindOps(lib)
				if err != nil {
					t.Error(err)
					return
				}
				if len(tab.Ops) != c.ops || tab.Truncated != c.truncated || tab.Unread != c.unread {
					t.Errorf("%d ops, truncated %v, unread %d; want %d, %v, %d",
						len(tab.Ops), tab.Truncated, tab.Unread, c.ops, c.truncated, c.unread)
				}
			})
		})
	}
}
