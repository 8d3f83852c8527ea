package devices

import (
	"fmt"
	"iter"
	"sort"
	"strconv"

	"github.com/tttrace/tttrace/events"
)

// Summary is the final (or any-time) view of the ledger. It marshals with
// encoding/json to the NDJSON "summary" line; field names are a public
// interface (docs/ndjson.md): add, never rename.
type Summary struct {
	Type       string `json:"type"`        // always "summary"
	LostEvents uint64 `json:"lost_events"` // records the ring buffer could not take
	Complete   bool   `json:"complete"`    // no record was lost: the ledger saw everything
	// LayoutAnomalies: invalid_buffer_type and implausible_size anomalies
	// of every process (Ledger.LayoutAnomalies): non-zero means the layout
	// does not fit the library and the numbers cannot be trusted.
	LayoutAnomalies uint64 `json:"layout_anomalies"`
	// LostRecords: records the ring buffer could not take, by kind (its
	// NDJSON name; only kinds with losses): the events (the allocator's
	// alloc_request and alloc_capacity too), whose sum is LostEvents, and
	// the records that describe an alloc ("stack",
	// "py_stack", "py_code"), which leave the ledger exact. Filled by the
	// runtime.
	LostRecords map[string]uint64 `json:"lost_records,omitempty"`
	// LoaderCallsDropped: calls of ld.so's _dl_debug_state over their
	// process's budget, not recorded (filled by the runtime).
	LoaderCallsDropped uint64 `json:"loader_calls_dropped,omitempty"`
	Events             uint64 `json:"events"` // events applied
	// DroppedProcesses: ended processes past the retention limits
	// (Options.KeepEndedTotals), summed; absent when none.
	DroppedProcesses *DroppedProcesses `json:"dropped_processes,omitempty"`
	// Processes stays the last field (sinks.NDJSON streams it).
	Processes []ProcessSummary `json:"processes"` // sorted by pid
}

// ProcessSummary is one traced process.
type ProcessSummary struct {
	Pid            uint32 `json:"pid"`
	Command        string `json:"command"`
	Parent         uint32 `json:"ppid"`
	NsPid          uint32 `json:"ns_pid"`
	AttachedMidRun bool   `json:"attached_mid_run"` // started late: earlier buffers are unknown
	// Placement: host, rank, rank_from, mesh_id, mesh_host_rank.
	Placement
	// LateLibrary: its library was probed after it mapped it: its calls
	// before are missed (ProcessInfo.LateLibrary).
	LateLibrary bool `json:"late_library"`
	Exited      bool `json:"exited"`
	ExitCode    int  `json:"exit_code"`
	ExitSignal  int  `json:"exit_signal"`

	Devices []DeviceSummary `json:"devices"` // every chip touched, sorted by id

	// Leaks: every buffer still counted, one entry per chip it is charged
	// on, sorted by device, type (enum order), address.
	Leaks      []Leak      `json:"leaks"`
	LeakGroups []LeakGroup `json:"leak_groups"` // Leaks summed per device and type
	// UnplacedLeaks: live mesh buffers whose mesh's chips were never
	// learned (no view followed any of its allocations); Device is 0.
	UnplacedLeaks []Leak `json:"unplaced_leaks"`

	// Sites: where the leaked buffers (and the L1 buffers in the way of
	// its l1_clashes) were allocated, by site id, as the process's
	// SiteSource describes them. LeakSites sums the leaks per site, most
	// bytes first.
	Sites     []Site     `json:"sites"`
	LeakSites []LeakSite `json:"leak_sites"`
	// LostStacks: allocations whose stack could not be captured or
	// delivered (their buffers have no site).
	LostStacks uint64 `json:"lost_stacks"`
	// LoaderCallsDropped: this process's calls of ld.so's _dl_debug_state
	// over its budget (dlopen/dlclose faster than tttrace needs to look),
	// not recorded; its maps were read again instead (filled by the
	// runtime).
	LoaderCallsDropped uint64 `json:"loader_calls_dropped,omitempty"`
	// Python: the process's CPython interpreter, when it has one.
	Python *PythonInfo `json:"python,omitempty"`

	UnknownFrees     uint64 `json:"unknown_frees"`      // frees of buffers never seen allocated
	UnknownFreeBytes uint64 `json:"unknown_free_bytes"` // their sizes
	DoubleFrees      uint64 `json:"double_frees"`

	// L1Clashes: the first 100 l1_clash records, in stream order.
	L1Clashes []Notice `json:"l1_clashes"`
	// AllocFailures: the first 100 alloc_failed records, in stream order
	// (stats.alloc_failures counts them all).
	AllocFailures []AllocFailure `json:"alloc_failures"`
	// Meshes: the own allocator of every MeshDevice live at the end, in
	// the order first seen (mesh buffers count there, not in their chips'
	// allocators).
	Meshes []MeshAllocator `json:"meshes"`
	// Traces: what the process did with Metal traces and the hazards found
	// (docs/ndjson.md); absent when it made no trace call.
	Traces *TraceSummary `json:"traces,omitempty"`

	Stats         Stats             `json:"stats"`
	AnomalyCounts map[string]uint64 `json:"anomaly_counts"` // every kind, zero or not
	Anomalies     []Anomaly         `json:"anomalies"`      // the first 100, in stream order
	// Trimmed: an ended process kept as totals only (past the retention
	// limit): its lists are empty, their sizes here; absent otherwise.
	Trimmed *Trimmed `json:"trimmed,omitempty"`

	// SiteUsage: per site, chip and type, what was held, allocated and
	// held at the peak (Options.SiteUsage; nil when off). Not in NDJSON:
	// the memory profile's rows (sinks/pprof).
	SiteUsage []SiteUsage `json:"-"`

	leaks *leakList // SummaryStreamed: Leaks and UnplacedLeaks are here
}

