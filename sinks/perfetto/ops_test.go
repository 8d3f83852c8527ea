package perfetto_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks/perfetto"
	"github.com/tttrace/tttrace/sinks/perfetto/perfettotest"
)

// opStream writes records by hand to a writer (op slices need no ledger).
type opStream struct {
	w   *perfetto.Writer
	out bytes.Buffer
	pid uint32
	ts  uint64
	seq uint64
}

func newOpStream(min time.Duration) *opStream {
	s := &opStream{pid: 300, ts: 1_000_000}
	s.w = perfetto.New(&s.out)
	s.w.Comm = func(pid, tid uint32) string { return fmt.Sprintf("t%d", tid) }
	s.w.OpMin = min
	return s
}

func opID(name string) uint32 { return events.OpNames.Intern(name) }

// state is an op state: the innermost op (depth d) and device op.
type state struct {
	op, dev string
	d       uint8
	rid     int64 // -1: none
}

func (s *opStream) rec(kind events.Kind, tid uint32, dt uint64, st state, entered events.OpEntered) uint64 {
	s.ts += dt
	s.seq++
	ev := events.Event{Kind: kind, Pid: s.pid, Tid: tid, TsNs: s.ts, Seq: s.seq, Chip: -1}
	ev.Op, ev.DeviceOp, ev.OpDepth, ev.Entered = opID(st.op), opID(st.dev), st.d, entered
	if st.rid >= 0 {
		ev.RuntimeID, ev.HasRuntimeID = uint64(st.rid), true
	}
	if kind == events.KindRuntimeID {
		ev.Object = 0xabc
	}
	s.w.Event(&ev)
	return s.ts
}

func (s *opStream) finish(t *testing.T, exit bool) map[uint32][]*perfettotest.Slice {
	t.Helper()
	if exit {
		s.ts += 10
		s.w.Event(&events.Event{Kind: events.KindExit, Pid: s.pid, TsNs: s.ts, Chip: -1})
	}
	sum := devices.Summary{}
	if err := s.w.Summary(&sum); err != nil {
		t.Fatal(err)
	}
	tr, err := perfettotest.Decode(s.out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	byTrack, err := perfettotest.Slices(tr.SliceEvents)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint32][]*perfettotest.Slice{}
	for track, ss := range byTrack {
		tk := tr.Tracks[track]
		if tk == nil || !tk.IsThread || uint32(tk.Pid) != s.pid {
			t.Fatalf("slices on track %d, not a thread of pid %d: %+v", track, s.pid, tk)
		}
		out[uint32(tk.Tid)] = ss
	}
	return out
}

func show(ss []*perfettotest.Slice) string {
	var b strings.Builder
	for _, s := range ss {
		end := "open"
		if s.Ended {
			end = fmt.Sprint(s.End)
		}
		fmt.Fprintf(&b, "\n  %s [%d, %s] %v", s.Path(), s.Ts, end, s.Args)
	}
	return b.String()
}

var none = state{rid: -1}

