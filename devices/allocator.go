package devices

// The allocator's view (issue 22): beside the size_ totals, per chip and
// buffer type the state of TT-Metal's bank manager (package alloc), fed by
// the allocator records: alloc_capacity (a BankManager made: which chip and
// type, its banks, bank size, alignment, base) and alloc_request (a
// BankManager::allocate_buffer call). A request is matched with the same
// thread's next alloc (track_allocate runs only after a success); anything
// else that thread does first, its process's end, Flush or FlushBefore
// makes it a failed allocation (TT-Metal threw "Out of Memory"), reported
// with the allocator's state at the request, its cause, its site and what
// fills the chip and type then.
//
// A chip's allocator is known from its making, or, for a chip whose bank
// managers were made before tttrace attached, from the process's memory
// (allocstate.go; a chip where neither works has no allocator view and says
// why), and a type whose state stops being exact (an allocation the
// model cannot place, one without its request) says so instead of giving
// numbers. Per-core ("HYBRID") L1 allocations (allocator_id != 0) are
// counted as not accounted per bank, never put in the lockstep list.
//
// A MeshDevice has an allocator of its own (docs/ttmetal.md §9): bank
// managers made outside any chip's allocator, on the thread creating the
// mesh, a DRAM one first. Those made in a row on one thread form one
// allocator; the first mesh buffer allocated through one of them ties it to
// its MeshDevice. Mesh buffers are accounted there and never in their
// chips' allocators (whose get_statistics leaves them out).

import (
	"fmt"
	"slices"
	"sort"

	"github.com/tttrace/tttrace/alloc"
	"github.com/tttrace/tttrace/events"
)

// allocView is the allocator rule family of one process: TT-Metal's
// bank managers modelled per chip and type, requests placed by the
// allocator's own rules, failed allocations explained.
type allocView struct {
	*core
	managers map[uint64]mgrRef // BankManager* -> its chip and type
	// groups: the allocators made outside a chip's (a mesh's) the
	// process holds, oldest first; at most maxGroups.
	groups []*chipAlloc
	// rootWhy: why the open chips were not found from the process's root
	// at attach (queries.go FoundMem; "" when they were or none
	// was looked for).
	rootWhy       string
	nreqs         int              // threads with a request waiting for its alloc
	failures      []AllocFailure   // the first alloc_failed records
	allocObserved bool             // the ledger has an AllocObserver
	adirty        []allocDirty     // chips and types the event being applied changed
	ast           alloc.Statistics // what allocNotify hands the observer
	// pcBufs: the live per-core buffers' cores, by slot; divergences: the
	// first per_core_address_divergence records (percore.go).
	pcBufs      map[uint32]*pcBuf
	divergences []PerCoreDivergence
}

// chipAlloc returns chip c's allocator, creating it.
func (c *chipState) allocator() *chipAlloc {
	if c.alloc == nil {
		c.alloc = &chipAlloc{}
	}
	return c.alloc
}

