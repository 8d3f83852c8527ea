// Package html writes tttrace's report as one self-contained HTML page
// (--html FILE; `tttrace report FILE --html OUT`; `tttrace diff A B --html
// OUT` for a comparison): its styles, script and data inline, nothing
// fetched (a Content-Security-Policy of default-src 'none' lets the page
// run only its own inline script and style), so it opens from disk on an
// air-gapped machine.
//
// Per process the page shows, per chip: memory over time per buffer type
// and L1 per core (the busiest core's L1 against its size) with each peak
// marked, the busiest core now and at the peak, the allocator's used bytes against its capacity
// and its largest free block over time, its numbers at the end; each failed
// allocation with its cause and the buffers that held the memory; L1
// headroom and clashes; Metal trace hazards; leaks with their sites; and
// the allocation sites as an icicle view (the ledger's per-site
// accounting, as --pprof writes it: in use, allocated, held at the peak).
//
// Every number the page takes from the summary is in an element with the
// summary's own name for it: data-field, the field's path in the summary's
// JSON (dotted, array indices as numbers), relative to the process
// (data-proc: its index in the summary's processes) or to one of its chips
// (data-chip: the device's id), or to the run (data-scope="run"); data-value
// holds the number exactly, the text shows it for people. The charts' peak
// markers say the same of the drawn series (data-chip, data-type,
// data-field, data-value), so a test or a script can check the page
// against the summary.
//
// Timelines are bounded (Series): a counter keeps at most SeriesBuckets
// intervals of four samples each, the intervals widening as the run goes
// on, so each interval's lowest and highest value (and the peak) are kept
// exactly whatever the run's length; timelines are kept for at most
// MaxTimelineChips chips of processes, and the page holds at most
// MaxPagePoints samples in all (series are widened further to fit). Lists
// are capped (per process: the first MaxFailures failed allocations and
// MaxClashes clashes, MaxTraceRecords trace records of each kind, the
// largest MaxLeaks leaks, MaxLeakSites leak sites, the icicle's
// MaxIcicleNodes largest frames; the rest is counted), so a process takes
// at most about 1 MiB of the page whatever the run's length: a
// million-event run of a few processes gives a page of a few MiB.
package html

import (
	"io"

	"github.com/tttrace/tttrace/alloc"
	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
)

// Bounds of the page (package doc).
const (
	SeriesBuckets    = 256
	MaxTimelineChips = 256
	MaxPagePoints    = 1 << 18
	MaxLeaks         = 200
	MaxLeakSites     = 100
	MaxFailures      = 20 // per process, with their holders
	MaxClashes       = 20
	MaxTraceRecords  = 50 // per kind
	MaxIcicleNodes   = 4000
	// maxIcicleSites: the sites (per type) an icicle is built from; the
	// others are summed in one node.
	maxIcicleSites = 2000
)

// memTypes are the counters drawn per chip, in the report's order.
var memTypes = [...]struct {
	counter devices.Counter
	name    string // the buffer type, as the report names it; L1_CORE: L1 per core
}{
	{devices.CounterDRAM, "DRAM"},
	{devices.CounterL1, "L1"},
	{devices.CounterL1Small, "L1_SMALL"},
	{devices.CounterTrace, "TRACE"},
	{devices.CounterSystemMemory, "SYSTEM_MEMORY"},
	{devices.CounterCB, "CB"},
	// The busiest core's L1 (its L1 buffers' spans and resident CBs):
	// peak_l1_busiest_core is its peak.
	{devices.CounterL1Core, "L1_CORE"},
}

const nMem = len(memTypes)

// Writer is the --html sink: it keeps every chip's timelines while
// tracing (ChipTotals, AllocState) and writes the page at the Summary.
type Writer struct {
	sinks.Base
	w io.Writer
	// Title heads the page ("" : "tttrace report").
	Title string
	procs map[uint32][]*proc
	// chips: timelines kept; chipsDropped: chips of processes that got
	// none (past MaxTimelineChips).
	chips        int
	chipsDropped uint64
	t0           uint64
	hasT0        bool
	written      bool
}

// proc is one incarnation of a pid.
type proc struct {
	ended bool
	chips map[int32]*chip
}

// chip is one chip's timelines in one process.
type chip struct {
	cur   [nMem]uint64
	mem   [nMem]*Series
	alloc [events.NumBufferTypes]*allocSeries // by events.BufferType (the allocator's types)
}

