package html

import (
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tttrace/tttrace/sinks"
	"github.com/tttrace/tttrace/sinks/diff"
)

// The comparison page (tttrace diff A B --html OUT): what diff.Result says,
// each number an element whose data-field is its path in the --json object
// (data-scope="diff").

// Caps of the comparison page (the --json object has everything).
const (
	MaxDiffGrowth = 200
	MaxDiffSites  = 300
	MaxDiffOps    = 300
)

type diffView struct {
	A, B       []labeled
	FileA      string
	FileB      string
	Same       bool
	Unchanged  Num
	SitesBy    string
	Growth     []growthRow
	GrowthMore int
	Procs      []procDiffView
}

type growthRow struct {
	Who, Chip, Counter, At string
	A, B, Bytes            Num
	Pct                    string
}

type procDiffView struct {
	Index     int
	Status    string
	Heading   string
	Exit      string
	Trimmed   bool
	Chips     []chipDiffView
	Meshes    []meshDiffView
	Sites     []siteDiffRow
	SitesMore int
	Records   []recordRow
	Counts    []labeled
	Windows   []windowDiffView
	Ops       []opDiffRow
	OpsMore   int
	Dropped   []labeled
}

// windowDiffView is a window whose peaks or memory_stats differ.
type windowDiffView struct {
	Heading, Status string
	Chips           []windowChipView
}

type windowChipView struct {
	Device int32
	Status string
	Peaks  []windowPeakRow
	Stats  []allocDiffRow // memory_stats per type, as the allocator's cells
}

type windowPeakRow struct {
	Counter       string
	PkA, PkB, PkD Num
	AtA, AtB      string
}

// opDiffRow is a TT-NN ops row: its figures in A and in B.
type opDiffRow struct {
	Status, Op string
	Cells      []opCell
}

type opCell struct {
	Label string
	A, B  Num
}

type chipDiffView struct {
	Device   int32
	Status   string
	Counters []counterDiffRow
	Leaks    []leakDiffRow
	Allocs   []allocDiffRow
	Headroom []labeled
}

// counterDiffRow is one counter; the bars compare the peaks, each as wide
// as its share of the larger (of 100).
type counterDiffRow struct {
	Counter          string
	EndA, EndB, EndD Num
	PkA, PkB, PkD    Num
	BarA, BarB       int
	AtA, AtB         string
}

type leakDiffRow struct {
	Type                 string
	CountA, CountB       Num
	BytesA, BytesB, Diff Num
}

type allocDiffRow struct {
	Type  string
	Cells []optCell
}

type optCell struct {
	Label   string
	A, B, D *Num
}

type meshDiffView struct {
	Chips, Status string
	Allocs        []allocDiffRow
}

type siteDiffRow struct {
	Status, Chip, Type, Where string
	Cells                     []Num // in use, allocated, at the peak: A then B
}

type recordRow struct {
	Status, Kind, Detail string
	A, B                 Num
}

// WriteDiff writes the comparison page of res.
func WriteDiff(w io.Writer, res *diff.Result) error {
	return writePage(w, diffPage(res))
}

func diffPage(res *diff.Result) *page {
	ctx := numCtx{scope: "diff"}
	dv := &diffView{FileA: sinks.Printable(res.A.File), FileB: sinks.Printable(res.B.File), Same: res.Same, SitesBy: res.SitesBy,
		Unchanged: ctx.count("unchanged_processes", "", uint64(res.Unchanged))}
	run := func(p string, ri *diff.RunInfo) []labeled {
		out := []labeled{{"processes", ctx.count(p+"processes", "", uint64(ri.Processes))}, {"events", ctx.count(p+"events", "", ri.Events)},
			{"lost events", ctx.count(p+"lost_events", "", ri.LostEvents)}, {"layout anomalies", ctx.count(p+"layout_anomalies", "", ri.LayoutAnomalies)}}
		return out
	}
	dv.A, dv.B = run("a.", &res.A), run("b.", &res.B)
	for i := range res.Growth {
		if i == MaxDiffGrowth {
			dv.GrowthMore = len(res.Growth) - i
			break
		}
		g := &res.Growth[i]
		p := fmt.Sprintf("growth.%d.", i)
		row := growthRow{Who: sinks.Printable(g.Command) + " " + pids(g.PidA, g.PidB), Chip: strconv.Itoa(int(g.Device)), Counter: g.Counter, At: sinks.Printable(diff.GrowthAt(g)),
			A: ctx.bytes(p+"a", "", g.A), B: ctx.bytes(p+"b", "", g.B), Bytes: ctx.bytes(p+"bytes", "", g.Bytes), Pct: "from 0"}
		if g.Pct != nil {
			row.Pct = fmt.Sprintf("+%.1f%%", *g.Pct)
		}
		dv.Growth = append(dv.Growth, row)
	}
	for i := range res.Processes {
		dv.Procs = append(dv.Procs, procDiff(ctx, i, &res.Processes[i]))
	}
	return &page{Title: "tttrace diff", Diff: dv, Data: "{}"}
}

