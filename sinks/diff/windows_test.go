package diff

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
)

// win is a crafted window of chip 0: its DRAM peak (at ts), DRAM in use at
// its end, and the chip's allocator then.
func win(index int, name string, start, dramPeak, ts, inUse uint64) devices.Window {
	limit, free := uint64(12<<30), uint64(12<<30)-inUse
	return devices.Window{Index: index, Name: name, StartTsNs: start, Devices: []devices.WindowDevice{{Device: 0,
		Peaks: map[string]devices.Peak{"dram_bytes": {Value: dramPeak, TsNs: ts}, "live_buffers": {Value: 1, TsNs: ts}},
		MemoryStats: map[string]devices.MemoryStats{"dram": {BytesInUse: inUse, PeakBytesInUse: dramPeak, BytesLimit: &limit,
			LargestFreeBlockBytes: &free}}}}}
}

// windowed is a baseline run (baseline's) with windows ws.
func windowed(pid uint32, pcBase uint64, siteBase uint32, ws ...devices.Window) *devices.Summary {
	s := baseline(pid, pcBase, siteBase)
	s.Processes[0].Windows = ws
	return s
}

// A known change in a window (its DRAM peak up by 32 KiB, memory_stats
// with it) is named, with nothing else: windows are matched by name (B has
// one more mark before "steady", which moves its index), the window only
// in B is listed as appeared but is not growth, and --fail-on-growth
// judges the window's peak.
func TestWindowsKnownChange(t *testing.T) {
	a := windowed(100, 0x7f0000, 0,
		win(0, "", 0, 12288, 1500, 4096), win(1, "warmup", 2000, 8192, 2100, 4096), win(2, "steady", 3000, 4096, 3000, 4096))
	b := windowed(200, 0x5500000, 40,
		win(0, "", 0, 12288, 9500, 4096), win(1, "warmup", 10000, 8192+32768, 10200, 4096), win(2, "probe", 11000, 4096, 11000, 4096),
		win(3, "steady", 12000, 4096, 12000, 4096))
	r := Compare(collect(t, a, map[uint32]uint64{100: 1000}), collect(t, b, map[uint32]uint64{200: 9000}), "a", "b")
	if len(r.Processes) != 1 {
		t.Fatalf("%+v", r.Processes)
	}
	p := r.Processes[0]
	if len(p.Chips) != 0 || len(p.Sites) != 0 || len(p.Records) != 0 || len(p.Ops) != 0 || p.WindowsDropped != nil {
		t.Errorf("more than the windows changed: %+v", p)
	}
	if len(p.Windows) != 2 {
		t.Fatalf("windows: %+v", p.Windows)
	}
	w := p.Windows[0]
	if w.Status != "changed" || w.Name != "warmup" || w.NameB != "" || *w.IndexA != 1 || *w.IndexB != 1 || len(w.Chips) != 1 {
		t.Fatalf("window: %+v", w)
	}
	c := w.Chips[0]
	if c.Device != 0 || c.Status != "changed" || len(c.Peaks) != 1 || c.Peaks[0].Counter != "dram_bytes" || c.Peaks[0].Peak != num(8192, 8192+32768) ||
		*c.Peaks[0].PeakAtA != 100 || *c.Peaks[0].PeakAtB != 200 {
		t.Errorf("peaks: %+v", c)
	}
	if len(c.MemoryStats) != 1 || c.MemoryStats[0].Type != "dram" || *c.MemoryStats[0].PeakBytesInUse.Delta != 32768 ||
		!c.MemoryStats[0].BytesInUse.same() || !c.MemoryStats[0].BytesLimit.same() || !c.MemoryStats[0].LargestFreeBlockBytes.same() {
		t.Errorf("memory_stats: %+v", c.MemoryStats)
	}
	if w := p.Windows[1]; w.Status != "appeared" || w.Name != "probe" || w.IndexA != nil || *w.IndexB != 2 || len(w.Chips) != 1 ||
		w.Chips[0].Status != "appeared" || w.Chips[0].MemoryStats[0].BytesInUse.A != nil {
		t.Errorf("the window only in B: %+v", w)
	}
	if len(r.Growth) != 1 {
		t.Fatalf("growth: %+v", r.Growth)
	}
	g := r.Growth[0]
	if g.At != "window_peak" || g.Window == nil || *g.Window != (WindowRef{1, "warmup"}) || g.Counter != "dram_bytes" || g.Bytes != 32768 || *g.Pct != 400 {
		t.Errorf("growth: %+v", g)
	}
	if n := len(r.Exceeding(Limit{Bytes: 32767})); n != 1 {
		t.Errorf("--fail-on-growth 32767: %d exceed it", n)
	}
	if n := len(r.Exceeding(Limit{Bytes: 32768})); n != 0 {
		t.Errorf("--fail-on-growth 32768: %d exceed it", n)
	}
	var out bytes.Buffer
	if err := r.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"  windows (peaks in the window; memory_stats at its end):",
		"    window 1 (warmup) (index A 1, B 1)",
		"      chip 0 DRAM peak 8.0 KiB -> 40.0 KiB (+32.0 KiB), at +0.000s / +0.000s",
		"      chip 0 memory_stats dram: peak_bytes_in_use 8.0 KiB -> 40.0 KiB",
		"    window 2 (probe): only in B (index A -, B 2)",
		"growth: 1 memory counter(s) higher in B; the most: pid 100/200 chip 0 DRAM at the peak of window 1 (warmup) 8.0 KiB -> 40.0 KiB (+32.0 KiB, +400.0%)",
	} {
		if !strings.Contains(out.String(), want+"\n") {
			t.Errorf("text lacks %q:\n%s", want, out.String())
		}
	}

	// The same windows: no change, whatever their times.
	b = windowed(200, 0x5500000, 40,
		win(0, "", 0, 12288, 9500, 4096), win(1, "warmup", 10000, 8192, 10500, 4096), win(2, "steady", 12000, 4096, 12000, 4096))
	if r := compare(t, a, b, true); !r.Same {
		t.Errorf("the same windows differ: %+v", r.Processes)
	}
}

