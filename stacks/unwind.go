package stacks

import (
	"encoding/binary"

	"github.com/tttrace/tttrace/elfx"
)

// Regs are the registers captured with a stack: the thread's pc, stack
// pointer and frame pointer at the probe. The stack bytes start at SP.
type Regs struct {
	IP, SP, BP uint64
}

// Loc is one frame of an unwound stack.
type Loc struct {
	// PC is the run-time address: the innermost frame's pc, else the
	// return address into the frame's function.
	PC uint64
	// File is the module PC lies in; nil for a pc in no mapped ELF file
	// (then it is the last frame).
	File *File
	// Addr is PC's ELF virtual address in File.
	Addr uint64
}

// DefaultMaxFrames is the depth Unwind keeps when asked for 0.
const DefaultMaxFrames = 128

// Unwind walks the stack of a thread whose registers were regs and whose
// stack, from regs.SP up, is stack (a partial copy is fine), with the CFI of
// the modules in mods. It appends the frames, innermost first, to out (which
// may be nil) and returns it; truncated reports that the walk stopped before
// the outermost frame: maxFrames reached (0 means DefaultMaxFrames), a pc in
// no module or with no unwind rule, a read outside the copied stack, or a
// frame that does not move up the stack. It never fails otherwise: garbage
// gives a short stack.
func Unwind(mods *Modules, regs Regs, stack []byte, maxFrames int, out []Loc) (_ []Loc, truncated bool) {
	out, truncated, _ = unwind(mods, regs, stack, maxFrames, out, nil, nil)
	return out, truncated
}

// Step is how an unwind went from the frame at PC to its caller, when the
// frame's rule is a plain one: the caller's stack pointer (the CFA) is this
// frame's stack pointer (or with CFAFromBP its rbp) plus CFA, the return
// address is saved at the CFA plus RA, and with BPSaved the caller's rbp at
// the CFA plus BP (else rbp is unchanged). End: PC is the outermost frame
// (no caller). First: PC is the innermost frame's (its rule is looked up at
// PC itself, a caller's at PC-1).
type Step struct {
	PC                 uint64
	First, End         bool
	CFAFromBP, BPSaved bool
	CFA, RA, BP        int32
}

func fitsInt32(v int64) bool { return v >= -1<<31 && v < 1<<31 }

// UnwindSteps is Unwind that also gives the step of every frame, and says
// whether the stack is fixed by its pcs alone: every frame's rule is the
// simple one and the walk reached the outermost frame. Then a walk that
// reads, in any copy, the return addresses at the positions the steps give
// and finds the same pcs has the same frames (bpf/stack.h: known stacks).
func UnwindSteps(mods *Modules, regs Regs, stack []byte, maxFrames int, out []Loc, steps []Step) (_ []Loc, _ []Step, truncated, fixed bool) {
	steps = steps[:0]
	out, truncated, fixed = unwind(mods, regs, stack, maxFrames, out, &steps, nil)
	return out, steps, truncated, fixed && !truncated
}

// inStops says whether the return address pc is in one of stops (pc-1: a
// call may be a function's last instruction).
func inStops(stops []Range, pc uint64) bool {
	for _, r := range stops {
		if pc-1 >= r.Lo && pc-1 < r.Hi {
			return true
		}
	}
	return false
}

