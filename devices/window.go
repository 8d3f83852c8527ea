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
