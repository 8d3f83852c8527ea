package pyframes

import (
	"encoding/binary"
	"fmt"
)

// Offsets are where an interpreter keeps the fields the stack walk (BPF)
// and the code-object reader (user space) read, in bytes; -1 where the
// version has no such field.
type Offsets struct {
	// The walk (struct py_proc of bpf/python.h).
	RuntimeInterpHead int64 // _PyRuntime.interpreters.head
	InterpNext        int64 // PyInterpreterState.next
	InterpThreadsHead int64 // .threads.head (3.10: .tstate_head)
	TsNext            int64 // PyThreadState.next
	TsPrev            int64 // PyThreadState.prev
	TsThread          int64 // .native_thread_id (3.11+) or .thread_id (3.10)
	TsFrame           int64 // .frame (3.10), .cframe (3.11/3.12), .current_frame (3.13)
	CframeCurrent     int64 // _PyCFrame.current_frame (3.11/3.12)
	FramePrevious     int64 // f_back (3.10) or previous
	FrameCode         int64 // f_code or f_executable (3.13)
	FrameInstr        int64 // f_lasti (3.10, an int) or prev_instr / instr_ptr
	FrameOwner        int64 // owner (a char), 3.11+
	ThreadMatch       uint8 // matchTID or matchFSBase
	InstrSize         uint8 // 4 (f_lasti) or 8 (a pointer)
	OwnerSkip         uint8 // owner of C-stack shim frames (3.12+), ownerNone

	// Code objects, strings, bytes (read by user space).
	CodeFilename  int64
	CodeName      int64
	CodeQualname  int64 // -1 before 3.11: the name is then the function
	CodeFirstLine int64 // an int
	CodeLinetable int64
	CodeCode      int64 // co_code (3.10): the bytecode, a bytes object
	CodeAdaptive  int64 // co_code_adaptive (3.11+): the bytecode, inline
	ObType        int64 // PyObject.ob_type
	VarSize       int64 // PyVarObject.ob_size (code units of a 3.11+ code object)
	BytesData     int64 // PyBytesObject.ob_sval
	StrLength     int64 // PyASCIIObject.length
	StrState      int64 // PyASCIIObject.state
	StrASCIISize  int64 // sizeof(PyASCIIObject): where ASCII data starts
	StrCompactSz  int64 // sizeof(PyCompactUnicodeObject): where other compact data starts
}

const (
	matchTID    = 0 // PY_MATCH_TID
	matchFSBase = 1 // PY_MATCH_FSBASE
	ownerNone   = 0xff
	ownerCStack = 3 // FRAME_OWNED_BY_CSTACK (3.12, 3.13)
)

// tables are the offsets of the builds of python.org's sources for x86-64
// Linux without Py_DEBUG/Py_TRACE_REFS, by minor version, as DWARF of
// 3.10.13, 3.11.7 and 3.12.1 gives them. They are never used unchecked:
// see (*Interpreter).resolve.
var tables = map[int]Offsets{
	10: {
		RuntimeInterpHead: 32, InterpNext: 0, InterpThreadsHead: 8,
		TsNext: 8, TsPrev: 0, TsThread: 176, TsFrame: 24, CframeCurrent: -1,
		FramePrevious: 24, FrameCode: 32, FrameInstr: 96, FrameOwner: -1,
		ThreadMatch: matchFSBase, InstrSize: 4, OwnerSkip: ownerNone,
		CodeFilename: 104, CodeName: 112, CodeQualname: -1, CodeFirstLine: 40,
		CodeLinetable: 120, CodeCode: 48, CodeAdaptive: -1,
		ObType: 8, VarSize: 16, BytesData: 32, StrLength: 16, StrState: 32,
		StrASCIISize: 48, StrCompactSz: 72,
	},
	11: {
		RuntimeInterpHead: 40, InterpNext: 0, InterpThreadsHead: 16,
		TsNext: 8, TsPrev: 0, TsThread: 160, TsFrame: 56, CframeCurrent: 8,
		FramePrevious: 48, FrameCode: 32, FrameInstr: 56, FrameOwner: 69,
		ThreadMatch: matchTID, InstrSize: 8, OwnerSkip: ownerNone,
		CodeFilename: 112, CodeName: 120, CodeQualname: 128, CodeFirstLine: 72,
		CodeLinetable: 136, CodeCode: -1, CodeAdaptive: 184,
		ObType: 8, VarSize: 16, BytesData: 32, StrLength: 16, StrState: 32,
		StrASCIISize: 48, StrCompactSz: 72,
	},
	12: {
		RuntimeInterpHead: 40, InterpNext: 0, InterpThreadsHead: 72,
		TsNext: 8, TsPrev: 0, TsThread: 144, TsFrame: 56, CframeCurrent: 0,
		FramePrevious: 8, FrameCode: 0, FrameInstr: 56, FrameOwner: 70,
		ThreadMatch: matchTID, InstrSize: 8, OwnerSkip: ownerCStack,
		CodeFilename: 112, CodeName: 120, CodeQualname: 128, CodeFirstLine: 68,
		CodeLinetable: 136, CodeCode: -1, CodeAdaptive: 192,
		ObType: 8, VarSize: 16, BytesData: 32, StrLength: 16, StrState: 32,
		StrASCIISize: 40, StrCompactSz: 56,
	},
}

