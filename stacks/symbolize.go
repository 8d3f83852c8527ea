package stacks

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/ianlancetaylor/demangle"

	"github.com/tttrace/tttrace/elfx"
)

// Frame is one symbolized frame.
type Frame struct {
	PC     uint64 `json:"pc"`     // run-time pc (return address for callers)
	Module string `json:"module"` // path of the ELF file, "" when unmapped
	// Function is the demangled name of the function holding PC, from
	// .symtab, else a separate debug file's .symtab (by build id), else
	// .dynsym; "" when no symbol covers it.
	Function string `json:"function,omitempty"`
	// Offset is PC's offset in Function, or its ELF virtual address in
	// Module when Function is "" (what addr2line -e Module takes).
	Offset uint64 `json:"offset"`
	// File and Line come from DWARF (the file's own or a debug file's);
	// for a caller, the line of the call.
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
}

// String renders the frame as function+0xoff (file:line) or module+0xoff.
func (f Frame) String() string {
	var s string
	switch {
	case f.Function != "":
		s = fmt.Sprintf("%s+%#x", f.Function, f.Offset)
	case f.Module != "":
		s = fmt.Sprintf("%s+%#x", filepath.Base(f.Module), f.Offset)
	default:
		s = fmt.Sprintf("%#x", f.PC)
	}
	if f.File != "" {
		s += fmt.Sprintf(" (%s:%d)", f.File, f.Line)
	}
	return s
}

// Symbolize names the frames of a stack (innermost first, as Unwind gives
// them). Each distinct address of a file is resolved once and cached in the
// file, so this is cheap for stacks seen before.
func Symbolize(locs []Loc) []Frame {
	out := make([]Frame, len(locs))
	for i, l := range locs {
		out[i] = l.Symbolize(i > 0)
	}
	return out
}

// Symbolize names one frame. caller is true for every frame but the
// innermost: its PC is a return address, and the call is the instruction
// before it (which matters when a call ends a function).
func (l Loc) Symbolize(caller bool) Frame {
	if l.File == nil {
		return Frame{PC: l.PC, Offset: l.PC}
	}
	lookup := l.Addr
	if caller && lookup > 0 {
		lookup--
	}
	f := l.File
	f.mu.Lock()
	fr, ok := f.resolved[lookup]
	f.mu.Unlock()
	if !ok {
		fr = f.resolve(lookup)
		f.mu.Lock()
		f.resolved[lookup] = fr
		f.mu.Unlock()
	}
	out := *fr
	out.PC = l.PC
	if out.Function != "" {
		out.Offset += l.Addr - lookup
	} else {
		out.Offset = l.Addr
	}
	return out
}

func (f *File) resolve(addr uint64) (fr *Frame) {
	defer func() {
		// A panic on this file's symbols or DWARF leaves the frame
		// unnamed (module+offset), not the tracer ended.
		if recover() != nil {
			fr = &Frame{Module: f.Path}
		}
	}()
	fr = &Frame{Module: f.Path}
	if st := f.symbols(); st != nil {
		if name, start, ok := st.find(addr); ok {
			fr.Function = demangle.Filter(name)
			fr.Offset = addr - start
		}
	}
	if d := f.dwarfData(); d != nil {
		fr.File, fr.Line = dwarfLine(d, addr)
	}
	return fr
}

// symtab is a sorted function-symbol table whose names stay in the file's
// string table, read (pread) when a symbol is found (a large C++ library
// has hundreds of thousands, and a string table of 100 MB).
type symtab struct {
	file            *elfx.File
	strOff, strSize uint64
	syms            []sym
}

type sym struct {
	value, size uint64
	name        uint32
}

// symbols loads, once, the best symbol table: .symtab, else the separate
// debug file's .symtab, else .dynsym.
func (f *File) symbols() *symtab {
	f.symOnce.Do(func() {
		if st := f.readSymtab(".symtab", ".strtab"); st != nil {
			f.syms = st
			return
		}
		if df := f.debug(); df != nil {
			if st := df.readSymtab(".symtab", ".strtab"); st != nil {
				f.syms = st
				return
			}
		}
		f.syms = f.readSymtab(".dynsym", ".dynstr")
	})
	return f.syms
}

// Warm reads what symbolizing f needs (its symbol table, its DWARF or
// its separate debug file's) now, once, so that the first Symbolize of a
// pc in f does not: a libc's debug file takes a fifth of a second to read.
// Safe to call from any goroutine.
func (f *File) Warm() {
	defer func() { _ = recover() }() // as resolve: a hostile file ends the warm-up only
	f.symbols()
	f.dwarfData()
}

