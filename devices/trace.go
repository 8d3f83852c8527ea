package devices

import (
	"slices"

	"github.com/tttrace/tttrace/events"
)

// Metal trace safety (issue 20, docs/ttmetal.md §10).
//
// A capture (begin_trace .. end_trace on a device and command queue)
// records the programs enqueued meanwhile; a replay runs them again and
// they write where their buffers were during the capture. While a capture
// is active on a chip, every buffer allocated on it (a chip of its mesh)
// is remembered with its per-bank range: address and the span the
// allocator reserved per bank (its size when the span is unknown). At a
// replay, a live buffer allocated after that capture ended, on a chip of
// the trace, of the same type, whose per-bank range overlaps a remembered
// one, is overwritten: a trace_hazard, made when the replay is seen, before
// it runs. A pair (endangered buffer, captured buffer), named by their
// alloc seqs, is reported once, at the first replay that finds it. Also
// noticed: replays of a released trace or of one whose device closed
// (trace_replay_invalid), a dynamic trace buffer (DRAM) placed under
// another live trace's DRAM high-water mark (trace_region_hazard), and
// every allocation made while a capture is active (trace_capture_alloc).
//
// Cost: nothing per event unless a trace exists; a replay checks the
// live buffers once per change of the buffer set (a replay loop with no
// allocation in between costs a comparison).

// traceKey names a trace: TT-Metal's ids are per process, looked up per
// device (a Device by its chip, a MeshDevice by its pointer).
type traceKey struct {
	mesh bool
	dev  uint64 // chip id (as uint32) or MeshDevice*
	id   uint32
}

// captureKey names an active capture: a command queue records one trace
// at a time, and the one-argument begin_mesh_trace has no id at entry.
type captureKey struct {
	mesh bool
	dev  uint64
	cq   uint8
}

// capRange is one buffer allocated during a capture.
type capRange struct {
	slot  uint32 // its slot while live (seq tells whether it is still it)
	seq   uint64 // of its alloc
	key   uint64 // Buffer*
	addr  uint64
	span  uint64 // per bank; its size when unknown
	size  uint64
	btype uint8
	mesh  bool
	chips []int32
	tid   uint32
	site  uint32
	ts    uint64
}

// traceState is one trace of one process.
type traceState struct {
	key       traceKey
	idKnown   bool
	cq        uint8
	meshIdx   uint32 // a mesh trace's mesh (0: a chip's)
	meshPtr   uint64
	chips     []int32
	capturing bool
	endSeq    uint64 // buffers with a larger alloc seq came after the capture
	released  bool
	closed    bool
	captured  []capRange
	capLost   uint64             // captured buffers past maxCaptured (not checked)
	hwm       map[int32]uint64   // per chip: highest per-bank DRAM end while capturing
	replays   uint64             // replays seen
	checked   uint64             // non-overlapping buffers checked at its replays
	reported  map[[2]uint64]bool // (endangered seq, captured seq) already reported
	gen       uint64             // proc.bufGen at its last check
	hazards   uint64
	bufSeq    uint64 // its trace buffer's alloc (0: not seen)
	bufAddr   uint64
	bufSize   uint64
	bufType   uint8
	beginSeq  uint64
	notedNoID bool
}

// maxCaptured bounds the buffers remembered per capture, maxTraces the
// traces a process keeps (released ones are dropped first).
const (
	maxCaptured = 1 << 16
	maxTraces   = 4096
)

// TraceBuffer names a buffer in a trace record.
type TraceBuffer struct {
	Buffer     string `json:"buffer"` // Buffer*, hex
	BufferType string `json:"buffer_type"`
	Address    uint64 `json:"address"`
	Size       uint64 `json:"size"`
	Span       uint64 `json:"span"` // per bank (the size when the allocator's span is unknown)
	Mesh       bool   `json:"mesh"` // a mesh buffer (its backing buffer)
	Tid        uint32 `json:"tid"`
	Seq        uint64 `json:"seq"` // of its alloc
	TsNs       uint64 `json:"ts_ns"`
	// Site is where it was allocated (the process's sites); absent when unknown.
	Site uint32 `json:"site,omitempty"`
}

