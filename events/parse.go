package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ParseJSON is the inverse of AppendJSON: it fills e from one NDJSON event
// line (docs/ndjson.md, "Event kinds"), so that AppendJSON(e) writes the
// line again. It checks every field the kind needs (types, ranges, the
// device fields its device_kind names) and says which is wrong; fields it
// does not know are ignored, as the contract asks of consumers. ok is false
// (and err nil) when the line is a record but not an event (a site, a
// notice, a summary: their "type" is not an event kind).
func ParseJSON(line []byte, e *Event) (ok bool, err error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(line, &head); err != nil {
		return false, fmt.Errorf("not a JSON object: %w", err)
	}
	k, known := KindOf(head.Type)
	if !known {
		// Other records' fields of the same names have other types (a
		// notice's "buffer" is an object).
		return false, nil
	}
	var j jsonEvent
	if err := json.Unmarshal(line, &j); err != nil {
		return false, fmt.Errorf("%s: %w", head.Type, err)
	}
	*e = Event{Kind: k, Chip: -1}
	if j.TsNs == nil || j.Pid == nil {
		return false, fmt.Errorf("%s: no ts_ns or pid", j.Type)
	}
	e.TsNs, e.Pid = *j.TsNs, *j.Pid
	if !k.Synthesized() {
		if j.Seq == nil || j.Tid == nil {
			return false, fmt.Errorf("%s: no seq or tid", j.Type)
		}
		e.Seq, e.Tid = *j.Seq, *j.Tid
	}
	e.LostBefore, e.ReadError = j.LostBefore, j.ReadError
	hex := func(name, s string) uint64 {
		if err != nil {
			return 0
		}
		v, perr := parseHex(s)
		if perr != nil {
			err = fmt.Errorf("%s: %s %q: %w", j.Type, name, s, perr)
		}
		return v
	}
	switch k {
	case KindAlloc, KindFree, KindMarkDeallocated:
		e.Object = hex("buffer", j.Buffer)
		err = errors.Join(err, j.device(e), j.bufferFields(e))
		e.Hooked, e.OwnsData, e.Site = j.Hooked, j.OwnsData, j.Site
		if j.StackLost {
			e.Stack = StackLost
		}
		if j.SiteMissing != "" {
			m, ok := ParseSiteMissing(j.SiteMissing)
			if !ok && err == nil {
				err = fmt.Errorf("%s: site_missing %q", j.Type, j.SiteMissing)
			}
			e.SiteMissing = m
		}
	case KindView:
		err = errors.Join(j.device(e), j.bufferFields(e))
	case KindCBAlloc:
		err = errors.Join(j.device(e), j.coreRanges(e))
		e.Address, e.Size, e.Global = j.Address, j.Size, j.Global
	case KindCBFree, KindDeviceClose, KindMeshClose:
		err = j.device(e)
		if k == KindDeviceClose && e.DeviceKind == DeviceChip && j.DevicePtr != "" {
			e.Device = hex("device_ptr", j.DevicePtr)
		}
	case KindCBLayout, KindProgramDispatch:
		e.Object = hex("program", j.Program)
		err = errors.Join(err, j.device(e))
	case KindCBTeardown, KindProgramDestroy:
		e.Object = hex("program", j.Program)
	case KindAllocCapacity:
		e.Object = hex("manager", j.Manager)
		err = errors.Join(err, j.device(e))
		t, ok := ParseBufferType(j.BufferType)
		if !ok && err == nil {
			err = fmt.Errorf("%s: buffer_type %q", j.Type, j.BufferType)
		}
		e.BufferType = t
		e.Banks, e.BankSize, e.Alignment, e.Base, e.Limit = j.Banks, j.BankSize, j.Alignment, j.Base, j.Limit
	case KindAllocRequest:
		e.Object = hex("manager", j.Manager)
		e.BufferType = -1
		e.Size, e.PageSize, e.BottomUp, e.Shards, e.AllocatorID, e.Site = j.Size, j.PageSize, j.BottomUp, j.NumShards, j.AllocatorID, j.Site
	case KindAllocOom:
		e.Site = j.Site
	case KindTrace:
		e.BufferType = -1
		var name string
		if json.Unmarshal(j.Op, &name) != nil {
			name = string(j.Op)
		}
		op, ok := traceOpOf(name)
		if !ok {
			return false, fmt.Errorf("trace: op %s", j.Op)
		}
		j.Op = j.TTNNOp
		e.TraceOp = op
		err = j.device(e)
		if j.TraceID != nil {
			e.TraceID, e.TraceIDKnown = *j.TraceID, true
		}
		if j.CQ != nil {
			e.CQ, e.CQKnown = *j.CQ, true
		}
		e.Blocking = j.Blocking
	case KindOpEnter:
		ent, ok := ParseOpEntered(j.Entered)
		if !ok {
			return false, fmt.Errorf("op_enter: entered %q", j.Entered)
		}
		e.Entered = ent
	case KindRuntimeID:
		if j.Program != "" {
			e.Object = hex("program", j.Program)
		}
		if j.RuntimeID == nil {
			return false, errors.New("runtime_id: no runtime_id")
		}
		e.RuntimeID, e.HasRuntimeID = *j.RuntimeID, true
	case KindFork:
		e.ParentPid = j.PPid
	case KindLost:
		e.LostBefore = j.Count
	case KindExit:
		e.ExitCode, e.ExitSignal = j.ExitCode, j.ExitSignal
	default:
		// The tracer's own records (link_map, ...) and those that describe
		// an alloc (stack, ...) are never NDJSON lines.
		return false, fmt.Errorf("%s is not a record of the NDJSON stream", j.Type)
	}
	if err == nil && len(j.Op) > 0 {
		rid, has := e.RuntimeID, e.HasRuntimeID
		err = j.op(e)
		if k == KindRuntimeID {
			// Its own id, whatever its op's says.
			e.RuntimeID, e.HasRuntimeID = rid, has
		}
	}
	if err != nil {
		return false, err
	}
	return true, nil
}

