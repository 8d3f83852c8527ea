package ttmetal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// The layout field table: everything tttrace knows about each value of a
// Layout, in one row. It drives the layout JSON (files given with --layout,
// doctor's output, the built-in profiles in profiles/), what an unknown
// field costs, the names DWARF gives the members, doctor's listing, and the
// BPF side's lib_info.off (enum layout_field of bpf/tttrace.h, which
// internal/genfield brings to Go as LayoutField; TestFieldTableMatchesBPF
// holds the table and the enum together, probes' TestLibInfoMatchesBPF the
// enum and lib_info). A new field is one enum value in bpf/tttrace.h, one
// member of Layout and one row here (docs/layout.md, "Adding a field").

// fieldKind says what a row's value is.
type fieldKind uint8

const (
	// kindOffset is a byte offset, -1 when the layout lacks the field.
	kindOffset fieldKind = iota
	// kindValue is a number that is not an offset (a width, an enum value).
	kindValue
)

// noSlot marks a row the BPF lib_info does not carry.
const noSlot LayoutField = 0xff

// field is one row of the layout field table.
type field struct {
	// key is the JSON key (layout files, doctor --json, profiles). Keys are
	// a public format (docs/layout.md): never renamed.
	key string
	// member is the C++ member, for people; for Buffer members (buffer) also
	// the name DWARF gives it.
	member string
	// slot is the index in BPF lib_info.off (noSlot: not there).
	slot LayoutField
	kind fieldKind
	// buffer: a member of Buffer (of BufferImpl in a pimpl layout).
	buffer bool
	// required: tracing cannot count without it; a layout file must give
	// it (>= 0), DWARF must define it.
	required bool
	// optional: a layout file may omit the key; def is then its value.
	optional bool
	def      int64
	// lacks says what a layout without the field (-1) costs.
	lacks string
	// accessor is the out-of-line method whose code reads the field
	// (accessors.go), nil when there is none.
	accessor *accessor
	get      func(*Layout) *int64
}

// reads names an accessor of a row: its method, mangled name (outside
// namespace v0) and the bytes of the field (0: an enum, 1, 2 or 4).
func reads(method, mangled string, size int) *accessor {
	return &accessor{method: method, name: mangled, size: size}
}

// Buffer::size() const and device() const: exported out of line by pimpl
// builds only (profiles/v2.json's fingerprint names them too).
const (
	symPimplSize   = "_ZNK2tt8tt_metal6Buffer4sizeEv"
	symPimplDevice = "_ZNK2tt8tt_metal6Buffer6deviceEv"
)

