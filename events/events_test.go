package events

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// wire encodes w as the ring buffer holds it (little endian, bpf2go's
// layout), independently of Decode's unsafe cast.
func wire(t testing.TB, w Wire) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, w); err != nil {
		t.Fatal(err)
	}
	if b.Len() != WireSize {
		t.Fatalf("encoded %d bytes, WireSize is %d", b.Len(), WireSize)
	}
	return b.Bytes()
}

func TestDecode(t *testing.T) {
	w := Wire{
		Hdr:    Header{Seq: 77, TsNs: 123456789, Pid: 4242, Tid: 4243, Kind: KindAlloc},
		Object: 0x55d0c0ffee00, Device: 0x7f00dead0000, DeviceVptr: 0x7f00beef0010,
		Address: 0x10000, Size: 4096, PageSize: 1024, LostBefore: 3, ParentPid: 17, WaitStatus: 9, Chip: 35,
		BufferType: int32(L1Small), DeviceKind: DeviceChip,
		Hooked: 1, OwnsData: 1, Status: 1, Global: 1, ReadError: 1,
	}
	var e Event
	if err := Decode(wire(t, w), &e); err != nil {
		t.Fatal(err)
	}
	want := Event{Seq: 77, TsNs: 123456789, Pid: 4242, Tid: 4243, Kind: KindAlloc, Object: 0x55d0c0ffee00,
		Device: 0x7f00dead0000, DeviceVptr: 0x7f00beef0010, DeviceKind: DeviceChip, Chip: 35, BufferType: L1Small,
		Address: 0x10000, Size: 4096, PageSize: 1024, Hooked: true, OwnsData: true, Status: 1, Global: true,
		ReadError: true, LostBefore: 3, ParentPid: 17, WaitStatus: 9}
	if e != want {
		t.Errorf("decoded\n %+v\nwant\n %+v", e, want)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := wire(t, Wire{Hdr: Header{Kind: KindFree}})
	var e Event
	if err := Decode(good[:len(good)-1], &e); err == nil {
		t.Error("a short record was accepted")
	}
	if err := Decode(nil, &e); err == nil {
		t.Error("an empty record was accepted")
	}
	for _, k := range []Kind{0, KindStack, KindPyStack, KindPyCode, 63, KindLost, KindExit, 255} {
		if err := Decode(wire(t, Wire{Hdr: Header{Kind: k}}), &e); err == nil {
			t.Errorf("kind %d from the ring was accepted", k)
		}
	}
}

// cbWire encodes a cb_alloc record as the ring buffer holds it.
func cbWire(t testing.TB, w CBAllocWire) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, w); err != nil {
		t.Fatal(err)
	}
	if b.Len() != CBAllocWireSize {
		t.Fatalf("encoded %d bytes, CBAllocWireSize is %d", b.Len(), CBAllocWireSize)
	}
	return b.Bytes()
}