func pids(a, b *uint32) string {
	switch {
	case a != nil && b != nil:
		return fmt.Sprintf("(pid %d in A, %d in B)", *a, *b)
	case a != nil:
		return fmt.Sprintf("(pid %d, only in A)", *a)
	case b != nil:
		return fmt.Sprintf("(pid %d, only in B)", *b)
	}
	return ""
}

func procDiff(ctx numCtx, i int, d *diff.ProcessDiff) procDiffView {
	p := fmt.Sprintf("processes.%d.", i)
	pv := procDiffView{Index: i, Status: d.Status, Heading: sinks.Printable(d.Command) + " " + pids(d.PidA, d.PidB), Trimmed: d.Trimmed}
	if d.CommandB != "" {
		pv.Heading += "; in B: " + sinks.Printable(d.CommandB)
	}
	if e := d.Exit; e != nil {
		pv.Exit = fmt.Sprintf("ended %s in A, %s in B", exitFig(e.A), exitFig(e.B))
	}
	for j := range d.Chips {
		pv.Chips = append(pv.Chips, chipDiff(ctx, fmt.Sprintf("%schips.%d.", p, j), &d.Chips[j]))
	}
	for j := range d.Meshes {
		m := &d.Meshes[j]
		chips := make([]string, len(m.Chips))
		for k, c := range m.Chips {
			chips[k] = strconv.Itoa(int(c))
		}
		pv.Meshes = append(pv.Meshes, meshDiffView{Chips: strings.Join(chips, ", "), Status: m.Status,
			Allocs: allocDiffs(ctx, fmt.Sprintf("%smeshes.%d.", p, j), m.Allocator)})
	}
	for j := range d.Sites {
		if j == MaxDiffSites {
			pv.SitesMore = len(d.Sites) - j
			break
		}
		s := &d.Sites[j]
		sp := fmt.Sprintf("%ssites.%d.", p, j)
		pv.Sites = append(pv.Sites, siteDiffRow{Status: s.Status, Chip: strconv.Itoa(int(s.Device)), Type: sinks.Printable(s.Type), Where: refText(s.Site),
			Cells: []Num{
				ctx.bytes(sp+"a.in_use_bytes", s.Type, s.A.InUseBytes), ctx.bytes(sp+"b.in_use_bytes", s.Type, s.B.InUseBytes),
				ctx.bytes(sp+"a.alloc_bytes", s.Type, s.A.AllocBytes), ctx.bytes(sp+"b.alloc_bytes", s.Type, s.B.AllocBytes),
				ctx.bytes(sp+"a.peak_bytes", s.Type, s.A.PeakBytes), ctx.bytes(sp+"b.peak_bytes", s.Type, s.B.PeakBytes),
			}})
	}
	for j := range d.Records {
		r := &d.Records[j]
		rp := fmt.Sprintf("%srecords.%d.", p, j)
		pv.Records = append(pv.Records, recordRow{Status: r.Status, Kind: r.Kind, Detail: recordText(r.Record),
			A: ctx.count(rp+"count_a", "", r.CountA), B: ctx.count(rp+"count_b", "", r.CountB)})
	}
	for j := range d.Windows {
		pv.Windows = append(pv.Windows, windowDiff(ctx, fmt.Sprintf("%swindows.%d.", p, j), &d.Windows[j]))
	}
	for j := range d.Ops {
		if j == MaxDiffOps {
			pv.OpsMore = len(d.Ops) - j
			break
		}
		pv.Ops = append(pv.Ops, opDiff(ctx, fmt.Sprintf("%sops.%d.", p, j), &d.Ops[j]))
	}
	for _, x := range []struct {
		label, field string
		n            *diff.Num
	}{{"ended windows dropped (past 64)", "windows_dropped", d.WindowsDropped}, {"records of ops rows dropped (past 4096)", "ops_dropped", d.OpsDropped}} {
		if x.n != nil {
			pv.Dropped = append(pv.Dropped, labeled{x.label + " in A", ctx.count(p+x.field+".a", "", x.n.A)}, labeled{"in B", ctx.count(p+x.field+".b", "", x.n.B)})
		}
	}
	if c := d.Counts; c != nil {
		cp := p + "counts."
		pv.Counts = []labeled{
			{"failed allocations in A", ctx.count(cp+"a.alloc_failures", "", c.A.AllocFailures)}, {"in B", ctx.count(cp+"b.alloc_failures", "", c.B.AllocFailures)},
			{"L1 clashes in A", ctx.count(cp+"a.l1_clashes", "", c.A.L1Clashes)}, {"in B", ctx.count(cp+"b.l1_clashes", "", c.B.L1Clashes)},
			{"trace problems in A", ctx.count(cp+"a.trace_problems", "", c.A.TraceProblems)}, {"in B", ctx.count(cp+"b.trace_problems", "", c.B.TraceProblems)},
		}
	}
	return pv
}

