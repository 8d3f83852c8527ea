package html

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/sinks"
)

// The page's model: what the template lays out (page.tmpl), built from a
// summary and the timelines. Every number from the summary is a Num.

// Num is a number of the summary in the page: an element carrying where it
// comes from (data-scope, data-proc, data-chip, data-field, data-type) and
// its exact value (data-value), showing Text.
type Num struct {
	Scope string // "run", "diff", or "" (a process's: Proc)
	Proc  string // the process's index in the summary
	Chip  string // the chip id, "" when the field is the process's
	Type  string // the buffer type it is about, "" when none
	Field string // its path in the summary's JSON
	Value string // exact
	Text  string // for people
	Title string
}

// numCtx makes the Nums of one context (the run, a process, a chip).
type numCtx struct {
	scope, proc, chip string
}

func (c numCtx) bytes(field, typ string, v uint64) Num {
	return Num{Scope: c.scope, Proc: c.proc, Chip: c.chip, Type: typ, Field: field, Value: strconv.FormatUint(v, 10),
		Text: sinks.HumanBytes(v), Title: strconv.FormatUint(v, 10) + " bytes"}
}

func (c numCtx) signed(field, typ string, v int64) Num {
	text := sinks.HumanBytes(uint64(v))
	if v < 0 {
		text = "-" + sinks.HumanBytes(uint64(-v))
	}
	return Num{Scope: c.scope, Proc: c.proc, Chip: c.chip, Type: typ, Field: field, Value: strconv.FormatInt(v, 10),
		Text: text, Title: strconv.FormatInt(v, 10) + " bytes"}
}

func (c numCtx) count(field, typ string, v uint64) Num {
	s := strconv.FormatUint(v, 10)
	return Num{Scope: c.scope, Proc: c.proc, Chip: c.chip, Type: typ, Field: field, Value: s, Text: s}
}

func (c numCtx) hex(field, typ string, v uint64) Num {
	s := strconv.FormatUint(v, 10)
	return Num{Scope: c.scope, Proc: c.proc, Chip: c.chip, Type: typ, Field: field, Value: s, Text: fmt.Sprintf("%#x", v), Title: s}
}

// at is a time stamp, shown after the run's start t0.
func (c numCtx) at(field, typ string, ts, t0 uint64) Num {
	n := c.count(field, typ, ts)
	n.Text = relTime(ts, t0)
	n.Title = "ts_ns " + n.Value
	return n
}

// relTime is ts as seconds after t0 ("+1.234 s").
func relTime(ts, t0 uint64) string {
	if ts < t0 {
		return fmt.Sprintf("ts %d", ts)
	}
	return fmt.Sprintf("+%.3f s", float64(ts-t0)/1e9)
}

type page struct {
	Title   string
	Run     []Num
	Banners []string
	Notes   []string
	Procs   []*procView
	// Diff: the comparison page (diff.go) instead of Procs.
	Diff *diffView
	// Data: the charts' data (jsData), JSON.
	Data string
}

type procView struct {
	Index     int
	Pid       uint32
	Heading   string
	Status    string
	Notes     []string
	Chips     []*chipView
	Meshes    []meshView
	Failures  []failView
	FailMore  uint64
	Clashes   []clashView
	ClashMore uint64
	ClashN    Num
	Traces    *traceView
	Leaks     leaksView
	Icicle    bool
	// IcicleWhy: why there is no icicle.
	IcicleWhy string
	Anomalies []anomalyRow
}

type chipView struct {
	ID       int32
	Name     string
	Identity string
	Closed   bool
	Timeline bool // its memory chart has data
	Counters []counterRow
	Allocs   []allocRow
	AllocWhy string
	// AllocCharts: the allocator types with a timeline.
	AllocCharts []string
	Headroom    *Num
	MinHeadroom *minHeadroomView
	// L1Cores: L1 per core, the busiest core now and at the peak (those
	// the summary has).
	L1Cores []l1CoreRow
}

