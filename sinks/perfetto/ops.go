package perfetto

// TT-NN ops on the timeline (issue #31, docs/perfetto.md "TT-NN ops"): a
// slice per op call on its thread's track, the device-op launches it made
// nested inside, so the memory counters line up with the ops.
//
// Derived only from the events the sink sees (a saved run replayed by
// tttrace report gives the same slices): the records that look at their
// thread's op frames (alloc, alloc_request, alloc_oom, trace, op_enter,
// runtime_id) say which op is live (events.OpFields), and an op_enter what
// it entered. cb_layout, cb_alloc and program_dispatch are left out: on a
// thread where no op is live they carry the op of their program's last
// launch, not the thread's.
//
// Levels: an op called at depth d sits at level d (1: called from
// Python); a device op launched inside it at level d+1, beside the ops it
// calls (a launch on a thread where no op is live: level 1). A slice ends
// at the first later record of its thread that shows it over: one whose op
// state no longer has it (a shallower depth, another op or device op at
// its level), or the thread's next entry at its level or a shallower one;
// or when its process exits. Slices of a process still running when
// tracing ends are left open (Perfetto shows them as not ended).
//
// Bound: a call shorter than OpMin is not a slice of its own. Its
// thread's consecutive short calls at one level (under one parent) are
// gathered into one slice: named after the op when they are all one op
// ("calls" argument: how many), "short ops" otherwise (the "ops" argument
// names them); a call's own nested calls are folded into it. A gathered
// slice is written once it spans OpMin and the next short call is of
// another op, or when the next call comes OpMin or more after it, or a
// long call at its level or its parent's end cuts it. So each thread and
// level gets at most about three slices per OpMin of run time, however
// many ops run, plus the calls of OpMin or longer.
//
// Writing: a slice's begin is written when it is known to be written at
// all (it ended OpMin or more after it began, or something inside it must
// be written), outermost first, each after the gathered slice of the short
// calls before it, so a thread track's slice events are in time order in
// the file.

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tttrace/tttrace/events"
)

// DefaultOpMin is the default OpMin.
const DefaultOpMin = time.Millisecond

const (
	typeSliceBegin = 1 // TrackEvent.Type.TYPE_SLICE_BEGIN
	typeSliceEnd   = 2 // TrackEvent.Type.TYPE_SLICE_END

	// maxOpLevels bounds the open calls kept per thread (the runtime
	// keeps events.OpMaxFrames frames); an entry past it is not a slice.
	maxOpLevels = 2 * events.OpMaxFrames
	// maxOpThreads bounds the threads with op state, over all processes.
	maxOpThreads = 1 << 16
	// aggNames bounds the op names a gathered slice lists.
	aggNames = 8
)

// opCall is an op call or a device-op launch open on a thread.
type opCall struct {
	launch bool
	level  uint16
	name   uint32 // events.OpNames id
	start  uint64
	begun  bool // its begin was written
	rid    uint64
	hasRID bool
	kids   opAgg // its short calls since its last written one
}

// opAgg gathers consecutive short calls of one level.
type opAgg struct {
	calls      uint64
	start, end uint64
	nNames     int
	names      [aggNames]struct{ id, n uint64 } // id: events.OpNames id
	more       uint64                           // calls of names past aggNames
}

func (a *opAgg) add(name uint32, start, end uint64) {
	if a.calls == 0 {
		a.start = start
	}
	a.calls++
	a.end = max(a.end, end)
	for i := range a.nNames {
		if a.names[i].id == uint64(name) {
			a.names[i].n++
			return
		}
	}
	if a.nNames < aggNames {
		a.names[a.nNames] = struct{ id, n uint64 }{uint64(name), 1}
		a.nNames++
		return
	}
	a.more++
}

// single says all a's calls are of one op.
func (a *opAgg) single() bool { return a.nNames == 1 && a.more == 0 }

// opThread is one thread's open calls, outermost first.
type opThread struct {
	tid   uint32
	calls []opCall
	root  opAgg // short calls under no open call
	last  uint64
}

// looksAtOps says whether a record of kind k states its thread's op
// frames (see the file comment).
func looksAtOps(k events.Kind) bool {
	switch k {
	case events.KindAlloc, events.KindAllocRequest, events.KindAllocOom, events.KindTrace,
		events.KindOpEnter, events.KindRuntimeID:
		return true
	}
	return false
}

