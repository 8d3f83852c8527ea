package session

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
	"github.com/tttrace/tttrace/ttmetal"
)

// opRecorder writes down the op of every event it gets.
type opRecorder struct {
	sinks.Base
	got []string
}

func (r *opRecorder) Event(ev *events.Event) {
	s := fmt.Sprintf("%d/%s:", ev.Tid, ev.Kind)
	if f := &ev.OpFields; f.Op != 0 || f.DeviceOp != 0 {
		s += events.OpNames.Name(f.Op)
		if f.DeviceOp != 0 {
			s += ">" + events.OpNames.Name(f.DeviceOp)
		}
		s += fmt.Sprintf(" d%d", f.OpDepth)
	}
	if ev.OpFields.HasRuntimeID {
		s += fmt.Sprintf(" rid%d", ev.OpFields.RuntimeID)
	}
	r.got = append(r.got, s)
}

// The scripted op table: ids from 1 in this order.
var testOpTable = &ttmetal.OpTable{Ops: []ttmetal.Op{
	{Name: "ttnn.matmul", Kind: ttmetal.OpTop, Addr: 0x1000, Offset: 0x1000},
	{Name: "MatmulDeviceOperation", Kind: ttmetal.OpDevice, Addr: 0x2000, Offset: 0x2000},
	{Name: "ttnn.conv2d", Kind: ttmetal.OpTop, Addr: 0x3000, Offset: 0x3000},
	{Name: "Conv2dDeviceOperation", Kind: ttmetal.OpDevice, Addr: 0x4000, Offset: 0x4000},
	{Name: "ttnn.add", Kind: ttmetal.OpTop, Addr: 0x5000, Offset: 0x5000},
	{Name: "BinaryDeviceOperation", Kind: ttmetal.OpDevice, Addr: 0x6000, Offset: 0x6000},
}}

const (
	opMatmul = iota + 1
	opMatmulDev
	opConv2d
	opConv2dDev
	opAdd
	opAddDev
)

// opsStream builds ring records as the BPF side writes them: each says how
// many op frames are live on its thread (bpf/ops.h decides which have
// ended; here the script says).
type opsStream struct {
	pid  uint32
	recs [][]byte
}

func (o *opsStream) hdr(tid uint32, k events.Kind, frames uint8) events.Header {
	seq++
	return events.Header{Seq: seq, TsNs: seq * 1000, Pid: o.pid, Tid: tid, Kind: k, OpFrames: frames}
}

func (o *opsStream) enter(tid uint32, op uint32, frames uint8) {
	w := events.OpEnterWire{Hdr: o.hdr(tid, events.KindOpEnter, frames), Op: op, Sp: 0x7ff0000, Ret: 0x401000}
	if int(op) <= len(testOpTable.Ops) && testOpTable.Ops[op-1].Kind == ttmetal.OpDevice {
		w.Device = 1
	}
	o.recs = append(o.recs, rawRecord(&w, 0))
}

func (o *opsStream) dropped(tid uint32, op uint32, frames uint8) {
	w := events.OpEnterWire{Hdr: o.hdr(tid, events.KindOpEnter, frames), Op: op, Flags: events.OpFrameDropped}
	o.recs = append(o.recs, rawRecord(&w, 0))
}

func (o *opsStream) runtimeID(tid uint32, id uint64, frames uint8) {
	w := events.RuntimeIDWire{Hdr: o.hdr(tid, events.KindRuntimeID, frames), Program: 0x9000, Impl: 0x9100, RuntimeID: id, Flags: events.RuntimeIDImplKnown}
	o.recs = append(o.recs, rawRecord(&w, 0))
}

func (o *opsStream) event(tid uint32, k events.Kind, frames uint8) {
	w := events.Wire{Hdr: o.hdr(tid, k, frames), Object: 0xb0 + seq, Device: 0x7f0000, DeviceKind: events.DeviceChip,
		BufferType: int32(events.DRAM), Address: 0x1000 * seq, Size: 64, OwnsData: 1, Status: 1}
	o.recs = append(o.recs, rawRecord(&w, 0))
}

func (o *opsStream) request(tid uint32, frames uint8) {
	w := events.AllocRequestWire{Hdr: o.hdr(tid, events.KindAllocRequest, frames), Manager: 0x6000, Size: 64, PageSize: 64}
	o.recs = append(o.recs, rawRecord(&w, 0))
}

