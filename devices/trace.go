package devices

import (
	"encoding/binary"
	"math/bits"
	"slices"
	"sort"

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
// one on a chip of the trace they share, is overwritten: a trace_hazard,
// made when the replay is seen, before it runs. A pair (endangered buffer,
// captured buffer), named by their alloc seqs, is reported once, at the
// first replay that finds it. Also noticed: replays of a released trace or
// of one whose device closed (trace_replay_invalid), a dynamic trace buffer
// (DRAM) placed under another live trace's DRAM high-water mark
// (trace_region_hazard), and every allocation made while a capture is
// active (trace_capture_alloc).
//
// Cost (issue 32): nothing per event unless a trace exists. An
// allocation checks the active captures, at most TraceMaxOpenCaptures. A
// trace's captured buffers are indexed at its first replay, per group (the
// set of the trace's chips a captured buffer is on) and type, by address
// (sorted starts and ends, and a tree of the highest end): whether a live
// buffer overlaps any of them, and how many, costs O(log n); listing them
// O(log n) each. A replay checks the live buffers once per change of the
// buffer set (a replay loop with no allocation in between costs a
// comparison): a buffer seen at an earlier check of the trace only for
// whether it is clear (traces.checked), a new one for its pairs, listed
// while the trace and the process have room for records (TraceMaxHazards,
// TraceMaxRecords) and past that counted (hazards_suppressed). So no
// replay walks live x captured pairs, and what the ledger keeps is
// bounded: TraceMaxCaptured buffers per capture and TraceMaxCapturedTotal
// per process, the traces (TraceMaxTraces) and active captures
// (TraceMaxOpenCaptures) of a process, TraceMaxHazards reported pairs per
// trace. A trace released, or closed with its chips, drops what it
// remembered; so does a capture forgotten past a bound.

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
	grp   uint32 // its group: traceState.groups
	seq   uint64 // of its alloc
	key   uint64 // Buffer*
	addr  uint64
	span  uint64 // per bank; its size when unknown
	size  uint64
	ts    uint64
	tid   uint32
	site  uint32
	btype uint8
	mesh  bool
}

// end is where c's per-bank range ends (saturated).
func (c *capRange) end() uint64 { return satEnd(c.addr, c.span) }

func satEnd(addr, span uint64) uint64 {
	if e := addr + span; e >= addr {
		return e
	}
	return ^uint64(0)
}

// rangeIndex holds the captured buffers of one group and type by address:
// which of them overlap [a, e) is answered without looking at the others.
type rangeIndex struct {
	items  []uint32 // positions in traceState.captured, by address
	starts []uint64 // their addresses, ascending
	ends   []uint64 // their ends, ascending (not in items' order)
	tree   []uint64 // highest end of each subtree over items (leaves from size)
	size   int      // leaves: a power of two >= len(items)
}

func newRangeIndex(captured []capRange, items []uint32) rangeIndex {
	slices.SortFunc(items, func(a, b uint32) int {
		ca, cb := &captured[a], &captured[b]
		if ca.addr != cb.addr {
			if ca.addr < cb.addr {
				return -1
			}
			return 1
		}
		return int(a) - int(b)
	})
	x := rangeIndex{items: items, starts: make([]uint64, len(items)), ends: make([]uint64, len(items)), size: 1}
	for x.size < len(items) {
		x.size <<= 1
	}
	x.tree = make([]uint64, 2*x.size)
	for i, it := range items {
		c := &captured[it]
		x.starts[i], x.ends[i] = c.addr, c.end()
		x.tree[x.size+i] = c.end()
	}
	for i := x.size - 1; i >= 1; i-- {
		x.tree[i] = max(x.tree[2*i], x.tree[2*i+1])
	}
	slices.Sort(x.ends)
	return x
}

// count is how many of x's ranges overlap [a, e) (a < e): those starting
// below e, less those ending at or below a (which all start below e).
func (x *rangeIndex) count(a, e uint64) uint64 {
	if len(x.items) == 0 {
		return 0
	}
	below, _ := slices.BinarySearchFunc(x.starts, e, func(s, t uint64) int {
		if s < t {
			return -1
		}
		return 1
	}) // first start >= e
	done := sort.Search(len(x.ends), func(i int) bool { return x.ends[i] > a })
	if done >= below {
		return 0
	}
	return uint64(below - done)
}