// Windows left unmatched by name are matched by index (a renamed mark);
// one before the first window a run kept, when it dropped some, is not
// listed (it may be among them); a process whose totals alone were kept
// has its windows not compared.
func TestWindowsMatching(t *testing.T) {
	a := windowed(100, 0x7f0000, 0, win(0, "", 0, 4096, 1, 4096), win(1, "decode", 10, 4096, 10, 4096))
	b := windowed(200, 0x5500000, 40, win(0, "", 0, 4096, 1, 4096), win(1, "decode-2", 10, 4096, 10, 4096))
	r := compare(t, a, b, true)
	if len(r.Processes) != 1 || len(r.Processes[0].Windows) != 1 {
		t.Fatalf("%+v", r.Processes)
	}
	if w := r.Processes[0].Windows[0]; w.Status != "changed" || w.Name != "decode" || w.NameB != "decode-2" || len(w.Chips) != 0 || len(r.Growth) != 0 {
		t.Errorf("a renamed window: %+v", w)
	}

	// B dropped windows 0-4 (past the bound): A's window 1 is not known
	// to have vanished.
	a = windowed(100, 0x7f0000, 0, win(0, "", 0, 4096, 1, 4096), win(1, "x", 10, 4096, 10, 4096), win(5, "y", 50, 4096, 50, 4096))
	b = windowed(200, 0x5500000, 40, win(5, "y", 50, 4096, 50, 4096))
	b.Processes[0].WindowsDropped = 5
	r = compare(t, a, b, true)
	if !r.Same {
		t.Errorf("dropped windows: %+v", r.Processes)
	}
	// With a change besides, the process says what was dropped.
	b.Processes[0].Windows[0].Devices[0].Peaks["dram_bytes"] = devices.Peak{Value: 8192, TsNs: 50}
	r = compare(t, a, b, true)
	if len(r.Processes) != 1 || len(r.Processes[0].Windows) != 1 || *r.Processes[0].WindowsDropped != num(0, 5) || len(r.Growth) != 1 {
		t.Errorf("dropped windows: %+v", r.Processes)
	}

	// Trimmed: not compared.
	b = windowed(200, 0x5500000, 40, win(0, "", 0, 1<<20, 1, 4096))
	b.Processes[0].Trimmed = &devices.Trimmed{}
	r = compare(t, a, b, true)
	if !r.Same || len(r.Growth) != 0 {
		t.Errorf("trimmed: %+v", r.Processes)
	}
}