// l1CoreRow is a chip's busiest core (l1_busiest_core or
// peak_l1_busiest_core): where, what its L1 holds, of what.
type l1CoreRow struct {
	When         string // "now", "peak"
	Core         []Num  // x, y; nil: no CB resident (every core alike)
	Bank         *Num
	Buffers, CBs Num
	Total        Num
	Size         *Num
	Pct          string // Total of Size, "" when Size is unknown
	Over         bool   // Total above Size
	At           *Num   // the peak's time
	Program, Op  string
	Upper        bool
	SpansUnknown *Num
}

type counterRow struct {
	Name, Type  string
	End, Peak   Num
	PeakAt      Num
	HasPeakTime bool
}

type allocRow struct {
	Key       string // dram, l1, ...
	Banks     Num
	BankSize  Num
	Known     bool
	Used      Num
	Free      Num
	Largest   Num
	Failures  Num
	PerCore   *Num
	Why       string
	UsedPct   float64
	Bar       int // used, of 100
	BarLarge  int // largest free block, of 100
	ChipWide  string
	FromProbe bool
}

type minHeadroomView struct {
	Value, At, Lowest, CBEnd Num
}

type meshView struct {
	Name   string
	Chips  string
	Allocs []allocRow
	Why    string
}

type failView struct {
	Where    string
	Type     string
	Cause    string
	Advice   string
	Thrown   bool
	Fields   []labeled
	Site     string
	Holders  []holderView
	More     int
	HSites   []holderSiteView
	Nothing  bool
	HoldersN Num
	HoldersB Num
}

type labeled struct {
	Label string
	N     Num
}

type holderView struct {
	Buffer  string
	Address Num
	Size    Num
	Span    *Num
	Who     string
	Site    string
}

type holderSiteView struct {
	Site          string
	Buffers, Size Num
}

type clashView struct {
	Chip, Program string
	Fields        []labeled
	Buffers       []holderView
	More          int
}

type traceView struct {
	Counts []labeled
	Lists  []traceList
}

type traceList struct {
	Kind  string
	Items []traceItem
	More  uint64
}

type traceItem struct {
	Text   string
	Fields []labeled
}

type leaksView struct {
	Groups   []leakGroupRow
	Sites    []leakSiteRow
	SiteMore int
	List     []leakRow
	ListMore int
	Trimmed  string
	Unplaced int
}

type leakGroupRow struct {
	Chip, Type   string
	Count, Bytes Num
}

type leakSiteRow struct {
	Where, Test, Chips string
	Count, Bytes       Num
}

type leakRow struct {
	Chip, Type, Buffer, Site string
	Address, Size            Num
	Marked                   bool
}

type anomalyRow struct {
	Kind string
	N    Num
}

// report builds the page of s with the timelines w kept.
func (w *Writer) report(s *devices.Summary) *page {
	title := w.Title
	if title == "" {
		title = "tttrace report"
	}
	pg := &page{Title: title}
	run := numCtx{scope: "run"}
	pg.Run = []Num{run.count("events", "", s.Events), run.count("lost_events", "", s.LostEvents), run.count("layout_anomalies", "", s.LayoutAnomalies)}
	if !s.Complete || s.LostEvents > 0 {
		pg.Banners = append(pg.Banners, fmt.Sprintf("INCOMPLETE: %d events lost: the totals, peaks and leaks below may be wrong", s.LostEvents))
	}
	if s.LayoutAnomalies > 0 {
		pg.Banners = append(pg.Banners, fmt.Sprintf("UNTRUSTED: %d buffer(s) read with an impossible buffer type or size: the layout does not fit the library, so the numbers below cannot be trusted", s.LayoutAnomalies))
	}
	if d := s.DroppedProcesses; d != nil {
		pg.Notes = append(pg.Notes, fmt.Sprintf("%d earlier ended process(es) not listed (past --keep-ended-totals): %d event(s), %d leak(s) of %s", d.Processes, d.Events, d.Leaks, sinks.HumanBytes(d.LeakedBytes)))
	}
	tls := w.timelines(s)
	t0 := w.t0
	if !w.hasT0 {
		t0 = firstPeak(s)
		if len(s.Processes) > 0 {
			pg.Notes = append(pg.Notes, "No timelines: the run's events are not in this file (a summary alone), only its totals, peaks and lists.")
		}
	}
	if w.chipsDropped > 0 {
		pg.Notes = append(pg.Notes, fmt.Sprintf("%d chip(s) of processes have no timeline: timelines are kept for the first %d chips of processes.", w.chipsDropped, MaxTimelineChips))
	}
	data := jsData{}
	var series []*Series
	for i := range s.Processes {
		ps := &s.Processes[i]
		pv, jp := procPage(i, ps, tls[i], t0)
		pg.Procs = append(pg.Procs, pv)
		data.Procs = append(data.Procs, jp)
		for _, c := range jp.chips {
			series = append(series, c...)
		}
	}
	fitPoints(series, MaxPagePoints)
	for i := range data.Procs {
		data.Procs[i].fill(t0)
	}
	b, err := json.Marshal(data)
	if err != nil {
		b = []byte("{}") // cannot happen: plain numbers and strings
	}
	pg.Data = string(b)
	return pg
}