func exitFig(e diff.ExitFig) string {
	switch {
	case !e.Exited:
		return "still running"
	case e.Signal != 0:
		return fmt.Sprintf("by signal %d", e.Signal)
	}
	return fmt.Sprintf("with code %d", e.Code)
}

func chipDiff(ctx numCtx, p string, c *diff.ChipDiff) chipDiffView {
	cv := chipDiffView{Device: c.Device, Status: c.Status}
	for k := range c.Counters {
		x := &c.Counters[k]
		kp := fmt.Sprintf("%scounters.%d.", p, k)
		mk := ctx.bytes
		if x.Counter == "live_buffers" {
			mk = ctx.count
		}
		row := counterDiffRow{Counter: x.Counter,
			EndA: mk(kp+"end.a", "", x.End.A), EndB: mk(kp+"end.b", "", x.End.B), EndD: ctx.signed(kp+"end.delta", "", x.End.Delta),
			PkA: mk(kp+"peak.a", "", x.Peak.A), PkB: mk(kp+"peak.b", "", x.Peak.B), PkD: ctx.signed(kp+"peak.delta", "", x.Peak.Delta)}
		if x.Counter == "live_buffers" {
			row.EndD.Text, row.PkD.Text = row.EndD.Value, row.PkD.Value
		}
		if top := max(x.Peak.A, x.Peak.B); top > 0 {
			row.BarA, row.BarB = int(100*float64(x.Peak.A)/float64(top)), int(100*float64(x.Peak.B)/float64(top))
		}
		if x.PeakAtA != nil {
			row.AtA = fmt.Sprintf("+%.3f s", float64(*x.PeakAtA)/1e9)
		}
		if x.PeakAtB != nil {
			row.AtB = fmt.Sprintf("+%.3f s", float64(*x.PeakAtB)/1e9)
		}
		cv.Counters = append(cv.Counters, row)
	}
	for k := range c.Leaks {
		l := &c.Leaks[k]
		lp := fmt.Sprintf("%sleaks.%d.", p, k)
		cv.Leaks = append(cv.Leaks, leakDiffRow{Type: sinks.Printable(l.Type),
			CountA: ctx.count(lp+"count.a", l.Type, l.Count.A), CountB: ctx.count(lp+"count.b", l.Type, l.Count.B),
			BytesA: ctx.bytes(lp+"bytes.a", l.Type, l.Bytes.A), BytesB: ctx.bytes(lp+"bytes.b", l.Type, l.Bytes.B), Diff: ctx.signed(lp+"bytes.delta", l.Type, l.Bytes.Delta)})
	}
	cv.Allocs = allocDiffs(ctx, p, c.Allocator)
	if h := c.MinL1Headroom; h != nil {
		if h.A != nil {
			cv.Headroom = append(cv.Headroom, labeled{"lowest L1 headroom in A", ctx.signed(p+"min_l1_headroom.a", "L1", *h.A)})
		}
		if h.B != nil {
			cv.Headroom = append(cv.Headroom, labeled{"in B", ctx.signed(p+"min_l1_headroom.b", "L1", *h.B)})
		}
	}
	return cv
}