// A cb_alloc record: its own struct, its core ranges taken only when the
// flags say they were read, the flags and the count checked against each
// other, its length against its struct.
func TestDecodeCBAlloc(t *testing.T) {
	w := CBAllocWire{Hdr: Header{Seq: 5, TsNs: 6, Pid: 7, Tid: 8, Kind: KindCBAlloc}, Device: 0x7f00, DeviceVptr: 0x7f10,
		Address: 0x4000, Size: 2048, LostBefore: 2, Nranges: 2, Chip: 90, DeviceKind: DeviceChip, Global: 1,
		Flags: CBRangesKnown}
	w.Ranges[0] = CoreRange{X0: 0, Y0: 0, X1: 3, Y1: 7}
	w.Ranges[1] = CoreRange{X0: 6, Y0: 6, X1: 7, Y1: 7}
	var e Event
	if err := Decode(cbWire(t, w), &e); err != nil {
		t.Fatal(err)
	}
	want := Event{Seq: 5, TsNs: 6, Pid: 7, Tid: 8, Kind: KindCBAlloc, Device: 0x7f00, DeviceVptr: 0x7f10,
		DeviceKind: DeviceChip, Chip: 90, BufferType: -1, Address: 0x4000, Size: 2048, Global: true, LostBefore: 2}
	want.RangesKnown, want.NumRanges, want.CoreRanges = true, 2, w.Ranges
	if e != want {
		t.Errorf("decoded\n %+v\nwant\n %+v", e, want)
	}
	if got := string(AppendJSON(nil, &e)); !strings.Contains(got, `,"global":true,"core_ranges":[[0,0,3,7],[6,6,7,7]],"lost_before":2}`) {
		t.Errorf("JSON %s", got)
	}
	// More ranges than a record carries: the first CoreRangeMax, and the total.
	more := w
	more.Nranges, more.Flags = 40, CBRangesKnown|CBRangesTruncated
	if err := Decode(cbWire(t, more), &e); err != nil || len(e.Ranges()) != CoreRangeMax || !e.RangesTruncated || e.NumRanges != 40 {
		t.Errorf("truncated: %v, %d ranges of %d, truncated %v", err, len(e.Ranges()), e.NumRanges, e.RangesTruncated)
	}
	if got := string(AppendJSON(nil, &e)); !strings.Contains(got, `[0,0,0,0]],"core_ranges_total":40,"lost_before":2}`) {
		t.Errorf("JSON %s", got)
	}
	// Not read (a layout without CoreRangeSet, or a read that failed): no
	// ranges, whatever the count and the array hold.
	none := w
	none.Flags, none.Nranges, none.ReadError = 0, 70000, 1
	if err := Decode(cbWire(t, none), &e); err != nil || e.RangesKnown || e.NumRanges != 0 || len(e.Ranges()) != 0 || !e.ReadError {
		t.Errorf("no ranges: %v, %+v", err, e.CBFields)
	}
	if got := string(AppendJSON(nil, &e)); strings.Contains(got, "core_ranges") {
		t.Errorf("JSON %s", got)
	}
	for _, c := range []struct {
		name    string
		nranges uint32
		flags   uint8
	}{
		{"truncated flag on 8 ranges", 8, CBRangesKnown | CBRangesTruncated},
		{"9 ranges without the truncated flag", 9, CBRangesKnown},
		{"2^32-1 ranges without the truncated flag", 1<<32 - 1, CBRangesKnown},
		{"truncated without known", 9, CBRangesTruncated},
		{"an unknown flag", 1, CBRangesKnown | 4},
		{"an unknown flag alone", 0, 0x80},
	} {
		bad := w
		bad.Nranges, bad.Flags = c.nranges, c.flags
		if err := Decode(cbWire(t, bad), &e); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
	raw := cbWire(t, w)
	for _, n := range []int{0, HeaderSize, WireSize, CBAllocWireSize - 1} {
		if err := Decode(raw[:n], &e); err == nil {
			t.Errorf("a cb_alloc record of %d bytes was accepted", n)
		}
	}
	if _, err := As[Wire](raw); err == nil {
		t.Error("a cb_alloc record was viewed as a struct event")
	}
	if n := testing.AllocsPerRun(100, func() { _ = Decode(raw, &e) }); n != 0 {
		t.Errorf("Decode allocates %v times per cb_alloc", n)
	}
}

// Stack records: told from events by their kind, checked against their
// own length, never taken for an event.
func TestDecodeStack(t *testing.T) {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, StackWire{Hdr: Header{Seq: 7, Pid: 9, Tid: 10, Kind: KindStack}, Ip: 0x1000, Sp: 0x7ff0, Bp: 3, Size: 16, Flags: 1})
	b.Write([]byte("0123456789abcdefXX"))
	raw := b.Bytes()
	if h, err := Peek(raw); err != nil || h.Kind != KindStack {
		t.Fatalf("Peek = %+v, %v", h, err)
	}
	var s StackRecord
	if err := DecodeStack(raw, &s); err != nil {
		t.Fatal(err)
	}
	if s.Seq != 7 || s.IP != 0x1000 || s.SP != 0x7ff0 || s.BP != 3 || s.Pid != 9 || s.Tid != 10 || s.Flags != 1 || string(s.Data) != "0123456789abcdef" {
		t.Errorf("decoded %+v", s)
	}
	if err := DecodeStack(raw[:StackWireSize+15], &s); err == nil {
		t.Error("a stack longer than its record was accepted")
	}
	var e Event
	if err := Decode(raw, &e); err == nil {
		t.Error("a stack was decoded as an event")
	}
	if err := DecodeStack(wire(t, Wire{Hdr: Header{Kind: KindAlloc}}), &s); err == nil {
		t.Error("an event was decoded as a stack")
	}
	raw[unsafe.Offsetof(Header{}.Kind)] = uint8(KindAlloc)
	if err := DecodeStack(raw, &s); err == nil {
		t.Error("a record of another kind was decoded as a stack")
	}
}