func unwind(mods *Modules, regs Regs, stack []byte, maxFrames int, out []Loc, steps *[]Step, stops []Range) (_ []Loc, truncated, fixed bool) {
	defer func() {
		// The CFI comes from files of the traced processes: a panic on
		// one ends this stack, not the tracer (elfx.Recover's rule).
		if recover() != nil {
			truncated, fixed = true, false
		}
	}()
	if maxFrames <= 0 {
		maxFrames = DefaultMaxFrames
	}
	st := unwindState{stack: stack, base: regs.SP}
	st.set(regRSP, regs.SP)
	st.set(regRBP, regs.BP)
	pc := regs.IP
	fixed = true
	for n := 0; ; n++ {
		if n >= maxFrames {
			return out, true, false
		}
		m := mods.find(pc)
		if m == nil {
			if pc != 0 {
				out = append(out, Loc{PC: pc})
			}
			return out, pc != 0 || n == 0, false
		}
		addr := pc - m.bias
		out = append(out, Loc{PC: pc, File: m.file, Addr: addr})
		if n > 0 && len(stops) > 0 && inStops(stops, pc) {
			// A stop (Table.SetStops): the stack ends here, as at an
			// outermost frame, and so does the kernel's walk of it (its
			// step says End).
			if steps != nil {
				*steps = append(*steps, Step{PC: pc, End: true})
			}
			return out, false, fixed
		}
		lookup := addr
		if n > 0 {
			lookup-- // a return address may be just past its function
		}
		rw := m.file.rowFor(lookup)
		if rw == nil {
			return out, true, false
		}
		if steps != nil {
			stp := Step{PC: pc, First: n == 0}
			switch {
			case rw.regs[regRA].kind == ruleUndefined:
				stp.End = true
			case rw.cfaExpr == nil && (rw.cfaReg == regRSP || rw.cfaReg == regRBP) && fitsInt32(rw.cfaOff) &&
				rw.regs[regRA].kind == ruleOffset && fitsInt32(rw.regs[regRA].off) &&
				rw.regs[regRSP].kind == ruleSame &&
				(rw.regs[regRBP].kind == ruleSame || rw.regs[regRBP].kind == ruleOffset && fitsInt32(rw.regs[regRBP].off)):
				stp.CFAFromBP = rw.cfaReg == regRBP
				stp.CFA, stp.RA = int32(rw.cfaOff), int32(rw.regs[regRA].off)
				if rw.regs[regRBP].kind == ruleOffset {
					stp.BPSaved, stp.BP = true, int32(rw.regs[regRBP].off)
				}
			default:
				fixed = false
			}
			*steps = append(*steps, stp)
		}
		st.set(regRA, pc) // DW_OP_breg16 (PLT rules) reads the current pc
		next, ok, end := st.step(rw)
		if end {
			return out, false, fixed
		}
		if !ok {
			return out, true, false
		}
		pc = next
		if pc == 0 {
			return out, false, false
		}
	}
}

// pltRow is the rule inside a PLT stub with no FDE: nothing pushed yet.
var pltRow = func() *row {
	r := &row{cfaReg: regRSP, cfaOff: 8}
	r.regs[regRA] = rule{kind: ruleOffset, off: -8}
	return r
}()

// rowFor returns the unwind rule at addr (memoized), or nil when the file
// has none.
func (f *File) rowFor(addr uint64) *row {
	f.mu.Lock()
	rw, ok := f.rows[addr]
	f.mu.Unlock()
	if ok {
		return rw
	}
	t := f.loadCFI()
	if e, err := t.find(addr); err == nil {
		rw, err = e.rowAt(addr)
		if err != nil {
			rw = nil
		}
	}
	if rw == nil && f.inPLT(addr) {
		rw = pltRow
	}
	f.mu.Lock()
	f.rows[addr] = rw
	f.mu.Unlock()
	return rw
}

// unwindState holds the registers known in the frame being unwound.
type unwindState struct {
	stack []byte
	base  uint64 // address of stack[0]
	vals  [numRegs]uint64
	known uint32 // bit per register
}

func (s *unwindState) set(reg int, v uint64) {
	s.vals[reg] = v
	s.known |= 1 << reg
}

func (s *unwindState) get(reg uint64) (uint64, bool) {
	if reg >= numRegs || s.known&(1<<reg) == 0 {
		return 0, false
	}
	return s.vals[reg], true
}

// read8 reads the u64 at addr from the copied stack.
func (s *unwindState) read8(addr uint64) (uint64, bool) {
	off := addr - s.base
	if addr < s.base || off > uint64(len(s.stack)) || uint64(len(s.stack))-off < 8 {
		return 0, false
	}
	return binary.LittleEndian.Uint64(s.stack[off:]), true
}

// savedAt is the value of reg saved at addr. A slot below the stack
// pointer was popped already (gcc's epilogues do not restore the rule
// after a pop: a probe on a tail-call jmp sees rbp "saved" below rsp),
// and the pop put the value back in reg.
func (s *unwindState) savedAt(reg int, addr, sp uint64) (uint64, bool) {
	if addr < sp && reg != regRA {
		return s.get(uint64(reg))
	}
	return s.read8(addr)
}

