package stacks

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/tttrace/tttrace/elfx"
)

// DWARF call-frame information (DWARF 5 §6.4; LSB Core "Exception Frames"
// for .eh_frame and .eh_frame_hdr). A function's FDE holds instructions
// that, run up to a pc, give the rule for the canonical frame address (CFA,
// the caller's rsp before the call) and for where each caller register was
// saved. x86-64 DWARF register numbers: 6 rbp, 7 rsp, 16 the return address.

const (
	regRBP    = 6
	regRSP    = 7
	regRA     = 16
	numRegs   = 17
	maxStates = 16 // DW_CFA_remember_state depth kept
)

// ruleKind is how a caller's register is found.
type ruleKind uint8

const (
	ruleSame      ruleKind = iota // unchanged (the default for callee-saved registers)
	ruleUndefined                 // not recoverable; for the RA: the outermost frame
	ruleOffset                    // saved at CFA+off
	ruleValOffset                 // the value is CFA+off
	ruleRegister                  // held in register reg
	ruleExpr                      // saved at the address the expression gives (CFA pushed first)
	ruleValExpr                   // the value is the expression's result
)

type rule struct {
	kind ruleKind
	reg  uint8
	off  int64
	expr []byte
}

// row is the unwind rule at one address.
type row struct {
	cfaReg  uint64 // register of a register+offset CFA
	cfaOff  int64
	cfaExpr []byte // when non-nil, the CFA is this expression's value
	regs    [numRegs]rule
}

// fde is one function's entry.
type fde struct {
	cie          *elfx.CIE
	start, end   uint64
	instructions []byte
	enc          byte // pointer encoding for DW_CFA_set_loc
	sec          *cfiSection
	instrPos     uint64 // offset of instructions in sec.data (pc-relative set_loc)
}

// cfiSection is .eh_frame or .debug_frame.
type cfiSection struct {
	data  []byte
	addr  uint64
	debug bool // .debug_frame: CIE id 0xffffffff, CIE pointers are section offsets
}

// fdeRef locates an FDE found by scanning.
type fdeRef struct {
	start, end uint64
	off        uint64
	sec        *cfiSection
}

type cfiTable struct {
	eh  *cfiSection
	dbg *cfiSection
	// .eh_frame_hdr binary-search table (datarel sdata4 pairs), when usable.
	hdr     []byte
	hdrAddr uint64
	// FDEs from scanning: .eh_frame when it has no usable header, and
	// .debug_frame. Sorted by start.
	fdes []fdeRef
}

var errNoFDE = errors.New("no FDE covers the address")

// loadCFI reads the file's CFI sections; malformed data only loses FDEs.
func (f *File) loadCFI() *cfiTable {
	f.cfiOnce.Do(func() {
		t := &cfiTable{}
		if s, b := f.section(".eh_frame"); s != nil {
			t.eh = &cfiSection{data: b, addr: s.Addr}
		}
		if s, b := f.section(".debug_frame"); s != nil {
			t.dbg = &cfiSection{data: b, addr: s.Addr, debug: true}
		}
		if s, b := f.section(".eh_frame_hdr"); s != nil && t.eh != nil {
			t.hdr, t.hdrAddr = parseHdr(b, s.Addr)
		}
		if t.eh != nil && t.hdr == nil {
			t.fdes = append(t.fdes, scanFDEs(t.eh)...)
		}
		if t.dbg != nil {
			t.fdes = append(t.fdes, scanFDEs(t.dbg)...)
		}
		sort.SliceStable(t.fdes, func(i, j int) bool { return t.fdes[i].start < t.fdes[j].start })
		f.cfi = t
	})
	return f.cfi
}

// parseHdr returns the search table of .eh_frame_hdr when it has the
// encoding every toolchain emits (DW_EH_PE_datarel|sdata4), else nil.
func parseHdr(b []byte, addr uint64) ([]byte, uint64) {
	if len(b) < 4 || b[0] != 1 || b[3] != elfx.PEDataRel|elfx.PESdata4 {
		return nil, 0
	}
	r := &elfx.Reader{Data: b, Pos: 4, Base: addr}
	if _, err := r.Pointer(b[1], 0); err != nil {
		return nil, 0
	}
	n, err := r.Pointer(b[2], 0)
	if err != nil || n == 0 || n > uint64(len(b))/8 || r.Pos+n*8 > uint64(len(b)) {
		return nil, 0
	}
	return b[r.Pos : r.Pos+n*8], addr
}