// Python records: their kind and their struct's length, and counts within
// their arrays.
func TestDecodePython(t *testing.T) {
	st := PyStackWire{Hdr: Header{Seq: 5, Kind: KindPyStack}}
	st.Stack.Nframes = 2
	raw := recordBytes(&st)
	if w, err := DecodePyStack(raw); err != nil || w.Hdr.Seq != 5 || w.Stack.Nframes != 2 {
		t.Errorf("DecodePyStack = %+v, %v", w, err)
	}
	if _, err := DecodePyStack(raw[:PyStackWireSize-1]); err == nil {
		t.Error("a short py_stack record was accepted")
	}
	st.Stack.Nframes = uint32(len(st.Stack.Frames) + 1)
	if _, err := DecodePyStack(recordBytes(&st)); err == nil {
		t.Error("a frame count beyond the array was accepted")
	}
	c := PyCodeWire{Hdr: Header{Kind: KindPyCode}}
	c.Code.LinetableLen = uint32(len(c.Code.Linetable))
	if _, err := DecodePyCode(recordBytes(&c)); err != nil {
		t.Error(err)
	}
	c.Code.LinetableLen++
	if _, err := DecodePyCode(recordBytes(&c)); err == nil {
		t.Error("a line table longer than its array was accepted")
	}
	if _, err := DecodePyCode(raw); err == nil {
		t.Error("a py_stack record was decoded as a py_code record")
	}
}

// Every kind BPF writes has a name and a record type, and its size is that
// type's.
func TestWireTables(t *testing.T) {
	sizes := map[uint8]uint32{(*Wire)(nil).wireID(): WireSize, (*StackWire)(nil).wireID(): StackWireSize,
		(*PyStackWire)(nil).wireID(): PyStackWireSize, (*PyCodeWire)(nil).wireID(): PyCodeWireSize,
		(*AllocCapacityWire)(nil).wireID(): AllocCapacityWireSize, (*AllocRequestWire)(nil).wireID(): AllocRequestWireSize,
		(*TraceWire)(nil).wireID(): TraceWireSize, (*CBAllocWire)(nil).wireID(): CBAllocWireSize,
		(*OpEnterWire)(nil).wireID(): OpEnterWireSize, (*RuntimeIDWire)(nil).wireID(): RuntimeIDWireSize,
		(*LinkObjectWire)(nil).wireID(): LinkObjectWireSize}
	for k := KindAlloc; k <= KindGroupExit; k++ {
		if wireOf[k] != (*Wire)(nil).wireID() && k != KindCBAlloc {
			t.Errorf("%s: not a struct event", k)
		}
	}
	for _, k := range []Kind{KindAllocOom, KindProgramDispatch} {
		if wireOf[k] != (*Wire)(nil).wireID() {
			t.Errorf("%s: not a struct event", k)
		}
	}
	for _, k := range []Kind{KindCBAlloc, KindStack, KindPyStack, KindPyCode, KindAllocCapacity, KindAllocRequest, KindTrace,
		KindOpEnter, KindRuntimeID, KindLinkObject} {
		if wireOf[k] == 0 || wireOf[k] == (*Wire)(nil).wireID() {
			t.Errorf("%s: record type %d", k, wireOf[k])
		}
	}
	for k := range Kind(len(wireOf)) {
		if wireOf[k] == 0 {
			continue
		}
		if kindNames[k] == "" || sizes[wireOf[k]] != wireSize[k] {
			t.Errorf("kind %d (%s): record type %d of %d bytes", k, k, wireOf[k], wireSize[k])
		}
	}
}

func recordBytes[T any](v *T) []byte {
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))...)
}

