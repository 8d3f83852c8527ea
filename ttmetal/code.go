package ttmetal

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"golang.org/x/arch/x86/x86asm"
)

// Machine-code analysis of a library, with golang.org/x/arch/x86/x86asm:
// which functions are really called (direct calls and jumps, through the
// PLT or through the GOT), the ret instructions and other exits of a
// function (where tttrace places probes instead of uretprobes), and whether
// an instruction can be probed at all.

// insn is one decoded instruction.
type insn struct {
	x86asm.Inst
	Addr  uint64
	endbr bool // endbr64/endbr32, which x86asm does not know
}

// next is the address after the instruction.
func (i *insn) next() uint64 { return i.Addr + uint64(i.Len) }

// decodeAt decodes the instruction at link-time address addr.
func (l *Library) decodeAt(addr uint64) (insn, error) {
	b, err := l.Bytes(addr, 15)
	if err != nil {
		return insn{}, err
	}
	return decodeBytes(b, addr)
}

func decodeBytes(b []byte, addr uint64) (insn, error) {
	if len(b) >= 4 && b[0] == 0xf3 && b[1] == 0x0f && b[2] == 0x1e && (b[3] == 0xfa || b[3] == 0xfb) {
		return insn{Inst: x86asm.Inst{Op: x86asm.NOP, Len: 4}, Addr: addr, endbr: true}, nil
	}
	in, err := x86asm.Decode(b, 64)
	if err != nil {
		return insn{}, fmt.Errorf("cannot decode the instruction at %#x (% x): %w", addr, b[:min(len(b), 8)], err)
	}
	if in.Op == 0 {
		return insn{}, fmt.Errorf("cannot decode the instruction at %#x (% x)", addr, b[:min(len(b), 8)])
	}
	return insn{Inst: in, Addr: addr}, nil
}

// String is the instruction in Intel syntax, for people.
func (i insn) String() string {
	if i.endbr {
		return "endbr64"
	}
	return strings.ToLower(x86asm.IntelSyntax(i.Inst, i.Addr, nil))
}

// hasPrefix reports whether the instruction carries legacy prefix p.
func (i *insn) hasPrefix(p x86asm.Prefix) bool {
	for _, q := range i.Prefix {
		if q == 0 {
			break
		}
		if q&0xff == p {
			return true
		}
	}
	return false
}

// CheckProbeable refuses attach points whose instruction the kernel cannot
// single-step out of line (arch/x86/kernel/uprobes.c): a uprobe there is
// accepted and then never fires, which would silently lose events. The
// instruction is decoded; a lock prefix, an ES/CS/SS/DS segment prefix,
// int3/int1/hlt, a VEX/EVEX encoding (refused for safety) and anything that
// does not decode are refused.
func CheckProbeable(lib *Library, addr uint64) error {
	in, err := lib.decodeAt(addr)
	if err != nil {
		return err
	}
	return probeable(&in)
}

func probeable(in *insn) error {
	if in.endbr {
		return nil
	}
	what := fmt.Sprintf("its instruction %q", in.String())
	switch {
	case in.hasPrefix(x86asm.PrefixLOCK):
		return fmt.Errorf("%s has a lock prefix, which uprobes cannot single-step", what)
	case in.hasPrefix(x86asm.PrefixES), in.hasPrefix(x86asm.PrefixCS), in.hasPrefix(x86asm.PrefixSS), in.hasPrefix(x86asm.PrefixDS):
		return fmt.Errorf("%s has a segment prefix uprobes refuse", what)
	case in.Op == x86asm.INT && in.Len == 1, in.Op == x86asm.HLT, in.Op == x86asm.ICEBP:
		return fmt.Errorf("%s cannot be probed", what)
	}
	for _, q := range in.Prefix {
		if q == 0 {
			break
		}
		switch q & 0xff {
		case 0xc4, 0xc5, 0x62, 0x8f:
			return fmt.Errorf("%s is VEX/EVEX-encoded; tttrace does not probe those", what)
		}
	}
	return nil
}