// visit calls fn with the position in captured of each range overlapping
// [a, e), by address, until fn returns false; it returns false then.
func (x *rangeIndex) visit(a, e uint64, fn func(uint32) bool) bool {
	hi, _ := slices.BinarySearchFunc(x.starts, e, func(s, t uint64) int {
		if s < t {
			return -1
		}
		return 1
	})
	return x.walk(1, 0, x.size, hi, a, fn)
}

func (x *rangeIndex) walk(node, lo, width, hi int, a uint64, fn func(uint32) bool) bool {
	if lo >= hi || x.tree[node] <= a {
		return true
	}
	if width == 1 {
		return fn(x.items[lo])
	}
	half := width / 2
	return x.walk(2*node, lo, half, hi, a, fn) && x.walk(2*node+1, lo+half, half, hi, a, fn)
}

// capGroup is a set of the trace's chips (bits over traceState.chips):
// the chips its captured buffers are on, among the trace's.
type capGroup struct {
	bits []uint64
}

// traceState is one trace of one process.
type traceState struct {
	key       traceKey
	idKnown   bool
	cq        uint8
	meshIdx   uint32 // a mesh trace's mesh (0: a chip's, or not known yet)
	meshPtr   uint64
	chips     []int32 // ascending; set once known
	capturing bool
	endSeq    uint64 // buffers with a larger alloc seq came after the capture
	released  bool
	closed    bool
	dropped   bool // forgotten past a bound: its replays are unknown ones
	captured  []capRange
	capLost   uint64           // captured buffers not remembered (bounds)
	hwm       map[int32]uint64 // per chip of the trace: highest per-bank DRAM end while capturing
	groups    []capGroup
	grpKey    map[string]uint32
	index     []rangeIndex // per group and type, built at the first replay
	indexed   bool
	replays   uint64             // replays seen
	checked   uint64             // non-overlapping buffers checked at its replays
	reported  map[[2]uint64]bool // (endangered seq, captured seq) reported (at most TraceMaxHazards)
	gen       uint64             // proc.bufGen at its last check
	scanSeq   uint64             // the replay seq of its last check: buffers allocated before were listed
	learned   uint64             // proc's MeshChipsLearned at its last check
	hazards   uint64
	suppress  uint64 // its hazards past the bounds, not written
	bufSeq    uint64 // its trace buffer's alloc (0: not seen)
	bufAddr   uint64
	bufSize   uint64
	bufType   uint8
	beginSeq  uint64
	notedNoID bool
	// cbPeak: per core of its chips, the most CB bytes a program dispatched
	// while it was captured holds there, made resident at each replay
	// (resident.go); at most TraceMaxCBCores entries (cb_cores_lost).
	cbPeak map[chipCore]coreCBs
}

// What a process's Metal traces may make the ledger hold and write
// (docs/ndjson.md, "Bounds"; the summary counts what went past them).
const (
	// TraceMaxCaptured bounds the buffers remembered per capture,
	// TraceMaxCapturedTotal per process (captured_lost counts the others).
	TraceMaxCaptured      = 1 << 16
	TraceMaxCapturedTotal = 1 << 18
	// TraceMaxTraces bounds the traces a process keeps (released ones are
	// dropped first), TraceMaxOpenCaptures its captures active at once (the
	// oldest is forgotten): traces_dropped.
	TraceMaxTraces       = 4096
	TraceMaxOpenCaptures = 256
	// TraceMaxHazards bounds the trace_hazard records of one trace,
	// TraceMaxRecords the records of each kind of a process; past them
	// they are counted (hazards_suppressed, ...), not written.
	TraceMaxHazards = 1000
	TraceMaxRecords = 10000
	// TraceMaxCBCores bounds the cores of a trace's per-core CB peak.
	TraceMaxCBCores = 1 << 14
	// maxTraceGroups bounds the distinct sets of its chips a trace's
	// captured buffers are on (those past it are not remembered).
	maxTraceGroups = 64
)

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
	// Past the bounds (docs/ndjson.md, "Bounds"): the records of each kind
	// found but not written (not in the counts above: a trace's hazards past
	// its first 1000, any kind past a process's first 10000); traces and
	// active captures forgotten past 4096 traces or 256 active captures
	// (their replays are unknown_replays); buffers allocated during a capture
	// not remembered past 65536 per capture or 262144 per process (a replay
	// does not check them).
	HazardsSuppressed        uint64 `json:"hazards_suppressed"`
	InvalidReplaysSuppressed uint64 `json:"invalid_replays_suppressed"`
	RegionHazardsSuppressed  uint64 `json:"region_hazards_suppressed"`
	CaptureAllocsSuppressed  uint64 `json:"capture_allocs_suppressed"`
	TracesDropped            uint64 `json:"traces_dropped"`
	CapturedLost             uint64 `json:"captured_lost"`
	// CBCoresLost: cores of a capture's per-core CB peak not remembered
	// past TraceMaxCBCores (a replay does not make them resident).
	CBCoresLost uint64 `json:"cb_cores_lost,omitempty"`
}

