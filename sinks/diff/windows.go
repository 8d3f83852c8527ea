package diff

// Windows and TT-NN ops in a comparison. A process's windows (tttrace
// mark) are matched by name (the n-th window of a name in A with the n-th
// in B), then those left by index; per chip each counter's peak in the
// window and the window's memory_stats are compared. Its TT-NN ops rows are
// matched by (name, device op) and every figure of a row compared. A
// window's peak higher in B is growth (--fail-on-growth), as a chip's peak
// is; an op's figures are not: its memory is in its chips' counters.

import (
	"cmp"
	"fmt"
	"slices"
	"sort"

	"github.com/tttrace/tttrace/devices"
)

// Window is one window of a process as a run has it.
type Window struct {
	Index int
	Name  string
	// StartNs: its mark's time (0: window 0, which starts with tracing).
	StartNs uint64
	Chips   []WindowChip // by device
}

// WindowChip is one chip in a window: each counter's peak in it (with
// when it was first reached) and, per allocator type, its memory_stats.
type WindowChip struct {
	Device       int32
	Peak, PeakTs [nCounters]uint64
	Stats        map[string]devices.MemoryStats
}

// OpKey names a TT-NN ops row.
type OpKey struct{ Name, DeviceOp string }

// OpFig is what a process did in one (op, device op): the summary's ops
// row without its name.
type OpFig struct {
	Calls         uint64 `json:"calls"`
	Allocs        uint64 `json:"allocs"`
	Bytes         uint64 `json:"bytes"`
	PeakDRAM      uint64 `json:"peak_dram_bytes"`
	PeakL1        uint64 `json:"peak_l1_bytes"`
	CBBytes       uint64 `json:"cb_bytes"`
	AllocFailures uint64 `json:"alloc_failures"`
	LeakedBuffers uint64 `json:"leaked_buffers"`
	LeakedBytes   uint64 `json:"leaked_bytes"`
}

// figures are f's numbers, in the order of its fields.
func (f *OpFig) figures() [9]uint64 {
	return [9]uint64{f.Calls, f.Allocs, f.Bytes, f.PeakDRAM, f.PeakL1, f.CBBytes, f.AllocFailures, f.LeakedBuffers, f.LeakedBytes}
}

// windowsAndOps keeps ps's windows and ops rows in p (each window's chip
// and each row counts towards MaxSiteRows).
func (c *Collector) windowsAndOps(p *Process, ps *devices.ProcessSummary) error {
	grow := func(n int) error {
		if c.rows += n; c.rows > MaxSiteRows {
			return fmt.Errorf("more than %d rows of sites, windows' chips and ops: diff compares at most %d", MaxSiteRows, MaxSiteRows)
		}
		return nil
	}
	for i := range ps.Windows {
		w := &ps.Windows[i]
		if err := grow(1 + len(w.Devices)); err != nil {
			return err
		}
		win := Window{Index: w.Index, Name: w.Name, StartNs: w.StartTsNs, Chips: make([]WindowChip, 0, len(w.Devices))}
		for j := range w.Devices {
			d := &w.Devices[j]
			wc := WindowChip{Device: d.Device, Stats: make(map[string]devices.MemoryStats, len(d.MemoryStats))}
			for k, name := range counterNames {
				pk := d.Peaks[name]
				wc.Peak[k], wc.PeakTs[k] = pk.Value, pk.TsNs
			}
			for _, t := range devices.AllocatorTypes() {
				key := devices.AllocatorKey(t)
				if ms, ok := d.MemoryStats[key]; ok {
					wc.Stats[key] = ms
				}
			}
			win.Chips = append(win.Chips, wc)
		}
		// One entry per chip (a file may repeat one: the first counts).
		sort.SliceStable(win.Chips, func(a, b int) bool { return win.Chips[a].Device < win.Chips[b].Device })
		win.Chips = slices.CompactFunc(win.Chips, func(a, b WindowChip) bool { return a.Device == b.Device })
		p.Windows = append(p.Windows, win)
	}
	if len(ps.Ops) > 0 {
		p.Ops = make(map[OpKey]*OpFig, len(ps.Ops))
	}
	for i := range ps.Ops {
		r := &ps.Ops[i]
		k := OpKey{r.Name, r.DeviceOp}
		f := p.Ops[k]
		if f == nil {
			if err := grow(1); err != nil {
				return err
			}
			f = &OpFig{}
			p.Ops[k] = f
		}
		// A row is one per key; a file that repeats one: summed (peaks:
		// the larger).
		f.Calls = devices.SatAdd(f.Calls, r.Calls)
		f.Allocs = devices.SatAdd(f.Allocs, r.Allocs)
		f.Bytes = devices.SatAdd(f.Bytes, r.Bytes)
		f.PeakDRAM, f.PeakL1 = max(f.PeakDRAM, r.PeakDRAM), max(f.PeakL1, r.PeakL1)
		f.CBBytes = devices.SatAdd(f.CBBytes, r.CBBytes)
		f.AllocFailures = devices.SatAdd(f.AllocFailures, r.AllocFailures)
		f.LeakedBuffers = devices.SatAdd(f.LeakedBuffers, r.LeakedBuffers)
		f.LeakedBytes = devices.SatAdd(f.LeakedBytes, r.LeakedBytes)
	}
	return nil
}

