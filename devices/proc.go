package devices

import (
	"fmt"

	"github.com/tttrace/tttrace/alloc"
	"github.com/tttrace/tttrace/events"
)

// proc is the ledger of one traced process.
//
// Ownership of charges, the invariant the tests' Check verifies:
//   - a single-chip buffer is charged on its chip;
//   - a mesh buffer and a CB group aimed at a mesh are charged on exactly
//     the mesh's current chip set (meshState.chips), so a mesh keeps the
//     running totals of what it holds (meshState.tot) and a chip joining or
//     leaving the mesh moves those totals at once;
//   - a CB group aimed at a chip is charged on that chip.
type proc struct {
	pid   uint32
	info  ProcessInfo
	sites SiteSource // nil: its sites are not described

	exited     bool
	exitCode   int
	exitSignal int

	chips    map[int32]*chipState
	lastChip *chipState

	bufs bufTable

	meshIdx map[uint64]uint32 // MeshDevice* -> index in meshes (live meshes only)
	meshes  []*meshState      // index 0 unused: a zero mesh index means "no mesh"

	threads  map[uint32]*thread
	npending int // threads with a pending mesh alloc

	progs      map[uint64]*progCBs // ProgramImpl* -> its CB groups
	spareProgs []*progCBs          // released, for reuse

	// held: the bytes of every buffer and CB counted now, each once
	// whatever chips it is charged on; at most maxHeld.
	held uint64

	unknownFrees     uint64
	unknownFreeBytes uint64
	doubleFrees      uint64
	lostStacks       uint64 // allocs whose stack was lost (ring full)

	stats     Stats
	anomalies anomalyLog

	sitesOn  bool         // per-site accounting (siteuse.go)
	observed bool         // the ledger has an Observer
	dirty    []*chipState // chips the event being applied changed

	hooks   *hooks       // the Ledger's
	l1dirty []*chipState // chips whose L1 or CB side the event changed
	nchecks int          // threads with a clash check waiting
	clashes []Notice     // the first l1_clash notices

	// The allocator's view (allocator.go).
	managers map[uint64]mgrRef // BankManager* -> its chip and type
	// groups: the allocators made outside a chip's (a mesh's) the
	// process holds, oldest first; at most maxGroups.
	groups []*chipAlloc
	// rootWhy: why the open chips were not found from the process's root
	// at attach (devices/allocmem.go FoundMem; "" when they were or none
	// was looked for).
	rootWhy       string
	nreqs         int              // threads with a request waiting for its alloc
	failures      []AllocFailure   // the first alloc_failed records
	allocObserved bool             // the ledger has an AllocObserver
	adirty        []allocDirty     // chips and types the event being applied changed
	ast           alloc.Statistics // what allocNotify hands the observer

	// Metal trace (trace.go): nil until the process's first trace record.
	tr     *traceProc
	bufGen uint64 // bumped by every alloc and release of a buffer
}

// chipState holds one chip's current totals and their peaks.
type chipState struct {
	id     int32
	closed bool
	dirty  bool // in proc.dirty: changed by the event being applied
	cur    Totals
	peak   Totals
	peakTs Totals

	l1    l1Heap // live single-chip L1 buffers
	cbEnd cbEnds // of the CB groups aimed at this chip
	hr    headroomState

	sites *chipSites // per-site accounting, when on
	alloc *chipAlloc // its allocator's bank managers; nil: none seen made
}

// add adds v to counter i of c.
func (p *proc) add(c *chipState, i Counter, v, ts uint64) {
	c.cur[i] += v
	if c.cur[i] > c.peak[i] {
		c.peak[i] = c.cur[i]
		c.peakTs[i] = ts
		if p.sitesOn {
			c.sitePeak(i)
		}
	}
	p.changed(c)
}

// changed notes that c's totals changed, for the observer.
func (p *proc) changed(c *chipState) {
	if p.observed && !c.dirty {
		c.dirty = true
		p.dirty = append(p.dirty, c)
	}
}

