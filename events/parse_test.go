package events

import (
	"bytes"
	"strings"
	"testing"
)

// Every event line ParseJSON takes is written again byte for byte: the
// replay (tttrace report) sees what the live run saw.
func TestParseJSONRoundTrip(t *testing.T) {
	evs := goldenEvents()
	for i := range 40 {
		a := Event{Seq: uint64(i), TsNs: 7 + uint64(i), Pid: 9, Tid: 10, Kind: KindAllocCapacity, Object: 0xfeed,
			DeviceKind: DeviceKind(i % 4), Device: 0xabc, DeviceVptr: 0x99, Chip: int32(i) - 3, BufferType: BufferType(i % 5)}
		if a.DeviceKind != DeviceChip {
			a.Chip = -1
		}
		a.Banks, a.BankSize, a.Alignment, a.Base, a.Limit = 12, 1<<30, 32, 64, uint64(i)
		r := Event{Seq: uint64(i), TsNs: 8, Pid: 9, Tid: 11, Kind: KindAllocRequest, Object: 0xfeed, Chip: -1, BufferType: -1,
			Size: 4096, PageSize: 1024, Site: uint32(i % 3), LostBefore: uint64(i % 2)}
		r.Shards, r.AllocatorID, r.BottomUp = uint32(i%3), uint32(i%2), i%2 == 0
		tr := Event{Seq: uint64(i), TsNs: 9, Pid: 9, Tid: 12, Kind: KindTrace, DeviceKind: DeviceKind(1 + i%2), Device: 0x5000, Chip: -1, BufferType: -1}
		if tr.DeviceKind == DeviceChip {
			tr.Device, tr.Chip = 0, int32(i)
		}
		tr.TraceOp = TraceOp(1 + i%4)
		tr.TraceID, tr.TraceIDKnown = uint32(i), i%3 != 0
		tr.CQ, tr.CQKnown = uint8(i%2), tr.TraceOp != TraceRelease
		tr.Blocking = tr.TraceOp == TraceReplay && i%2 == 0
		oom := Event{Seq: uint64(i), TsNs: 10, Pid: 9, Tid: 12, Kind: KindAllocOom, Chip: -1, Site: uint32(i)}
		al := Event{Seq: uint64(i), TsNs: 11, Pid: 9, Tid: 13, Kind: KindAlloc, Object: 0x77, DeviceKind: DeviceChip, Chip: 2,
			Size: 64, Site: uint32(i), Stack: StackState(i % 4)}
		// Records made inside a TT-NN op carry it; names from symbol
		// tables are hostile (quotes, control characters, invalid UTF-8
		// is replaced when interned, so it round-trips as replaced).
		names := []string{"ttnn.matmul", `ttnn."x"\y`, "ttnn.\x01\n", "ttnn.experimental.conv\u2028"}
		for _, op := range []*Event{&r, &tr, &al} {
			if i%3 == 0 {
				continue
			}
			op.Op = OpNames.Intern(names[i%len(names)])
			if i%2 == 0 {
				op.DeviceOp = OpNames.Intern("MatmulDeviceOperation")
			}
			op.RuntimeID, op.HasRuntimeID = uint64(i)*1000, i%4 != 1
			op.OpDepth = uint8(1 + i%3)
		}
		// An op's entry and a launch's runtime id; a device op launched
		// where no op is live (name "", depth 0).
		oe := Event{Seq: uint64(i), TsNs: 12, Pid: 9, Tid: 14, Kind: KindOpEnter, Chip: -1, BufferType: -1}
		oe.Entered = OpEntered(1 + i%4)
		oe.Op, oe.OpDepth = OpNames.Intern("ttnn.conv2d"), uint8(1+i%2)
		if oe.Entered != OpEnteredOp {
			oe.DeviceOp = OpNames.Intern("Conv2dDeviceOperation")
		}
		rid := Event{Seq: uint64(i), TsNs: 13, Pid: 9, Tid: 14, Kind: KindRuntimeID, Chip: -1, BufferType: -1, Object: uint64(i % 2 * 0x5000)}
		rid.RuntimeID, rid.HasRuntimeID = uint64(i), true
		rid.DeviceOp = OpNames.Intern("MatmulDeviceOperation")
		if i%3 != 0 {
			rid.Op, rid.OpDepth = OpNames.Intern("ttnn.matmul"), 1
		}
		evs = append(evs, a, r, tr, oom, al, oe, rid)
	}
	parsed := 0
	for i := range evs {
		line := AppendJSON(nil, &evs[i])
		var e Event
		ok, err := ParseJSON(line, &e)
		switch k := evs[i].Kind; {
		case k == KindLinkMap || k == KindMainExit:
			if err == nil {
				t.Fatalf("%s accepted: %s", k, line)
			}
			continue
		case !evs[i].DeviceKind.valid() && hasDevice(k):
			if err == nil {
				t.Fatalf("device kind %d accepted: %s", evs[i].DeviceKind, line)
			}
			continue
		}
		if !ok || err != nil {
			t.Fatalf("line %d: ok %v, %v: %s", i, ok, err, line)
		}
		again := AppendJSON(nil, &e)
		if !bytes.Equal(again, line) {
			t.Fatalf("line %d written back differs:\n%s%s", i, line, again)
		}
		parsed++
	}
	if parsed < 1000 {
		t.Fatalf("only %d lines round-tripped", parsed)
	}
}