// capacity handles alloc_capacity: a bank manager is being made.
func (p *allocView) capacity(e *events.Event) {
	p.stats.AllocCapacities++
	cfg := alloc.Config{Banks: e.Banks, BankSize: e.BankSize, Offset: e.Base, Alignment: e.Alignment, AddressLimit: e.Limit}
	ref := mgrRef{chip: -1, typ: e.BufferType, cfg: cfg}
	if !allocatable(e.BufferType) {
		p.anomaly(anAllocatorRecord, e, "bank manager %#x of buffer type %d", e.Object, int32(e.BufferType))
		return
	}
	if e.DeviceKind == events.DeviceChip {
		ref.chip = e.Chip
	}
	if p.managers == nil {
		p.managers = make(map[uint64]mgrRef)
	}
	if ref.chip < 0 {
		// Made outside a chip's allocator: a MeshDevice's (its DRAM manager
		// first, the rest on the same thread right after).
		t := p.thread(e.Tid)
		g := t.mgrGroup
		if e.BufferType == events.DRAM || g == nil || g.dropped || g.types[e.BufferType] != nil {
			g = p.newGroup(e)
			t.mgrGroup = g
			if g == nil {
				return
			}
		}
		if e.BufferType == events.DRAM {
			g.blockAlign = e.Alignment
		}
		g.types[e.BufferType] = &typeAlloc{ptr: e.Object, cfg: cfg}
		ref.grp = g
		p.managers[e.Object] = ref
		buildAllocs(g)
		return
	}
	c := p.chip(ref.chip)
	ca := c.allocator()
	if e.BufferType == events.DRAM {
		// A new DRAM manager: the chip's allocator is being made again.
		for _, t := range allocTypes {
			if old := ca.types[t]; old != nil {
				p.allocTouch(c, t)
				p.forgetManager(old.ptr, c.id, t)
				ca.types[t] = nil
			}
		}
		ca.blockAlign = e.Alignment
	}
	ta := &typeAlloc{ptr: e.Object, cfg: cfg}
	if old := ca.types[e.BufferType]; old != nil {
		ta.failures = old.failures
		p.forgetManager(old.ptr, c.id, e.BufferType)
	}
	// A chip's managers are known while they are its own: the process
	// holds at most four per chip.
	p.managers[e.Object] = ref
	ca.types[e.BufferType] = ta
	p.allocTouch(c, e.BufferType)
	buildAllocs(c.alloc)
	if c.cur[e.BufferType] != 0 {
		// Made again while buffers of the old one are counted (their
		// chip's close was not seen): the new one's state is unknown.
		ta.lose(fmt.Sprintf("bank manager %#x was made while %d bytes of %s buffers were live on the chip", e.Object, c.cur[e.BufferType], e.BufferType))
	}
}

// forgetManager forgets bank manager ptr, no longer chip's type-t manager
// (its allocator was made again), unless ptr now names another.
func (p *allocView) forgetManager(ptr uint64, chip int32, t events.BufferType) {
	if r, ok := p.managers[ptr]; ok && r.grp == nil && r.chip == chip && r.typ == t {
		delete(p.managers, ptr)
	}
}

// newGroup makes an allocator outside any chip's for the bank manager
// capacity record e makes, within maxGroups: past it the oldest not tied
// to a mesh is dropped, or, when every one is, nil (e is refused).
func (p *allocView) newGroup(e *events.Event) *chipAlloc {
	if len(p.groups) >= maxGroups {
		i := slices.IndexFunc(p.groups, func(g *chipAlloc) bool { return g.meshPtr == 0 })
		if i < 0 {
			p.stats.BankManagersRefused++
			p.anomaly(anTooManyAllocators, e, "bank manager %#x: the process holds %d allocators made outside a chip's, each its live mesh's: this one is not kept", e.Object, len(p.groups))
			return nil
		}
		old := p.groups[i]
		p.dropGroup(old)
		p.stats.AllocatorsDropped++
		p.anomaly(anTooManyAllocators, e, "bank manager %#x: the process holds %d allocators made outside a chip's: the oldest tied to no mesh (its DRAM manager %#x) is dropped", e.Object, maxGroups, old.firstPtr())
	}
	g := &chipAlloc{mesh: true}
	p.groups = append(p.groups, g)
	return g
}

// dropGroup lets an allocator made outside a chip's go: its mesh closed,
// or room was needed. Its managers are forgotten (a request on one is on a
// manager not seen made), and its models released; a thread or a waiting
// request still pointing at it sees it dropped.
func (p *allocView) dropGroup(g *chipAlloc) {
	for _, ta := range g.types {
		if ta == nil {
			continue
		}
		if r, ok := p.managers[ta.ptr]; ok && r.grp == g {
			delete(p.managers, ta.ptr)
		}
	}
	g.types = [events.NumBufferTypes]*typeAlloc{}
	g.dropped = true
	if i := slices.Index(p.groups, g); i >= 0 {
		p.groups = slices.Delete(p.groups, i, i+1)
	}
}

