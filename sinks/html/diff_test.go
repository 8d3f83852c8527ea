package html_test

import (
	"bytes"
	"testing"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/sinks/diff"
	tthtml "github.com/tttrace/tttrace/sinks/html"
)

// The comparison page shows the windows and TT-NN ops that changed, every
// number the diff's --json object's.
func TestDiffPageWindowsAndOps(t *testing.T) {
	run := func(pid uint32, warmup, leaked uint64) *diff.Run {
		limit, free := uint64(1<<30), uint64(1<<29)
		w := func(i int, name string, peak uint64) devices.Window {
			return devices.Window{Index: i, Name: name, StartTsNs: uint64(i) * 1000, Devices: []devices.WindowDevice{{Device: 3,
				Peaks: map[string]devices.Peak{"dram_bytes": {Value: peak, TsNs: uint64(i)*1000 + 7}, "live_buffers": {Value: peak / 4096}},
				MemoryStats: map[string]devices.MemoryStats{"dram": {BytesInUse: 4096, PeakBytesInUse: peak, BytesLimit: &limit,
					LargestFreeBlockBytes: &free}}}}}
		}
		s := &devices.Summary{Type: "summary", Events: 10, Processes: []devices.ProcessSummary{{Pid: pid, Command: "python serve.py",
			Exited: true, Devices: []devices.DeviceSummary{{Device: 3}},
			Windows: []devices.Window{w(0, "", 8192), w(1, "warmup", warmup)},
			Ops: []devices.OpRow{{Name: "ttnn.matmul", DeviceOp: "MatmulDeviceOperation", Calls: 4, Allocs: 4, Bytes: 1 << 20,
				PeakDRAM: 1 << 21, LeakedBuffers: leaked, LeakedBytes: leaked << 18}}}}}
		r, err := diff.FromSummary(s, true)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	res := diff.Compare(run(10, 16384, 0), run(20, 65536, 2), "a.ndjson", "b.ndjson")
	if len(res.Processes) != 1 || len(res.Processes[0].Windows) != 1 || len(res.Processes[0].Ops) != 1 {
		t.Fatalf("%+v", res.Processes)
	}
	var out bytes.Buffer
	if err := tthtml.WriteDiff(&out, res); err != nil {
		t.Fatal(err)
	}
	seen := checkNumbers(t, out.Bytes(), res)
	for _, f := range []string{
		"processes.0.windows.0.chips.0.peaks.0.peak.a", "processes.0.windows.0.chips.0.peaks.0.peak.b", "processes.0.windows.0.chips.0.peaks.0.peak.delta",
		"processes.0.windows.0.chips.0.peaks.1.peak.b",
		"processes.0.windows.0.chips.0.memory_stats.0.peak_bytes_in_use.b", "processes.0.windows.0.chips.0.memory_stats.0.bytes_limit.a",
		"processes.0.ops.0.a.leaked_bytes", "processes.0.ops.0.b.leaked_bytes", "processes.0.ops.0.b.leaked_buffers",
		"growth.0.bytes",
	} {
		if seen[f] == 0 {
			t.Errorf("the page has no %s", f)
		}
	}
	for _, s := range []string{"window 1 (warmup) in A, window 1 (warmup) in B", "ttnn.matmul &gt; MatmulDeviceOperation", "the peak of window 1 (warmup)"} {
		if !bytes.Contains(out.Bytes(), []byte(s)) {
			t.Errorf("the page lacks %q", s)
		}
	}
}
