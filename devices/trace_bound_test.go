package devices

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
)

// Issue 32, findings 2 and 3: what hostile trace calls can make the ledger
// do, hold and write is bounded, and an honest program's hazards are still
// all reported. The counts are read from the ledger's state and its
// summary's JSON, not from clocks.

// bulk applies events like rec.apply, checking the ledger once at the end
// (a check per event would make these streams quadratic).
func (r *rec) bulk(evs ...events.Event) {
	r.t.Helper()
	for _, e := range evs {
		r.seq++
		r.ts += 100
		e.Seq, e.TsNs, e.Pid = r.seq, r.ts, r.pid
		r.l.Apply(&e)
	}
	if err := r.l.Check(); err != nil {
		r.t.Fatal(err)
	}
}

// traceHeld is what the process's traces hold: buffers remembered from
// captures, reported pairs, and active captures.
func traceHeld(p *proc) (captured, reported, active int) {
	seen := map[*traceState]bool{}
	add := func(t *traceState) {
		if !seen[t] {
			seen[t] = true
			captured += len(t.captured)
			reported += len(t.reported)
		}
	}
	for _, t := range p.traces.tr.order {
		add(t)
	}
	for _, t := range p.traces.tr.traces {
		add(t)
	}
	for _, t := range p.traces.tr.captures {
		add(t)
	}
	return captured, reported, len(p.traces.tr.captures)
}

// traceField is a number of the trace summary's JSON (0 when absent).
func traceField(t *testing.T, ts *TraceSummary, name string) uint64 {
	t.Helper()
	b, err := json.Marshal(ts)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	v, _ := m[name].(float64)
	return uint64(v)
}

// traceOf is the trace of chip (or MeshDevice*, mesh) with id.
func traceOf(p *proc, mesh bool, dev uint64, id uint32) *traceState {
	return p.traces.tr.traces[traceKey{mesh, dev, id}]
}

// reportedPairs are the (endangered, captured) alloc seqs t reported.
func reportedPairs(t *traceState) [][2]uint64 {
	var out [][2]uint64
	for k := range t.reported {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b [2]uint64) int {
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		return int(a[1]) - int(b[1])
	})
	return out
}

// Finding 2: a trace that captured n buffers over one range, replayed with
// n live buffers inside it, is n*n pairs. At most 1000 are written (and
// remembered) per trace; the rest are counted in hazards_suppressed, each
// pair once, also across later replays; an honest trace of the same
// process still has each of its hazards reported.
func TestTraceReplayPairsBounded(t *testing.T) {
	const (
		n    = 600
		base = 0x100000
		size = 0x1000
	)
	r := newRec(t)
	tr := devicestest.Trace
	var evs []events.Event
	add := func(es ...events.Event) uint64 { // the seq of the last
		evs = append(evs, es...)
		return uint64(len(evs))
	}
	// Trace 1 on chip 0: n buffers over [base, base+n*size), one at a time.
	add(tr(1, events.TraceBegin, 0, 0, 1))
	for i := range uint64(n) {
		add(evAlloc(1, 0x10_0000+i, 0, events.DRAM, base, n*size), evFree(1, 0x10_0000+i, 0))
	}
	add(tr(1, events.TraceEnd, 0, 0, 1),
		evAlloc(1, 0xaa, 0, events.Trace, 0, 0x1000)) // its trace buffer
	// n live buffers inside that range, then a replay.
	for i := range uint64(n) {
		add(evAlloc(1, 0x20_0000+i, 0, events.DRAM, base+i*size, size))
	}
	add(tr(1, events.TraceReplay, 0, 0, 1))
	// Later allocations, frees and replays: each new buffer n pairs more.
	for i := range uint64(3) {
		add(evAlloc(1, 0x30_0000+i, 0, events.DRAM, base+size/2+i*size/8, size/8),
			evFree(1, 0x20_0000+i, 0), tr(1, events.TraceReplay, 0, 0, 1))
	}
	// Trace 2 on chip 1, honest: two captured buffers, one later buffer
	// over each, one clear.
	add(tr(1, events.TraceBegin, 1, 0, 2))
	a1 := add(evAlloc(1, 0xa1, 1, events.DRAM, 0x10000, 0x1000))
	a2 := add(evAlloc(1, 0xa2, 1, events.DRAM, 0x20000, 0x1000))
	add(evFree(1, 0xa1, 1), evFree(1, 0xa2, 1),
		tr(1, events.TraceEnd, 1, 0, 2),
		evAlloc(1, 0xa3, 1, events.Trace, 0, 0x1000))
	b1 := add(evAlloc(1, 0xb1, 1, events.DRAM, 0x10800, 0x1000)) // over a1
	add(evAlloc(1, 0xb2, 1, events.DRAM, 0x30000, 0x1000),       // clear
		tr(1, events.TraceReplay, 1, 0, 2))
	b3 := add(evAlloc(1, 0xb3, 1, events.DRAM, 0x1f000, 0x2000)) // over a2
	add(tr(1, events.TraceReplay, 1, 0, 2),
		tr(1, events.TraceReplay, 0, 0, 1)) // trace 1 again: nothing new on chip 0
	r.bulk(evs...)

	p := r.l.procs[r.pid]
	ts := r.proc().Traces
	hostile, honest := traceOf(p, false, 0, 1), traceOf(p, false, 1, 2)
	// The honest trace: both hazards, exactly.
	if got, want := reportedPairs(honest), [][2]uint64{{b1, a1}, {b3, a2}}; !slices.Equal(got, want) || honest.hazards != 2 {
		t.Errorf("honest trace: %d hazards, pairs %v; want 2, %v", honest.hazards, got, want)
	}
	// The hostile trace: at most 1000 records, and as many pairs held.
	if hostile.hazards > 1000 || len(hostile.reported) > 1000 {
		t.Errorf("trace 1: %d trace_hazard records, %d pairs held; want at most 1000", hostile.hazards, len(hostile.reported))
	}
	if ts.HazardCount != hostile.hazards+honest.hazards {
		t.Errorf("hazard_count %d, the traces' records %d + %d", ts.HazardCount, hostile.hazards, honest.hazards)
	}
	// Each pair counted once, written or not.
	pairs := uint64(n*n + 3*n + 2)
	if sup := traceField(t, ts, "hazards_suppressed"); ts.HazardCount+sup != pairs {
		t.Errorf("hazard_count %d + hazards_suppressed %d, want the %d pairs", ts.HazardCount, sup, pairs)
	}
	if ts.Problems() != pairs {
		t.Errorf("problems %d, want %d", ts.Problems(), pairs)
	}
	// Clear at trace 2's replays: the trace buffer a3 and b2, twice.
	// Trace 1's checks count what overlaps nothing on chip 0: its trace
	// buffer, at each of its 5 checks.
	if ts.Checked != 4+5 {
		t.Errorf("checked %d, want 9", ts.Checked)
	}
}

