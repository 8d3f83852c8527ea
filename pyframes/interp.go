package pyframes

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/tttrace/tttrace/elfx"
)

// ErrNotPython is returned by Detect for a file that is not a CPython
// interpreter (no _PyRuntime symbol).
var ErrNotPython = errors.New("not a CPython interpreter (no _PyRuntime symbol)")

// Interpreter is what Detect learned of one CPython executable or
// libpython: its version, where _PyRuntime is, and the offsets of the
// fields the stack capture reads with where they came from.
type Interpreter struct {
	Path string
	// Major, Minor, Micro version numbers; Micro is -1 when a 3.10 binary
	// does not say it unambiguously (the layout depends on the minor only).
	Major, Minor, Micro int
	// Runtime is the link-time address of _PyRuntime.
	Runtime uint64
	// Types are the link-time addresses of PyCode_Type, PyUnicode_Type and
	// PyBytes_Type: every object read is checked to be of its type.
	CodeType, UnicodeType, BytesType uint64
	// Offsets are valid when Err is nil.
	Offsets Offsets
	// Source says where the offsets came from and how they were checked.
	Source string
	// Err says why the interpreter is not supported; nil when it is.
	Err error
	// text are the file's executable segments (CodeDealloc).
	text []segment
	// codeDealloc is the link-time address of PyCode_Type's tp_dealloc
	// found in the file (dealloc.go), when codeDeallocErr is nil.
	codeDealloc    uint64
	codeDeallocErr error
	// dev and ino name the file read (CodeDealloc attaches to no other).
	dev, ino uint64
	// evalLo, evalHi: the link-time addresses of _PyEval_EvalFrameDefault,
	// [evalLo, evalHi); 0, 0 when it has no sized symbol (EvalFrame).
	evalLo, evalHi uint64
}

// segment is a loaded part of a file: size bytes at link-time address
// vaddr, from file offset off.
type segment struct{ vaddr, size, off uint64 }

// Version is "3.12.1".
func (in *Interpreter) Version() string {
	if in.Micro < 0 {
		return fmt.Sprintf("%d.%d.x", in.Major, in.Minor)
	}
	return fmt.Sprintf("%d.%d.%d", in.Major, in.Minor, in.Micro)
}

// Detect reads one ELF file (a python executable with a static libpython,
// or a libpython shared library). It returns ErrNotPython for a file
// without _PyRuntime; otherwise an Interpreter whose Err says why it is not
// supported, if it is not.
func Detect(path string) (*Interpreter, error) {
	ef, err := elfx.Open(path, limits)
	if err != nil {
		return nil, err
	}
	defer ef.Close()
	return detect(path, ef.File)
}

// limits bound the reading of an interpreter's file: every process's
// executable is looked at under --all, and a python executable or
// libpython has a few MB of symbols and a few tens of MB of DWARF.
var limits = elfx.Limits{Section: 512 << 20, Table: 64 << 20}

func detect(path string, ef *elf.File) (*Interpreter, error) {
	syms, err := symbols(ef, "_PyRuntime", "Py_Version", "PyCode_Type", "PyUnicode_Type", "PyBytes_Type", "_PyEval_EvalFrameDefault")
	if err != nil {
		return nil, err
	}
	rt, ok := syms["_PyRuntime"]
	if !ok {
		return nil, ErrNotPython
	}
	if ef.Machine != elf.EM_X86_64 || ef.Class != elf.ELFCLASS64 {
		return &Interpreter{Path: path, Err: fmt.Errorf("%s: only x86-64 is supported", ef.Machine)}, nil
	}
	// Every section read whole below (.rodata, relocations, PLT, DWARF)
	// is within the limits.
	if err := elfx.CheckSections(ef, limits); err != nil {
		return &Interpreter{Path: path, Err: err}, nil
	}
	in := &Interpreter{Path: path, Runtime: rt.Value,
		CodeType: syms["PyCode_Type"].Value, UnicodeType: syms["PyUnicode_Type"].Value, BytesType: syms["PyBytes_Type"].Value}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			in.text = append(in.text, segment{vaddr: p.Vaddr, size: p.Filesz, off: p.Off})
		}
	}
	if ev, ok := syms["_PyEval_EvalFrameDefault"]; ok && elf.ST_TYPE(ev.Info) == elf.STT_FUNC &&
		ev.Size > 0 && ev.Value+ev.Size > ev.Value && in.inText(ev.Value, ev.Size) {
		in.evalLo, in.evalHi = ev.Value, ev.Value+ev.Size
	}
	if err := in.version(ef, syms); err != nil {
		in.Err = err
		return in, nil
	}
	if in.CodeType == 0 || in.UnicodeType == 0 || in.BytesType == 0 {
		in.Err = errors.New("PyCode_Type, PyUnicode_Type or PyBytes_Type has no symbol")
		return in, nil
	}
	in.Err = in.resolve(ef)
	in.codeDealloc, in.codeDeallocErr = codeDealloc(ef, in.CodeType)
	return in, nil
}