// codeIndex is what tttrace knows of a library's code: executable
// sections, PLT stubs, GOT slots and function ranges. Built once per
// library, on demand.
type codeIndex struct {
	lib  *Library
	exec []execSection // executable sections other than the PLT's
	plt  []execSection // .plt, .plt.sec, .plt.got
	fdes []addrRange
	// slots: GOT slot address -> name of the symbol a dynamic relocation
	// binds there (JUMP_SLOT, GLOB_DAT, 64).
	slots map[uint64]string
	// relocs: address -> relocation, for reading pointers the dynamic
	// linker fills in (vtables).
	relocs map[uint64]rela
	// stubs: PLT stub address -> symbol it jumps to.
	stubs map[uint64]string
}

type execSection struct {
	name string
	addr uint64
	off  uint64 // file offset
	size uint64
	data []byte // the bytes, read for PLT sections only (the rest is swept)
}

type rela struct {
	typ    uint32
	sym    string // "" for RELATIVE
	addend int64
}

const (
	rX8664_64       = 1
	rX8664GlobDat   = 6
	rX8664JumpSlot  = 7
	rX8664Relative  = 8
	rX8664IRelative = 37
)

// code returns the library's code index, building it the first time.
func (l *Library) code() (*codeIndex, error) {
	if l.codeIdx != nil || l.codeErr != nil {
		return l.codeIdx, l.codeErr
	}
	l.codeIdx, l.codeErr = l.buildCode()
	return l.codeIdx, l.codeErr
}

func (l *Library) buildCode() (*codeIndex, error) {
	c := &codeIndex{lib: l, slots: map[uint64]string{}, relocs: map[uint64]rela{}, stubs: map[uint64]string{}}
	for _, s := range l.file.Sections {
		if s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_EXECINSTR == 0 || s.Size == 0 {
			continue
		}
		off, size, _, err := l.ef.Table(s)
		if err != nil {
			return nil, err
		}
		es := execSection{name: s.Name, addr: s.Addr, off: off, size: size}
		if strings.HasPrefix(s.Name, ".plt") {
			if es.data, err = l.readAt(off, int(size)); err != nil {
				return nil, err
			}
			c.plt = append(c.plt, es)
		} else {
			c.exec = append(c.exec, es)
		}
	}
	var err error
	if c.fdes, err = l.fdeRanges(); err != nil {
		return nil, err
	}
	if err := c.readRelocs(); err != nil {
		return nil, err
	}
	for i := range c.plt {
		c.scanPLT(c.plt[i])
		c.plt[i].data = nil
	}
	return c, nil
}

// readRelocs reads the dynamic relocations (.rela.dyn, .rela.plt).
func (c *codeIndex) readRelocs() error {
	l := c.lib
	dynsym := l.file.Section(".dynsym")
	dynstr := l.file.Section(".dynstr")
	var t symTable
	if dynsym != nil && dynstr != nil {
		var err error
		if t, _, err = l.tableSections(".dynsym", ".dynstr"); err != nil {
			return err
		}
	}
	// Names are read with pread (readAt): the symbols relocations name are
	// scattered over .dynsym and .dynstr. One name per symbol index, made
	// once: relocations that name the same symbol share it.
	names := map[uint64]string{}
	name := func(idx uint64) (string, error) {
		if n, ok := names[idx]; ok {
			return n, nil
		}
		off := idx * sym64Size
		if idx == 0 || idx > t.symSize/sym64Size || off+sym64Size > t.symSize {
			return "", nil
		}
		ent, err := l.readAt(t.symOff+off, sym64Size)
		if err != nil {
			return "", err
		}
		n := binary.LittleEndian.Uint32(ent)
		if uint64(n) >= t.strSize {
			return "", nil
		}
		s, err := l.name(&t, n)
		if err != nil {
			return "", err
		}
		names[idx] = s
		return s, nil
	}
	for _, s := range l.file.Sections {
		if s.Type != elf.SHT_RELA || s.Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		off, size, ok, err := l.ef.Table(s)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		var nameErr error
		err = l.sweep(off, size, 24, 0, func(_ int, d []byte) {
			for off := 0; off+24 <= len(d) && nameErr == nil; off += 24 {
				at := binary.LittleEndian.Uint64(d[off:])
				info := binary.LittleEndian.Uint64(d[off+8:])
				r := rela{typ: uint32(info), addend: int64(binary.LittleEndian.Uint64(d[off+16:]))}
				switch r.typ {
				case rX8664_64, rX8664GlobDat, rX8664JumpSlot:
					if r.sym, nameErr = name(info >> 32); nameErr != nil {
						return
					}
					c.slots[at] = r.sym
				case rX8664Relative, rX8664IRelative:
				default:
					continue
				}
				c.relocs[at] = r
			}
		})
		if err = errors.Join(err, nameErr); err != nil {
			return err
		}
	}
	return nil
}

