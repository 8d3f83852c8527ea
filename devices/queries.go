package devices

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/tttrace/tttrace/alloc"
	"github.com/tttrace/tttrace/events"
)

// What the runtime asks of the ledger between events, family by family:
// each answer is read from a process's rule families through the process.

// LayoutAnomalies counts, over every process, the anomalies only a wrong
// layout (or a bad read) makes: a buffer_type outside TT-Metal's enum
// (invalid_buffer_type), a size no device has (implausible_size). Any is
// a sign that the offsets or widths tttrace reads Buffer with do not fit
// the library: its numbers cannot be trusted.
func (l *Ledger) LayoutAnomalies() uint64 { return l.set.layoutBad }

// L1Headroom returns the current L1 headroom of every chip pid touched,
// sorted by chip id: what a live view shows. Nil for an unknown pid.
func (l *Ledger) L1Headroom(pid uint32) []Headroom {
	p := l.procs[pid]
	if p == nil {
		return nil
	}
	out := make([]Headroom, 0, len(p.chips))
	for id, c := range p.chips {
		out = append(out, Headroom{Device: id, HasHeadroom: c.hr.has, Headroom: c.hr.cur, LowestL1Address: c.hr.low, CBRegionEnd: c.hr.end})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Device < out[j].Device })
	return out
}

// Flush runs the clash checks still waiting for the end of a CB layout
// (the thread did nothing since): call it before a final Summary.
func (l *Ledger) Flush() {
	for _, p := range l.retired {
		p.l1.flushChecks()
		p.allocs.flushRequests()
	}
	for _, p := range l.procs {
		p.l1.flushChecks()
		p.allocs.flushRequests()
	}
}

// LastTs returns the latest event time (ts_ns) applied.
func (l *Ledger) LastTs() uint64 { return l.lastTs }

// FlushBefore runs the waiting clash checks whose layout's last CB came
// before tsNs: a layout quiet that long is complete even if its thread made
// no TT-Metal call since (TT-Metal threw, and the program went on without
// one). The caller picks tsNs far enough back that no CB of a layout still
// being tracked can be pending in the ring.
func (l *Ledger) FlushBefore(tsNs uint64) {
	for _, p := range l.procs {
		p.allocs.failRequestsBefore(tsNs)
		if p.l1.nchecks == 0 {
			continue
		}
		for _, t := range p.threads {
			if t.checkPending && t.checkTs < tsNs {
				p.l1.runCheck(t)
			}
		}
	}
}

// MeshAllocators returns the allocator view of every live mesh of pid.
func (l *Ledger) MeshAllocators(pid uint32) []MeshAllocator {
	p := l.procs[pid]
	if p == nil {
		return nil
	}
	return p.allocs.meshAllocators()
}

// TraceCounts returns pid's Metal trace counts as its summary's traces
// has them, without the lists of records; nil while it made no trace call.
func (l *Ledger) TraceCounts(pid uint32) *TraceSummary {
	p := l.procs[pid]
	if p == nil || p.traces.tr == nil {
		return nil
	}
	s := p.traces.tr.sum
	s.Hazards, s.InvalidReplays, s.RegionHazards, s.CaptureAllocs = nil, nil, nil, nil
	return &s
}

// AllocFailures returns the alloc_failed records of pid kept so far (the
// first 100 made), by seq of their requests.
func (l *Ledger) AllocFailures(pid uint32) []AllocFailure {
	p := l.procs[pid]
	if p == nil {
		return nil
	}
	return p.allocs.sortedFailures()
}

// TotalAllocFailures counts every failed allocation seen, in every process.
func (l *Ledger) TotalAllocFailures() uint64 {
	var n uint64
	for _, p := range l.retired {
		n += p.stats.AllocFailures
	}
	for _, p := range l.procs {
		n += p.stats.AllocFailures
	}
	return n
}