// TraceNote is a trace_hazard, trace_replay_invalid, trace_region_hazard or
// trace_capture_alloc record (docs/ndjson.md). Seq, TsNs and Tid are those
// of the event that made it (the replay; the alloc).
type TraceNote struct {
	Type NoticeKind `json:"type"`
	Seq  uint64     `json:"seq"`
	TsNs uint64     `json:"ts_ns"`
	Pid  uint32     `json:"pid"`
	Tid  uint32     `json:"tid"`
	// Device is the chip it is about (the lowest where the ranges meet);
	// -1 when no chip of a mesh trace is known.
	Device int32 `json:"device"`
	// MeshDevice is the MeshDevice* of a mesh trace, hex.
	MeshDevice string `json:"mesh_device,omitempty"`
	// Trace is the trace id (absent while a one-argument begin_mesh_trace's
	// capture has not ended); CQ its command queue.
	Trace *uint32 `json:"trace,omitempty"`
	CQ    uint8   `json:"cq"`
	// Replay (trace_hazard, trace_replay_invalid): which replay of the
	// trace, from 1 (invalid ones are not counted: 0).
	Replay uint64 `json:"replay,omitempty"`
	// Reason (trace_replay_invalid): released, device_closed or capturing.
	Reason string `json:"reason,omitempty"`
	// Buffer: the buffer in danger (trace_hazard), the trace buffer placed
	// (trace_region_hazard), the buffer allocated (trace_capture_alloc).
	Buffer *TraceBuffer `json:"buffer,omitempty"`
	// Captured (trace_hazard): the buffer of the capture it overlaps.
	Captured *TraceBuffer `json:"captured,omitempty"`
	// OtherTrace, HighWaterMark (trace_region_hazard): the live trace whose
	// DRAM high-water mark (per bank) the trace buffer is under.
	OtherTrace    *uint32 `json:"other_trace,omitempty"`
	HighWaterMark uint64  `json:"high_water_mark,omitempty"`
}

// TraceSummary is what a process did with Metal traces.
type TraceSummary struct {
	Captures       uint64 `json:"captures"`
	Replays        uint64 `json:"replays"`
	Releases       uint64 `json:"releases"`
	UnknownReplays uint64 `json:"unknown_replays"` // of traces captured before tttrace attached
	// Checked: buffers allocated after a capture, alive at one of its
	// replays, that overlap nothing it captured (counted at each replay
	// that checked the buffer set).
	Checked uint64 `json:"checked"`
	// The counts of each record; the lists hold the first 100 of each, in
	// stream order.
	HazardCount        uint64      `json:"hazard_count"`
	InvalidReplayCount uint64      `json:"invalid_replay_count"`
	RegionHazardCount  uint64      `json:"region_hazard_count"`
	CaptureAllocCount  uint64      `json:"capture_alloc_count"`
	Hazards            []TraceNote `json:"hazards"`
	InvalidReplays     []TraceNote `json:"invalid_replays"`
	RegionHazards      []TraceNote `json:"region_hazards"`
	CaptureAllocs      []TraceNote `json:"capture_allocs"`
}

// Problems is the number of records --fail-on-trace-hazard fails for.
func (t *TraceSummary) Problems() uint64 {
	if t == nil {
		return 0
	}
	return t.HazardCount + t.InvalidReplayCount + t.RegionHazardCount
}

// traceProc is a process's trace bookkeeping (nil until its first trace record).
type traceProc struct {
	traces   map[traceKey]*traceState
	order    []*traceState // creation order
	captures map[captureKey]*traceState
	// bufWait: per thread, the trace whose end_trace entry it passed and
	// whose buffer is its next alloc.
	bufWait map[uint32]*traceState
	sum     TraceSummary
}

func (p *proc) traceProc() *traceProc {
	if p.tr == nil {
		p.tr = &traceProc{traces: map[traceKey]*traceState{}, captures: map[captureKey]*traceState{},
			bufWait: map[uint32]*traceState{}}
	}
	return p.tr
}

// devKey is the device part of a trace's keys; false for a device that is
// neither a chip nor a mesh.
func devKey(e *events.Event) (mesh bool, dev uint64, ok bool) {
	switch e.DeviceKind {
	case events.DeviceChip:
		return false, uint64(uint32(e.Chip)), true
	case events.DeviceMesh:
		return true, e.Device, true
	}
	return false, 0, false
}