// find returns the FDE covering addr (an ELF virtual address).
func (t *cfiTable) find(addr uint64) (*fde, error) {
	if t.hdr != nil {
		n := len(t.hdr) / 8
		loc := func(i int) uint64 {
			return t.hdrAddr + uint64(int64(int32(binary.LittleEndian.Uint32(t.hdr[i*8:]))))
		}
		i := sort.Search(n, func(i int) bool { return loc(i) > addr }) - 1
		if i >= 0 {
			fdeAddr := t.hdrAddr + uint64(int64(int32(binary.LittleEndian.Uint32(t.hdr[i*8+4:]))))
			if fdeAddr >= t.eh.addr {
				if e, err := parseFDE(t.eh, fdeAddr-t.eh.addr); err == nil && addr >= e.start && addr < e.end {
					return e, nil
				}
			}
		}
	}
	// Scanned FDEs may overlap (one per section); try those that start at
	// or below addr, nearest first, a few at most.
	i := sort.Search(len(t.fdes), func(i int) bool { return t.fdes[i].start > addr }) - 1
	for k := 0; i >= 0 && k < 4; i, k = i-1, k+1 {
		r := t.fdes[i]
		if addr < r.end {
			return parseFDE(r.sec, r.off)
		}
	}
	return nil, errNoFDE
}

var errShort = elfx.ErrShort

// scanFDEs lists every FDE of a section, stopping at the first malformed
// entry (what came before stays usable).
func scanFDEs(s *cfiSection) []fdeRef {
	var out []fdeRef
	cies := map[uint64]*elfx.CIE{}
	for off := uint64(0); off < uint64(len(s.data)); {
		e, err := elfx.ReadCFIEntry(s.data, off, s.debug)
		if err == elfx.ErrCFIEnd && !s.debug {
			break
		}
		if err == elfx.ErrCFIEnd { // a zero length in .debug_frame: padding
			off = e.End
			continue
		}
		if err != nil {
			break
		}
		if !e.CIE {
			if co, ok := e.CIEOffset(s.debug); ok {
				c, ok := cies[co]
				if !ok {
					if c, err = elfx.ParseCIE(s.data, co, s.addr, s.debug); err == nil {
						cies[co] = c
					}
				}
				if c != nil {
					start, end, _, err := elfx.FDERange(s.data, e, c, s.addr)
					if err == nil && end > start {
						out = append(out, fdeRef{start: start, end: end, off: off, sec: s})
					}
				}
			}
		}
		off = e.End
	}
	return out
}

// parseFDE parses the FDE at off and its CIE.
func parseFDE(s *cfiSection, off uint64) (*fde, error) {
	e, err := elfx.ReadCFIEntry(s.data, off, s.debug)
	if err != nil {
		return nil, err
	}
	if e.CIE {
		return nil, fmt.Errorf("entry at %#x is a CIE", off)
	}
	co, ok := e.CIEOffset(s.debug)
	if !ok {
		return nil, fmt.Errorf("FDE at %#x: bad CIE pointer", off)
	}
	c, err := elfx.ParseCIE(s.data, co, s.addr, s.debug)
	if err != nil {
		return nil, err
	}
	start, end, pos, err := elfx.FDERange(s.data, e, c, s.addr)
	if err != nil {
		return nil, err
	}
	r := &elfx.Reader{Data: s.data[:e.End], Pos: pos}
	if c.AugZ {
		if err := r.Skip(r.ULEB()); err != nil {
			return nil, err
		}
	}
	return &fde{cie: c, start: start, end: end, instructions: s.data[r.Pos:e.End], enc: c.FDEEnc, sec: s, instrPos: r.Pos}, nil
}

// rowAt runs the CIE's and the FDE's instructions up to addr.
func (e *fde) rowAt(addr uint64) (*row, error) {
	var init row
	if _, err := e.run(&init, nil, e.cie.Initial, 0, ^uint64(0), 0); err != nil {
		return nil, err
	}
	cur := init
	if _, err := e.run(&cur, &init, e.instructions, e.start, addr, e.instrPos); err != nil {
		return nil, err
	}
	return &cur, nil
}

