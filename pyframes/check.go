package pyframes

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"sort"

	"golang.org/x/arch/x86/x86asm"

	"github.com/tttrace/tttrace/elfx"
)

// Checking an offset table against an interpreter without DWARF: CPython
// exports small accessor functions whose code reads the very fields the
// capture reads (PyThreadState_Next reads tstate->next, PyFrame_GetLasti
// reads frame->prev_instr and the code's co_code_adaptive, ...). Every
// table field the walk uses must appear as a displacement in the code of
// the accessor that reads it; native_thread_id (or thread_id for 3.10) must
// be where the result of PyThread_get_thread_native_id (ident) is stored.

// accessorCheck names an accessor and the table fields its code must use.
type accessorCheck struct {
	fn     string
	fields []string // names from offsetFields
}

func accessorChecks(minor int) []accessorCheck {
	common := []accessorCheck{
		{"PyInterpreterState_Next", []string{"interp.next"}},
		{"PyInterpreterState_ThreadHead", []string{"interp.threads_head"}},
		{"PyThreadState_Next", []string{"tstate.next"}},
		{"PyCode_Addr2Line", []string{"co_linetable", "co_firstlineno", "ob_sval"}},
	}
	switch minor {
	case 10:
		return append(common,
			accessorCheck{"PyThreadState_GetFrame", []string{"tstate.frame"}},
			accessorCheck{"PyFrame_GetBack", []string{"frame.previous"}},
			accessorCheck{"PyFrame_GetCode", []string{"frame.code"}},
			accessorCheck{"PyFrame_GetLineNumber", []string{"frame.instr", "frame.code"}},
		)
	case 11, 12:
		return append(common,
			accessorCheck{"PyThreadState_GetFrame", []string{"tstate.frame", "cframe.current_frame", "frame.owner"}},
			accessorCheck{"PyFrame_GetLasti", []string{"frame.code", "frame.instr", "co_code_adaptive"}},
			accessorCheck{"PyFrame_GetBack", []string{"frame.previous"}},
		)
	}
	return nil
}

// checkAccessors checks a table against the code of the file's accessors;
// it returns how many instructions were read.
func checkAccessors(ef *elf.File, minor int, runtime uint64, o Offsets) (int, error) {
	checks := accessorChecks(minor)
	if checks == nil {
		return 0, fmt.Errorf("no accessor checks for 3.%d", minor)
	}
	names := []string{"PyInterpreterState_Head", "PyThread_get_thread_native_id", "PyThread_get_thread_ident"}
	for _, c := range checks {
		names = append(names, c.fn)
	}
	syms, err := symbols(ef, names...)
	if err != nil {
		return 0, err
	}
	byName := map[string]int64{}
	for _, f := range offsetFields(&o) {
		byName[f.name] = *f.v
	}
	total := 0
	// _PyRuntime.interpreters.head: a RIP-relative load in
	// PyInterpreterState_Head.
	insns, err := decodeFunc(ef, syms, "PyInterpreterState_Head")
	if err != nil {
		return total, err
	}
	total += len(insns)
	targets := ripTargets(insns)
	direct := targets[runtime+uint64(o.RuntimeInterpHead)]
	// In a shared libpython the address of _PyRuntime comes from the GOT,
	// then the field is read at its displacement.
	viaGOT := false
	for slot := range targets {
		if gotSlotOf(ef, slot) == "_PyRuntime" && displacements(insns)[o.RuntimeInterpHead] {
			viaGOT = true
		}
	}
	if !direct && !viaGOT {
		return total, fmt.Errorf("PyInterpreterState_Head does not read _PyRuntime+%d (interpreters.head)", o.RuntimeInterpHead)
	}
	for _, c := range checks {
		insns, err := decodeFunc(ef, syms, c.fn)
		if err != nil {
			return total, err
		}
		total += len(insns)
		disps := displacements(insns)
		for _, f := range c.fields {
			if !disps[byName[f]] {
				return total, fmt.Errorf("%s does not use offset %d (%s); it uses %v", c.fn, byName[f], f, sortedKeys(disps))
			}
		}
	}
	// The thread's id: stored into the thread state after the call that
	// makes it.
	idFn := "PyThread_get_thread_native_id"
	if minor == 10 {
		idFn = "PyThread_get_thread_ident"
	}
	n, stores, err := storesAfterCalls(ef, syms, idFn)
	total += n
	if err != nil {
		return total, err
	}
	if !stores[o.TsThread] {
		return total, fmt.Errorf("no result of %s is stored at offset %d (tstate thread id); stores seen at %v", idFn, o.TsThread, sortedKeys(stores))
	}
	return total, nil
}