// trace handles a KindTrace record.
func (p *proc) trace(e *events.Event) {
	mesh, dev, ok := devKey(e)
	if !ok {
		p.anomaly(anUnknownDevice, e, "trace %s on a %s device %#x", e.TraceOp, e.DeviceKind, e.Device)
		return
	}
	tp := p.traceProc()
	switch e.TraceOp {
	case events.TraceBegin:
		p.traceBegin(tp, e, mesh, dev)
	case events.TraceEnd:
		p.traceEnd(tp, e, mesh, dev)
	case events.TraceReplay:
		p.traceReplay(tp, e, mesh, dev)
	case events.TraceRelease:
		tp.sum.Releases++
		if t := tp.traces[traceKey{mesh, dev, e.TraceID}]; t != nil && e.TraceIDKnown {
			t.released = true
		}
	default:
		p.anomaly(anUnknownKind, e, "trace op %d", uint8(e.TraceOp))
	}
}

func (p *proc) traceBegin(tp *traceProc, e *events.Event, mesh bool, dev uint64) {
	tp.sum.Captures++
	t := &traceState{key: traceKey{mesh, dev, e.TraceID}, idKnown: e.TraceIDKnown, cq: e.CQ, capturing: true,
		hwm: map[int32]uint64{}, reported: map[[2]uint64]bool{}, beginSeq: e.Seq}
	if mesh {
		t.meshPtr = e.Device
		t.meshIdx = p.meshIdx[e.Device]
		if m := p.meshes[t.meshIdx]; t.meshIdx != 0 && m != nil {
			t.chips = slices.Clone(m.chips)
		}
	} else {
		t.chips = []int32{e.Chip}
	}
	slices.Sort(t.chips)
	ck := captureKey{mesh, dev, e.CQ}
	if old := tp.captures[ck]; old != nil {
		old.capturing = false // TT-Metal refuses a second begin on the CQ; the first one ends here
	}
	tp.captures[ck] = t
	if t.idKnown {
		tp.put(t)
	}
}

// put files t under its key (a trace with the same key is replaced).
func (tp *traceProc) put(t *traceState) {
	tp.traces[t.key] = t
	tp.order = append(tp.order, t)
	if len(tp.order) > maxTraces {
		// Drop the oldest released (else the oldest) trace.
		i := slices.IndexFunc(tp.order, func(o *traceState) bool { return o.released || o.closed })
		if i < 0 {
			i = 0
		}
		old := tp.order[i]
		if tp.traces[old.key] == old {
			delete(tp.traces, old.key)
		}
		tp.order = slices.Delete(tp.order, i, i+1)
	}
}

func (p *proc) traceEnd(tp *traceProc, e *events.Event, mesh bool, dev uint64) {
	ck := captureKey{mesh, dev, e.CQ}
	t := tp.captures[ck]
	if t == nil || (t.idKnown && e.TraceIDKnown && t.key.id != e.TraceID) {
		return // begun before tttrace attached (or refused by TT-Metal)
	}
	delete(tp.captures, ck)
	t.capturing = false
	t.endSeq = e.Seq
	if !t.idKnown && e.TraceIDKnown {
		t.key.id, t.idKnown = e.TraceID, true
		tp.put(t)
		// The capture_alloc records of this capture learn their trace.
		for i := range tp.sum.CaptureAllocs {
			n := &tp.sum.CaptureAllocs[i]
			if n.Trace == nil && n.Seq > t.beginSeq && n.MeshDevice == hex(t.meshPtr) && n.CQ == t.cq {
				id := t.key.id
				n.Trace = &id
			}
		}
	}
	// Spans known by now (a mesh buffer's is learned from its views).
	for i := range t.captured {
		p.traceRefresh(&t.captured[i])
	}
	tp.bufWait[e.Tid] = t
}

// traceRefresh updates c from its slot while it still holds c's buffer.
func (p *proc) traceRefresh(c *capRange) {
	if int(c.slot) >= p.bufs.slots.len() {
		return
	}
	b := p.bufs.slots.at(c.slot)
	if !b.live || b.seq != c.seq {
		return
	}
	if b.span != 0 {
		c.span = b.span
	}
	c.chips = p.bufChips(b)
}

// bufChips are the chips a live buffer is on, ascending.
func (p *proc) bufChips(b *bufEntry) []int32 {
	if b.mesh == 0 {
		return []int32{b.chip}
	}
	m := p.meshes[b.mesh]
	if m == nil {
		return nil
	}
	c := slices.Clone(m.chips)
	slices.Sort(c)
	return c
}