// WindowDiff is one window of a process whose figures differ.
type WindowDiff struct {
	// Status: changed, appeared (only in B), vanished (only in A).
	Status string `json:"status"`
	Name   string `json:"name"` // A's (B's when appeared)
	// NameB: B's name when it is not A's (matched by index).
	NameB  string           `json:"name_b,omitempty"`
	IndexA *int             `json:"index_a"`
	IndexB *int             `json:"index_b"`
	Chips  []WindowChipDiff `json:"chips"`
}

// WindowChipDiff is one chip of a window whose figures differ.
type WindowChipDiff struct {
	Device int32 `json:"device"`
	// Status: changed, appeared (in the window in B only), vanished.
	Status      string            `json:"status"`
	Peaks       []WindowPeakDiff  `json:"peaks"`
	MemoryStats []MemoryStatsDiff `json:"memory_stats"`
}

// WindowPeakDiff is a counter's peak in a window.
type WindowPeakDiff struct {
	Counter string `json:"counter"`
	Peak    Num    `json:"peak"`
	// PeakAtA, PeakAtB: when it was first reached, in ns after the
	// window's start (window 0: the process's first event); null: unknown,
	// or no peak.
	PeakAtA *uint64 `json:"peak_at_ns_a"`
	PeakAtB *uint64 `json:"peak_at_ns_b"`
}

// MemoryStatsDiff is one allocator type's memory_stats in a window (null:
// not given in that run).
type MemoryStatsDiff struct {
	Type                  string `json:"type"` // dram, l1, l1_small, trace
	BytesInUse            OptNum `json:"bytes_in_use"`
	PeakBytesInUse        OptNum `json:"peak_bytes_in_use"`
	BytesLimit            OptNum `json:"bytes_limit"`
	LargestFreeBlockBytes OptNum `json:"largest_free_block_bytes"`
}

// WindowRef names the window of a window_peak growth: B's.
type WindowRef struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
}

type winPair struct{ a, b *Window }

// matchWindows pairs A's windows with B's: the n-th of a name in A with
// the n-th of that name in B; then those left, unnamed or named apart, by
// index. A window left alone is listed unless the other run dropped
// windows of the process before it (it may be among them).
func matchWindows(a, b *Process) []winPair {
	var out []winPair
	byName := map[string][]*Window{}
	for i := range b.Windows {
		if w := &b.Windows[i]; w.Name != "" {
			byName[w.Name] = append(byName[w.Name], w)
		}
	}
	used := map[*Window]bool{}
	var leftA []*Window
	for i := range a.Windows {
		w := &a.Windows[i]
		if q := byName[w.Name]; w.Name != "" && len(q) > 0 {
			out = append(out, winPair{w, q[0]})
			byName[w.Name] = q[1:]
			used[q[0]] = true
			continue
		}
		leftA = append(leftA, w)
	}
	byIndex := map[int]*Window{}
	for i := range b.Windows {
		if w := &b.Windows[i]; !used[w] {
			if _, dup := byIndex[w.Index]; !dup {
				byIndex[w.Index] = w
			}
		}
	}
	// Before the first window a run kept, when it dropped some: unknown.
	dropped := func(p *Process, idx int) bool {
		return p.WindowsDropped > 0 && len(p.Windows) > 0 && idx < p.Windows[0].Index
	}
	for _, w := range leftA {
		if m := byIndex[w.Index]; m != nil && !used[m] {
			out = append(out, winPair{w, m})
			used[m] = true
			continue
		}
		if !dropped(b, w.Index) {
			out = append(out, winPair{a: w})
		}
	}
	for i := range b.Windows {
		if w := &b.Windows[i]; !used[w] && !dropped(a, w.Index) {
			out = append(out, winPair{b: w})
		}
	}
	idx := func(p winPair) int {
		if p.a != nil {
			return p.a.Index
		}
		return p.b.Index
	}
	sort.SliceStable(out, func(i, j int) bool { return idx(out[i]) < idx(out[j]) })
	return out
}