// Allocators returns the allocator view of every chip pid touched,
// sorted by chip id. Nil for an unknown pid.
func (l *Ledger) Allocators(pid uint32) []ChipAllocator {
	p := l.procs[pid]
	if p == nil {
		return nil
	}
	out := make([]ChipAllocator, 0, len(p.chips))
	for id, c := range p.chips {
		a, why := p.allocs.allocatorView(c)
		out = append(out, ChipAllocator{Device: id, Allocator: a, Why: why})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Device < out[j].Device })
	return out
}

// TakeMemWants returns the bank managers to read, and forgets them.
func (l *Ledger) TakeMemWants() []MemWant {
	w := l.memWants
	l.memWants = nil
	return w
}

// FoundMem registers bank manager ptr as chip's type-t manager, found from
// the process's own root of its open chips at attach (before any request
// named it), and returns what to read into it with InstallMem. false: the
// chip's type is known already, or the process may not have one more chip.
func (l *Ledger) FoundMem(pid uint32, chip int32, t events.BufferType, ptr uint64) (MemWant, bool) {
	p := l.proc(pid)
	if !allocatable(t) || ptr == 0 {
		return MemWant{}, false
	}
	if p.chips[chip] == nil {
		limit := p.set.maxChips
		if limit <= 0 {
			limit = DefaultMaxChips
		}
		if len(p.chips) >= limit {
			return MemWant{}, false
		}
	}
	c := p.chip(chip)
	ca := c.allocator()
	if ca.types[t] != nil {
		return MemWant{}, false
	}
	if p.allocs.managers == nil {
		p.allocs.managers = make(map[uint64]mgrRef)
	}
	p.allocs.managers[ptr] = mgrRef{chip: chip, typ: t}
	ca.types[t] = &typeAlloc{ptr: ptr, mem: &memState{}, why: "being read from the process's memory"}
	p.allocs.allocTouch(c, t)
	return MemWant{Pid: pid, Chip: chip, Type: t, Manager: ptr}, true
}

// MemChips says, for each of chips (found open in pid's memory at attach,
// in order), whether its allocators may be read: a chip the process has
// already, or a new one while it may have one more (--max-chips). Those
// past the bound are not read at all: reading costs what the process
// makes it cost.
func (l *Ledger) MemChips(pid uint32, chips []int32) []bool {
	p := l.proc(pid)
	limit := p.set.maxChips
	if limit <= 0 {
		limit = DefaultMaxChips
	}
	room := limit - len(p.chips)
	admit := make([]bool, len(chips))
	added := map[int32]bool{}
	for i, c := range chips {
		switch {
		case p.chips[c] != nil || added[c]:
			admit[i] = true
		case room > 0:
			admit[i], added[c] = true, true
			room--
		}
	}
	return admit
}

// SetRootWhy records why pid's open chips could not be found from its
// root at attach (said by every chip without an allocator view).
func (l *Ledger) SetRootWhy(pid uint32, why string) { l.proc(pid).allocs.rootWhy = why }

