package events

import (
	"fmt"
	"unsafe"
)

// The ring's records all start with a Header whose Kind says which struct
// of bpf/wire.h the record is (wireOf, generated): a record is never told
// apart by its length. Every view below aliases the raw record (the ring
// buffer reader hands out 8-byte aligned samples) and allocates nothing.

// Peek returns the header of a raw record after checking that its kind is
// one BPF writes and that the record is at least as long as that kind's
// struct.
func Peek(raw []byte) (*Header, error) {
	if len(raw) < HeaderSize {
		return nil, fmt.Errorf("record of %d bytes, shorter than a header (%d)", len(raw), HeaderSize)
	}
	h := (*Header)(unsafe.Pointer(unsafe.SliceData(raw)))
	if int(h.Kind) >= len(wireOf) || wireOf[h.Kind] == 0 {
		return nil, fmt.Errorf("record seq %d: unknown kind %d", h.Seq, h.Kind)
	}
	if n := wireSize[h.Kind]; uint32(len(raw)) < n {
		return nil, fmt.Errorf("record seq %d, kind %s: %d bytes, want at least %d", h.Seq, h.Kind, len(raw), n)
	}
	return h, nil
}

// wireType is a record struct of wire_gen.go.
type wireType[T any] interface {
	*T
	wireID() uint8
}

// As views raw as a record of type T (Wire, StackWire, PyStackWire, ...),
// checking its kind and length; the result aliases raw.
func As[T any, P wireType[T]](raw []byte) (*T, error) {
	h, err := Peek(raw)
	if err != nil {
		return nil, err
	}
	return view[T, P](h)
}

// view is the record whose header Peek returned as a T, after checking
// that its kind is a T.
func view[T any, P wireType[T]](h *Header) (*T, error) {
	if wireOf[h.Kind] != P(nil).wireID() {
		var zero T
		return nil, fmt.Errorf("record seq %d: kind %s is not a %T", h.Seq, h.Kind, zero)
	}
	return (*T)(unsafe.Pointer(h)), nil
}

// Decode fills e from one raw record of a kind of struct event, or of
// KindCBAlloc (struct cb_alloc_record). It checks the kind and length and
// allocates nothing.
func Decode(raw []byte, e *Event) error {
	h, err := Peek(raw)
	if err != nil {
		return err
	}
	if h.Kind == KindCBAlloc {
		return decodeCBAlloc(h, e)
	}
	w, err := view[Wire](h)
	if err != nil {
		return err
	}
	*e = Event{
		Seq:        w.Hdr.Seq,
		TsNs:       w.Hdr.TsNs,
		Pid:        w.Hdr.Pid,
		Tid:        w.Hdr.Tid,
		Kind:       w.Hdr.Kind,
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
		StackToken: w.StackToken,
		PyToken:    w.PyToken,
	}
	return nil
}

// StackRecord is a decoded stack record: the registers of the thread at the
// probe and the copy of its stack from SP up.
type StackRecord struct {
	Seq        uint64 // the seq of the alloc it belongs to
	IP, SP, BP uint64
	Pid, Tid   uint32
	Flags      uint8
	// Token: with StackKnown in Flags, the token user space gave this
	// stack before (no Data follows).
	Token uint64
	// Data aliases the raw record: valid as long as it is.
	Data []byte
}

// DecodeStack decodes a stack record. It checks the lengths and allocates
// nothing; s.Data aliases raw.
func DecodeStack(raw []byte, s *StackRecord) error {
	w, err := As[StackWire](raw)
	if err != nil {
		return err
	}
	if int(w.Size) > len(raw)-StackWireSize {
		return fmt.Errorf("stack record seq %d: %d bytes of stack in a record of %d", w.Hdr.Seq, w.Size, len(raw))
	}
	*s = StackRecord{Seq: w.Hdr.Seq, IP: w.Ip, SP: w.Sp, BP: w.Bp, Pid: w.Hdr.Pid, Tid: w.Hdr.Tid, Flags: w.Flags, Token: w.Token,
		Data: raw[StackWireSize : StackWireSize+int(w.Size)]}
	return nil
}

// DecodePyStack views a Python stack record, checking its frame count: the
// valid frames are Stack.Frames[:Stack.Nframes].
func DecodePyStack(raw []byte) (*PyStackWire, error) {
	w, err := As[PyStackWire](raw)
	if err != nil {
		return nil, err
	}
	if int(w.Stack.Nframes) > len(w.Stack.Frames) {
		return nil, fmt.Errorf("py_stack record seq %d: %d frames, at most %d fit", w.Hdr.Seq, w.Stack.Nframes, len(w.Stack.Frames))
	}
	return w, nil
}

// DecodePyCode views a code-object record, checking the lengths of what it
// copied against its arrays (package pyframes checks what they say).
func DecodePyCode(raw []byte) (*PyCodeWire, error) {
	w, err := As[PyCodeWire](raw)
	if err != nil {
		return nil, err
	}
	c := &w.Code
	if int(c.FilenameLen) > len(c.Filename) || int(c.NameLen) > len(c.Name) || int(c.LinetableLen) > len(c.Linetable) {
		return nil, fmt.Errorf("py_code record seq %d: lengths %d, %d, %d past the arrays", w.Hdr.Seq, c.FilenameLen, c.NameLen, c.LinetableLen)
	}
	return w, nil
}