// firstPeak is the earliest peak time of s: the time origin of a page
// without timelines.
func firstPeak(s *devices.Summary) uint64 {
	var t uint64
	for i := range s.Processes {
		for _, d := range s.Processes[i].Devices {
			for _, c := range counterFields(&d) {
				if ts := c.peak.TsNs; ts != 0 && (t == 0 || ts < t) {
					t = ts
				}
			}
			if pk := d.PeakL1BusiestCore; pk != nil && pk.TsNs != 0 && (t == 0 || pk.TsNs < t) {
				t = pk.TsNs
			}
		}
	}
	return t
}

// fitPoints widens the series until they hold at most budget points in
// all: each to the same number of buckets.
func fitPoints(all []*Series, budget int) {
	total := 0
	for _, s := range all {
		total += 4 * s.Buckets()
	}
	if total <= budget || len(all) == 0 {
		return
	}
	per := max(budget/(4*len(all)), 1)
	for _, s := range all {
		s.Reduce(per)
	}
}

// counterField is one counter of a chip in the summary.
type counterField struct {
	name, typ, field string
	end              uint64
	peak             devices.Peak
	bytes            bool
}

func counterFields(d *devices.DeviceSummary) []counterField {
	p := &d.Peaks
	return []counterField{
		{"DRAM", "DRAM", "dram_bytes", d.DRAMBytes, p.DRAMBytes, true},
		{"L1", "L1", "l1_bytes", d.L1Bytes, p.L1Bytes, true},
		{"L1_SMALL", "L1_SMALL", "l1_small_bytes", d.L1SmallBytes, p.L1SmallBytes, true},
		{"TRACE", "TRACE", "trace_bytes", d.TraceBytes, p.TraceBytes, true},
		{"SYSTEM_MEMORY", "SYSTEM_MEMORY", "system_memory_bytes", d.SystemMemoryBytes, p.SystemMemoryBytes, true},
		{"CB (busiest core)", "CB", "cb_bytes", d.CBBytes, p.CBBytes, true},
		{"CB registered", "", "cb_registered_bytes", d.CBRegisteredBytes, p.CBRegisteredBytes, true},
		{"CB resident, all cores", "", "cb_resident_total_bytes", d.CBResidentTotalBytes, p.CBResidentTotalBytes, true},
		{"live buffers", "", "live_buffers", d.LiveBuffers, p.LiveBuffers, false},
	}
}