// allocSeries is one bank manager's used bytes and largest free block
// (chip-wide: banks x per bank) over time.
type allocSeries struct {
	banks     uint32
	perBank   uint64 // allocatable bytes per bank
	used, big *Series
	lastUsed  uint64
	lastBig   uint64
}

// New writes the page to w (closed by Close when it is an io.Closer).
func New(w io.Writer) *Writer {
	return &Writer{w: w, procs: map[uint32][]*proc{}}
}

// procOf is pid's current incarnation, made when the last one ended.
func (w *Writer) procOf(pid uint32) *proc {
	ps := w.procs[pid]
	if n := len(ps); n > 0 && !ps[n-1].ended {
		return ps[n-1]
	}
	p := &proc{chips: map[int32]*chip{}}
	w.procs[pid] = append(ps, p)
	return p
}

// chipOf is chip id of p, made if the bound allows (nil otherwise).
func (w *Writer) chipOf(p *proc, id int32) *chip {
	if c := p.chips[id]; c != nil {
		return c
	}
	if _, seen := p.chips[id]; seen {
		return nil
	}
	if w.chips >= MaxTimelineChips {
		p.chips[id] = nil
		w.chipsDropped++
		return nil
	}
	w.chips++
	c := &chip{}
	p.chips[id] = c
	return c
}

func (w *Writer) seen(ts uint64) {
	if !w.hasT0 || ts < w.t0 {
		w.t0, w.hasT0 = ts, true
	}
}

// ChipTotals adds a sample to each counter of the chip that changed.
func (w *Writer) ChipTotals(pid uint32, id int32, ts uint64, t *devices.Totals) {
	c := w.chipOf(w.procOf(pid), id)
	if c == nil {
		return
	}
	w.seen(ts)
	for i := range memTypes {
		v := t[memTypes[i].counter]
		if c.mem[i] == nil {
			c.mem[i] = NewSeries(SeriesBuckets)
		} else if v == c.cur[i] {
			continue
		}
		c.cur[i] = v
		c.mem[i].Add(ts, v)
	}
}

// AllocState adds a sample of a bank manager's used bytes and largest free
// block when either changed; an unknown state adds none.
func (w *Writer) AllocState(pid uint32, id int32, ts uint64, typ events.BufferType, banks uint32, st *alloc.Statistics) {
	if st == nil || !typ.Valid() || int(typ) >= len(chip{}.alloc) {
		return
	}
	c := w.chipOf(w.procOf(pid), id)
	if c == nil {
		return
	}
	w.seen(ts)
	used, big := devices.SatMul(uint64(banks), st.TotalAllocated), devices.SatMul(uint64(banks), st.LargestFreeBlock)
	a := c.alloc[typ]
	if a == nil {
		a = &allocSeries{used: NewSeries(SeriesBuckets), big: NewSeries(SeriesBuckets)}
		c.alloc[typ] = a
	} else if used == a.lastUsed && big == a.lastBig && banks == a.banks {
		return
	}
	a.banks, a.perBank = banks, st.TotalAllocatable
	a.lastUsed, a.lastBig = used, big
	a.used.Add(ts, used)
	a.big.Add(ts, big)
}

// ProcessEnded ends the pid's incarnation: its next samples are a new one's.
func (w *Writer) ProcessEnded(one *devices.Summary, _ bool) {
	if len(one.Processes) != 1 {
		return
	}
	if ps := w.procs[one.Processes[0].Pid]; len(ps) > 0 {
		ps[len(ps)-1].ended = true
	}
}

// Summary writes the page.
func (w *Writer) Summary(s *devices.Summary) error {
	if w.written {
		return nil
	}
	w.written = true
	return writePage(w.w, w.report(s))
}

// Close closes the output when it is a closer.
func (w *Writer) Close() error {
	if c, ok := w.w.(io.Closer); ok {
		w.w = nil
		return c.Close()
	}
	return nil
}

// timelines are the timelines of the summary's processes, by their index
// there (an incarnation of a pid is the n-th process of that pid).
func (w *Writer) timelines(s *devices.Summary) []*proc {
	out := make([]*proc, len(s.Processes))
	seen := map[uint32]int{}
	for i := range s.Processes {
		pid := s.Processes[i].Pid
		n := seen[pid]
		seen[pid]++
		if ps := w.procs[pid]; n < len(ps) {
			out[i] = ps[n]
		}
	}
	return out
}
