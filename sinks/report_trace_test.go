package sinks

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
)

// The report lists each trace record with its buffers and their sites.
func TestReportTraces(t *testing.T) {
	id, other := uint32(3), uint32(2)
	buf := &devices.TraceBuffer{Buffer: "0xb1", BufferType: "DRAM", Address: 0x12000, Size: 8192, Span: 8192, Tid: 5, Seq: 50, Site: 1}
	capt := &devices.TraceBuffer{Buffer: "0xa1", BufferType: "DRAM", Address: 0x12000, Size: 16384, Span: 16384, Tid: 5, Seq: 39}
	s := devices.Summary{Type: "summary", Processes: []devices.ProcessSummary{{Pid: 9, Exited: true,
		Sites: []devices.Site{{Site: 1, Native: []devices.NativeFrame{{Module: "/lib/libtt_metal.so", Function: "tt::Buffer::create"},
			{Module: "/w/ttwork", Function: "scenario_trace_hazard"}}}},
		Traces: &devices.TraceSummary{Captures: 1, Replays: 2, Checked: 4, HazardCount: 1, InvalidReplayCount: 1, RegionHazardCount: 1,
			Hazards: []devices.TraceNote{{Type: devices.NoticeTraceHazard, Seq: 56, Tid: 5, Device: 81, Trace: &id, Replay: 1,
				Buffer: buf, Captured: capt}},
			InvalidReplays: []devices.TraceNote{{Type: devices.NoticeTraceReplayInvalid, Seq: 60, Tid: 5, Device: 81, Trace: &id, Reason: "released"}},
			RegionHazards: []devices.TraceNote{{Type: devices.NoticeTraceRegionHazard, Seq: 61, Device: 82, Trace: &id, OtherTrace: &other,
				HighWaterMark: 0x90000, Buffer: buf}}}}}}
	var out bytes.Buffer
	if err := writeReport(&out, &s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Metal traces: 1 capture(s), 2 replay(s), 0 release(s); 4 buffer(s) allocated after a capture checked clear",
		"TRACE HAZARDS: 1",
		"trace 3 of chip 81 replay 1 (tid 5 seq 56), chip 81:",
		"overwrites DRAM 0x12000  8.0 KiB",
		"buffer 0xb1  tid 5 seq 50  site 1: scenario_trace_hazard",
		"captured   DRAM 0x12000  16.0 KiB",
		"trace 3 of chip 81 replayed after release_trace (tid 5 seq 60)",
		"trace 3 of chip 82, chip 82: its buffer at 0x12000 is under trace 2's mark 0x90000",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// Records past the ledger's bounds are counted in the report: the hazards
// found in all, those not written, the traces forgotten.
func TestReportTracesSuppressed(t *testing.T) {
	id := uint32(3)
	buf := &devices.TraceBuffer{Buffer: "0xb1", BufferType: "L1", Address: 0x12000, Size: 256, Span: 256, Tid: 5, Seq: 50}
	s := devices.Summary{Type: "summary", Processes: []devices.ProcessSummary{{Pid: 9, Exited: true,
		Traces: &devices.TraceSummary{Captures: 300, Replays: 2, HazardCount: 1000, HazardsSuppressed: 359600,
			CaptureAllocCount: 10000, CaptureAllocsSuppressed: 7, TracesDropped: 44, CapturedLost: 5,
			Hazards: []devices.TraceNote{{Type: devices.NoticeTraceHazard, Seq: 56, Tid: 5, Device: 1, Trace: &id, Replay: 1,
				Buffer: buf, Captured: buf}}}}}}
	var out bytes.Buffer
	if err := writeReport(&out, &s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"not checked, past tttrace's bounds: 44 trace(s) or active capture(s) forgotten (4096 traces, 256 active captures per process; their replays count as unknown), 5 buffer(s) allocated during captures not remembered (65536 per capture, 262144 per process)",
		"TRACE HAZARDS: 360600",
		"359600 of them past the bounds, counted but not written (1000 trace_hazard records per trace, 10000 per process)",
		"allocations during a trace capture: 10007 (the trace's replays write there); 7 of them past the bound of 10000 records, counted but not written",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