// Every kind encodes to one JSON object on one line, with its type, the
// common fields (seq/tid only on records from BPF) and its own fields.
func TestAppendJSON(t *testing.T) {
	base := Event{Seq: 9, TsNs: 1000, Pid: 7, Tid: 8, Object: 0xabc, Device: 0xd0, DeviceVptr: 0xd1, Chip: 3,
		BufferType: Trace, Address: 4096, Size: 64, PageSize: 32, Global: true, ExitCode: 2, ExitSignal: 0}
	own := map[Kind][]string{
		KindAlloc:           {"buffer", "device_kind", "device", "buffer_type", "address", "size", "page_size", "hooked", "owns_data"},
		KindFree:            {"buffer", "device_kind", "device", "buffer_type", "address", "size"},
		KindMarkDeallocated: {"buffer", "device_kind"},
		KindView:            {"device_kind", "device", "buffer_type", "address", "size", "page_size"},
		KindCBAlloc:         {"device_kind", "device", "address", "size", "global"},
		KindProgramDispatch: {"program", "device_kind", "device"},
		KindCBFree:          {"device_kind", "device"},
		KindCBLayout:        {"program", "device_kind"},
		KindCBTeardown:      {"program"},
		KindProgramDestroy:  {"program"},
		KindDeviceClose:     {"device_kind", "device"},
		KindMeshClose:       {"device_kind"},
		KindFork:            {"ppid"},
		KindLost:            {"count"},
		KindExit:            {"exit_code", "exit_signal"},
	}
	var buf []byte
	for k, fields := range own {
		for _, dk := range []DeviceKind{DeviceChip, DeviceMesh, DeviceUnknown, DeviceNone} {
			e := base
			e.Kind, e.DeviceKind = k, dk
			buf = AppendJSON(buf[:0], &e)
			if bytes.Count(buf, []byte("\n")) != 1 || buf[len(buf)-1] != '\n' {
				t.Fatalf("%s: not one line: %q", k, buf)
			}
			var m map[string]any
			if err := json.Unmarshal(buf, &m); err != nil {
				t.Fatalf("%s: invalid JSON %q: %v", k, buf, err)
			}
			if m["type"] != k.String() {
				t.Errorf("%s: type %v", k, m["type"])
			}
			synth := k == KindLost || k == KindExit
			for _, f := range []string{"ts_ns", "pid"} {
				if _, ok := m[f]; !ok {
					t.Errorf("%s: no %q in %s", k, f, buf)
				}
			}
			for _, f := range []string{"seq", "tid"} {
				if _, ok := m[f]; ok == synth {
					t.Errorf("%s: %q present=%v, want %v", k, f, ok, !synth)
				}
			}
			for _, f := range fields {
				if f == "device" && dk != DeviceChip {
					continue
				}
				if _, ok := m[f]; !ok {
					t.Errorf("%s (%s): no %q in %s", k, dk, f, buf)
				}
			}
			if dk == DeviceMesh && m["device_kind"] == "mesh" {
				if _, ok := m["device"]; ok {
					t.Errorf("%s: a mesh event carries a chip id: %s", k, buf)
				}
			}
		}
	}
	// Values, against the event.
	e := base
	e.Kind, e.DeviceKind = KindAlloc, DeviceChip
	var m map[string]any
	json.Unmarshal(AppendJSON(nil, &e), &m)
	for f, want := range map[string]any{"seq": 9.0, "ts_ns": 1000.0, "pid": 7.0, "tid": 8.0, "device": 3.0,
		"buffer": "0xabc", "buffer_type": "TRACE", "address": 4096.0, "size": 64.0, "page_size": 32.0} {
		if m[f] != want {
			t.Errorf("alloc %s = %v, want %v", f, m[f], want)
		}
	}
}

func TestAppendJSONAllocatesNothing(t *testing.T) {
	e := Event{Kind: KindAlloc, DeviceKind: DeviceChip, BufferType: DRAM, Seq: 1 << 40, Size: 1 << 30}
	buf := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() { buf = AppendJSON(buf[:0], &e) }); n != 0 {
		t.Errorf("AppendJSON allocates %v times per event", n)
	}
	raw := wire(t, Wire{Hdr: Header{Kind: KindFree}})
	if n := testing.AllocsPerRun(100, func() { _ = Decode(raw, &e) }); n != 0 {
		t.Errorf("Decode allocates %v times per event", n)
	}
}

func TestBufferTypeNames(t *testing.T) {
	for i := BufferType(0); i < NumBufferTypes; i++ {
		got, ok := ParseBufferType(i.String())
		if !ok || got != i {
			t.Errorf("%d: %q parses to %d, %v", i, i.String(), got, ok)
		}
	}
	if BufferType(9).Valid() || BufferType(-1).Valid() {
		t.Error("out-of-range buffer types are valid")
	}
	if s := BufferType(9).String(); s != "BufferType(9)" {
		t.Errorf("BufferType(9) = %q", s)
	}
	if s := Kind(200).String(); s != "kind("+strconv.Itoa(200)+")" {
		t.Errorf("Kind(200) = %q", s)
	}
}

// FuzzDecode: any bytes either fail to decode or give an event whose NDJSON
// line is valid JSON; nothing panics.
func FuzzDecode(f *testing.F) {
	f.Add(wire(f, Wire{Hdr: Header{Kind: KindAlloc}, BufferType: 99, DeviceKind: DeviceKind(7)}))
	f.Add(wire(f, Wire{Hdr: Header{Kind: KindFork}, ParentPid: 1 << 31}))
	f.Add(cbWire(f, CBAllocWire{Hdr: Header{Kind: KindCBAlloc}, Nranges: 9, Flags: CBRangesKnown | CBRangesTruncated,
		Ranges: [CoreRangeMax]CoreRange{{X0: 1, Y0: 2, X1: 65535, Y1: 65535}}}))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, raw []byte) {
		if h, err := Peek(raw); err == nil && h.Kind == KindStack {
			var s StackRecord
			if DecodeStack(raw, &s) == nil && StackWireSize+len(s.Data) > len(raw) {
				t.Fatalf("stack data past the record")
			}
		}
		var e Event
		if err := Decode(raw, &e); err != nil {
			return
		}
		line := AppendJSON(nil, &e)
		if !json.Valid(line) {
			t.Fatalf("invalid JSON for %+v: %q", e, line)
		}
	})
}
