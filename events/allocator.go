package events

// The allocator's records (issue 22): a BankManager being made, and a
// BankManager::allocate_buffer call. Their wire kinds are not in
// bpf/tttrace.h yet; until they are, these kinds are Go-level only (the
// values the wire header is to give them), named here so that the NDJSON
// encoding and the ledger know them. Decode never makes them.
const (
	// KindAllocCapacity: the entry of a BankManager constructor. Object
	// is the BankManager*; Chip (DeviceKind DeviceChip) the chip whose
	// allocator it is, when known; BufferType, Banks, BankSize,
	// Alignment, Base and Limit its arguments.
	KindAllocCapacity Kind = 19
	// KindAllocRequest: the entry of BankManager::allocate_buffer. Object
	// is the BankManager*; Size and PageSize the aligned size and page
	// size the allocator got; BottomUp, Shards (0: interleaved) and
	// AllocatorID (0: the lockstep list, else one core's own) its other
	// arguments. Success is the thread's next alloc; anything else the
	// thread does first means TT-Metal threw (Out of Memory).
	KindAllocRequest Kind = 20
)

// Package-level variables are set before any init function runs, so the
// names are there when json.go's init builds its heads.
var _ = nameAllocatorKinds()

func nameAllocatorKinds() bool {
	if kindNames[KindAllocCapacity] == "" {
		kindNames[KindAllocCapacity] = "alloc_capacity"
	}
	if kindNames[KindAllocRequest] == "" {
		kindNames[KindAllocRequest] = "alloc_request"
	}
	return true
}

// AllocatorFields are the fields only the allocator's records set.
type AllocatorFields struct {
	Banks     uint32 // KindAllocCapacity: the bank count
	BankSize  uint64 // KindAllocCapacity: allocatable bytes per bank (size_bytes)
	Alignment uint64 // KindAllocCapacity: the manager's alignment_bytes
	Base      uint64 // KindAllocCapacity: the address of the bank's first allocatable byte (alloc_offset)
	// Limit: KindAllocCapacity: interleaved_address_limit (the map-form
	// constructor; 0 otherwise).
	Limit uint64
	// Shards: KindAllocRequest: num_shards of a sharded buffer; 0:
	// interleaved over every bank.
	Shards uint32
	// AllocatorID: KindAllocRequest: 0 for the lockstep free list; others
	// are one core's own allocation (per-core "HYBRID" L1).
	AllocatorID uint32
	BottomUp    bool // KindAllocRequest
}

func appendAllocator(buf []byte, e *Event) []byte {
	switch e.Kind {
	case KindAllocCapacity:
		buf = appendHex(buf, `,"manager":"0x`, e.Object)
		buf = appendDevice(buf, e)
		buf = appendBufferType(buf, e.BufferType)
		buf = append(buf, `,"banks":`...)
		buf = appendUint(buf, uint64(e.Banks))
		buf = append(buf, `,"bank_size":`...)
		buf = appendUint(buf, e.BankSize)
		buf = append(buf, `,"alignment":`...)
		buf = appendUint(buf, e.Alignment)
		buf = append(buf, `,"base":`...)
		buf = appendUint(buf, e.Base)
		buf = append(buf, `,"interleaved_limit":`...)
		buf = appendUint(buf, e.Limit)
	case KindAllocRequest:
		buf = appendHex(buf, `,"manager":"0x`, e.Object)
		buf = append(buf, `,"size":`...)
		buf = appendUint(buf, e.Size)
		buf = append(buf, `,"page_size":`...)
		buf = appendUint(buf, e.PageSize)
		buf = appendBool(buf, "bottom_up", e.BottomUp)
		if e.Shards != 0 {
			buf = append(buf, `,"num_shards":`...)
			buf = appendUint(buf, uint64(e.Shards))
		}
		buf = append(buf, `,"allocator_id":`...)
		buf = appendUint(buf, uint64(e.AllocatorID))
		if e.Site != 0 {
			buf = append(buf, `,"site":`...)
			buf = appendUint(buf, uint64(e.Site))
		}
	}
	return buf
}

// appendBufferType writes "buffer_type" alone.
func appendBufferType(buf []byte, t BufferType) []byte {
	buf = append(buf, `,"buffer_type":"`...)
	buf = append(buf, t.String()...)
	return append(buf, '"')
}