// run executes CFA instructions on rw, starting at location loc, until
// the location passes addr. init is the CIE's row (DW_CFA_restore); base
// is the instructions' offset in the section (pc-relative set_loc).
func (e *fde) run(rw *row, init *row, ins []byte, loc, addr, base uint64) (uint64, error) {
	c := e.cie
	r := &elfx.Reader{Data: ins}
	var stack [maxStates]row
	depth := 0
	setReg := func(reg uint64, ru rule) {
		if reg < numRegs {
			rw.regs[reg] = ru
		}
	}
	restore := func(reg uint64) {
		if reg < numRegs {
			if init != nil {
				rw.regs[reg] = init.regs[reg]
			} else {
				rw.regs[reg] = rule{}
			}
		}
	}
	advance := func(delta uint64) bool {
		loc += delta * c.CodeAlign
		return loc > addr
	}
	for r.Pos < uint64(len(ins)) {
		op, _ := r.U8()
		switch op & 0xc0 {
		case elfx.CFAAdvanceLoc:
			if advance(uint64(op & 0x3f)) {
				return loc, nil
			}
			continue
		case elfx.CFAOffset:
			setReg(uint64(op&0x3f), rule{kind: ruleOffset, off: int64(r.ULEB()) * c.DataAlign})
			continue
		case elfx.CFARestore:
			restore(uint64(op & 0x3f))
			continue
		}
		switch op {
		case elfx.CFANop:
		case elfx.CFASetLoc:
			sub := &elfx.Reader{Data: e.sec.data, Pos: base + r.Pos, Base: e.sec.addr}
			v, err := sub.Pointer(e.enc, 0)
			if err != nil {
				return loc, err
			}
			r.Pos = sub.Pos - base
			if v > addr {
				return loc, nil
			}
			loc = v
		case elfx.CFAAdvanceLoc1:
			b, err := r.U8()
			if err != nil {
				return loc, err
			}
			if advance(uint64(b)) {
				return loc, nil
			}
		case elfx.CFAAdvanceLoc2:
			v, err := r.Fixed(2)
			if err != nil {
				return loc, err
			}
			if advance(v) {
				return loc, nil
			}
		case elfx.CFAAdvanceLoc4:
			v, err := r.Fixed(4)
			if err != nil {
				return loc, err
			}
			if advance(v) {
				return loc, nil
			}
		case elfx.CFAOffsetExtended:
			reg := r.ULEB()
			setReg(reg, rule{kind: ruleOffset, off: int64(r.ULEB()) * c.DataAlign})
		case elfx.CFARestoreExtended:
			restore(r.ULEB())
		case elfx.CFAUndefined:
			setReg(r.ULEB(), rule{kind: ruleUndefined})
		case elfx.CFASameValue:
			setReg(r.ULEB(), rule{kind: ruleSame})
		case elfx.CFARegister:
			reg, reg2 := r.ULEB(), r.ULEB()
			if reg2 >= numRegs {
				setReg(reg, rule{kind: ruleUndefined})
			} else {
				setReg(reg, rule{kind: ruleRegister, reg: uint8(reg2)})
			}
		case elfx.CFARememberState:
			if depth == maxStates {
				return loc, errors.New("DW_CFA_remember_state nested too deep")
			}
			stack[depth] = *rw
			depth++
		case elfx.CFARestoreState: // the whole row, CFA rule included (DWARF 5
			// §6.4.2.4; gcc's epilogues rely on it: remember, def_cfa rsp+8
			// before ret, restore for the code after the ret)
			if depth == 0 {
				return loc, errors.New("DW_CFA_restore_state without remember")
			}
			depth--
			*rw = stack[depth]
		case elfx.CFADefCFA:
			rw.cfaReg, rw.cfaOff, rw.cfaExpr = r.ULEB(), int64(r.ULEB()), nil
		case elfx.CFADefCFARegister:
			rw.cfaReg, rw.cfaExpr = r.ULEB(), nil
		case elfx.CFADefCFAOffset:
			rw.cfaOff = int64(r.ULEB())
		case elfx.CFADefCFAExpression:
			b, err := r.Block()
			if err != nil {
				return loc, err
			}
			rw.cfaExpr = b
		case elfx.CFAExpression, elfx.CFAValExpression:
			reg := r.ULEB()
			b, err := r.Block()
			if err != nil {
				return loc, err
			}
			k := ruleExpr
			if op == elfx.CFAValExpression {
				k = ruleValExpr
			}
			setReg(reg, rule{kind: k, expr: b})
		case elfx.CFAOffsetExtendedSF:
			reg := r.ULEB()
			setReg(reg, rule{kind: ruleOffset, off: r.SLEB() * c.DataAlign})
		case elfx.CFADefCFASF:
			rw.cfaReg, rw.cfaOff, rw.cfaExpr = r.ULEB(), r.SLEB()*c.DataAlign, nil
		case elfx.CFADefCFAOffsetSF:
			rw.cfaOff = r.SLEB() * c.DataAlign
		case elfx.CFAValOffset:
			reg := r.ULEB()
			setReg(reg, rule{kind: ruleValOffset, off: int64(r.ULEB()) * c.DataAlign})
		case elfx.CFAValOffsetSF:
			reg := r.ULEB()
			setReg(reg, rule{kind: ruleValOffset, off: r.SLEB() * c.DataAlign})
		case elfx.CFAGNUArgsSize:
			r.ULEB()
		case elfx.CFAGNUNegOffsetExtSF:
			reg := r.ULEB()
			setReg(reg, rule{kind: ruleOffset, off: -int64(r.ULEB()) * c.DataAlign})
		default:
			return loc, fmt.Errorf("CFA instruction %#x not understood", op)
		}
		if r.Short {
			return loc, errShort
		}
	}
	return loc, nil
}
