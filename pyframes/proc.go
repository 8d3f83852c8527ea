package pyframes

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/tttrace/tttrace/elfx"
	"github.com/tttrace/tttrace/procfs"
)

// ErrNoInterpreter is returned by ForProcess for a process that has no
// CPython interpreter mapped (yet).
var ErrNoInterpreter = errors.New("no CPython interpreter mapped")

// Process is one process running a supported CPython: what the BPF side
// needs (ProcValue) and the reader that turns captured stacks into lines.
type Process struct {
	Pid    int
	Interp *Interpreter
	// Bias is the interpreter file's load bias in the process.
	Bias uint64
	// CodeGen, when not 0, goes into the py_procs value (ProcValue): the
	// deallocation of the process's code objects is probed (CodeDealloc),
	// under this number, unique to this registration (bpf/python.h,
	// py_codes).
	CodeGen uint32
	// file opens the interpreter file this process maps (its
	// /proc/PID/map_files entry).
	file string

	mem   *procfs.Mem // its memory, within memBudget for its life
	mu    sync.Mutex
	codes map[codeKey]*codeInfo
	// latest: the identity of the last record AddCode had for each
	// address (Described).
	latest map[uint64]uint64
}

// What a process's memory may give over its life (procfs.Mem): code
// objects are read from it only when their record was missed (readCode),
// each in at most 8 reads (the object, its file name's and name's str
// header and data, its line table's bytes header and data, co_code's
// header) of at most maxLineTable bytes and two strings of maxStringChars
// characters: twice the code objects a process keeps (maxCodeInfoKeep)
// in reads, and hundreds of thousands of common ones (a few hundred
// bytes) or 256 of the longest in bytes. Past it, a frame whose code
// object is not known ends its stack with why.
const (
	memBudgetBytes = 256 << 20
	memBudgetReads = 8 * 2 * maxCodeInfoKeep
)

// codeKey names a code object: its address and its identity (a hash of
// the pointers it holds, computed by BPF at event time).
type codeKey struct{ code, id uint64 }

// codeIDStart is where the 32 bytes hashed as a code object's identity
// start: they end with the last of its file name, name and line table
// pointers, which all lie in them in 3.10-3.13 (Detect checks it), and
// hold nothing that changes while the code object lives (3.10's
// co_zombieframe follows co_linetable, outside).
func codeIDStart(o *Offsets) int64 {
	return max(o.CodeFilename, o.nameOffset(), o.CodeLinetable) + 8 - 32
}

// frameWindowSize is PY_FRAME_WINDOW of bpf/python.h.
const frameWindowSize = 128

// frameWindow is the 8-aligned start of the bytes of a frame that hold
// every field the walk reads, -1 when they span more than
// frameWindowSize bytes.
func frameWindow(o *Offsets) int64 {
	lo := min(o.FramePrevious, o.FrameCode, o.FrameInstr) &^ 7
	hi := max(o.FramePrevious+8, o.FrameCode+8, o.FrameInstr+int64(o.InstrSize))
	if o.FrameOwner >= 0 {
		lo = min(lo, o.FrameOwner&^7)
		hi = max(hi, o.FrameOwner+1)
	}
	if hi-lo > frameWindowSize || o.FrameCode%8 != 0 || o.FramePrevious%8 != 0 || o.FrameInstr%int64(o.InstrSize) != 0 {
		return -1
	}
	return lo
}

// tsWindowSize is PY_TS_WINDOW of bpf/python.h.
const tsWindowSize = 256

// tsWindow is the 8-aligned start of the bytes of a thread state that hold
// prev, the thread id and the frame (what checks a thread's cached thread
// state, bpf/python.h py_threads), -1 when they span more than
// tsWindowSize bytes or one is not 8-aligned.
func tsWindow(o *Offsets) int64 {
	lo := min(o.TsPrev, o.TsThread, o.TsFrame) &^ 7
	hi := max(o.TsPrev, o.TsThread, o.TsFrame) + 8
	if lo < 0 || hi-lo > tsWindowSize || o.TsPrev%8 != 0 || o.TsThread%8 != 0 || o.TsFrame%8 != 0 {
		return -1
	}
	return lo
}