// procPage is one process's part of the page and of the charts' data.
func procPage(i int, ps *devices.ProcessSummary, tl *proc, t0 uint64) (*procView, *jsProc) {
	pv := &procView{Index: i, Pid: ps.Pid}
	ctx := numCtx{proc: strconv.Itoa(i)}
	pv.Heading = fmt.Sprintf("process %d", ps.Pid)
	if ps.NsPid != 0 && ps.NsPid != ps.Pid {
		pv.Heading += fmt.Sprintf(" (pid %d in its namespace)", ps.NsPid)
	}
	if ps.Command != "" {
		pv.Heading += " " + sinks.Printable(ps.Command)
	}
	pv.Status = exitText(ps)
	if ps.Rank != nil || ps.MeshID != nil || ps.MeshHostRank != nil || ps.PodUID != "" {
		pv.Notes = append(pv.Notes, sinks.Printable(ps.Placement.String()))
	}
	switch {
	case ps.LateLibrary:
		pv.Notes = append(pv.Notes, "INCOMPLETE: its TT-Metal library was probed only after it mapped it: its calls before are missed, earlier buffers are unknown and peaks are lower bounds (give --lib)")
	case ps.AttachedMidRun:
		pv.Notes = append(pv.Notes, "started late: tttrace attached after the library was in use; earlier buffers are unknown and peaks are lower bounds")
	}
	if ps.Trimmed != nil {
		pv.Notes = append(pv.Notes, "kept as totals only (past --keep-ended): its lists are not in the summary")
	}
	jp := &jsProc{Proc: i, Pid: ps.Pid}
	for j := range ps.Devices {
		d := &ps.Devices[j]
		var tc *chip
		if tl != nil {
			tc = tl.chips[d.Device]
		}
		cv, jc := chipPage(ctx, d, tc, t0)
		pv.Chips = append(pv.Chips, cv)
		if jc != nil {
			jp.Chips = append(jp.Chips, jc)
			jp.chips = append(jp.chips, jc.series)
		}
	}
	for j := range ps.Meshes {
		m := &ps.Meshes[j]
		chips := make([]string, len(m.Chips))
		for k, c := range m.Chips {
			chips[k] = strconv.Itoa(int(c))
		}
		mv := meshView{Name: sinks.Printable(m.MeshDevice), Chips: strings.Join(chips, ", "), Why: sinks.Printable(m.AllocatorWhy)}
		mv.Allocs = allocRows(numCtx{proc: ctx.proc}, fmt.Sprintf("meshes.%d.", j), m.Allocator)
		pv.Meshes = append(pv.Meshes, mv)
	}
	failures(pv, ctx, ps, t0)
	clashes(pv, ctx, ps)
	pv.Traces = traces(ctx, ps, t0)
	pv.Leaks = leaks(ctx, ps)
	for _, k := range sortedKeys(ps.AnomalyCounts) {
		if n := ps.AnomalyCounts[k]; n > 0 {
			pv.Anomalies = append(pv.Anomalies, anomalyRow{Kind: k, N: ctx.count("anomaly_counts."+k, "", n)})
		}
	}
	switch {
	case ps.SiteUsage == nil && ps.Trimmed != nil:
		pv.IcicleWhy = "kept as totals only: its sites are not in the summary"
	case ps.SiteUsage == nil:
		pv.IcicleWhy = "no per-site accounting: the run's events are not in this file"
	case len(ps.SiteUsage) == 0:
		pv.IcicleWhy = "no buffer was allocated"
	default:
		jp.Icicle = icicle(ps)
		pv.Icicle = true
	}
	return pv, jp
}

func exitText(ps *devices.ProcessSummary) string {
	switch {
	case !ps.Exited:
		return "still running when tracing stopped"
	case ps.ExitSignal != 0:
		name := unix.SignalName(syscall.Signal(ps.ExitSignal))
		if name == "" {
			name = "?"
		}
		return fmt.Sprintf("killed by signal %d (%s)", ps.ExitSignal, name)
	case ps.ExitCode < 0:
		return "exited (status unknown)"
	}
	return fmt.Sprintf("exited with code %d", ps.ExitCode)
}

