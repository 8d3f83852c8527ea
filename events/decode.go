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
	}
	if e.Kind == 0 || e.Kind.Synthesized() || int(e.Kind) >= len(kindNames) || kindNames[e.Kind] == "" {
		return fmt.Errorf("record seq %d: unknown kind %d", e.Seq, w.Kind)
	}
	return nil
}
