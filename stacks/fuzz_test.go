package stacks

import (
	"encoding/binary"
	"testing"
)

// FuzzCFI feeds arbitrary bytes as .eh_frame or .debug_frame and runs the
// whole rule machinery on them: scanning, CIE/FDE parsing, the CFA
// program up to an address, the step with an arbitrary stack. Nothing may
// panic or loop.
func FuzzCFI(f *testing.F) {
	// Seeds: the CFI of real files (this machine's libc and libstdc++).
	for _, p := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libstdc++.so.6"} {
		file, err := NewCache().OpenFile(p)
		if err != nil {
			continue
		}
		if s, b := file.section(".eh_frame"); s != nil {
			n := min(len(b), 4096)
			f.Add(b[:n], s.Addr+uint64(n/2), false, make([]byte, 256))
		}
	}
	// A hand-made CIE + FDE with every instruction kind.
	f.Add(handCFI(), uint64(0x1010), false, make([]byte, 64))
	f.Add(handCFI(), uint64(0x1010), true, []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte, addr uint64, debug bool, stack []byte) {
		s := &cfiSection{data: data, addr: 0x1000, debug: debug}
		for i, r := range scanFDEs(s) {
			if i == 8 {
				break
			}
			e, err := parseFDE(s, r.off)
			if err != nil {
				continue
			}
			for _, a := range []uint64{addr, e.start, e.end - 1} {
				rw, err := e.rowAt(a)
				if err != nil {
					continue
				}
				st := unwindState{stack: stack, base: 0x7000}
				st.set(regRSP, 0x7000)
				st.set(regRBP, 0x7010)
				st.set(regRA, a)
				st.step(rw)
			}
		}
		tab := &cfiTable{eh: s}
		tab.hdr, tab.hdrAddr = parseHdr(data, 0x1000)
		tab.find(addr)
	})
}

// handCFI is an .eh_frame with one CIE and one FDE for [0x1000, 0x1100)
// whose program uses remember/restore state, def_cfa_expression (the PLT
// expression) and an expression rule.
func handCFI() []byte {
	cieBody := []byte{1, 'z', 'R', 0, 1, 0x78, 16, 1, 0x1b, // v1 "zR" caf 1 daf -8 ra 16, aug len 1, pcrel sdata4
		0x0c, 7, 8, 0x90, 1} // def_cfa rsp+8; offset r16 at cfa-8
	cie := append(binary.LittleEndian.AppendUint32(nil, uint32(4+len(cieBody))), 0, 0, 0, 0)
	cie = append(cie, cieBody...)
	fdeStart := len(cie)
	prog := []byte{
		0x41, 0x0e, 16, 0x86, 2, // advance 1; def_cfa_offset 16; rbp at cfa-16
		0x0a, 0x42, 0x0d, 6, // remember; advance 2; def_cfa_register rbp
		0x41, 0x0b, 0x42, // advance 1; restore_state; advance 2
		0x0f, 11, 0x77, 8, 0x80, 0, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22, // PLT CFA expression
		0x10, 6, 2, 0x76, 0, // rbp expression: breg6 0
		0x44, 0x16, 6, 1, 0x96, // advance 4; val_expression rbp nop
	}
	body := binary.LittleEndian.AppendUint32(nil, uint32(fdeStart+4)) // CIE pointer
	pcAt := fdeStart + 8
	body = binary.LittleEndian.AppendUint32(body, uint32(int32(0x1000-(0x1000+pcAt))))
	body = binary.LittleEndian.AppendUint32(body, 0x100)
	body = append(body, 0) // augmentation length
	body = append(body, prog...)
	fde := append(binary.LittleEndian.AppendUint32(nil, uint32(len(body))), body...)
	return append(append(cie, fde...), 0, 0, 0, 0)
}

// The hand-made CFI gives the rows its program says.
func TestHandCFI(t *testing.T) {
	s := &cfiSection{data: handCFI(), addr: 0x1000}
	refs := scanFDEs(s)
	if len(refs) != 1 || refs[0].start != 0x1000 || refs[0].end != 0x1100 {
		t.Fatalf("FDEs %+v", refs)
	}
	e, err := parseFDE(s, refs[0].off)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		addr    uint64
		cfaReg  uint64
		cfaOff  int64
		expr    bool
		rbpKind ruleKind
	}{
		{0x1000, regRSP, 8, false, ruleSame},
		{0x1001, regRSP, 16, false, ruleOffset},
		{0x1003, regRBP, 16, false, ruleOffset},
		{0x1004, regRSP, 16, false, ruleOffset}, // restore_state: the CFA rule too
		{0x1006, regRSP, 16, true, ruleExpr},
		{0x100a, regRSP, 16, true, ruleValExpr},
	} {
		rw, err := e.rowAt(c.addr)
		if err != nil {
			t.Fatalf("%#x: %v", c.addr, err)
		}
		if rw.cfaReg != c.cfaReg || rw.cfaOff != c.cfaOff || (rw.cfaExpr != nil) != c.expr || rw.regs[regRBP].kind != c.rbpKind {
			t.Errorf("%#x: cfa r%d%+d expr %v, rbp rule %d; want r%d%+d expr %v rbp %d", c.addr,
				rw.cfaReg, rw.cfaOff, rw.cfaExpr != nil, rw.regs[regRBP].kind, c.cfaReg, c.cfaOff, c.expr, c.rbpKind)
		}
	}
	// The PLT expression: CFA = rsp + 8 + ((rip & 15) >= 11) << 3.
	rw, _ := e.rowAt(0x1006)
	stack := make([]byte, 64)
	binary.LittleEndian.PutUint64(stack[0:], 0xabc) // the RA at CFA-8 when rip&15 < 11
	binary.LittleEndian.PutUint64(stack[8:], 0xdef)
	for _, c := range []struct{ rip, ra uint64 }{{0x2000, 0xabc}, {0x200b, 0xdef}} {
		st := unwindState{stack: stack, base: 0x7000}
		st.set(regRSP, 0x7000)
		st.set(regRBP, 0x7030)
		st.set(regRA, c.rip)
		pc, ok, _ := st.step(rw)
		if !ok || pc != c.ra {
			t.Errorf("rip %#x: ra %#x ok %v, want %#x", c.rip, pc, ok, c.ra)
		}
	}
}

// FuzzUnwind unwinds arbitrary stacks and registers over a real module map
// (the chain program's): nothing may panic, and the frame count is
// bounded.
func FuzzUnwind(f *testing.F) {
	b := buildChain(f, chainVariants[0])
	regs, stack, maps := b.capture(f, 0)
	mods := bindByPath(NewCache(), maps)
	f.Add(regs.IP, regs.SP, regs.BP, stack)
	f.Add(regs.IP, regs.SP+16, regs.BP, stack[:200])
	f.Fuzz(func(t *testing.T, ip, sp, bp uint64, stack []byte) {
		locs, trunc := Unwind(mods, Regs{IP: ip, SP: sp, BP: bp}, stack, 64, nil)
		if len(locs) > 64 || (len(locs) == 64 && !trunc) {
			t.Fatalf("%d frames, truncated %v", len(locs), trunc)
		}
		Symbolize(locs)
	})
}