// opsSession is a session tracing pid with the test op table registered
// as if its library had been attached.
func opsSession(t *testing.T, pid uint32) (*session, *opRecorder) {
	t.Helper()
	r := &opRecorder{}
	s := newSession(Config{PIDs: []int{int(pid)}, NoStacks: true}, newFakeBackend(), newFakeHost(), []sinks.Sink{r}, nil)
	s.track(pid, devices.ProcessInfo{Command: "python model.py"}, true, false)
	if got := len(s.ops.frames.register(testOpTable)); got != len(testOpTable.Ops) {
		t.Fatalf("%d ops registered", got)
	}
	return s, r
}

// Records are given the op of their thread's frames: nested top-level ops,
// a device op inside, its runtime id (set_runtime_id, after the launch's
// first records: they wait for it and take it, opjoin.go, while the other
// thread's records wait behind them), a return to the outer op, an op that threw
// (the next record of its thread counts no frame), a second thread in
// between, records that did not look (a free), and a frame the BPF side
// counts whose entry was lost.
func TestOpFramesFill(t *testing.T) {
	const pid, a, b = 4100, 4100, 4101
	s, r := opsSession(t, pid)
	o := &opsStream{pid: pid}
	o.enter(a, opConv2d, 1)
	o.event(a, events.KindAlloc, 1)
	o.enter(a, opMatmul, 2)
	o.enter(a, opMatmulDev, 3)
	o.enter(b, opAdd, 1)
	o.event(a, events.KindAlloc, 3)
	o.event(b, events.KindAlloc, 1)
	o.runtimeID(a, 7, 3)
	o.event(a, events.KindAlloc, 3)
	o.event(a, events.KindCBLayout, 3)
	o.event(a, events.KindFree, events.OpFramesUnchecked)
	o.event(a, events.KindAlloc, 1)
	o.enter(a, opConv2dDev, 2)
	o.request(a, 2)
	o.event(a, events.KindAlloc, 0)
	o.event(b, events.KindAlloc, 0)
	o.event(b, events.KindAlloc, 2)
	for _, raw := range o.recs {
		s.handle(raw)
	}
	want := []string{
		"4100/op_enter:ttnn.conv2d d1",
		"4100/alloc:ttnn.conv2d d1",
		"4100/op_enter:ttnn.matmul d2",
		"4100/op_enter:ttnn.matmul>MatmulDeviceOperation d2 rid7",
		"4101/op_enter:ttnn.add d1",
		"4100/alloc:ttnn.matmul>MatmulDeviceOperation d2 rid7",
		"4101/alloc:ttnn.add d1",
		"4100/runtime_id:ttnn.matmul>MatmulDeviceOperation d2 rid7",
		"4100/alloc:ttnn.matmul>MatmulDeviceOperation d2 rid7",
		"4100/cb_layout:ttnn.matmul>MatmulDeviceOperation d2 rid7",
		"4100/free:",
		"4100/alloc:ttnn.conv2d d1",
		"4100/op_enter:ttnn.conv2d>Conv2dDeviceOperation d1",
		"4100/alloc_request:ttnn.conv2d>Conv2dDeviceOperation d1",
		"4100/alloc:",
		"4101/alloc:",
		// Two frames live, none seen pushed on this thread since: gaps.
		"4101/alloc:",
	}
	if strings.Join(r.got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ops of the records:\n%s\nwant:\n%s", strings.Join(r.got, "\n"), strings.Join(want, "\n"))
	}
	if f := &s.ops.frames; f.gaps != 2 || f.unknownIDs != 0 || f.dropped != 0 {
		t.Errorf("gaps %d, unknown %d, dropped %d; want 2, 0, 0", f.gaps, f.unknownIDs, f.dropped)
	}
	// Threads with no live frame are forgotten; the one left with gaps
	// goes with its process.
	if len(s.ops.frames.threads) != 1 {
		t.Errorf("%d threads kept, want 1", len(s.ops.frames.threads))
	}
	s.ops.frames.ended(pid)
	if len(s.ops.frames.threads) != 0 {
		t.Errorf("%d threads kept after the process ended", len(s.ops.frames.threads))
	}
}

