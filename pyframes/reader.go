package pyframes

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/tttrace/tttrace/elfx"
	"github.com/tttrace/tttrace/events"
)

// Flags of a captured stack (enum py_stack_flags of bpf/wire.h).
const (
	FlagTruncated   = events.PyTruncated  // more frames than were kept: the outermost were cut
	FlagNoProc      = events.PyNoProc     // the process had no py_procs entry
	FlagNoThread    = events.PyNoThread   // the thread has no Python thread state
	FlagReadError   = events.PyReadError  // a read failed: the stack stops there
	FlagThreadsCut  = events.PyThreadsCut // too many thread states to look at them all
	maxStringChars  = 4096
	maxLineTable    = 1 << 20
	maxCodeInfoKeep = 1 << 16 // code objects cached per process
)

// RawFrame is one captured frame: a PyCodeObject*, the frame's raw
// instruction field (f_lasti for 3.10, else an instruction pointer) and the
// code object's identity at event time.
type RawFrame struct {
	Code, Instr, CodeID uint64
}

// RawStack is a decoded struct py_stack.
type RawStack struct {
	TState uint64
	Flags  uint32
	Frames []RawFrame // innermost first
}

// MaxFrames is PY_MAX_FRAMES: the frames a record holds.
var MaxFrames = len(events.PyStack{}.Frames)

// NewRawStack copies the valid frames of a captured stack (a record
// events.DecodePyStack checked).
func NewRawStack(w *events.PyStack) RawStack {
	n := min(int(w.Nframes), len(w.Frames))
	s := RawStack{TState: w.Tstate, Flags: w.Flags, Frames: make([]RawFrame, n)}
	for i, f := range w.Frames[:n] {
		s.Frames[i] = RawFrame{f.Code, f.Instr, f.CodeID}
	}
	return s
}

// AddCode takes what a code object of this process said at event time (the
// struct py_code of a record, events.DecodePyCode). Objects of the wrong
// type, failed reads and cut line tables are checked here: such a record
// is not kept, and the code object is then read from the process if it
// still runs.
func (p *Process) AddCode(c *events.PyCode) (err error) {
	defer elfx.Recover(&err, "py_code record") // from the traced process
	p.mu.Lock()
	if p.latest == nil || len(p.latest) >= maxCodeInfoKeep {
		p.latest = map[uint64]uint64{}
	}
	p.latest[c.Code] = c.CodeID
	p.mu.Unlock()
	if c.Flags&events.PyCodeReadError != 0 {
		return fmt.Errorf("code object %#x: a read failed at event time", c.Code)
	}
	in := p.Interp
	unitsType := in.CodeType
	if in.Offsets.CodeCode >= 0 {
		unitsType = in.BytesType
	}
	for _, t := range []struct {
		what      string
		got, want uint64
	}{{"code object", c.CodeType, in.CodeType}, {"co_filename", c.FilenameType, in.UnicodeType},
		{"co_qualname", c.NameType, in.UnicodeType}, {"co_linetable", c.LinetableType, in.BytesType},
		{"bytecode", c.UnitsType, unitsType}} {
		if t.got != p.Bias+t.want {
			return fmt.Errorf("code object %#x: %s has type %#x, want %#x", c.Code, t.what, t.got, p.Bias+t.want)
		}
	}
	if c.LinetableLen != c.LinetableSize || int(c.LinetableLen) > len(c.Linetable) {
		return fmt.Errorf("code object %#x: line table of %d bytes, %d captured", c.Code, c.LinetableSize, c.LinetableLen)
	}
	file, err := decodeStr(c.Filename[:], c.FilenameLen, c.FilenameChars, c.FilenameState)
	if err != nil {
		return fmt.Errorf("code object %#x: co_filename: %w", c.Code, err)
	}
	name, err := decodeStr(c.Name[:], c.NameLen, c.NameChars, c.NameState)
	if err != nil {
		return fmt.Errorf("code object %#x: co_qualname: %w", c.Code, err)
	}
	ci := &codeInfo{name: name, file: file, firstLine: int(c.Firstlineno), units: int64(c.Units),
		table: append([]byte(nil), c.Linetable[:c.LinetableLen]...), lines: map[uint64]int{}}
	if in.Offsets.CodeAdaptive >= 0 {
		ci.start = c.Code + uint64(in.Offsets.CodeAdaptive)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keep(codeKey{c.Code, c.CodeID}, ci)
	return nil
}

// Described says whether every frame's code object is named by an
// incarnation (Process.CodeGen) whose record AddCode kept, the last record
// of its address: the stack symbolizes from what was captured alone, names
// each code object as later captures of it do (a code object first seen
// in several frames of one capture gets an incarnation in each, of which
// the last sent stays, bpf/python.h), and a later capture of the same chain
// may be named by a token (bpf/pyknown.h) without any record.
func (p *Process) Described(frames []RawFrame) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range frames {
		if f.CodeID&codeIncarnation == 0 || p.latest[f.Code] != f.CodeID {
			return false
		}
		if ci := p.codes[codeKey{f.Code, f.CodeID}]; ci == nil || ci.err != nil {
			return false
		}
	}
	return true
}