// notify tells o of every chip the last event changed.
func (p *proc) notify(o Observer, ts uint64) {
	for _, c := range p.dirty {
		c.dirty = false
		o(p.pid, c.id, ts, &c.cur)
	}
	p.dirty = p.dirty[:0]
}

// thread is per-thread state needed to attribute events that do not carry
// their context (views after a mesh alloc, CB events).
type thread struct {
	// The allocator whose bank managers this thread is making outside a
	// chip's allocator (a MeshDevice's), for the next one made.
	mgrGroup *chipAlloc

	// A mesh alloc whose per-chip views may follow on this thread.
	pending     bool
	pendingAddr uint64
	pendingMesh uint32

	// The program whose allocate_circular_buffers runs on this thread, and
	// the layout id (the Seq of that entry event).
	hasLayout  bool
	layoutProg uint64
	layoutID   uint64

	// The program whose deallocate_circular_buffers runs on this thread.
	hasTeardown  bool
	teardownProg uint64

	// A CB group whose clash check waits for the end of its layout (l1.go).
	checkPending bool
	checkProg    uint64
	checkMesh    uint32
	checkChip    int32
	checkTid     uint32
	checkSeq     uint64 // of the group's last CB
	checkTs      uint64

	// req: a BankManager::allocate_buffer call waiting for its alloc
	// (reqBuf, or nil).
	req    *allocReq
	reqBuf allocReq
}

func newProc(pid uint32) *proc {
	return &proc{
		hooks:   &hooks{},
		pid:     pid,
		chips:   make(map[int32]*chipState),
		bufs:    newBufTable(),
		meshIdx: make(map[uint64]uint32),
		meshes:  make([]*meshState, 1),
		threads: make(map[uint32]*thread),
		progs:   make(map[uint64]*progCBs),
	}
}

// chip returns the state of chip id, creating it (the chip is "touched").
func (p *proc) chip(id int32) *chipState {
	if c := p.lastChip; c != nil && c.id == id {
		return c
	}
	c := p.chips[id]
	if c == nil {
		c = &chipState{id: id}
		p.chips[id] = c
	}
	p.lastChip = c
	return c
}

func (p *proc) thread(tid uint32) *thread {
	t := p.threads[tid]
	if t == nil {
		t = &thread{}
		p.threads[tid] = t
	}
	return t
}

// sub takes v from counter i of c. An underflow means the ledger's own
// bookkeeping is wrong: it is recorded, never wrapped.
func (p *proc) sub(c *chipState, i Counter, v uint64, e *events.Event) {
	p.changed(c)
	if c.cur[i] < v {
		p.anomaly(anAccounting, e, "chip %d counter %s: %d - %d", c.id, counterNames[i], c.cur[i], v)
		c.cur[i] = 0
		return
	}
	c.cur[i] -= v
}