// scanPLT records the symbol each PLT stub jumps to. A stub is
// "[endbr64] [bnd] jmp *SLOT(%rip)": calls target its first instruction.
func (c *codeIndex) scanPLT(p execSection) {
	for off := 0; off < len(p.data); {
		in, err := decodeBytes(p.data[off:min(len(p.data), off+15)], p.addr+uint64(off))
		if err != nil {
			off++
			continue
		}
		if slot, ok := ripTarget(&in); ok && in.Op == x86asm.JMP {
			if name := c.slots[slot]; name != "" {
				start := in.Addr
				if off >= 4 && bytes.Equal(p.data[off-4:off], []byte{0xf3, 0x0f, 0x1e, 0xfa}) {
					start -= 4
				}
				c.stubs[start] = name
			}
		}
		off += in.Len
	}
}

// ripTarget returns the address a [rip+disp] memory operand names.
func ripTarget(in *insn) (uint64, bool) {
	for _, a := range in.Args {
		if m, ok := a.(x86asm.Mem); ok && m.Base == x86asm.RIP && m.Index == 0 {
			return uint64(int64(in.next()) + m.Disp), true
		}
	}
	return 0, false
}

// branch classifies a control transfer.
type branch struct {
	at     uint64
	kind   branchKind
	target uint64 // direct target; 0 for an indirect transfer
	sym    string // the symbol reached through a PLT stub or a GOT slot
}

type branchKind uint8

const (
	brNone branchKind = iota
	brCall
	brJump     // unconditional jmp
	brCondJump // jcc, loop, jrcxz
	brRet
)

var condJumps = map[x86asm.Op]bool{
	x86asm.JA: true, x86asm.JAE: true, x86asm.JB: true, x86asm.JBE: true, x86asm.JCXZ: true,
	x86asm.JE: true, x86asm.JECXZ: true, x86asm.JG: true, x86asm.JGE: true, x86asm.JL: true,
	x86asm.JLE: true, x86asm.JNE: true, x86asm.JNO: true, x86asm.JNP: true, x86asm.JNS: true,
	x86asm.JO: true, x86asm.JP: true, x86asm.JRCXZ: true, x86asm.JS: true,
	x86asm.LOOP: true, x86asm.LOOPE: true, x86asm.LOOPNE: true,
}

// classify says what control transfer in is, resolving PLT stubs and GOT
// slots to symbol names.
func (c *codeIndex) classify(in *insn) branch {
	b := branch{at: in.Addr}
	switch {
	case in.Op == x86asm.RET:
		b.kind = brRet
		return b
	case in.Op == x86asm.CALL:
		b.kind = brCall
	case in.Op == x86asm.JMP:
		b.kind = brJump
	case condJumps[in.Op]:
		b.kind = brCondJump
	default:
		return b
	}
	switch a := in.Args[0].(type) {
	case x86asm.Rel:
		b.target = uint64(int64(in.next()) + int64(a))
		b.sym = c.stubs[b.target]
	case x86asm.Mem:
		if slot, ok := ripTarget(in); ok {
			b.sym = c.slots[slot]
		}
	}
	return b
}