// Finding 2, the process's bound: many traces each past their own bound
// write at most 10000 trace_hazard records together.
func TestTraceHazardsProcessBound(t *testing.T) {
	const traces, captured, live = 12, 40, 30 // 1200 pairs each
	r := newRec(t)
	var evs []events.Event
	for k := range int32(traces) {
		chip, id := 10+k, uint32(100+k)
		evs = append(evs, devicestest.Trace(1, events.TraceBegin, chip, 0, id))
		for i := range uint64(captured) {
			key := uint64(k)<<32 | 0x1000 | i
			evs = append(evs, evAlloc(1, key, chip, events.L1, 0x1000, live*0x100), evFree(1, key, chip))
		}
		evs = append(evs, devicestest.Trace(1, events.TraceEnd, chip, 0, id))
		for i := range uint64(live) {
			evs = append(evs, evAlloc(1, uint64(k)<<32|0x8000|i, chip, events.L1, 0x1000+i*0x100, 0x100))
		}
		evs = append(evs, devicestest.Trace(1, events.TraceReplay, chip, 0, id))
	}
	r.bulk(evs...)
	p := r.l.procs[r.pid]
	ts := r.proc().Traces
	if ts.HazardCount > 10000 {
		t.Errorf("%d trace_hazard records, want at most 10000", ts.HazardCount)
	}
	var sum uint64
	for k := range int32(traces) {
		tr := traceOf(p, false, uint64(10+k), uint32(100+k))
		sum += tr.hazards
		if tr.hazards > 1000 || len(tr.reported) > 1000 {
			t.Errorf("trace %d: %d records, %d pairs held; want at most 1000", 100+k, tr.hazards, len(tr.reported))
		}
	}
	if sum != ts.HazardCount {
		t.Errorf("the traces' records %d, hazard_count %d", sum, ts.HazardCount)
	}
	if sup := traceField(t, ts, "hazards_suppressed"); ts.HazardCount+sup != traces*captured*live {
		t.Errorf("hazard_count %d + hazards_suppressed %d, want %d", ts.HazardCount, sup, traces*captured*live)
	}
}

// An honest mesh trace's pair found only once a mesh's chip is learned,
// after a replay that did not see it, is still reported (the later check
// lists the buffers seen before again).
func TestTraceHazardChipLearnedLate(t *testing.T) {
	const mesh, other = 0x5000, 0x6000
	r := newRec(t)
	r.bulk(
		evMeshAlloc(1, 0xc0, mesh, events.DRAM, 0x90000, 0x1000),
		evView(1, 2, 0x90000), evView(1, 3, 0x90000),
		devicestest.MeshTrace(1, events.TraceBegin, mesh, 0, 4, true),
		evAlloc(1, 0xc1, 3, events.DRAM, 0x10000, 0x1000), // seq 5: captured, on chip 3
		evFree(1, 0xc1, 3),
		devicestest.MeshTrace(1, events.TraceEnd, mesh, 0, 4, true),
		evMeshAlloc(1, 0xd0, other, events.DRAM, 0x10000, 0x1000), // seq 8: its mesh's chips unknown yet
		devicestest.MeshTrace(1, events.TraceReplay, mesh, 0, 4, true),
		evMeshAlloc(1, 0xd1, other, events.DRAM, 0x40000, 0x1000),
		evView(1, 3, 0x40000), // the other mesh is on chip 3: d0 is over c1 there
		devicestest.MeshTrace(1, events.TraceReplay, mesh, 0, 4, true),
	)
	want := []string{"trace 4 replay 2 chip 3: DRAM 0xd0@0x10000 seq 8 over 0xc1@0x10000 seq 5"}
	if got := hazardLines(r.proc().Traces); !slices.Equal(got, want) {
		t.Errorf("hazards %q, want %q", got, want)
	}
}

