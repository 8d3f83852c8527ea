package events

import (
	"encoding/json"
	"sync"
	"sync/atomic"
)

// TT-NN ops (issue #31, docs/ndjson.md "Ops"): a record made while a
// TT-NN op runs on its thread carries the op in OpFields. The runtime
// fills them from the thread's op frames (the op probes' records); the
// names are interned once in OpNames, so an Event stays free of
// pointers and its decoding allocates nothing.

// OpFields name the op live on the record's thread.
type OpFields struct {
	// Op is the innermost top-level op live on the thread (its Python
	// name, an OpNames id); 0: no op.
	Op uint32
	// DeviceOp is the innermost device operation launched inside Op (its
	// short type name, an OpNames id); 0: none (the op's own allocations
	// outside a device op).
	DeviceOp uint32
	// RuntimeID is the id Program::set_runtime_id gave the launch, when
	// HasRuntimeID.
	RuntimeID    uint64
	HasRuntimeID bool
	// OpDepth is how many top-level ops are live on the thread (1: called
	// from Python); device ops do not count.
	OpDepth uint8
	// Entered is what a KindOpEnter record entered (the fields above are
	// the thread's state right after); 0 on other records.
	Entered OpEntered
	// Launch names DeviceOp's launch for the runtime (a serial number, 0:
	// none), so that its runtime id is joined to the records the launch
	// made before Program::set_runtime_id. Not in NDJSON.
	Launch uint64
}

// InOp reports whether the record was made inside an op: a top-level op,
// or a device op launched on a thread where none is live (Op 0).
func (f *OpFields) InOp() bool { return f.Op != 0 || f.DeviceOp != 0 }

// OpEntered is what an op function's entry began.
type OpEntered uint8

const (
	// OpEnteredOp: a call of a top-level op (Op).
	OpEnteredOp OpEntered = iota + 1
	// OpEnteredLaunch: a launch of a device op (DeviceOp) inside Op.
	OpEnteredLaunch
	// OpEnteredLaunchFrame: a further frame of the launch going on
	// (launch<Op> calling the mesh adapter, invoke<Op> calling
	// launch_on_single_device<Op>): no new launch.
	OpEnteredLaunchFrame
	// OpEnteredUnknown: an op function whose op the runtime could not
	// name.
	OpEnteredUnknown
)

var opEnteredNames = [...]string{OpEnteredOp: "op", OpEnteredLaunch: "launch", OpEnteredLaunchFrame: "launch_frame", OpEnteredUnknown: "unknown"}

func (o OpEntered) String() string {
	if int(o) < len(opEnteredNames) && opEnteredNames[o] != "" {
		return opEnteredNames[o]
	}
	return "none"
}

// ParseOpEntered is the OpEntered whose String is s.
func ParseOpEntered(s string) (OpEntered, bool) {
	for i, n := range opEnteredNames {
		if n != "" && n == s {
			return OpEntered(i), true
		}
	}
	return 0, false
}

// MaxOpNames bounds the names OpNames keeps: a name past it interns as 0
// (no op), which the runtime counts.
const MaxOpNames = 1 << 20

// OpNameTable interns op names: ids from 1, stable for the life of the
// table. Intern is rare (when a library's op table is read, or a saved
// run's record names an op); Name is lock-free.
type OpNameTable struct {
	mu    sync.Mutex
	ids   map[string]uint32
	names atomic.Pointer[[]opName] // names[id-1], append-only
}

// opName is an interned name and its JSON string, made once so the
// NDJSON encoding of an event allocates nothing.
type opName struct{ name, json string }

// OpNames is the process's op name table: what OpFields' ids index.
var OpNames OpNameTable

// Intern returns name's id, adding it when new; 0 for "" or when the
// table is full.
func (t *OpNameTable) Intern(name string) uint32 {
	if name == "" {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.ids[name]; ok {
		return id
	}
	var cur []opName
	if p := t.names.Load(); p != nil {
		cur = *p
	}
	if len(cur) >= MaxOpNames {
		return 0
	}
	if t.ids == nil {
		t.ids = map[string]uint32{}
	}
	q, err := json.Marshal(name)
	if err != nil {
		// Marshal of a string does not fail; invalid UTF-8 is replaced.
		return 0
	}
	next := append(cur[:len(cur):len(cur)], opName{name, string(q)})
	t.names.Store(&next)
	id := uint32(len(next))
	t.ids[name] = id
	return id
}

// Name returns the name of id; "" for 0 or an id never given.
func (t *OpNameTable) Name(id uint32) string {
	p := t.names.Load()
	if id == 0 || p == nil || int(id) > len(*p) {
		return ""
	}
	return (*p)[id-1].name
}

// jsonName is Name as a JSON string, quotes included; `""` for none.
func (t *OpNameTable) jsonName(id uint32) string {
	p := t.names.Load()
	if id == 0 || p == nil || int(id) > len(*p) {
		return `""`
	}
	return (*p)[id-1].json
}

// appendOp writes the op an event was made in (docs/ndjson.md, "TT-NN
// ops"): as "op", but "ttnn_op" on a trace record, whose "op" is its call.
func appendOp(buf []byte, k Kind, f *OpFields) []byte {
	if k == KindTrace {
		buf = append(buf, `,"ttnn_op":{"name":`...)
	} else {
		buf = append(buf, `,"op":{"name":`...)
	}
	// Op 0 (a device op launched where no op is live): its name is "".
	buf = append(buf, OpNames.jsonName(f.Op)...)
	if f.DeviceOp != 0 {
		buf = append(buf, `,"device_op":`...)
		buf = append(buf, OpNames.jsonName(f.DeviceOp)...)
	}
	if f.HasRuntimeID {
		buf = append(buf, `,"runtime_id":`...)
		buf = appendUint(buf, f.RuntimeID)
	}
	buf = append(buf, `,"depth":`...)
	buf = appendUint(buf, uint64(f.OpDepth))
	return append(buf, '}')
}
