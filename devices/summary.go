package devices

import (
	"cmp"
	"fmt"
	"iter"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

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
	// SitesMissing: allocations without a complete site (none, or one
	// lacking its modules or Python frames), by reason (the alloc's
	// site_missing); absent when there are none.
	SitesMissing map[string]uint64 `json:"sites_missing,omitempty"`
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
	// L1ClashesPossible: the first 100 l1_clash records with clash
	// "possible" (only per-core buffers below), apart from L1Clashes.
	L1ClashesPossible []Notice `json:"l1_clashes_possible,omitempty"`
	// AllocFailures: the first 100 alloc_failed records, in stream order
	// (stats.alloc_failures counts them all).
	AllocFailures []AllocFailure `json:"alloc_failures"`
	// PerCoreDivergences: the first 100 per_core_address_divergence
	// records, in stream order (stats.per_core_divergences counts them).
	PerCoreDivergences []PerCoreDivergence `json:"per_core_divergences"`
	// Meshes: the own allocator of every MeshDevice live at the end, in
	// the order first seen (mesh buffers count there, not in their chips'
	// allocators).
	Meshes []MeshAllocator `json:"meshes"`
	// Traces: what the process did with Metal traces and the hazards found
	// (docs/ndjson.md); absent when it made no trace call.
	Traces *TraceSummary `json:"traces,omitempty"`
	// Windows: its windows (tttrace mark: window.go), the current one
	// last; absent while no mark was made. WindowsDropped: its ended
	// windows past MaxWindows, not kept.
	Windows        []Window `json:"windows,omitempty"`
	WindowsDropped uint64   `json:"windows_dropped,omitempty"`
	// Ops: per TT-NN op and device op its records were made in, what was
	// done there (docs/ndjson.md "Ops"), in the order first seen; absent
	// when none. OpsDropped: records of rows past MaxOpRows.
	Ops        []OpRow `json:"ops,omitempty"`
	OpsDropped uint64  `json:"ops_dropped,omitempty"`

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
	// CBBytes: the CB bytes resident on the chip's busiest core (the
	// program last dispatched on each core); CBRegisteredBytes: the
	// per-core sizes of every program holding CBs, summed;
	// CBResidentTotalBytes: resident CB bytes summed over the cores.
	// CBBusiestCore: that core's [x, y], absent while no CB is resident.
	CBBytes              uint64     `json:"cb_bytes"`
	LiveBuffers          uint64     `json:"live_buffers"`
	CBRegisteredBytes    uint64     `json:"cb_registered_bytes"`
	CBResidentTotalBytes uint64     `json:"cb_resident_total_bytes"`
	CBBusiestCore        *[2]uint16 `json:"cb_busiest_core,omitempty"`
	Closed               bool       `json:"closed"` // closed and not used since
	Peaks                Peaks      `json:"peaks"`
	// L1Headroom: lowest live L1 address - highest CB region end now;
	// null while the chip lacks either. MinL1Headroom: its lowest value.
	L1Headroom    *int64       `json:"l1_headroom"`
	MinL1Headroom *MinHeadroom `json:"min_l1_headroom"`
	// Allocator: the chip's allocator as TT-Metal's get_statistics sees
	// it, per buffer type; null with AllocatorWhy when tttrace did not see
	// it made.
	Allocator    *Allocator `json:"allocator"`
	AllocatorWhy string     `json:"allocator_why,omitempty"`
	// L1BusiestCore: the core whose L1 holds the most now (l1core.go);
	// PeakL1BusiestCore: the same when its total was highest. Absent
	// while the chip's L1 held nothing tttrace knows of.
	L1BusiestCore     *L1Core `json:"l1_busiest_core,omitempty"`
	PeakL1BusiestCore *L1Core `json:"peak_l1_busiest_core,omitempty"`
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
	// SiteMissing: why its site is missing, or lacks its modules or
	// Python frames (events.SiteMissing's names); absent when complete
	// or stacks are off.
	SiteMissing string `json:"site_missing,omitempty"`
	Seq         uint64 `json:"seq"` // of the alloc event
	TsNs        uint64 `json:"ts_ns"`
	// MarkedDeallocated: Buffer::mark_as_deallocated was called, but the
	// chip was never closed, so its memory is still held.
	MarkedDeallocated bool `json:"marked_deallocated"`
	// Op: the TT-NN op (and device op) it was allocated in; absent
	// outside one.
	Op *OpRef `json:"op,omitempty"`

	btype events.BufferType
}

