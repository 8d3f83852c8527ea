package events

import "fmt"

// The allocator's records (issue 22, docs/ttmetal.md §9): KindAllocCapacity,
// a BankManager being made (struct alloc_capacity_record: Object is the
// BankManager*; Chip, with DeviceKind DeviceChip, the chip whose allocator it
// is, when known; BufferType, Banks, BankSize, Alignment, Base and Limit its
// arguments), and KindAllocRequest, a BankManager::allocate_buffer call
// (struct alloc_request_record: Object is the BankManager*; Size and PageSize
// the aligned size and page size the allocator got; BottomUp, Shards (0:
// interleaved) and AllocatorID (0: the lockstep list, else one core's own)
// its other arguments). Success is the thread's next alloc; anything else the
// thread does first means TT-Metal threw (Out of Memory).

// DecodeAllocator fills e from one raw record of an allocator kind. It checks
// the kind and length and allocates nothing.
func DecodeAllocator(raw []byte, e *Event) error {
	h, err := Peek(raw)
	if err != nil {
		return err
	}
	switch h.Kind {
	case KindAllocCapacity:
		w, err := As[AllocCapacityWire](raw)
		if err != nil {
			return err
		}
		*e = Event{Seq: w.Hdr.Seq, TsNs: w.Hdr.TsNs, Pid: w.Hdr.Pid, Tid: w.Hdr.Tid, Kind: w.Hdr.Kind,
			Object: w.Manager, Device: w.Device, DeviceKind: w.DeviceKind, Chip: w.Chip,
			BufferType: BufferType(w.BufferType), ReadError: w.ReadError != 0, LostBefore: w.LostBefore}
		e.Banks, e.BankSize, e.Alignment, e.Base, e.Limit = w.Banks, w.BankSize, w.Alignment, w.Base, w.Limit
		if e.DeviceKind != DeviceChip {
			e.Chip = -1
		}
	case KindAllocRequest:
		w, err := As[AllocRequestWire](raw)
		if err != nil {
			return err
		}
		*e = Event{Seq: w.Hdr.Seq, TsNs: w.Hdr.TsNs, Pid: w.Hdr.Pid, Tid: w.Hdr.Tid, Kind: w.Hdr.Kind,
			Object: w.Manager, Chip: -1, BufferType: -1, Size: w.Size, PageSize: w.PageSize,
			ReadError: w.ReadError != 0, LostBefore: w.LostBefore}
		e.Shards, e.AllocatorID, e.BottomUp = w.NumShards, w.AllocatorID, w.BottomUp != 0
	default:
		return fmt.Errorf("record seq %d: kind %s is not an allocator record", h.Seq, h.Kind)
	}
	return nil
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