// op fills e's OpFields from the "op" object (docs/ndjson.md, "Ops").
func (j *jsonEvent) op(e *Event) error {
	var o struct {
		Name      *string `json:"name"`
		DeviceOp  string  `json:"device_op"`
		RuntimeID *uint64 `json:"runtime_id"`
		Depth     *uint8  `json:"depth"`
	}
	if err := json.Unmarshal(j.Op, &o); err != nil {
		return fmt.Errorf("%s: op: %w", j.Type, err)
	}
	switch {
	case o.Name == nil || o.Depth == nil:
		return fmt.Errorf("%s: op without a name or a depth", j.Type)
	case *o.Name == "" && (o.DeviceOp == "" || *o.Depth != 0):
		// No top-level op live: a device op alone, at depth 0.
		return fmt.Errorf("%s: op without a name names a device op at depth 0", j.Type)
	case *o.Name != "" && *o.Depth == 0:
		return fmt.Errorf("%s: op %q at depth 0", j.Type, *o.Name)
	}
	if *o.Name != "" {
		if e.Op = OpNames.Intern(*o.Name); e.Op == 0 {
			return fmt.Errorf("%s: op %q: more than %d op names", j.Type, *o.Name, MaxOpNames)
		}
	}
	if o.DeviceOp != "" {
		if e.DeviceOp = OpNames.Intern(o.DeviceOp); e.DeviceOp == 0 {
			return fmt.Errorf("%s: device_op %q: more than %d op names", j.Type, o.DeviceOp, MaxOpNames)
		}
	}
	if o.RuntimeID != nil {
		e.RuntimeID, e.HasRuntimeID = *o.RuntimeID, true
	}
	e.OpDepth = *o.Depth
	return nil
}

// KindOf is the kind whose NDJSON "type" is name.
func KindOf(name string) (Kind, bool) {
	if name == "" {
		return 0, false
	}
	for k, n := range kindNames {
		if n == name {
			return Kind(k), true
		}
	}
	return 0, false
}

func traceOpOf(name string) (TraceOp, bool) {
	for o, n := range traceOpNames {
		if n != "" && n == name {
			return TraceOp(o), true
		}
	}
	return 0, false
}

// parseHex reads a "0x..." pointer as appendHex writes it.
func parseHex(s string) (uint64, error) {
	if !strings.HasPrefix(s, "0x") {
		return 0, errors.New("not a 0x hex number")
	}
	return strconv.ParseUint(s[2:], 16, 64)
}

