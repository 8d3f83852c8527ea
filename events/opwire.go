package events

import "fmt"

// The op probes' records (bpf/ops.h, issue #31): KindOpEnter (struct
// op_enter_record), the entry of a TT-NN op function, and KindRuntimeID
// (struct runtime_id_record), Program::set_runtime_id. Which op each
// names, and the op of every record, is the runtime's (session/ops.go),
// from the op frames the header counts (Header.OpFrames).

// DecodeOpEnter fills e's common fields from an op_enter record and
// returns the record (it aliases raw) for its op id and flags. It checks
// the kind and length and allocates nothing.
func DecodeOpEnter(raw []byte, e *Event) (*OpEnterWire, error) {
	w, err := As[OpEnterWire](raw)
	if err != nil {
		return nil, err
	}
	*e = Event{Seq: w.Hdr.Seq, TsNs: w.Hdr.TsNs, Pid: w.Hdr.Pid, Tid: w.Hdr.Tid, Kind: w.Hdr.Kind,
		Chip: -1, BufferType: -1, LostBefore: w.LostBefore}
	return w, nil
}

// DecodeRuntimeID fills e from a runtime_id record: RuntimeID (with
// HasRuntimeID), and Object the ProgramImpl* the Program holds when the
// record could read it (0 otherwise), the object cb_layout and
// program_dispatch name. It checks the kind, length and flags and
// allocates nothing.
func DecodeRuntimeID(raw []byte, e *Event) error {
	w, err := As[RuntimeIDWire](raw)
	if err != nil {
		return err
	}
	if w.Flags&^RuntimeIDImplKnown != 0 {
		return fmt.Errorf("runtime_id record seq %d: flags %#x", w.Hdr.Seq, w.Flags)
	}
	*e = Event{Seq: w.Hdr.Seq, TsNs: w.Hdr.TsNs, Pid: w.Hdr.Pid, Tid: w.Hdr.Tid, Kind: w.Hdr.Kind,
		Chip: -1, BufferType: -1, LostBefore: w.LostBefore, ReadError: w.ReadError != 0}
	if w.Flags&RuntimeIDImplKnown != 0 {
		e.Object = w.Impl
	}
	e.RuntimeID, e.HasRuntimeID = w.RuntimeID, true
	return nil
}