// request handles alloc_request: it waits on its thread for the alloc.
func (p *allocView) request(e *events.Event) {
	p.stats.AllocRequests++
	t := p.thread(e.Tid)
	carry := t.reqBuf.pc[:0]
	if prev := t.req; prev != nil {
		if perCoreNext(prev, e) {
			// A per-core buffer takes one call per core of its shard grid
			// (allocator id bank + 1), then one track_allocate: the call
			// before this one succeeded.
			if carry = prev.pc; len(carry) < maxPerCoreCores {
				carry = append(carry, prev.core)
			}
			p.takeRequest(t)
		} else {
			p.failRequest(t) // the thread's previous request threw
		}
	}
	r := &t.reqBuf
	*r = allocReq{e: *e, chip: -1, typ: -1, site: e.Site, pc: carry}
	ref, ok := p.managers[e.Object]
	switch {
	case !ok:
		r.whyOf = whyUnknownManager
		r.unknownMgr = true
	case e.AllocatorID != 0:
		r.why = "a per-core allocation (not lockstep over the banks)"
		r.chip, r.typ = ref.chip, ref.typ
		p.perCoreRequest(r, ref)
	case ref.grp != nil:
		r.typ, r.grp = ref.typ, ref.grp
		r.exactFrom(ref.grp.types[ref.typ])
	case ref.chip < 0:
		r.whyOf = whyNoChip
		r.typ = ref.typ
	default:
		r.chip, r.typ = ref.chip, ref.typ
		r.exactFrom(p.typeAlloc(ref.chip, ref.typ))
	}
	if r.need.Banks == 0 && ok {
		// The request's own numbers, from the manager's making.
		banks := ref.cfg.Banks
		if e.Shards != 0 {
			banks = e.Shards
		}
		r.need = alloc.Need{Banks: banks, SizePerBank: alloc.SizePerBank(e.Size, e.PageSize, banks, ref.cfg.Alignment)}
		r.bank = ref.cfg.BankSize
	}
	t.req = r
	p.nreqs++
}

// oom handles alloc_oom: the thread's request reached BankManager::
// allocate_buffer's out-of-memory path. It fails now, with this record's
// stack as its site. Without a waiting request (its record was lost, or a
// second load of the message on the same path) it is only counted.
func (p *allocView) oom(e *events.Event) {
	p.stats.AllocOOMs++
	t := p.threads[e.Tid]
	if t == nil || t.req == nil {
		return
	}
	t.req.thrown = true
	if e.Site != 0 {
		t.req.site = e.Site
	}
	p.failRequest(t)
}

// typeAlloc returns chip's manager of type t, or nil.
func (p *allocView) typeAlloc(chip int32, t events.BufferType) *typeAlloc {
	c := p.chips[chip]
	if c == nil || c.alloc == nil || !allocatable(t) {
		return nil
	}
	return c.alloc.types[t]
}

// takeRequest ends thread t's wait and returns its request.
func (p *allocView) takeRequest(t *thread) *allocReq {
	r := t.req
	t.req = nil
	p.nreqs--
	return r
}

