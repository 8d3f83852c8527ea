package perfetto_test

import (
	"bytes"
	"strconv"
	"testing"

	dt "github.com/tttrace/tttrace/devices/devicestest"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks/perfetto/perfettotest"
)

// Each trace record of the ledger (here a hazard, a released trace's
// replay and an allocation during a capture) is one instant on the thread
// of the call that made it, its fields as arguments.
func TestTraceInstants(t *testing.T) {
	var out bytes.Buffer
	const pid = 77
	s, emit := newProcStream(t, &out, 9, pid, false)
	emit(dt.Trace(pid, events.TraceBegin, 2, 0, 7))
	emit(dt.Alloc(pid, 0xa1, 2, events.DRAM, 0x11000, 0x4000)) // captured (and allocated during the capture)
	emit(dt.Free(pid, 0xa1, 2))
	emit(dt.Trace(pid, events.TraceEnd, 2, 0, 7))
	emit(dt.Alloc(pid, 0xa3, 2, events.Trace, 0x0, 0x2000))    // the trace buffer
	emit(dt.Alloc(pid, 0xb1, 2, events.DRAM, 0x12000, 0x1000)) // inside a1: in danger
	emit(dt.Trace(pid, events.TraceReplay, 2, 0, 7))
	emit(dt.Trace(pid, events.TraceRelease, 2, 0, 7))
	emit(dt.Trace(pid, events.TraceReplay, 2, 0, 7))
	emit(events.Event{Kind: events.KindExit, Chip: -1})
	sum := s.l.Summary()
	if err := s.w.Summary(&sum); err != nil {
		t.Fatal(err)
	}
	tr, err := perfettotest.Decode(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	ts := sum.Processes[0].Traces
	if ts == nil || len(ts.Hazards) != 1 || len(ts.InvalidReplays) != 1 || len(ts.CaptureAllocs) == 0 {
		t.Fatalf("the ledger's traces: %+v", ts)
	}
	h := ts.Hazards[0]
	want := map[string]map[string]string{
		"trace_hazard chip 2 trace 7": {"replay": "1", "buffer_address": strconv.FormatUint(h.Buffer.Address, 10),
			"buffer_size": "4096", "captured_address": strconv.FormatUint(h.Captured.Address, 10), "buffer_type": "DRAM", "chip": "2"},
		"trace_replay_invalid chip 2 trace 7 (released)": {"reason": "released", "trace": "7"},
		"trace_capture_alloc chip 2 trace 7":             {"buffer_address": strconv.FormatUint(0x11000, 10), "buffer_size": "16384"},
	}
	seen := map[string]int{}
	for _, in := range tr.Instants {
		w, ok := want[in.Name]
		if !ok {
			continue
		}
		seen[in.Name]++
		for k, v := range w {
			if in.Args[k] != v {
				t.Errorf("%s: %s = %q, want %q (args %v)", in.Name, k, in.Args[k], v, in.Args)
			}
		}
	}
	for name := range want {
		if seen[name] != 1 {
			t.Errorf("%d instants %q; instants %+v", seen[name], name, tr.Instants)
		}
	}
}
