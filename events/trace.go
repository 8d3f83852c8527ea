package events

import "fmt"

// Metal trace records (issue 20, docs/ttmetal.md §10): KindTrace, the entry
// of a trace call on a Device or a MeshDevice (struct trace_record). Device,
// DeviceKind and Chip name the device as for any event; TraceFields say
// which call, which trace and which command queue.

// String is the op's NDJSON name: begin, end, replay, release.
func (o TraceOp) String() string {
	if int(o) < len(traceOpNames) && traceOpNames[o] != "" {
		return traceOpNames[o]
	}
	return fmt.Sprintf("trace_op(%d)", uint8(o))
}

// TraceFields are the fields only KindTrace sets.
type TraceFields struct {
	TraceOp TraceOp
	// TraceID is the tid of a Device's trace or the value of a
	// MeshTraceId; valid when TraceIDKnown (the one-argument
	// begin_mesh_trace(cq) takes its id inside: its begin has none).
	TraceID      uint32
	TraceIDKnown bool
	// CQ is the command queue (not on release).
	CQ      uint8
	CQKnown bool
	// Blocking: a replay that waits for the device.
	Blocking bool
}

// DecodeTrace fills e from one raw record of kind KindTrace. It checks the
// kind and length and allocates nothing.
func DecodeTrace(raw []byte, e *Event) error {
	h, err := Peek(raw)
	if err != nil {
		return err
	}
	if h.Kind != KindTrace {
		return fmt.Errorf("record seq %d: kind %s is not a trace record", h.Seq, h.Kind)
	}
	w, err := As[TraceWire](raw)
	if err != nil {
		return err
	}
	*e = Event{Seq: w.Hdr.Seq, TsNs: w.Hdr.TsNs, Pid: w.Hdr.Pid, Tid: w.Hdr.Tid, Kind: w.Hdr.Kind,
		Device: w.Device, DeviceVptr: w.DeviceVptr, DeviceKind: w.DeviceKind, Chip: w.Chip,
		BufferType: -1, ReadError: w.ReadError != 0, LostBefore: w.LostBefore}
	if e.DeviceKind != DeviceChip {
		e.Chip = -1
	}
	e.TraceOp = w.Op
	e.TraceID, e.TraceIDKnown = w.TraceID, w.Flags&TraceIDKnown != 0
	e.CQ, e.CQKnown = w.Cq, w.Flags&TraceCqKnown != 0
	e.Blocking = w.Flags&TraceBlocking != 0
	return nil
}

// appendTrace writes a trace record's own fields.
func appendTrace(buf []byte, e *Event) []byte {
	buf = append(buf, `,"op":"`...)
	buf = append(buf, e.TraceOp.String()...)
	buf = append(buf, '"')
	buf = appendDevice(buf, e)
	if e.TraceIDKnown {
		buf = append(buf, `,"trace_id":`...)
		buf = appendUint(buf, uint64(e.TraceID))
	}
	if e.CQKnown {
		buf = append(buf, `,"cq":`...)
		buf = appendUint(buf, uint64(e.CQ))
	}
	if e.TraceOp == TraceReplay {
		buf = appendBool(buf, "blocking", e.Blocking)
	}
	return buf
}