// failRequest: thread t's request was never followed by its alloc.
func (p *allocView) failRequest(t *thread) {
	r := p.takeRequest(t)
	p.stats.AllocFailures++
	f := AllocFailure{
		Type: "alloc_failed", Pid: p.pid, Tid: r.e.Tid, Seq: r.e.Seq, TsNs: r.e.TsNs,
		Manager: hex(r.e.Object), BufferType: "unknown",
		Size: r.e.Size, PageSize: r.e.PageSize, BottomUp: r.e.BottomUp, NumShards: r.e.Shards,
		Banks: r.need.Banks, SizePerBank: r.need.SizePerBank, BankSize: r.bank,
		Site: r.site, Thrown: r.thrown, Holders: []Holder{}, HolderSites: []HolderSite{},
		DeviceKind: events.DeviceNone.String(),
		Op:         p.opFailed(&r.e),
	}
	if r.typ.Valid() {
		f.BufferType = r.typ.String()
	}
	if r.chip >= 0 {
		f.DeviceKind = events.DeviceChip.String()
		chip := r.chip
		f.Device = &chip
		f.Physical = p.info.Chips.Identity(chip)
		if ta := p.typeAlloc(r.chip, r.typ); ta != nil {
			ta.failures++
		}
	}
	var mesh *meshState
	if g := r.grp; g != nil {
		if ta := g.typeOf(r.typ); ta != nil {
			ta.failures++
		}
		if g.meshPtr != 0 {
			if m := p.meshes[g.meshIdx]; m != nil && m.alloc == g {
				mesh = m
				f.DeviceKind = events.DeviceMesh.String()
				f.MeshDevice = hex(m.ptr)
				f.MeshChips = append([]int32{}, m.chips...)
			}
		}
	}
	if r.e.AllocatorID != 0 {
		p.perCoreFailed(&f, r)
	} else if r.exact {
		span := r.need.Span
		f.Span = &span
		alloc, free, big := r.st.TotalAllocated, r.st.TotalFree, r.st.LargestFreeBlock
		f.TotalAllocated, f.TotalFree, f.LargestFree = &alloc, &free, &big
		if span <= big && span <= r.bank {
			// The model has a block for it: not an Out of Memory it can
			// explain.
			f.Why = "the allocator had a free block large enough: the call failed for another reason, or its alloc record was lost"
		} else {
			f.Cause = r.st.Classify(span).String()
		}
	} else {
		f.Why = r.explain()
	}
	if p.set.notify == nil && len(p.failures) >= maxFailures {
		return
	}
	switch {
	case r.chip >= 0:
		chip := r.chip
		p.holders(&f, r.typ, func(b *bufEntry) bool { return b.mesh == 0 && b.chip == chip })
	case mesh != nil:
		idx := r.grp.meshIdx
		p.holders(&f, r.typ, func(b *bufEntry) bool { return b.mesh == idx })
	}
	if len(p.failures) < maxFailures {
		p.failures = append(p.failures, f)
	}
	if p.set.notify != nil {
		n := Notice{Type: NoticeAllocFailed, Seq: f.Seq, TsNs: f.TsNs, Pid: f.Pid, Tid: f.Tid, Chip: r.chip, AllocFailed: &f}
		p.set.notify(&n)
	}
}

// flushRequests fails every waiting request (the process ended, or tracing).
func (p *allocView) flushRequests() {
	if p.nreqs == 0 {
		return
	}
	tids := make([]uint32, 0, p.nreqs)
	for tid, t := range p.threads {
		if t.req != nil {
			tids = append(tids, tid)
		}
	}
	// In stream order, for a deterministic ledger.
	sort.Slice(tids, func(i, j int) bool { return p.threads[tids[i]].req.e.Seq < p.threads[tids[j]].req.e.Seq })
	for _, tid := range tids {
		p.failRequest(p.threads[tid])
	}
}

// failRequestsBefore fails the requests made before tsNs that still wait:
// an alloc follows its request at once, so a request quiet that long threw
// (the thread went on without another TT-Metal call).
func (p *allocView) failRequestsBefore(tsNs uint64) {
	if p.nreqs == 0 {
		return
	}
	var tids []uint32
	for tid, t := range p.threads {
		if t.req != nil && t.req.e.TsNs < tsNs {
			tids = append(tids, tid)
		}
	}
	sort.Slice(tids, func(i, j int) bool { return p.threads[tids[i]].req.e.Seq < p.threads[tids[j]].req.e.Seq })
	for _, tid := range tids {
		p.failRequest(p.threads[tid])
	}
}

