package events

import (
	"fmt"
	"unsafe"
)

// Decode fills e from one raw ring-buffer record. It checks the length and
// allocates nothing.
func Decode(raw []byte, e *Event) error {
	if len(raw) < WireSize {
		return fmt.Errorf("record of %d bytes, want %d", len(raw), WireSize)
	}
	w := (*Wire)(unsafe.Pointer(unsafe.SliceData(raw)))
	*e = Event{
		Seq:        w.Seq,
		TsNs:       w.TsNs,
		Pid:        w.Pid,
		Tid:        w.Tid,
		Kind:       w.Kind,
		Object:     w.Object,
		Device:     w.Device,
		DeviceVptr: w.DeviceVptr,
		DeviceKind: w.DeviceKind,
		Chip:       w.Chip,
		BufferType: BufferType(w.BufferType),
		Address:    w.Address,
		Size:       w.Size,
		PageSize:   w.PageSize,
		Hooked:     w.Hooked != 0,
		OwnsData:   w.OwnsData != 0,
		Status:     w.Status,
		Global:     w.Global != 0,
		ReadError:  w.ReadError != 0,
		LostBefore: w.LostBefore,
		ParentPid:  w.ParentPid,
		WaitStatus: w.WaitStatus,
		Stack:      w.Stack,
	}
	if e.Kind == 0 || e.Kind == KindStack || e.Kind == KindPyStack || e.Kind == KindPyCode || e.Kind.Synthesized() || int(e.Kind) >= len(kindNames) || kindNames[e.Kind] == "" {
		return fmt.Errorf("record seq %d: unknown kind %d", e.Seq, w.Kind)
	}
	return nil
}

// RecordKind says what a raw record is: 0 for an event (BPF never gives
// another record an event's length), else the kind of a record that
// shares struct stack_record's header (KindStack, KindPyStack, KindPyCode).
func RecordKind(raw []byte) Kind {
	if len(raw) == WireSize || len(raw) < StackHeaderSize {
		return 0
	}
	return Kind((*StackWire)(unsafe.Pointer(unsafe.SliceData(raw))).Kind)
}

// RecordSeq is the seq of a record of RecordKind != 0.
func RecordSeq(raw []byte) (seq uint64, pid uint32) {
	w := (*StackWire)(unsafe.Pointer(unsafe.SliceData(raw)))
	return w.Seq, w.Pid
}

// StackRecord is a decoded stack record: the registers of the thread at the
// probe and the copy of its stack from SP up.
type StackRecord struct {
	Seq        uint64 // the seq of the alloc it belongs to
	IP, SP, BP uint64
	Pid, Tid   uint32
	Flags      uint8
	// Data aliases the raw record: valid as long as it is.
	Data []byte
}

// DecodeStack decodes a stack record. It checks the lengths and allocates
// nothing; s.Data aliases raw.
func DecodeStack(raw []byte, s *StackRecord) error {
	if len(raw) < StackHeaderSize {
		return fmt.Errorf("stack record of %d bytes, want at least %d", len(raw), StackHeaderSize)
	}
	w := (*StackWire)(unsafe.Pointer(unsafe.SliceData(raw)))
	if Kind(w.Kind) != KindStack {
		return fmt.Errorf("record of %d bytes, seq %d: neither an event nor a stack (kind %d)", len(raw), w.Seq, w.Kind)
	}
	if int(w.Size) > len(raw)-StackHeaderSize {
		return fmt.Errorf("stack record seq %d: %d bytes of stack in a record of %d", w.Seq, w.Size, len(raw))
	}
	*s = StackRecord{Seq: w.Seq, IP: w.Ip, SP: w.Sp, BP: w.Bp, Pid: w.Pid, Tid: w.Tid, Flags: w.Flags,
		Data: raw[StackHeaderSize : StackHeaderSize+int(w.Size)]}
	return nil
}