// nameOffset is where the function's name is: co_qualname when the
// version has it.
func (o *Offsets) nameOffset() int64 {
	if o.CodeQualname >= 0 {
		return o.CodeQualname
	}
	return o.CodeName
}

// ForProcess finds the CPython interpreter a process runs (its executable
// or a mapped libpython) and where it is loaded. It returns
// ErrNoInterpreter when there is none; an unsupported interpreter gives an
// error that says why (the Interpreter is still returned, for reports).
func ForProcess(pid int) (_ *Process, err error) {
	defer elfx.Recover(&err, fmt.Sprintf("pid %d: its interpreter", pid))
	cands, err := candidates(pid)
	if err != nil {
		return nil, err
	}
	for _, c := range cands {
		// map_files opens the very file mapped, even if it was replaced
		// or deleted on disk since.
		in, lowest, err := detectCached(c.m.MapFile(pid), c.m.Path)
		if errors.Is(err, ErrNotPython) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.m.Path, err)
		}
		if in.Err != nil {
			return &Process{Pid: pid, Interp: in}, fmt.Errorf("%s: CPython %s unsupported: %w", c.m.Path, in.Version(), in.Err)
		}
		mem, err := procfs.OpenMem(pid, &procfs.MemBudget{Bytes: memBudgetBytes, Reads: memBudgetReads})
		if err != nil {
			return nil, err
		}
		return &Process{Pid: pid, Interp: in, Bias: c.start - lowest, file: c.m.MapFile(pid), mem: mem, codes: map[codeKey]*codeInfo{}}, nil
	}
	return nil, ErrNoInterpreter
}

// mapping is a file mapped at offset 0 that may be the interpreter.
type mapping struct {
	start uint64
	m     procfs.Mapping
}

// candidates lists the files pid maps that may hold its interpreter: its
// executable, and files named python* or libpython*.
func candidates(pid int) ([]mapping, error) {
	maps, err := procfs.Maps(pid)
	if err != nil {
		return nil, err
	}
	var cands []mapping
	seen := map[string]bool{}
	exe, _ := procfs.Exe(pid)
	for _, m := range maps {
		if !m.File() || m.Offset != 0 || seen[m.Path] {
			continue
		}
		base := filepath.Base(m.Path)
		if m.Path != exe && !strings.HasPrefix(base, "python") && !strings.HasPrefix(base, "libpython") {
			continue
		}
		seen[m.Path] = true
		cands = append(cands, mapping{m.Start, m})
	}
	return cands, nil
}

// inflight: the files being read by Prefetch, by identity, each with the
// calls to make when it is done.
var (
	inflightMu sync.Mutex
	inflight   = map[string][]func(){}
)

// Prefetch starts reading, in the background, each file pid maps that may
// be its interpreter and that is not read yet; done is called (from
// another goroutine) once each such read ends, and then ForProcess finds
// the answer at once. It reports whether it started or joined a read:
// false means ForProcess has nothing slow left to do for pid. Reading an
// interpreter's symbols takes hundreds of milliseconds, in which a short
// program loads TT-Metal, allocates and ends: whoever waits for its
// records must not wait for this.
func Prefetch(pid int, done func()) (pending bool) {
	cands, err := candidates(pid)
	if err != nil {
		return false
	}
	for _, c := range cands {
		ef, key, _, hit, err := openCached(c.m.MapFile(pid)) // opened while pid maps it
		if err != nil || hit {
			continue
		}
		pending = true
		inflightMu.Lock()
		waiters, running := inflight[key]
		inflight[key] = append(waiters, done)
		inflightMu.Unlock()
		if running {
			ef.Close()
			continue
		}
		go func(ef *elfx.File, key, path string) {
			defer ef.Close()
			detectFile(ef, key, path)
			inflightMu.Lock()
			waiters := inflight[key]
			delete(inflight, key)
			inflightMu.Unlock()
			for _, w := range waiters {
				w()
			}
		}(ef, key, c.m.Path)
	}
	return pending
}