// step applies rw to the current frame: the registers become the caller's.
// It returns the caller's pc; end is true at the outermost frame (the
// return address is undefined).
func (s *unwindState) step(rw *row) (pc uint64, ok, end bool) {
	var cfa uint64
	if rw.cfaExpr != nil {
		cfa, ok = s.eval(rw.cfaExpr, 0, false)
	} else {
		var v uint64
		v, ok = s.get(rw.cfaReg)
		cfa = v + uint64(rw.cfaOff)
	}
	if !ok {
		return 0, false, false
	}
	sp, _ := s.get(regRSP)
	if cfa <= sp {
		return 0, false, false // a caller's frame is always above
	}
	var next [numRegs]uint64
	var known uint32
	for reg := 0; reg < numRegs; reg++ {
		ru := rw.regs[reg]
		var v uint64
		good := false
		switch ru.kind {
		case ruleSame:
			v, good = s.get(uint64(reg))
			if reg == regRA {
				// An RA rule the CFI never set: not an unwindable frame.
				return 0, false, false
			}
		case ruleUndefined:
			if reg == regRA {
				return 0, true, true
			}
		case ruleOffset:
			v, good = s.savedAt(reg, cfa+uint64(ru.off), sp)
		case ruleValOffset:
			v, good = cfa+uint64(ru.off), true
		case ruleRegister:
			v, good = s.get(uint64(ru.reg))
		case ruleExpr:
			var a uint64
			if a, good = s.eval(ru.expr, cfa, true); good {
				v, good = s.savedAt(reg, a, sp)
			}
		case ruleValExpr:
			v, good = s.eval(ru.expr, cfa, true)
		}
		if good {
			next[reg] = v
			known |= 1 << reg
		} else if reg == regRA {
			return 0, false, false
		}
	}
	// The CFA is the caller's stack pointer unless a rule says otherwise.
	if rw.regs[regRSP].kind == ruleSame {
		next[regRSP] = cfa
		known |= 1 << regRSP
	}
	pc = next[regRA]
	s.vals, s.known = next, known&^(1<<regRA)
	return pc, true, false
}