// unplaced: the alloc that ended request r was not counted (unreadable,
// implausible): the allocator holds a span the model does not.
func (p *allocView) unplaced(r *allocReq, e *events.Event) {
	if r.grp != nil {
		if ta := r.grp.typeOf(r.typ); ta.exact() {
			ta.lose(fmt.Sprintf("the allocation of seq %d (buffer %#x) could not be accounted", e.Seq, e.Object))
		}
		return
	}
	if r.chip < 0 || r.e.AllocatorID != 0 {
		return
	}
	if ta := p.typeAlloc(r.chip, r.typ); ta.exact() {
		ta.lose(fmt.Sprintf("the allocation of seq %d (buffer %#x) could not be accounted", e.Seq, e.Object))
		p.allocTouch(p.chip(r.chip), r.typ)
	}
}

// holders fills what occupies an allocator's type-t memory (the live
// buffers `on` it): the largest (by span, then size) and the sites holding
// the most.
func (p *allocView) holders(f *AllocFailure, t events.BufferType, on func(b *bufEntry) bool) {
	type hold struct {
		idx  uint32
		span uint64
	}
	var all []hold
	sites := map[uint32]*HolderSite{}
	for i := range p.bufs.slots.len() {
		b := p.bufs.slots.at(uint32(i))
		if !b.live || events.BufferType(b.btype) != t || !on(b) {
			continue
		}
		all = append(all, hold{uint32(i), b.span})
		if b.site != 0 {
			hs := sites[b.site]
			if hs == nil {
				hs = &HolderSite{Site: b.site}
				sites[b.site] = hs
			}
			hs.Buffers++
			hs.Bytes += b.size
			hs.SpanBytes += b.span
		}
	}
	f.HoldersCount = len(all)
	for _, h := range all {
		f.HoldersBytes += p.bufs.slots.at(h.idx).size
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := p.bufs.slots.at(all[i].idx), p.bufs.slots.at(all[j].idx)
		switch {
		case a.span != b.span:
			return a.span > b.span
		case a.size != b.size:
			return a.size > b.size
		}
		return a.seq < b.seq
	})
	for i, h := range all {
		if i == maxHolders {
			break
		}
		b := p.bufs.slots.at(h.idx)
		hd := Holder{Buffer: hex(b.key), Address: b.addr, Size: b.size, Tid: b.tid, Seq: b.seq, TsNs: b.ts, Site: b.site}
		if b.span != 0 {
			s := b.span
			hd.Span = &s
		}
		if b.mesh != 0 {
			if m := p.meshes[b.mesh]; m != nil {
				hd.Mesh, hd.MeshDevice = true, hex(m.ptr)
			}
		}
		f.Holders = append(f.Holders, hd)
	}
	for _, hs := range sites {
		f.HolderSites = append(f.HolderSites, *hs)
	}
	sort.Slice(f.HolderSites, func(i, j int) bool {
		a, b := f.HolderSites[i], f.HolderSites[j]
		switch {
		case a.SpanBytes != b.SpanBytes:
			return a.SpanBytes > b.SpanBytes
		case a.Bytes != b.Bytes:
			return a.Bytes > b.Bytes
		}
		return a.Site < b.Site
	})
	if len(f.HolderSites) > maxHolderSites {
		f.HolderSites = f.HolderSites[:maxHolderSites]
	}
}