func sortedKeys(m map[int64]bool) []int64 {
	var out []int64
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

type decoded struct {
	addr uint64
	in   x86asm.Inst
}

// decodeFunc decodes a function's instructions (at most 96).
func decodeFunc(ef *elf.File, syms map[string]elf.Symbol, name string) ([]decoded, error) {
	s, ok := syms[name]
	if !ok {
		return nil, fmt.Errorf("no symbol %s", name)
	}
	size := s.Size
	if size == 0 || size > 4096 {
		size = 4096
	}
	b, err := readText(ef, s.Value, int(size))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var out []decoded
	for off := 0; off < len(b) && len(out) < 96; {
		in, err := x86asm.Decode(b[off:], 64)
		if err != nil {
			break
		}
		out = append(out, decoded{s.Value + uint64(off), in})
		off += in.Len
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no instruction decodes", name)
	}
	return out, nil
}

// readText reads code bytes at a link-time address.
func readText(ef *elf.File, addr uint64, n int) ([]byte, error) {
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 || addr < p.Vaddr || addr >= p.Vaddr+p.Filesz {
			continue
		}
		if end := p.Vaddr + p.Filesz; addr+uint64(n) > end {
			n = int(end - addr)
		}
		b := make([]byte, n)
		_, err := p.ReadAt(b, int64(addr-p.Vaddr))
		return b, err
	}
	return nil, fmt.Errorf("%#x is not in an executable segment", addr)
}

// displacements are the displacements of memory operands based on a
// general register (not RIP, not the stack).
func displacements(insns []decoded) map[int64]bool {
	out := map[int64]bool{}
	for _, d := range insns {
		for _, a := range d.in.Args {
			m, ok := a.(x86asm.Mem)
			if !ok || m.Base == 0 || m.Base == x86asm.RIP || m.Base == x86asm.RSP || m.Segment != 0 {
				continue
			}
			out[m.Disp] = true
		}
	}
	return out
}

// ripTargets are the addresses RIP-relative operands name.
func ripTargets(insns []decoded) map[uint64]bool {
	out := map[uint64]bool{}
	for _, d := range insns {
		for _, a := range d.in.Args {
			if m, ok := a.(x86asm.Mem); ok && m.Base == x86asm.RIP {
				out[d.addr+uint64(d.in.Len)+uint64(m.Disp)] = true
			}
		}
	}
	return out
}

// storesAfterCalls finds the direct calls to fn in the executable code and
// the displacements at which, within the next six instructions, the result
// (rax) is stored through a general register.
func storesAfterCalls(ef *elf.File, syms map[string]elf.Symbol, fn string) (int, map[int64]bool, error) {
	sym, ok := syms[fn]
	if !ok {
		return 0, nil, fmt.Errorf("no symbol %s", fn)
	}
	// A shared libpython calls its own exports through the PLT.
	targets := map[uint64]bool{sym.Value: true}
	for _, a := range pltStubs(ef, fn) {
		targets[a] = true
	}
	stores := map[int64]bool{}
	n := 0
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return n, nil, err
		}
		for i := 0; i+5 <= len(b); i++ {
			if b[i] != 0xe8 {
				continue
			}
			next := p.Vaddr + uint64(i) + 5
			if !targets[next+uint64(int64(int32(binary.LittleEndian.Uint32(b[i+1:]))))] {
				continue
			}
			// A call (or bytes that look like one): read what follows.
			off := i + 5
			for k := 0; k < 6 && off < len(b); k++ {
				in, err := x86asm.Decode(b[off:], 64)
				if err != nil {
					break
				}
				n++
				off += in.Len
				if in.Op != x86asm.MOV {
					continue
				}
				m, ok := in.Args[0].(x86asm.Mem)
				if ok && in.Args[1] == x86asm.RAX && m.Base != 0 && m.Base != x86asm.RIP && m.Base != x86asm.RSP {
					stores[m.Disp] = true
					break
				}
				if r, ok := in.Args[0].(x86asm.Reg); ok && (r == x86asm.RAX || r == x86asm.EAX) {
					break // rax overwritten
				}
			}
		}
	}
	return n, stores, nil
}