// jsonEvent holds the fields of every event kind's line.
type jsonEvent struct {
	Type       string  `json:"type"`
	Seq        *uint64 `json:"seq"`
	TsNs       *uint64 `json:"ts_ns"`
	Pid        *uint32 `json:"pid"`
	Tid        *uint32 `json:"tid"`
	LostBefore uint64  `json:"lost_before"`
	ReadError  bool    `json:"read_error"`

	DeviceKind string `json:"device_kind"`
	Device     *int32 `json:"device"`
	Mesh       string `json:"mesh"`
	DevicePtr  string `json:"device_ptr"`
	DeviceVptr string `json:"device_vptr"`

	Buffer     string `json:"buffer"`
	Program    string `json:"program"`
	Manager    string `json:"manager"`
	BufferType string `json:"buffer_type"`
	Address    uint64 `json:"address"`
	Size       uint64 `json:"size"`
	PageSize   uint64 `json:"page_size"`
	Hooked     bool   `json:"hooked"`
	OwnsData   bool   `json:"owns_data"`
	Site       uint32 `json:"site"`
	StackLost  bool   `json:"stack_lost"`
	// SiteMissing: why an alloc has no complete site (SiteMissing.String).
	SiteMissing string `json:"site_missing"`
	Global      bool   `json:"global"`

	CoreRanges      *[][]uint16 `json:"core_ranges"`
	CoreRangesTotal *uint32     `json:"core_ranges_total"`

	Banks       uint32 `json:"banks"`
	BankSize    uint64 `json:"bank_size"`
	Alignment   uint64 `json:"alignment"`
	Base        uint64 `json:"base"`
	Limit       uint64 `json:"interleaved_limit"`
	BottomUp    bool   `json:"bottom_up"`
	NumShards   uint32 `json:"num_shards"`
	AllocatorID uint32 `json:"allocator_id"`

	// Op is a trace record's call (a string), any other's TT-NN op (an
	// object), which a trace record has as TTNNOp.
	Op       json.RawMessage `json:"op"`
	TTNNOp   json.RawMessage `json:"ttnn_op"`
	TraceID  *uint32         `json:"trace_id"`
	CQ       *uint8          `json:"cq"`
	Blocking bool            `json:"blocking"`

	Entered   string  `json:"entered"`
	RuntimeID *uint64 `json:"runtime_id"`

	PPid       uint32 `json:"ppid"`
	Count      uint64 `json:"count"`
	ExitCode   int    `json:"exit_code"`
	ExitSignal int    `json:"exit_signal"`
}

// device fills e's device fields from device_kind and the fields it names.
func (j *jsonEvent) device(e *Event) error {
	var err error
	switch j.DeviceKind {
	case "none":
		e.DeviceKind = DeviceNone
	case "chip":
		e.DeviceKind = DeviceChip
		if j.Device == nil {
			return fmt.Errorf("%s: device_kind chip without device", j.Type)
		}
		e.Chip = *j.Device
	case "mesh":
		e.DeviceKind = DeviceMesh
		e.Device, err = parseHex(j.Mesh)
	case "unknown":
		e.DeviceKind = DeviceUnknown
		e.Device, err = parseHex(j.DevicePtr)
		if err == nil {
			e.DeviceVptr, err = parseHex(j.DeviceVptr)
		}
	default:
		return fmt.Errorf("%s: device_kind %q", j.Type, j.DeviceKind)
	}
	if err != nil {
		return fmt.Errorf("%s: device fields: %w", j.Type, err)
	}
	return nil
}

// coreRanges fills a cb_alloc's CBFields from core_ranges (absent: not
// known) and core_ranges_total (present only when the set had more ranges
// than a record carries), as appendCoreRanges writes them.
func (j *jsonEvent) coreRanges(e *Event) error {
	if j.CoreRanges == nil {
		if j.CoreRangesTotal != nil {
			return fmt.Errorf("%s: core_ranges_total without core_ranges", j.Type)
		}
		return nil
	}
	rs := *j.CoreRanges
	if len(rs) > CoreRangeMax {
		return fmt.Errorf("%s: %d core_ranges, more than %d", j.Type, len(rs), CoreRangeMax)
	}
	e.RangesKnown, e.NumRanges = true, uint32(len(rs))
	if t := j.CoreRangesTotal; t != nil {
		if *t <= uint32(CoreRangeMax) || len(rs) != CoreRangeMax {
			return fmt.Errorf("%s: core_ranges_total %d with %d core_ranges", j.Type, *t, len(rs))
		}
		e.NumRanges, e.RangesTruncated = *t, true
	}
	for i, r := range rs {
		if len(r) != 4 {
			return fmt.Errorf("%s: core range %v: not [x0,y0,x1,y1]", j.Type, r)
		}
		e.CoreRanges[i] = CoreRange{X0: r[0], Y0: r[1], X1: r[2], Y1: r[3]}
	}
	return nil
}

// bufferFields fills the fields of a buffer's line.
func (j *jsonEvent) bufferFields(e *Event) error {
	t, ok := ParseBufferType(j.BufferType)
	if !ok {
		// AppendJSON writes an invalid type as BufferType(N).
		var n int32
		if _, err := fmt.Sscanf(j.BufferType, "BufferType(%d)", &n); err != nil || BufferType(n).String() != j.BufferType {
			return fmt.Errorf("%s: buffer_type %q", j.Type, j.BufferType)
		}
		t = BufferType(n)
	}
	e.BufferType, e.Address, e.Size, e.PageSize = t, j.Address, j.Size, j.PageSize
	return nil
}