// allocPlace accounts the new live buffer in slot idx (alloc): its span
// from the thread's request, placed at its address in its chip's list (a
// mesh buffer: in its mesh's).
func (p *allocView) allocPlace(idx uint32, e *events.Event, r *allocReq) {
	b := p.bufs.slots.at(idx)
	t := events.BufferType(b.btype)
	if !allocatable(t) {
		return
	}
	if b.mesh != 0 {
		p.meshPlace(b, e, r)
		return
	}
	if r != nil && r.e.AllocatorID != 0 {
		b.perCore = true
		p.perCorePlace(idx, b, e, r)
		p.forChips(b, func(c *chipState) {
			if ta := c.alloc.typeOf(t); ta != nil {
				ta.perCore++
				ta.perCoreBytes += b.size
				p.allocTouch(c, t)
			}
		})
		return
	}
	if r != nil && r.unknownMgr && e.DeviceKind == events.DeviceChip && r.e.AllocatorID == 0 {
		p.wantMem(r.e.Object, e.Chip, t)
	}
	if r != nil {
		if ref, ok := p.managers[r.e.Object]; ok && ref.typ != t {
			r = nil // a request of another type: not this buffer's
		}
	}
	var span uint64
	if r != nil && r.grp == nil {
		if r.exact {
			span = r.need.Span
		} else if ta := p.chip(b.chip).alloc.typeOf(t); ta.exact() {
			span = ta.m.Need(alloc.Request{Size: r.e.Size, PageSize: r.e.PageSize, Shards: r.e.Shards}).Span
		}
	}
	b.span = span
	if r != nil && r.grp != nil {
		// Asked of a bank manager made outside the chip's allocator (a
		// sub-device's, say): the chip's lists do not hold it.
		if ta := p.chip(b.chip).alloc.typeOf(t); ta.exact() {
			ta.lose(fmt.Sprintf("buffer %#x (seq %d) was allocated by bank manager %#x, which is not the chip's", b.key, b.seq, r.e.Object))
			p.allocTouch(p.chip(b.chip), t)
		}
		return
	}
	p.placeOn(p.chip(b.chip), b, e)
}

// meshPlace accounts mesh buffer b in its mesh's allocator: the one whose
// bank manager got its request (the first such buffer ties that allocator
// to the mesh). Its chips' allocators never hold it.
func (p *allocView) meshPlace(b *bufEntry, e *events.Event, r *allocReq) {
	t := events.BufferType(b.btype)
	m := p.meshes[b.mesh]
	if m == nil {
		return
	}
	var g *chipAlloc
	if r != nil && r.typ == t && r.e.AllocatorID == 0 && (r.grp == nil || !r.grp.dropped) {
		g = r.grp
	}
	if g != nil && m.alloc != g {
		switch {
		case m.alloc == nil && g.meshPtr == 0:
			g.meshPtr, g.meshIdx = m.ptr, b.mesh
			m.alloc = g
		case m.alloc == nil:
			// An allocator tied to another (closed) mesh: not this one's.
			p.anomaly(anAllocatorState, e, "mesh %#x: buffer %#x came from the bank manager %#x of mesh %#x", m.ptr, b.key, r.e.Object, g.meshPtr)
			return
		}
	}
	ta := m.alloc.typeOf(t)
	if ta == nil || !ta.exact() {
		return
	}
	if g != m.alloc || !r.exact {
		ta.lose(fmt.Sprintf("mesh buffer %#x (seq %d) was allocated without a request on the mesh's %s bank manager", b.key, b.seq, t))
		return
	}
	b.span = r.need.Span
	if err := ta.m.Place(b.addr, b.span); err != nil {
		ta.lose(fmt.Sprintf("mesh buffer %#x (seq %d): %d bytes per bank at %#x %v", b.key, b.seq, b.span, b.addr, err))
		p.anomaly(anAllocatorState, e, "mesh %#x %s: buffer %#x: %d bytes per bank at %#x %v", m.ptr, t, b.key, b.span, b.addr, err)
	}
}

// placeOn puts live buffer b's span into chip c's list of its type.
func (p *allocView) placeOn(c *chipState, b *bufEntry, e *events.Event) {
	t := events.BufferType(b.btype)
	ta := c.alloc.typeOf(t)
	if ta == nil || !ta.exact() || b.perCore {
		return
	}
	p.allocTouch(c, t)
	if b.span == 0 {
		ta.lose(fmt.Sprintf("buffer %#x (seq %d) was allocated without a BankManager::allocate_buffer record", b.key, b.seq))
		return
	}
	if !ta.memPlace(e.TsNs, b.addr, b.span) {
		return
	}
	if err := ta.m.Place(b.addr, b.span); err != nil {
		ta.lose(fmt.Sprintf("buffer %#x (seq %d): %d bytes per bank at %#x %v", b.key, b.seq, b.span, b.addr, err))
		p.anomaly(anAllocatorState, e, "chip %d %s: buffer %#x: %d bytes per bank at %#x %v", c.id, t, b.key, b.span, b.addr, err)
	}
}