func (p *proc) apply(e *events.Event) {
	p.stats.Events++
	if p.nchecks > 0 {
		// The layout a check waits for is over (l1.go).
		switch {
		case e.Kind == events.KindExit:
			p.flushChecks()
		case e.Kind != events.KindCBAlloc:
			if t := p.threads[e.Tid]; t != nil && t.checkPending {
				p.runCheck(t)
			}
		}
	}
	if p.nreqs > 0 {
		// A request's alloc is the thread's next event; anything else
		// means it threw (allocator.go).
		switch {
		case e.Kind == events.KindExit:
			p.flushRequests()
		case e.Kind == events.KindAllocOom:
			// Handled below: the thread's request failed, seen failing.
		case e.Kind != events.KindAlloc:
			if t := p.threads[e.Tid]; t != nil && t.req != nil &&
				!(e.Kind == events.KindAllocRequest && perCoreNext(t.req, e)) {
				p.failRequest(t)
			}
		}
	}
	if p.exited {
		p.anomaly(anAfterExit, e, "%s after the process exited", e.Kind)
		return
	}
	if e.DeviceKind == events.DeviceChip && p.refuseChip(e) {
		return
	}
	if e.ReadError {
		p.anomaly(anReadError, e, "%s: the probe could not read the object", e.Kind)
	}
	if p.npending > 0 && e.Kind != events.KindView {
		if t := p.threads[e.Tid]; t != nil && t.pending {
			p.endPending(t, e)
		}
	}
	if e.DeviceKind == events.DeviceChip {
		c := p.chip(e.Chip)
		switch e.Kind {
		case events.KindAlloc, events.KindView, events.KindCBAlloc, events.KindCBLayout:
			c.closed = false // activity on a closed chip reopens it
		}
	}

	switch e.Kind {
	case events.KindAlloc:
		p.alloc(e)
	case events.KindFree:
		p.free(e)
	case events.KindView:
		p.view(e)
	case events.KindMarkDeallocated:
		p.stats.MarkDeallocated++
		if idx, ok := p.bufs.lookup(e.Object); ok {
			// "Without releasing underlying device memory": the chip's
			// allocator holds it until the chip (or its mesh) closes.
			p.bufs.detach(idx, slotReleased)
			p.stats.MarkedHeld++
		}
	case events.KindCBLayout:
		p.stats.CBLayouts++
		t := p.thread(e.Tid)
		t.hasLayout, t.layoutProg, t.layoutID = true, e.Object, e.Seq
		p.rerunCheck(t, e)
	case events.KindCBAlloc:
		p.cbAlloc(e)
	case events.KindCBTeardown:
		p.stats.CBTeardowns++
		t := p.thread(e.Tid)
		t.hasTeardown, t.teardownProg = true, e.Object
	case events.KindCBFree:
		p.cbFree(e)
	case events.KindProgramDestroy:
		p.programDestroy(e)
	case events.KindDeviceClose:
		p.stats.DeviceCloses++
		if e.DeviceKind != events.DeviceChip {
			p.anomaly(anUnknownDevice, e, "device_close of a %s device %#x", e.DeviceKind, e.Device)
			return
		}
		p.closeChip(e.Chip, e)
	case events.KindMeshClose:
		p.meshClose(e)
	case events.KindAllocCapacity:
		p.capacity(e)
	case events.KindAllocRequest:
		p.request(e)
	case events.KindAllocOom:
		p.oom(e)
	case events.KindTrace:
		p.trace(e)
	case events.KindExit:
		p.exited, p.exitCode, p.exitSignal = true, e.ExitCode, e.ExitSignal
	default:
		p.anomaly(anUnknownKind, e, "event kind %d", uint8(e.Kind))
	}
}