func chipPage(pctx numCtx, d *devices.DeviceSummary, tc *chip, t0 uint64) (*chipView, *jsChip) {
	ctx := pctx
	ctx.chip = strconv.Itoa(int(d.Device))
	cv := &chipView{ID: d.Device, Name: fmt.Sprintf("chip %d", d.Device), Closed: d.Closed}
	switch {
	case d.UID != nil:
		cv.Identity = "pci " + sinks.Printable(d.PCI)
		if d.Dev != "" {
			cv.Identity += " (" + sinks.Printable(d.Dev) + ")"
		}
	case d.Why != "":
		cv.Identity = "physical chip unknown: " + sinks.Printable(d.Why)
	}
	for _, c := range counterFields(d) {
		row := counterRow{Name: c.name, Type: c.typ}
		if c.bytes {
			row.End, row.Peak = ctx.bytes(c.field, c.typ, c.end), ctx.bytes("peaks."+c.field+".value", c.typ, c.peak.Value)
		} else {
			row.End, row.Peak = ctx.count(c.field, c.typ, c.end), ctx.count("peaks."+c.field+".value", c.typ, c.peak.Value)
		}
		row.PeakAt = ctx.at("peaks."+c.field+".ts_ns", c.typ, c.peak.TsNs, t0)
		row.HasPeakTime = c.peak.Value > 0
		cv.Counters = append(cv.Counters, row)
	}
	cv.Allocs = allocRows(ctx, "", d.Allocator)
	if d.Allocator == nil {
		cv.AllocWhy = sinks.Printable(d.AllocatorWhy)
	}
	if d.L1Headroom != nil {
		n := ctx.signed("l1_headroom", "L1", *d.L1Headroom)
		cv.Headroom = &n
	}
	if m := d.MinL1Headroom; m != nil {
		cv.MinHeadroom = &minHeadroomView{
			Value:  ctx.signed("min_l1_headroom.value", "L1", m.Value),
			At:     ctx.at("min_l1_headroom.ts_ns", "L1", m.TsNs, t0),
			Lowest: ctx.hex("min_l1_headroom.lowest_l1_address", "L1", m.LowestL1Address),
			CBEnd:  ctx.hex("min_l1_headroom.cb_region_end", "L1", m.CBRegionEnd),
		}
	}
	cv.L1Cores = l1CoreRows(ctx, d, t0)
	if tc == nil {
		return cv, nil
	}
	jc := &jsChip{Chip: d.Device}
	for i := range memTypes {
		s := tc.mem[i]
		if s == nil {
			continue
		}
		if p, _ := s.Peak(); p.Value == 0 {
			continue // never held anything: not drawn
		}
		m := memTypes[i]
		js := jsSeries{Type: m.name, Label: m.name, Field: m.counter.String(), Peak: "peaks." + m.counter.String() + ".value", s: s}
		if m.counter == devices.CounterL1Core {
			// Its peak is peak_l1_busiest_core's total. A core's L1 is a
			// line on it when the peak came within half of it (below, the
			// line would flatten the series: the legend says it).
			js.Label, js.Peak = "L1 per core (the busiest core: L1 buffers + resident CBs)", ""
			var size uint64
			if pk := d.PeakL1BusiestCore; pk != nil {
				js.Peak = "peak_l1_busiest_core.total_bytes"
				if pk.L1Size != nil {
					size = *pk.L1Size
				}
			}
			if now := d.L1BusiestCore; now != nil && now.L1Size != nil {
				size = *now.L1Size
			}
			if p, _ := s.Peak(); size > 0 && p.Value >= size/2 {
				js.Cap = size
			} else if size > 0 {
				js.Label += " of " + sinks.HumanBytes(size)
			}
		}
		jc.Mem = append(jc.Mem, js)
		jc.series = append(jc.series, s)
	}
	cv.Timeline = len(jc.Mem) > 0
	for _, t := range devices.AllocatorTypes() {
		a := tc.alloc[t]
		if a == nil {
			continue
		}
		key := devices.AllocatorKey(t)
		jc.Alloc = append(jc.Alloc, jsAlloc{Type: key, Banks: a.banks, Capacity: devices.SatMul(uint64(a.banks), a.perBank), used: a.used, big: a.big})
		jc.series = append(jc.series, a.used, a.big)
		cv.AllocCharts = append(cv.AllocCharts, key)
	}
	return cv, jc
}