func allocDiffs(ctx numCtx, p string, as []diff.AllocDiff) []allocDiffRow {
	var out []allocDiffRow
	for k := range as {
		a := &as[k]
		ap := fmt.Sprintf("%sallocator.%d.", p, k)
		row := allocDiffRow{Type: a.Type}
		for _, c := range []struct {
			label, field string
			o            diff.OptNum
			count        bool
		}{
			{"used per bank", "total_allocated_bytes", a.Allocated, false},
			{"free per bank", "total_free_bytes", a.Free, false},
			{"largest free block", "largest_free_block_bytes", a.LargestFree, false},
			{"failed", "alloc_failures", a.Failures, true},
			{"per-core bytes", "per_core_bytes", a.PerCoreBytes, false},
		} {
			mk := ctx.bytes
			if c.count {
				mk = ctx.count
			}
			cell := optCell{Label: c.label}
			f := ap + c.field + "."
			if c.o.A != nil {
				n := mk(f+"a", a.Type, *c.o.A)
				cell.A = &n
			}
			if c.o.B != nil {
				n := mk(f+"b", a.Type, *c.o.B)
				cell.B = &n
			}
			if c.o.Delta != nil {
				n := ctx.signed(f+"delta", a.Type, *c.o.Delta)
				if c.count {
					n.Text = n.Value
				}
				cell.D = &n
			}
			row.Cells = append(row.Cells, cell)
		}
		out = append(out, row)
	}
	return out
}

// refText says where a site is, in one line: its innermost Python frame,
// else its innermost native frames outside TT-Metal's module.
func refText(r *diff.SiteRef) string {
	if r == nil || r.Unknown {
		return "unknown site (no stack)"
	}
	if len(r.Python) > 0 {
		f := r.Python[0]
		return sinks.Printable(fmt.Sprintf("%s:%d in %s", f.File, f.Line, f.Function))
	}
	for i := range r.Native {
		f := &r.Native[i]
		if i+1 < len(r.Native) && f.Module == r.Native[0].Module {
			continue
		}
		s := f.Function
		if s == "" {
			s = filepath.Base(f.Module)
			if f.Offset != nil {
				s += fmt.Sprintf("+%#x", *f.Offset)
			}
		}
		if f.File != "" {
			s += fmt.Sprintf(" (%s:%d)", f.File, f.Line)
		}
		if f.Module != "" {
			s += " [" + filepath.Base(f.Module) + "]"
		}
		return sinks.Printable(s)
	}
	return "site without frames"
}

func recordText(r *diff.Record) string {
	if r == nil {
		return ""
	}
	var parts []string
	if r.Device != nil {
		parts = append(parts, fmt.Sprintf("chip %d", *r.Device))
	}
	if len(r.MeshChips) > 0 {
		parts = append(parts, fmt.Sprintf("mesh of chips %v", r.MeshChips))
	}
	if r.BufferType != "" {
		parts = append(parts, sinks.Printable(r.BufferType))
	}
	if r.Size != 0 {
		parts = append(parts, sinks.HumanBytes(r.Size))
	}
	if r.Cause != "" {
		parts = append(parts, sinks.Printable(r.Cause))
	}
	if r.Reason != "" {
		parts = append(parts, sinks.Printable(r.Reason))
	}
	if r.CBRegionEnd != 0 {
		parts = append(parts, fmt.Sprintf("CBs end at %#x, lowest L1 buffer at %#x", r.CBRegionEnd, r.LowestL1Address))
	}
	if r.Site != nil {
		parts = append(parts, "at "+refText(r.Site))
	}
	if r.Other != nil {
		parts = append(parts, "overlapping "+refText(r.Other))
	}
	return strings.Join(parts, ", ")
}