// Problems is the number of problems --fail-on-trace-hazard fails for: the
// records of trace_hazard, trace_replay_invalid and trace_region_hazard,
// written or suppressed.
func (t *TraceSummary) Problems() uint64 {
	if t == nil {
		return 0
	}
	n := SatAdd(t.HazardCount, t.InvalidReplayCount)
	n = SatAdd(n, t.RegionHazardCount)
	n = SatAdd(n, t.HazardsSuppressed)
	n = SatAdd(n, t.InvalidReplaysSuppressed)
	return SatAdd(n, t.RegionHazardsSuppressed)
}

// traceRules is the Metal trace rule family of one process.
type traceRules struct {
	*core
	tr *traceProc // nil until the process's first trace record
}

// traceProc is a process's trace bookkeeping (nil until its first trace record).
type traceProc struct {
	traces map[traceKey]*traceState
	order  []*traceState // creation order
	// captures: the active ones; open the same, in begin order (at most
	// TraceMaxOpenCaptures).
	captures map[captureKey]*traceState
	open     []*traceState
	// bufWait: per thread, the trace whose end_trace entry it passed and
	// whose buffer is its next alloc.
	bufWait map[uint32]*traceState
	held    int // captured buffers remembered, over all traces
	sum     TraceSummary
	// Scratch of a check.
	words   []uint64
	keyBuf  []byte
	meshBit map[uint32][]uint64
	hits    []uint32
}

func (p *traceRules) traceProc() *traceProc {
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

// trace handles a KindTrace record. It returns the trace a valid replay
// runs, nil for anything else.
func (p *traceRules) trace(e *events.Event) *traceState {
	mesh, dev, ok := devKey(e)
	if !ok {
		p.anomaly(anUnknownDevice, e, "trace %s on a %s device %#x", e.TraceOp, e.DeviceKind, e.Device)
		return nil
	}
	tp := p.traceProc()
	switch e.TraceOp {
	case events.TraceBegin:
		p.traceBegin(tp, e, mesh, dev)
	case events.TraceEnd:
		p.traceEnd(tp, e, mesh, dev)
	case events.TraceReplay:
		return p.traceReplay(tp, e, mesh, dev)
	case events.TraceRelease:
		tp.sum.Releases++
		if t := tp.traces[traceKey{mesh, dev, e.TraceID}]; t != nil && e.TraceIDKnown {
			t.released = true
			tp.forget(t) // its replays are refused: what it captured is no longer needed
		}
	default:
		p.anomaly(anUnknownKind, e, "trace op %d", uint8(e.TraceOp))
	}
	return nil
}

// forget drops what t remembered (a trace released, closed or dropped).
func (tp *traceProc) forget(t *traceState) {
	tp.held -= len(t.captured)
	t.captured, t.hwm, t.groups, t.grpKey, t.index, t.reported, t.cbPeak = nil, nil, nil, nil, nil, nil, nil
	t.indexed = false
}

// stopCapture takes t out of the active captures.
func (tp *traceProc) stopCapture(t *traceState) {
	t.capturing = false
	ck := captureKey{t.key.mesh, t.key.dev, t.cq}
	if tp.captures[ck] == t {
		delete(tp.captures, ck)
	}
	if i := slices.Index(tp.open, t); i >= 0 {
		tp.open = slices.Delete(tp.open, i, i+1)
	}
}

// drop forgets t past a bound: its replays are unknown ones.
func (tp *traceProc) drop(t *traceState) {
	if t.capturing {
		tp.stopCapture(t)
	}
	if tp.traces[t.key] == t {
		delete(tp.traces, t.key)
	}
	if !t.dropped && !t.released && !t.closed {
		tp.sum.TracesDropped++
	}
	t.dropped = true
	tp.forget(t)
}

func (p *traceRules) traceBegin(tp *traceProc, e *events.Event, mesh bool, dev uint64) {
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
		tp.stopCapture(old) // TT-Metal refuses a second begin on the CQ; the first one ends here
		if !old.idKnown {
			tp.forget(old) // nothing names it any more
		}
	}
	for len(tp.open) >= TraceMaxOpenCaptures {
		// The oldest active capture is forgotten (one whose mesh closed first).
		i := slices.IndexFunc(tp.open, p.traceGone)
		if i < 0 {
			i = 0
		}
		tp.drop(tp.open[i])
	}
	tp.captures[ck] = t
	tp.open = append(tp.open, t)
	if t.idKnown {
		tp.put(t)
	}
}