// Close releases the process's memory. Nil-safe.
func (p *Process) Close() error {
	if p == nil || p.mem == nil {
		return nil
	}
	err := p.mem.Close()
	p.mem = nil
	return err
}

type detected struct {
	in     *Interpreter
	lowest uint64
	err    error
}

// detectCache holds Detect's answer per file identity (device, inode,
// size, modification time): processes share interpreters.
var detectCache sync.Map

func detectCached(open, path string) (*Interpreter, uint64, error) {
	ef, key, d, hit, err := openCached(open)
	if err != nil {
		return nil, 0, err
	}
	if !hit {
		d = detectFile(ef, key, path)
		ef.Close()
	}
	return d.in, d.lowest, d.err
}

// openCached opens the file at open (a regular file only, read with pread)
// and looks its identity up in detectCache. On a hit the file is closed and
// the cached answer returned; otherwise the open file and its key are, for
// the caller to read and close.
func openCached(open string) (ef *elfx.File, key string, d detected, hit bool, err error) {
	ef, err = elfx.Open(open, limits)
	if err != nil {
		return nil, "", d, false, err
	}
	key, err = fileKey(ef)
	if err != nil {
		ef.Close()
		return nil, "", d, false, err
	}
	if v, ok := detectCache.Load(key); ok {
		ef.Close()
		return nil, key, v.(detected), true, nil
	}
	return ef, key, d, false, nil
}

// fileKey is the identity of ef's file: device, inode, size, modification
// time.
func fileKey(ef *elfx.File) (string, error) {
	st, err := ef.OS().Stat()
	if err != nil {
		return "", err
	}
	key := fmt.Sprintf("%d", st.ModTime().UnixNano())
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		key = fmt.Sprintf("%d/%d/%d/%s", sys.Dev, sys.Ino, st.Size(), key)
	}
	return key, nil
}

// detectFile detects the interpreter in ef and caches the answer under
// key. A malformed file is refused, never a panic (Prefetch runs this on
// a goroutine of its own).
func detectFile(ef *elfx.File, key, path string) (d detected) {
	defer func() { detectCache.Store(key, d) }()
	defer elfx.Recover(&d.err, path)
	in, err := detect(path, ef.File)
	if in != nil {
		var st syscall.Stat_t
		if syscall.Fstat(int(ef.OS().Fd()), &st) == nil {
			in.dev, in.ino = st.Dev, st.Ino
		}
	}
	lowest := ^uint64(0)
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Vaddr&^0xfff < lowest {
			lowest = p.Vaddr &^ 0xfff
		}
	}
	return detected{in, lowest, err}
}