func windowDiff(ctx numCtx, p string, w *diff.WindowDiff) windowDiffView {
	name := func(i *int, n string) string {
		if i == nil {
			return "-"
		}
		if n == "" {
			return fmt.Sprintf("window %d", *i)
		}
		return sinks.Printable(fmt.Sprintf("window %d (%s)", *i, n))
	}
	nameB := w.Name
	if w.NameB != "" {
		nameB = w.NameB
	}
	wv := windowDiffView{Heading: name(w.IndexA, w.Name) + " in A, " + name(w.IndexB, nameB) + " in B", Status: w.Status}
	for j := range w.Chips {
		c := &w.Chips[j]
		cp := fmt.Sprintf("%schips.%d.", p, j)
		cv := windowChipView{Device: c.Device, Status: c.Status}
		for k := range c.Peaks {
			x := &c.Peaks[k]
			kp := fmt.Sprintf("%speaks.%d.peak.", cp, k)
			mk := ctx.bytes
			if x.Counter == "live_buffers" {
				mk = ctx.count
			}
			row := windowPeakRow{Counter: x.Counter, PkA: mk(kp+"a", "", x.Peak.A), PkB: mk(kp+"b", "", x.Peak.B), PkD: ctx.signed(kp+"delta", "", x.Peak.Delta)}
			if x.Counter == "live_buffers" {
				row.PkD.Text = row.PkD.Value
			}
			if x.PeakAtA != nil {
				row.AtA = fmt.Sprintf("+%.3f s", float64(*x.PeakAtA)/1e9)
			}
			if x.PeakAtB != nil {
				row.AtB = fmt.Sprintf("+%.3f s", float64(*x.PeakAtB)/1e9)
			}
			cv.Peaks = append(cv.Peaks, row)
		}
		for k := range c.MemoryStats {
			m := &c.MemoryStats[k]
			mp := fmt.Sprintf("%smemory_stats.%d.", cp, k)
			row := allocDiffRow{Type: m.Type}
			for _, f := range []struct {
				field string
				o     diff.OptNum
			}{{"bytes_in_use", m.BytesInUse}, {"peak_bytes_in_use", m.PeakBytesInUse}, {"bytes_limit", m.BytesLimit},
				{"largest_free_block_bytes", m.LargestFreeBlockBytes}} {
				row.Cells = append(row.Cells, optBytes(ctx, mp+f.field+".", f.field, m.Type, f.o))
			}
			cv.Stats = append(cv.Stats, row)
		}
		wv.Chips = append(wv.Chips, cv)
	}
	return wv
}

// optBytes is a cell of a number of bytes that may be unknown in a run.
func optBytes(ctx numCtx, f, label, typ string, o diff.OptNum) optCell {
	cell := optCell{Label: label}
	if o.A != nil {
		n := ctx.bytes(f+"a", typ, *o.A)
		cell.A = &n
	}
	if o.B != nil {
		n := ctx.bytes(f+"b", typ, *o.B)
		cell.B = &n
	}
	if o.Delta != nil {
		n := ctx.signed(f+"delta", typ, *o.Delta)
		cell.D = &n
	}
	return cell
}

func opDiff(ctx numCtx, p string, o *diff.OpDiff) opDiffRow {
	name := o.Name
	if name == "" {
		name = "(no op)"
	}
	if o.DeviceOp != "" {
		name += " > " + o.DeviceOp
	}
	row := opDiffRow{Status: o.Status, Op: sinks.Printable(name)}
	for _, f := range []struct {
		label, field string
		a, b         uint64
		bytes        bool
	}{
		{"calls", "calls", o.A.Calls, o.B.Calls, false}, {"allocs", "allocs", o.A.Allocs, o.B.Allocs, false},
		{"bytes", "bytes", o.A.Bytes, o.B.Bytes, true}, {"DRAM peak", "peak_dram_bytes", o.A.PeakDRAM, o.B.PeakDRAM, true},
		{"L1 peak", "peak_l1_bytes", o.A.PeakL1, o.B.PeakL1, true}, {"CB bytes", "cb_bytes", o.A.CBBytes, o.B.CBBytes, true},
		{"failed", "alloc_failures", o.A.AllocFailures, o.B.AllocFailures, false},
		{"leaked", "leaked_buffers", o.A.LeakedBuffers, o.B.LeakedBuffers, false},
		{"leaked bytes", "leaked_bytes", o.A.LeakedBytes, o.B.LeakedBytes, true},
	} {
		if f.a == f.b {
			continue
		}
		mk := ctx.count
		if f.bytes {
			mk = ctx.bytes
		}
		row.Cells = append(row.Cells, opCell{Label: f.label, A: mk(p+"a."+f.field, "", f.a), B: mk(p+"b."+f.field, "", f.b)})
	}
	return row
}