// fdeAt returns the FDE range that contains addr.
func (c *codeIndex) fdeAt(addr uint64) (addrRange, bool) {
	i := sort.Search(len(c.fdes), func(i int) bool { return c.fdes[i].Start > addr })
	if i == 0 {
		return addrRange{}, false
	}
	r := c.fdes[i-1]
	return r, addr < r.End
}

// fdeStarting returns the FDE range that starts at addr.
func (c *codeIndex) fdeStarting(addr uint64) (addrRange, bool) {
	r, ok := c.fdeAt(addr)
	return r, ok && r.Start == addr
}

// decodeRange decodes [r.Start, r.End) linearly and calls fn for each
// instruction; fn returns false to stop.
func (c *codeIndex) decodeRange(r addrRange, fn func(*insn) bool) error {
	b, err := c.lib.Bytes(r.Start, int(r.End-r.Start))
	if err != nil {
		return err
	}
	for off := 0; off < len(b); {
		in, err := decodeBytes(b[off:min(len(b), off+15)], r.Start+uint64(off))
		if err != nil {
			return err
		}
		if !fn(&in) {
			return nil
		}
		off += in.Len
	}
	return nil
}

// CallSite is one instruction that transfers control to a function.
type CallSite struct {
	At   uint64 // address of the call or jump
	Tail bool   // a jump (tail call), not a call
	Via  string // "direct", "plt" or "got"
}

// Opcode bytes callSites looks at: e8/e9 (call/jmp rel32), eb and 70-7f
// (jmp/jcc rel8), 0f 80-8f (jcc rel32), ff 15/25 (call/jmp [rip+disp32]).
const (
	brRel32 = iota + 1
	brRel8
	br0F
	brFF
)

var branchOps = func() (t [256]uint8) {
	t[0xe8], t[0xe9], t[0xeb], t[0x0f], t[0xff] = brRel32, brRel32, brRel8, br0F, brFF
	for op := 0x70; op <= 0x7f; op++ {
		t[op] = brRel8
	}
	return t
}()

// callSites finds every call or jump in the library's code to each of
// fns (by address, through its PLT stubs, or through a GOT slot bound to
// its name). Candidates are found by scanning the bytes for branch opcodes
// whose target is one of the functions, then confirmed by decoding the
// enclosing function (from its FDE) up to the candidate: only a real
// instruction boundary counts. A candidate outside any FDE cannot be
// confirmed and is reported in unconfirmed.
func (c *codeIndex) callSites(fns []Symbol) (sites map[string][]CallSite, unconfirmed int, err error) {
	byAddr, bySlot := c.branchTargets(fns)
	sites = map[string][]CallSite{}
	for _, cd := range c.branchCandidates(byAddr, bySlot) {
		got, ok := c.confirmBranch(cd, byAddr)
		if !ok {
			unconfirmed++
			continue
		}
		if got != nil {
			sites[cd.name] = append(sites[cd.name], *got)
		}
	}
	return sites, unconfirmed, nil
}

// branchTargets returns where a branch to one of fns can land (its entry
// and its PLT stubs) and the GOT slots bound to its name.
func (c *codeIndex) branchTargets(fns []Symbol) (byAddr, bySlot map[uint64]string) {
	byAddr, bySlot = map[uint64]string{}, map[uint64]string{}
	byName := map[string]bool{}
	for _, f := range fns {
		byAddr[f.Value] = f.Name
		byName[f.Name] = true
	}
	for a, n := range c.stubs {
		if byName[n] {
			byAddr[a] = n
		}
	}
	for a, n := range c.slots {
		if byName[n] {
			bySlot[a] = n
		}
	}
	return byAddr, bySlot
}

// branchCand is a byte pattern that would be a branch to name.
type branchCand struct {
	at   uint64
	name string
}