var noWindow = &Window{}

// compareWindows lists the windows whose figures differ; startA, startB:
// the processes' first events (window 0's start).
func compareWindows(a, b *Process) []WindowDiff {
	out := []WindowDiff{}
	for _, m := range matchWindows(a, b) {
		d := WindowDiff{Status: "changed", Chips: []WindowChipDiff{}}
		wa, wb := m.a, m.b
		switch {
		case wa == nil:
			d.Status, d.Name, wa = "appeared", wb.Name, noWindow
		case wb == nil:
			d.Status, d.Name, wb = "vanished", wa.Name, noWindow
		default:
			d.Name = wa.Name
			if wb.Name != wa.Name {
				d.NameB = wb.Name
			}
		}
		if wa != noWindow {
			i := wa.Index
			d.IndexA = &i
		}
		if wb != noWindow {
			i := wb.Index
			d.IndexB = &i
		}
		startA, startB := wa.StartNs, wb.StartNs
		if startA == 0 {
			startA = a.StartNs
		}
		if startB == 0 {
			startB = b.StartNs
		}
		i, j := 0, 0
		for i < len(wa.Chips) || j < len(wb.Chips) {
			var ca, cb *WindowChip
			switch {
			case j == len(wb.Chips) || (i < len(wa.Chips) && wa.Chips[i].Device < wb.Chips[j].Device):
				ca = &wa.Chips[i]
				i++
			case i == len(wa.Chips) || wb.Chips[j].Device < wa.Chips[i].Device:
				cb = &wb.Chips[j]
				j++
			default:
				ca, cb = &wa.Chips[i], &wb.Chips[j]
				i++
				j++
			}
			if cd := compareWindowChip(ca, cb, startA, startB); cd != nil {
				d.Chips = append(d.Chips, *cd)
			}
		}
		if d.Status == "changed" && d.NameB == "" && len(d.Chips) == 0 {
			continue
		}
		out = append(out, d)
	}
	return out
}

var noWindowChip = &WindowChip{}

func compareWindowChip(a, b *WindowChip, startA, startB uint64) *WindowChipDiff {
	d := &WindowChipDiff{Status: "changed", Peaks: []WindowPeakDiff{}, MemoryStats: []MemoryStatsDiff{}}
	switch {
	case a == nil:
		d.Status, d.Device, a = "appeared", b.Device, noWindowChip
	case b == nil:
		d.Status, d.Device, b = "vanished", a.Device, noWindowChip
	default:
		d.Device = a.Device
	}
	at := func(c *WindowChip, i int, start uint64) *uint64 {
		if start == 0 || c.Peak[i] == 0 || c.PeakTs[i] < start {
			return nil
		}
		v := c.PeakTs[i] - start
		return &v
	}
	for i := range nCounters {
		if a.Peak[i] == b.Peak[i] {
			continue
		}
		d.Peaks = append(d.Peaks, WindowPeakDiff{Counter: counterNames[i], Peak: num(a.Peak[i], b.Peak[i]),
			PeakAtA: at(a, i, startA), PeakAtB: at(b, i, startB)})
	}
	for _, t := range devices.AllocatorTypes() {
		key := devices.AllocatorKey(t)
		sa, okA := a.Stats[key]
		sb, okB := b.Stats[key]
		if !okA && !okB {
			continue
		}
		opt := func(ok bool, v *uint64) *uint64 {
			if !ok || v == nil {
				return nil
			}
			x := *v
			return &x
		}
		md := MemoryStatsDiff{Type: key,
			BytesInUse:            optNum(opt(okA, &sa.BytesInUse), opt(okB, &sb.BytesInUse)),
			PeakBytesInUse:        optNum(opt(okA, &sa.PeakBytesInUse), opt(okB, &sb.PeakBytesInUse)),
			BytesLimit:            optNum(opt(okA, sa.BytesLimit), opt(okB, sb.BytesLimit)),
			LargestFreeBlockBytes: optNum(opt(okA, sa.LargestFreeBlockBytes), opt(okB, sb.LargestFreeBlockBytes)),
		}
		if !md.BytesInUse.same() || !md.PeakBytesInUse.same() || !md.BytesLimit.same() || !md.LargestFreeBlockBytes.same() {
			d.MemoryStats = append(d.MemoryStats, md)
		}
	}
	if len(d.Peaks) == 0 && len(d.MemoryStats) == 0 {
		return nil // a chip with nothing in either run's window: no change
	}
	return d
}