// debugOffsetsCookie starts _Py_DebugOffsets, the first member of
// _PyRuntime since 3.13.
const debugOffsetsCookie = "xdebugpy"

// debugOffsets313Size is how much of 3.13's _Py_DebugOffsets is read: up
// to and including unicode_object (the layout gdb shows for 3.13.0's
// struct _Py_DebugOffsets; 3.14 changed it, so it is used for 3.13 only).
const debugOffsets313Size = 568

// fromDebugOffsets reads 3.13's _Py_DebugOffsets (the bytes at the start of
// _PyRuntime) into Offsets. The struct names its own version.
func fromDebugOffsets(b []byte) (Offsets, uint64, error) {
	if len(b) < debugOffsets313Size {
		return Offsets{}, 0, fmt.Errorf("_Py_DebugOffsets: %d bytes, want %d", len(b), debugOffsets313Size)
	}
	if string(b[:8]) != debugOffsetsCookie {
		return Offsets{}, 0, fmt.Errorf("_PyRuntime does not start with the %q cookie", debugOffsetsCookie)
	}
	u := func(at int) int64 { return int64(binary.LittleEndian.Uint64(b[at:])) }
	version := uint64(u(8))
	if version>>16 != 0x030d {
		return Offsets{}, version, fmt.Errorf("_Py_DebugOffsets of version %#x: only 3.13's layout is known", version)
	}
	if u(16) != 0 {
		return Offsets{}, version, fmt.Errorf("free-threaded build: its object header is not supported")
	}
	o := Offsets{
		RuntimeInterpHead: u(40),
		InterpNext:        u(64),
		InterpThreadsHead: u(72),
		TsNext:            u(168),
		TsPrev:            u(160),
		TsThread:          u(200), // native_thread_id
		TsFrame:           u(184), // current_frame
		CframeCurrent:     -1,
		FramePrevious:     u(232),
		FrameCode:         u(240), // executable
		FrameInstr:        u(248), // instr_ptr
		FrameOwner:        u(264),
		ThreadMatch:       matchTID,
		InstrSize:         8,
		OwnerSkip:         ownerCStack,
		CodeFilename:      u(280),
		CodeName:          u(288),
		CodeQualname:      u(296),
		CodeLinetable:     u(304),
		CodeFirstLine:     u(312),
		CodeCode:          -1,
		CodeAdaptive:      u(344),
		ObType:            u(360),
		VarSize:           u(520), // bytes_object.ob_size: PyVarObject's
		BytesData:         u(528),
		StrState:          u(544),
		StrLength:         u(552),
		StrASCIISize:      u(560),
	}
	// PyCompactUnicodeObject adds utf8_length and utf8 to PyASCIIObject.
	o.StrCompactSz = o.StrASCIISize + 16
	for name, v := range map[string]int64{"interpreters_head": o.RuntimeInterpHead, "threads_head": o.InterpThreadsHead,
		"native_thread_id": o.TsThread, "current_frame": o.TsFrame, "instr_ptr": o.FrameInstr, "co_code_adaptive": o.CodeAdaptive} {
		if v <= 0 || v > 1<<20 {
			return Offsets{}, version, fmt.Errorf("_Py_DebugOffsets: implausible %s offset %d", name, v)
		}
	}
	return o, version, nil
}