// version reads Py_Version (3.11+: PY_VERSION_HEX as data), else the
// PY_VERSION string in .rodata that agrees with the file's name.
func (in *Interpreter) version(ef *elf.File, syms map[string]elf.Symbol) error {
	if s, ok := syms["Py_Version"]; ok {
		b, err := readVaddr(ef, s.Value, 4)
		if err != nil {
			return fmt.Errorf("read Py_Version: %w", err)
		}
		hex := binary.LittleEndian.Uint32(b)
		in.Major, in.Minor, in.Micro = int(hex>>24), int(hex>>16&0xff), int(hex>>8&0xff)
	} else {
		m := regexp.MustCompile(`python(\d+)\.(\d+)`).FindStringSubmatch(filepath.Base(in.Path))
		if m == nil {
			return errors.New("no Py_Version symbol and no version in the file name")
		}
		in.Major, _ = strconv.Atoi(m[1])
		in.Minor, _ = strconv.Atoi(m[2])
		ro := ef.Section(".rodata")
		if ro == nil {
			return errors.New("no .rodata")
		}
		data, err := ro.Data()
		if err != nil {
			return err
		}
		// PY_VERSION may share its bytes with the tail of a longer
		// string (the install prefix often ends with it).
		re := regexp.MustCompile(fmt.Sprintf(`[^0-9.]%d\.%d\.(\d+)\x00`, in.Major, in.Minor))
		in.Micro = -1
		for _, v := range re.FindAllSubmatch(data, -1) {
			m, _ := strconv.Atoi(string(v[1]))
			if in.Micro >= 0 && m != in.Micro {
				in.Micro = -1 // ambiguous: the layout depends on the minor only
				break
			}
			in.Micro = m
		}
	}
	if in.Major != 3 || in.Minor < 10 {
		return fmt.Errorf("CPython %s: only 3.10 to 3.13 are supported", in.Version())
	}
	return nil
}

// resolve finds the offsets: 3.13 from the interpreter's _Py_DebugOffsets;
// 3.10-3.12 from the file's DWARF when it has some (the table must agree
// with it), else from the table checked against the code of accessor
// functions. Anything else is unsupported.
func (in *Interpreter) resolve(ef *elf.File) error {
	if err := in.resolveOffsets(ef); err != nil {
		return err
	}
	o := &in.Offsets
	if start := codeIDStart(o); min(o.CodeFilename, o.nameOffset(), o.CodeLinetable) < start {
		return fmt.Errorf("co_filename, co_name and co_linetable are not within 32 bytes: no code identity")
	}
	return nil
}

func (in *Interpreter) resolveOffsets(ef *elf.File) error {
	if in.Minor >= 13 {
		b, err := readVaddr(ef, in.Runtime, debugOffsets313Size)
		if err != nil {
			return fmt.Errorf("read _Py_DebugOffsets: %w", err)
		}
		o, _, err := fromDebugOffsets(b)
		if err != nil {
			return err
		}
		in.Offsets, in.Source = o, "_Py_DebugOffsets"
		return nil
	}
	table, ok := tables[in.Minor]
	if !ok {
		return fmt.Errorf("CPython %s: no offset table", in.Version())
	}
	fromDW, err := offsetsFromDWARF(ef, in.Minor, table)
	if err != nil {
		return fmt.Errorf("DWARF present but unusable: %w", err)
	}
	if fromDW != nil {
		in.Offsets, in.Source = *fromDW, "DWARF, equal to the 3."+strconv.Itoa(in.Minor)+" table"
		if diff := diffOffsets(table, *fromDW); diff != "" {
			// Another build of the sources (Py_DEBUG, ...): DWARF is
			// this binary's own truth.
			in.Source = fmt.Sprintf("DWARF (the 3.%d table differs: %s)", in.Minor, diff)
		}
		return nil
	}
	n, err := checkAccessors(ef, in.Minor, in.Runtime, table)
	if err != nil {
		return fmt.Errorf("CPython %s without DWARF: the 3.%d table does not match the code: %w", in.Version(), in.Minor, err)
	}
	in.Offsets, in.Source = table, fmt.Sprintf("3.%d table, checked against %d instructions of accessor code", in.Minor, n)
	return nil
}