func (p *Process) keep(k codeKey, ci *codeInfo) {
	if len(p.codes) >= maxCodeInfoKeep {
		clear(p.codes)
	}
	p.codes[k] = ci
}

// decodeStr decodes a str's data bytes as BPF copied them (the end of the
// string when it did not fit) given its state word.
func decodeStr(b []byte, n, chars, state uint32) (string, error) {
	kind, compact, ascii := state>>2&7, state>>5&1 == 1, state>>6&1 == 1
	if !compact || (kind != 1 && kind != 2 && kind != 4) {
		return "", fmt.Errorf("not a compact string (state %#x)", state)
	}
	if int(n) > len(b) || n%kind != 0 || n > chars*kind {
		return "", fmt.Errorf("%d bytes of a %d-character string of width %d", n, chars, kind)
	}
	s := strData(b[:n], kind, ascii)
	if n < chars*kind {
		s = "…" + s
	}
	return s, nil
}

// strData decodes str data of the given width (1: Latin-1 or ASCII, 2:
// UCS-2, 4: UCS-4).
func strData(b []byte, kind uint32, ascii bool) string {
	switch kind {
	case 1:
		if ascii {
			return string(b)
		}
		r := make([]rune, len(b))
		for i, c := range b {
			r[i] = rune(c)
		}
		return string(r)
	case 2:
		u := make([]uint16, len(b)/2)
		for i := range u {
			u[i] = binary.LittleEndian.Uint16(b[2*i:])
		}
		return string(utf16.Decode(u))
	default:
		var sb bytes.Buffer
		for i := 0; i+4 <= len(b); i += 4 {
			r := rune(binary.LittleEndian.Uint32(b[i:]))
			if !utf8.ValidRune(r) {
				r = utf8.RuneError
			}
			sb.WriteRune(r)
		}
		return sb.String()
	}
}

// codeID is the identity python.h's py_code_id computes from the 32 bytes
// at codeIDStart.
func codeID(w []byte) uint64 {
	rotl := func(x uint64, k uint) uint64 { return x<<k | x>>(64-k) }
	return (binary.LittleEndian.Uint64(w) ^ rotl(binary.LittleEndian.Uint64(w[8:]), 13) ^
		rotl(binary.LittleEndian.Uint64(w[16:]), 29) ^ rotl(binary.LittleEndian.Uint64(w[24:]), 43)) &^ codeIncarnation
}

// codeIncarnation is PY_CODE_INCARNATION of bpf/python.h: an identity with
// this bit is not a hash of the code object but the number BPF gave it
// where code objects' deallocation is probed (Process.CodeGen). Only the
// code record sent under it describes it: the object now at its address
// may be another.
const codeIncarnation = 1 << 63

// Frame is one Python frame.
type Frame struct {
	Function string // co_qualname (3.11+), co_name (3.10)
	File     string // co_filename
	Line     int    // NoLine when the instruction has none
}

// Stack is a symbolized stack: innermost frame first.
type Stack struct {
	Frames []Frame
	// Truncated: frames were cut, at capture (too deep) or here (a frame
	// that could not be read ends the stack).
	Truncated bool
	// Err says why the stack is partial or empty, nil when complete.
	Err error
}

// codeInfo is what a code object says, read once.
type codeInfo struct {
	name, file string
	firstLine  int
	table      []byte
	start      uint64 // 3.11+: address of the first code unit
	units      int64  // bytecode length in code units
	lines      map[uint64]int
	err        error
}

