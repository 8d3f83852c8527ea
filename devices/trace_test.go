package devices

import (
	"fmt"
	"slices"
	"testing"

	"github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
)

func hazardLines(ts *TraceSummary) []string {
	var out []string
	for _, n := range ts.Hazards {
		out = append(out, fmt.Sprintf("trace %d replay %d chip %d: %s %s@%#x seq %d over %s@%#x seq %d",
			*n.Trace, n.Replay, n.Device, n.Buffer.BufferType, n.Buffer.Buffer, n.Buffer.Address, n.Buffer.Seq,
			n.Captured.Buffer, n.Captured.Address, n.Captured.Seq))
	}
	return out
}

// One chip, flat addresses shared by the types (as the replica's flat
// chips): only same-type, same-chip, overlapping, after-capture buffers
// alive at a replay are hazards, each pair once; a Buffer* reused by a
// later buffer is a new buffer.
func TestTraceHazards(t *testing.T) {
	tr := devicestest.Trace
	var notes []TraceNote
	r := newRecWith(t, Options{Notices: NoticeFunc(func(n *Notice) {
		if n.Trace != nil {
			notes = append(notes, *n.Trace)
		}
	})})
	r.apply(
		evAlloc(1, 0xa0, 0, events.DRAM, 0x10000, 0x1000), // input, before the capture: not checked
		tr(1, events.TraceBegin, 0, 0, 7),                 // seq 2
		evAlloc(1, 0xa1, 0, events.DRAM, 0x11000, 0x4000), // seq 3: captured
		evAlloc(1, 0xa2, 0, events.L1, 0x20000, 0x800),    // seq 4: captured
		evFree(1, 0xa1, 0),
		evFree(1, 0xa2, 0),
		tr(1, events.TraceEnd, 0, 0, 7),                   // seq 7
		evAlloc(1, 0xa3, 0, events.Trace, 0x0, 0x2000),    // seq 8: the trace buffer (TRACE)
		evAlloc(1, 0xa1, 0, events.DRAM, 0x11000, 0x1000), // seq 9: same Buffer*, where a1 was: hazard
		evAlloc(1, 0xb0, 0, events.L1, 0x11000, 0x1000),   // seq 10: L1 where a1 (DRAM) was: no hazard
		evAlloc(1, 0xb1, 1, events.L1, 0x20000, 0x800),    // seq 11: other chip: not checked
		evAlloc(1, 0xb2, 0, events.DRAM, 0x15000, 0x1000), // seq 12: past a1's end: clear
		tr(1, events.TraceReplay, 0, 0, 7),                // seq 13: replay 1
		tr(1, events.TraceReplay, 0, 0, 7),                // seq 14: replay 2, nothing changed
		evAlloc(1, 0xb3, 0, events.L1, 0x20400, 0x100),    // seq 15: inside a2's range
		tr(1, events.TraceReplay, 0, 0, 7),                // seq 16: replay 3
		tr(1, events.TraceRelease, 0, 0, 7),
		tr(1, events.TraceReplay, 0, 0, 7), // released
		evDeviceClose(1, 0),
	)
	p := r.proc()
	ts := p.Traces
	if ts == nil {
		t.Fatal("no traces in the summary")
	}
	want := []string{
		"trace 7 replay 1 chip 0: DRAM 0xa1@0x11000 seq 9 over 0xa1@0x11000 seq 3",
		"trace 7 replay 3 chip 0: L1 0xb3@0x20400 seq 15 over 0xa2@0x20000 seq 4",
	}
	if got := hazardLines(ts); !slices.Equal(got, want) {
		t.Errorf("hazards:\n%q\nwant\n%q", got, want)
	}
	// Clear at replay 1: the trace buffer (TRACE), b0 (L1 over DRAM), b2;
	// replay 2 checks nothing (no change); replay 3 again a3, b0, b2 (a1
	// and b3 hit).
	if ts.Checked != 6 || ts.Replays != 3 || ts.Captures != 1 || ts.Releases != 1 || ts.CaptureAllocCount != 2 {
		t.Errorf("counts: %+v", ts)
	}
	if len(ts.InvalidReplays) != 1 || ts.InvalidReplays[0].Reason != "released" {
		t.Errorf("invalid replays: %+v", ts.InvalidReplays)
	}
	if len(notes) != 2+2+1 || notes[2].Type != NoticeTraceHazard || notes[2].Seq != 13 {
		t.Errorf("notices: %+v", notes)
	}
	if ts.Problems() != 3 {
		t.Errorf("problems %d, want 3", ts.Problems())
	}
}