// A scripted run with every rule: a nested op (conv2d's own allocation,
// two launches one after the other, the add it calls at depth 2), the
// records that end each call (the next entry at its level, a record of a
// shallower state), a runtime id, records that do not look (a CB layout
// carrying its program's op) ending nothing, an op that throws (over at
// the next record outside it), a launch on a thread where no op is live,
// and a call still running at the exit.
func TestOpSlicesScripted(t *testing.T) {
	s := newOpStream(0)
	const a, b = 301, 302
	conv := state{op: "ttnn.conv2d", d: 1, rid: -1}
	convC := state{op: "ttnn.conv2d", dev: "Conv2dDeviceOperation", d: 1, rid: -1}
	convC5 := convC
	convC5.rid = 5
	convM := state{op: "ttnn.conv2d", dev: "MatmulDeviceOperation", d: 1, rid: -1}
	add := state{op: "ttnn.add", d: 2, rid: -1}
	addB := state{op: "ttnn.add", dev: "BinaryDeviceOperation", d: 2, rid: -1}
	reshard := state{op: "ttnn.reshard", d: 1, rid: -1}
	mm := state{op: "ttnn.matmul", d: 1, rid: -1}
	worker := state{dev: "MatmulDeviceOperation", rid: -1}

	s.rec(events.KindAlloc, a, 10, none, 0)
	t0 := s.rec(events.KindOpEnter, a, 10, conv, events.OpEnteredOp)
	s.rec(events.KindAlloc, a, 10, conv, 0)
	t1 := s.rec(events.KindOpEnter, a, 10, convC, events.OpEnteredLaunch)
	s.rec(events.KindAllocRequest, a, 10, convC, 0)
	s.rec(events.KindAlloc, a, 10, convC5, 0) // joined to its runtime id
	s.rec(events.KindRuntimeID, a, 10, convC5, 0)
	s.rec(events.KindCBLayout, a, 10, none, 0) // does not look: ends nothing
	t2 := s.rec(events.KindOpEnter, a, 10, convM, events.OpEnteredLaunch)
	s.rec(events.KindOpEnter, a, 10, convM, events.OpEnteredLaunchFrame)
	s.rec(events.KindAlloc, a, 10, convM, 0)
	t3 := s.rec(events.KindOpEnter, a, 10, add, events.OpEnteredOp) // ends the Matmul launch: an op at its level
	t4 := s.rec(events.KindOpEnter, a, 10, addB, events.OpEnteredLaunch)
	s.rec(events.KindAlloc, a, 10, addB, 0)
	t5 := s.rec(events.KindAlloc, a, 10, conv, 0) // ends add and its launch
	t6 := s.rec(events.KindAlloc, a, 10, none, 0) // ends conv2d
	// On b: a launch where no op is live (a worker), and a CB record
	// carrying an op there.
	t7 := s.rec(events.KindOpEnter, b, 10, worker, events.OpEnteredLaunch)
	s.rec(events.KindCBAlloc, b, 10, conv, 0)
	t8 := s.rec(events.KindTrace, b, 10, none, 0)
	// An op that throws: over at the next record outside it.
	t9 := s.rec(events.KindOpEnter, a, 10, reshard, events.OpEnteredOp)
	s.rec(events.KindAlloc, a, 10, reshard, 0)
	t10 := s.rec(events.KindAllocOom, a, 10, none, 0)
	// The next call of the same op at the same level ends the last.
	t11 := s.rec(events.KindOpEnter, a, 10, mm, events.OpEnteredOp)
	t12 := s.rec(events.KindOpEnter, a, 10, mm, events.OpEnteredOp)
	got := s.finish(t, true)
	end := s.ts

	type want struct {
		path       string
		start, end uint64
		args       string
	}
	check := func(tid uint32, ws []want) {
		t.Helper()
		ss := got[tid]
		ok := len(ss) == len(ws)
		for i := 0; ok && i < len(ws); i++ {
			ok = ss[i].Path() == ws[i].path && ss[i].Ts == ws[i].start && ss[i].Ended && ss[i].End == ws[i].end &&
				fmt.Sprint(ss[i].Args) == ws[i].args
		}
		if !ok {
			t.Errorf("thread %d: slices%s\nwant %+v", tid, show(ss), ws)
		}
	}
	check(a, []want{
		{"ttnn.conv2d", t0, t6, "map[depth:1]"},
		{"ttnn.conv2d > Conv2dDeviceOperation", t1, t2, "map[runtime_id:5]"},
		{"ttnn.conv2d > MatmulDeviceOperation", t2, t3, "map[]"},
		{"ttnn.conv2d > ttnn.add", t3, t5, "map[depth:2]"},
		{"ttnn.conv2d > ttnn.add > BinaryDeviceOperation", t4, t5, "map[]"},
		{"ttnn.reshard", t9, t10, "map[depth:1]"},
		{"ttnn.matmul", t11, t12, "map[depth:1]"},
		{"ttnn.matmul", t12, end, "map[depth:1]"},
	})
	check(b, []want{{"MatmulDeviceOperation", t7, t8, "map[]"}})
}

