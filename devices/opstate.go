package devices

import "github.com/tttrace/tttrace/events"

// The TT-NN ops of one process (issue #31, docs/ndjson.md "Ops"): a row
// per (op, device op) the process's records were made in, and, for each
// live buffer allocated in an op, its row (for its leak). The rules that
// fill them are in ops.go.

// MaxOpRows bounds the rows kept per process; records of further rows are
// counted in OpsDropped, not kept.
const MaxOpRows = 4096

// OpRef names the op a leak or a failed allocation was made in: its
// Python name and device op (docs/ndjson.md "Ops").
type OpRef struct {
	// Name: "" for a device op launched where no op is live.
	Name     string `json:"name"`
	DeviceOp string `json:"device_op,omitempty"`
	// RuntimeID and Depth: of the record itself (a failed allocation);
	// absent on a leak, whose row names its op.
	RuntimeID *uint64 `json:"runtime_id,omitempty"`
	Depth     uint8   `json:"depth,omitempty"`
}

// OpRow is what a process did inside one (op, device op): the summary's
// ops rows.
type OpRow struct {
	Name     string `json:"name"`
	DeviceOp string `json:"device_op,omitempty"`
	// Calls: calls of Name for the row without a device op, launches of
	// DeviceOp inside Name otherwise.
	Calls  uint64 `json:"calls"`
	Allocs uint64 `json:"allocs"`
	Bytes  uint64 `json:"bytes"`
	// PeakDRAM / PeakL1: the process's largest DRAM / L1 buffer bytes
	// (over its chips) right after one of the row's allocations.
	PeakDRAM uint64 `json:"peak_dram_bytes"`
	PeakL1   uint64 `json:"peak_l1_bytes"`
	// CBBytes: the per-core sizes of the local CBs laid out in it.
	CBBytes       uint64 `json:"cb_bytes"`
	AllocFailures uint64 `json:"alloc_failures"`
	LeakedBuffers uint64 `json:"leaked_buffers"`
	LeakedBytes   uint64 `json:"leaked_bytes"`
}

// opKey is a row's (op, device op), as events.OpNames ids.
type opKey struct{ op, dev uint32 }

// opTab is a process's rows and the row of each live buffer.
type opTab struct {
	idx     map[opKey]uint16 // row number + 1
	rows    []OpRow
	keys    []opKey
	dropped uint64 // records of rows past MaxOpRows
	// last: the op of the process's last recorded allocation (zero: in
	// none), for the live view.
	last events.OpFields
	// bufRow[slot] is the row + 1 of the buffer in that slot, made when
	// the first buffer allocated in an op is recorded (chunked as the
	// slots are); 0: none.
	bufRow [][]uint16
}

// row returns the row of f's op, making it; nil past MaxOpRows or outside
// an op.
func (t *opTab) row(f *events.OpFields) (*OpRow, uint16) {
	if !f.InOp() {
		return nil, 0
	}
	k := opKey{f.Op, f.DeviceOp}
	if i, ok := t.idx[k]; ok {
		return &t.rows[i-1], i
	}
	if len(t.rows) >= MaxOpRows {
		t.dropped++
		return nil, 0
	}
	if t.idx == nil {
		t.idx = map[opKey]uint16{}
	}
	t.rows = append(t.rows, OpRow{Name: events.OpNames.Name(k.op), DeviceOp: events.OpNames.Name(k.dev)})
	t.keys = append(t.keys, k)
	t.idx[k] = uint16(len(t.rows))
	return &t.rows[len(t.rows)-1], uint16(len(t.rows))
}

// setBuf notes that the buffer in slot was allocated in row r (r+1; 0:
// in no op).
func (t *opTab) setBuf(slot uint32, r uint16) {
	c := int(slot / chunkLen)
	if r == 0 && c >= len(t.bufRow) {
		return
	}
	for c >= len(t.bufRow) {
		t.bufRow = append(t.bufRow, nil)
	}
	if t.bufRow[c] == nil {
		if r == 0 {
			return
		}
		t.bufRow[c] = make([]uint16, chunkLen)
	}
	t.bufRow[c][slot%chunkLen] = r
}

// bufOf is the row + 1 of the buffer in slot; 0: in no op.
func (t *opTab) bufOf(slot uint32) uint16 {
	c := int(slot / chunkLen)
	if c >= len(t.bufRow) || t.bufRow[c] == nil {
		return 0
	}
	return t.bufRow[c][slot%chunkLen]
}

// ref names row r (r+1) for a leak.
func (t *opTab) ref(r uint16) *OpRef {
	if r == 0 || int(r) > len(t.rows) {
		return nil
	}
	row := &t.rows[r-1]
	return &OpRef{Name: row.Name, DeviceOp: row.DeviceOp}
}

// refOf names the op of a record (a failed allocation's request).
func refOf(f *events.OpFields) *OpRef {
	if !f.InOp() {
		return nil
	}
	r := &OpRef{Name: events.OpNames.Name(f.Op), DeviceOp: events.OpNames.Name(f.DeviceOp), Depth: f.OpDepth}
	if f.HasRuntimeID {
		id := f.RuntimeID
		r.RuntimeID = &id
	}
	return r
}