// pltStubs are the addresses of the PLT stubs that jump to fn: stubs of
// .plt and .plt.sec whose indirect jump reads fn's R_X86_64_JUMP_SLOT.
func pltStubs(ef *elf.File, fn string) []uint64 {
	slot, ok := relocSlot(ef, ".rela.plt", fn, elf.R_X86_64_JMP_SLOT)
	if !ok {
		return nil
	}
	var out []uint64
	for _, name := range []string{".plt", ".plt.sec"} {
		sec := ef.Section(name)
		if sec == nil {
			continue
		}
		b, err := sec.Data()
		if err != nil {
			continue
		}
		for off := 0; off+16 <= len(b); off += 16 {
			stub := b[off : off+16]
			for k := 0; k < len(stub); {
				in, err := x86asm.Decode(stub[k:], 64)
				if err != nil {
					break
				}
				addr := sec.Addr + uint64(off+k)
				if m, ok := in.Args[0].(x86asm.Mem); ok && in.Op == x86asm.JMP && m.Base == x86asm.RIP &&
					addr+uint64(in.Len)+uint64(m.Disp) == slot {
					out = append(out, sec.Addr+uint64(off))
				}
				k += in.Len
			}
		}
	}
	return out
}

// relocSlot finds the address a relocation of the given type for a
// dynamic symbol patches.
func relocSlot(ef *elf.File, section, name string, typ elf.R_X86_64) (uint64, bool) {
	rela := ef.Section(section)
	if rela == nil {
		return 0, false
	}
	b, err := rela.Data()
	if err != nil {
		return 0, false
	}
	syms, err := elfx.Symbols(ef, ".dynsym", limits)
	if err != nil {
		return 0, false
	}
	for i := 0; i+24 <= len(b); i += 24 {
		info := binary.LittleEndian.Uint64(b[i+8:])
		idx := int(info >> 32)
		if elf.R_X86_64(info&0xffffffff) == typ && idx >= 1 && idx <= len(syms) && syms[idx-1].Name == name {
			return binary.LittleEndian.Uint64(b[i:]), true
		}
	}
	return 0, false
}

// gotSlotOf names the symbol a GOT slot is relocated to (R_X86_64_GLOB_DAT
// with no addend), "" when none.
func gotSlotOf(ef *elf.File, slot uint64) string {
	rela := ef.Section(".rela.dyn")
	if rela == nil {
		return ""
	}
	b, err := rela.Data()
	if err != nil {
		return ""
	}
	syms, err := elfx.Symbols(ef, ".dynsym", limits)
	if err != nil {
		return ""
	}
	for i := 0; i+24 <= len(b); i += 24 {
		off := binary.LittleEndian.Uint64(b[i:])
		info := binary.LittleEndian.Uint64(b[i+8:])
		addend := int64(binary.LittleEndian.Uint64(b[i+16:]))
		if off != slot || elf.R_X86_64(info&0xffffffff) != elf.R_X86_64_GLOB_DAT || addend != 0 {
			continue
		}
		if idx := int(info >> 32); idx >= 1 && idx <= len(syms) {
			return syms[idx-1].Name
		}
	}
	return ""
}