// traceGone: t is a mesh trace whose mesh closed (a mesh without known
// chips closes without closing a chip: traceClosed does not hear of it).
func (p *traceRules) traceGone(t *traceState) bool {
	return t.key.mesh && t.meshIdx != 0 && p.meshes[t.meshIdx] == nil
}

// put files t under its key (a trace with the same key is replaced).
func (tp *traceProc) put(t *traceState) {
	if old := tp.traces[t.key]; old != nil && old != t {
		tp.forget(old) // nothing names it any more
	}
	tp.traces[t.key] = t
	tp.order = append(tp.order, t)
	if len(tp.order) > TraceMaxTraces {
		// Drop the oldest released (else the oldest) trace.
		i := slices.IndexFunc(tp.order, func(o *traceState) bool { return o.released || o.closed || o.dropped })
		if i < 0 {
			i = 0
		}
		tp.drop(tp.order[i])
		tp.order = slices.Delete(tp.order, i, i+1)
	}
}

func (p *traceRules) traceEnd(tp *traceProc, e *events.Event, mesh bool, dev uint64) {
	ck := captureKey{mesh, dev, e.CQ}
	t := tp.captures[ck]
	if t == nil || (t.idKnown && e.TraceIDKnown && t.key.id != e.TraceID) {
		return // begun before tttrace attached (or refused by TT-Metal)
	}
	tp.stopCapture(t)
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
	tp.bufWait[e.Tid] = t
	if !t.idKnown {
		tp.forget(t) // no replay can name it
		return
	}
	// Spans and chips known by now (a mesh buffer's are learned from its views).
	for i := range t.captured {
		p.traceRefresh(tp, t, &t.captured[i])
	}
}

// traceRefresh updates c from its slot while it still holds c's buffer.
func (p *traceRules) traceRefresh(tp *traceProc, t *traceState, c *capRange) {
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
	if g, ok := p.traceGroup(tp, t, p.bufChips(b)); ok {
		c.grp = g
	}
}

// traceGroup is the group of t for a buffer on chips (ascending), made if
// new; false when they meet none of t's chips, or t has maxTraceGroups.
func (p *traceRules) traceGroup(tp *traceProc, t *traceState, chips []int32) (uint32, bool) {
	w := tp.chipBits(t, chips)
	if w == nil {
		return 0, false
	}
	tp.keyBuf = tp.keyBuf[:0]
	for _, x := range w {
		tp.keyBuf = binary.LittleEndian.AppendUint64(tp.keyBuf, x)
	}
	if g, ok := t.grpKey[string(tp.keyBuf)]; ok {
		return g, true
	}
	if len(t.groups) >= maxTraceGroups {
		return 0, false
	}
	if t.grpKey == nil {
		t.grpKey = map[string]uint32{}
	}
	g := uint32(len(t.groups))
	t.groups = append(t.groups, capGroup{bits: slices.Clone(w)})
	t.grpKey[string(tp.keyBuf)] = g
	return g, true
}

// chipBits is the set of t's chips among chips (any order), as bits over
// t.chips in tp's scratch; nil when none.
func (tp *traceProc) chipBits(t *traceState, chips []int32) []uint64 {
	n := (len(t.chips) + 63) / 64
	if cap(tp.words) < n {
		tp.words = make([]uint64, n)
	}
	w := tp.words[:n]
	clear(w)
	any := false
	for _, c := range chips {
		if i, ok := slices.BinarySearch(t.chips, c); ok {
			w[i/64] |= 1 << (i % 64)
			any = true
		}
	}
	if !any {
		return nil
	}
	return w
}

