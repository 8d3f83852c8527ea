// Package events holds the typed events tttrace decodes from the BPF ring
// buffer, their NDJSON encoding, and the documented schema of that stream.
//
// An Event is the Go view of one wire record (bpf/tttrace.h). It carries
// what the probe read at the probed function's entry; it does not interpret
// TT-Metal's lifecycle rules: that is the job of package devices.
package events

import "fmt"

// Kind says which probed TT-Metal function produced an event.
type Kind uint8

// Event kinds, equal to enum event_kind in bpf/tttrace.h.
const (
	KindAlloc            Kind = 1  // GraphTracker::track_allocate(const Buffer*)
	KindFree             Kind = 2  // GraphTracker::track_deallocate(Buffer*)
	KindView             Kind = 3  // Buffer::create(IDevice*, DeviceAddr address, ...): a pre-allocated view
	KindCBAlloc          Kind = 4  // GraphTracker::track_allocate_cb(ranges, addr, size, global, device)
	KindCBFree           Kind = 5  // GraphTracker::track_deallocate_cb(device)
	KindCBLayout         Kind = 6  // ProgramImpl::allocate_circular_buffers(device): Object is the program
	KindCBTeardown       Kind = 7  // ProgramImpl::deallocate_circular_buffers(): Object is the program
	KindProgramDestroy   Kind = 8  // ProgramImpl::~ProgramImpl(): Object is the program
	KindDeviceClose      Kind = 9  // Device::close()
	KindMeshClose        Kind = 10 // distributed::MeshDevice::close()
	KindMarkDeallocated  Kind = 11 // Buffer::mark_as_deallocated()
	KindLinkMap          Kind = 12 // ld.so _dl_debug_state(): a library may have been mapped (tracer-internal)
	KindFork             Kind = 13 // a traced process forked: Pid is the child, Object the parent
	KindMainExit         Kind = 14 // the main thread of a traced process exited: Address is its wait status (tracer-internal)
	KindLost             Kind = 64 // synthesized by the reader: records the ring buffer could not take
	KindProcessExit      Kind = 65 // synthesized by the tracer: the process has ended
	maxKindForStringPlus Kind = 66
)

var kindNames = [maxKindForStringPlus]string{
	KindAlloc:           "alloc",
	KindFree:            "free",
	KindView:            "view",
	KindCBAlloc:         "cb_alloc",
	KindCBFree:          "cb_free",
	KindCBLayout:        "cb_layout",
	KindCBTeardown:      "cb_teardown",
	KindProgramDestroy:  "program_destroy",
	KindDeviceClose:     "device_close",
	KindMeshClose:       "mesh_close",
	KindMarkDeallocated: "mark_deallocated",
	KindLinkMap:         "link_map",
	KindFork:            "fork",
	KindMainExit:        "main_exit",
	KindLost:            "lost",
	KindProcessExit:     "exit",
}

// String returns the NDJSON "type" of the kind.
func (k Kind) String() string {
	if k < maxKindForStringPlus && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// DeviceKind says what an event's IDevice* points at.
type DeviceKind uint8

// Device kinds, equal to enum device_kind in bpf/tttrace.h.
const (
	DeviceNone    DeviceKind = 0 // the event names no device
	DeviceChip    DeviceKind = 1 // a tt::tt_metal::Device; Event.Chip is its id
	DeviceMesh    DeviceKind = 2 // a distributed::MeshDevice; its id is not a chip id
	DeviceUnknown DeviceKind = 3 // neither vtable matched, or the pointer was unreadable
)

// String names the device kind.
func (d DeviceKind) String() string {
	switch d {
	case DeviceNone:
		return "none"
	case DeviceChip:
		return "chip"
	case DeviceMesh:
		return "mesh"
	case DeviceUnknown:
		return "unknown"
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
// (KindLost, KindProcessExit).
type Event struct {
	Seq  uint64 // global sequence number assigned in BPF
	TsNs uint64 // CLOCK_MONOTONIC nanoseconds
	Pid  uint32 // process (tgid)
	Tid  uint32 // thread
	Kind Kind

	// Object is the Buffer* for alloc/free/mark_deallocated and the
	// ProgramImpl* for CB layout/teardown/destroy and CB alloc/free (the
	// program whose call is running on this thread, resolved by the reader
	// of the stream, see devices).
	Object uint64

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

	// ExitCode / ExitSignal describe how a process ended (KindProcessExit);
	// -1 / 0 when tttrace could not learn it.
	ExitCode   int
	ExitSignal int
}
