// Package events holds the typed events tttrace decodes from the BPF ring
// buffer, their NDJSON encoding, and the documented schema of that stream.
//
// An Event is the Go view of one wire record (bpf/wire.h). It carries
// what the probe read at the probed function's entry; it does not interpret
// TT-Metal's lifecycle rules: that is the job of package devices.
package events

import "fmt"

// Kind and DeviceKind, with their constants and names, are generated from
// bpf/wire.h into wire_gen.go.

// String returns the NDJSON "type" of the kind.
func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Synthesized reports whether records of kind k are made by the tracer in
// user space (no BPF sequence number, no thread): the named kinds from
// KindLost on (bpf/wire.h).
func (k Kind) Synthesized() bool {
	return k >= KindLost && int(k) < len(kindNames) && kindNames[k] != ""
}

// String names the device kind.
func (d DeviceKind) String() string {
	if int(d) < len(deviceKindNames) && deviceKindNames[d] != "" {
		return deviceKindNames[d]
	}
	return fmt.Sprintf("device_kind(%d)", uint8(d))
}

// BufferType is TT-Metal's tt::tt_metal::BufferType.
type BufferType int32

// Buffer types, as TT-Metal numbers them.
const (
	DRAM         BufferType = 0
	L1           BufferType = 1
	SystemMemory BufferType = 2
	L1Small      BufferType = 3
	Trace        BufferType = 4
	// NumBufferTypes bounds the valid values.
	NumBufferTypes = 5
)

var bufferTypeNames = [NumBufferTypes]string{"DRAM", "L1", "SYSTEM_MEMORY", "L1_SMALL", "TRACE"}

// Valid reports whether t is one of TT-Metal's buffer types.
func (t BufferType) Valid() bool { return t >= 0 && t < NumBufferTypes }

// String returns TT-Metal's name of the type (DRAM, L1, SYSTEM_MEMORY, L1_SMALL, TRACE).
func (t BufferType) String() string {
	if t.Valid() {
		return bufferTypeNames[t]
	}
	return fmt.Sprintf("BufferType(%d)", int32(t))
}

// ParseBufferType is the inverse of String.
func ParseBufferType(s string) (BufferType, bool) {
	for i, n := range bufferTypeNames {
		if n == s {
			return BufferType(i), true
		}
	}
	return 0, false
}

// Event is one decoded probe record, or a record the tracer synthesized
// (KindLost, KindExit). Every field has one meaning whatever the kind; a
// field the kind does not set is zero (Chip: -1).
type Event struct {
	Seq  uint64 // global sequence number assigned in BPF
	TsNs uint64 // CLOCK_MONOTONIC nanoseconds
	Pid  uint32 // process (tgid)
	Tid  uint32 // thread
	Kind Kind

	// Object is the C++ object the call is about: the Buffer* of
	// alloc/free/mark_deallocated, the ProgramImpl* of
	// cb_layout/cb_teardown/program_destroy/program_dispatch. (CB alloc/free name no program:
	// the ledger pairs them with the layout or teardown running on the
	// same thread.)
	Object uint64

	// ParentPid is the forking process of a KindFork record.
	ParentPid uint32
	// WaitStatus is how the main thread of a KindMainExit record's process
	// exited (the kernel's exit_code, a wait status).
	WaitStatus uint32

	Device     uint64 // the IDevice* the call names
	DeviceVptr uint64 // its vptr, to explain DeviceUnknown
	DeviceKind DeviceKind
	Chip       int32 // Device::id_ when DeviceKind == DeviceChip, else -1

	BufferType BufferType
	Address    uint64
	Size       uint64
	PageSize   uint64

	Hooked    bool  // Buffer::hooked_allocation_ (graph capture: no memory used)
	OwnsData  bool  // Buffer::owns_data_
	Status    uint8 // Buffer::allocation_status_
	Global    bool  // CB is globally allocated
	ReadError bool  // a user-memory read in the probe failed

	// LostBefore counts reservations that failed on this record's CPU since
	// that CPU's previous record. For KindLost it is the number lost.
	LostBefore uint64

	// Stack says whether the stack of an alloc follows in its own record
	// (KindStack), was lost, or is a stack made known before, named by
	// StackToken (StackToken).
	Stack      StackState
	StackToken uint64
	// PyToken, on an alloc whose Stack is StackToken or StackFollows,
	// names its known Python stack (bpf/pyknown.h): no KindPyStack record
	// goes with it. 0: none (a Python stack record, if any, follows).
	PyToken uint64
	// Site is where the buffer of an alloc was allocated: a site of the
	// process's stack table (package stacks), given by the runtime once
	// the stack record is read; 0: none.
	Site uint32
	// SiteMissing says why an alloc whose stack was to be captured has no
	// site, or a site without its modules or Python frames; 0: nothing
	// missing.
	SiteMissing SiteMissing

	// ExitCode / ExitSignal describe how a process ended (KindExit);
	// -1 / 0 when tttrace could not learn it.
	ExitCode   int
	ExitSignal int

	// The allocator records' own fields (allocator.go).
	AllocatorFields
	TraceFields
	CBFields
	// The TT-NN op live on the record's thread (op.go).
	OpFields
}