// A call still running when tracing ends (no exit) is left open; a
// process that ends without an exit record has its calls ended at its
// threads' last records.
func TestOpSlicesOpen(t *testing.T) {
	s := newOpStream(time.Hour)
	st := state{op: "ttnn.matmul", d: 1, rid: -1}
	t0 := s.rec(events.KindOpEnter, 7, 10, st, events.OpEnteredOp)
	s.rec(events.KindAlloc, 7, 10, st, 0)
	got := s.finish(t, false)
	if ss := got[7]; len(ss) != 1 || ss[0].Name != "ttnn.matmul" || ss[0].Ts != t0 || ss[0].Ended {
		t.Errorf("want one open slice ttnn.matmul at %d:%s", t0, show(ss))
	}

	s = newOpStream(0)
	t0 = s.rec(events.KindOpEnter, 7, 10, st, events.OpEnteredOp)
	t1 := s.rec(events.KindAlloc, 7, 10, st, 0)
	s.rec(events.KindOpEnter, 8, 10, st, events.OpEnteredOp)
	s.w.ProcessEnded(&devices.Summary{Processes: []devices.ProcessSummary{{Pid: s.pid}}}, false)
	got = s.finish(t, false)
	if ss := got[7]; len(ss) != 1 || !ss[0].Ended || ss[0].Ts != t0 || ss[0].End != t1 {
		t.Errorf("want ttnn.matmul [%d, %d]:%s", t0, t1, show(ss))
	}
}

// call is one op call or launch of a generated run.
type call struct {
	name       string
	launch     bool
	level      int
	start, end uint64
	parent     *call
	kids       []*call
}

// genCalls writes a random run of nested ops and launches on thread tid
// and returns its calls in the order they began. Each call ends at the
// record after it that states its parent's state (the truth of its end).
func genCalls(s *opStream, rng *rand.Rand, tid uint32, n int) []*call {
	ops := []string{"ttnn.matmul", "ttnn.add", "ttnn.conv2d", "ttnn.softmax"}
	devs := []string{"MatmulDeviceOperation", "BinaryDeviceOperation", "Conv2dDeviceOperation"}
	var all []*call
	dur := func() uint64 {
		switch rng.IntN(4) {
		case 0:
			return uint64(1 + rng.IntN(20))
		case 1:
			return uint64(1 + rng.IntN(3000))
		default:
			return uint64(1 + rng.IntN(300))
		}
	}
	var gen func(parent *call, st state, budget *int)
	gen = func(parent *call, st state, budget *int) {
		for *budget > 0 && rng.IntN(4) != 0 {
			*budget--
			c := &call{parent: parent}
			all = append(all, c) // in the order they begin
			var in state
			if parent == nil && rng.IntN(8) == 0 || parent != nil && (st.d >= 6 || rng.IntN(2) == 0) {
				// A launch: of the op of st (none at top level).
				c.launch, c.name, c.level = true, devs[rng.IntN(len(devs))], int(st.d)+1
				in = state{op: st.op, dev: c.name, d: st.d, rid: -1}
				c.start = s.rec(events.KindOpEnter, tid, dur(), in, events.OpEnteredLaunch)
				if rng.IntN(2) == 0 {
					s.rec(events.KindAlloc, tid, dur(), in, 0)
				}
			} else {
				c.name, c.level = ops[rng.IntN(len(ops))], int(st.d)+1
				in = state{op: c.name, d: st.d + 1, rid: -1}
				c.start = s.rec(events.KindOpEnter, tid, dur(), in, events.OpEnteredOp)
				if rng.IntN(2) == 0 {
					s.rec(events.KindAlloc, tid, dur(), in, 0)
				}
				gen(c, in, budget)
			}
			if parent != nil {
				parent.kids = append(parent.kids, c)
			}
			// The record that shows it over: one of its parent's.
			c.end = s.rec(events.KindAlloc, tid, dur(), st, 0)
		}
	}
	for budget := n; budget > 0; {
		// Top level: ops (and now and then a launch where no op is live).
		gen(nil, none, &budget)
		s.rec(events.KindAlloc, tid, dur(), none, 0)
	}
	return all
}

