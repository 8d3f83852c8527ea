package pyframes

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tttrace/tttrace/elfx"
)

// Where code objects are deallocated, from the interpreter's file alone.
//
// The code-object deallocation probe goes on the interpreter *file*, so it
// sits in every process of every user that runs that file: its address is
// never taken from a process's memory, which the process's owner can
// forge. It is PyCode_Type's tp_dealloc as the file's static initializer
// of PyCode_Type says (the slot's relocation in a position-independent
// file, its bytes in a fixed-address one), and it must be where a function
// starts: the start of an FDE of .eh_frame, or of a function symbol.
// Where the file's own .symtab names code_dealloc, the two must agree.

// The head of a CPython type object (PyTypeObject, 64-bit, with the GIL):
// after PyObject_VAR_HEAD come tp_name, tp_basicsize, tp_itemsize and
// tp_dealloc.
const (
	typeName    = 24
	typeDealloc = 48
)

// x86-64 dynamic relocation types a type object's pointers are made with.
const (
	rX86_64_64       = 1
	rX86_64_RELATIVE = 8
	relaSize         = 24
)

// codeDealloc returns the link-time address of PyCode_Type's tp_dealloc
// in ef, checked to be a function's start.
func codeDealloc(ef *elf.File, codeType uint64) (uint64, error) {
	ptr, err := pointerReader(ef)
	if err != nil {
		return 0, err
	}
	name, err := ptr(codeType + typeName)
	if err != nil {
		return 0, fmt.Errorf("PyCode_Type.tp_name: %w", err)
	}
	if b, err := readVaddr(ef, name, 5); err != nil || string(b) != "code\x00" {
		return 0, fmt.Errorf("PyCode_Type.tp_name at %#x does not read \"code\": not the type object head tttrace knows", name)
	}
	fn, err := ptr(codeType + typeDealloc)
	if err != nil {
		return 0, fmt.Errorf("PyCode_Type.tp_dealloc: %w", err)
	}
	if !executable(ef, fn) {
		return 0, fmt.Errorf("PyCode_Type.tp_dealloc %#x is not in the file's code", fn)
	}
	syms, err := symbols(ef, "code_dealloc")
	if err != nil {
		return 0, err
	}
	if s, ok := syms["code_dealloc"]; ok && elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != fn {
		return 0, fmt.Errorf("PyCode_Type.tp_dealloc %#x is not the file's code_dealloc %#x", fn, s.Value)
	}
	ok, err := functionStart(ef, fn)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("PyCode_Type.tp_dealloc %#x is not where a function starts (no FDE or function symbol there)", fn)
	}
	return fn, nil
}

// pointerReader returns a function that reads the 8-byte pointer the
// dynamic loader leaves at a link-time address of ef's data, as a
// link-time address: the addend of its R_X86_64_RELATIVE relocation (or
// the symbol's value plus the addend of an R_X86_64_64), else, in a
// fixed-address executable or where relative relocations are packed in
// .relr.dyn (their addends stay in place), the bytes there.
func pointerReader(ef *elf.File) (func(at uint64) (uint64, error), error) {
	var rela []byte
	if s := ef.Section(".rela.dyn"); s != nil && s.Type == elf.SHT_RELA {
		var err error
		if rela, err = elfx.SectionData(s, limits); err != nil {
			return nil, fmt.Errorf(".rela.dyn: %w", err)
		}
	}
	inPlace := ef.Type == elf.ET_EXEC || ef.Section(".relr.dyn") != nil
	return func(at uint64) (uint64, error) {
		for i := 0; i+relaSize <= len(rela); i += relaSize {
			if binary.LittleEndian.Uint64(rela[i:]) != at {
				continue
			}
			info := binary.LittleEndian.Uint64(rela[i+8:])
			addend := binary.LittleEndian.Uint64(rela[i+16:])
			switch uint32(info) {
			case rX86_64_RELATIVE:
				return addend, nil
			case rX86_64_64:
				return dynSymbolValue(ef, info>>32, addend)
			default:
				return 0, fmt.Errorf("relocation of type %d at %#x", uint32(info), at)
			}
		}
		if !inPlace {
			return 0, fmt.Errorf("no relocation at %#x of a position-independent file", at)
		}
		b, err := readVaddr(ef, at, 8)
		if err != nil {
			return 0, err
		}
		return binary.LittleEndian.Uint64(b), nil
	}, nil
}

// dynSymbolValue is the value of .dynsym's symbol index i plus addend,
// for a defined symbol.
func dynSymbolValue(ef *elf.File, i, addend uint64) (uint64, error) {
	syms, err := elfx.Symbols(ef, ".dynsym", limits)
	if err != nil {
		return 0, err
	}
	// debug/elf drops the null symbol at index 0.
	if i == 0 || i > uint64(len(syms)) || syms[i-1].Section == elf.SHN_UNDEF {
		return 0, fmt.Errorf("relocation against dynamic symbol %d, not defined in the file", i)
	}
	return syms[i-1].Value + addend, nil
}

// executable says whether addr lies in an executable segment of ef.
func executable(ef *elf.File, addr uint64) bool {
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && addr >= p.Vaddr && addr < p.Vaddr+p.Filesz {
			return true
		}
	}
	return false
}

// functionStart says whether a function starts at addr: an FDE of
// .eh_frame, or a function symbol of .symtab or .dynsym, begins there.
func functionStart(ef *elf.File, addr uint64) (bool, error) {
	if s := ef.Section(".eh_frame"); s != nil {
		data, err := elfx.SectionData(s, limits)
		if err != nil {
			return false, fmt.Errorf(".eh_frame: %w", err)
		}
		found := false
		err = elfx.EachFDE(data, s.Addr, func(start, _ uint64) bool {
			found = start == addr
			return !found
		})
		if found {
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf(".eh_frame: %w", err)
		}
	}
	for _, tab := range []string{".symtab", ".dynsym"} {
		syms, err := elfx.Symbols(ef, tab, limits)
		if err != nil {
			return false, err
		}
		for _, s := range syms {
			if s.Value == addr && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
				return true, nil
			}
		}
	}
	return false, nil
}

// errNoCodeDealloc is CodeDealloc's answer for an interpreter whose file
// did not say where code objects are deallocated.
var errNoCodeDealloc = errors.New("the interpreter's file does not say where code objects are deallocated")

// fileOffset turns a link-time address of the interpreter's code into an
// offset in its file.
func (in *Interpreter) fileOffset(at uint64) (uint64, bool) {
	for _, s := range in.text {
		if at >= s.vaddr && at < s.vaddr+s.size {
			return at - s.vaddr + s.off, true
		}
	}
	return 0, false
}
