package sinks

import (
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
)

// NoticeLog's lines, each family's limit (ten, then one line saying more
// are in the report) and the notices it does not tell.
func TestNoticeLog(t *testing.T) {
	var b strings.Builder
	l := NewNoticeLog(&b)
	id, chip := uint32(7), int32(3)
	clash := &devices.Notice{Type: devices.NoticeL1Clash, Pid: 100, Chip: 0, Program: "0x5600", CBRegionEnd: 69632, LowestL1Address: 65536,
		Lowest: devices.L1Buffer{Buffer: "0xa0", Size: 4096, Tid: 101, Seq: 9}, L1BuffersCount: 2}
	oom := &devices.Notice{Type: devices.NoticeAllocFailed, AllocFailed: &devices.AllocFailure{Pid: 100, Tid: 102, BufferType: "DRAM",
		Size: 1 << 20, Device: &chip, Cause: "exhausted", HoldersCount: 3, HoldersBytes: 3 << 20}}
	oomUnknown := &devices.Notice{Type: devices.NoticeAllocFailed, AllocFailed: &devices.AllocFailure{Pid: 100, Tid: 102, BufferType: "L1",
		Size: 64, Why: "the bank manager was not seen made"}}
	buf := &devices.TraceBuffer{BufferType: "DRAM", Buffer: "0xb1", Address: 0x11000, Size: 0x4000, Seq: 12}
	hazard := &devices.TraceNote{Type: devices.NoticeTraceHazard, Pid: 100, Device: 2, Trace: &id, Replay: 1, Buffer: buf,
		Captured: &devices.TraceBuffer{Buffer: "0xa1", Address: 0x10000}}
	invalid := &devices.TraceNote{Type: devices.NoticeTraceReplayInvalid, Pid: 100, Reason: "released"}
	region := &devices.TraceNote{Type: devices.NoticeTraceRegionHazard, Pid: 100, Device: 2, Trace: &id, Buffer: buf, HighWaterMark: 0x20000}
	capture := &devices.TraceNote{Type: devices.NoticeTraceCaptureAlloc, Pid: 100, Trace: &id, Buffer: buf}
	trace := func(n *devices.TraceNote) *devices.Notice {
		return &devices.Notice{Type: n.Type, Pid: n.Pid, Chip: n.Device, Trace: n}
	}

	l.Notice(&devices.Notice{Type: devices.NoticeL1Headroom, Pid: 100}) // not told
	l.Notice(&devices.Notice{Type: devices.NoticeAllocFailed})          // no record: not told
	l.Notice(clash)
	l.Notice(oom)
	l.Notice(oomUnknown)
	l.Notice(trace(capture)) // not told, not counted
	l.Notice(trace(hazard))
	l.Notice(trace(invalid))
	l.Notice(trace(region))
	want := "tttrace: pid 100 chip 0: circular buffers of program 0x5600 end at 69632, above the L1 buffer at 65536 (0xa0, 4096 byte(s), allocated by tid 101, seq 9): 2 L1 buffer(s) in the way\n" +
		"tttrace: pid 100 tid 102: DRAM allocation of 1048576 bytes on chip 3 failed (exhausted); 3 buffer(s) of 3145728 bytes held it: see the report\n" +
		"tttrace: pid 100 tid 102: L1 allocation of 64 bytes on a chip tttrace does not know failed (cause unknown: the bank manager was not seen made); 0 buffer(s) of 0 bytes held it: see the report\n" +
		"tttrace: pid 100 chip 2: replay 1 of trace 7 overwrites live DRAM buffer 0xb1 at 0x11000 (16384 bytes, seq 12): it was allocated after the capture, over captured buffer 0xa1 at 0x10000\n" +
		"tttrace: pid 100: trace ? replayed (released)\n" +
		"tttrace: pid 100 chip 2: the buffer of trace 7 at 0x11000 is under another live trace's high-water mark 0x20000\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}

	// Ten of each family, then one line saying more are in the report.
	b.Reset()
	for range 20 {
		l.Notice(clash)
		l.Notice(oom)
		l.Notice(trace(invalid))
		l.Notice(trace(capture))
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	count := map[string]int{}
	for _, line := range lines {
		switch {
		case strings.Contains(line, "circular buffers"):
			count["clash"]++
		case strings.Contains(line, "allocation of"):
			count["oom"]++
		case strings.Contains(line, "replayed"):
			count["trace"]++
		default:
			count[line]++
		}
	}
	wantCount := map[string]int{"clash": 9, "oom": 8, "trace": 7,
		"tttrace: more L1 clashes: see the report":         1,
		"tttrace: more failed allocations: see the report": 1,
		"tttrace: more trace hazards: see the report":      1}
	if len(count) != len(wantCount) {
		t.Fatalf("lines %v, want %v", count, wantCount)
	}
	for k, v := range wantCount {
		if count[k] != v {
			t.Fatalf("lines %v, want %v", count, wantCount)
		}
	}
}

// A per_core_address_divergence's line, and its family's limit.
func TestNoticeLogDivergence(t *testing.T) {
	var b strings.Builder
	l := NewNoticeLog(&b)
	d := &devices.PerCoreDivergence{Type: "per_core_address_divergence", Pid: 100, Seq: 9, Device: 93, Buffer: "0xb3", Address: 0xfe000,
		Size: 4096, CoresCount: 4, Distinct: 2, Differing: 3}
	for range 11 {
		l.Notice(&devices.Notice{Type: devices.NoticePerCoreDivergence, Pid: 100, Chip: 93, PerCore: d})
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	want := "tttrace: pid 100 chip 93: per-core buffer 0xb3 (4096 bytes, seq 9) is at 0xfe000 on its first core but elsewhere on 3 of its 4 cores (2 addresses): Buffer::address() is wrong there"
	if len(lines) != 11 || lines[0] != want || !strings.Contains(lines[10], "more per-core buffers") {
		t.Fatalf("lines:\n%s", b.String())
	}
}