// The TT-NN ops rows: matched by (name, device op); each row whose figures
// differ is listed with them, appeared and vanished ones too; none is
// growth (its memory is its chips').
func TestOpsKnownChange(t *testing.T) {
	rows := func(leaked uint64, extra ...devices.OpRow) []devices.OpRow {
		return append([]devices.OpRow{
			{Name: "ttnn.matmul", Calls: 2, Allocs: 2, Bytes: 65536},
			{Name: "ttnn.matmul", DeviceOp: "MatmulDeviceOperation", Calls: 2, Allocs: 2, Bytes: 65536, PeakDRAM: 1 << 20, CBBytes: 4096,
				LeakedBuffers: leaked, LeakedBytes: leaked * 32768},
			{Name: "", DeviceOp: "MatmulDeviceOperation", Calls: 1},
		}, extra...)
	}
	a := baseline(100, 0x7f0000, 0)
	a.Processes[0].Ops = rows(0, devices.OpRow{Name: "ttnn.add", Calls: 1, Allocs: 1, Bytes: 2048, PeakL1: 2048})
	b := baseline(200, 0x5500000, 40)
	b.Processes[0].Ops = rows(1, devices.OpRow{Name: "ttnn.split", DeviceOp: "SplitDeviceOperation", Calls: 1, AllocFailures: 1})
	r := compare(t, a, b, true)
	if len(r.Processes) != 1 || len(r.Growth) != 0 {
		t.Fatalf("%+v, growth %+v", r.Processes, r.Growth)
	}
	p := r.Processes[0]
	var got []string
	for _, o := range p.Ops {
		j, _ := json.Marshal(o)
		got = append(got, string(j))
	}
	want := []string{
		`{"status":"grew","name":"ttnn.matmul","device_op":"MatmulDeviceOperation",` +
			`"a":{"calls":2,"allocs":2,"bytes":65536,"peak_dram_bytes":1048576,"peak_l1_bytes":0,"cb_bytes":4096,"alloc_failures":0,"leaked_buffers":0,"leaked_bytes":0},` +
			`"b":{"calls":2,"allocs":2,"bytes":65536,"peak_dram_bytes":1048576,"peak_l1_bytes":0,"cb_bytes":4096,"alloc_failures":0,"leaked_buffers":1,"leaked_bytes":32768}}`,
		`{"status":"vanished","name":"ttnn.add",` +
			`"a":{"calls":1,"allocs":1,"bytes":2048,"peak_dram_bytes":0,"peak_l1_bytes":2048,"cb_bytes":0,"alloc_failures":0,"leaked_buffers":0,"leaked_bytes":0},` +
			`"b":{"calls":0,"allocs":0,"bytes":0,"peak_dram_bytes":0,"peak_l1_bytes":0,"cb_bytes":0,"alloc_failures":0,"leaked_buffers":0,"leaked_bytes":0}}`,
		`{"status":"appeared","name":"ttnn.split","device_op":"SplitDeviceOperation",` +
			`"a":{"calls":0,"allocs":0,"bytes":0,"peak_dram_bytes":0,"peak_l1_bytes":0,"cb_bytes":0,"alloc_failures":0,"leaked_buffers":0,"leaked_bytes":0},` +
			`"b":{"calls":1,"allocs":0,"bytes":0,"peak_dram_bytes":0,"peak_l1_bytes":0,"cb_bytes":0,"alloc_failures":1,"leaked_buffers":0,"leaked_bytes":0}}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ops:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(p.Chips) != 0 || len(p.Sites) != 0 || len(p.Windows) != 0 || p.OpsDropped != nil {
		t.Errorf("more than the ops changed: %+v", p)
	}
	var out bytes.Buffer
	if err := r.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"  TT-NN ops (by op and device op):",
		"    grew      ttnn.matmul > MatmulDeviceOperation: leaked_buffers 0 -> 1, leaked_bytes 0 B -> 32.0 KiB",
		"    vanished  ttnn.add: calls 1 -> 0, allocs 1 -> 0, bytes 2.0 KiB -> 0 B, peak_l1_bytes 2.0 KiB -> 0 B",
		"    appeared  ttnn.split > SplitDeviceOperation: calls 0 -> 1, alloc_failures 0 -> 1",
		"growth: no memory counter is higher in B",
	} {
		if !strings.Contains(out.String(), w+"\n") {
			t.Errorf("text lacks %q:\n%s", w, out.String())
		}
	}
	// The same rows in another order: the same.
	b.Processes[0].Ops = rows(0, devices.OpRow{Name: "ttnn.add", Calls: 1, Allocs: 1, Bytes: 2048, PeakL1: 2048})
	b.Processes[0].Ops[0], b.Processes[0].Ops[3] = b.Processes[0].Ops[3], b.Processes[0].Ops[0]
	if r := compare(t, a, b, true); !r.Same {
		t.Errorf("the same ops rows differ: %+v", r.Processes)
	}
}