// layoutFields is the table, in the order of the JSON and of doctor.
var layoutFields = []field{
	{key: "buffer_impl_ptr", member: "BufferImpl pointer", slot: LFBufferImplPtr,
		get: func(l *Layout) *int64 { return &l.BufferImplPtr }},
	{key: "device", member: "device_", slot: LFDevice, buffer: true, required: true,
		accessor: reads("Buffer::device() const", symPimplDevice, 8),
		get:      func(l *Layout) *int64 { return &l.Device }},
	{key: "size", member: "size_", slot: LFSize, buffer: true, required: true,
		accessor: reads("Buffer::size() const", symPimplSize, 8),
		get:      func(l *Layout) *int64 { return &l.Size }},
	{key: "buffer_type", member: "buffer_type_", slot: LFBufferType, buffer: true,
		lacks:    "allocations cannot be counted by type",
		accessor: reads("Buffer::buffer_type() const", "_ZNK2tt8tt_metal6Buffer11buffer_typeEv", 0),
		get:      func(l *Layout) *int64 { return &l.Type }},
	{key: "owns_data", member: "owns_data_", slot: LFOwnsData, buffer: true,
		lacks:    "non-owning buffers cannot be told apart",
		accessor: reads("Buffer::owns_data() const", "_ZNK2tt8tt_metal6Buffer9owns_dataEv", 1),
		get:      func(l *Layout) *int64 { return &l.OwnsData }},
	{key: "allocation_status", member: "allocation_status_", slot: LFAllocationStatus, buffer: true,
		lacks:    "the lifecycle probe plan is impossible",
		accessor: reads("Buffer::is_allocated() const", "_ZNK2tt8tt_metal6Buffer12is_allocatedEv", 1),
		get:      func(l *Layout) *int64 { return &l.Status }},
	{key: "hooked_allocation", member: "hooked_allocation_", slot: LFHookedAllocation, buffer: true,
		lacks:    "graph-capture (hooked) allocations would be counted as real",
		accessor: reads("Buffer::hooked_allocation() const", "_ZNK2tt8tt_metal6Buffer17hooked_allocationEv", 1),
		get:      func(l *Layout) *int64 { return &l.Hooked }},
	{key: "address", member: "address_", slot: LFAddress, buffer: true, required: true,
		accessor: reads("Buffer::address() const", "_ZNK2tt8tt_metal6Buffer7addressEv", 8),
		get:      func(l *Layout) *int64 { return &l.Address }},
	{key: "page_size", member: "page_size_", slot: LFPageSize, buffer: true,
		lacks:    "events carry no page size (the ledger does not need it)",
		accessor: reads("Buffer::page_size() const", "_ZNK2tt8tt_metal6Buffer9page_sizeEv", 8),
		get:      func(l *Layout) *int64 { return &l.PageSize }},
	{key: "device_id", member: "Device::id_", slot: LFDeviceID, required: true,
		get: func(l *Layout) *int64 { return &l.DeviceID }},
	// The width the library's own code reads buffer_type_ at: BufferType is
	// an int enum in most builds, one byte in some.
	{key: "buffer_type_width", member: "buffer_type_ width", slot: LFBufferTypeWidth, kind: kindValue,
		optional: true, def: 4,
		get: func(l *Layout) *int64 { return &l.TypeWidth }},
	// AllocationStatus::ALLOCATED; the lifecycle plan's BPF reads it from
	// lc_libs, not lib_info.
	{key: "allocated_value", member: "ALLOCATED", slot: noSlot, kind: kindValue, optional: true, def: -1,
		lacks: "the lifecycle probe plan is impossible",
		get:   func(l *Layout) *int64 { return &l.Allocated }},
	// The uint32_t id_ of the MeshCommandQueue the 2026 trace overloads take
	// (tt-metalium/mesh_command_queue.hpp: after the vptr and mesh_device_).
	{key: "mesh_cq_id", member: "distributed::MeshCommandQueue::id_", slot: LFMeshCqID, optional: true, def: -1,
		lacks: "Metal trace calls through a MeshCommandQueue& are not seen",
		get:   func(l *Layout) *int64 { return &l.MeshCQID }},
	// CoreRangeSet (tt-metalium/core_coord.hpp): what the CB probe reads the
	// ranges of a CB through; a layout without them sends cb_alloc records
	// with no core_ranges.
	{key: "core_ranges", member: "CoreRangeSet::ranges_", slot: LFCoreRanges, optional: true, def: -1,
		lacks: "circular buffers carry no core ranges (no per-core residency)",
		get:   func(l *Layout) *int64 { return &l.CoreRanges }},
	{key: "core_range_size", member: "sizeof(CoreRange)", slot: LFCoreRangeSize, kind: kindValue, optional: true, def: -1,
		lacks: "circular buffers carry no core ranges (no per-core residency)",
		get:   func(l *Layout) *int64 { return &l.CoreRangeSize }},
	{key: "core_range_start", member: "CoreRange::start_coord", slot: LFCoreRangeStart, optional: true, def: -1,
		lacks: "circular buffers carry no core ranges (no per-core residency)",
		get:   func(l *Layout) *int64 { return &l.CoreRangeStart }},
	{key: "core_range_end", member: "CoreRange::end_coord", slot: LFCoreRangeEnd, optional: true, def: -1,
		lacks: "circular buffers carry no core ranges (no per-core residency)",
		get:   func(l *Layout) *int64 { return &l.CoreRangeEnd }},
	{key: "core_coord_x", member: "CoreCoord::x", slot: LFCoreCoordX, optional: true, def: -1,
		lacks: "circular buffers carry no core ranges (no per-core residency)",
		get:   func(l *Layout) *int64 { return &l.CoreCoordX }},
	{key: "core_coord_y", member: "CoreCoord::y", slot: LFCoreCoordY, optional: true, def: -1,
		lacks: "circular buffers carry no core ranges (no per-core residency)",
		get:   func(l *Layout) *int64 { return &l.CoreCoordY }},
	{key: "core_coord_width", member: "CoreCoord::x width", slot: LFCoreCoordWidth, kind: kindValue, optional: true, def: -1,
		lacks: "circular buffers carry no core ranges (no per-core residency)",
		get:   func(l *Layout) *int64 { return &l.CoreCoordWidth }},
}