// allocRelease frees live buffer b's span from its chips' lists.
func (p *allocView) allocRelease(idx uint32, b *bufEntry, ts uint64) {
	t := events.BufferType(b.btype)
	if !allocatable(t) {
		return
	}
	if b.mesh != 0 {
		if m := p.meshes[b.mesh]; m != nil && b.span != 0 {
			if ta := m.alloc.typeOf(t); ta.exact() {
				if _, ok := ta.m.Free(b.addr); !ok {
					ta.lose(fmt.Sprintf("mesh buffer %#x (seq %d): nothing allocated at %#x to free", b.key, b.seq, b.addr))
				}
			}
		}
		return
	}
	p.forChips(b, func(c *chipState) {
		ta := c.alloc.typeOf(t)
		if ta == nil {
			return
		}
		p.allocTouch(c, t)
		if b.perCore {
			ta.perCore--
			ta.perCoreBytes -= b.size
			p.perCoreRelease(idx, c)
			return
		}
		if ta.exact() && b.span != 0 && ta.memFree(ts, b.addr) {
			if _, ok := ta.m.Free(b.addr); !ok {
				ta.lose(fmt.Sprintf("buffer %#x (seq %d): nothing allocated at %#x to free", b.key, b.seq, b.addr))
			}
		}
	})
}

// forChips calls f for each chip live buffer b is charged on.
func (p *allocView) forChips(b *bufEntry, f func(c *chipState)) {
	if b.mesh == 0 {
		f(p.chip(b.chip))
		return
	}
	if m := p.meshes[b.mesh]; m != nil {
		for _, id := range m.chips {
			f(p.chip(id))
		}
	}
}

// closeAlloc clears chip c's lists (Device::close).
func (p *allocView) closeAlloc(c *chipState) {
	if c.alloc == nil {
		return
	}
	for _, t := range allocTypes {
		if ta := c.alloc.types[t]; ta != nil {
			if ta.m != nil {
				ta.m.Clear()
			}
			ta.perCore, ta.perCoreBytes = 0, 0
			ta.perCoreClear()
			p.allocTouch(c, t)
		}
	}
}

// allocTouch notes that chip c's type-t state changed, for the observer.
func (p *allocView) allocTouch(c *chipState, t events.BufferType) {
	if !p.allocObserved || c.alloc == nil {
		return
	}
	if ta := c.alloc.types[t]; ta != nil && !ta.dirty {
		ta.dirty = true
		p.adirty = append(p.adirty, allocDirty{c, t})
	}
}

// allocNotify tells o of every chip and type the last event changed.
func (p *allocView) allocNotify(o AllocObserver, ts uint64) {
	for _, d := range p.adirty {
		ta := d.c.alloc.types[d.t]
		if ta == nil {
			continue
		}
		ta.dirty = false
		if ta.exact() {
			// In the proc, not on the stack: o is a function value, so a
			// local would be moved to the heap at every call.
			p.ast = ta.m.Stats()
			o(p.pid, d.c.id, ts, d.t, ta.cfg.Banks, &p.ast)
		} else {
			o(p.pid, d.c.id, ts, d.t, ta.cfg.Banks, nil)
		}
	}
	p.adirty = p.adirty[:0]
}

