package ttmetal

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"golang.org/x/arch/x86/x86asm"
)

// Field offsets read from the library's own code: out-of-line accessors
// such as Buffer::address() const compile to "mov rax, [rdi+80]; ret"
// (through the BufferImpl pointer in a pimpl build), and Device::id(),
// slot 3 of Device's vtable, to "mov eax, [rdi+8]; ret". A small symbolic
// evaluation of straight-line code turns each into a field offset; code it
// does not understand gives no evidence (never a guess).

// accessor is an out-of-line function whose code names one field.
type accessor struct {
	field  string // Layout JSON name of the field it reads
	method string // for people
	name   string // mangled (without the v0 namespace)
	size   int    // bytes the field has; 0: an enum, 1, 2 or 4 bytes (the evidence says which)
	// predicate: the function returns field == constant (or (field & mask)
	// == constant), not the field: Buffer::is_trace() const compiles to
	// "cmp BYTE PTR [rdi+0x20],0x4; sete al" in a build whose BufferType is
	// one byte, "cmp DWORD PTR ..." where it is an int.
	predicate bool
}

// typePredicates are Buffer's out-of-line tests of buffer_type_, out of
// line in every upstream design (docs/ttmetal.md §3) while buffer_type()
// itself is inline before the pimpl: in a build without DWARF they are
// where buffer_type_'s offset and width can be read.
var typePredicates = []accessor{
	{field: "buffer_type", method: "Buffer::is_trace() const", name: "_ZNK2tt8tt_metal6Buffer8is_traceEv", predicate: true},
	{field: "buffer_type", method: "Buffer::is_dram() const", name: "_ZNK2tt8tt_metal6Buffer7is_dramEv", predicate: true},
	{field: "buffer_type", method: "Buffer::is_l1() const", name: "_ZNK2tt8tt_metal6Buffer5is_l1Ev", predicate: true},
}

// bufferAccessors are the accessors of the field table's rows, in its
// order, then the predicates on buffer_type_.
var bufferAccessors = func() []accessor {
	var out []accessor
	for _, f := range layoutFields {
		if f.accessor != nil {
			a := *f.accessor
			a.field = f.key
			out = append(out, a)
		}
	}
	return append(out, typePredicates...)
}()

// Evidence is what one source says about one field.
type Evidence struct {
	Field string `json:"field"`
	// Offset of the field; for a pimpl layout inside the object the
	// pointer at ImplPtr points to (ImplPtr -1: inside Buffer itself).
	Offset  int64 `json:"offset"`
	ImplPtr int64 `json:"impl_ptr"`
	// Allocated is the value of ALLOCATED, from is_allocated() (else -1).
	Allocated int64 `json:"allocated,omitempty"`
	// Width is how many bytes the code reads (the field's size).
	Width  int64  `json:"width"`
	Source string `json:"source"` // "Buffer::address() const at 0x1234: mov rax, [rdi+0x50]"
}

// expr is a symbolic value during evaluation.
type expr struct {
	op   exprOp
	base *expr // load: the pointer; cmp: the left side
	off  int64 // load: displacement; const: the value; cmp: the right side
	size int   // load: bytes read
	cond x86asm.Op
}

type exprOp uint8

const (
	exArg   exprOp = iota + 1 // rdi at entry (this)
	exConst                   // a constant
	exLoad                    // *(base + off), size bytes
	exAddr                    // base + off (an address, not loaded)
	exCmp                     // flags of base compared with off
	exSet                     // setCC of a cmp
	exAnd                     // base & off
)