// LeakGroup sums the leaks of one buffer type on one chip.
type LeakGroup struct {
	Device int32  `json:"device"`
	Type   string `json:"type"`
	Count  uint64 `json:"count"`
	Bytes  uint64 `json:"bytes"`
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
		Device:      dev,
		Type:        events.BufferType(b.btype).String(),
		Address:     b.addr,
		Size:        b.size,
		PageSize:    b.page,
		Buffer:      fmt.Sprintf("%#x", b.key),
		Tid:         b.tid,
		Site:        b.site,
		Seq:         b.seq,
		SiteMissing: events.SiteMissing(p.bufs.miss[slot]).String(),
		TsNs:        b.ts,
		btype:       events.BufferType(b.btype),

		MarkedDeallocated: b.marked,
		Op:                p.ops.ref(p.ops.bufOf(slot)),
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
		return eachLeak(ps.Leaks)
	}
	return ps.leaks.each(ps.leaks.placed)
}

// AllUnplacedLeaks is AllLeaks for UnplacedLeaks.
func (ps *ProcessSummary) AllUnplacedLeaks() iter.Seq[*Leak] {
	if ps.leaks == nil {
		return eachLeak(ps.UnplacedLeaks)
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

func eachLeak(ls []Leak) iter.Seq[*Leak] {
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

func (p *proc) deviceSummaries() []DeviceSummary {
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
			Device:               id,
			DRAMBytes:            c.cur[CounterDRAM],
			L1Bytes:              c.cur[CounterL1],
			L1SmallBytes:         c.cur[CounterL1Small],
			TraceBytes:           c.cur[CounterTrace],
			SystemMemoryBytes:    c.cur[CounterSystemMemory],
			CBBytes:              c.cur[CounterCB],
			LiveBuffers:          c.cur[CounterLiveBuffers],
			CBRegisteredBytes:    c.cur[CounterCBRegistered],
			CBResidentTotalBytes: c.cur[CounterCBResidentTotal],
			Closed:               c.closed,
			Peaks: Peaks{
				DRAMBytes:            pk(CounterDRAM),
				L1Bytes:              pk(CounterL1),
				L1SmallBytes:         pk(CounterL1Small),
				TraceBytes:           pk(CounterTrace),
				SystemMemoryBytes:    pk(CounterSystemMemory),
				CBBytes:              pk(CounterCB),
				LiveBuffers:          pk(CounterLiveBuffers),
				CBRegisteredBytes:    pk(CounterCBRegistered),
				CBResidentTotalBytes: pk(CounterCBResidentTotal),
			},
		})
		d := &out[len(out)-1]
		if c.cores.max > 0 {
			d.CBBusiestCore = &[2]uint16{c.cores.busiest.x, c.cores.busiest.y}
		}
		d.ChipIdentity = p.info.Chips.Identity(id)
		if c.hr.has {
			v := c.hr.cur
			d.L1Headroom = &v
		}
		if c.hr.minHas {
			d.MinL1Headroom = &MinHeadroom{Value: c.hr.min, TsNs: c.hr.minTs, LowestL1Address: c.hr.minLow, CBRegionEnd: c.hr.minEnd}
		}
		d.Allocator, d.AllocatorWhy = p.allocs.allocatorView(c)
		d.L1BusiestCore, d.PeakL1BusiestCore = c.l1Summary(&p.ops)
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
		Devices:          p.deviceSummaries(),
		Leaks:            []Leak{},
		LeakGroups:       []LeakGroup{},
		UnplacedLeaks:    []Leak{},
		Sites:            []Site{},
		LeakSites:        []LeakSite{},
		LostStacks:       p.lostStacks,
		SitesMissing:     p.sitesMissingByName(),
		UnknownFrees:     p.unknownFrees,
		UnknownFreeBytes: p.unknownFreeBytes,
		DoubleFrees:      p.doubleFrees,
		Stats:            p.stats,
		L1Clashes:        append([]Notice{}, p.l1.clashes...),
		AllocFailures:    p.allocs.sortedFailures(),
		Meshes:           p.allocs.meshAllocators(),
		Traces:           p.traces.traceSummary(),
		Windows:          p.windows(),
		WindowsDropped:   p.win.dropped,
		Ops:              p.opRows(),
		OpsDropped:       p.ops.dropped,
		AnomalyCounts:    make(map[string]uint64, nAnomalyKinds),
		Anomalies:        append([]Anomaly{}, p.anomalies.list...),
		SiteUsage:        p.siteUsage(),
	}
	ps.PerCoreDivergences = append([]PerCoreDivergence{}, p.allocs.divergences...)
	ps.L1ClashesPossible = append([]Notice(nil), p.l1.possible...)
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

// What a trimmed process keeps: its first keptLeakSites leak sites (most
// bytes first) and TrimmedCommandBytes of its command line (a command
// line may be 4 MiB: 10,000 trimmed ones held 40 GB); a longer one is cut
// there, at a character's start, and marked (cutCommand).
const (
	keptLeakSites = 10
	// keptOpRows: the ops rows a trimmed process keeps.
	keptOpRows          = 10
	TrimmedCommandBytes = 4096
)

// LeakSite sums the leaks of one allocation site.
type LeakSite struct {
	Site uint32 `json:"site"`
	// Test is the pytest test that allocated (FILE::[Class::]test_func),
	// absent when no Python frame is a test function.
	Test    string  `json:"test,omitempty"`
	Count   uint64  `json:"count"`   // leaks (a mesh buffer: one per chip)
	Bytes   uint64  `json:"bytes"`   // their sizes
	Devices []int32 `json:"devices"` // chips they are on, ascending
}

// addSites describes with describe (which returns false for a site it
// does not know) the sites of ps's leaks, of the L1 buffers its
// l1_clashes name and of its alloc_failures (the request, the holders),
// and sums the leaks per site in LeakSites, most bytes
// first (then by site).
func (ps *ProcessSummary) addSites(describe func(site uint32) (Site, bool)) {
	var sums LeakSiteSums
	var named []uint32 // sites only clashes, failures and hazards name
	for lk := range ps.AllLeaks() {
		sums.Add(lk)
	}
	for lk := range ps.AllUnplacedLeaks() {
		sums.Add(lk)
	}
	seen := map[uint32]bool{}
	name := func(b *L1Buffer) {
		if b.Site != 0 && !sums.Has(b.Site) && !seen[b.Site] {
			seen[b.Site] = true
			named = append(named, b.Site)
		}
	}
	for _, list := range [][]Notice{ps.L1Clashes, ps.L1ClashesPossible} {
		for i := range list {
			c := &list[i]
			name(&c.Lowest)
			for j := range c.L1Buffers {
				name(&c.L1Buffers[j])
			}
			for j := range c.PerCoreBlocks {
				name(&c.PerCoreBlocks[j])
			}
		}
	}
	nameID := func(id uint32) { name(&L1Buffer{Site: id}) }
	for _, d := range ps.PerCoreDivergences {
		nameID(d.Site)
	}
	for i := range ps.AllocFailures {
		f := &ps.AllocFailures[i]
		nameID(f.Site)
		for _, h := range f.Holders {
			nameID(h.Site)
		}
		for _, h := range f.HolderSites {
			nameID(h.Site)
		}
	}
	if tr := ps.Traces; tr != nil {
		for _, list := range [][]TraceNote{tr.Hazards, tr.RegionHazards, tr.CaptureAllocs} {
			for i := range list {
				if b := list[i].Buffer; b != nil {
					nameID(b.Site)
				}
				if b := list[i].Captured; b != nil {
					nameID(b.Site)
				}
			}
		}
	}
	ps.Sites = ps.Sites[:0]
	described := func(id uint32) (Site, bool) {
		s, ok := describe(id)
		if ok {
			if s.Native == nil {
				s.Native = []NativeFrame{}
			}
			if s.Python == nil {
				s.Python = []PyFrame{}
			}
			ps.Sites = append(ps.Sites, s)
		}
		return s, ok
	}
	ps.LeakSites = append(ps.LeakSites[:0], sums.Sites()...)
	for i := range ps.LeakSites {
		if s, ok := described(ps.LeakSites[i].Site); ok {
			ps.LeakSites[i].Test = TestOf(s.Python)
		}
	}
	for _, id := range named {
		described(id)
	}
	sort.Slice(ps.Sites, func(i, j int) bool { return ps.Sites[i].Site < ps.Sites[j].Site })
}

// LeakSiteSums sums leaks per allocation site, as the summary's
// leak_sites do.
type LeakSiteSums struct {
	by    map[uint32]*LeakSite
	order []uint32
}

// Add counts lk in its site's sum (its chip once); false when lk has no
// site.
func (s *LeakSiteSums) Add(lk *Leak) bool {
	if lk.Site == 0 {
		return false
	}
	ls := s.by[lk.Site]
	if ls == nil {
		if s.by == nil {
			s.by = map[uint32]*LeakSite{}
		}
		ls = &LeakSite{Site: lk.Site, Devices: []int32{}}
		s.by[lk.Site] = ls
		s.order = append(s.order, lk.Site)
	}
	ls.Count++
	ls.Bytes += lk.Size
	if !slices.Contains(ls.Devices, lk.Device) {
		ls.Devices = append(ls.Devices, lk.Device)
	}
	return true
}

// Has says whether some leak was counted at site.
func (s *LeakSiteSums) Has(site uint32) bool { return s.by[site] != nil }

// Sites is the sums, most bytes first, then by site; each one's chips in
// ascending order.
func (s *LeakSiteSums) Sites() []LeakSite {
	out := make([]LeakSite, 0, len(s.order))
	for _, id := range s.order {
		ls := *s.by[id]
		slices.Sort(ls.Devices)
		out = append(out, ls)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Site < out[j].Site })
	sort.SliceStable(out, func(i, j int) bool { return out[i].Bytes > out[j].Bytes })
	return out
}