// Symbolize turns a captured stack into lines, reading the code objects
// from the process's memory (once per code object). A frame whose code
// object or instruction does not check out ends the stack there.
func (p *Process) Symbolize(raw RawStack) (s Stack) {
	defer func() {
		// Code objects come from the traced process's memory: a panic on
		// one ends this stack, not the tracer (elfx.Recover's rule).
		if r := recover(); r != nil {
			s = Stack{Truncated: true, Err: fmt.Errorf("Python stack: malformed input (internal error: %v)", r)}
		}
	}()
	switch {
	case raw.Flags&FlagNoProc != 0:
		s.Err = errors.New("the process was not registered for Python stacks")
	case raw.Flags&FlagNoThread != 0:
		s.Err = errors.New("the thread has no Python thread state")
	case raw.Flags&FlagThreadsCut != 0:
		s.Err = errors.New("too many Python threads to find this one")
	case raw.Flags&FlagReadError != 0:
		s.Err = errors.New("a read failed in the capture: the outer frames are missing")
		s.Truncated = true
	}
	if raw.Flags&FlagTruncated != 0 {
		s.Truncated = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, rf := range raw.Frames {
		f, err := p.frame(rf)
		if err != nil {
			s.Err = fmt.Errorf("frame %d: %w", i, err)
			s.Truncated = true
			break
		}
		s.Frames = append(s.Frames, f)
	}
	return s
}

func (p *Process) frame(rf RawFrame) (Frame, error) {
	k := codeKey{rf.Code, rf.CodeID}
	ci := p.codes[k]
	if ci == nil {
		// No record from event time (lost, or cut): read the process,
		// if it still runs and the code object is still the same one.
		ci = p.readCode(rf.Code, rf.CodeID)
		p.keep(k, ci)
	}
	if ci.err != nil {
		return Frame{}, ci.err
	}
	f := Frame{Function: ci.name, File: ci.file}
	if line, ok := ci.lines[rf.Instr]; ok {
		f.Line = line
		return f, nil
	}
	o := &p.Interp.Offsets
	var addr int64
	if o.InstrSize == 4 {
		lasti := int64(int32(uint32(rf.Instr)))
		if lasti < 0 || lasti >= ci.units {
			return Frame{}, fmt.Errorf("f_lasti %d outside the %d code units of %s", lasti, ci.units, ci.name)
		}
		addr = lasti * 2
	} else {
		if rf.Instr < ci.start || rf.Instr >= ci.start+uint64(ci.units)*2 || (rf.Instr-ci.start)%2 != 0 {
			return Frame{}, fmt.Errorf("instruction %#x outside the code of %s", rf.Instr, ci.name)
		}
		addr = int64(rf.Instr - ci.start)
	}
	if p.Interp.Minor == 10 {
		f.Line = line310(ci.table, ci.firstLine, int(addr))
	} else {
		f.Line = line311(ci.table, ci.firstLine, int(addr))
	}
	ci.lines[rf.Instr] = f.Line
	return f, nil
}

// readCode reads a code object, checking it and every object it names
// are of the expected types.
func (p *Process) readCode(addr, id uint64) *codeInfo {
	ci := &codeInfo{lines: map[uint64]int{}}
	o := &p.Interp.Offsets
	if id&codeIncarnation != 0 {
		ci.err = fmt.Errorf("code object %#x: its record was lost, and what is at its address now may be another", addr)
		return ci
	}
	hdr, err := p.read(addr, int(max(maxOffset(o), codeIDStart(o)+24)+8))
	if err != nil {
		ci.err = fmt.Errorf("code object %#x: %w", addr, err)
		return ci
	}
	if got := codeID(hdr[codeIDStart(o):]); got != id {
		ci.err = fmt.Errorf("code object %#x is not the one of the event (identity %#x, was %#x)", addr, got, id)
		return ci
	}
	u64 := func(off int64) uint64 { return binary.LittleEndian.Uint64(hdr[off:]) }
	if typ := u64(o.ObType); typ != p.Bias+p.Interp.CodeType {
		ci.err = fmt.Errorf("%#x is not a code object (type %#x)", addr, typ)
		return ci
	}
	ci.firstLine = int(int32(binary.LittleEndian.Uint32(hdr[o.CodeFirstLine:])))
	if ci.file, err = p.readStr(u64(o.CodeFilename)); err != nil {
		ci.err = fmt.Errorf("co_filename: %w", err)
		return ci
	}
	nameOff := o.CodeName
	if o.CodeQualname >= 0 {
		nameOff = o.CodeQualname
	}
	if ci.name, err = p.readStr(u64(nameOff)); err != nil {
		ci.err = fmt.Errorf("co_qualname: %w", err)
		return ci
	}
	if ci.table, err = p.readBytes(u64(o.CodeLinetable), maxLineTable); err != nil {
		ci.err = fmt.Errorf("co_linetable: %w", err)
		return ci
	}
	if o.CodeAdaptive >= 0 {
		ci.start = addr + uint64(o.CodeAdaptive)
		ci.units = int64(u64(o.VarSize))
	} else {
		n, err := p.bytesLen(u64(o.CodeCode))
		if err != nil {
			ci.err = fmt.Errorf("co_code: %w", err)
			return ci
		}
		ci.units = n / 2
	}
	return ci
}

func maxOffset(o *Offsets) int64 {
	m := int64(0)
	for _, v := range []int64{o.ObType, o.VarSize, o.CodeFilename, o.CodeName, o.CodeQualname, o.CodeFirstLine, o.CodeLinetable, o.CodeCode} {
		m = max(m, v)
	}
	return m
}

func (p *Process) read(addr uint64, n int) ([]byte, error) {
	if p.mem == nil {
		return nil, errors.New("process memory closed")
	}
	if addr == 0 || addr >= 1<<47 {
		return nil, fmt.Errorf("bad address %#x", addr)
	}
	b := make([]byte, n)
	if _, err := p.mem.ReadAt(b, int64(addr)); err != nil {
		return nil, fmt.Errorf("read %d bytes at %#x: %w", n, addr, err)
	}
	return b, nil
}

// readStr reads a compact str object.
func (p *Process) readStr(addr uint64) (string, error) {
	o := &p.Interp.Offsets
	h, err := p.read(addr, int(o.StrCompactSz))
	if err != nil {
		return "", err
	}
	if typ := binary.LittleEndian.Uint64(h[o.ObType:]); typ != p.Bias+p.Interp.UnicodeType {
		return "", fmt.Errorf("%#x is not a str (type %#x)", addr, typ)
	}
	n := int64(binary.LittleEndian.Uint64(h[o.StrLength:]))
	state := binary.LittleEndian.Uint32(h[o.StrState:])
	kind, compact, ascii := int64(state>>2&7), state>>5&1 == 1, state>>6&1 == 1
	if !compact || (kind != 1 && kind != 2 && kind != 4) {
		return "", fmt.Errorf("str at %#x: not a compact string (state %#x)", addr, state)
	}
	if n < 0 || n > maxStringChars {
		return "", fmt.Errorf("str at %#x: length %d", addr, n)
	}
	data := o.StrCompactSz
	if ascii {
		data = o.StrASCIISize
	}
	b, err := p.read(addr+uint64(data), int(n*kind))
	if err != nil || n == 0 {
		return "", err
	}
	return strData(b, uint32(kind), ascii), nil
}

// bytesLen checks a bytes object and returns its size.
func (p *Process) bytesLen(addr uint64) (int64, error) {
	o := &p.Interp.Offsets
	h, err := p.read(addr, int(o.BytesData))
	if err != nil {
		return 0, err
	}
	if typ := binary.LittleEndian.Uint64(h[o.ObType:]); typ != p.Bias+p.Interp.BytesType {
		return 0, fmt.Errorf("%#x is not a bytes object (type %#x)", addr, typ)
	}
	n := int64(binary.LittleEndian.Uint64(h[o.VarSize:]))
	if n < 0 || n > 1<<30 {
		return 0, fmt.Errorf("bytes at %#x: size %d", addr, n)
	}
	return n, nil
}

// readBytes reads a bytes object's data, at most limit bytes.
func (p *Process) readBytes(addr uint64, limit int64) ([]byte, error) {
	n, err := p.bytesLen(addr)
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, fmt.Errorf("bytes at %#x: %d bytes, more than %d", addr, n, limit)
	}
	if n == 0 {
		return nil, nil
	}
	return p.read(addr+uint64(p.Interp.Offsets.BytesData), int(n))
}