// Random nested runs on two threads: with OpMin 0 every call is its
// slice (name, nesting, start, end); with OpMin > 0 the calls of each
// level are all counted (calls), a gathered slice holds nothing, a slice
// of one call lasted OpMin or more, and the slices stay within the bound.
func TestOpSlicesRandom(t *testing.T) {
	for seed := uint64(1); seed <= 30; seed++ {
		for _, min := range []time.Duration{0, 500, 5000} {
			s := newOpStream(min)
			rng := rand.New(rand.NewPCG(seed, 31))
			truth := map[uint32][]*call{}
			for range 6 {
				tid := uint32(400 + rng.IntN(2))
				truth[tid] = append(truth[tid], genCalls(s, rng, tid, 60)...)
			}
			got := s.finish(t, true)
			for tid, calls := range truth {
				name := fmt.Sprintf("seed %d, OpMin %d, thread %d", seed, min, tid)
				checkRandom(t, name, uint64(min), calls, got[tid])
			}
		}
	}
}

func checkRandom(t *testing.T, name string, opMin uint64, calls []*call, ss []*perfettotest.Slice) {
	t.Helper()
	if opMin == 0 {
		ok := len(ss) == len(calls)
		for i := 0; ok && i < len(calls); i++ {
			c, sl := calls[i], ss[i]
			ok = sl.Name == c.name && sl.Ts == c.start && sl.Ended && sl.End == c.end && sl.Depth == c.level-1 &&
				(c.parent == nil) == (sl.Parent == nil) && (c.parent == nil || sl.Parent.Ts == c.parent.start)
		}
		if !ok {
			var b strings.Builder
			for _, c := range calls {
				fmt.Fprintf(&b, "\n  %s%s [%d, %d]", strings.Repeat("  ", c.level-1), c.name, c.start, c.end)
			}
			t.Errorf("%s: slices%s\nwant%s", name, show(ss), b.String())
		}
		return
	}
	// A written call: its slice (same start, name, one call).
	byStart := map[uint64]*call{}
	for _, c := range calls {
		byStart[c.start] = c
	}
	var first, last uint64 = ^uint64(0), 0
	for _, c := range calls {
		first, last = min(first, c.start), max(last, c.end)
	}
	kidsCalls := map[*perfettotest.Slice]uint64{}
	var topCalls uint64
	perParent := map[*perfettotest.Slice]int{}
	plainUnder := map[*perfettotest.Slice]int{}
	for _, sl := range ss {
		if !sl.Ended {
			t.Errorf("%s: slice %s at %d not ended", name, sl.Name, sl.Ts)
			continue
		}
		gathered := sl.Args["calls"] != ""
		if gathered && sl.Children() > 0 {
			t.Errorf("%s: gathered slice %s at %d holds %d slices", name, sl.Path(), sl.Ts, sl.Children())
		}
		if !gathered {
			c := byStart[sl.Ts]
			if c == nil || c.name != sl.Name || c.end != sl.End {
				t.Errorf("%s: slice %s [%d, %d] is no call", name, sl.Path(), sl.Ts, sl.End)
			} else if c.end-c.start < opMin {
				t.Errorf("%s: slice %s [%d, %d] shorter than %d", name, sl.Path(), sl.Ts, sl.End, opMin)
			}
			plainUnder[sl.Parent]++
		}
		perParent[sl.Parent]++
		if sl.Parent == nil {
			topCalls += sl.Calls()
		} else {
			kidsCalls[sl.Parent] += sl.Calls()
		}
	}
	top := 0
	for _, c := range calls {
		if c.parent == nil {
			top++
		}
	}
	if topCalls != uint64(top) {
		t.Errorf("%s: top-level slices count %d calls, the run made %d", name, topCalls, top)
	}
	for _, sl := range ss {
		if sl.Args["calls"] != "" {
			continue
		}
		if c := byStart[sl.Ts]; c != nil && kidsCalls[sl] != uint64(len(c.kids)) {
			t.Errorf("%s: the slices in %s at %d count %d calls, it made %d", name, sl.Path(), sl.Ts, kidsCalls[sl], len(c.kids))
		}
	}
	// The bound: per parent, about three slices per OpMin of its span,
	// plus its plain slices and one.
	for parent, n := range perParent {
		span := last - first
		if parent != nil {
			span = parent.End - parent.Ts
		}
		if bound := 3*(span/opMin+1) + 2*uint64(plainUnder[parent]) + 1; uint64(n) > bound {
			t.Errorf("%s: %d slices under %v, bound %d", name, n, parent, bound)
		}
	}
}