// bufSpan is what a live buffer reserves per bank, as far as known.
func bufSpan(b *bufEntry) uint64 {
	if b.span != 0 {
		return b.span
	}
	return b.size
}

func liveBuffer(b *bufEntry) TraceBuffer {
	return TraceBuffer{Buffer: hex(b.key), BufferType: events.BufferType(b.btype).String(), Address: b.addr,
		Size: b.size, Span: bufSpan(b), Mesh: b.mesh != 0, Tid: b.tid, Seq: b.seq, TsNs: b.ts, Site: b.site}
}

func capBuffer(c *capRange) *TraceBuffer {
	return &TraceBuffer{Buffer: hex(c.key), BufferType: events.BufferType(c.btype).String(), Address: c.addr,
		Size: c.size, Span: c.span, Mesh: c.mesh, Tid: c.tid, Seq: c.seq, TsNs: c.ts, Site: c.site}
}

// traceChips returns the chips of trace t now (a mesh's learned late).
func (p *proc) traceChips(t *traceState) []int32 {
	if len(t.chips) == 0 && t.key.mesh {
		if idx := p.meshIdx[t.meshPtr]; idx != 0 && p.meshes[idx] != nil {
			t.chips = slices.Clone(p.meshes[idx].chips)
			slices.Sort(t.chips)
		}
	}
	return t.chips
}

// firstCommon is the lowest chip in all of a, b (ascending), or false.
func firstCommon(a, b []int32) (int32, bool) {
	for _, x := range a {
		if slices.Contains(b, x) {
			return x, true
		}
	}
	return 0, false
}

// traceAlloc runs after a buffer was put in slot idx (alloc).
func (p *proc) traceAlloc(idx uint32, e *events.Event) {
	p.bufGen++
	tp := p.tr
	if tp == nil {
		return
	}
	b := p.bufs.slots.at(idx)
	if t := tp.bufWait[e.Tid]; t != nil {
		delete(tp.bufWait, e.Tid)
		p.traceBufferPlaced(tp, t, b, e)
	}
	if len(tp.captures) == 0 {
		return
	}
	chips := p.bufChips(b)
	for _, t := range tp.captures {
		if !t.capturing {
			continue
		}
		if _, ok := firstCommon(chips, p.traceChips(t)); !ok {
			continue
		}
		c := capRange{slot: idx, seq: b.seq, key: b.key, addr: b.addr, span: bufSpan(b), size: b.size,
			btype: b.btype, mesh: b.mesh != 0, chips: chips, tid: b.tid, site: b.site, ts: b.ts}
		if len(t.captured) < maxCaptured {
			t.captured = append(t.captured, c)
		} else {
			t.capLost++
		}
		if events.BufferType(b.btype) == events.DRAM {
			for _, ch := range chips {
				t.hwm[ch] = max(t.hwm[ch], b.addr+c.span)
			}
		}
		tp.sum.CaptureAllocCount++
		n := p.traceNote(NoticeTraceCaptureAlloc, e, t)
		if len(chips) > 0 {
			n.Device = chips[0]
		}
		n.Buffer = capBuffer(&c)
		p.traceEmit(&n, &tp.sum.CaptureAllocs)
	}
}

// traceBufferPlaced: the alloc that followed end_trace on its thread is the
// trace's buffer. A DRAM one (dynamic trace storage) under another live
// trace's DRAM high-water mark on a chip they share is overwritten when
// that trace replays (TT-Metal checks the newest trace's mark only).
func (p *proc) traceBufferPlaced(tp *traceProc, t *traceState, b *bufEntry, e *events.Event) {
	t.bufSeq, t.bufAddr, t.bufSize, t.bufType = b.seq, b.addr, b.size, b.btype
	if events.BufferType(b.btype) != events.DRAM {
		return
	}
	chips := p.traceChips(t)
	for _, o := range tp.order {
		if o == t || o.released || o.closed || o.capturing || tp.traces[o.key] != o {
			continue
		}
		oc := p.traceChips(o)
		for _, ch := range chips {
			mark, ok := o.hwm[ch]
			if !ok || b.addr >= mark || !slices.Contains(oc, ch) {
				continue
			}
			tp.sum.RegionHazardCount++
			n := p.traceNote(NoticeTraceRegionHazard, e, t)
			n.Device = ch
			other := o.key.id
			n.OtherTrace = &other
			n.HighWaterMark = mark
			tb := liveBuffer(b)
			n.Buffer = &tb
			p.traceEmit(&n, &tp.sum.RegionHazards)
			break
		}
	}
}