// evalAccessor evaluates the straight-line code at addr and returns what it
// leaves in rax. Branches, stack use and unknown instructions stop it with
// an error: no evidence.
func (l *Library) evalAccessor(addr uint64) (*expr, string, error) {
	regs := map[x86asm.Reg]*expr{x86asm.RDI: {op: exArg}}
	var flags *expr
	var text []string
	at := addr
	for n := 0; n < 16; n++ {
		in, err := l.decodeAt(at)
		if err != nil {
			return nil, "", err
		}
		text = append(text, in.String())
		at = in.next()
		memExpr := func(a x86asm.Arg) (*expr, bool) {
			m, ok := a.(x86asm.Mem)
			if !ok || m.Index != 0 || m.Segment != 0 {
				return nil, false
			}
			b := regs[canonReg(m.Base)]
			if b == nil || (b.op != exArg && b.op != exLoad && b.op != exAddr) {
				return nil, false
			}
			if b.op == exAddr {
				return &expr{op: exAddr, base: b.base, off: b.off + m.Disp}, true
			}
			return &expr{op: exAddr, base: b, off: m.Disp}, true
		}
		load := func(a x86asm.Arg, size int) (*expr, bool) {
			p, ok := memExpr(a)
			if !ok {
				return nil, false
			}
			return &expr{op: exLoad, base: p.base, off: p.off, size: size}, true
		}
		operand := func(a x86asm.Arg, size int) (*expr, bool) {
			switch v := a.(type) {
			case x86asm.Reg:
				e := regs[canonReg(v)]
				return e, e != nil
			case x86asm.Imm:
				return &expr{op: exConst, off: int64(v)}, true
			case x86asm.Mem:
				return load(v, size)
			}
			return nil, false
		}
		switch {
		case in.endbr, in.Op == x86asm.NOP:
			continue
		case in.Op == x86asm.RET:
			r := regs[x86asm.RAX]
			if r == nil {
				return nil, "", fmt.Errorf("rax is not set")
			}
			return r, strings.Join(text, "; "), nil
		case in.Op == x86asm.MOV || in.Op == x86asm.MOVZX || in.Op == x86asm.MOVSX || in.Op == x86asm.MOVSXD:
			dst, ok := in.Args[0].(x86asm.Reg)
			if !ok {
				return nil, "", fmt.Errorf("%s: stores to memory", in.String())
			}
			v, ok := operand(in.Args[1], in.MemBytes)
			if !ok {
				return nil, "", fmt.Errorf("%s: not understood", in.String())
			}
			regs[canonReg(dst)] = v
		case in.Op == x86asm.LEA:
			dst, _ := in.Args[0].(x86asm.Reg)
			p, ok := memExpr(in.Args[1])
			if !ok || dst == 0 {
				return nil, "", fmt.Errorf("%s: not understood", in.String())
			}
			regs[canonReg(dst)] = p
		case in.Op == x86asm.XOR:
			a, ok1 := in.Args[0].(x86asm.Reg)
			b, ok2 := in.Args[1].(x86asm.Reg)
			if !ok1 || !ok2 || canonReg(a) != canonReg(b) {
				return nil, "", fmt.Errorf("%s: not understood", in.String())
			}
			regs[canonReg(a)] = &expr{op: exConst}
		case in.Op == x86asm.CMP:
			lhs, ok1 := operand(in.Args[0], in.MemBytes)
			rhs, ok2 := operand(in.Args[1], in.MemBytes)
			if !ok1 || !ok2 || rhs.op != exConst {
				return nil, "", fmt.Errorf("%s: not understood", in.String())
			}
			flags = &expr{op: exCmp, base: lhs, off: rhs.off}
		case in.Op == x86asm.TEST:
			// test x, imm sets the flags of (x & imm) compared with 0.
			lhs, ok1 := operand(in.Args[0], in.MemBytes)
			rhs, ok2 := operand(in.Args[1], in.MemBytes)
			if !ok1 || !ok2 || rhs.op != exConst {
				return nil, "", fmt.Errorf("%s: not understood", in.String())
			}
			flags = &expr{op: exCmp, base: &expr{op: exAnd, base: lhs, off: rhs.off}}
		case in.Op == x86asm.AND:
			dst, ok1 := in.Args[0].(x86asm.Reg)
			rhs, ok2 := operand(in.Args[1], in.MemBytes)
			if !ok1 || !ok2 || rhs.op != exConst || regs[canonReg(dst)] == nil {
				return nil, "", fmt.Errorf("%s: not understood", in.String())
			}
			regs[canonReg(dst)] = &expr{op: exAnd, base: regs[canonReg(dst)], off: rhs.off}
		case in.Op == x86asm.SETE || in.Op == x86asm.SETNE:
			dst, ok := in.Args[0].(x86asm.Reg)
			if !ok || flags == nil {
				return nil, "", fmt.Errorf("%s: not understood", in.String())
			}
			regs[canonReg(dst)] = &expr{op: exSet, base: flags, cond: in.Op}
		default:
			return nil, "", fmt.Errorf("%s: not a plain accessor", in.String())
		}
	}
	return nil, "", fmt.Errorf("no ret within 16 instructions")
}