// opRecord follows the op state a record states.
func (w *Writer) opRecord(ev *events.Event) {
	f := &ev.OpFields
	var p *proc
	if f.InOp() {
		p = w.proc(ev.Pid, ev.TsNs)
	} else if p = w.liveProc(ev.Pid); p == nil || len(p.ops) == 0 {
		return
	}
	th := p.ops[ev.Tid]
	if th == nil {
		if !f.InOp() {
			return
		}
		if w.opThreads >= maxOpThreads {
			w.OpsDropped++
			return
		}
		if p.ops == nil {
			p.ops = map[uint32]*opThread{}
		}
		th = &opThread{tid: ev.Tid, calls: make([]opCall, 0, 4)}
		p.ops[ev.Tid] = th
		w.opThreads++
	}
	t := max(ev.TsNs, th.last)
	th.last = t
	p.lastTs = max(p.lastTs, t)
	d := uint16(f.OpDepth)
	if ev.Kind == events.KindOpEnter {
		switch {
		case f.Entered == events.OpEnteredOp && f.Op != 0 && d > 0:
			w.cutTo(p, th, d, t)
			w.push(th, opCall{level: d, name: f.Op, start: t})
			return
		case f.Entered == events.OpEnteredLaunch && f.DeviceOp != 0:
			w.cutTo(p, th, d+1, t)
			parent := events.OpFields{Op: f.Op, OpDepth: f.OpDepth}
			w.settle(p, th, &parent, t)
			w.push(th, opCall{launch: true, level: d + 1, name: f.DeviceOp, start: t, rid: f.RuntimeID, hasRID: f.HasRuntimeID})
			return
		}
	}
	w.settle(p, th, f, t)
	if n := len(th.calls); n > 0 && f.HasRuntimeID {
		if c := &th.calls[n-1]; c.launch && c.name == f.DeviceOp && c.level == d+1 && !c.hasRID {
			c.rid, c.hasRID = f.RuntimeID, true
		}
	}
}

// liveProc is the live incarnation of pid, nil when there is none.
func (w *Writer) liveProc(pid uint32) *proc {
	if p := w.last; p != nil && w.lastPid == pid && !p.ended {
		return p
	}
	if ps := w.procs[pid]; len(ps) > 0 && !ps[len(ps)-1].ended {
		return ps[len(ps)-1]
	}
	return nil
}

func (w *Writer) push(th *opThread, c opCall) {
	if len(th.calls) >= maxOpLevels {
		w.OpsDropped++
		return
	}
	th.calls = append(th.calls, c)
}

// cutTo ends, at t, the calls at level l or deeper: an entry at level l
// began.
func (w *Writer) cutTo(p *proc, th *opThread, l uint16, t uint64) {
	for n := len(th.calls); n > 0 && th.calls[n-1].level >= l; n-- {
		w.endTop(p, th, t)
	}
}

// settle ends, at t, the innermost calls that the op state f says are
// over: deeper than its innermost, or another op (device op) at its
// level. Calls at shallower levels are taken to be live (f names only its
// innermost op).
func (w *Writer) settle(p *proc, th *opThread, f *events.OpFields, t uint64) {
	d := uint16(f.OpDepth)
	for n := len(th.calls); n > 0; n-- {
		c := &th.calls[n-1]
		var live bool
		switch {
		case c.launch && c.level == d+1:
			live = c.name == f.DeviceOp
		case !c.launch && c.level == d:
			live = c.name == f.Op
		case c.level >= d:
			// Deeper, or a launch of the op above while an op of
			// its level is live.
			live = false
		default:
			live = true
		}
		if live {
			return
		}
		w.endTop(p, th, t)
	}
}