func (d DeviceKind) valid() bool { return int(d) < len(deviceKindNames) && deviceKindNames[d] != "" }

func hasDevice(k Kind) bool {
	switch k {
	case KindAlloc, KindFree, KindMarkDeallocated, KindView, KindCBAlloc, KindCBFree, KindDeviceClose, KindMeshClose,
		KindCBLayout, KindProgramDispatch, KindAllocCapacity, KindTrace:
		return true
	}
	return false
}

// A trace record's "op" is its call; the TT-NN op it was made in is its
// "ttnn_op".
func TestParseJSONTraceOp(t *testing.T) {
	var e Event
	ok, err := ParseJSON([]byte(`{"type":"trace","seq":1,"ts_ns":2,"pid":3,"tid":3,"op":"replay","device_kind":"chip","device":0,"trace_id":4,"cq":0,"blocking":true,"ttnn_op":{"name":"ttnn.matmul","depth":1}}`), &e)
	if !ok || err != nil || e.TraceOp != TraceReplay || OpNames.Name(e.Op) != "ttnn.matmul" || e.OpDepth != 1 || !e.Blocking {
		t.Fatalf("ok %v err %v: %+v", ok, err, e)
	}
	line := string(AppendJSON(nil, &e))
	if !strings.Contains(line, `"op":"replay"`) || !strings.Contains(line, `"ttnn_op":{"name":"ttnn.matmul","depth":1}`) {
		t.Fatalf("written back as %s", line)
	}
}

// A lost stack is written (stack_lost) and read back: the summary's
// lost_stacks counts it.
func TestParseJSONStackLost(t *testing.T) {
	e := Event{Seq: 1, TsNs: 2, Pid: 3, Tid: 3, Kind: KindAlloc, DeviceKind: DeviceChip, Chip: 0, Stack: StackLost}
	line := AppendJSON(nil, &e)
	if !bytes.Contains(line, []byte(`"stack_lost":true`)) {
		t.Fatalf("no stack_lost: %s", line)
	}
	var got Event
	if ok, err := ParseJSON(line, &got); !ok || err != nil || got.Stack != StackLost {
		t.Fatalf("ok %v err %v stack %v", ok, err, got.Stack)
	}
}