// ProcValue is the value of this process's py_procs entry (struct py_proc
// of bpf/python.h), keyed by its pid.
func (p *Process) ProcValue() ([]byte, error) {
	v, err := p.procValue()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, &v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func (p *Process) procValue() (procWire, error) {
	if p.Interp == nil || p.Interp.Err != nil {
		return procWire{}, errors.New("no supported interpreter")
	}
	o := p.Interp.Offsets
	fsbase := int64(-1)
	if o.ThreadMatch == matchFSBase {
		off, err := taskFSBase()
		if err != nil {
			return procWire{}, fmt.Errorf("CPython 3.10 threads are told apart by their fs base: %w", err)
		}
		fsbase = off
	}
	v := procWire{
		Runtime:           p.Bias + p.Interp.Runtime,
		RuntimeInterpHead: o.RuntimeInterpHead,
		InterpNext:        o.InterpNext,
		InterpThreadsHead: o.InterpThreadsHead,
		TsNext:            o.TsNext,
		TsPrev:            o.TsPrev,
		TsWindow:          tsWindow(&o),
		TsThread:          o.TsThread,
		TsFrame:           o.TsFrame,
		CframeCurrent:     o.CframeCurrent,
		FramePrevious:     o.FramePrevious,
		FrameCode:         o.FrameCode,
		FrameInstr:        o.FrameInstr,
		FrameOwner:        o.FrameOwner,
		TaskFsbase:        fsbase,
		FrameWindow:       frameWindow(&o),
		CodeID:            codeIDStart(&o),
		CodeFilename:      o.CodeFilename,
		CodeName:          o.nameOffset(),
		CodeFirstlineno:   o.CodeFirstLine,
		CodeLinetable:     o.CodeLinetable,
		CodeCode:          o.CodeCode,
		VarSize:           o.VarSize,
		BytesData:         o.BytesData,
		StrLength:         o.StrLength,
		StrState:          o.StrState,
		StrAsciiSize:      o.StrASCIISize,
		StrCompactSize:    o.StrCompactSz,
		ObType:            o.ObType,
		Version:           uint32(p.Interp.Major<<24 | p.Interp.Minor<<16 | max(p.Interp.Micro, 0)<<8),
		ThreadMatch:       o.ThreadMatch,
		InstrSize:         o.InstrSize,
		OwnerSkip:         o.OwnerSkip,
		CodeGen:           p.CodeGen,
	}
	return v, nil
}

// ErrNotRelocated is CodeDealloc's answer while the dynamic loader has
// not yet relocated the interpreter's PyCode_Type in the process (its
// tp_dealloc reads 0, or its link-time value in a file that is not at its
// link-time address): a process registered as it starts, mapped but not
// yet relocated. Asked again once the process runs, it may succeed.
var ErrNotRelocated = errors.New("PyCode_Type.tp_dealloc is not relocated yet")

// CodeDealloc opens the interpreter file this process maps, for a uprobe
// on the deallocation of code objects at offset off: PyCode_Type's
// tp_dealloc as the file says (dealloc.go), never as the process says,
// since the probe goes on the file, in every process that runs it. The
// file returned is the very file that was read (the same device and
// inode), and the process's own PyCode_Type must name the same function
// (else its code objects are freed elsewhere and the probe would miss
// them). The caller closes the file.
func (p *Process) CodeDealloc() (f *os.File, off uint64, err error) {
	in := p.Interp
	if in == nil || in.CodeType == 0 {
		return nil, 0, errors.New("no PyCode_Type")
	}
	if in.codeDeallocErr != nil {
		return nil, 0, fmt.Errorf("%s: %w", errNoCodeDealloc, in.codeDeallocErr)
	}
	off, ok := in.fileOffset(in.codeDealloc)
	if !ok {
		return nil, 0, fmt.Errorf("code_dealloc %#x is not in the code of %s", in.codeDealloc, in.Path)
	}
	b, err := p.read(p.Bias+in.CodeType+typeDealloc, 8)
	if err != nil {
		return nil, 0, fmt.Errorf("PyCode_Type.tp_dealloc: %w", err)
	}
	raw := binary.LittleEndian.Uint64(b)
	if raw == 0 || (p.Bias != 0 && raw == in.codeDealloc) {
		return nil, 0, ErrNotRelocated
	}
	if got := raw - p.Bias; got != in.codeDealloc {
		return nil, 0, fmt.Errorf("this process's PyCode_Type.tp_dealloc %#x is not its file's %#x", got, in.codeDealloc)
	}
	if f, err = procfs.OpenRegular(p.file); err != nil {
		return nil, 0, err
	}
	var st syscall.Stat_t
	if err = syscall.Fstat(int(f.Fd()), &st); err == nil && (st.Dev != in.dev || st.Ino != in.ino) {
		err = fmt.Errorf("%s is no longer the file that was read", in.Path)
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, off, nil
}

// Warm detects the interpreter in the file at path ahead of time (the
// answer is cached per file, as ForProcess's is), so that a process that
// runs it is registered at once: a short Python program may otherwise
// allocate, and end, while its interpreter is still being read.
func Warm(path string) { _, _, _ = detectCached(path, path) }