// eval runs a DWARF expression of the kinds CFI uses: constants,
// registers (DW_OP_breg*), stack arithmetic, and dereferences of the copied
// stack. push puts cfa on the stack first (DW_CFA_expression rules).
func (s *unwindState) eval(expr []byte, cfa uint64, push bool) (uint64, bool) {
	var st [16]uint64
	sp := 0
	pushv := func(v uint64) bool {
		if sp == len(st) {
			return false
		}
		st[sp] = v
		sp++
		return true
	}
	pop := func() (uint64, bool) {
		if sp == 0 {
			return 0, false
		}
		sp--
		return st[sp], true
	}
	if push {
		pushv(cfa)
	}
	r := &elfx.Reader{Data: expr}
	for steps := 0; r.Pos < uint64(len(expr)); steps++ {
		if steps > 256 || r.Short {
			return 0, false
		}
		op, _ := r.U8()
		switch {
		case op >= elfx.OpLit0 && op <= elfx.OpLit31:
			if !pushv(uint64(op - elfx.OpLit0)) {
				return 0, false
			}
			continue
		case op >= elfx.OpBreg0 && op <= elfx.OpBreg31:
			v, ok := s.get(uint64(op - elfx.OpBreg0))
			if !ok || !pushv(v+uint64(r.SLEB())) {
				return 0, false
			}
			continue
		}
		var v uint64
		var err error
		switch op {
		case elfx.OpConst1u:
			v, err = r.Fixed(1)
		case elfx.OpConst1s:
			v, err = r.Fixed(1)
			v = uint64(int64(int8(v)))
		case elfx.OpConst2u:
			v, err = r.Fixed(2)
		case elfx.OpConst2s:
			v, err = r.Fixed(2)
			v = uint64(int64(int16(v)))
		case elfx.OpConst4u:
			v, err = r.Fixed(4)
		case elfx.OpConst4s:
			v, err = r.Fixed(4)
			v = uint64(int64(int32(v)))
		case elfx.OpConst8u, elfx.OpConst8s, elfx.OpAddr:
			v, err = r.Fixed(8)
		case elfx.OpConstu:
			v = r.ULEB()
		case elfx.OpConsts:
			v = uint64(r.SLEB())
		case elfx.OpBregx:
			reg := r.ULEB()
			rv, ok := s.get(reg)
			if !ok {
				return 0, false
			}
			v = rv + uint64(r.SLEB())
		case elfx.OpDup:
			if sp == 0 {
				return 0, false
			}
			v = st[sp-1]
		case elfx.OpOver:
			if sp < 2 {
				return 0, false
			}
			v = st[sp-2]
		case elfx.OpPick:
			i, _ := r.U8()
			if int(i) >= sp {
				return 0, false
			}
			v = st[sp-1-int(i)]
		case elfx.OpDrop:
			if _, ok := pop(); !ok {
				return 0, false
			}
			continue
		case elfx.OpSwap:
			if sp < 2 {
				return 0, false
			}
			st[sp-1], st[sp-2] = st[sp-2], st[sp-1]
			continue
		case elfx.OpRot:
			if sp < 3 {
				return 0, false
			}
			st[sp-1], st[sp-2], st[sp-3] = st[sp-2], st[sp-3], st[sp-1]
			continue
		case elfx.OpDeref:
			a, ok := pop()
			if !ok {
				return 0, false
			}
			if v, ok = s.read8(a); !ok {
				return 0, false
			}
		case elfx.OpAbs, elfx.OpNeg, elfx.OpNot, elfx.OpPlusUconst:
			a, ok := pop()
			if !ok {
				return 0, false
			}
			switch op {
			case elfx.OpAbs:
				if int64(a) < 0 {
					a = -a
				}
			case elfx.OpNeg:
				a = -a
			case elfx.OpNot:
				a = ^a
			case elfx.OpPlusUconst:
				a += r.ULEB()
			}
			v = a
		case elfx.OpAnd, elfx.OpDiv, elfx.OpMinus, elfx.OpMod, elfx.OpMul, elfx.OpOr, elfx.OpPlus,
			elfx.OpShl, elfx.OpShr, elfx.OpShra, elfx.OpXor,
			elfx.OpEq, elfx.OpGe, elfx.OpGt, elfx.OpLe, elfx.OpLt, elfx.OpNe:
			b, ok1 := pop()
			a, ok2 := pop()
			if !ok1 || !ok2 {
				return 0, false
			}
			v, ok1 = binop(op, a, b)
			if !ok1 {
				return 0, false
			}
		case elfx.OpBra, elfx.OpSkip:
			off, e := r.Fixed(2)
			if e != nil {
				return 0, false
			}
			jump := true
			if op == elfx.OpBra {
				c, ok := pop()
				if !ok {
					return 0, false
				}
				jump = c != 0
			}
			if jump {
				np := int64(r.Pos) + int64(int16(off))
				if np < 0 || np > int64(len(expr)) {
					return 0, false
				}
				r.Pos = uint64(np)
			}
			continue
		case elfx.OpNop:
			continue
		default:
			return 0, false
		}
		if err != nil || !pushv(v) {
			return 0, false
		}
	}
	if r.Short {
		return 0, false
	}
	return pop()
}

func binop(op byte, a, b uint64) (uint64, bool) {
	t := func(c bool) uint64 {
		if c {
			return 1
		}
		return 0
	}
	switch op {
	case elfx.OpAnd:
		return a & b, true
	case elfx.OpDiv:
		if b == 0 || (int64(a) == -1<<63 && int64(b) == -1) {
			return 0, false
		}
		return uint64(int64(a) / int64(b)), true
	case elfx.OpMinus:
		return a - b, true
	case elfx.OpMod:
		if b == 0 {
			return 0, false
		}
		return a % b, true
	case elfx.OpMul:
		return a * b, true
	case elfx.OpOr:
		return a | b, true
	case elfx.OpPlus:
		return a + b, true
	case elfx.OpShl:
		if b >= 64 {
			return 0, true
		}
		return a << b, true
	case elfx.OpShr:
		if b >= 64 {
			return 0, true
		}
		return a >> b, true
	case elfx.OpShra:
		if b >= 64 {
			b = 63
		}
		return uint64(int64(a) >> b), true
	case elfx.OpXor:
		return a ^ b, true
	case elfx.OpEq:
		return t(a == b), true
	case elfx.OpGe:
		return t(int64(a) >= int64(b)), true
	case elfx.OpGt:
		return t(int64(a) > int64(b)), true
	case elfx.OpLe:
		return t(int64(a) <= int64(b)), true
	case elfx.OpLt:
		return t(int64(a) < int64(b)), true
	case elfx.OpNe:
		return t(a != b), true
	}
	return 0, false
}
