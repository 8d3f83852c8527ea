package ttmetal

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The field table and enum layout_field of bpf/tttrace.h (as genfield
// takes it from the BTF of the compiled object) are one list: every
// enumerator but LF_COUNT has the row whose key is its name without LF_ in
// lower case, at its index. (probes' TestLibInfoMatchesBPF checks that
// lib_info.off has LF_COUNT entries.)
func TestFieldTableMatchesBPF(t *testing.T) {
	slots := map[LayoutField]string{}
	for v, name := range layoutFieldNames {
		if v != LFCount {
			slots[v] = name
		}
	}
	inBPF := 0
	for _, f := range layoutFields {
		if f.slot == noSlot {
			continue
		}
		inBPF++
		if slots[f.slot] != f.key {
			t.Errorf("row %q is at lib_info.off[%d], which bpf/tttrace.h calls %q", f.key, f.slot, slots[f.slot])
		}
	}
	if inBPF != len(slots) || len(slots) != int(LFCount) {
		t.Errorf("%d rows in lib_info, %d enumerators, LF_COUNT %d", inBPF, len(slots), LFCount)
	}
	// Every Layout member is in the table, once.
	seen := map[uintptr]string{}
	var l Layout
	base := reflect.ValueOf(&l).Elem()
	for _, f := range layoutFields {
		p := reflect.ValueOf(f.get(&l)).Pointer()
		if k, dup := seen[p]; dup {
			t.Errorf("rows %q and %q are the same Layout member", k, f.key)
		}
		seen[p] = f.key
	}
	if n := base.NumField() - 1; n != len(seen) { // all but Name
		t.Errorf("Layout has %d values, the table %d rows", n, len(seen))
	}
}

// Offsets puts each value of the layout at its enum index.
func TestOffsetsFromTable(t *testing.T) {
	off := LayoutV2.Offsets()
	want := map[LayoutField]int64{
		LFBufferImplPtr: 16, LFDevice: 0, LFSize: 8,
		LFBufferType: 16, LFOwnsData: 27, LFAllocationStatus: 56,
		LFHookedAllocation: 57, LFAddress: 64, LFPageSize: -1,
		LFDeviceID: 8, LFBufferTypeWidth: 4,
	}
	for k, v := range want {
		if off[k] != v {
			t.Errorf("off[%d] = %d, want %d", k, off[k], v)
		}
	}
}

// The span BPF reads in one go: from the first Buffer field to the end of
// the last, at the widths BPF reads them; none when they lie further apart
// than SPAN_MAX.
func TestSpan(t *testing.T) {
	for _, c := range []struct {
		l       Layout
		lo, len uint32
	}{
		{LayoutV0, 0, 72},  // device 0 .. address 64+8
		{LayoutV1, 16, 80}, // device 16 .. page_size 88+8
		{LayoutV2, 0, 72},  // in BufferImpl: device 0 .. address 64+8
	} {
		lo, n := c.l.Span()
		if lo != c.lo || n != c.len {
			t.Errorf("%s: span %d+%d, want %d+%d", c.l.Name, lo, n, c.lo, c.len)
		}
	}
	narrow := LayoutV1
	narrow.Device, narrow.Type, narrow.TypeWidth, narrow.PageSize = 40, 20, 1, -1
	if lo, n := narrow.Span(); lo != 20 || n != 68 { // type 20 (1 byte) .. address 80+8
		t.Errorf("one-byte type first: span %d+%d, want 20+68", lo, n)
	}
	far := LayoutV1
	far.PageSize = 16 + spanMax // ends 8 bytes past the longest span
	if lo, n := far.Span(); n != 0 {
		t.Errorf("fields %d bytes apart: span %d+%d, want none", far.PageSize+8-16, lo, n)
	}
}

// A layout written by doctor --json reads back as a layout file, keys and
// all; the keys are docs/layout.md's.
func TestLayoutJSONRoundTrip(t *testing.T) {
	b, err := json.Marshal(LayoutV1)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/layout.md")
	if err != nil {
		t.Fatal(err)
	}
	for k := range raw {
		if !strings.Contains(string(doc), "`"+k+"`") {
			t.Errorf("key %q is not in docs/layout.md", k)
		}
	}
	f := filepath.Join(t.TempDir(), "l.json")
	os.WriteFile(f, b, 0o644)
	l, err := ReadLayoutFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if *l != LayoutV1 {
		t.Errorf("read back %+v, wrote %+v", *l, LayoutV1)
	}
}

// The profiles: V0, V1, V2 from profiles/*.json, each fingerprint
// selecting exactly one of them for each combination of its facts.
func TestProfilesSelectOne(t *testing.T) {
	ps := builtinProfiles()
	if len(ps) != 3 || ps[0].Name != "V0" || ps[1].Name != "V1" || ps[2].Name != "V2" {
		t.Fatalf("profiles %v", ps)
	}
	if LayoutV1.Address != 80 || LayoutV0.Allocated != 2 || LayoutV2.BufferImplPtr != 16 || LayoutV0.Hooked != -1 {
		t.Errorf("profiles read wrong: %+v %+v %+v", LayoutV0, LayoutV1, LayoutV2)
	}
	for _, c := range []struct {
		names []string
		want  string
	}{
		{nil, "V1"},
		{[]string{v0Name(symTrackAllocate)}, "V0"},
		{[]string{symPimplDevice}, "V2"},
		{[]string{v0Name(symTrackAllocate), v0Name(symPimplSize)}, ""},
	} {
		s := &Symbols{seen: map[string]bool{}}
		for _, n := range c.names {
			s.seen[n] = true
		}
		var got []string
		for _, p := range ps {
			if p.matches(s) {
				got = append(got, p.Name)
			}
		}
		if strings.Join(got, ",") != c.want {
			t.Errorf("%v: profiles %v match, want %q", c.names, got, c.want)
		}
	}
}
