package devices

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/events"
)

// winPeak is counter name's peak on chip dev in window w (fails if absent).
func winPeak(t *testing.T, w Window, dev int32, name string) Peak {
	t.Helper()
	for _, d := range w.Devices {
		if d.Device == dev {
			return d.Peaks[name]
		}
	}
	t.Fatalf("window %d has no chip %d: %+v", w.Index, dev, w.Devices)
	return Peak{}
}

func winStats(t *testing.T, w Window, dev int32, typ string) MemoryStats {
	t.Helper()
	for _, d := range w.Devices {
		if d.Device == dev {
			ms, ok := d.MemoryStats[typ]
			if !ok {
				t.Fatalf("window %d chip %d has no memory_stats %s: %+v", w.Index, dev, typ, d.MemoryStats)
			}
			return ms
		}
	}
	t.Fatalf("window %d has no chip %d", w.Index, dev)
	return MemoryStats{}
}

func (r *rec) windows(pid uint32) []Window {
	r.t.Helper()
	for _, p := range r.summary().Processes {
		if p.Pid == pid {
			return p.Windows
		}
	}
	r.t.Fatalf("pid %d not in the summary", pid)
	return nil
}

// Each window's peaks start at the chips' levels at its mark; a window
// that ends keeps the levels and the allocator's numbers then.
func TestWindows(t *testing.T) {
	r := newRec(t)
	const mgr = 0xd0
	r.apply(evCap(0, events.DRAM, mgr, 2, 1<<20, 32, 0x40))
	// Pages of 256 over 2 banks: a buffer spans half its size per bank,
	// first fit from 0x40.
	dram := func(buf, addr, size uint64) []events.Event {
		return []events.Event{evReq(1, mgr, size, 256, true), evAllocPage(1, buf, 0, events.DRAM, addr, size, 256)}
	}
	r.apply(dram(0xb1, 0x40, 1024)...)
	peak0 := r.apply(dram(0xb2, 0x240, 2048)...)
	r.apply(evFree(1, 0xb2, 0))
	// Another process, ended before the second mark.
	r.apply(events.Event{Kind: events.KindAlloc, Pid: 3000, Tid: 3000, Object: 0xc1, DeviceKind: events.DeviceChip, Device: chipPtr(5), Chip: 5,
		BufferType: events.L1, Address: 0x100, Size: 4096, OwnsData: true})

	if w := r.windows(r.pid); w != nil {
		t.Fatalf("windows before a mark: %+v", w)
	}
	if w, ok := r.l.CurrentWindow(r.pid); !ok || w.Index != 0 || winPeak(t, w, 0, "dram_bytes") != (Peak{3072, peak0}) {
		t.Fatalf("window 0 now: %v %+v", ok, w)
	}

	m1 := r.l.Mark("warm up", r.ts+50)
	if m1 != (Mark{Type: "window", Index: 1, Name: "warm up", TsNs: r.ts + 50}) {
		t.Fatalf("mark: %+v", m1)
	}
	r.apply(dram(0xb3, 0x240, 512)...) // 1536: window 1's peak, under the run's
	// A process that begins in window 1, and a chip first touched in it.
	r.apply(events.Event{Kind: events.KindAlloc, Pid: 2000, Tid: 2000, Object: 0xa1, DeviceKind: events.DeviceChip, Device: chipPtr(0), Chip: 0,
		BufferType: events.DRAM, Address: 0x40, Size: 64, OwnsData: true})
	peak1L1 := r.apply(evAlloc(1, 0xb4, 1, events.L1, 0x200, 256))
	r.apply(evFree(1, 0xb1, 0))
	r.apply(events.Event{Kind: events.KindExit, Pid: 3000, Tid: 3000})
	m2 := r.l.Mark("steady", r.ts+50)
	r.apply(evAlloc(1, 0xb5, 1, events.L1, 0x400, 128)) // 384 on chip 1

	ws := r.windows(r.pid)
	if len(ws) != 3 || ws[0].Index != 0 || ws[1].Index != 1 || ws[2].Index != 2 || ws[1].Name != "warm up" || ws[2].Name != "steady" {
		t.Fatalf("windows: %+v", ws)
	}
	if ws[0].StartTsNs != 0 || *ws[0].EndTsNs != m1.TsNs || ws[1].StartTsNs != m1.TsNs || *ws[1].EndTsNs != m2.TsNs || ws[2].EndTsNs != nil {
		t.Errorf("window times: %+v %+v %+v", ws[0], ws[1], ws[2])
	}
	for _, c := range []struct {
		w    int
		dev  int32
		name string
		want Peak
	}{
		{0, 0, "dram_bytes", Peak{3072, peak0}},
		{0, 0, "live_buffers", Peak{2, peak0}},
		{1, 0, "dram_bytes", Peak{1536, m1.TsNs + 150}},
		{1, 1, "l1_bytes", Peak{256, peak1L1}},   // first touched in window 1: from nothing
		{2, 0, "dram_bytes", Peak{512, m2.TsNs}}, // its level at the mark
		{2, 1, "l1_bytes", Peak{384, r.ts}},
		{2, 0, "trace_bytes", Peak{}},
	} {
		if got := winPeak(t, ws[c.w], c.dev, c.name); got != c.want {
			t.Errorf("window %d chip %d %s: %+v, want %+v", c.w, c.dev, c.name, got, c.want)
		}
	}
	// memory_stats: the level at the window's end, its peak, the allocator's
	// numbers then (2 banks of 1 MiB; spans aligned to 32 per bank).
	for _, c := range []struct {
		w           int
		inUse, peak uint64
		largestFree uint64
	}{
		{0, 1024, 3072, 2 * (1<<20 - 512)},
		{1, 512, 1536, 2 * (1<<20 - 256 - 512)},
		{2, 512, 512, 2 * (1<<20 - 256 - 512)},
	} {
		ms := winStats(t, ws[c.w], 0, "dram")
		if ms.BytesInUse != c.inUse || ms.PeakBytesInUse != c.peak || *ms.BytesLimit != 2<<20 || ms.LargestFreeBlockBytes == nil {
			t.Errorf("window %d dram: %+v", c.w, ms)
			continue
		}
		if *ms.LargestFreeBlockBytes != c.largestFree {
			t.Errorf("window %d dram largest free %d, want %d", c.w, *ms.LargestFreeBlockBytes, c.largestFree)
		}
	}
	if ms := winStats(t, ws[1], 1, "l1"); ms.BytesLimit != nil || ms.LargestFreeBlockBytes != nil || ms.PeakBytesInUse != 256 {
		t.Errorf("chip 1 (no allocator view) l1: %+v", ms)
	}
	if _, ok := ws[0].Devices[0].MemoryStats["trace"]; ok {
		t.Errorf("a type that held nothing and has no allocator has memory_stats: %+v", ws[0].Devices[0].MemoryStats)
	}

	// The process that began in window 1 is in it from its start.
	if w := r.windows(2000); len(w) != 2 || w[0].Index != 1 || w[0].StartTsNs != m1.TsNs || winPeak(t, w[0], 0, "dram_bytes").Value != 64 || w[1].Index != 2 {
		t.Errorf("pid 2000: %+v", w)
	}
	// The one that ended in window 1 stays there.
	if w := r.windows(3000); len(w) != 2 || w[0].Index != 0 || w[1].Index != 1 || w[1].EndTsNs != nil || winPeak(t, w[1], 5, "l1_bytes").Value != 4096 {
		t.Errorf("pid 3000: %+v", w)
	}
	if w, ok := r.l.CurrentWindow(r.pid); !ok || w.Index != 2 || winPeak(t, w, 1, "l1_bytes").Value != 384 {
		t.Errorf("current window: %+v", w)
	}
	if _, ok := r.l.CurrentWindow(4242); ok {
		t.Errorf("an unknown pid has a window")
	}
	b, err := json.Marshal(ws[1].Devices[0])
	if err != nil || !strings.Contains(string(b), `"memory_stats":{"dram":{"bytes_in_use":512,"peak_bytes_in_use":1536,"bytes_limit":2097152,"largest_free_block_bytes":`) {
		t.Errorf("%s %v", b, err)
	}
}