// canonReg maps a sub-register to its 64-bit register.
func canonReg(r x86asm.Reg) x86asm.Reg {
	switch {
	case r >= x86asm.AL && r <= x86asm.BL:
		return x86asm.RAX + (r - x86asm.AL)
	case r >= x86asm.SPB && r <= x86asm.R15B:
		return x86asm.RSP + (r - x86asm.SPB)
	case r >= x86asm.AX && r <= x86asm.R15W:
		return x86asm.RAX + (r - x86asm.AX)
	case r >= x86asm.EAX && r <= x86asm.R15L:
		return x86asm.RAX + (r - x86asm.EAX)
	}
	return r
}

// fieldOf reads a field access out of an accessor's result: this->f
// (implPtr -1) or this->impl->f.
func fieldOf(e *expr) (implPtr, off int64, size int, ok bool) {
	if e == nil || e.op != exLoad || e.base == nil {
		return 0, 0, 0, false
	}
	switch b := e.base; {
	case b.op == exArg:
		return -1, e.off, e.size, true
	case b.op == exLoad && b.size == 8 && b.base != nil && b.base.op == exArg:
		return b.off, e.off, e.size, true
	}
	return 0, 0, 0, false
}

// accessorEvidence disassembles every accessor the library has (.dynsym or
// .symtab; in namespace v0 too) and Device::id() through Device's vtable.
// Accessors it finds but cannot read are listed in notes.
func accessorEvidence(lib *Library, syms *Symbols) (ev []Evidence, notes []string) {
	var names []string
	for _, a := range bufferAccessors {
		names = append(names, a.name, v0Name(a.name))
	}
	found, err := lib.lookup(names)
	if err != nil {
		return nil, []string{"symbols: " + err.Error()}
	}
	for _, a := range bufferAccessors {
		s, ok := found[a.name]
		if !ok {
			s, ok = found[v0Name(a.name)]
		}
		if !ok {
			continue
		}
		e, text, err := lib.evalAccessor(s.Value)
		where := fmt.Sprintf("%s at %#x", a.method, s.Value)
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: not read (%v)", where, err))
			continue
		}
		allocated := int64(-1)
		if a.predicate {
			// field == c or (field & mask) == c: the load inside.
			if e.op != exSet || e.cond != x86asm.SETE || e.base == nil || e.base.op != exCmp || e.base.base == nil {
				notes = append(notes, fmt.Sprintf("%s: not read (%s)", where, text))
				continue
			}
			e = e.base.base
			if e.op == exAnd {
				e = e.base
			}
		} else if a.field == "allocation_status" {
			// is_allocated() is status == ALLOCATED: sete of a compare.
			if e.op != exSet || e.cond != x86asm.SETE || e.base == nil || e.base.op != exCmp {
				notes = append(notes, fmt.Sprintf("%s: not read (%s)", where, text))
				continue
			}
			allocated = e.base.off
			e = e.base.base
		}
		impl, off, size, ok := fieldOf(e)
		if !ok || (a.size != 0 && size != a.size) || (a.size == 0 && size != 1 && size != 2 && size != 4) {
			notes = append(notes, fmt.Sprintf("%s: not read (%s)", where, text))
			continue
		}
		ev = append(ev, Evidence{Field: a.field, Offset: off, ImplPtr: impl, Allocated: allocated, Width: int64(size),
			Source: fmt.Sprintf("%s: %s", where, text)})
	}
	if syms.VtableDevice != 0 {
		c, err := lib.code()
		if err == nil {
			slot := syms.VtableDevice + 3*8
			fn, err := c.readPointer(slot, func(name string) (uint64, bool) {
				m, err := lib.lookup([]string{name})
				if err != nil {
					return 0, false
				}
				s, ok := m[name]
				return s.Value, ok
			})
			if err != nil {
				notes = append(notes, fmt.Sprintf("Device vtable slot 3 (id): %v", err))
			} else if e, text, err := lib.evalAccessor(fn); err != nil {
				notes = append(notes, fmt.Sprintf("Device::id() (vtable slot 3) at %#x: not read (%v)", fn, err))
			} else if impl, off, size, ok := fieldOf(e); ok && impl < 0 && size == 4 {
				ev = append(ev, Evidence{Field: "device_id", Offset: off, ImplPtr: -1, Allocated: -1, Width: 4,
					Source: fmt.Sprintf("Device::id() (vtable slot 3) at %#x: %s", fn, text)})
			} else {
				notes = append(notes, fmt.Sprintf("Device::id() (vtable slot 3) at %#x: not read (%s)", fn, text))
			}
		}
	}
	return ev, notes
}