// diffOffsets lists the fields where two Offsets differ.
func diffOffsets(a, b Offsets) string {
	var out []byte
	va, vb := offsetFields(&a), offsetFields(&b)
	for i, f := range va {
		if *f.v != *vb[i].v {
			out = fmt.Appendf(out, "%s %d vs %d; ", f.name, *f.v, *vb[i].v)
		}
	}
	return string(bytes.TrimSuffix(out, []byte("; ")))
}

type namedOffset struct {
	name string
	v    *int64
}

func offsetFields(o *Offsets) []namedOffset {
	return []namedOffset{
		{"interpreters.head", &o.RuntimeInterpHead}, {"interp.next", &o.InterpNext},
		{"interp.threads_head", &o.InterpThreadsHead}, {"tstate.next", &o.TsNext}, {"tstate.prev", &o.TsPrev},
		{"tstate.thread", &o.TsThread}, {"tstate.frame", &o.TsFrame}, {"cframe.current_frame", &o.CframeCurrent},
		{"frame.previous", &o.FramePrevious}, {"frame.code", &o.FrameCode}, {"frame.instr", &o.FrameInstr},
		{"frame.owner", &o.FrameOwner}, {"co_filename", &o.CodeFilename}, {"co_name", &o.CodeName},
		{"co_qualname", &o.CodeQualname}, {"co_firstlineno", &o.CodeFirstLine}, {"co_linetable", &o.CodeLinetable},
		{"co_code", &o.CodeCode}, {"co_code_adaptive", &o.CodeAdaptive}, {"ob_type", &o.ObType},
		{"ob_size", &o.VarSize}, {"ob_sval", &o.BytesData}, {"str.length", &o.StrLength},
		{"str.state", &o.StrState}, {"sizeof(PyASCIIObject)", &o.StrASCIISize},
		{"sizeof(PyCompactUnicodeObject)", &o.StrCompactSz},
	}
}

// symbols finds the named symbols in .dynsym, then .symtab (read under
// the limits: a table too large is an error).
func symbols(ef *elf.File, names ...string) (map[string]elf.Symbol, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]elf.Symbol{}
	for _, tab := range []string{".dynsym", ".symtab"} {
		syms, err := elfx.Symbols(ef, tab, limits)
		if err != nil {
			return nil, err
		}
		for _, s := range syms {
			if want[s.Name] && s.Value != 0 {
				if _, dup := out[s.Name]; !dup {
					out[s.Name] = s
				}
			}
		}
	}
	return out, nil
}

// readVaddr reads n bytes of the file's initialised data at a link-time
// address.
func readVaddr(ef *elf.File, addr uint64, n int) ([]byte, error) {
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD || addr < p.Vaddr || addr+uint64(n) > p.Vaddr+p.Filesz {
			continue
		}
		b := make([]byte, n)
		if _, err := p.ReadAt(b, int64(addr-p.Vaddr)); err != nil {
			return nil, err
		}
		return b, nil
	}
	return nil, fmt.Errorf("%#x+%d is not in the file's loaded data", addr, n)
}

// inText says whether [addr, addr+size) lies in one executable segment.
func (in *Interpreter) inText(addr, size uint64) bool {
	for _, t := range in.text {
		if addr >= t.vaddr && addr-t.vaddr <= t.size && size <= t.size-(addr-t.vaddr) {
			return true
		}
	}
	return false
}

// EvalFrame is where the interpreter's evaluation loop,
// _PyEval_EvalFrameDefault, is in process p: [lo, hi). Every Python
// function runs in it (3.10-3.13); the native frames that call it are the
// interpreter's own, which the Python stack names (docs/stacks.md). ok is
// false when the file has no sized symbol for it.
func (p *Process) EvalFrame() (lo, hi uint64, ok bool) {
	in := p.Interp
	if in == nil || in.evalHi == 0 {
		return 0, 0, false
	}
	return in.evalLo + p.Bias, in.evalHi + p.Bias, true
}