// l1CoreRows are chip d's busiest core now and at the peak, as the
// summary has them (each absent while the chip's L1 held nothing known).
func l1CoreRows(ctx numCtx, d *devices.DeviceSummary, t0 uint64) []l1CoreRow {
	var out []l1CoreRow
	for _, x := range []struct {
		when, field string
		c           *devices.L1Core
	}{{"now", "l1_busiest_core", d.L1BusiestCore}, {"at the peak", "peak_l1_busiest_core", d.PeakL1BusiestCore}} {
		c := x.c
		if c == nil {
			continue
		}
		f := x.field + "."
		r := l1CoreRow{When: x.when, Buffers: ctx.bytes(f+"l1_buffer_bytes", "L1", c.L1BufferBytes), CBs: ctx.bytes(f+"cb_bytes", "CB", c.CBBytes),
			Total: ctx.bytes(f+"total_bytes", "L1", c.TotalBytes), Program: sinks.Printable(c.Program), Upper: c.UpperBound}
		if c.Core != nil {
			r.Core = []Num{ctx.count(f+"core.0", "", uint64(c.Core[0])), ctx.count(f+"core.1", "", uint64(c.Core[1]))}
		}
		if c.Bank != nil {
			n := ctx.count(f+"bank", "", uint64(*c.Bank))
			r.Bank = &n
		}
		if c.L1Size != nil {
			n := ctx.bytes(f+"l1_size", "L1", *c.L1Size)
			r.Size = &n
			if *c.L1Size > 0 {
				r.Pct = fmt.Sprintf("%.1f%%", 100*float64(c.TotalBytes)/float64(*c.L1Size))
				r.Over = c.TotalBytes > *c.L1Size
			}
		}
		if c.SpansUnknown > 0 {
			n := ctx.count(f+"spans_unknown", "L1", c.SpansUnknown)
			r.SpansUnknown = &n
		}
		if x.field == "peak_l1_busiest_core" {
			n := ctx.at(f+"ts_ns", "", c.TsNs, t0)
			r.At = &n
		}
		if op := c.Op; op != nil {
			name := op.Name
			if name == "" {
				name = "(no op)"
			}
			if op.DeviceOp != "" {
				name += " > " + op.DeviceOp
			}
			r.Op = sinks.Printable(name)
		}
		out = append(out, r)
	}
	return out
}

// allocRows are the rows of an allocator (a chip's, or prefix's: a mesh's).
func allocRows(ctx numCtx, prefix string, a *devices.Allocator) []allocRow {
	if a == nil {
		return nil
	}
	var out []allocRow
	for _, t := range devices.AllocatorTypes() {
		at := a.Type(t)
		if at == nil {
			continue
		}
		key := devices.AllocatorKey(t)
		f := prefix + "allocator." + key + "."
		typ := t.String()
		r := allocRow{Key: key, Banks: ctx.count(f+"banks", typ, uint64(at.Banks)), BankSize: ctx.bytes(f+"bank_size", typ, at.BankSize),
			Failures: ctx.count(f+"alloc_failures", typ, at.Failures), FromProbe: at.Source == "probe", Why: sinks.Printable(at.Why)}
		if at.PerCoreBuffers > 0 {
			n := ctx.bytes(f+"per_core_bytes", typ, at.PerCoreBytes)
			r.PerCore = &n
		}
		if st, ok := at.Stats(); ok {
			r.Known = true
			r.Used = ctx.bytes(f+"total_allocated_bytes", typ, st.TotalAllocated)
			r.Free = ctx.bytes(f+"total_free_bytes", typ, st.TotalFree)
			r.Largest = ctx.bytes(f+"largest_free_block_bytes", typ, st.LargestFreeBlock)
			if at.BankSize > 0 {
				r.UsedPct = 100 * float64(st.TotalAllocated) / float64(at.BankSize)
				r.Bar = int(min(100, r.UsedPct))
				r.BarLarge = int(min(100, 100*float64(st.LargestFreeBlock)/float64(at.BankSize)))
			}
			r.ChipWide = fmt.Sprintf("%s of %s in all %d bank(s)", sinks.HumanBytes(devices.SatMul(uint64(at.Banks), st.TotalAllocated)),
				sinks.HumanBytes(devices.SatMul(uint64(at.Banks), at.BankSize)), at.Banks)
		}
		out = append(out, r)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
