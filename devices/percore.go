package devices

import (
	"fmt"
	"slices"

	"github.com/tttrace/tttrace/alloc"
	"github.com/tttrace/tttrace/events"
)

// Per-core ("HYBRID") L1 allocators (docs/ttmetal.md §9).
//
// A chip opened in HYBRID mode has, beside the L1 bank manager's lockstep
// free list (allocator id 0), one free list per bank (id bank + 1). A
// per-core buffer is allocated by one BankManager::allocate_buffer call per
// core of its shard grid, each on its bank's list and each at its own
// address; the buffer's track_allocate follows the last, and its
// Buffer::address() is the first core's (tt-metal#51354: consumers that
// read it get a wrong address on every core whose address differs).
//
// The ledger keeps a free list per bank (package alloc), made on its first
// request, each dependent on the lockstep list: a core's request is placed
// in its list's free blocks outside the lockstep list's allocations
// (alloc.PlaceAvoiding). So each per-core request gets the address its
// core would get, a failed one its cause with that core's numbers (its
// bank seen through the lockstep list), and a buffer whose cores got
// different addresses a per_core_address_divergence record. The first
// core's predicted address is checked against the buffer's address: a
// difference makes the chip's per-core lists unknown from then on (why),
// never wrong numbers. Lists are unknown for a chip whose allocator was
// read from the process's memory (tttrace attached after the chip opened:
// the per-core lists are not read) and while the lockstep list is.

// maxPerCoreCores bounds the cores of one per-core buffer the ledger keeps
// (a chip has ~150 worker cores; the requests come from the traced
// process).
const maxPerCoreCores = 4096

// maxCoresListed caps the cores a per_core_address_divergence names.
const maxCoresListed = 64

// pcCore is one core's request of a per-core buffer.
type pcCore struct {
	bank      uint32 // allocator id - 1
	span      uint64 // what its list reserves (spanKnown)
	addr      uint64 // where its list places it (placed)
	spanKnown bool
	placed    bool
}

// pcBuf is a live per-core buffer's cores (allocView.pcBufs, by slot).
type pcBuf struct {
	ta    *typeAlloc // the L1 manager whose lists hold it (placed)
	gen   uint64     // ta.pcGen when placed
	cores []pcCore
	// placed: its spans are in ta's per-core lists.
	placed bool
}

// perCoreLists are a bank manager's per-core free lists, by allocator id.
type perCoreLists struct {
	lists map[uint32]*alloc.Manager
	why   string // unknown from then on; "" while exact
	gen   uint64 // cleared lists: a new generation
}

// PerCoreDivergence is a per_core_address_divergence record: a per-core
// buffer whose cores got different addresses. It marshals with
// encoding/json to its NDJSON line (docs/ndjson.md).
type PerCoreDivergence struct {
	Type string `json:"type"` // "per_core_address_divergence"
	Pid  uint32 `json:"pid"`
	Tid  uint32 `json:"tid"`
	Seq  uint64 `json:"seq"` // of the buffer's alloc
	TsNs uint64 `json:"ts_ns"`
	// Device: the chip; Buffer: its Buffer*, hex; Address: its
	// Buffer::address(), the first core's; Size: its size_.
	Device  int32  `json:"device"`
	Buffer  string `json:"buffer"`
	Address uint64 `json:"address"`
	Size    uint64 `json:"size"`
	// Site: where it was allocated; absent when unknown.
	Site uint32 `json:"site,omitempty"`
	// Cores: each core's bank and address, in the order allocated (at
	// most 64; CoresCount counts them all); Distinct: the addresses that
	// differ; Differing: the cores whose address is not Address.
	Cores      []PerCoreAddress `json:"cores"`
	CoresCount int              `json:"cores_count"`
	Distinct   int              `json:"distinct_addresses"`
	Differing  int              `json:"differing_cores"`
}

// PerCoreAddress is one core's address of a per-core buffer.
type PerCoreAddress struct {
	Bank    uint32 `json:"bank"` // its L1 bank (the per-core allocator's id - 1)
	Address uint64 `json:"address"`
	Span    uint64 `json:"span"` // what its list reserves there
}

// pcLose makes ta's per-core lists unknown from now on.
func (ta *typeAlloc) pcLose(why string) {
	if ta.pc == nil {
		ta.pc = &perCoreLists{}
	}
	if ta.pc.why == "" {
		ta.pc.why = why
	}
}