// InstallMem gives the ledger what reading w's bank manager found (or
// why it could not be read).
func (l *Ledger) InstallMem(w MemWant, m *MemManager, err error) {
	p := l.procs[w.Pid]
	if p == nil {
		return
	}
	ta := p.allocs.typeAlloc(w.Chip, w.Type)
	if ta == nil || ta.ptr != w.Manager || ta.mem == nil || ta.mem.to != 0 || ta.m != nil {
		return // the chip's allocator changed since
	}
	c := p.chip(w.Chip)
	p.allocs.allocTouch(c, w.Type)
	if err == nil && m.BufferType != int32(w.Type) {
		err = fmt.Errorf("bank manager %#x holds buffer type %d, its buffer was %s", w.Manager, m.BufferType, w.Type)
	}
	var mgr *alloc.Manager
	cfg := alloc.Config{}
	if err == nil {
		cfg = alloc.Config{Banks: m.Banks, BankSize: m.BankSize, Offset: m.Offset, Alignment: m.Alignment,
			BlockAlign: m.BlockAlign, AddressLimit: m.AddressLimit}
		mgr, err = alloc.FromBlocks(cfg, m.Blocks)
	}
	if err != nil {
		ta.why = "the chip's allocator was made before tttrace attached; reading it from the process's memory: " + err.Error()
		ta.mem.to = 1
		return
	}
	ta.why, ta.cfg, ta.m = "", cfg, mgr
	ta.mem.from, ta.mem.to = m.FromNs, m.ToNs
	if ref, ok := p.allocs.managers[w.Manager]; ok {
		ref.cfg = cfg
		p.allocs.managers[w.Manager] = ref
	}
	if w.Type == events.DRAM || c.alloc.blockAlign == 0 {
		c.alloc.blockAlign = m.BlockAlign
	}
	// Buffers counted before the read (their allocs came before it): the
	// list holds them; their spans are its blocks.
	for i := range p.bufs.slots.len() {
		b := p.bufs.slots.at(uint32(i))
		if !b.live || b.mesh != 0 || b.chip != w.Chip || events.BufferType(b.btype) != w.Type || b.perCore {
			continue
		}
		size, ok := mgr.AllocatedAt(b.addr)
		if !ok {
			ta.lose(fmt.Sprintf("buffer %#x (seq %d) at %#x is not allocated in the list read from memory", b.key, b.seq, b.addr))
			return
		}
		p.setSpan(c, uint32(i), b, size)
	}
}

// SetChips gives pid's current process the chip map m (its physical chips
// as known now: ChipMap.Holding grows as it opens its devices).
func (l *Ledger) SetChips(pid uint32, m ChipMap) {
	if p := l.procs[pid]; p != nil {
		p.info.Chips = m
	}
}

// ChipCount is how many chips pid's current process has in the ledger.
func (l *Ledger) ChipCount(pid uint32) int {
	if p := l.procs[pid]; p != nil {
		return len(p.chips)
	}
	return 0
}

// Summary returns a snapshot of the whole ledger: SummaryStreamed with the
// leak lists copied out, so it stays valid when the ledger changes. It
// does not change the ledger and depends only on the events applied (and
// SetProcessInfo).
func (l *Ledger) Summary() Summary {
	s := l.SummaryStreamed()
	for i := range s.Processes {
		s.Processes[i].copyLeaks()
	}
	return s
}

// SummaryStreamed is Summary with each process's leak lists left in the
// ledger (ProcessSummary.Streamed): with a million buffers left, the
// lists are ~140 MB as Leaks, 8 MB so. Valid while the ledger does not
// change: for the final summary.
func (l *Ledger) SummaryStreamed() Summary {
	s := l.header()
	trimmed := l.ret.trimmed[l.ret.trimmedHead:]
	s.Processes = make([]ProcessSummary, 0, len(trimmed)+len(l.procs)+len(l.retired))
	// A pid's trimmed incarnations ended before its others began.
	s.Processes = append(s.Processes, trimmed...)
	for _, p := range l.retired {
		s.Processes = append(s.Processes, p.summary())
	}
	for _, pid := range l.Processes() {
		s.Processes = append(s.Processes, l.procs[pid].summary())
	}
	// By pid; a reused pid's incarnations in the order they lived.
	sort.SliceStable(s.Processes, func(i, j int) bool { return s.Processes[i].Pid < s.Processes[j].Pid })
	return s
}

// ProcessSummary returns the ledger's header (events, loss) with only the
// process pid in it: what is reported when one process ends while others
// are traced. ok is false for an unknown pid.
func (l *Ledger) ProcessSummary(pid uint32) (s Summary, ok bool) {
	s, ok = l.ProcessSummaryStreamed(pid)
	if ok {
		s.Processes[0].copyLeaks()
	}
	return s, ok
}

// ProcessSummaryStreamed is ProcessSummary with the leak lists left in the
// ledger, as SummaryStreamed: valid while the ledger does not change.
func (l *Ledger) ProcessSummaryStreamed(pid uint32) (s Summary, ok bool) {
	p := l.procs[pid]
	if p == nil {
		return Summary{}, false
	}
	s = l.header()
	s.Processes = []ProcessSummary{p.summary()}
	return s, true
}