// lowestBit is the lowest position set in both a and b, or -1.
func lowestBit(a, b []uint64) int {
	for k := range min(len(a), len(b)) {
		if x := a[k] & b[k]; x != 0 {
			return k*64 + bits.TrailingZeros64(x)
		}
	}
	return -1
}

// bufChips are the chips a live buffer is on, ascending.
func (p *traceRules) bufChips(b *bufEntry) []int32 {
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

// traceChips returns the chips of trace t now (a mesh's learned late, once).
func (p *traceRules) traceChips(t *traceState) []int32 {
	if len(t.chips) == 0 && t.key.mesh {
		if idx := p.meshIdx[t.meshPtr]; idx != 0 && p.meshes[idx] != nil {
			t.meshIdx = idx
			t.chips = slices.Clone(p.meshes[idx].chips)
			slices.Sort(t.chips)
		}
	}
	return t.chips
}

// firstCommon is the lowest chip in both a and b (both ascending), or false.
func firstCommon(a, b []int32) (int32, bool) {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			return a[i], true
		case a[i] < b[j]:
			i++
		default:
			j++
		}
	}
	return 0, false
}

// traceAlloc runs after a buffer was put in slot idx (alloc).
func (p *traceRules) traceAlloc(idx uint32, e *events.Event) {
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
	if len(tp.open) == 0 {
		return
	}
	chips := p.bufChips(b)
	for i := 0; i < len(tp.open); i++ {
		t := tp.open[i]
		if p.traceGone(t) {
			t.closed = true
			tp.stopCapture(t)
			tp.forget(t)
			i--
			continue
		}
		if _, ok := firstCommon(chips, p.traceChips(t)); !ok {
			continue
		}
		c := capRange{slot: idx, seq: b.seq, key: b.key, addr: b.addr, span: bufSpan(b), size: b.size,
			btype: b.btype, mesh: b.mesh != 0, tid: b.tid, site: b.site, ts: b.ts}
		kept := false
		if len(t.captured) < TraceMaxCaptured && tp.held < TraceMaxCapturedTotal {
			if g, ok := p.traceGroup(tp, t, chips); ok {
				c.grp = g
				t.captured = append(t.captured, c)
				tp.held++
				kept = true
			}
		}
		if !kept {
			t.capLost++
			tp.sum.CapturedLost++
		}
		if events.BufferType(b.btype) == events.DRAM && t.hwm != nil {
			end := satEnd(b.addr, c.span)
			for _, ch := range chips {
				if _, ok := slices.BinarySearch(t.chips, ch); ok {
					t.hwm[ch] = max(t.hwm[ch], end)
				}
			}
		}
		if !tp.room(&tp.sum.CaptureAllocCount, &tp.sum.CaptureAllocsSuppressed) {
			continue
		}
		n := p.traceNote(NoticeTraceCaptureAlloc, e, t)
		if len(chips) > 0 {
			n.Device = chips[0]
		}
		n.Buffer = capBuffer(&c)
		p.traceEmit(&n, &tp.sum.CaptureAllocs)
	}
}

// room counts one more record of a kind: in count when the process may
// still write one (TraceMaxRecords), else in suppressed.
func (tp *traceProc) room(count, suppressed *uint64) bool {
	if *count >= TraceMaxRecords {
		*suppressed++
		return false
	}
	*count++
	return true
}