// allocatorView describes chip c's allocator, or says why there is none.
func (p *allocView) allocatorView(c *chipState) (*Allocator, string) {
	if c.alloc == nil || c.alloc.types[events.DRAM] == nil && c.alloc.types[events.L1] == nil &&
		c.alloc.types[events.L1Small] == nil && c.alloc.types[events.Trace] == nil {
		if p.info.AttachedMidRun {
			why := "the chip's allocator was made before tttrace attached, and no BankManager::allocate_buffer call on the chip since named its bank managers (they are read from memory then)"
			if p.rootWhy != "" {
				why += "; its open chips' allocators were not read at attach: " + p.rootWhy
			}
			return nil, why
		}
		return nil, "tttrace saw no bank manager of this chip made (the library's probes do not cover BankManager, or the chip was opened before tracing)"
	}
	var a Allocator
	memFailed, present := "", 0
	for _, t := range allocTypes {
		ta := c.alloc.types[t]
		if ta == nil {
			continue
		}
		present++
		if ta.mem != nil && ta.m == nil && ta.mem.to != 0 {
			if memFailed == "" {
				memFailed = ta.why
			} else if memFailed != ta.why {
				memFailed = "-"
			}
		}
		a.set(t, ta.view())
	}
	if memFailed != "" && memFailed != "-" && p.memFailures(c) == present {
		// Every type failed alike (no layout, say): the chip has no view.
		return nil, memFailed
	}
	return &a, ""
}

// meshAllocators describes the allocator of every live mesh, in the order
// the meshes were first seen.
func (p *allocView) meshAllocators() []MeshAllocator {
	out := []MeshAllocator{}
	for _, m := range p.meshes {
		if m == nil {
			continue
		}
		ma := MeshAllocator{MeshDevice: hex(m.ptr), Chips: append([]int32{}, m.chips...)}
		if m.alloc == nil {
			ma.AllocatorWhy = "no mesh buffer was allocated through a bank manager tttrace saw made (the mesh was made before tttrace attached, or its allocator was never asked)"
		} else {
			var a Allocator
			for _, t := range allocTypes {
				if ta := m.alloc.types[t]; ta != nil {
					a.set(t, ta.view())
				}
			}
			ma.Allocator = &a
		}
		out = append(out, ma)
	}
	return out
}

// memFailures counts chip c's types whose read from memory failed.
func (p *allocView) memFailures(c *chipState) int {
	n := 0
	for _, ta := range c.alloc.types {
		if ta != nil && ta.mem != nil && ta.m == nil && ta.mem.to != 0 {
			n++
		}
	}
	return n
}

// sortedFailures: a failure is known only once its thread moves on, so
// records are made out of request order when threads interleave.
func (p *allocView) sortedFailures() []AllocFailure {
	out := append([]AllocFailure{}, p.failures...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out
}

// wantMem: a request on bank manager ptr, unknown so far, was followed by
// an alloc on chip, type t: the chip's allocator was made before tttrace
// attached; ask for it to be read from memory.
func (p *allocView) wantMem(ptr uint64, chip int32, t events.BufferType) {
	if !allocatable(t) || p.set.wantMem == nil {
		return
	}
	c := p.chip(chip)
	ca := c.allocator()
	if old := ca.types[t]; old != nil {
		return // known (made under tttrace, or already asked for)
	}
	if p.managers == nil {
		p.managers = make(map[uint64]mgrRef)
	}
	p.managers[ptr] = mgrRef{chip: chip, typ: t}
	ca.types[t] = &typeAlloc{ptr: ptr, mem: &memState{}, why: "being read from the process's memory"}
	p.allocTouch(c, t)
	p.set.wantMem(MemWant{Pid: p.pid, Chip: chip, Type: t, Manager: ptr})
}

// unknownFreeMem: a buffer tttrace never saw allocated (allocated before
// it attached) was freed on a chip whose list was read from memory.
func (p *allocView) unknownFreeMem(e *events.Event) {
	if e.DeviceKind != events.DeviceChip || !allocatable(e.BufferType) {
		return
	}
	ta := p.typeAlloc(e.Chip, e.BufferType)
	if !ta.exact() || ta.mem == nil {
		return
	}
	p.allocTouch(p.chip(e.Chip), e.BufferType)
	if ta.memFree(e.TsNs, e.Address) {
		if _, ok := ta.m.Free(e.Address); !ok {
			ta.lose(fmt.Sprintf("buffer %#x (seq %d), allocated before tttrace attached: nothing allocated at %#x to free", e.Object, e.Seq, e.Address))
		}
	}
}

type allocDirty struct {
	c *chipState
	t events.BufferType
}