// Finding 3: captures per (chip, cq) and one-argument begin_mesh_trace
// captures that never end. At most 256 stay active (the oldest are
// forgotten, counted in traces_dropped), so one mesh allocation over their
// chips is remembered, and written, at most 256 times; the mesh's close
// ends those on its chips and drops what they remembered; an honest
// capture afterwards is checked exactly.
func TestTraceOpenCapturesBounded(t *testing.T) {
	const mesh, chips = 0x5000, 64
	r := newRec(t)
	var evs []events.Event
	evs = append(evs, evMeshAlloc(1, 0xc0, mesh, events.DRAM, 0x10000, 0x1000))
	for ch := range int32(chips) {
		evs = append(evs, evView(1, ch, 0x10000))
	}
	// One-argument mesh captures on MeshDevices never seen, then one on
	// the mesh, then one per (chip, cq) of the mesh.
	for i := range uint64(5000) {
		evs = append(evs, devicestest.MeshTrace(1, events.TraceBegin, 0x7000_0000+i*0x1000, 0, 0, false))
	}
	evs = append(evs, devicestest.MeshTrace(1, events.TraceBegin, mesh, 1, 0, false))
	for ch := range int32(chips) {
		for cq := range 256 {
			evs = append(evs, devicestest.Trace(1, events.TraceBegin, ch, uint8(cq), uint32(ch)<<8|uint32(cq)+1))
		}
	}
	r.bulk(evs...)
	p := r.l.procs[r.pid]
	if _, _, active := traceHeld(p); active > 256 {
		t.Errorf("%d captures active, want at most 256", active)
	}
	// One mesh allocation over all its chips.
	r.bulk(evMeshAlloc(1, 0xc1, mesh, events.DRAM, 0x20000, 0x1000))
	ts := r.proc().Traces
	if ts.CaptureAllocCount > 256 {
		t.Errorf("one allocation made %d trace_capture_alloc records, want at most 256", ts.CaptureAllocCount)
	}
	if captured, _, _ := traceHeld(p); captured > 256 {
		t.Errorf("%d captured buffers held, want at most 256", captured)
	}
	if got := traceField(t, ts, "traces_dropped"); got != 5001+chips*256-256 {
		t.Errorf("traces_dropped %d, want %d", got, 5001+chips*256-256)
	}
	// The mesh closes: its chips' captures go, with what they remembered.
	r.bulk(evMeshClose(1, mesh))
	if captured, _, active := traceHeld(p); active != 0 || captured != 0 {
		t.Errorf("after the mesh's close: %d captures active, %d captured buffers held; want none", active, captured)
	}
	// An honest capture on chip 100 afterwards: its allocation and its
	// hazard, exactly.
	before := r.proc().Traces.CaptureAllocCount
	r.bulk(
		devicestest.Trace(1, events.TraceBegin, 100, 0, 9000),
		evAlloc(1, 0xe1, 100, events.L1, 0x40000, 0x800),
		evFree(1, 0xe1, 100),
		devicestest.Trace(1, events.TraceEnd, 100, 0, 9000),
		evAlloc(1, 0xe2, 100, events.Trace, 0, 0x1000),
		evAlloc(1, 0xe3, 100, events.L1, 0x40400, 0x800), // over e1
		devicestest.Trace(1, events.TraceReplay, 100, 0, 9000),
	)
	ts = r.proc().Traces
	if got := ts.CaptureAllocCount - before; got != 1 {
		t.Errorf("the honest capture made %d trace_capture_alloc records, want 1", got)
	}
	e1 := r.seq - 5
	want := []string{fmt.Sprintf("trace 9000 replay 1 chip 100: L1 0xe3@0x40400 seq %d over 0xe1@0x40000 seq %d", r.seq-1, e1)}
	if got := hazardLines(ts); !slices.Equal(got, want) {
		t.Errorf("hazards %q, want %q", got, want)
	}
}

// A one-argument capture on a mesh whose chips are not known yet is
// still ended by the mesh's close (no chip of it closes).
func TestTraceCaptureOfClosedMeshForgotten(t *testing.T) {
	const mesh = 0x5000
	r := newRec(t)
	r.bulk(
		evMeshAlloc(1, 0xc0, mesh, events.DRAM, 0x10000, 0x1000), // the mesh is known, its chips not
		devicestest.MeshTrace(1, events.TraceBegin, mesh, 0, 0, false),
		evMeshClose(1, mesh),
		evAlloc(1, 0xa0, 0, events.DRAM, 0x10000, 0x1000),
	)
	p := r.l.procs[r.pid]
	if _, _, active := traceHeld(p); active != 0 {
		t.Errorf("%d captures active after the mesh closed, want 0", active)
	}
}