// TestOf names the pytest test of a Python stack (innermost first): the
// innermost frame that is a test function (a name starting with "test") in
// a test module (test_*.py or *_test.py), as FILE::[Class::]function with
// the file as the interpreter names it. "" when there is none.
func TestOf(frames []PyFrame) string {
	for _, f := range frames {
		base := f.File
		if i := strings.LastIndexByte(base, '/'); i >= 0 {
			base = base[i+1:]
		}
		if !strings.HasSuffix(base, ".py") || !(strings.HasPrefix(base, "test_") || strings.HasSuffix(base, "_test.py")) {
			continue
		}
		parts := strings.Split(f.Function, ".")
		name := parts[len(parts)-1]
		if !strings.HasPrefix(name, "test") {
			continue
		}
		id := f.File
		for _, p := range parts {
			if p == "<locals>" {
				// A function defined inside another is not collected by
				// pytest: this frame is not the test.
				id = ""
				break
			}
			id += "::" + p
		}
		if id != "" {
			return id
		}
	}
	return ""
}

// Trimmed says what a trimmed ended process no longer has: its lists,
// beyond their counts.
type Trimmed struct {
	Leaks         uint64 `json:"leaks"`          // entries of leaks (still summed in leak_groups)
	UnplacedLeaks uint64 `json:"unplaced_leaks"` // entries of unplaced_leaks
	UnplacedBytes uint64 `json:"unplaced_bytes"` // their bytes
	Sites         uint64 `json:"sites"`          // entries of sites
	LeakSites     uint64 `json:"leak_sites"`     // entries of leak_sites past the first 10
	Anomalies     uint64 `json:"anomalies"`      // entries of anomalies (still counted in anomaly_counts)
	L1Clashes     uint64 `json:"l1_clashes"`     // entries of l1_clashes (still counted in stats)
	AllocFailures uint64 `json:"alloc_failures"` // entries of alloc_failures (still counted in stats)
	// PerCoreDivergences: entries of per_core_divergences (still counted in stats).
	PerCoreDivergences uint64 `json:"per_core_divergences,omitempty"`
	// L1ClashesPossible: entries of l1_clashes_possible.
	L1ClashesPossible uint64 `json:"l1_clashes_possible,omitempty"`
	TraceRecords      uint64 `json:"trace_records"` // entries of the traces lists (still counted there)
	// SiteUsage: rows of per-site accounting dropped (a --pprof profile
	// lacks the process).
	SiteUsage uint64 `json:"site_usage"`
	// Ops: rows of ops past the first keptOpRows (most bytes first).
	Ops uint64 `json:"ops,omitempty"`
	// CommandBytes: the bytes cut from the end of its command line (kept
	// up to TrimmedCommandBytes); 0: it is whole.
	CommandBytes uint64 `json:"command_bytes"`
}