// A runtime id set with no device op live goes to the innermost frame;
// one set on a thread with only a device op (a launch on a worker thread)
// names that device op without an op; an entry past the deepest frame
// kept (OP_FRAME_DROPPED) pushes nothing; an op id never given names
// nothing.
func TestOpFramesEdges(t *testing.T) {
	const pid, a, w = 4200, 4200, 4201
	s, r := opsSession(t, pid)
	o := &opsStream{pid: pid}
	o.enter(a, opAdd, 1)
	o.runtimeID(a, 3, 1)
	o.event(a, events.KindAlloc, 1)
	o.enter(w, opMatmulDev, 1)
	o.event(w, events.KindAlloc, 1)
	for i := uint8(2); i <= events.OpMaxFrames; i++ {
		o.enter(a, opMatmul, i)
	}
	o.dropped(a, opConv2d, events.OpMaxFrames)
	o.event(a, events.KindAlloc, events.OpMaxFrames)
	o.enter(a, 99, 2)
	o.event(a, events.KindAlloc, 2)
	for _, raw := range o.recs {
		s.handle(raw)
	}
	// The worker's launch neither got an id nor ended: its records, and
	// all after them, wait until tracing ends (as at the summary).
	if len(r.got) != 3 {
		t.Fatalf("%d records handed on before the end, want 3: %q", len(r.got), r.got)
	}
	s.join.giveUp()
	if s.join.gaveUp != 2 {
		t.Errorf("%d records given up, want 2", s.join.gaveUp)
	}
	want := []string{
		"4200/op_enter:ttnn.add d1",
		"4200/runtime_id:ttnn.add d1 rid3",
		"4200/alloc:ttnn.add d1 rid3",
		"4201/op_enter:>MatmulDeviceOperation d0",
		"4201/alloc:>MatmulDeviceOperation d0",
	}
	for i := 2; i <= events.OpMaxFrames; i++ {
		want = append(want, fmt.Sprintf("4200/op_enter:ttnn.matmul d%d", i))
	}
	want = append(want,
		fmt.Sprintf("4200/op_enter:ttnn.matmul d%d", events.OpMaxFrames),
		fmt.Sprintf("4200/alloc:ttnn.matmul d%d", events.OpMaxFrames),
		// Frame 2 is an op id never given: the op is frame 1's.
		"4200/op_enter:ttnn.add d1 rid3",
		"4200/alloc:ttnn.add d1 rid3",
	)
	if strings.Join(r.got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ops of the records:\n%s\nwant:\n%s", strings.Join(r.got, "\n"), strings.Join(want, "\n"))
	}
	if f := &s.ops.frames; f.dropped != 1 || f.unknownIDs != 1 || f.gaps != 0 {
		t.Errorf("dropped %d, unknown %d, gaps %d; want 1, 1, 0", f.dropped, f.unknownIDs, f.gaps)
	}
}

// The names of TT-NN libraries, as found in maps.
func TestIsTTNNLibrary(t *testing.T) {
	for p, want := range map[string]bool{
		"/x/ttnn/_ttnn.so": true,
		"/x/ttnn/_ttnn.cpython-310-x86_64-linux-gnu.so": true,
		"/x/build/lib/_ttnncpp.so":                      true,
		"/x/lib/libttnn.so.1":                           true,
		"/x/lib/libtt_metal.so":                         false,
		"/x/lib/ttnn.py":                                false,
		"/x/lib/_ttnn_not_a_library":                    false,
	} {
		if got := isTTNNLibrary(p); got != want {
			t.Errorf("%s: %v, want %v", p, got, want)
		}
	}
}