func TestParseJSONRefuses(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		{`{"type":"alloc","seq":1,"ts_ns":2,"pid":3,"tid":3,"buffer":"0x1","device_kind":"chip","buffer_type":"DRAM"}`, "without device"},
		{`{"type":"alloc","seq":1,"ts_ns":2,"pid":3,"tid":3,"buffer":"12","device_kind":"chip","device":0,"buffer_type":"DRAM"}`, "buffer"},
		{`{"type":"alloc","seq":1,"ts_ns":2,"pid":3,"tid":3,"buffer":"0x1","device_kind":"chip","device":0,"buffer_type":"HBM"}`, "buffer_type"},
		{`{"type":"alloc","seq":1,"ts_ns":2,"pid":3,"buffer":"0x1","device_kind":"chip","device":0,"buffer_type":"DRAM"}`, "no seq or tid"},
		{`{"type":"free","seq":1,"pid":3,"tid":3}`, "no ts_ns"},
		{`{"type":"alloc","seq":-1,"ts_ns":2,"pid":3,"tid":3}`, "cannot unmarshal"},
		{`{"type":"alloc","seq":1,"ts_ns":2,"pid":3,"tid":3,"device_kind":"chip","device":3000000000,"buffer_type":"DRAM","buffer":"0x1"}`, "cannot unmarshal"},
		{`{"type":"cb_alloc","seq":1,"ts_ns":2,"pid":3,"tid":3,"device_kind":"mesh","mesh":"0xzz"}`, "device fields"},
		{`{"type":"trace","seq":1,"ts_ns":2,"pid":3,"tid":3,"op":"rewind","device_kind":"chip","device":0}`, "op"},
		{`{"type":"trace","seq":1,"ts_ns":2,"pid":3,"tid":3,"device_kind":"chip","device":0}`, "trace: op"},
		{`{"type":"alloc","seq":1,"ts_ns":2,"pid":3,"tid":3,"buffer":"0x1","device_kind":"chip","device":0,"buffer_type":"DRAM","op":{"depth":1}}`, "op without a name"},
		{`{"type":"alloc","seq":1,"ts_ns":2,"pid":3,"tid":3,"buffer":"0x1","device_kind":"chip","device":0,"buffer_type":"DRAM","op":{"name":"ttnn.add","depth":0}}`, "at depth 0"},
		{`{"type":"alloc","seq":1,"ts_ns":2,"pid":3,"tid":3,"buffer":"0x1","device_kind":"chip","device":0,"buffer_type":"DRAM","op":{"name":"","depth":0}}`, "names a device op"},
		{`{"type":"op_enter","seq":1,"ts_ns":2,"pid":3,"tid":3,"entered":"jump"}`, "entered"},
		{`{"type":"runtime_id","seq":1,"ts_ns":2,"pid":3,"tid":3}`, "no runtime_id"},
		{`{"type":"alloc","seq":1,"ts_ns":2,"pid":3,"tid":3,"buffer":"0x1","device_kind":"chip","device":0,"buffer_type":"DRAM","op":"ttnn.add"}`, "op:"},
		{`{"type":"link_map","seq":1,"ts_ns":2,"pid":3,"tid":3}`, "not a record"},
		{`{"type":"program_dispatch","seq":1,"ts_ns":2,"pid":3,"tid":3,"program":"5","device_kind":"chip","device":0}`, "program"},
		{`{"type":"cb_alloc","seq":1,"ts_ns":2,"pid":3,"tid":3,"device_kind":"chip","device":0,"core_ranges":[[0,0,1]]}`, "not [x0,y0,x1,y1]"},
		{`{"type":"cb_alloc","seq":1,"ts_ns":2,"pid":3,"tid":3,"device_kind":"chip","device":0,"core_ranges":[[0,0,1,1,2]]}`, "not [x0,y0,x1,y1]"},
		{`{"type":"cb_alloc","seq":1,"ts_ns":2,"pid":3,"tid":3,"device_kind":"chip","device":0,"core_ranges":[[0,0,65536,1]]}`, "cannot unmarshal"},
		{`{"type":"cb_alloc","seq":1,"ts_ns":2,"pid":3,"tid":3,"device_kind":"chip","device":0,"core_ranges":[[0,0,-1,1]]}`, "cannot unmarshal"},
		{`{"type":"cb_alloc","seq":1,"ts_ns":2,"pid":3,"tid":3,"device_kind":"chip","device":0,"core_ranges":[` + strings.Repeat("[0,0,0,0],", 8) + `[0,0,0,0]]}`, "more than 8"},
		{`{"type":"cb_alloc","seq":1,"ts_ns":2,"pid":3,"tid":3,"device_kind":"chip","device":0,"core_ranges":[[0,0,0,0]],"core_ranges_total":9}`, "core_ranges_total 9 with 1"},
		{`{"type":"cb_alloc","seq":1,"ts_ns":2,"pid":3,"tid":3,"device_kind":"chip","device":0,"core_ranges":[` + strings.Repeat("[0,0,0,0],", 7) + `[0,0,0,0]],"core_ranges_total":8}`, "core_ranges_total 8 with 8"},
		{`{"type":"cb_alloc","seq":1,"ts_ns":2,"pid":3,"tid":3,"device_kind":"chip","device":0,"core_ranges_total":9}`, "without core_ranges"},
		{`[1,2]`, "JSON"},
		{`{"type":"alloc","seq":1,"ts_ns":2,"pid":3,"tid":3,"buffer":{"a":1},"device_kind":"chip","device":0,"buffer_type":"DRAM"}`, "alloc: json"},
		{`{"type":"alloc"`, "JSON"},
	} {
		var e Event
		ok, err := ParseJSON([]byte(c.line), &e)
		if ok || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: ok %v, err %v; want an error saying %q", c.line, ok, err, c.want)
		}
	}
	// Records that are not events are told apart, not refused.
	for _, line := range []string{`{"type":"site","pid":1,"site":2}`, `{"type":"summary"}`, `{"type":"l1_clash"}`} {
		var e Event
		if ok, err := ParseJSON([]byte(line), &e); ok || err != nil {
			t.Errorf("%s: ok %v, err %v", line, ok, err)
		}
	}
}
