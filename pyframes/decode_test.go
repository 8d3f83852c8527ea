package pyframes

import (
	"encoding/binary"
	"testing"
	"unicode/utf16"
	"unsafe"

	"github.com/tttrace/tttrace/events"
)

// recordBytes is a record as BPF writes it (the Go types of package events
// have the C layout).
func recordBytes[T any](v *T) []byte {
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))...)
}

func stackRecord(s events.PyStack) []byte {
	return recordBytes(&events.PyStackWire{Hdr: events.Header{Pid: 1, Kind: events.KindPyStack}, Stack: s})
}

func TestNewRawStack(t *testing.T) {
	var s events.PyStack
	s.Tstate, s.Nframes, s.Flags = 0x1000, 2, FlagTruncated
	s.Frames[0].Code, s.Frames[0].Instr, s.Frames[0].CodeID = 1, 2, 3
	s.Frames[1].Code, s.Frames[1].Instr, s.Frames[1].CodeID = 4, 5, 6
	w, err := events.DecodePyStack(stackRecord(s))
	if err != nil {
		t.Fatal(err)
	}
	raw := NewRawStack(&w.Stack)
	if raw.TState != 0x1000 || raw.Flags != FlagTruncated || len(raw.Frames) != 2 ||
		raw.Frames[0] != (RawFrame{1, 2, 3}) || raw.Frames[1] != (RawFrame{4, 5, 6}) {
		t.Errorf("decoded %+v", raw)
	}
	s.Nframes = uint32(MaxFrames + 1)
	if raw := NewRawStack(&s); len(raw.Frames) != MaxFrames {
		t.Errorf("%d frames from a count beyond the array", len(raw.Frames))
	}
}

// TestDecodeStr decodes str data of every width as CPython lays it out
// (state bits: kind 2-4, compact 5, ascii 6), whole and cut to its end.
func TestDecodeStr(t *testing.T) {
	state := func(kind uint32, ascii bool) uint32 {
		s := kind<<2 | 1<<5
		if ascii {
			s |= 1 << 6
		}
		return s
	}
	ucs2 := func(s string) []byte {
		var b []byte
		for _, u := range utf16.Encode([]rune(s)) {
			b = binary.LittleEndian.AppendUint16(b, u)
		}
		return b
	}
	ucs4 := func(s string) []byte {
		var b []byte
		for _, r := range s {
			b = binary.LittleEndian.AppendUint32(b, uint32(r))
		}
		return b
	}
	for _, c := range []struct {
		data  []byte
		chars uint32
		state uint32
		want  string
	}{
		{[]byte("test_alloc.py"), 13, state(1, true), "test_alloc.py"},
		{[]byte{'c', 0xe9}, 2, state(1, false), "cé"},
		{ucs2("日本"), 2, state(2, false), "日本"},
		{ucs4("a😀"), 2, state(4, false), "a😀"},
		{[]byte("alloc.py"), 20, state(1, true), "…alloc.py"}, // the end of a long path
	} {
		got, err := decodeStr(c.data, uint32(len(c.data)), c.chars, c.state)
		if err != nil || got != c.want {
			t.Errorf("%q: %q, %v; want %q", c.data, got, err, c.want)
		}
	}
	for _, bad := range []struct {
		n, chars, state uint32
	}{
		{4, 4, 1 << 2},             // not compact
		{4, 4, 3<<2 | 1<<5},        // kind 3
		{3, 2, state(2, false)},    // half a UCS-2 character
		{8, 2, state(1, true)},     // more bytes than characters
		{300, 300, state(1, true)}, // more than the buffer
	} {
		if _, err := decodeStr(make([]byte, 256), bad.n, bad.chars, bad.state); err == nil {
			t.Errorf("%+v decodes", bad)
		}
	}
}

// fuzzProcess is a Process with the 3.12 layout whose memory is gone (as
// when it has exited): only code records can describe its code objects.
func fuzzProcess(t testing.TB) *Process {
	in := &Interpreter{Major: 3, Minor: 12, Offsets: tables[12], CodeType: 0x1000, UnicodeType: 0x2000, BytesType: 0x3000}
	return &Process{Pid: 1, Interp: in, codes: map[codeKey]*codeInfo{}}
}