// DroppedProcesses sums the ended processes folded away entirely.
type DroppedProcesses struct {
	Processes   uint64 `json:"processes"`
	Events      uint64 `json:"events"`
	Leaks       uint64 `json:"leaks"`        // leak entries, placed and unplaced
	LeakedBytes uint64 `json:"leaked_bytes"` // their bytes
	Anomalies   uint64 `json:"anomalies"`
	LateLibrary uint64 `json:"late_library"` // processes among them with late_library
	// TraceProblems: their trace hazards, invalid replays and region
	// hazards (what --fail-on-trace-hazard fails for).
	TraceProblems uint64 `json:"trace_problems"`
}

// TrimmedProcess is an ended process Trim took out of the ledger's full
// keeping: its pid, and whether it was the pid's current incarnation (not
// one retired by NewIncarnation).
type TrimmedProcess struct {
	Pid     uint32
	Current bool
}

// trim drops ps's lists, counting them in Trimmed.
func (ps *ProcessSummary) trim() {
	t := &Trimmed{
		Leaks:     uint64(ps.LeakCount()),
		Sites:     uint64(len(ps.Sites)),
		Anomalies: uint64(len(ps.Anomalies)),
		L1Clashes: uint64(len(ps.L1Clashes)),

		AllocFailures: uint64(len(ps.AllocFailures)),
		SiteUsage:     uint64(len(ps.SiteUsage)),
	}
	for lk := range ps.AllUnplacedLeaks() {
		t.UnplacedLeaks++
		t.UnplacedBytes = SatAdd(t.UnplacedBytes, lk.Size)
	}
	if n := len(ps.LeakSites); n > keptLeakSites {
		t.LeakSites = uint64(n - keptLeakSites)
		ps.LeakSites = append([]LeakSite(nil), ps.LeakSites[:keptLeakSites]...)
	}
	ps.Leaks, ps.UnplacedLeaks, ps.Sites, ps.Anomalies, ps.L1Clashes = []Leak{}, []Leak{}, []Site{}, []Anomaly{}, []Notice{}
	ps.AllocFailures, ps.SiteUsage = []AllocFailure{}, nil
	t.PerCoreDivergences, ps.PerCoreDivergences = uint64(len(ps.PerCoreDivergences)), []PerCoreDivergence{}
	t.L1ClashesPossible, ps.L1ClashesPossible = uint64(len(ps.L1ClashesPossible)), nil
	if tr := ps.Traces; tr != nil {
		t.TraceRecords = uint64(len(tr.Hazards) + len(tr.InvalidReplays) + len(tr.RegionHazards) + len(tr.CaptureAllocs))
		tr.Hazards, tr.InvalidReplays, tr.RegionHazards, tr.CaptureAllocs = []TraceNote{}, []TraceNote{}, []TraceNote{}, []TraceNote{}
	}
	if n := len(ps.Ops); n > keptOpRows {
		// The rows that allocated most.
		t.Ops = uint64(n - keptOpRows)
		rows := append([]OpRow(nil), ps.Ops...)
		slices.SortStableFunc(rows, func(a, b OpRow) int { return cmp.Compare(b.Bytes, a.Bytes) })
		ps.Ops = rows[:keptOpRows:keptOpRows]
	}
	if n := len(ps.Windows); n > 1 {
		// Its last window only (window.go): the others are counted.
		ps.WindowsDropped += uint64(n - 1)
		ps.Windows = append([]Window(nil), ps.Windows[n-1])
	}
	ps.leaks = nil
	ps.Command, t.CommandBytes = cutCommand(ps.Command)
	ps.Trimmed = t
}