// traceNote starts a record about trace t made by event e.
func (p *proc) traceNote(k NoticeKind, e *events.Event, t *traceState) TraceNote {
	n := TraceNote{Type: k, Seq: e.Seq, TsNs: e.TsNs, Pid: p.pid, Tid: e.Tid, Device: -1, CQ: t.cq}
	if t.key.mesh {
		n.MeshDevice = hex(t.meshPtr)
	} else {
		n.Device = int32(uint32(t.key.dev))
	}
	if t.idKnown {
		id := t.key.id
		n.Trace = &id
	}
	return n
}

// traceEmit keeps n in list (the first MaxAnomalies) and hands it to the
// notify function.
func (p *proc) traceEmit(n *TraceNote, list *[]TraceNote) {
	if len(*list) < MaxAnomalies {
		*list = append(*list, *n)
	}
	if p.hooks.notify != nil {
		p.hooks.notify(&Notice{Type: n.Type, Seq: n.Seq, TsNs: n.TsNs, Pid: n.Pid, Tid: n.Tid, Chip: n.Device, Trace: n})
	}
}

func (p *proc) traceReplay(tp *traceProc, e *events.Event, mesh bool, dev uint64) {
	t := tp.traces[traceKey{mesh, dev, e.TraceID}]
	if t == nil || !e.TraceIDKnown {
		tp.sum.UnknownReplays++
		return
	}
	reason := ""
	switch {
	case t.closed:
		reason = "device_closed"
	case t.released:
		reason = "released"
	case t.capturing:
		reason = "capturing"
	}
	if reason != "" {
		tp.sum.InvalidReplayCount++
		n := p.traceNote(NoticeTraceReplayInvalid, e, t)
		n.Reason = reason
		p.traceEmit(&n, &tp.sum.InvalidReplays)
		return
	}
	t.replays++
	tp.sum.Replays++
	if t.gen == p.bufGen && t.gen != 0 {
		return // no buffer came or went since the last check: nothing new
	}
	t.gen = p.bufGen
	chips := p.traceChips(t)
	for i := range p.bufs.slots.len() {
		b := p.bufs.slots.at(uint32(i))
		if !b.live || b.seq <= t.endSeq {
			continue
		}
		bc := p.bufChips(b)
		if _, ok := firstCommon(bc, chips); !ok {
			continue
		}
		span := bufSpan(b)
		hit := false
		for j := range t.captured {
			c := &t.captured[j]
			if c.btype != b.btype || c.seq == b.seq || b.addr >= c.addr+c.span || c.addr >= b.addr+span {
				continue
			}
			cc, ok := firstCommon(bc, c.chips)
			if !ok || !slices.Contains(chips, cc) {
				continue
			}
			hit = true
			pair := [2]uint64{b.seq, c.seq}
			if t.reported[pair] {
				continue
			}
			t.reported[pair] = true
			t.hazards++
			tp.sum.HazardCount++
			n := p.traceNote(NoticeTraceHazard, e, t)
			n.Device = cc
			n.Replay = t.replays
			tb := liveBuffer(b)
			n.Buffer = &tb
			n.Captured = capBuffer(c)
			p.traceEmit(&n, &tp.sum.Hazards)
		}
		if !hit {
			t.checked++
			tp.sum.Checked++
		}
	}
}

// traceClosed: chip id closed; the traces on it are gone with it.
func (p *proc) traceClosed(chip int32) {
	if p.tr == nil {
		return
	}
	for _, t := range p.tr.order {
		if slices.Contains(p.traceChips(t), chip) {
			t.closed = true
		}
	}
}

// traceSummary is the process's TraceSummary (nil: no trace record seen).
func (p *proc) traceSummary() *TraceSummary {
	if p.tr == nil {
		return nil
	}
	s := p.tr.sum
	s.Hazards = append([]TraceNote{}, s.Hazards...)
	s.InvalidReplays = append([]TraceNote{}, s.InvalidReplays...)
	s.RegionHazards = append([]TraceNote{}, s.RegionHazards...)
	s.CaptureAllocs = append([]TraceNote{}, s.CaptureAllocs...)
	return &s
}