// perCoreList is ta's per-core list of allocator id, made on first use,
// or why it is not known.
func (ta *typeAlloc) perCoreList(id uint32) (*alloc.Manager, string) {
	switch {
	case ta.mem != nil:
		return nil, "the chip's allocator was read from the process's memory (tttrace attached after the chip opened): its per-core lists were not read"
	case ta.pc != nil && ta.pc.why != "":
		return nil, ta.pc.why
	case ta.m == nil:
		return nil, "the allocator's DRAM bank manager was not seen made (no free-list alignment)"
	case id == 0 || id > ta.cfg.Banks:
		return nil, fmt.Sprintf("allocator id %d is no bank of the %d of bank manager %#x", id, ta.cfg.Banks, ta.ptr)
	}
	if ta.pc == nil {
		ta.pc = &perCoreLists{}
	}
	if ta.pc.lists == nil {
		ta.pc.lists = map[uint32]*alloc.Manager{}
	}
	l := ta.pc.lists[id]
	if l == nil {
		var err error
		if l, err = alloc.New(ta.m.Config()); err != nil {
			return nil, err.Error()
		}
		ta.pc.lists[id] = l
	}
	return l, ""
}

// perCoreRequest fills per-core request r (its allocator id non-zero):
// its core's span and, while the lists are known, where the core's list
// places it and the core's numbers now.
func (p *allocView) perCoreRequest(r *allocReq, ref mgrRef) {
	e := &r.e
	r.core = pcCore{bank: e.AllocatorID - 1}
	if ref.grp != nil || ref.chip < 0 {
		return // a mesh's manager: its per-core lists are not kept
	}
	ta := p.typeAlloc(ref.chip, ref.typ)
	if ta == nil || ta.ptr != e.Object || ta.m == nil {
		return
	}
	r.need = ta.m.Need(alloc.Request{Size: e.Size, PageSize: e.PageSize, Shards: e.Shards, BottomUp: e.BottomUp})
	r.bank = ta.cfg.BankSize
	r.core.span, r.core.spanKnown = r.need.Span, true
	lst, why := ta.perCoreList(e.AllocatorID)
	switch {
	case lst == nil:
		r.why = why
		return
	case !ta.exact():
		r.why = "the lockstep list the per-core lists depend on is not known: " + ta.why
		return
	}
	room, ok := lst.RoomFor(ta.m)
	if !ok {
		r.why = "the per-core list and the lockstep list do not share their base"
		return
	}
	r.pcRoom, r.pcExact = room.Stats, true
	r.core.addr, r.core.placed = lst.PlaceAvoiding(r.need.Span, e.BottomUp, ta.m)
}

// perCoreFailed fills failure f of per-core request r: the core's bank,
// and its numbers and cause when its list is known.
func (p *allocView) perCoreFailed(f *AllocFailure, r *allocReq) {
	bank, id := r.core.bank, r.e.AllocatorID
	f.Bank, f.AllocatorID = &bank, &id
	f.CoresBefore = len(r.pc)
	if !r.pcExact {
		f.Why = r.explain()
		return
	}
	span := r.need.Span
	f.Span = &span
	st := r.pcRoom
	f.TotalAllocated, f.TotalFree, f.LargestFree = &st.TotalAllocated, &st.TotalFree, &st.LargestFreeBlock
	if r.core.placed {
		f.Why = "the core's list had room for it outside the lockstep list's blocks: the call failed for another reason, or its alloc record was lost"
		return
	}
	f.Cause = st.Classify(span).String()
}