// DeviceSummary is one chip's current totals and peaks in one process.
type DeviceSummary struct {
	Device int32 `json:"device"` // chip id
	// ChipIdentity: chip_uid, pci, dev, chip_uid_why: the physical chip.
	ChipIdentity
	DRAMBytes         uint64 `json:"dram_bytes"`
	L1Bytes           uint64 `json:"l1_bytes"`
	L1SmallBytes      uint64 `json:"l1_small_bytes"`
	TraceBytes        uint64 `json:"trace_bytes"`
	SystemMemoryBytes uint64 `json:"system_memory_bytes"`
	CBBytes           uint64 `json:"cb_bytes"`
	LiveBuffers       uint64 `json:"live_buffers"`
	Closed            bool   `json:"closed"` // closed and not used since
	Peaks             Peaks  `json:"peaks"`
	// L1Headroom: lowest live L1 address - highest CB region end now;
	// null while the chip lacks either. MinL1Headroom: its lowest value.
	L1Headroom    *int64       `json:"l1_headroom"`
	MinL1Headroom *MinHeadroom `json:"min_l1_headroom"`
	// Allocator: the chip's allocator as TT-Metal's get_statistics sees
	// it, per buffer type; null with AllocatorWhy when tttrace did not see
	// it made.
	Allocator    *Allocator `json:"allocator"`
	AllocatorWhy string     `json:"allocator_why,omitempty"`
}

// Peak is a high-water mark and the time (CLOCK_MONOTONIC ns) it was first reached.
type Peak struct {
	Value uint64 `json:"value"`
	TsNs  uint64 `json:"ts_ns"`
}

// Peaks holds the high-water mark of each DeviceSummary total.
type Peaks struct {
	DRAMBytes         Peak `json:"dram_bytes"`
	L1Bytes           Peak `json:"l1_bytes"`
	L1SmallBytes      Peak `json:"l1_small_bytes"`
	TraceBytes        Peak `json:"trace_bytes"`
	SystemMemoryBytes Peak `json:"system_memory_bytes"`
	CBBytes           Peak `json:"cb_bytes"`
	LiveBuffers       Peak `json:"live_buffers"`
}