// debug returns the separate debug file by build id, looked up once.
func (f *File) debug() *File {
	f.debugOnce.Do(func() {
		if f.cache != nil {
			f.debugFile = f.cache.debugFile(f)
		}
	})
	return f.debugFile
}

func (f *File) readSymtab(name, strName string) *symtab {
	symOff, symSize, ok1, err1 := f.ef.Table(f.elf.Section(name))
	strOff, strSize, ok2, err2 := f.ef.Table(f.elf.Section(strName))
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return nil
	}
	st := &symtab{file: f.ef, strOff: strOff, strSize: strSize}
	err := f.ef.Sweep(symOff, symSize, 1<<20, symSize64, 0, func(base int, b []byte) error {
		for off := 0; off+symSize64 <= len(b); off += symSize64 {
			if base == 0 && off == 0 {
				continue // entry 0 is null
			}
			info := b[off+4]
			shndx := binary.LittleEndian.Uint16(b[off+6:])
			typ := elf.SymType(info & 0xf)
			if (typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC) || shndx == uint16(elf.SHN_UNDEF) {
				continue
			}
			v := binary.LittleEndian.Uint64(b[off+8:])
			if v == 0 {
				continue
			}
			st.syms = append(st.syms, sym{value: v, size: binary.LittleEndian.Uint64(b[off+16:]), name: binary.LittleEndian.Uint32(b[off:])})
		}
		return nil
	})
	if err != nil || len(st.syms) == 0 {
		return nil
	}
	sort.Slice(st.syms, func(i, j int) bool {
		a, b := st.syms[i], st.syms[j]
		if a.value != b.value {
			return a.value < b.value
		}
		return a.size > b.size
	})
	return st
}

// symSize64 is the size of an Elf64_Sym.
const symSize64 = 24

// find returns the symbol covering addr. Among symbols at one address the
// first sorted (largest) wins; a zero-size symbol covers up to the next.
func (st *symtab) find(addr uint64) (string, uint64, bool) {
	i := sort.Search(len(st.syms), func(i int) bool { return st.syms[i].value > addr }) - 1
	for k := 0; i >= 0 && k < 8; i, k = i-1, k+1 {
		s := st.syms[i]
		for i > 0 && st.syms[i-1].value == s.value { // first of equals
			i--
			s = st.syms[i]
		}
		if addr < s.value+s.size || (s.size == 0 && k == 0) {
			return st.name(s.name), s.value, true
		}
	}
	return "", 0, false
}

// name reads a symbol's name (bounded by the name limit; "" when it
// cannot be read).
func (st *symtab) name(off uint32) string {
	if uint64(off) >= st.strSize {
		return ""
	}
	n, err := st.file.CString(st.strOff+uint64(off), st.strOff+st.strSize)
	if err != nil {
		return ""
	}
	return n
}

// dwarfData returns the file's DWARF, else its debug file's, else nil.
func (f *File) dwarfData() *dwarf.Data {
	f.dwarfOnce.Do(func() {
		if f.elf.Section(".debug_info") != nil {
			if d, err := elfx.DWARF(f.elf, f.ef.Limits()); err == nil {
				f.dwarf = d
				return
			}
		}
		if df := f.debug(); df != nil && df.elf.Section(".debug_info") != nil {
			if d, err := elfx.DWARF(df.elf, df.ef.Limits()); err == nil {
				f.dwarf = d
			}
		}
	})
	return f.dwarf
}

// dwarfLine returns the source line of addr from the line table of the
// compilation unit that covers it: the row with the greatest address not
// above addr in the sequence that holds it.
func dwarfLine(d *dwarf.Data, addr uint64) (file string, line int) {
	defer func() {
		if recover() != nil { // debug/dwarf on corrupt input
			file, line = "", 0
		}
	}()
	cu, err := d.Reader().SeekPC(addr)
	if err != nil || cu == nil {
		return "", 0
	}
	lr, err := d.LineReader(cu)
	if err != nil || lr == nil {
		return "", 0
	}
	// LineReader.SeekPC assumes one sorted table; clang emits a sequence
	// per section (COMDAT templates come after), so scan the sequences.
	var e, prev dwarf.LineEntry
	have := false
	for lr.Next(&e) == nil {
		if have && !prev.EndSequence && prev.Address <= addr && addr < e.Address && prev.File != nil {
			return prev.File.Name, prev.Line
		}
		prev, have = e, true
	}
	return "", 0
}