// perCorePlace accounts per-core buffer b (slot idx), whose last core's
// request is r: each core's span on its bank, its cores' places in their
// lists, and a per_core_address_divergence when they differ.
func (p *allocView) perCorePlace(idx uint32, b *bufEntry, e *events.Event, r *allocReq) {
	p.stats.PerCoreBuffers++
	c := p.chip(b.chip)
	ta := c.alloc.typeOf(events.BufferType(b.btype))
	pb := &pcBuf{cores: append(slices.Clip(r.pc), r.core)} // a copy: r.pc is reused
	if p.pcBufs == nil {
		p.pcBufs = map[uint32]*pcBuf{}
	}
	p.pcBufs[idx] = pb
	c.l1c.pcLive++
	c.l1c.pcStale = true // its blocks (l1range.go)
	exact := ta != nil && ta.ptr == r.e.Object
	for _, k := range pb.cores {
		if k.spanKnown {
			p.perCoreAdd(c, k.bank, k.span, true)
		}
		exact = exact && k.placed
	}
	if !exact {
		p.stats.PerCoreUnchecked++
		return
	}
	if pb.cores[0].addr != b.addr {
		ta.pcLose(fmt.Sprintf("buffer %#x (seq %d): its first core's list would place it at %#x, the buffer is at %#x", b.key, b.seq, pb.cores[0].addr, b.addr))
		p.stats.PerCoreUnchecked++
		return
	}
	for i, k := range pb.cores {
		lst, _ := ta.perCoreList(k.bank + 1)
		if lst == nil {
			return
		}
		if err := lst.Place(k.addr, k.span); err != nil {
			ta.pcLose(fmt.Sprintf("buffer %#x (seq %d): core %d of bank %d: %d bytes at %#x %v", b.key, b.seq, i, k.bank, k.span, k.addr, err))
			for _, u := range pb.cores[:i] {
				if l, _ := ta.perCoreList(u.bank + 1); l != nil {
					l.Free(u.addr)
				}
			}
			return
		}
	}
	pb.ta, pb.gen, pb.placed = ta, ta.pc.gen, true
	distinct := 0
	differing := 0
	for i, k := range pb.cores {
		if k.addr != b.addr {
			differing++
		}
		if !slices.ContainsFunc(pb.cores[:i], func(u pcCore) bool { return u.addr == k.addr }) {
			distinct++
		}
	}
	if differing == 0 {
		return
	}
	p.stats.PerCoreDivergences++
	if p.set.notify == nil && len(p.divergences) >= MaxAnomalies {
		return
	}
	d := PerCoreDivergence{Type: NoticePerCoreDivergence.String(), Pid: p.pid, Tid: e.Tid, Seq: e.Seq, TsNs: e.TsNs,
		Device: b.chip, Buffer: hex(b.key), Address: b.addr, Size: b.size, Site: b.site,
		CoresCount: len(pb.cores), Distinct: distinct, Differing: differing}
	for _, k := range pb.cores[:min(len(pb.cores), maxCoresListed)] {
		d.Cores = append(d.Cores, PerCoreAddress{Bank: k.bank, Address: k.addr, Span: k.span})
	}
	if len(p.divergences) < MaxAnomalies {
		p.divergences = append(p.divergences, d)
	}
	if p.set.notify != nil {
		n := Notice{Type: NoticePerCoreDivergence, Seq: d.Seq, TsNs: d.TsNs, Pid: d.Pid, Tid: d.Tid, Chip: d.Device, PerCore: &d}
		p.set.notify(&n)
	}
}

// perCoreRelease takes per-core buffer idx (released) off its banks and
// out of its lists.
func (p *allocView) perCoreRelease(idx uint32, c *chipState) {
	pb := p.pcBufs[idx]
	if pb == nil {
		return
	}
	p.perCoreSites(idx, false)
	delete(p.pcBufs, idx)
	c.l1c.pcLive = max(c.l1c.pcLive-1, 0)
	c.l1c.pcStale = true
	for _, k := range pb.cores {
		if k.spanKnown {
			p.perCoreAdd(c, k.bank, k.span, false)
		}
	}
	if !pb.placed || pb.ta.pc == nil || pb.ta.pc.gen != pb.gen || pb.ta.pc.why != "" {
		return
	}
	for _, k := range pb.cores {
		if l := pb.ta.pc.lists[k.bank+1]; l != nil {
			if _, ok := l.Free(k.addr); !ok {
				pb.ta.pcLose(fmt.Sprintf("per-core buffer of bank %d: nothing allocated at %#x to free", k.bank, k.addr))
			}
		}
	}
}

// perCoreClear empties ta's per-core lists (the chip closed).
func (ta *typeAlloc) perCoreClear() {
	if ta.pc == nil {
		return
	}
	for _, l := range ta.pc.lists {
		l.Clear()
	}
	ta.pc.gen++
	ta.pc.why = ""
}
