package events

import "fmt"

// Circular buffers and program dispatch (issue 30, docs/ttmetal.md §5, §12):
// KindCBAlloc is struct cb_alloc_record (GraphTracker::track_allocate_cb:
// device fields, Address, Size per core, Global, and the CB's core ranges in
// CBFields); KindProgramDispatch is a struct event (the entry of
// ProgramImpl::generate_dispatch_commands: Object the ProgramImpl*, device
// fields the IDevice* it is enqueued on).

// CoreRangeMax is how many core ranges a cb_alloc record carries.
const CoreRangeMax = len(CBAllocWire{}.Ranges)

// CBFields are the fields only KindCBAlloc sets.
type CBFields struct {
	// RangesKnown: the library's layout gives CoreRangeSet's, so
	// CoreRanges[:min(NumRanges, CoreRangeMax)] are the CB's core ranges.
	RangesKnown bool
	// NumRanges is how many ranges the CoreRangeSet has; more than
	// CoreRangeMax: RangesTruncated, only the first were copied.
	NumRanges       uint32
	RangesTruncated bool
	CoreRanges      [CoreRangeMax]CoreRange
}

// Ranges returns the core ranges copied (aliases e).
func (f *CBFields) Ranges() []CoreRange {
	return f.CoreRanges[:min(int(f.NumRanges), CoreRangeMax)]
}

// decodeCBAlloc fills e from the record of kind KindCBAlloc whose header
// Peek returned. It checks the flags against the count and allocates
// nothing.
func decodeCBAlloc(h *Header, e *Event) error {
	w, err := view[CBAllocWire](h)
	if err != nil {
		return err
	}
	*e = Event{Seq: w.Hdr.Seq, TsNs: w.Hdr.TsNs, Pid: w.Hdr.Pid, Tid: w.Hdr.Tid, Kind: w.Hdr.Kind,
		Device: w.Device, DeviceVptr: w.DeviceVptr, DeviceKind: w.DeviceKind, Chip: w.Chip,
		BufferType: -1, Address: w.Address, Size: w.Size, Global: w.Global != 0,
		ReadError: w.ReadError != 0, LostBefore: w.LostBefore}
	known, truncated := w.Flags&CBRangesKnown != 0, w.Flags&CBRangesTruncated != 0
	switch {
	case w.Flags&^(CBRangesKnown|CBRangesTruncated) != 0 || truncated && !known:
		return fmt.Errorf("cb_alloc record seq %d: flags %#x", w.Hdr.Seq, w.Flags)
	case known && truncated != (w.Nranges > uint32(CoreRangeMax)):
		return fmt.Errorf("cb_alloc record seq %d: %d ranges, truncated flag %v", w.Hdr.Seq, w.Nranges, truncated)
	case known:
		e.RangesKnown, e.NumRanges, e.RangesTruncated, e.CoreRanges = true, w.Nranges, truncated, w.Ranges
	}
	return nil
}

// appendCoreRanges writes "core_ranges" ([[x0,y0,x1,y1],...]) and, when the
// set had more than were copied, "core_ranges_total"; nothing when the layout
// gave no CoreRangeSet.
func appendCoreRanges(buf []byte, e *Event) []byte {
	if !e.RangesKnown {
		return buf
	}
	buf = append(buf, `,"core_ranges":[`...)
	for i, r := range e.Ranges() {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, '[')
		buf = appendUint(buf, uint64(r.X0))
		buf = append(buf, ',')
		buf = appendUint(buf, uint64(r.Y0))
		buf = append(buf, ',')
		buf = appendUint(buf, uint64(r.X1))
		buf = append(buf, ',')
		buf = appendUint(buf, uint64(r.Y1))
		buf = append(buf, ']')
	}
	buf = append(buf, ']')
	if e.RangesTruncated {
		buf = append(buf, `,"core_ranges_total":`...)
		buf = appendUint(buf, uint64(e.NumRanges))
	}
	return buf
}