// Leak is a buffer still counted on a chip when the process exited (or
// tracing stopped).
type Leak struct {
	Device     int32  `json:"device"`
	Type       string `json:"type"` // DRAM, L1, SYSTEM_MEMORY, L1_SMALL, TRACE
	Address    uint64 `json:"address"`
	Size       uint64 `json:"size"`
	PageSize   uint64 `json:"page_size"`
	Buffer     string `json:"buffer"` // Buffer*, hex
	Mesh       bool   `json:"mesh"`   // the backing buffer of a mesh buffer
	MeshDevice string `json:"mesh_device,omitempty"`
	Tid        uint32 `json:"tid"` // allocating thread
	// Site is where it was allocated (in Sites); absent when unknown
	// (stacks off, or its stack lost).
	Site uint32 `json:"site,omitempty"`
	Seq  uint64 `json:"seq"` // of the alloc event
	TsNs uint64 `json:"ts_ns"`
	// MarkedDeallocated: Buffer::mark_as_deallocated was called, but the
	// chip was never closed, so its memory is still held.
	MarkedDeallocated bool `json:"marked_deallocated"`

	btype events.BufferType
}

// LeakGroup sums the leaks of one buffer type on one chip.
type LeakGroup struct {
	Device int32  `json:"device"`
	Type   string `json:"type"`
	Count  uint64 `json:"count"`
	Bytes  uint64 `json:"bytes"`
}

// Stats counts what the ledger saw and deliberately did not count.
type Stats struct {
	Events            uint64 `json:"events"`
	Allocs            uint64 `json:"allocs"`      // track_allocate events
	MeshAllocs        uint64 `json:"mesh_allocs"` // of which on a MeshDevice
	HookedAllocs      uint64 `json:"hooked_allocs"`
	ZeroSizeAllocs    uint64 `json:"zero_size_allocs"`
	NonOwningAllocs   uint64 `json:"non_owning_allocs"`
	Frees             uint64 `json:"frees"` // track_deallocate events
	HookedFrees       uint64 `json:"hooked_frees"`
	FreesAfterRelease uint64 `json:"frees_after_release"` // of buffers a close or mark had released
	Views             uint64 `json:"views"`
	MeshChipsLearned  uint64 `json:"mesh_chips_learned"`
	MarkDeallocated   uint64 `json:"mark_deallocated"`
	// MarkedHeld: live buffers marked deallocated, which stay counted
	// because the allocator keeps their memory until their chip closes.
	MarkedHeld uint64 `json:"marked_held"`
	// ReleasedByMark: marked buffers released since, by their chip's close.
	ReleasedByMark   uint64 `json:"released_by_mark"`
	ReleasedByClose  uint64 `json:"released_by_close"` // buffers released by a device or mesh close
	DeviceCloses     uint64 `json:"device_closes"`
	MeshCloses       uint64 `json:"mesh_closes"`
	CBLayouts        uint64 `json:"cb_layouts"`
	CBAllocs         uint64 `json:"cb_allocs"`
	GlobalCBs        uint64 `json:"global_cbs"`   // not counted: backed by an L1 buffer
	CBRelayouts      uint64 `json:"cb_relayouts"` // groups replaced by a new layout
	CBTeardowns      uint64 `json:"cb_teardowns"`
	CBFrees          uint64 `json:"cb_frees"`
	CBFreesUnknown   uint64 `json:"cb_frees_unknown"` // nothing held for that program and target
	CBGroupsReleased uint64 `json:"cb_groups_released"`
	ProgramDestroys  uint64 `json:"program_destroys"`
	// L1Clashes: CB layouts whose region passed the lowest live L1 buffer
	// of a chip (one per chip); L1HeadroomWarnings: drops of a chip's
	// headroom under --l1-warn.
	L1Clashes          uint64 `json:"l1_clashes"`
	L1HeadroomWarnings uint64 `json:"l1_headroom_warnings"`
	// The allocator's records: bank managers made, allocate_buffer calls,
	// those that failed (alloc_failed) and the out-of-memory paths seen
	// taken (alloc_oom records).
	AllocCapacities uint64 `json:"alloc_capacities"`
	AllocRequests   uint64 `json:"alloc_requests"`
	AllocFailures   uint64 `json:"alloc_failures"`
	AllocOOMs       uint64 `json:"alloc_ooms"`
	// Allocators made outside a chip's (a MeshDevice's) past the 256 a
	// process may hold (too_many_allocators anomalies): AllocatorsDropped,
	// the oldest tied to no mesh, dropped to make room; BankManagersRefused,
	// bank managers made when every one held was a live mesh's, not kept.
	// Requests on their managers are on managers not seen made.
	AllocatorsDropped   uint64 `json:"allocators_dropped"`
	BankManagersRefused uint64 `json:"bank_managers_refused"`
}

