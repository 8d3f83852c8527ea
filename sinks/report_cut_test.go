package sinks

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
)

// A list of the summary longer than the report shows is cut after its
// first 20, with one line saying how many of all are not shown (and,
// where the summary keeps fewer than there were, that it lists the first
// 100).
func TestReportListsCut(t *testing.T) {
	id := uint32(3)
	buf := &devices.TraceBuffer{Buffer: "0xb1", BufferType: "L1", Address: 0x12000, Size: 256, Span: 256, Tid: 5, Seq: 50}
	p := devices.ProcessSummary{Pid: 9, Exited: true, Traces: &devices.TraceSummary{HazardCount: 31, InvalidReplayCount: 32,
		RegionHazardCount: 33, CaptureAllocCount: 34}}
	p.Stats.L1Clashes, p.Stats.AllocFailures = 130, 45
	for range 25 {
		p.L1Clashes = append(p.L1Clashes, devices.Notice{Type: devices.NoticeL1Clash, Program: "0x5600", Headroom: -64})
		p.AllocFailures = append(p.AllocFailures, devices.AllocFailure{BufferType: "L1", Cause: "exhausted"})
		note := devices.TraceNote{Device: 1, Trace: &id, Buffer: buf, Captured: buf, Reason: "released"}
		p.Traces.Hazards = append(p.Traces.Hazards, note)
		p.Traces.InvalidReplays = append(p.Traces.InvalidReplays, note)
		p.Traces.RegionHazards = append(p.Traces.RegionHazards, note)
		p.Traces.CaptureAllocs = append(p.Traces.CaptureAllocs, note)
	}
	var out bytes.Buffer
	if err := writeReport(&out, &devices.Summary{Type: "summary", Processes: []devices.ProcessSummary{p}}); err != nil {
		t.Fatal(err)
	}
	report := out.String()
	for _, want := range []string{
		"\n    … 110 more (the JSON summary lists the first 100)\n",
		"\n    … 25 more (the JSON summary lists the first 100)\n",
		"\n    … 11 more (the JSON summary lists the first 100)\n",
		"\n    … 12 more\n",
		"\n    … 13 more\n",
		"\n    … 14 more (the JSON summary lists the first 100)\n",
	} {
		if strings.Count(report, want) != 1 {
			t.Errorf("report lacks %q once:\n%s", want, report)
		}
	}
	for what, line := range map[string]string{
		"clashes": "program 0x5600", "failures": "    no known chip L1", "hazards": "replay 0 (tid",
		"invalid replays": "replayed after release_trace", "region hazards": "is under trace ?'s mark",
		"capture allocations": "    trace 3 of chip 1: L1",
	} {
		if n := strings.Count(report, line); n != 20 {
			t.Errorf("%s: %d shown, want 20:\n%s", what, n, report)
		}
	}
}