func (l *Ledger) header() Summary {
	s := Summary{Type: "summary", LostEvents: l.lost, Complete: l.lost == 0, Events: l.events, LayoutAnomalies: l.set.layoutBad}
	if l.ret.dropped.Processes > 0 {
		d := l.ret.dropped
		s.DroppedProcesses = &d
	}
	return s
}

// Devices returns the current totals of every chip pid touched, sorted by
// chip id: what a live view shows. Nil for an unknown pid.
func (l *Ledger) Devices(pid uint32) []DeviceSummary {
	p := l.procs[pid]
	if p == nil {
		return nil
	}
	return p.deviceSummaries()
}

// Trim trims the ended processes past the retention limits, oldest first,
// and returns them. Call it after an ended process has been reported (its
// ProcessSummary handed out). A trimmed process's summary is made (sites
// described by its SiteSource) before its lists go: its first ten
// leak_sites survive, and its site source is released.
func (l *Ledger) Trim() []TrimmedProcess {
	keepEnded, keepTotals := l.ret.keepEnded, l.ret.keepTotals
	var out []TrimmedProcess
	for len(l.ret.ended) > keepEnded {
		p := l.ret.ended[0]
		l.ret.ended[0] = nil
		l.ret.ended = l.ret.ended[1:]
		t := TrimmedProcess{Pid: p.pid}
		if l.procs[p.pid] == p {
			t.Current = true
			delete(l.procs, p.pid)
			if l.last == p {
				l.last = nil
			}
		} else {
			for i, r := range l.retired {
				if r == p {
					// slices.Delete clears the slot it frees: a copy of p
					// left past the end would keep it.
					l.retired = slices.Delete(l.retired, i, i+1)
					break
				}
			}
		}
		ps := p.summary() // its lists are only counted: left in p, which trim lets go
		ps.trim()
		l.ret.trimmed = append(l.ret.trimmed, ps)
		out = append(out, t)
	}
	for len(l.ret.trimmed)-l.ret.trimmedHead > keepTotals {
		l.ret.dropped.add(&l.ret.trimmed[l.ret.trimmedHead])
		l.ret.trimmed[l.ret.trimmedHead] = ProcessSummary{}
		l.ret.trimmedHead++
	}
	if h := l.ret.trimmedHead; h > 64 && h > len(l.ret.trimmed)/2 {
		l.ret.trimmed = append([]ProcessSummary(nil), l.ret.trimmed[h:]...)
		l.ret.trimmedHead = 0
	}
	return out
}

// Mark starts a window (tttrace mark) at tsNs, named name (cut to
// MaxMarkName bytes): every process in the ledger ends its current window
// there and begins the mark's (window.go). It returns the mark.
func (l *Ledger) Mark(name string, tsNs uint64) Mark {
	prev := l.set.marks.cur
	if len(name) > MaxMarkName {
		n := MaxMarkName
		for n > 0 && !utf8.RuneStart(name[n]) {
			n--
		}
		name = name[:n]
	}
	m := Mark{Type: "window", Index: prev.Index + 1, Name: strings.Clone(name), TsNs: tsNs}
	for _, p := range l.retired {
		p.markWindow(m, prev)
	}
	for _, p := range l.procs {
		p.markWindow(m, prev)
	}
	l.set.marks.cur = m
	return m
}

// CurrentWindow returns pid's current window as of now: from the last
// mark, or the whole run before the first (window 0). ok is false for an
// unknown pid.
func (l *Ledger) CurrentWindow(pid uint32) (w Window, ok bool) {
	p := l.procs[pid]
	if p == nil {
		return Window{}, false
	}
	return p.window(nil), true
}

// LastOp names the TT-NN op of pid's last recorded allocation (ok false:
// it was made in no op, or pid made none).
func (l *Ledger) LastOp(pid uint32) (op OpRef, ok bool) {
	p := l.procs[pid]
	if p == nil {
		return OpRef{}, false
	}
	r := refOf(&p.ops.last)
	if r == nil {
		return OpRef{}, false
	}
	return *r, true
}