// leakList is a process's leak lists left in the ledger: one slot number
// and chip (8 bytes) per leak, in the order of Leaks, instead of a Leak
// (~140 bytes). Valid while the ledger does not change.
type leakList struct {
	p                *proc
	placed, unplaced []leakRef
}

type leakRef struct {
	slot uint32
	dev  int32
}

func (ll *leakList) leak(r leakRef) Leak { return ll.p.leakOf(r.slot, r.dev) }

// leakOf describes the live buffer in slot as a leak on chip dev.
func (p *proc) leakOf(slot uint32, dev int32) Leak {
	b := p.bufs.slots.at(slot)
	lk := Leak{
		Device:   dev,
		Type:     events.BufferType(b.btype).String(),
		Address:  b.addr,
		Size:     b.size,
		PageSize: b.page,
		Buffer:   fmt.Sprintf("%#x", b.key),
		Tid:      b.tid,
		Site:     b.site,
		Seq:      b.seq,
		TsNs:     b.ts,
		btype:    events.BufferType(b.btype),

		MarkedDeallocated: b.marked,
	}
	if b.mesh != 0 {
		if m := p.meshes[b.mesh]; m != nil {
			lk.Mesh = true
			lk.MeshDevice = fmt.Sprintf("%#x", m.ptr)
		}
	}
	return lk
}

// AllLeaks yields the leaks of Leaks in order, from the list or, in a
// summary from SummaryStreamed, made one at a time from the ledger. The
// *Leak is valid only until the next one.
func (ps *ProcessSummary) AllLeaks() iter.Seq[*Leak] {
	if ps.leaks == nil {
		return each(ps.Leaks)
	}
	return ps.leaks.each(ps.leaks.placed)
}

// AllUnplacedLeaks is AllLeaks for UnplacedLeaks.
func (ps *ProcessSummary) AllUnplacedLeaks() iter.Seq[*Leak] {
	if ps.leaks == nil {
		return each(ps.UnplacedLeaks)
	}
	return ps.leaks.each(ps.leaks.unplaced)
}

// LeakCount and UnplacedLeakCount are the lengths of the two lists.
func (ps *ProcessSummary) LeakCount() int {
	if ps.leaks == nil {
		return len(ps.Leaks)
	}
	return len(ps.leaks.placed)
}

func (ps *ProcessSummary) UnplacedLeakCount() int {
	if ps.leaks == nil {
		return len(ps.UnplacedLeaks)
	}
	return len(ps.leaks.unplaced)
}

// Streamed says Leaks and UnplacedLeaks are left in the ledger (a
// summary from SummaryStreamed): read them with AllLeaks and
// AllUnplacedLeaks; encoding/json would write them as null.
func (ps *ProcessSummary) Streamed() bool { return ps.leaks != nil }

func each(ls []Leak) iter.Seq[*Leak] {
	return func(yield func(*Leak) bool) {
		for i := range ls {
			if !yield(&ls[i]) {
				return
			}
		}
	}
}

func (ll *leakList) each(refs []leakRef) iter.Seq[*Leak] {
	return func(yield func(*Leak) bool) {
		for _, r := range refs {
			lk := ll.leak(r)
			if !yield(&lk) {
				return
			}
		}
	}
}