// Many short calls of one op are one slice; alternating short ops are
// gathered into slices of about OpMin; a long op is its own slice with its
// short launches gathered inside; a pause of OpMin splits.
func TestOpSlicesGathered(t *testing.T) {
	s := newOpStream(1000)
	const tid = 9
	add := state{op: "ttnn.add", d: 1, rid: -1}
	addB := state{op: "ttnn.add", dev: "BinaryDeviceOperation", d: 1, rid: -1}
	mul := state{op: "ttnn.mul", d: 1, rid: -1}
	t0 := s.rec(events.KindOpEnter, tid, 10, add, events.OpEnteredOp)
	for range 100 {
		s.rec(events.KindOpEnter, tid, 1, addB, events.OpEnteredLaunch)
		s.rec(events.KindAlloc, tid, 1, add, 0)
		s.rec(events.KindOpEnter, tid, 1, add, events.OpEnteredOp)
	}
	t1 := s.rec(events.KindAlloc, tid, 1, none, 0)
	// 400 alternating short calls, 5 ns each: gathered by ~1000 ns.
	t2 := s.ts + 2000
	s.ts = t2 - 5
	for i := range 400 {
		st := add
		if i%2 == 1 {
			st = mul
		}
		s.rec(events.KindOpEnter, tid, 5, st, events.OpEnteredOp)
	}
	t3 := s.rec(events.KindAlloc, tid, 5, none, 0)
	// A long op with 50 short launches.
	t4 := s.rec(events.KindOpEnter, tid, 5000, add, events.OpEnteredOp)
	for range 50 {
		s.rec(events.KindOpEnter, tid, 10, addB, events.OpEnteredLaunch)
		s.rec(events.KindAlloc, tid, 10, add, 0)
	}
	t5 := s.rec(events.KindAlloc, tid, 10, none, 0)
	got := s.finish(t, true)[tid]
	if len(got) < 4 {
		t.Fatalf("slices:%s", show(got))
	}
	if g := got[0]; g.Name != "ttnn.add" || g.Calls() != 101 || g.Ts != t0 || g.End != t1 || g.Children() != 0 {
		t.Errorf("want ttnn.add x101 [%d, %d], got %s [%d, %d] %v", t0, t1, g.Name, g.Ts, g.End, g.Args)
	}
	var alt uint64
	i := 1
	for ; i < len(got) && got[i].Name == "short ops"; i++ {
		g := got[i]
		alt += g.Calls()
		if g.End-g.Ts > 1100 || (g.End != t3 && g.End-g.Ts < 1000) || !strings.Contains(g.Args["ops"], "ttnn.add x") {
			t.Errorf("gathered %s [%d, %d] %v: want ~1000 ns", g.Name, g.Ts, g.End, g.Args)
		}
	}
	if alt != 400 || got[1].Ts != t2 || got[i-1].End != t3 {
		t.Errorf("alternating calls: %d gathered, want 400 from %d to %d:%s", alt, t2, t3, show(got))
	}
	rest := got[i:]
	if len(rest) != 2 || rest[0].Path() != "ttnn.add" || rest[0].Calls() != 1 || rest[0].Ts != t4 || rest[0].End != t5 ||
		rest[1].Path() != "ttnn.add > BinaryDeviceOperation" || rest[1].Calls() != 50 {
		t.Errorf("the long op:%s", show(rest))
	}
	if slices.ContainsFunc(got, func(s *perfettotest.Slice) bool { return !s.Ended }) {
		t.Error("a slice not ended")
	}
}

// The op slices decode with protoc against the official schema, as
// Decode reads them.
func TestOpSlicesSchema(t *testing.T) {
	pc := protoc(t)
	s := newOpStream(0)
	rng := rand.New(rand.NewPCG(3, 3))
	genCalls(s, rng, 11, 40)
	s.finish(t, true)
	ps, err := perfettotest.Protoc(pc, s.out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range perfettotest.CheckSchema(ps) {
		t.Error(p)
	}
	evs, err := perfettotest.ProtocSliceEvents(ps)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := perfettotest.Decode(s.out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 || fmt.Sprint(evs) != fmt.Sprint(tr.SliceEvents) {
		t.Errorf("protoc reads %d slice events, Decode %d:\n%v\n%v", len(evs), len(tr.SliceEvents), evs, tr.SliceEvents)
	}
}