// endTop ends th's innermost call at t.
func (w *Writer) endTop(p *proc, th *opThread, t uint64) {
	i := len(th.calls) - 1
	c := &th.calls[i]
	if !c.begun && t-c.start >= uint64(w.OpMin) {
		w.beginTo(p, th, i)
	}
	if c.begun {
		track := w.thread(p, th.tid, c.start)
		w.writeAgg(track, &c.kids)
		w.slice(typeSliceEnd, track, t, "")
		th.calls = th.calls[:i]
		return
	}
	name, start := c.name, c.start
	th.calls = th.calls[:i]
	// A short call: gathered at its level (its own short calls in it).
	a, parent := &th.root, -1
	if i > 0 {
		a, parent = &th.calls[i-1].kids, i-1
	}
	if a.calls > 0 {
		same := a.single() && a.names[0].id == uint64(name)
		if start-min(start, a.end) >= uint64(w.OpMin) || !same && a.end-a.start >= uint64(w.OpMin) {
			if parent >= 0 {
				w.beginTo(p, th, parent)
			}
			w.writeAgg(w.thread(p, th.tid, a.start), a)
		}
	}
	a.add(name, start, t)
}

// beginTo writes the begins of th's calls 0..i not begun yet, outermost
// first, each after the gathered slice of the short calls before it.
func (w *Writer) beginTo(p *proc, th *opThread, i int) {
	for j := 0; j <= i; j++ {
		c := &th.calls[j]
		if c.begun {
			continue
		}
		track := w.thread(p, th.tid, c.start)
		if j == 0 {
			w.writeAgg(track, &th.root)
		} else {
			w.writeAgg(track, &th.calls[j-1].kids)
		}
		name := events.OpNames.Name(c.name)
		switch {
		case c.launch && c.hasRID:
			w.slice(typeSliceBegin, track, c.start, name, ann{name: "runtime_id", kind: annUint, u: c.rid})
		case c.launch:
			w.slice(typeSliceBegin, track, c.start, name)
		default:
			w.slice(typeSliceBegin, track, c.start, name, ann{name: "depth", kind: annUint, u: uint64(c.level)})
		}
		c.begun = true
	}
}

// writeAgg writes a (if it gathered any call) as one slice and empties it.
func (w *Writer) writeAgg(track uint64, a *opAgg) {
	if a.calls == 0 {
		return
	}
	calls := ann{name: "calls", kind: annUint, u: a.calls}
	if a.single() {
		w.slice(typeSliceBegin, track, a.start, events.OpNames.Name(uint32(a.names[0].id)), calls)
	} else {
		var b strings.Builder
		for i := range a.nNames {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(events.OpNames.Name(uint32(a.names[i].id)))
			b.WriteString(" x")
			b.WriteString(strconv.FormatUint(a.names[i].n, 10))
		}
		if a.more > 0 {
			b.WriteString(", " + strconv.FormatUint(a.more, 10) + " more")
		}
		w.slice(typeSliceBegin, track, a.start, "short ops", calls, ann{name: "ops", kind: annString, s: b.String()})
	}
	w.slice(typeSliceEnd, track, a.end, "")
	*a = opAgg{}
}

// slice writes a slice's begin (with its name and arguments) or end.
func (w *Writer) slice(typ uint64, track, ts uint64, name string, args ...ann) {
	w.trackEvent(typ, track, ts, name, args)
}

// opTids are the threads of p with op state, in order (the output does
// not depend on map order).
func opTids(p *proc) []uint32 {
	tids := make([]uint32, 0, len(p.ops))
	for tid := range p.ops {
		tids = append(tids, tid)
	}
	slices.Sort(tids)
	return tids
}

// opsEnd ends every call of p's threads at t (its exit) and writes what
// was gathered.
func (w *Writer) opsEnd(p *proc, t uint64) {
	for _, tid := range opTids(p) {
		th := p.ops[tid]
		t := max(t, th.last)
		for len(th.calls) > 0 {
			w.endTop(p, th, t)
		}
		w.writeAgg(w.thread(p, tid, th.root.start), &th.root)
		delete(p.ops, tid)
		w.opThreads--
	}
}

// opsOpen writes the begins of the calls still open on p's threads (they
// stay open: the process had not ended when tracing did) and what was
// gathered.
func (w *Writer) opsOpen(p *proc) {
	for _, tid := range opTids(p) {
		th := p.ops[tid]
		if n := len(th.calls); n > 0 {
			w.beginTo(p, th, n-1)
			w.writeAgg(w.thread(p, tid, th.calls[n-1].kids.start), &th.calls[n-1].kids)
		} else {
			w.writeAgg(w.thread(p, tid, th.root.start), &th.root)
		}
		delete(p.ops, tid)
		w.opThreads--
	}
}