// alloc handles GraphTracker::track_allocate: the address is final.
func (p *proc) alloc(e *events.Event) {
	p.stats.Allocs++
	var req *allocReq // the thread's allocate_buffer call that made it
	if p.nreqs > 0 {
		if t := p.threads[e.Tid]; t != nil && t.req != nil {
			req = p.takeRequest(t)
		}
	}
	placed := false
	if req != nil {
		defer func() {
			if !placed {
				p.unplaced(req, e)
			}
		}()
	}
	if e.Stack == events.StackLost {
		p.lostStacks++
	}
	if e.DeviceKind == events.DeviceMesh {
		// The per-chip views of this mesh buffer follow on this thread,
		// whether or not the buffer itself counts: they teach the mesh's chips.
		p.stats.MeshAllocs++
		t := p.thread(e.Tid)
		if !t.pending {
			p.npending++
		}
		t.pending, t.pendingAddr, t.pendingMesh = true, e.Address, p.mesh(e.Device)
	}
	switch {
	case e.ReadError:
		return // already an anomaly; its fields cannot be trusted
	case e.Hooked:
		p.stats.HookedAllocs++
		return
	case e.Size == 0:
		p.stats.ZeroSizeAllocs++
		return
	case !e.OwnsData:
		p.stats.NonOwningAllocs++
		return
	case !e.BufferType.Valid():
		p.anomaly(anInvalidBufferType, e, "buffer %#x: buffer type %d", e.Object, int32(e.BufferType))
		return
	case e.Size > maxSize:
		p.anomaly(anImplausibleSize, e, "buffer %#x: size %d", e.Object, e.Size)
		return
	}
	var meshIndex uint32
	switch e.DeviceKind {
	case events.DeviceChip:
	case events.DeviceMesh:
		meshIndex = p.meshIdx[e.Device]
	default:
		p.anomaly(anUnknownDevice, e, "buffer %#x on a %s device %#x (vptr %#x)", e.Object, e.DeviceKind, e.Device, e.DeviceVptr)
		return
	}
	if idx, ok := p.bufs.lookup(e.Object); ok {
		old := p.bufs.slots.at(idx)
		p.anomaly(anReallocWithoutFree, e, "buffer %#x allocated again (was %s %d bytes at %#x, seq %d) without a free",
			e.Object, events.BufferType(old.btype), old.size, old.addr, old.seq)
		p.releaseBuffer(idx, slotFreed, e)
	}
	if !p.hold(e, "buffer", e.Object) {
		return
	}
	idx, ok := p.bufs.insert(e.Object)
	if !ok {
		p.held -= e.Size
		p.anomaly(anTooManyBuffers, e, "buffer %#x: more live buffers than the ledger can hold", e.Object)
		return
	}
	b := p.bufs.slots.at(idx)
	*b = bufEntry{
		key:   e.Object,
		addr:  e.Address,
		size:  e.Size,
		page:  e.PageSize,
		seq:   e.Seq,
		ts:    e.TsNs,
		mesh:  meshIndex,
		chip:  e.Chip,
		tid:   e.Tid,
		site:  e.Site,
		btype: uint8(e.BufferType),
		live:  true,
	}
	p.allocPlace(idx, e, req)
	placed = true
	p.traceAlloc(idx, e)
	t := Counter(e.BufferType)
	sk := siteKey{e.Site, uint8(t)}
	if meshIndex == 0 {
		c := p.chip(e.Chip)
		p.siteCharge(c, sk, e.Size, 1)
		p.add(c, t, e.Size, e.TsNs)
		p.add(c, CounterLiveBuffers, 1, e.TsNs)
		if t == CounterL1 {
			c.l1.push(&p.bufs.slots, idx)
			p.l1TouchChip(c)
		}
		return
	}
	m := p.meshes[meshIndex]
	m.tot[t] += e.Size
	m.tot[CounterLiveBuffers]++
	p.meshSiteAdd(m, sk, e.Size, false)
	if t == CounterL1 {
		m.l1.push(&p.bufs.slots, idx)
	}
	for _, id := range m.chips {
		c := p.chip(id)
		p.siteCharge(c, sk, e.Size, 1)
		p.add(c, t, e.Size, e.TsNs)
		p.add(c, CounterLiveBuffers, 1, e.TsNs)
		if t == CounterL1 {
			p.l1TouchChip(c)
		}
	}
}

// free handles GraphTracker::track_deallocate, which runs before the
// allocator frees the address.
func (p *proc) free(e *events.Event) {
	p.stats.Frees++
	if e.Hooked {
		p.stats.HookedFrees++
		return
	}
	switch idx, known := p.bufs.state(e.Object); {
	case !known:
		p.unknownFrees++ // allocated before the tracer attached
		p.unknownFreeMem(e)
		if e.Size <= maxSize {
			p.unknownFreeBytes = SatAdd(p.unknownFreeBytes, e.Size)
		}
	case idx < slotReleased:
		p.releaseBuffer(idx, slotFreed, e)
	case idx == slotFreed:
		p.doubleFrees++
	case idx == slotReleased:
		// Released by a close or mark_as_deallocated first: nothing left.
		p.stats.FreesAfterRelease++
	}
}