// branchCandidates sweeps the executable bytes for branch opcodes
// (branchOps) whose target is in byAddr, or whose [rip+disp] operand
// (call/jmp through the GOT) is a slot in bySlot. Not yet confirmed as
// instructions.
func (c *codeIndex) branchCandidates(byAddr, bySlot map[uint64]string) []branchCand {
	var cands []branchCand
	// Most bytes that look like a branch do not reach a wanted function:
	// a bitmap of the low bits of the targets rules them out before the map.
	var filter [1 << 16 / 64]uint64
	for a := range byAddr {
		filter[a&0xffff/64] |= 1 << (a & 63)
	}
	// All the code is swept, a chunk at a time (symscan.go's sweep), so
	// that none of it stays resident. A branch is at most 6 bytes.
	for _, s := range c.exec {
		// A read error leaves the rest of the section unswept: fewer
		// candidates, and a plan that then finds too few call sites.
		_ = c.lib.sweep(s.off, s.size, 1, 6, func(base int, d []byte) {
			for i := 0; i < min(len(d), chunkSize); i++ {
				var t uint64
				switch branchOps[d[i]] {
				case 0:
					continue
				case brRel32:
					if i+5 > len(d) {
						continue
					}
					t = s.addr + uint64(base+i) + 5 + uint64(int64(int32(binary.LittleEndian.Uint32(d[i+1:]))))
				case brRel8:
					if i+2 > len(d) {
						continue
					}
					t = s.addr + uint64(base+i) + 2 + uint64(int64(int8(d[i+1])))
				case br0F:
					if i+6 > len(d) || d[i+1] < 0x80 || d[i+1] > 0x8f {
						continue
					}
					t = s.addr + uint64(base+i) + 6 + uint64(int64(int32(binary.LittleEndian.Uint32(d[i+2:]))))
				case brFF:
					if i+6 > len(d) || (d[i+1] != 0x15 && d[i+1] != 0x25) {
						continue
					}
					at := s.addr + uint64(base+i)
					slot := at + 6 + uint64(int64(int32(binary.LittleEndian.Uint32(d[i+2:]))))
					if n, ok := bySlot[slot]; ok {
						cands = append(cands, branchCand{at, n})
					}
					continue
				}
				if filter[t&0xffff/64]&(1<<(t&63)) == 0 {
					continue
				}
				if n, ok := byAddr[t]; ok {
					cands = append(cands, branchCand{s.addr + uint64(base+i), n})
				}
			}
		})
	}
	return cands
}

// confirmBranch decodes the function enclosing candidate cd (from its FDE)
// up to it: only a real instruction boundary counts. ok is false when that
// cannot be done (no FDE, undecodable); the site is nil when cd is not a
// branch to its function.
func (c *codeIndex) confirmBranch(cd branchCand, byAddr map[uint64]string) (site *CallSite, ok bool) {
	fr, ok := c.fdeAt(cd.at)
	if !ok {
		return nil, false
	}
	err := c.decodeRange(fr, func(in *insn) bool {
		if in.next() <= cd.at {
			return true
		}
		// The branch opcode may follow prefixes (bnd, notrack, REX).
		if in.Addr <= cd.at && cd.at-in.Addr < 4 {
			b := c.classify(in)
			if (b.kind == brCall || b.kind == brJump || b.kind == brCondJump) &&
				(b.sym == cd.name || b.target != 0 && byAddr[b.target] == cd.name) {
				via := "direct"
				switch {
				case b.target == 0:
					via = "got"
				case b.sym != "":
					via = "plt"
				}
				site = &CallSite{At: in.Addr, Tail: b.kind != brCall, Via: via}
			}
		}
		return false
	})
	return site, err == nil
}

// funcCode is the analysed code of one function.
type funcCode struct {
	Name  string
	Entry uint64
	Parts []addrRange // the body, then split-off parts (f.cold) reached by jumps
	// Exits are the instructions through which the function can return to
	// its caller: every ret, and every jump that leaves the function (tail
	// calls, and jumps whose target tttrace cannot place).
	Exits []Exit
	// Branches are the calls and jumps of the function that leave it.
	Branches []branch
}