// lookup finds the defined symbols with exactly these names (the first of
// .dynsym, then .symtab).
func (l *Library) lookup(names []string) (map[string]Symbol, error) {
	out := map[string]Symbol{}
	if err := l.scanKnown(); err != nil {
		return nil, err
	}
	var rest []string
	for _, n := range names {
		if ss, ok := l.known[n]; ok {
			if len(ss) > 0 {
				out[n] = ss[0]
			}
		} else if !l.isKnown(n) {
			rest = append(rest, n)
		}
	}
	if len(rest) == 0 {
		return out, nil
	}
	err := l.ScanSymbols(rest, func(s Symbol) {
		if slices.Contains(rest, s.Name) {
			if _, dup := out[s.Name]; !dup {
				out[s.Name] = s
			}
		}
	})
	return out, err
}

// knownNames and knownPrefixes are every symbol the layout and plan code
// looks up: scanned for once per library (scanKnown).
var knownNames, knownPrefixes = func() ([]string, []string) {
	var names []string
	for _, a := range bufferAccessors {
		names = append(names, a.name)
	}
	names = append(names, symTrackAllocate, symTrackDeallocate, symTrackAllocateCB, symTrackDeallocateCB,
		symAllocateImpl, symDeallocateImpl, symDeallocate, symBufferD2, symBufferD1, symDeallocateCBs,
		symProgramImplD2, symProgramImplD1, symImplAllocateImpl, symImplDeallocateImpl, symImplDeallocate,
		symNotifyAllocated, symNotifyDeallocated)
	callerNames, callerPrefixes := knownCallerNames()
	names = spellings(names...)
	// g_instances too: the session asks for it at attach (RootSymbol).
	names = append(names, SymContexts)
	return append(names, callerNames...), append(append(spellings(symBufferCreateOwningPrefix), callerPrefixes...), controlBlockVtables...)
}()

// isKnown reports whether scanKnown looked for name.
func (l *Library) isKnown(name string) bool {
	if slices.Contains(knownNames, name) {
		return true
	}
	for _, p := range knownPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// scanKnown fills l.known with every symbol of knownNames and
// knownPrefixes (an empty entry for names absent), in one scan.
func (l *Library) scanKnown() error {
	if l.known != nil {
		return nil
	}
	known := map[string][]Symbol{}
	for _, n := range knownNames {
		known[n] = nil
	}
	err := l.ScanSymbols(append(append([]string(nil), knownNames...), knownPrefixes...), func(s Symbol) {
		if _, exact := known[s.Name]; exact || l.isKnownPrefix(s.Name) {
			known[s.Name] = append(known[s.Name], s)
		}
	})
	if err != nil {
		return err
	}
	l.known = known
	return nil
}

func (l *Library) isKnownPrefix(name string) bool {
	for _, p := range knownPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// knownWithPrefix returns the symbols scanKnown found under prefix p (one
// of knownPrefixes).
func (l *Library) knownWithPrefix(p string) ([]Symbol, error) {
	if err := l.scanKnown(); err != nil {
		return nil, err
	}
	var out []Symbol
	for n, ss := range l.known {
		if strings.HasPrefix(n, p) {
			out = append(out, ss...)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Dynamic && !out[j].Dynamic
	})
	return out, nil
}