// releaseBuffer uncharges the live buffer in slot idx everywhere it is
// charged and leaves its key in state (slotFreed or slotReleased).
func (p *proc) releaseBuffer(idx uint32, state uint32, e *events.Event) {
	b := p.bufs.slots.at(idx)
	t := Counter(b.btype)
	sk := siteKey{b.site, b.btype}
	if b.mesh == 0 {
		c := p.chip(b.chip)
		p.siteUncharge(c, sk, b.size, 1)
		p.sub(c, t, b.size, e)
		p.sub(c, CounterLiveBuffers, 1, e)
		if t == CounterL1 {
			c.l1.remove(&p.bufs.slots, idx)
			p.l1TouchChip(c)
		}
	} else if m := p.meshes[b.mesh]; m != nil {
		m.tot[t] -= b.size
		m.tot[CounterLiveBuffers]--
		p.meshSiteAdd(m, sk, b.size, true)
		if t == CounterL1 {
			m.l1.remove(&p.bufs.slots, idx)
		}
		for _, id := range m.chips {
			c := p.chip(id)
			p.siteUncharge(c, sk, b.size, 1)
			p.sub(c, t, b.size, e)
			p.sub(c, CounterLiveBuffers, 1, e)
			if t == CounterL1 {
				p.l1TouchChip(c)
			}
		}
	}
	if b.marked {
		p.stats.ReleasedByMark++
	}
	p.held -= b.size
	p.bufGen++
	p.allocRelease(idx, b, e.TsNs)
	p.bufs.remove(idx, state)
}

// view handles a pre-allocated Buffer::create(device, address, ...). It
// never counts; following a mesh alloc on the same thread at the same
// address it names a chip of that mesh.
func (p *proc) view(e *events.Event) {
	p.stats.Views++
	if e.DeviceKind != events.DeviceChip {
		return
	}
	t := p.threads[e.Tid]
	if t == nil || !t.pending || t.pendingAddr != e.Address {
		return
	}
	if m := p.meshes[t.pendingMesh]; m != nil {
		p.joinMesh(m, t.pendingMesh, e.Chip, e)
	}
}

// endPending closes the mesh-alloc window of thread t.
func (p *proc) endPending(t *thread, e *events.Event) {
	t.pending = false
	p.npending--
	if m := p.meshes[t.pendingMesh]; m != nil && len(m.chips) == 0 {
		p.anomaly(anMeshChipsUnknown, e, "mesh device %#x: no per-chip view followed its allocation; its buffers count on no chip", m.ptr)
	}
}

// refuseChip says whether e names a chip the process may not have: one
// more distinct chip than the bound (a too_many_chips anomaly). Chip ids
// themselves are any int32 (sparse, >= 64, ...): only their number is
// bounded.
func (p *proc) refuseChip(e *events.Event) bool {
	if p.chips[e.Chip] != nil {
		return false
	}
	limit := p.hooks.maxChips
	if limit <= 0 {
		limit = DefaultMaxChips
	}
	if len(p.chips) >= limit {
		p.anomaly(anTooManyChips, e, "chip %d: the process already has %d chips; its events count nothing", e.Chip, len(p.chips))
		return true
	}
	return false
}

// hold admits e.Size more held bytes for the object (a buffer or a CB at
// obj), or records an implausible_total anomaly and says no.
func (p *proc) hold(e *events.Event, what string, obj uint64) bool {
	if e.Size > maxHeld-p.held {
		p.anomaly(anImplausibleTotal, e, "%s %#x: %d bytes more would make the process hold over %d bytes; not counted", what, obj, e.Size, uint64(maxHeld))
		return false
	}
	p.held += e.Size
	return true
}

// anomaly records one anomaly of kind k for event e.
func (p *proc) anomaly(k anomalyKind, e *events.Event, format string, args ...any) {
	p.anomalies.counts[k]++
	if k == anInvalidBufferType || k == anImplausibleSize {
		p.hooks.layoutBad++
	}
	if len(p.anomalies.list) >= MaxAnomalies {
		return
	}
	p.anomalies.list = append(p.anomalies.list, Anomaly{
		Kind:   anomalyNames[k],
		Seq:    e.Seq,
		TsNs:   e.TsNs,
		Tid:    e.Tid,
		Event:  e.Kind.String(),
		Detail: fmt.Sprintf(format, args...),
	})
}