// seedRecords are a code record and a stack naming it, as BPF writes
// them for a 3.12 process whose types are at fuzzProcess's addresses.
func seedRecords(t testing.TB) (stack, code []byte) {
	var c events.PyCode
	c.Code, c.CodeID = 0x5000, 7
	c.CodeType, c.UnitsType, c.FilenameType, c.NameType, c.LinetableType = 0x1000, 0x1000, 0x2000, 0x2000, 0x3000
	c.Units, c.Firstlineno = 8, 42
	ascii := uint32(1<<2 | 1<<5 | 1<<6)
	copy(c.Filename[:], "f.py")
	c.FilenameLen, c.FilenameChars, c.FilenameState = 4, 4, ascii
	copy(c.Name[:], "g")
	c.NameLen, c.NameChars, c.NameState = 1, 1, ascii
	// One 3.11+ location entry: no columns (13), 8 code units, line +0.
	c.Linetable[0], c.Linetable[1] = 0x80|13<<3|7, 0
	c.LinetableLen, c.LinetableSize = 2, 2
	var s events.PyStack
	s.Nframes = 1
	s.Frames[0].Code, s.Frames[0].CodeID = 0x5000, 7
	s.Frames[0].Instr = 0x5000 + uint64(tables[12].CodeAdaptive) + 4
	return stackRecord(s), recordBytes(&events.PyCodeWire{Hdr: events.Header{Pid: 1, Kind: events.KindPyCode}, Code: c})
}

// decodeRecords decodes a stack record and a code record as the runtime
// does, adding the code to p.
func decodeRecords(p *Process, stack, code []byte) (RawStack, error) {
	if w, err := events.DecodePyCode(code); err == nil {
		p.AddCode(&w.Code)
	}
	w, err := events.DecodePyStack(stack)
	if err != nil {
		return RawStack{}, err
	}
	return NewRawStack(&w.Stack), nil
}

func TestSeedRecords(t *testing.T) {
	p := fuzzProcess(t)
	defer p.Close()
	stack, code := seedRecords(t)
	w, err := events.DecodePyCode(code)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AddCode(&w.Code); err != nil {
		t.Fatal(err)
	}
	raw, err := decodeRecords(p, stack, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := p.Symbolize(raw)
	if st.Err != nil || len(st.Frames) != 1 || st.Frames[0] != (Frame{"g", "f.py", 42}) {
		t.Errorf("%+v", st)
	}
	// The same address with another identity is another code object.
	raw.Frames[0].CodeID = 8
	if st := p.Symbolize(raw); st.Err == nil || len(st.Frames) != 0 {
		t.Errorf("another identity symbolizes: %+v", st)
	}
	// An instruction outside the code object is refused.
	raw.Frames[0].CodeID = 7
	raw.Frames[0].Instr += 16
	if st := p.Symbolize(raw); st.Err == nil || len(st.Frames) != 0 {
		t.Errorf("an instruction past the code symbolizes: %+v", st)
	}
}

// FuzzDecode feeds arbitrary bytes as stack and code records: decoding
// never panics, never yields more frames than the record holds, and a
// frame only symbolizes from a code record that passed its checks.
func FuzzDecode(f *testing.F) {
	stack, code := seedRecords(f)
	f.Add(stack, code)
	f.Add(stackRecord(events.PyStack{}), recordBytes(&events.PyCodeWire{Hdr: events.Header{Kind: events.KindPyCode}}))
	f.Fuzz(func(t *testing.T, stack, code []byte) {
		p := fuzzProcess(t)
		defer p.Close()
		raw, err := decodeRecords(p, stack, code)
		if err != nil {
			return
		}
		if len(raw.Frames) > MaxFrames {
			t.Fatalf("%d frames", len(raw.Frames))
		}
		st := p.Symbolize(raw)
		if len(st.Frames) > len(raw.Frames) {
			t.Fatalf("%d frames from %d", len(st.Frames), len(raw.Frames))
		}
		for i := range st.Frames {
			ci := p.codes[codeKey{raw.Frames[i].Code, raw.Frames[i].CodeID}]
			if ci == nil || ci.err != nil || ci.file != st.Frames[i].File {
				t.Fatalf("frame %d symbolized without a checked code record", i)
			}
		}
	})
}