// OpDiff is one TT-NN ops row whose figures differ.
type OpDiff struct {
	// Status: appeared (no row in A), vanished (none in B), grew (no
	// figure lower in B), shrank (none higher), changed.
	Status   string `json:"status"`
	Name     string `json:"name"`
	DeviceOp string `json:"device_op,omitempty"`
	A        OpFig  `json:"a"`
	B        OpFig  `json:"b"`
}

// compareOps lists the ops rows whose figures differ, most bytes of
// change first (allocated, at a peak, in CBs, leaked), then by name and
// device op.
func compareOps(a, b map[OpKey]*OpFig) []OpDiff {
	out := []OpDiff{}
	keys := map[OpKey]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	for k := range keys {
		fa, fb := a[k], b[k]
		d := OpDiff{Name: k.Name, DeviceOp: k.DeviceOp}
		switch {
		case fa == nil:
			d.Status, d.B = "appeared", *fb
		case fb == nil:
			d.Status, d.A = "vanished", *fa
		default:
			if *fa == *fb {
				continue
			}
			d.A, d.B = *fa, *fb
			up, down := false, false
			xa, xb := fa.figures(), fb.figures()
			for i := range xa {
				up = up || xb[i] > xa[i]
				down = down || xb[i] < xa[i]
			}
			switch {
			case up && !down:
				d.Status = "grew"
			case down && !up:
				d.Status = "shrank"
			default:
				d.Status = "changed"
			}
		}
		out = append(out, d)
	}
	size := func(d *OpDiff) uint64 {
		var m uint64
		for _, v := range [][2]uint64{{d.A.Bytes, d.B.Bytes}, {d.A.PeakDRAM, d.B.PeakDRAM}, {d.A.PeakL1, d.B.PeakL1},
			{d.A.CBBytes, d.B.CBBytes}, {d.A.LeakedBytes, d.B.LeakedBytes}} {
			m = max(m, max(v[0], v[1])-min(v[0], v[1]))
		}
		return m
	}
	sort.Slice(out, func(i, j int) bool {
		x, y := &out[i], &out[j]
		if sx, sy := size(x), size(y); sx != sy {
			return sx > sy
		}
		if c := cmp.Compare(x.Name, y.Name); c != 0 {
			return c < 0
		}
		return x.DeviceOp < y.DeviceOp
	})
	return out
}

// windowGrowth lists the gated counters of d's windows, matched in both
// runs, whose peak is higher in B (a window only in B is not growth: its
// memory is in its chips' counters).
func (d *ProcessDiff) windowGrowth() []Growth {
	var out []Growth
	for i := range d.Windows {
		w := &d.Windows[i]
		if w.Status != "changed" {
			continue
		}
		ref := &WindowRef{Index: *w.IndexB, Name: w.Name}
		if w.NameB != "" {
			ref.Name = w.NameB
		}
		for j := range w.Chips {
			c := &w.Chips[j]
			for k := range c.Peaks {
				p := &c.Peaks[k]
				if !gated(counterIndex(p.Counter)) || p.Peak.B <= p.Peak.A {
					continue
				}
				out = append(out, newGrowth(d, c.Device, p.Counter, "window_peak", p.Peak.A, p.Peak.B, ref))
			}
		}
	}
	return out
}