// traceBufferPlaced: the alloc that followed end_trace on its thread is the
// trace's buffer. A DRAM one (dynamic trace storage) under another live
// trace's DRAM high-water mark on a chip they share is overwritten when
// that trace replays (TT-Metal checks the newest trace's mark only).
func (p *traceRules) traceBufferPlaced(tp *traceProc, t *traceState, b *bufEntry, e *events.Event) {
	t.bufSeq, t.bufAddr, t.bufSize, t.bufType = b.seq, b.addr, b.size, b.btype
	if events.BufferType(b.btype) != events.DRAM {
		return
	}
	chips := p.traceChips(t)
	for _, o := range tp.order {
		if o == t || o.released || o.closed || o.dropped || o.capturing || len(o.hwm) == 0 || tp.traces[o.key] != o {
			continue
		}
		for _, ch := range chips {
			mark, ok := o.hwm[ch] // only chips of o have a mark
			if !ok || b.addr >= mark {
				continue
			}
			if !tp.room(&tp.sum.RegionHazardCount, &tp.sum.RegionHazardsSuppressed) {
				break
			}
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
func (p *traceRules) traceNote(k NoticeKind, e *events.Event, t *traceState) TraceNote {
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
func (p *traceRules) traceEmit(n *TraceNote, list *[]TraceNote) {
	if len(*list) < MaxAnomalies {
		*list = append(*list, *n)
	}
	if p.set.notify != nil {
		p.set.notify(&Notice{Type: n.Type, Seq: n.Seq, TsNs: n.TsNs, Pid: n.Pid, Tid: n.Tid, Chip: n.Device, Trace: n})
	}
}

func (p *traceRules) traceReplay(tp *traceProc, e *events.Event, mesh bool, dev uint64) *traceState {
	t := tp.traces[traceKey{mesh, dev, e.TraceID}]
	if t == nil || !e.TraceIDKnown {
		tp.sum.UnknownReplays++
		return nil
	}
	if p.traceGone(t) && !t.closed {
		t.closed = true
		tp.forget(t)
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
		if !tp.room(&tp.sum.InvalidReplayCount, &tp.sum.InvalidReplaysSuppressed) {
			return nil
		}
		n := p.traceNote(NoticeTraceReplayInvalid, e, t)
		n.Reason = reason
		p.traceEmit(&n, &tp.sum.InvalidReplays)
		return nil
	}
	t.replays++
	tp.sum.Replays++
	if t.gen == p.bufGen && t.gen != 0 {
		return t // no buffer came or went since the last check: nothing new
	}
	t.gen = p.bufGen
	p.traceCheck(tp, t, e)
	return t
}

// traceCheck checks the live buffers allocated after t's capture at a
// replay (e). A buffer allocated since t's previous check is new: its pairs
// are listed (while t and the process have room for records, then counted).
// One checked before only counts as clear or not, unless chips were learned
// since (a mesh's views): then its pairs are listed again and those not
// reported yet written, while there is room.
func (p *traceRules) traceCheck(tp *traceProc, t *traceState, e *events.Event) {
	chips := p.traceChips(t)
	prev := t.scanSeq
	t.scanSeq = e.Seq
	relearn := prev != 0 && t.learned != p.stats.MeshChipsLearned
	t.learned = p.stats.MeshChipsLearned
	if len(chips) == 0 {
		return
	}
	p.traceIndex(t)
	clear(tp.meshBit)
	for i := range p.bufs.slots.len() {
		b := p.bufs.slots.at(uint32(i))
		if !b.live || b.seq <= t.endSeq {
			continue
		}
		bb := p.traceBufBits(tp, t, b)
		if bb == nil {
			continue // on none of the trace's chips
		}
		a, end := b.addr, satEnd(b.addr, bufSpan(b))
		var total uint64
		for g := range t.groups {
			if lowestBit(t.groups[g].bits, bb) < 0 {
				continue
			}
			x := &t.index[g*int(events.NumBufferTypes)+int(b.btype)]
			total += x.count(a, end)
		}
		if total == 0 {
			t.checked++
			tp.sum.Checked++
			continue
		}
		fresh := b.seq > prev
		if !fresh && !relearn {
			continue // its pairs were listed at an earlier check
		}
		room := min(TraceMaxHazards-min(t.hazards, TraceMaxHazards), TraceMaxRecords-min(tp.sum.HazardCount, TraceMaxRecords))
		if room == 0 {
			if fresh {
				t.suppress += total
				tp.sum.HazardsSuppressed += total
			}
			continue
		}
		// List its pairs: at most room new ones (and, at a check after chips
		// were learned, the ones reported before, at most len(reported)).
		limit := room
		if !fresh {
			limit += uint64(len(t.reported))
		}
		tp.hits = tp.hits[:0]
		for g := range t.groups {
			if uint64(len(tp.hits)) >= limit {
				break
			}
			if lowestBit(t.groups[g].bits, bb) < 0 {
				continue
			}
			x := &t.index[g*int(events.NumBufferTypes)+int(b.btype)]
			x.visit(a, end, func(ci uint32) bool {
				tp.hits = append(tp.hits, ci)
				return uint64(len(tp.hits)) < limit
			})
		}
		slices.Sort(tp.hits) // in capture order
		var written uint64
		for _, ci := range tp.hits {
			c := &t.captured[ci]
			pair := [2]uint64{b.seq, c.seq}
			if t.reported[pair] || written == room {
				continue
			}
			t.reported[pair] = true
			written++
			t.hazards++
			tp.sum.HazardCount++
			n := p.traceNote(NoticeTraceHazard, e, t)
			n.Device = chips[lowestBit(t.groups[c.grp].bits, bb)]
			n.Replay = t.replays
			tb := liveBuffer(b)
			n.Buffer = &tb
			n.Captured = capBuffer(c)
			p.traceEmit(&n, &tp.sum.Hazards)
		}
		if fresh && total > written {
			t.suppress += total - written
			tp.sum.HazardsSuppressed += total - written
		}
	}
}

// traceBufBits is traceBits of live buffer b's chips (a mesh buffer's
// computed once per check of a trace), nil when none is the trace's.
func (p *traceRules) traceBufBits(tp *traceProc, t *traceState, b *bufEntry) []uint64 {
	if b.mesh == 0 {
		return tp.chipBits(t, []int32{b.chip})
	}
	if w, ok := tp.meshBit[b.mesh]; ok {
		return w
	}
	var w []uint64
	if m := p.meshes[b.mesh]; m != nil {
		if x := tp.chipBits(t, m.chips); x != nil {
			w = slices.Clone(x)
		}
	}
	if tp.meshBit == nil {
		tp.meshBit = map[uint32][]uint64{}
	}
	tp.meshBit[b.mesh] = w
	return w
}

// traceIndex builds t's index of its captured buffers (once: they do not
// change after the capture).
func (p *traceRules) traceIndex(t *traceState) {
	if t.indexed {
		return
	}
	t.indexed = true
	nt := int(events.NumBufferTypes)
	per := make([][]uint32, len(t.groups)*nt)
	for i := range t.captured {
		c := &t.captured[i]
		if !events.BufferType(c.btype).Valid() {
			continue
		}
		k := int(c.grp)*nt + int(c.btype)
		per[k] = append(per[k], uint32(i))
	}
	t.index = make([]rangeIndex, len(per))
	for k, items := range per {
		t.index[k] = newRangeIndex(t.captured, items)
	}
	if t.reported == nil {
		t.reported = map[[2]uint64]bool{}
	}
}

// traceClosed: chip id closed; the traces on it, and the captures active
// on it, are gone with it.
func (p *traceRules) traceClosed(chip int32) {
	tp := p.tr
	if tp == nil {
		return
	}
	for _, t := range tp.order {
		if !t.closed && slices.Contains(p.traceChips(t), chip) {
			t.closed = true
			tp.forget(t)
		}
	}
	for i := 0; i < len(tp.open); i++ {
		t := tp.open[i]
		if slices.Contains(p.traceChips(t), chip) || p.traceGone(t) {
			t.closed = true
			tp.stopCapture(t)
			tp.forget(t)
			i--
		}
	}
}

// traceSummary is the process's TraceSummary (nil: no trace record seen).
func (p *traceRules) traceSummary() *TraceSummary {
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

// capturing says whether a trace is being captured on chip id.
func (p *traceRules) capturing(id int32) bool {
	if p.tr == nil {
		return false
	}
	for _, t := range p.tr.open {
		if slices.Contains(p.traceChips(t), id) {
			return true
		}
	}
	return false
}

// noteCBs keeps, in every capture active on chip id, each core's peak of
// the CBs a program dispatched there holds (cores).
func (p *traceRules) noteCBs(id int32, prog uint64, cores []coreBytes) {
	for _, t := range p.tr.open {
		if !slices.Contains(p.traceChips(t), id) {
			continue
		}
		if t.cbPeak == nil {
			t.cbPeak = map[chipCore]coreCBs{}
		}
		for _, cb := range cores {
			k := chipCore{id, cb.xy}
			old, ok := t.cbPeak[k]
			switch {
			case !ok && len(t.cbPeak) >= TraceMaxCBCores:
				p.tr.sum.CBCoresLost++
			case !ok || cb.bytes > old.bytes:
				t.cbPeak[k] = coreCBs{prog: prog, bytes: cb.bytes, op: cb.op}
			}
		}
	}
}
