package ttmetal

import (
	"bytes"
	"cmp"
	"debug/elf"
	"encoding/binary"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// TT-NN ops (issue #31): the op functions of a TT-NN library (`_ttnn*.so`,
// `_ttnncpp.so`), found from its symbol tables (also stripped: `.dynsym`
// and the exported RTTI), so that one entry probe per op function tells
// which op a thread is in. docs/ttmetal.md ("TT-NN ops") says which
// upstream files each form rests on.

// OpKind says what an op function is to a thread's op frames.
type OpKind uint8

const (
	// OpTop is an op as Python calls it: a 2026 `ttnn::<op>` free function
	// or a 2024-25 `op_t::invoke` named by its registered_operation_t. It
	// makes a frame that counts in the op's depth.
	OpTop OpKind = iota + 1
	// OpDevice is a device operation's launch (`launch<Op>` and the older
	// `invoke<Op>`, `launch_on_single_device<Op>`, the mesh adapter's
	// launch): it names the device op inside the innermost OpTop frame and
	// does not count in the depth.
	OpDevice
)

func (k OpKind) String() string {
	switch k {
	case OpTop:
		return "op"
	case OpDevice:
		return "device_op"
	}
	return "unknown"
}

// Op is one op function of a library.
type Op struct {
	// Name is what the records show: the Python name of an OpTop
	// ("ttnn.matmul"), the short type name of an OpDevice's device
	// operation ("MatmulDeviceOperation").
	Name string
	Kind OpKind
	// Addr is the function's entry (link-time virtual address); Offset its
	// file offset, where the uprobe goes.
	Addr, Offset uint64
	// Symbol is the symbol it was found by (mangled), for doctor and tests.
	Symbol string
	// Form is the naming form it was found by (OpTable.Forms).
	Form string
}

// OpTable is the op functions of one library, at most MaxOps, sorted by
// Addr, one entry per function (a function found by two names keeps the
// first rule's).
type OpTable struct {
	Ops []Op
	// Forms says which naming forms were found ("launch", "invoke",
	// "free_function", "registered_operation_rtti", ...), for doctor.
	Forms []string
	// Truncated is true when the library had more than MaxOps op
	// functions: the rest are not probed (doctor says so).
	Truncated bool
	// Unread counts the names of an op's form that could not be read: longer
	// than maxOpSymbol, not demangled, or past the library's budget of
	// demangled bytes. Their functions are not probed.
	Unread int
}

// Count returns how many of the table's functions are of kind k.
func (t *OpTable) Count(k OpKind) int {
	n := 0
	for _, o := range t.Ops {
		if o.Kind == k {
			n++
		}
	}
	return n
}

// MaxOps bounds the op functions probed in one library.
const MaxOps = 16384

// The forms, as OpTable.Forms names them.
const (
	FormFreeFunction   = "free_function"             // 2026: ttnn::<op>(...)
	FormRegisteredRTTI = "registered_operation_rtti" // 2024-25: op_t::invoke named by registered_operation_t's typeinfo
	FormLaunch         = "launch"                    // ttnn::device_operation::detail::launch<Op>
	FormInvoke         = "invoke"                    // detail::invoke<Op> (older; 2026 forwards to launch)
	FormSingleDevice   = "launch_on_single_device"   // detail::launch_on_single_device<Op> (2025)
	FormAdapter        = "launch_operation_with_adapter"
	FormWorkerThread   = "launch_on_worker_thread" // detail::launch_on_worker_thread<Op> (2024-25, one device)
)

// formOrder is the order OpTable.Forms lists them in.
var formOrder = []string{FormFreeFunction, FormRegisteredRTTI, FormLaunch, FormInvoke, FormSingleDevice, FormAdapter, FormWorkerThread}

// Bounds on what a library's names can make FindOps do.
const (
	// maxOpSymbol is the longest mangled name of an op form read: a real
	// one is well under 2 KiB; longer ones are counted in Unread.
	maxOpSymbol = 8 << 10
	// maxOpName is the longest op name (Python name or device-op type name)
	// taken.
	maxOpName = 256
	// opDemangleBudget is how many bytes of names one FindOps demangles
	// (the byte-level checks come first: only the device-op forms, the
	// registered_operation_t typeinfo and the invoke functions are
	// demangled).
	opDemangleBudget = 64 << 20
	// maxOpCandidates bounds the names of op forms kept per symbol table
	// (many symbols may name one string), maxOpSymbolBytes their bytes.
	maxOpCandidates  = 4 * MaxOps
	maxOpSymbolBytes = 64 << 20
	// maxPrintedType bounds a demangled type printed (2^12 bytes): a type
	// that reaches it is not matched.
	maxPrintedTypePow = 12
)

// Mangled heads of the forms (docs/ttmetal.md, "TT-NN ops").
const (
	mangledTTNN         = "_ZN4ttnn"
	mangledDeviceDetail = "_ZN4ttnn16device_operation6detail"
	mangledRegisteredTI = "_ZTIN4ttnn10decorators22registered_operation_tI"
	mangledRegisteredTS = "_ZTSN4ttnn10decorators22registered_operation_tI"
	mangledInvoke       = "6invoke" // then E (a function) or I (a function template)
)

// deviceForms are the launch templates of ttnn::device_operation::detail
// whose first template argument is the device operation (the adapter's is
// MeshDeviceOperationAdapter<Op>).
var deviceForms = []struct{ name, form string }{
	{"launch", FormLaunch},
	{"invoke", FormInvoke},
	{"launch_on_single_device", FormSingleDevice},
	{"launch_operation_with_adapter", FormAdapter},
	{"launch_on_worker_thread", FormWorkerThread},
}

// freeFunctionNamespaces are the namespaces below ttnn whose free functions
// Python calls as ttnn.<ns>.<op> (bind_function's Namespace argument).
var freeFunctionNamespaces = map[string]bool{"experimental": true, "transformer": true}

// notOpNamespaces are namespace names that never hold ops.
var notOpNamespaces = map[string]bool{"prim": true, "detail": true, "details": true, "impl": true, "internal": true}

// IsTTNNName reports whether a file is named as a TT-NN library is: the
// Python module `_ttnn*.so` (`_ttnn.so`, `_ttnn.cpython-310-x86_64-linux-gnu.so`)
// or the C++ ops `_ttnncpp.so`.
func IsTTNNName(path string) bool {
	b := filepath.Base(path)
	return strings.HasPrefix(b, "_ttnn") && strings.Contains(b, ".so")
}

// OpRegistrations are the registered_operation_t<"ttnn::name", op_t> a
// library's exported typeinfo names (2024-25 builds): op_t (as demangled)
// to the op's Python name. The typeinfo is where the Python bindings take
// typeid of the operation, which may be another library than the one
// defining op_t::invoke (FindOpsWith).
type OpRegistrations struct {
	byType map[string]string
	// Truncated is true when the library named more than MaxOps.
	Truncated bool
	// Unread counts the typeinfo names that could not be read.
	Unread int
}

// Len returns the number of registered operations.
func (r *OpRegistrations) Len() int {
	if r == nil {
		return 0
	}
	return len(r.byType)
}

// FindOps returns the op functions of a TT-NN library (`_ttnn*.so`,
// `_ttnncpp.so`) from its .dynsym and .symtab: each table swept from the
// file (symscan.go), the names of an op's form classified as they pass,
// so that memory does not grow with the library's symbol count.
func FindOps(lib *Library) (*OpTable, error) { return FindOpsWith(lib) }

// FindOpsWith is FindOps with the registered operations of other libraries
// of the same build too (the Python module's typeinfo names the op_t whose
// invoke another library defines).
func FindOpsWith(lib *Library, more ...*OpRegistrations) (*OpTable, error) {
	regs, err := FindOpRegistrations(lib)
	if err != nil {
		return nil, err
	}
	for _, m := range more {
		if m == nil {
			continue
		}
		for k, v := range m.byType {
			if len(regs.byType) >= MaxOps {
				regs.Truncated = true
				break
			}
			regs.byType[k] = v
		}
		regs.Truncated = regs.Truncated || m.Truncated
	}
	s := &opScan{lib: lib, regs: regs, budget: opDemangleBudget}
	tab := &OpTable{Truncated: regs.Truncated}
	byAddr := map[uint64]Op{}
	for _, t := range []struct{ sym, str string }{{".dynsym", ".dynstr"}, {".symtab", ".strtab"}} {
		if err := s.table(t.sym, t.str, tab, byAddr); err != nil {
			return nil, err
		}
	}
	tab.Unread += s.unread
	tab.Truncated = tab.Truncated || s.truncated
	for _, o := range byAddr {
		tab.Ops = append(tab.Ops, o)
	}
	slices.SortFunc(tab.Ops, func(a, b Op) int { return cmp.Compare(a.Addr, b.Addr) })
	seen := map[string]bool{}
	for _, o := range tab.Ops {
		seen[o.Form] = true
	}
	for _, f := range formOrder {
		if seen[f] {
			tab.Forms = append(tab.Forms, f)
		}
	}
	return tab, nil
}

// FindOpRegistrations returns the registered operations whose typeinfo
// (or typeinfo name) a library's symbol tables name.
func FindOpRegistrations(lib *Library) (*OpRegistrations, error) {
	s := &opScan{lib: lib, budget: opDemangleBudget}
	regs := &OpRegistrations{byType: map[string]string{}}
	for _, t := range []struct{ sym, str string }{{".dynsym", ".dynstr"}, {".symtab", ".strtab"}} {
		tb, ok, err := lib.tableSections(t.sym, t.str)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		err = s.names(&tb, func(head []byte) bool {
			return bytes.HasPrefix(head, []byte(mangledRegisteredTI)) || bytes.HasPrefix(head, []byte(mangledRegisteredTS))
		}, func(_ uint32, name []byte, whole bool) {
			if !whole {
				regs.Unread++
				return
			}
			typ, py, ok := s.registration(name)
			if !ok {
				return
			}
			if _, dup := regs.byType[typ]; !dup && len(regs.byType) >= MaxOps {
				regs.Truncated = true
				return
			}
			regs.byType[typ] = py
		})
		if err != nil {
			return nil, err
		}
	}
	regs.Unread += s.unread
	return regs, nil
}

// opScan is one FindOps's state: its budget of demangled bytes and what
// it could not read.
type opScan struct {
	lib       *Library
	regs      *OpRegistrations
	budget    int
	unread    int
	truncated bool
}

// opClass is what a name of an op form is.
type opClass struct {
	kind       OpKind
	name, form string
	symbol     string
}

// table classifies the names of one symbol table's string table, then
// takes the defined functions that carry them.
func (s *opScan) table(symName, strName string, tab *OpTable, byAddr map[uint64]Op) error {
	t, ok, err := s.lib.tableSections(symName, strName)
	if err != nil || !ok {
		return err
	}
	cands := map[uint32]opClass{}
	symBytes := 0
	err = s.names(&t, s.wanted, func(off uint32, name []byte, whole bool) {
		c, ok, tooLong := s.classify(name, whole)
		if tooLong {
			s.unread++
			return
		}
		if !ok {
			return
		}
		if len(cands) >= maxOpCandidates || symBytes+len(name) > maxOpSymbolBytes {
			s.truncated = true
			return
		}
		symBytes += len(name)
		c.symbol = string(name)
		cands[off] = c
	})
	if err != nil || len(cands) == 0 {
		return err
	}
	return s.lib.eachSym(&t, func(ent []byte) {
		c, hit := cands[binary.LittleEndian.Uint32(ent[0:])]
		if !hit || elf.SymType(ent[4]&0xf) != elf.STT_FUNC {
			return
		}
		shndx := elf.SectionIndex(binary.LittleEndian.Uint16(ent[6:]))
		addr := binary.LittleEndian.Uint64(ent[8:])
		if shndx == elf.SHN_UNDEF || shndx >= elf.SHN_LORESERVE || addr == 0 {
			return
		}
		old, dup := byAddr[addr]
		if !dup && len(byAddr) >= MaxOps {
			s.truncated = true
			return
		}
		off, err := s.lib.FileOffset(addr)
		if err != nil {
			return // not in a loaded segment: nothing to probe
		}
		o := Op{Name: c.name, Kind: c.kind, Addr: addr, Offset: off, Symbol: c.symbol, Form: c.form}
		if !dup || opBefore(o, old) {
			byAddr[addr] = o
		}
	})
}

// opBefore orders two names of one function: the one kept is an OpTop
// before an OpDevice, then the smaller name, then the smaller symbol.
func opBefore(a, b Op) bool {
	if a.Kind != b.Kind {
		return a.Kind < b.Kind
	}
	if a.Name != b.Name {
		return a.Name < b.Name
	}
	return a.Symbol < b.Symbol
}

// names calls fn for every place of a string table where a mangled name
// ("_Z...") starts whose first bytes want accepts, with the name up to its
// NUL: whole is false when it runs on for more than maxOpSymbol bytes
// (name then holds the first ones). Names may start inside others
// (linkers merge suffixes), so every "_Z" is a start.
func (s *opScan) names(t *symTable, want func(head []byte) bool, fn func(off uint32, name []byte, whole bool)) error {
	return s.lib.sweep(t.strOff, t.strSize, 1, maxOpSymbol+1, func(base int, d []byte) {
		limit := min(len(d), chunkSize)
		for i := 0; i < limit; {
			x := bytes.Index(d[i:min(len(d), limit+1)], []byte("_Z"))
			if x < 0 {
				return
			}
			i += x
			if !want(d[i:min(len(d), i+len(mangledRegisteredTI))]) {
				i++
				continue
			}
			name, whole := d[i:], true
			if e := bytes.IndexByte(name, 0); e >= 0 && e <= maxOpSymbol {
				name = name[:e]
			} else if e >= 0 || len(name) > maxOpSymbol {
				name, whole = name[:min(len(name), maxOpSymbol)], false
			}
			fn(uint32(base+i), name, whole)
			i++
		}
	})
}

// wanted says whether a name starting with head may be of an op's form:
// of namespace ttnn, or, with registrations, any nested name (an invoke).
func (s *opScan) wanted(head []byte) bool {
	if s.regs.Len() > 0 {
		return bytes.HasPrefix(head, []byte("_ZN"))
	}
	return bytes.HasPrefix(head, []byte(mangledTTNN))
}

// classify says whether a mangled name is an op function's: ok with its
// class, or tooLong when it has an op form's head but could not be read
// (cut at maxOpSymbol, not demangled, past the budget).
func (s *opScan) classify(name []byte, whole bool) (c opClass, ok, tooLong bool) {
	if !bytes.HasPrefix(name, []byte("_ZN")) {
		return c, false, false
	}
	base, entry := cloneBase(name)
	if !entry {
		return c, false, false
	}
	if bytes.HasPrefix(base, []byte(mangledDeviceDetail)) {
		form := deviceForm(base[len(mangledDeviceDetail):])
		if form == "" {
			return c, false, false
		}
		if !whole {
			return c, false, true
		}
		dev, ok := s.deviceOp(base)
		if !ok {
			return c, false, true
		}
		return opClass{kind: OpDevice, name: dev, form: form}, true, false
	}
	if py, ok := freeFunctionName(base); ok {
		if !whole {
			return c, false, true
		}
		return opClass{kind: OpTop, name: py, form: FormFreeFunction}, true, false
	}
	if s.regs.Len() > 0 && bytes.Contains(base, []byte(mangledInvoke)) {
		if !whole {
			return c, false, false // any function named invoke: not counted
		}
		typ, ok := s.invokeClass(base)
		if !ok {
			return c, false, false
		}
		if py, hit := s.regs.byType[typ]; hit {
			return opClass{kind: OpTop, name: py, form: FormRegisteredRTTI}, true, false
		}
	}
	return c, false, false
}

// cloneBase cuts a GCC clone suffix (".isra.0", ".constprop.1", ...) off a
// mangled name; entry is false for the parts of a function that are not
// its entry (".part.N": the outlined rest of a partly inlined function,
// ".cold": its cold code).
func cloneBase(name []byte) (base []byte, entry bool) {
	i := bytes.IndexByte(name, '.')
	if i < 0 {
		return name, true
	}
	suffix := name[i:]
	if bytes.Contains(suffix, []byte(".part")) || bytes.Contains(suffix, []byte(".cold")) {
		return nil, false
	}
	return name[:i], true
}

// deviceForm returns the form of a name of ttnn::device_operation::detail
// (rest: what follows its mangled head) when it is one of the launch
// templates.
func deviceForm(rest []byte) string {
	id, after, ok := sourceName(rest)
	if !ok || len(after) == 0 || after[0] != 'I' {
		return ""
	}
	for _, f := range deviceForms {
		if string(id) == f.name {
			return f.form
		}
	}
	return ""
}

// sourceName parses an Itanium <source-name> (<length><identifier>) at the
// start of b.
func sourceName(b []byte) (id, rest []byte, ok bool) {
	n, i := 0, 0
	for i < len(b) && i < 4 && b[i] >= '0' && b[i] <= '9' {
		n = n*10 + int(b[i]-'0')
		i++
	}
	if i == 0 || b[0] == '0' || n > len(b)-i || n > maxOpName {
		return nil, nil, false
	}
	id = b[i : i+n]
	if !isIdentifier(id) {
		return nil, nil, false
	}
	return id, b[i+n:], true
}

func isIdentifier(b []byte) bool {
	if len(b) == 0 || b[0] >= '0' && b[0] <= '9' {
		return false
	}
	for _, c := range b {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// freeFunctionName returns the Python name of a 2026 op function: a free,
// non-template function of namespace ttnn (ttnn.<op>) or of a namespace
// Python has below it (ttnn.experimental.<op>, ttnn.transformer.<op>, and
// namespaces below those), read from the mangled name's bytes alone:
// _ZN 4ttnn [<ns>...] <op> [B<abi-tag>...] E <parameter types>. Anything
// else is not: operators, constructors, lambdas and local names (their
// components are not source names), member functions (const ones are
// _ZNK; others have a class among the components, which is no namespace
// of ops), templates (I after the name), variables (nothing after E).
func freeFunctionName(m []byte) (string, bool) {
	if !bytes.HasPrefix(m, []byte(mangledTTNN)) {
		return "", false
	}
	rest := m[len(mangledTTNN):]
	parts := []string{"ttnn"}
	for {
		id, r, ok := sourceName(rest)
		if !ok || len(parts) > 4 {
			return "", false
		}
		parts, rest = append(parts, string(id)), r
		for len(rest) > 0 && rest[0] == 'B' { // ABI tags ([abi:cxx11])
			_, r, ok := sourceName(rest[1:])
			if !ok {
				return "", false
			}
			rest = r
		}
		if len(rest) > 0 && rest[0] == 'E' {
			break
		}
	}
	if len(rest) < 2 { // E and at least one parameter type
		return "", false
	}
	if len(parts) > 2 && !freeFunctionNamespaces[parts[1]] {
		return "", false
	}
	for _, p := range parts[1 : len(parts)-1] {
		if notOpNamespaces[p] {
			return "", false
		}
	}
	py := strings.Join(parts, ".")
	return py, len(py) <= maxOpName
}

// demangle parses a mangled name (without clone suffix) within the budget;
// nil when it is spent, the name does not parse, or the parser fails.
func (s *opScan) demangle(m []byte) (a demangle.AST) {
	if len(m) > s.budget {
		s.budget = 0
		s.truncated = true
		return nil
	}
	s.budget -= len(m)
	defer func() {
		if recover() != nil { // a name the parser cannot take is no op's
			a = nil
		}
	}()
	a, err := demangle.ToAST(string(m))
	if err != nil {
		return nil
	}
	return a
}

// printType prints a demangled type, bounded; ok is false when it reaches
// the bound.
func printType(a demangle.AST) (string, bool) {
	const max = 1 << maxPrintedTypePow
	s := demangle.ASTToString(a, demangle.MaxLength(maxPrintedTypePow))
	return s, len(s) < max
}

// deviceOp returns the short type name of the device operation a launch
// template is instantiated for: its first template argument, or the
// argument of MeshDeviceOperationAdapter<Op> when that is it.
func (s *opScan) deviceOp(m []byte) (string, bool) {
	a := s.demangle(m)
	if a == nil {
		return "", false
	}
	f, ok := a.(*demangle.Typed)
	if !ok {
		return "", false
	}
	t, ok := f.Name.(*demangle.Template)
	if !ok || len(t.Args) == 0 {
		return "", false
	}
	op := t.Args[0]
	if at, ok := op.(*demangle.Template); ok && lastName(at.Name) == "MeshDeviceOperationAdapter" && len(at.Args) > 0 {
		op = at.Args[0]
	}
	if ot, ok := op.(*demangle.Template); ok {
		op = ot.Name
	}
	n := lastName(op)
	return n, n != "" && len(n) <= maxOpName && isIdentifier([]byte(n))
}

// lastName is the last component of a (qualified) name: "" when it is not
// a plain name.
func lastName(a demangle.AST) string {
	for range 64 {
		switch n := a.(type) {
		case *demangle.Qualified:
			a = n.Name
		case *demangle.TaggedName:
			a = n.Name
		case *demangle.Name:
			return n.Name
		default:
			return ""
		}
	}
	return ""
}

// registration reads a registered_operation_t typeinfo (or typeinfo name):
// its op_t printed, and the Python name its fixed_string gives ("ttnn::add"
// -> "ttnn.add"). ttnn::prim::* are not ops (they only pass through).
func (s *opScan) registration(m []byte) (typ, py string, ok bool) {
	a := s.demangle(m)
	sp, isSpecial := a.(*demangle.Special)
	if !isSpecial {
		if a != nil {
			s.unread++
		}
		return "", "", false
	}
	t, isTemplate := sp.Val.(*demangle.Template)
	if !isTemplate || len(t.Args) < 2 {
		return "", "", false
	}
	name, ok := fixedString(t.Args[0])
	if !ok || !strings.HasPrefix(name, "ttnn::") || strings.HasPrefix(name, "ttnn::prim::") {
		return "", "", false
	}
	parts := strings.Split(name, "::")
	for _, p := range parts {
		if !isIdentifier([]byte(p)) {
			return "", "", false
		}
	}
	typ, ok = printType(t.Args[1])
	if !ok {
		return "", "", false
	}
	return typ, strings.Join(parts, "."), true
}

// fixedString reads the characters of a fixed_string template argument
// (reflect::fixed_string<char, N>{char[N+1]{...}} and the like): the char
// literals of its initializer, in order, at most maxOpName of them. A
// trailing NUL ends it (the mangling drops trailing zeros).
func fixedString(a demangle.AST) (string, bool) {
	var b []byte
	bad, visited := false, 0
	a.Traverse(func(n demangle.AST) bool {
		visited++
		if bad || visited > 4*maxOpName {
			bad = true
			return false
		}
		l, ok := n.(*demangle.Literal)
		if !ok {
			return true
		}
		if bt, ok := l.Type.(*demangle.BuiltinType); !ok || bt.Name != "char" {
			return false // the size of fixed_string<char, N>, not a character
		}
		v, err := strconv.Atoi(l.Val)
		if err != nil || l.Neg || v <= 0 || v > 0x7e || len(b) >= maxOpName {
			bad = true
			return false
		}
		b = append(b, byte(v))
		return false
	})
	return string(b), !bad && len(b) > 0
}

// invokeClass returns the class of a static member function named invoke
// (printed as the registrations' op_t is).
func (s *opScan) invokeClass(m []byte) (string, bool) {
	a := s.demangle(m)
	f, ok := a.(*demangle.Typed)
	if !ok {
		return "", false
	}
	name := f.Name
	if t, ok := name.(*demangle.Template); ok { // template <typename... Args> static auto invoke(Args&&...)
		name = t.Name
	}
	q, ok := name.(*demangle.Qualified)
	if !ok || lastName(q.Name) != "invoke" {
		return "", false
	}
	return printType(q.Scope)
}