// sortRefs orders by device, type, address, then the remaining fields so
// the order is total (deterministic), reading the slots.
func (ll *leakList) sortRefs(refs []leakRef) {
	s := &ll.p.bufs.slots
	sort.Slice(refs, func(i, j int) bool {
		x, y := refs[i], refs[j]
		a, b := s.at(x.slot), s.at(y.slot)
		switch {
		case x.dev != y.dev:
			return x.dev < y.dev
		case a.btype != b.btype:
			return a.btype < b.btype
		case a.addr != b.addr:
			return a.addr < b.addr
		case a.seq != b.seq:
			return a.seq < b.seq
		case a.key != b.key:
			// As the "%#x" strings compare.
			var ba, bb [20]byte
			return string(strconv.AppendUint(ba[:0], a.key, 16)) < string(strconv.AppendUint(bb[:0], b.key, 16))
		}
		return a.size < b.size
	})
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

// copyLeaks copies a streamed summary's leak lists out of the ledger.
func (ps *ProcessSummary) copyLeaks() {
	if ps.leaks == nil {
		return
	}
	ps.Leaks = make([]Leak, 0, ps.LeakCount())
	for lk := range ps.AllLeaks() {
		ps.Leaks = append(ps.Leaks, *lk)
	}
	ps.UnplacedLeaks = make([]Leak, 0, ps.UnplacedLeakCount())
	for lk := range ps.AllUnplacedLeaks() {
		ps.UnplacedLeaks = append(ps.UnplacedLeaks, *lk)
	}
	ps.leaks = nil
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
	s := Summary{Type: "summary", LostEvents: l.lost, Complete: l.lost == 0, Events: l.events, LayoutAnomalies: l.hooks.layoutBad}
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
	return p.devices()
}

func (p *proc) devices() []DeviceSummary {
	ids := make([]int32, 0, len(p.chips))
	for id := range p.chips {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	out := make([]DeviceSummary, 0, len(ids))
	for _, id := range ids {
		c := p.chips[id]
		pk := func(i Counter) Peak { return Peak{Value: c.peak[i], TsNs: c.peakTs[i]} }
		out = append(out, DeviceSummary{
			Device:            id,
			DRAMBytes:         c.cur[CounterDRAM],
			L1Bytes:           c.cur[CounterL1],
			L1SmallBytes:      c.cur[CounterL1Small],
			TraceBytes:        c.cur[CounterTrace],
			SystemMemoryBytes: c.cur[CounterSystemMemory],
			CBBytes:           c.cur[CounterCB],
			LiveBuffers:       c.cur[CounterLiveBuffers],
			Closed:            c.closed,
			Peaks: Peaks{
				DRAMBytes:         pk(CounterDRAM),
				L1Bytes:           pk(CounterL1),
				L1SmallBytes:      pk(CounterL1Small),
				TraceBytes:        pk(CounterTrace),
				SystemMemoryBytes: pk(CounterSystemMemory),
				CBBytes:           pk(CounterCB),
				LiveBuffers:       pk(CounterLiveBuffers),
			},
		})
		d := &out[len(out)-1]
		d.ChipIdentity = p.info.Chips.Identity(id)
		if c.hr.has {
			v := c.hr.cur
			d.L1Headroom = &v
		}
		if c.hr.minHas {
			d.MinL1Headroom = &MinHeadroom{Value: c.hr.min, TsNs: c.hr.minTs, LowestL1Address: c.hr.minLow, CBRegionEnd: c.hr.minEnd}
		}
		d.Allocator, d.AllocatorWhy = p.allocatorView(c)
	}
	return out
}

func (p *proc) summary() ProcessSummary {
	ps := ProcessSummary{
		Pid:              p.pid,
		Command:          p.info.Command,
		Parent:           p.info.Parent,
		NsPid:            p.info.NsPid,
		AttachedMidRun:   p.info.AttachedMidRun,
		Placement:        p.info.Placement,
		LateLibrary:      p.info.LateLibrary,
		Exited:           p.exited,
		ExitCode:         p.exitCode,
		ExitSignal:       p.exitSignal,
		Devices:          p.devices(),
		Leaks:            []Leak{},
		LeakGroups:       []LeakGroup{},
		UnplacedLeaks:    []Leak{},
		Sites:            []Site{},
		LeakSites:        []LeakSite{},
		LostStacks:       p.lostStacks,
		UnknownFrees:     p.unknownFrees,
		UnknownFreeBytes: p.unknownFreeBytes,
		DoubleFrees:      p.doubleFrees,
		Stats:            p.stats,
		L1Clashes:        append([]Notice{}, p.clashes...),
		AllocFailures:    p.sortedFailures(),
		Meshes:           p.meshAllocators(),
		Traces:           p.traceSummary(),
		AnomalyCounts:    make(map[string]uint64, nAnomalyKinds),
		Anomalies:        append([]Anomaly{}, p.anomalies.list...),
		SiteUsage:        p.siteUsage(),
	}
	for k, n := range p.anomalies.counts {
		ps.AnomalyCounts[anomalyNames[k]] = n
	}

	// Sized first: with a million buffers left, appending would copy the
	// list about twenty times over and leave as much again as garbage.
	n := 0
	for i := range p.bufs.slots.len() {
		if b := p.bufs.slots.at(uint32(i)); b.live {
			if m := p.meshes[b.mesh]; b.mesh != 0 && m != nil {
				n += len(m.chips)
			} else {
				n++
			}
		}
	}
	p.leakRefs(&ps, n)
	p.describeSites(&ps)
	return ps
}

// describeSites fills the sites of ps and its interpreter from the
// process's site source, if it has one.
func (p *proc) describeSites(ps *ProcessSummary) {
	if p.sites == nil {
		return
	}
	ps.addSites(p.sites.Site)
	// The per-site accounting's rows name sites beyond the leaks'.
	descs := map[uint32]*Site{}
	for i := range ps.Sites {
		descs[ps.Sites[i].Site] = &ps.Sites[i]
	}
	for i := range ps.SiteUsage {
		u := &ps.SiteUsage[i]
		d, ok := descs[u.Site]
		if !ok {
			if s, found := p.sites.Site(u.Site); found {
				d = &s
			}
			descs[u.Site] = d
		}
		u.Desc = d
	}
	if info := p.sites.Python(); info != nil {
		c := *info
		ps.Python = &c
	}
}

// leakRefs fills ps.leaks and LeakGroups as summary fills Leaks,
// UnplacedLeaks and LeakGroups; n is the count of placed and unplaced leaks.
func (p *proc) leakRefs(ps *ProcessSummary, n int) {
	ll := &leakList{p: p, placed: make([]leakRef, 0, n)}
	for i := range p.bufs.slots.len() {
		b := p.bufs.slots.at(uint32(i))
		if !b.live {
			continue
		}
		r := leakRef{slot: uint32(i), dev: b.chip}
		if b.mesh == 0 {
			ll.placed = append(ll.placed, r)
			continue
		}
		m := p.meshes[b.mesh]
		if m == nil {
			continue // cannot happen: a mesh close releases its buffers
		}
		if len(m.chips) == 0 {
			r.dev = 0
			ll.unplaced = append(ll.unplaced, r)
			continue
		}
		for _, id := range m.chips {
			r.dev = id
			ll.placed = append(ll.placed, r)
		}
	}
	ll.sortRefs(ll.placed)
	ll.sortRefs(ll.unplaced)
	for _, r := range ll.placed {
		b := p.bufs.slots.at(r.slot)
		typ := events.BufferType(b.btype).String()
		n := len(ps.LeakGroups)
		if n == 0 || ps.LeakGroups[n-1].Device != r.dev || ps.LeakGroups[n-1].Type != typ {
			ps.LeakGroups = append(ps.LeakGroups, LeakGroup{Device: r.dev, Type: typ})
			n++
		}
		ps.LeakGroups[n-1].Count++
		ps.LeakGroups[n-1].Bytes += b.size
	}
	ps.Leaks, ps.UnplacedLeaks = nil, nil
	ps.leaks = ll
}