func fieldByJSON(key string) *field {
	for i := range layoutFields {
		if layoutFields[i].key == key {
			return &layoutFields[i]
		}
	}
	return nil
}

// emptyLayout is a layout that knows nothing: every offset -1, every value
// its default.
func emptyLayout(name string) Layout {
	l := Layout{Name: name}
	for _, f := range layoutFields {
		*f.get(&l) = -1
		if f.optional {
			*f.get(&l) = f.def
		}
	}
	return l
}

// what names the field's member, as an unknown-field message starts.
func (f *field) what() string {
	if f.key == "allocation_status" || f.key == "allocated_value" {
		return "allocation_status_ / ALLOCATED" // one cost: said once
	}
	if f.slot >= LFCoreRanges && f.slot <= LFCoreCoordWidth {
		return "CoreRangeSet / CoreRange / CoreCoord" // one cost: said once
	}
	return f.member
}

// Offsets is the layout as BPF's lib_info.off holds it, indexed by enum
// layout_field.
func (l Layout) Offsets() [LFCount]int64 {
	var off [LFCount]int64
	for _, f := range layoutFields {
		if f.slot != noSlot {
			off[f.slot] = *f.get(&l)
		}
	}
	return off
}

// spanMax is SPAN_MAX of bpf/tttrace.bpf.c: the longest span BPF reads.
const spanMax = 128

// Span is the bytes of the Buffer (BufferImpl) that hold every field
// BPF reads from it, at the widths it reads them: the offset of the first
// and the length to the end of the last. Length 0 when that is longer
// than spanMax (BPF then reads the fields one by one).
func (l Layout) Span() (lo, n uint32) {
	first, end := int64(-1), int64(-1)
	for _, f := range layoutFields {
		off := *f.get(&l)
		if !f.buffer || off < 0 {
			continue
		}
		width := int64(8)
		if f.accessor != nil {
			width = int64(f.accessor.size)
		}
		if width == 0 { // an enum: at the width the library reads it
			width = l.TypeWidth
			if width != 1 && width != 2 {
				width = 4
			}
		}
		if first < 0 || off < first {
			first = off
		}
		end = max(end, off+width)
	}
	if first < 0 || end-first > spanMax {
		return 0, 0
	}
	return uint32(first), uint32(end - first)
}

// MarshalJSON writes the layout with the table's keys, in its order.
func (l Layout) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	name, _ := json.Marshal(l.Name)
	b.WriteString(`{"name":`)
	b.Write(name)
	for _, f := range layoutFields {
		fmt.Fprintf(&b, ",%q:%d", f.key, *f.get(&l))
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads a layout written with the table's keys. Every key
// must be known, every field present except the optional ones (which take
// their default): a missing offset is an error, not 0.
func (l *Layout) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	for k := range raw {
		if k != "name" && fieldByJSON(k) == nil {
			return fmt.Errorf("unknown key %q", k)
		}
	}
	out := Layout{}
	if v, ok := raw["name"]; ok {
		if err := json.Unmarshal(v, &out.Name); err != nil {
			return fmt.Errorf("%q: %w", "name", err)
		}
	}
	for _, f := range layoutFields {
		p := f.get(&out)
		v, ok := raw[f.key]
		switch {
		case !ok && f.optional:
			*p = f.def
		case !ok:
			return fmt.Errorf("no %q (use -1 for a field the layout lacks)", f.key)
		default:
			if err := json.Unmarshal(v, p); err != nil {
				return fmt.Errorf("%q: %w", f.key, err)
			}
		}
	}
	*l = out
	return nil
}