// A launch's records made before set_runtime_id wait for it, and every
// record after them: a launch that gets its id gives it to them; one whose
// frames end without one (its validation threw) lets them go without; a
// process's end lets its launches' records go; and a thread stopped
// inside a launch holds the stream joinWait ticks at most.
func TestOpJoin(t *testing.T) {
	const pid, a, b = 4300, 4300, 4301
	s, r := opsSession(t, pid)
	o := &opsStream{pid: pid}
	o.enter(a, opMatmul, 1)
	o.enter(a, opMatmulDev, 2)
	o.event(a, events.KindAlloc, 2) // the output: waits
	o.event(b, events.KindAlloc, 0) // another thread: waits behind it
	o.runtimeID(a, 0, 2)            // id 0 is an id
	o.enter(a, opMatmulDev, 2)      // the next launch of the same op (the slot reused)
	o.event(a, events.KindAlloc, 2)
	o.event(a, events.KindAlloc, 1) // its frame ended without an id
	o.enter(a, opAddDev, 2)
	o.event(a, events.KindAlloc, 2)
	for _, raw := range o.recs {
		s.handle(raw)
	}
	want := []string{
		"4300/op_enter:ttnn.matmul d1",
		"4300/op_enter:ttnn.matmul>MatmulDeviceOperation d1 rid0",
		"4300/alloc:ttnn.matmul>MatmulDeviceOperation d1 rid0",
		"4301/alloc:",
		"4300/runtime_id:ttnn.matmul>MatmulDeviceOperation d1 rid0",
		"4300/op_enter:ttnn.matmul>MatmulDeviceOperation d1",
		"4300/alloc:ttnn.matmul>MatmulDeviceOperation d1",
		"4300/alloc:ttnn.matmul d1",
	}
	if strings.Join(r.got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("records handed on:\n%s\nwant:\n%s", strings.Join(r.got, "\n"), strings.Join(want, "\n"))
	}
	// The add launch waits; ticks give up on it.
	for range joinWait - 1 {
		s.join.tick()
	}
	if len(r.got) != len(want) {
		t.Fatalf("given up after %d ticks", joinWait-1)
	}
	s.join.tick()
	want = append(want, "4300/op_enter:ttnn.matmul>BinaryDeviceOperation d1", "4300/alloc:ttnn.matmul>BinaryDeviceOperation d1")
	if strings.Join(r.got, "\n") != strings.Join(want, "\n") || s.join.gaveUp != 2 || s.join.given != 2 {
		t.Fatalf("after %d ticks (given %d, gave up %d):\n%s", joinWait, s.join.given, s.join.gaveUp, strings.Join(r.got, "\n"))
	}
	// A process's end lets its waiting records go, in order.
	o = &opsStream{pid: pid}
	o.enter(b, opMatmul, 1)
	o.enter(b, opMatmulDev, 2)
	o.event(b, events.KindAlloc, 2)
	for _, raw := range o.recs {
		s.handle(raw)
	}
	n := len(r.got)
	s.join.processEnded(pid)
	if len(r.got) != n+2 || r.got[n+1] != "4301/alloc:ttnn.matmul>MatmulDeviceOperation d1" {
		t.Fatalf("after the end: %q", r.got[n:])
	}
}

// A program's CB layout, its CBs and its dispatch made on a thread where
// no op is live (a dispatch thread) carry the op of the launch that last
// gave the program its runtime id; another program's carry none.
func TestOpByProgram(t *testing.T) {
	const pid, a, d = 4400, 4400, 4401
	s, r := opsSession(t, pid)
	o := &opsStream{pid: pid}
	o.enter(a, opMatmul, 1)
	o.enter(a, opMatmulDev, 2)
	o.runtimeID(a, 5, 2) // ProgramImpl* 0x9100
	prog := func(tid uint32, k events.Kind, obj uint64) {
		w := events.Wire{Hdr: o.hdr(tid, k, 0), Object: obj, Device: 0x7f0000, DeviceKind: events.DeviceChip, BufferType: -1}
		o.recs = append(o.recs, rawRecord(&w, 0))
	}
	prog(d, events.KindCBLayout, 0x9100)
	cb := events.CBAllocWire{Hdr: o.hdr(d, events.KindCBAlloc, 0), Device: 0x7f0000, DeviceKind: events.DeviceChip, Address: 0x1000, Size: 2048}
	o.recs = append(o.recs, rawRecord(&cb, 0))
	prog(d, events.KindProgramDispatch, 0x9100)
	prog(d, events.KindProgramDispatch, 0x9200)
	for _, raw := range o.recs {
		s.handle(raw)
	}
	want := []string{
		"4400/op_enter:ttnn.matmul d1",
		"4400/op_enter:ttnn.matmul>MatmulDeviceOperation d1 rid5",
		"4400/runtime_id:ttnn.matmul>MatmulDeviceOperation d1 rid5",
		"4401/cb_layout:ttnn.matmul>MatmulDeviceOperation d1 rid5",
		"4401/cb_alloc:ttnn.matmul>MatmulDeviceOperation d1 rid5",
		"4401/program_dispatch:ttnn.matmul>MatmulDeviceOperation d1 rid5",
		"4401/program_dispatch:",
	}
	if strings.Join(r.got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("records:\n%s\nwant:\n%s", strings.Join(r.got, "\n"), strings.Join(want, "\n"))
	}
	s.ops.frames.ended(pid)
	if len(s.ops.frames.progs) != 0 || len(s.ops.frames.layoutProg) != 0 {
		t.Errorf("the process's programs kept after its end")
	}
}