// A mesh trace begun without an id (begin_mesh_trace(cq)) learns it at its
// end; a replay after the mesh closed is device_closed; dynamic trace
// storage under another live trace's mark is a region hazard.
func TestTraceMeshAndRegion(t *testing.T) {
	const mesh = 0x5000
	r := newRec(t)
	r.apply(
		evMeshAlloc(1, 0xc0, mesh, events.DRAM, 0x10000, 0x1000),
		evView(1, 2, 0x10000), evView(1, 3, 0x10000),
		devicestest.MeshTrace(1, events.TraceBegin, mesh, 0, 0, false),
		evMeshAlloc(1, 0xc1, mesh, events.DRAM, 0x11000, 0x2000),
		evView(1, 2, 0x11000), evView(1, 3, 0x11000),
		evMeshFree(1, 0xc1, mesh),
		devicestest.MeshTrace(1, events.TraceEnd, mesh, 0, 4, true),
		evMeshAlloc(1, 0xc2, mesh, events.Trace, 0x0, 0x1000),
		evView(1, 2, 0x0), evView(1, 3, 0x0),
		evAlloc(1, 0xc3, 3, events.DRAM, 0x12000, 0x100), // seq 13: chip 3 only, inside c1
		devicestest.MeshTrace(1, events.TraceReplay, mesh, 0, 4, true),
		// Chip 9, dynamic storage: trace 1's mark is 0x90000; trace 2's
		// buffer (DRAM) lands under it.
		devicestest.Trace(1, events.TraceBegin, 9, 0, 1),
		evAlloc(1, 0xd0, 9, events.DRAM, 0x10000, 0x80000),
		evFree(1, 0xd0, 9),
		devicestest.Trace(1, events.TraceEnd, 9, 0, 1),
		evAlloc(1, 0xd1, 9, events.DRAM, 0xff000, 0x1000),
		devicestest.Trace(1, events.TraceBegin, 9, 0, 2),
		devicestest.Trace(1, events.TraceEnd, 9, 0, 2),
		evAlloc(1, 0xd2, 9, events.DRAM, 0x70000, 0x1000),
		evMeshClose(1, mesh),
		devicestest.MeshTrace(1, events.TraceReplay, mesh, 0, 4, true),
	)
	ts := r.proc().Traces
	if got, want := hazardLines(ts), []string{"trace 4 replay 1 chip 3: DRAM 0xc3@0x12000 seq 13 over 0xc1@0x11000 seq 5"}; !slices.Equal(got, want) {
		t.Errorf("hazards %q, want %q", got, want)
	}
	if len(ts.CaptureAllocs) != 2 || ts.CaptureAllocs[0].Trace == nil || *ts.CaptureAllocs[0].Trace != 4 {
		t.Errorf("capture allocs: %+v", ts.CaptureAllocs)
	}
	if len(ts.RegionHazards) != 1 || *ts.RegionHazards[0].Trace != 2 || *ts.RegionHazards[0].OtherTrace != 1 ||
		ts.RegionHazards[0].HighWaterMark != 0x90000 || ts.RegionHazards[0].Device != 9 {
		t.Errorf("region hazards: %+v", ts.RegionHazards)
	}
	if len(ts.InvalidReplays) != 1 || ts.InvalidReplays[0].Reason != "device_closed" {
		t.Errorf("invalid replays: %+v", ts.InvalidReplays)
	}
}

// Ended processes past --keep-ended keep their trace counts with empty
// lists; past --keep-ended-totals their problems are summed in
// dropped_processes, so --fail-on-trace-hazard still sees them.
func TestTraceRetention(t *testing.T) {
	l := NewLedger(Options{KeepEnded: 1, KeepEndedTotals: 1})
	var seq uint64
	for pid := uint32(10); pid < 13; pid++ {
		for _, e := range []events.Event{
			devicestest.Trace(1, events.TraceBegin, 0, 0, 1),
			evAlloc(1, 0xa1, 0, events.DRAM, 0x1000, 0x1000),
			evFree(1, 0xa1, 0),
			devicestest.Trace(1, events.TraceEnd, 0, 0, 1),
			evAlloc(1, 0xa2, 0, events.DRAM, 0x1000, 0x1000),
			devicestest.Trace(1, events.TraceReplay, 0, 0, 1),
			evExit(0, 0),
		} {
			seq++
			e.Pid, e.Seq, e.TsNs = pid, seq, seq
			l.Apply(&e)
		}
		l.Trim()
	}
	s := l.Summary()
	if s.DroppedProcesses == nil || s.DroppedProcesses.TraceProblems != 1 {
		t.Fatalf("dropped: %+v, want one trace problem", s.DroppedProcesses)
	}
	var trimmed, full int
	for _, p := range s.Processes {
		switch {
		case p.Trimmed != nil:
			trimmed++
			if p.Traces.HazardCount != 1 || len(p.Traces.Hazards) != 0 || p.Trimmed.TraceRecords != 2 {
				t.Errorf("trimmed pid %d: %+v, trimmed %+v", p.Pid, p.Traces, p.Trimmed)
			}
		default:
			full++
			if p.Traces.HazardCount != 1 || len(p.Traces.Hazards) != 1 || len(p.Traces.CaptureAllocs) != 1 {
				t.Errorf("pid %d: %+v", p.Pid, p.Traces)
			}
		}
	}
	if trimmed != 1 || full != 1 {
		t.Errorf("%d trimmed, %d full; want 1 and 1", trimmed, full)
	}
}
