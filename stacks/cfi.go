package stacks

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
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

// cie is a Common Information Entry, the part FDEs share.
type cie struct {
	codeAlign uint64
	dataAlign int64
	raReg     uint64
	fdeEnc    byte
	augZ      bool
	initial   []byte
}

// fde is one function's entry.
type fde struct {
	cie          *cie
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
	if len(b) < 4 || b[0] != 1 || b[3] != 0x3b {
		return nil, 0
	}
	r := &reader{data: b, pos: 4, base: addr}
	if _, err := r.pointer(b[1], 0); err != nil {
		return nil, 0
	}
	n, err := r.pointer(b[2], 0)
	if err != nil || n == 0 || n > uint64(len(b))/8 || r.pos+n*8 > uint64(len(b)) {
		return nil, 0
	}
	return b[r.pos : r.pos+n*8], addr
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

// entryHeader reads the length and id of the entry at off; body is the
// entry's bytes after the id, idPos where the id was.
func entryHeader(s *cfiSection, off uint64) (body []byte, bodyPos, idPos, id uint64, is64 bool, err error) {
	d := s.data
	if off+4 > uint64(len(d)) {
		return nil, 0, 0, 0, false, errShort
	}
	length := uint64(binary.LittleEndian.Uint32(d[off:]))
	pos := off + 4
	if length == 0xffffffff {
		if pos+8 > uint64(len(d)) {
			return nil, 0, 0, 0, false, errShort
		}
		length = binary.LittleEndian.Uint64(d[pos:])
		pos += 8
		is64 = true
	}
	if length == 0 {
		return nil, 0, 0, 0, false, errEnd
	}
	end := pos + length
	idLen := uint64(4)
	if is64 {
		idLen = 8
	}
	if end > uint64(len(d)) || end < pos || length < idLen {
		return nil, 0, 0, 0, false, errShort
	}
	idPos = pos
	if is64 {
		id = binary.LittleEndian.Uint64(d[pos:])
	} else {
		id = uint64(binary.LittleEndian.Uint32(d[pos:]))
	}
	pos += idLen
	return d[:end], pos, idPos, id, is64, nil
}

var (
	errShort = errors.New("truncated CFI")
	errEnd   = errors.New("end of CFI")
)

// isCIE tells a CIE id from an FDE's CIE pointer.
func isCIE(s *cfiSection, id uint64, is64 bool) bool {
	if !s.debug {
		return id == 0
	}
	return id == 0xffffffff || (is64 && id == ^uint64(0))
}

// cieOffset returns the section offset of the CIE an FDE names.
func cieOffset(s *cfiSection, idPos, id uint64) (uint64, bool) {
	if s.debug {
		return id, true
	}
	if id > idPos {
		return 0, false
	}
	return idPos - id, true
}

// scanFDEs lists every FDE of a section, stopping at the first malformed
// entry (what came before stays usable).
func scanFDEs(s *cfiSection) []fdeRef {
	var out []fdeRef
	cies := map[uint64]*cie{}
	for off := uint64(0); off < uint64(len(s.data)); {
		body, pos, idPos, id, is64, err := entryHeader(s, off)
		if err == errEnd && !s.debug {
			break
		}
		if err != nil {
			if err == errEnd { // a zero length in .debug_frame: padding
				off += 4
				continue
			}
			break
		}
		next := uint64(len(body))
		if !isCIE(s, id, is64) {
			co, ok := cieOffset(s, idPos, id)
			if ok {
				c, ok := cies[co]
				if !ok {
					if c, err = parseCIE(s, co); err == nil {
						cies[co] = c
					}
				}
				if c != nil {
					r := &reader{data: body, pos: pos, base: s.addr}
					start, err1 := r.pointer(c.fdeEnc, 0)
					n, err2 := r.pointer(c.fdeEnc&0x0f, 0)
					if err1 == nil && err2 == nil && n > 0 {
						out = append(out, fdeRef{start: start, end: start + n, off: off, sec: s})
					}
				}
			}
		}
		off = next
	}
	return out
}

// parseCIE parses the CIE at off.
func parseCIE(s *cfiSection, off uint64) (*cie, error) {
	body, pos, _, id, is64, err := entryHeader(s, off)
	if err != nil {
		return nil, err
	}
	if !isCIE(s, id, is64) {
		return nil, fmt.Errorf("entry at %#x is not a CIE", off)
	}
	r := &reader{data: body, pos: pos, base: s.addr}
	ver, err := r.u8()
	if err != nil {
		return nil, err
	}
	if ver != 1 && ver != 3 && ver != 4 {
		return nil, fmt.Errorf("CIE version %d", ver)
	}
	aug := r.cstring()
	c := &cie{fdeEnc: pePtr}
	if aug == "eh" {
		r.pos += 8
	}
	if ver == 4 {
		asz, _ := r.u8()
		ssz, _ := r.u8()
		if asz != 8 || ssz != 0 {
			return nil, fmt.Errorf("CIE address size %d, segment size %d", asz, ssz)
		}
	}
	c.codeAlign = r.uleb()
	c.dataAlign = r.sleb()
	if ver == 1 {
		b, _ := r.u8()
		c.raReg = uint64(b)
	} else {
		c.raReg = r.uleb()
	}
	if len(aug) > 0 && aug[0] == 'z' {
		c.augZ = true
		n := r.uleb()
		end := r.pos + n
		for _, ch := range aug[1:] {
			switch ch {
			case 'L':
				r.pos++
			case 'P':
				enc, err := r.u8()
				if err != nil {
					return nil, err
				}
				if _, err := r.pointer(enc&^peIndirect, 0); err != nil {
					return nil, err
				}
			case 'R':
				if c.fdeEnc, err = r.u8(); err != nil {
					return nil, err
				}
			case 'S', 'B', 'G':
			default:
				r.pos = end // unknown letter: its data is within the length
			}
		}
		r.pos = end
	} else if aug != "" && aug != "eh" {
		return nil, fmt.Errorf("CIE augmentation %q not understood", aug)
	}
	if r.pos > uint64(len(body)) {
		return nil, errShort
	}
	c.initial = body[r.pos:]
	return c, nil
}

// parseFDE parses the FDE at off and its CIE.
func parseFDE(s *cfiSection, off uint64) (*fde, error) {
	body, pos, idPos, id, is64, err := entryHeader(s, off)
	if err != nil {
		return nil, err
	}
	if isCIE(s, id, is64) {
		return nil, fmt.Errorf("entry at %#x is a CIE", off)
	}
	co, ok := cieOffset(s, idPos, id)
	if !ok {
		return nil, fmt.Errorf("FDE at %#x: bad CIE pointer", off)
	}
	c, err := parseCIE(s, co)
	if err != nil {
		return nil, err
	}
	r := &reader{data: body, pos: pos, base: s.addr}
	start, err := r.pointer(c.fdeEnc, 0)
	if err != nil {
		return nil, err
	}
	n, err := r.pointer(c.fdeEnc&0x0f, 0)
	if err != nil {
		return nil, err
	}
	if c.augZ {
		l := r.uleb()
		r.pos += l
	}
	if r.pos > uint64(len(body)) {
		return nil, errShort
	}
	return &fde{cie: c, start: start, end: start + n, instructions: body[r.pos:], enc: c.fdeEnc, sec: s, instrPos: r.pos}, nil
}

// rowAt runs the CIE's and the FDE's instructions up to addr.
func (e *fde) rowAt(addr uint64) (*row, error) {
	var init row
	if _, err := e.run(&init, nil, e.cie.initial, 0, ^uint64(0), 0); err != nil {
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
	r := &reader{data: ins}
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
		loc += delta * c.codeAlign
		return loc > addr
	}
	for r.pos < uint64(len(ins)) {
		op, _ := r.u8()
		switch op & 0xc0 {
		case 0x40: // DW_CFA_advance_loc
			if advance(uint64(op & 0x3f)) {
				return loc, nil
			}
			continue
		case 0x80: // DW_CFA_offset
			setReg(uint64(op&0x3f), rule{kind: ruleOffset, off: int64(r.uleb()) * c.dataAlign})
			continue
		case 0xc0: // DW_CFA_restore
			restore(uint64(op & 0x3f))
			continue
		}
		switch op {
		case 0x00: // nop
		case 0x01: // set_loc
			sub := &reader{data: e.sec.data, pos: base + r.pos, base: e.sec.addr}
			v, err := sub.pointer(e.enc, 0)
			if err != nil {
				return loc, err
			}
			r.pos = sub.pos - base
			if v > addr {
				return loc, nil
			}
			loc = v
		case 0x02:
			b, err := r.u8()
			if err != nil {
				return loc, err
			}
			if advance(uint64(b)) {
				return loc, nil
			}
		case 0x03:
			v, err := r.fixed(2)
			if err != nil {
				return loc, err
			}
			if advance(v) {
				return loc, nil
			}
		case 0x04:
			v, err := r.fixed(4)
			if err != nil {
				return loc, err
			}
			if advance(v) {
				return loc, nil
			}
		case 0x05: // offset_extended
			reg := r.uleb()
			setReg(reg, rule{kind: ruleOffset, off: int64(r.uleb()) * c.dataAlign})
		case 0x06: // restore_extended
			restore(r.uleb())
		case 0x07: // undefined
			setReg(r.uleb(), rule{kind: ruleUndefined})
		case 0x08: // same_value
			setReg(r.uleb(), rule{kind: ruleSame})
		case 0x09: // register
			reg, reg2 := r.uleb(), r.uleb()
			if reg2 >= numRegs {
				setReg(reg, rule{kind: ruleUndefined})
			} else {
				setReg(reg, rule{kind: ruleRegister, reg: uint8(reg2)})
			}
		case 0x0a: // remember_state
			if depth == maxStates {
				return loc, errors.New("DW_CFA_remember_state nested too deep")
			}
			stack[depth] = *rw
			depth++
		case 0x0b: // restore_state: the whole row, CFA rule included (DWARF 5
			// §6.4.2.4; gcc's epilogues rely on it: remember, def_cfa rsp+8
			// before ret, restore for the code after the ret)
			if depth == 0 {
				return loc, errors.New("DW_CFA_restore_state without remember")
			}
			depth--
			*rw = stack[depth]
		case 0x0c: // def_cfa
			rw.cfaReg, rw.cfaOff, rw.cfaExpr = r.uleb(), int64(r.uleb()), nil
		case 0x0d: // def_cfa_register
			rw.cfaReg, rw.cfaExpr = r.uleb(), nil
		case 0x0e: // def_cfa_offset
			rw.cfaOff = int64(r.uleb())
		case 0x0f: // def_cfa_expression
			b, err := r.block()
			if err != nil {
				return loc, err
			}
			rw.cfaExpr = b
		case 0x10, 0x16: // expression, val_expression
			reg := r.uleb()
			b, err := r.block()
			if err != nil {
				return loc, err
			}
			k := ruleExpr
			if op == 0x16 {
				k = ruleValExpr
			}
			setReg(reg, rule{kind: k, expr: b})
		case 0x11: // offset_extended_sf
			reg := r.uleb()
			setReg(reg, rule{kind: ruleOffset, off: r.sleb() * c.dataAlign})
		case 0x12: // def_cfa_sf
			rw.cfaReg, rw.cfaOff, rw.cfaExpr = r.uleb(), r.sleb()*c.dataAlign, nil
		case 0x13: // def_cfa_offset_sf
			rw.cfaOff = r.sleb() * c.dataAlign
		case 0x14: // val_offset
			reg := r.uleb()
			setReg(reg, rule{kind: ruleValOffset, off: int64(r.uleb()) * c.dataAlign})
		case 0x15: // val_offset_sf
			reg := r.uleb()
			setReg(reg, rule{kind: ruleValOffset, off: r.sleb() * c.dataAlign})
		case 0x2e: // GNU_args_size
			r.uleb()
		case 0x2f: // GNU_negative_offset_extended
			reg := r.uleb()
			setReg(reg, rule{kind: ruleOffset, off: -int64(r.uleb()) * c.dataAlign})
		default:
			return loc, fmt.Errorf("CFA instruction %#x not understood", op)
		}
		if r.err {
			return loc, errShort
		}
	}
	return loc, nil
}