// coreRangeMax is CORE_RANGE_MAX of bpf/cb.h: the most bytes of one
// CoreRange the CB probe copies.
const coreRangeMax = 64

// coreRangesKnown reports whether l gives every CoreRangeSet row (the CB
// probe copies core ranges only then).
func (l *Layout) coreRangesKnown() bool {
	return min(l.CoreRanges, l.CoreRangeSize, l.CoreRangeStart, l.CoreRangeEnd,
		l.CoreCoordX, l.CoreCoordY, l.CoreCoordWidth) >= 0
}

// checkCoreRanges refuses CoreRangeSet rows the CB probe cannot read: when
// all are given, sizeof(CoreRange) is 1 to coreRangeMax bytes, the
// coordinates 4 or 8 bytes wide, and both CoreCoords' x and y inside it.
// A row -1 leaves them all unknown, which is no error.
func (l *Layout) checkCoreRanges() error {
	if !l.coreRangesKnown() {
		return nil
	}
	if w := l.CoreCoordWidth; w != 4 && w != 8 {
		return fmt.Errorf("core_coord_width %d: must be 4 or 8", w)
	}
	if l.CoreRangeSize == 0 || l.CoreRangeSize > coreRangeMax {
		return fmt.Errorf("core_range_size %d: must be 1 to %d", l.CoreRangeSize, coreRangeMax)
	}
	for _, p := range []int64{l.CoreRangeStart, l.CoreRangeEnd} {
		if end := p + max(l.CoreCoordX, l.CoreCoordY) + l.CoreCoordWidth; end > l.CoreRangeSize {
			return fmt.Errorf("a CoreCoord at %d has its x at %d and y at %d (%d bytes each): past core_range_size %d",
				p, l.CoreCoordX, l.CoreCoordY, l.CoreCoordWidth, l.CoreRangeSize)
		}
	}
	return nil
}

// check refuses a layout tttrace cannot count with.
func (l *Layout) check() error {
	if w := l.TypeWidth; w != 1 && w != 2 && w != 4 {
		return fmt.Errorf("buffer_type_width %d: must be 1, 2 or 4", w)
	}
	if err := l.checkCoreRanges(); err != nil {
		return err
	}
	for _, f := range layoutFields {
		if f.required && *f.get(l) < 0 {
			return fmt.Errorf("%q must be given (>= 0): tttrace cannot count without it", f.key)
		}
	}
	return nil
}

// unknownFields says what a layout lacks and what that costs.
func unknownFields(l *Layout) []string {
	var out []string
	seen := map[string]bool{}
	for _, f := range layoutFields {
		if f.lacks == "" || *f.get(l) >= 0 {
			continue
		}
		if msg := f.what() + ": " + f.lacks; !seen[msg] {
			seen[msg] = true
			out = append(out, msg)
		}
	}
	return out
}

// describeOffsets lists the layout's fields for people, in table order:
// "device_ 16  size_ 24 ...", with "?" for a field the layout lacks.
func describeOffsets(l *Layout, pick func(*field) bool) string {
	var parts []string
	for i := range layoutFields {
		f := &layoutFields[i]
		if !pick(f) {
			continue
		}
		v := *f.get(l)
		s := "?"
		if v >= 0 {
			s = fmt.Sprint(v)
		}
		sep := " "
		if f.kind == kindValue && f.key == "allocated_value" {
			sep = " = "
		}
		parts = append(parts, f.member+sep+s)
	}
	return strings.Join(parts, "  ")
}

// Describe lists the layout for people, from the field table: the BufferImpl
// pointer (pimpl layouts), the Buffer members, then the rest.
func (l *Layout) Describe() []string {
	var out []string
	if l.BufferImplPtr >= 0 {
		out = append(out, fmt.Sprintf("BufferImpl pointer at %d; in BufferImpl:", l.BufferImplPtr))
	}
	out = append(out, describeOffsets(l, func(f *field) bool { return f.buffer && f.kind == kindOffset }))
	out = append(out, describeOffsets(l, func(f *field) bool { return !f.buffer && f.key != "buffer_impl_ptr" }))
	return out
}