// Exit is one instruction where the function may return.
type Exit struct {
	Addr uint64
	Insn string
	Why  string // "ret", "tail call to X", "jump out of the function"
}

// calls reports whether the function contains a call or jump to one of
// the given functions (by address or name).
func (f *funcCode) calls(targets ...Symbol) bool {
	for _, b := range f.Branches {
		for _, t := range targets {
			if t.Name != "" && b.sym == t.Name || t.Value != 0 && b.target == t.Value {
				return true
			}
		}
	}
	return false
}

// analyze decodes function fn (its body from the symbol size or its FDE,
// plus any split-off part it jumps to) and finds its exits and outgoing
// branches.
func (c *codeIndex) analyze(fn Symbol) (*funcCode, error) {
	body := addrRange{fn.Value, fn.Value + fn.Size}
	if fn.Size == 0 {
		r, ok := c.fdeStarting(fn.Value)
		if !ok {
			return nil, fmt.Errorf("%s: no size and no unwind entry: its extent is unknown", fn.Name)
		}
		body = r
	}
	f := &funcCode{Name: fn.Name, Entry: fn.Value, Parts: []addrRange{body}}
	inside := func(a uint64) bool {
		for _, p := range f.Parts {
			if a >= p.Start && a < p.End {
				return true
			}
		}
		return false
	}
	// Targets outside the body that start a function of their own (a
	// symbol without a clone suffix) are tail calls; others are parts of
	// this function (GCC's f.cold) when an FDE starts there.
	var outside []uint64
	for i := 0; i < len(f.Parts); i++ {
		var pending []branch
		err := c.decodeRange(f.Parts[i], func(in *insn) bool {
			b := c.classify(in)
			switch b.kind {
			case brRet:
				f.Exits = append(f.Exits, Exit{Addr: in.Addr, Insn: in.String(), Why: "ret"})
			case brCall:
				if b.target == 0 || !inside(b.target) {
					f.Branches = append(f.Branches, b)
				}
			case brJump, brCondJump:
				switch {
				case b.target != 0 && inside(b.target):
				case b.target == 0 && b.sym == "":
					// jmp *reg / *mem: a switch or a tail call through a
					// pointer; probed as an exit (the stack check in BPF
					// tells the two apart).
					f.Exits = append(f.Exits, Exit{Addr: in.Addr, Insn: in.String(), Why: "indirect jump"})
				default:
					pending = append(pending, b)
					f.Branches = append(f.Branches, b)
					if b.target != 0 && b.sym == "" {
						outside = append(outside, b.target)
					}
				}
			}
			return true
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", fn.Name, err)
		}
		if len(outside) > 0 {
			names, err := c.lib.symbolsAt(outside)
			if err != nil {
				return nil, err
			}
			for _, t := range outside {
				if inside(t) {
					continue
				}
				if isFunctionStart(names[t]) {
					continue
				}
				r, ok := c.fdeAt(t)
				switch {
				case !ok:
					return nil, fmt.Errorf("%s: a jump to %#x, which is in no function tttrace can place", fn.Name, t)
				case r.Start == t:
					f.Parts = append(f.Parts, r) // a split-off part: decoded too
				}
				// Otherwise a jump into another function's middle: an exit.
			}
			outside = outside[:0]
		}
		for _, b := range pending {
			if b.target != 0 && inside(b.target) {
				continue // a jump into a part found later
			}
			why := "jump out of the function"
			if b.sym != "" {
				why = "tail call to " + b.sym
			} else if names := c.lib.symbolsAtCached(b.target); isFunctionStart(names) {
				why = "tail call to " + names[0].Name
			}
			in, err := c.lib.decodeAt(b.at)
			if err != nil {
				return nil, err
			}
			f.Exits = append(f.Exits, Exit{Addr: b.at, Insn: in.String(), Why: why})
		}
	}
	sort.Slice(f.Exits, func(i, j int) bool { return f.Exits[i].Addr < f.Exits[j].Addr })
	return f, nil
}

// isFunctionStart reports whether symbols at an address name a function
// entry of its own, not a split-off part (f.cold, f.part.N).
func isFunctionStart(syms []Symbol) bool {
	for _, s := range syms {
		if s.Type == elf.STT_FUNC && !strings.Contains(s.Name, ".cold") && !strings.Contains(s.Name, ".part.") {
			return true
		}
	}
	return false
}

// symbolsAt returns the defined symbols (of both tables) whose value is one
// of addrs. One pass over the symbol tables; results are cached.
func (l *Library) symbolsAt(addrs []uint64) (map[uint64][]Symbol, error) {
	if l.symAt == nil {
		l.symAt = map[uint64][]Symbol{}
	}
	want := map[uint64]bool{}
	for _, a := range addrs {
		if _, ok := l.symAt[a]; !ok {
			want[a] = true
		}
	}
	if len(want) > 0 {
		vs := make(valueSet, 0, len(want))
		for a := range want {
			l.symAt[a] = nil
			vs = append(vs, a)
		}
		slices.Sort(vs)
		lo, hi := vs[0], vs[len(vs)-1]
		for _, tab := range []struct {
			sym, str string
			dyn      bool
		}{{".dynsym", ".dynstr", true}, {".symtab", ".strtab", false}} {
			if l.file.Section(tab.str) == nil {
				continue
			}
			t, ok, err := l.tableSections(tab.sym, tab.str)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
			var hits [][sym64Size]byte
			err = l.eachSym(&t, func(ent []byte) {
				v := binary.LittleEndian.Uint64(ent[8:])
				if v < lo || v > hi || !vs.has(v) || binary.LittleEndian.Uint16(ent[6:]) == uint16(elf.SHN_UNDEF) {
					return
				}
				if uint64(binary.LittleEndian.Uint32(ent[0:])) < t.strSize {
					hits = append(hits, [sym64Size]byte(ent))
				}
			})
			if err != nil {
				return nil, err
			}
			for _, ent := range hits {
				name, err := l.name(&t, binary.LittleEndian.Uint32(ent[0:]))
				if err != nil {
					return nil, err
				}
				v := binary.LittleEndian.Uint64(ent[8:])
				l.symAt[v] = append(l.symAt[v], symbolOf(ent[:], name, tab.dyn))
			}
		}
	}
	out := map[uint64][]Symbol{}
	for _, a := range addrs {
		out[a] = l.symAt[a]
	}
	return out, nil
}

// symbolsAtCached returns what symbolsAt found for addr before.
func (l *Library) symbolsAtCached(addr uint64) []Symbol { return l.symAt[addr] }

// readPointer returns the 8-byte pointer stored at link-time address at
// once the dynamic linker has run: from its relocation if it has one
// (RELATIVE: the addend; a symbol defined here: its value + addend), else
// from the file.
func (c *codeIndex) readPointer(at uint64, resolve func(string) (uint64, bool)) (uint64, error) {
	if r, ok := c.relocs[at]; ok {
		switch r.typ {
		case rX8664Relative:
			return uint64(r.addend), nil
		case rX8664_64, rX8664GlobDat:
			v, ok := resolve(r.sym)
			if !ok {
				return 0, fmt.Errorf("pointer at %#x is bound to %s, not defined in the library", at, r.sym)
			}
			return v + uint64(r.addend), nil
		}
		return 0, fmt.Errorf("pointer at %#x has relocation type %d", at, r.typ)
	}
	for _, p := range c.lib.file.Progs {
		if p.Type == elf.PT_LOAD && at >= p.Vaddr && at+8 <= p.Vaddr+p.Filesz {
			b, err := c.lib.readAt(p.Off+at-p.Vaddr, 8)
			if err != nil {
				return 0, err
			}
			if len(b) < 8 {
				return 0, errors.New("pointer outside the file")
			}
			return binary.LittleEndian.Uint64(b), nil
		}
	}
	return 0, errors.New("pointer outside the file's loaded data")
}