// cutCommand keeps the first TrimmedCommandBytes bytes of a command line
// (fewer, to end on a whole character), in a string of its own (a part of
// the original would keep all of it), with a marker saying how many bytes
// were cut; it returns that count too.
func cutCommand(cmd string) (string, uint64) {
	if len(cmd) <= TrimmedCommandBytes {
		return cmd, 0
	}
	n := TrimmedCommandBytes
	for n > 0 && !utf8.RuneStart(cmd[n]) {
		n--
	}
	cut := uint64(len(cmd) - n)
	return fmt.Sprintf("%s... [%d bytes cut]", cmd[:n], cut), cut
}

func (d *DroppedProcesses) add(ps *ProcessSummary) {
	d.Processes++
	if ps.LateLibrary {
		d.LateLibrary++
	}
	d.Events = SatAdd(d.Events, ps.Stats.Events)
	for _, g := range ps.LeakGroups {
		d.Leaks = SatAdd(d.Leaks, g.Count)
		d.LeakedBytes = SatAdd(d.LeakedBytes, g.Bytes)
	}
	if t := ps.Trimmed; t != nil {
		d.Leaks = SatAdd(d.Leaks, t.UnplacedLeaks)
		d.LeakedBytes = SatAdd(d.LeakedBytes, t.UnplacedBytes)
	}
	for _, n := range ps.AnomalyCounts {
		d.Anomalies = SatAdd(d.Anomalies, n)
	}
	d.TraceProblems = SatAdd(d.TraceProblems, ps.Traces.Problems())
}