// A process keeps its last MaxWindows ended windows; names are cut.
func TestWindowBounds(t *testing.T) {
	r := newRec(t)
	r.apply(evAlloc(1, 0xb1, 0, events.DRAM, 0x40, 100))
	for i := range MaxWindows + 10 {
		r.l.Mark(strings.Repeat("é", MaxMarkName), uint64(i+1)*1000)
	}
	p := r.proc()
	if len(p.Windows) != MaxWindows+1 || p.WindowsDropped != 10 || p.Windows[0].Index != 10 || p.Windows[MaxWindows].Index != MaxWindows+10 {
		t.Errorf("%d windows (first %d), %d dropped", len(p.Windows), p.Windows[0].Index, p.WindowsDropped)
	}
	if n := p.Windows[1].Name; len(n) > MaxMarkName || len(n) < MaxMarkName-1 || !strings.HasPrefix(n, "éé") || strings.ContainsRune(n, '\uFFFD') {
		t.Errorf("name of %d bytes: %q", len(n), n)
	}
}

// A process kept as totals only keeps its last window; the others are
// counted.
func TestWindowsOfTrimmedProcess(t *testing.T) {
	r := newRecWith(t, Options{KeepEnded: 1, KeepEndedTotals: 10})
	r.apply(evAlloc(1, 0xb1, 0, events.DRAM, 0x40, 100))
	for i := range 5 {
		r.l.Mark("m", uint64(1000+i))
	}
	r.apply(evExit(0, 0))
	r.l.Trim()
	r.pid = 2000
	r.apply(evAlloc(1, 0xb2, 0, events.DRAM, 0x40, 100), evExit(0, 0))
	r.l.Trim()
	r.pid = 1000
	p := r.proc()
	if p.Trimmed == nil || len(p.Windows) != 1 || p.Windows[0].Index != 5 || p.WindowsDropped != 5 {
		t.Errorf("trimmed: %v, windows %+v, %d dropped", p.Trimmed != nil, p.Windows, p.WindowsDropped)
	}
}
