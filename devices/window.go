package devices

import "sort"

// Windows (`tttrace mark`): a mark starts a window, a stretch of the run
// until the next mark. Window 0 runs from the start of tracing to the
// first mark; the ledger numbers its marks from 1. A process in the ledger
// at a mark ends its window there and starts the mark's; a process that
// begins later is in the window current then from its first event; an
// ended process keeps the window it ended in.
//
// Per process and chip a window has the peak of each counter since its
// mark, with the time it was first reached: a chip's level at the mark is
// where its window's peaks start. A window that ends keeps its chips'
// counters and the allocator's numbers then; the current window's are the
// chips' now. Both are given in the shape of PJRT/JAX memory_stats per
// buffer type (MemoryStats).
//
// The cost: nothing until the first mark (a nil check where a counter
// rises); then each chip a mark found keeps its window's peaks
// (winChip.rise at each rise), and a mark visits every chip of every
// process once. A chip first touched after its process's window began has
// no window state: it started the window at nothing, so its window's peaks
// are its peaks.

// Bounds: a process keeps at most MaxWindows ended windows (the oldest
// go, counted in windows_dropped); a mark's name is cut to MaxMarkName
// bytes.
const (
	MaxWindows  = 64
	MaxMarkName = 256
)

// Mark is a mark as the ledger took it: the window it starts, its name and
// time. It marshals to the NDJSON "window" line.
type Mark struct {
	Type  string `json:"type"` // "window"
	Index int    `json:"index"`
	Name  string `json:"name"`
	TsNs  uint64 `json:"ts_ns"`
}

// markLog is the ledger's current mark (Index 0: none yet).
type markLog struct{ cur Mark }

// winChip is a chip's peaks in its process's current window, from the
// level it had at the mark that started it.
type winChip struct{ peak, peakTs Totals }

// rise notes that counter i is now v (nil: the chip has no window state).
func (w *winChip) rise(i Counter, v, ts uint64) {
	if w != nil && v > w.peak[i] {
		w.peak[i], w.peakTs[i] = v, ts
	}
}

// procWindows is a process's windows.
type procWindows struct {
	seen    bool     // a mark found the process: cur is its window's mark
	cur     Mark     // the mark its current window began with
	ended   []Window // oldest first
	dropped uint64
}

// Window is one window of a process: the summary's "windows".
type Window struct {
	Index int    `json:"index"` // 0: from the start of tracing
	Name  string `json:"name"`
	// StartTsNs: its mark's time (0: window 0); EndTsNs: the next mark's,
	// null for the current window.
	StartTsNs uint64         `json:"start_ts_ns"`
	EndTsNs   *uint64        `json:"end_ts_ns"`
	Devices   []WindowDevice `json:"devices"` // by chip id
}

// WindowDevice is one chip in a window.
type WindowDevice struct {
	Device int32 `json:"device"`
	// Peaks: each counter's peak in the window (by its summary name:
	// dram_bytes, ...), with the time it was first reached.
	Peaks map[string]Peak `json:"peaks"`
	// MemoryStats: per allocator type (dram, l1, l1_small, trace) that has
	// held something in the window or has an allocator view.
	MemoryStats map[string]MemoryStats `json:"memory_stats"`
}

// MemoryStats is one buffer type of a chip in the shape of PJRT/JAX
// memory_stats: bytes_in_use (the type's bytes on the chip at the
// window's end, or now), peak_bytes_in_use (their peak in the window),
// and from the chip's allocator then (absent without its view):
// bytes_limit (banks x allocatable bytes per bank) and
// largest_free_block_bytes (banks x the largest free block per bank: the
// largest lockstep buffer that fits).
type MemoryStats struct {
	BytesInUse            uint64  `json:"bytes_in_use"`
	PeakBytesInUse        uint64  `json:"peak_bytes_in_use"`
	BytesLimit            *uint64 `json:"bytes_limit,omitempty"`
	LargestFreeBlockBytes *uint64 `json:"largest_free_block_bytes,omitempty"`
}

// markWindow ends p's current window at mark m and starts m's: the chips'
// levels now are where its peaks start. An ended process only learns
// which window it ended in.
func (p *proc) markWindow(m Mark, prev Mark) {
	w := &p.win
	if !w.seen {
		w.seen, w.cur = true, prev
	}
	if p.exited {
		return
	}
	end := m.TsNs
	w.ended = append(w.ended, p.window(&end))
	if len(w.ended) > MaxWindows {
		w.ended[0] = Window{}
		w.ended = w.ended[1:]
		w.dropped++
	}
	w.cur = m
	for _, c := range p.chips {
		if c.win == nil {
			c.win = &winChip{}
		}
		c.win.peak = c.cur
		for i := range c.cur {
			c.win.peakTs[i] = 0
			if c.cur[i] > 0 {
				c.win.peakTs[i] = m.TsNs
			}
		}
	}
}

// window is p's current window as of now; end, when not nil, ends it.
func (p *proc) window(end *uint64) Window {
	cur := p.win.cur
	if !p.win.seen {
		cur = p.set.marks.cur // in the ledger's current window since it began
	}
	w := Window{Index: cur.Index, Name: cur.Name, StartTsNs: cur.TsNs, EndTsNs: end, Devices: make([]WindowDevice, 0, len(p.chips))}
	for id, c := range p.chips {
		peak, ts := &c.peak, &c.peakTs
		if c.win != nil {
			peak, ts = &c.win.peak, &c.win.peakTs
		}
		d := WindowDevice{Device: id, Peaks: make(map[string]Peak, NumCounters), MemoryStats: map[string]MemoryStats{}}
		for i := range Counter(NumCounters) {
			d.Peaks[i.String()] = Peak{Value: peak[i], TsNs: ts[i]}
		}
		a, _ := p.allocs.allocatorView(c)
		for _, t := range AllocatorTypes() {
			at := a.Type(t)
			if at == nil && peak[t] == 0 {
				continue
			}
			ms := MemoryStats{BytesInUse: c.cur[t], PeakBytesInUse: peak[t]}
			if at != nil {
				limit := SatMul(uint64(at.Banks), at.TotalAllocatable)
				ms.BytesLimit = &limit
				if at.LargestFree != nil {
					free := SatMul(uint64(at.Banks), *at.LargestFree)
					ms.LargestFreeBlockBytes = &free
				}
			}
			d.MemoryStats[AllocatorKey(t)] = ms
		}
		w.Devices = append(w.Devices, d)
	}
	sort.Slice(w.Devices, func(i, j int) bool { return w.Devices[i].Device < w.Devices[j].Device })
	return w
}

// windows lists p's windows, its current one last; nil while the ledger
// has no mark.
func (p *proc) windows() []Window {
	if p.set.marks.cur.Index == 0 && !p.win.seen {
		return nil
	}
	out := make([]Window, 0, len(p.win.ended)+1)
	out = append(out, p.win.ended...)
	return append(out, p.window(nil))
}
