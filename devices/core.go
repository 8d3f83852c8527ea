package devices

import (
	"fmt"

	"github.com/tttrace/tttrace/events"
)

// The lifecycle core of one traced process's ledger: its buffers, chips,
// meshes and threads, what it holds, its anomalies. The rule families (the
// allocator's view, L1 and circular buffers, Metal trace: proc.go) are
// told of the moments the core owns through rules, in the order given
// there; the core never calls a family by name. Per-site accounting
// (sitetab.go) rides along each charge.
//
// Ownership of charges, the invariant the tests' Check verifies:
//   - a single-chip buffer is charged on its chip;
//   - a mesh buffer and a CB group aimed at a mesh are charged on exactly
//     the mesh's current chip set (meshState.chips), so a mesh keeps the
//     running totals of what it holds (meshState.tot) and a chip joining or
//     leaving the mesh moves those totals at once;
//   - a CB group aimed at a chip is charged on that chip.
type core struct {
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

	// held: the bytes of every buffer and CB counted now, each once
	// whatever chips it is charged on; at most maxHeld.
	held uint64

	unknownFrees     uint64
	unknownFreeBytes uint64
	doubleFrees      uint64
	lostStacks       uint64 // allocs whose stack was lost (ring full)
	// sitesMissing: allocs without a complete site, by reason
	// (events.SiteMissing; [0] unused).
	sitesMissing [events.NumSiteMissing]uint64

	stats     Stats
	anomalies anomalyLog
	// ops: the TT-NN ops its records were made in (opstate.go).
	ops opTab

	sitesOn  bool         // per-site accounting (sitetab.go)
	observed bool         // the ledger has an Observer
	dirty    []*chipState // chips the event being applied changed
	l1dirty  []*chipState // chips whose L1 or CB side the event changed

	set    *settings // the Ledger's
	rules  rules     // the rule families (proc)
	bufGen uint64    // bumped by every alloc and release of a buffer
}

// settings are the Ledger's, which its processes need while applying.
type settings struct {
	notify   func(*Notice) // Options.Notices (nil: none)
	warn     uint64        // Options.L1Warn; 0: no l1_headroom notices
	maxChips int           // Options.MaxChips; 0: DefaultMaxChips
	// wantMem asks for a bank manager to be read from memory (nil: never).
	wantMem func(MemWant)
	// layoutBad counts the anomalies of every process that only a wrong
	// layout (or a bad read) makes (LayoutAnomalies).
	layoutBad uint64
	// marks: the current mark (tttrace mark), its window (window.go).
	marks markLog
}

// rules are the rule families as the core tells them of a moment only it
// sees: a buffer's release, which a free, a close or an alloc over a
// live buffer makes (proc orders every other moment itself). No event is
// handed through it: a pointer passed to an interface's method escapes,
// and the caller's event would be allocated.
type rules interface {
	// released: buffer idx (b) is uncharged, its slot about to go.
	released(idx uint32, b *bufEntry, ts uint64)
}

func newCore(pid uint32) core {
	return core{
		pid:     pid,
		chips:   make(map[int32]*chipState),
		bufs:    newBufTable(),
		meshIdx: make(map[uint64]uint32),
		meshes:  make([]*meshState, 1),
		threads: make(map[uint32]*thread),
	}
}

// chipState holds one chip's current totals and their peaks.
type chipState struct {
	id     int32
	closed bool
	dirty  bool // in core.dirty: changed by the event being applied
	cur    Totals
	peak   Totals
	peakTs Totals

	l1    l1Heap // live single-chip L1 buffers
	cbEnd cbEnds // of the CB groups aimed at this chip
	hr    headroomState
	cores chipCores // the CBs resident per core (resident.go)
	l1c   l1Core    // L1 per core (l1core.go)

	sites *chipSites // per-site accounting, when on
	alloc *chipAlloc // its allocator's bank managers; nil: none seen made
	win   *winChip   // its peaks in the current window, once a mark found it (window.go)
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

// add adds v to counter i of c.
func (p *core) add(c *chipState, i Counter, v, ts uint64) {
	c.cur[i] += v
	if c.cur[i] > c.peak[i] {
		c.peak[i] = c.cur[i]
		c.peakTs[i] = ts
		c.sites.peak(i)
	}
	c.win.rise(i, c.cur[i], ts)
	p.changed(c)
}

// changed notes that c's totals changed, for the observer.
func (p *core) changed(c *chipState) {
	if p.observed && !c.dirty {
		c.dirty = true
		p.dirty = append(p.dirty, c)
	}
}

// touchL1 notes that c's L1 side changed (an L1 buffer or a CB group
// came or went, a mesh chip joined or left), for the L1 rules' headroom.
func (p *core) touchL1(c *chipState) {
	if !c.hr.dirty {
		c.hr.dirty = true
		p.l1dirty = append(p.l1dirty, c)
	}
}

// notify tells o of every chip the last event changed.
func (p *core) notify(o Observer, ts uint64) {
	for _, c := range p.dirty {
		c.dirty = false
		o(p.pid, c.id, ts, &c.cur)
	}
	p.dirty = p.dirty[:0]
}

// chip returns the state of chip id, creating it (the chip is "touched").
func (p *core) chip(id int32) *chipState {
	if c := p.lastChip; c != nil && c.id == id {
		return c
	}
	c := p.chips[id]
	if c == nil {
		c = &chipState{id: id}
		if p.sitesOn {
			c.sites = newChipSites()
		}
		p.chips[id] = c
	}
	p.lastChip = c
	return c
}

func (p *core) thread(tid uint32) *thread {
	t := p.threads[tid]
	if t == nil {
		t = &thread{}
		p.threads[tid] = t
	}
	return t
}

// sub takes v from counter i of c. An underflow means the ledger's own
// bookkeeping is wrong: it is recorded, never wrapped.
func (p *core) sub(c *chipState, i Counter, v uint64, e *events.Event) {
	p.changed(c)
	if c.cur[i] < v {
		p.anomaly(anAccounting, e, "chip %d counter %s: %d - %d", c.id, counterNames[i], c.cur[i], v)
		c.cur[i] = 0
		return
	}
	c.cur[i] -= v
}

// setTo makes counter i of c v (a state, not a sum: the CBs resident on the
// busiest core), through add and sub so that peaks and observers follow.
func (p *core) setTo(c *chipState, i Counter, v uint64, e *events.Event) {
	if v >= c.cur[i] {
		p.add(c, i, v-c.cur[i], e.TsNs)
	} else {
		p.sub(c, i, c.cur[i]-v, e)
	}
}

// free handles GraphTracker::track_deallocate, which runs before the
// allocator frees the address. It says whether the buffer was never seen
// allocated (before the tracer attached).
func (p *core) free(e *events.Event) (unknown bool) {
	p.stats.Frees++
	if e.Hooked {
		p.stats.HookedFrees++
		return false
	}
	switch idx, known := p.bufs.state(e.Object); {
	case !known:
		p.unknownFrees++ // allocated before the tracer attached
		if e.Size <= maxSize {
			p.unknownFreeBytes = SatAdd(p.unknownFreeBytes, e.Size)
		}
		return true
	case idx < slotReleased:
		p.releaseBuffer(idx, slotFreed, e)
	case idx == slotFreed:
		p.doubleFrees++
	case idx == slotReleased:
		// Released by a close or mark_as_deallocated first: nothing left.
		p.stats.FreesAfterRelease++
	}
	return false
}

// releaseBuffer uncharges the live buffer in slot idx everywhere it is
// charged and leaves its key in state (slotFreed or slotReleased).
func (p *core) releaseBuffer(idx uint32, state uint32, e *events.Event) {
	b := p.bufs.slots.at(idx)
	t := Counter(b.btype)
	sk := siteKey{b.site, b.btype, p.ops.bufOf(idx)}
	if b.mesh == 0 {
		c := p.chip(b.chip)
		c.sites.uncharge(sk, b.size, 1, lockSpan(b))
		p.sub(c, t, b.size, e)
		p.sub(c, CounterLiveBuffers, 1, e)
		p.l1Span(c, b, false)
		if t == CounterL1 && !b.perCore {
			c.l1.remove(&p.bufs.slots, idx)
		}
		if t == CounterL1 {
			p.touchL1(c)
		}
	} else if m := p.meshes[b.mesh]; m != nil {
		m.tot[t] -= b.size
		m.tot[CounterLiveBuffers]--
		m.meshL1Span(b, false)
		if p.sitesOn {
			m.sites.add(sk, b.size, lockSpan(b), true)
		}
		if t == CounterL1 {
			m.l1.remove(&p.bufs.slots, idx)
		}
		for _, id := range m.chips {
			c := p.chip(id)
			c.sites.uncharge(sk, b.size, 1, lockSpan(b))
			p.sub(c, t, b.size, e)
			p.sub(c, CounterLiveBuffers, 1, e)
			p.l1Span(c, b, false)
			if t == CounterL1 {
				p.touchL1(c)
			}
		}
	}
	if b.marked {
		p.stats.ReleasedByMark++
	}
	p.held -= b.size
	p.bufGen++
	p.rules.released(idx, b, e.TsNs)
	p.bufs.remove(idx, state)
}

// view handles a pre-allocated Buffer::create(device, address, ...). It
// never counts; following a mesh alloc on the same thread at the same
// address it names a chip of that mesh.
func (p *core) view(e *events.Event) {
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
func (p *core) endPending(t *thread, e *events.Event) {
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
func (p *core) refuseChip(e *events.Event) bool {
	if p.chips[e.Chip] != nil {
		return false
	}
	limit := p.set.maxChips
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
func (p *core) hold(e *events.Event, what string, obj uint64) bool {
	if e.Size > maxHeld-p.held {
		p.anomaly(anImplausibleTotal, e, "%s %#x: %d bytes more would make the process hold over %d bytes; not counted", what, obj, e.Size, uint64(maxHeld))
		return false
	}
	p.held += e.Size
	return true
}

// anomaly records one anomaly of kind k for event e.
func (p *core) anomaly(k anomalyKind, e *events.Event, format string, args ...any) {
	p.anomalies.counts[k]++
	if k == anInvalidBufferType || k == anImplausibleSize {
		p.set.layoutBad++
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

// record takes GraphTracker::track_allocate's buffer into the table (the
// address is final), and says whether it is one that counts; charge then
// charges it on its chips (proc.alloc places it in between).
func (p *core) record(e *events.Event) (idx uint32, ok bool) {
	p.stats.Allocs++
	if e.Stack == events.StackLost {
		p.lostStacks++
	}
	if m := siteMissingOf(e); m != events.SiteComplete {
		p.sitesMissing[m]++
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
		return 0, false // already an anomaly; its fields cannot be trusted
	case e.Hooked:
		p.stats.HookedAllocs++
		return 0, false
	case e.Size == 0:
		p.stats.ZeroSizeAllocs++
		return 0, false
	case !e.OwnsData:
		p.stats.NonOwningAllocs++
		return 0, false
	case !e.BufferType.Valid():
		p.anomaly(anInvalidBufferType, e, "buffer %#x: buffer type %d", e.Object, int32(e.BufferType))
		return 0, false
	case e.Size > maxSize:
		p.anomaly(anImplausibleSize, e, "buffer %#x: size %d", e.Object, e.Size)
		return 0, false
	}
	var meshIndex uint32
	switch e.DeviceKind {
	case events.DeviceChip:
	case events.DeviceMesh:
		meshIndex = p.meshIdx[e.Device]
	default:
		p.anomaly(anUnknownDevice, e, "buffer %#x on a %s device %#x (vptr %#x)", e.Object, e.DeviceKind, e.Device, e.DeviceVptr)
		return 0, false
	}
	if idx, ok := p.bufs.lookup(e.Object); ok {
		old := p.bufs.slots.at(idx)
		p.anomaly(anReallocWithoutFree, e, "buffer %#x allocated again (was %s %d bytes at %#x, seq %d) without a free",
			e.Object, events.BufferType(old.btype), old.size, old.addr, old.seq)
		p.releaseBuffer(idx, slotFreed, e)
	}
	if !p.hold(e, "buffer", e.Object) {
		return 0, false
	}
	idx, ok = p.bufs.insert(e.Object)
	if !ok {
		p.held -= e.Size
		p.anomaly(anTooManyBuffers, e, "buffer %#x: more live buffers than the ledger can hold", e.Object)
		return 0, false
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
	if m := siteMissingOf(e); m != events.SiteComplete {
		p.bufs.setMiss(idx, uint8(m))
	}
	return idx, true
}

// charge charges buffer idx, just recorded for e, on its chips (a mesh
// buffer on every chip of its mesh).
func (p *core) charge(idx uint32, e *events.Event) {
	b := p.bufs.slots.at(idx)
	meshIndex := b.mesh
	t := Counter(e.BufferType)
	sk := siteKey{e.Site, uint8(t), p.ops.bufOf(idx)}
	if meshIndex == 0 {
		c := p.chip(e.Chip)
		c.sites.charge(sk, e.Size, 1, lockSpan(b))
		p.add(c, t, e.Size, e.TsNs)
		p.add(c, CounterLiveBuffers, 1, e.TsNs)
		p.l1Span(c, b, true)
		if t == CounterL1 && !b.perCore {
			// A per-core buffer is not on every core at its address:
			// the heap holds the lockstep L1 buffers (l1range.go).
			c.l1.push(&p.bufs.slots, idx)
		}
		if t == CounterL1 {
			p.touchL1(c)
		}
		return
	}
	m := p.meshes[meshIndex]
	m.tot[t] += e.Size
	m.tot[CounterLiveBuffers]++
	m.meshL1Span(b, true)
	if p.sitesOn {
		m.sites.add(sk, e.Size, lockSpan(b), false)
	}
	if t == CounterL1 {
		m.l1.push(&p.bufs.slots, idx)
	}
	for _, id := range m.chips {
		c := p.chip(id)
		c.sites.charge(sk, e.Size, 1, lockSpan(b))
		p.add(c, t, e.Size, e.TsNs)
		p.add(c, CounterLiveBuffers, 1, e.TsNs)
		p.l1Span(c, b, true)
		if t == CounterL1 {
			p.touchL1(c)
		}
	}
}

// mesh returns the index of the live mesh at ptr, creating it.
func (p *core) mesh(ptr uint64) uint32 {
	if idx, ok := p.meshIdx[ptr]; ok {
		return idx
	}
	idx := uint32(len(p.meshes))
	p.meshes = append(p.meshes, &meshState{ptr: ptr})
	p.meshIdx[ptr] = idx
	return idx
}

// joinMesh adds chip to m's chip set and charges it with all m holds.
func (p *core) joinMesh(m *meshState, idx uint32, chip int32, e *events.Event) {
	if m.has(chip) {
		return
	}
	ts := e.TsNs
	m.chips = append(m.chips, chip)
	p.stats.MeshChipsLearned++
	c := p.chip(chip)
	c.closed = false
	p.touchL1(c)
	for k, s := range m.sites {
		c.sites.charge(k, s.bytes, s.objs, s.span)
	}
	for i, v := range m.tot {
		if v != 0 {
			p.add(c, Counter(i), v, ts)
		}
	}
	p.meshL1Move(m, c, true)
}

// leaveMesh removes chip from m's chip set and uncharges what m holds there.
func (p *core) leaveMesh(m *meshState, chip int32, e *events.Event) {
	for i, id := range m.chips {
		if id != chip {
			continue
		}
		m.chips = append(m.chips[:i], m.chips[i+1:]...)
		c := p.chip(chip)
		p.touchL1(c)
		for k, s := range m.sites {
			c.sites.uncharge(k, s.bytes, s.objs, s.span)
		}
		for j, v := range m.tot {
			p.sub(c, Counter(j), v, e)
		}
		p.meshL1Move(m, c, false)
		return
	}
}

// releaseChip releases the buffers charged on chip id for its close
// (Device::close drops the chip's allocator wholesale; buffers destroyed
// later emit nothing): its single-chip buffers are deleted; meshes lose
// the chip, so their buffers stay charged on their other chips and later
// mesh allocations do not charge the closed chip unless a view teaches it
// again. proc.closeChip releases the rest, then closedChip ends it.
func (p *core) releaseChip(id int32, e *events.Event) *chipState {
	c := p.chip(id)
	if c.cur[CounterLiveBuffers] != 0 { // else no buffer is charged here: skip the scan
		for i := range p.bufs.slots.len() {
			b := p.bufs.slots.at(uint32(i))
			if b.live && b.mesh == 0 && b.chip == id {
				p.releaseBuffer(uint32(i), slotReleased, e)
				p.stats.ReleasedByClose++
			}
		}
	}
	for _, m := range p.meshes {
		if m != nil {
			p.leaveMesh(m, id, e)
		}
	}
	return c
}

// closedChip ends the close of chip c: nothing may be charged on it.
func (p *core) closedChip(c *chipState, e *events.Event) {
	p.touchL1(c)
	if c.cur != (Totals{}) {
		p.anomaly(anAccounting, e, "chip %d not empty after its close: %v", c.id, c.cur)
		c.cur = Totals{}
		c.sites.clear()
		p.changed(c)
	}
	c.closed = true
}

// releaseMesh releases the buffers of mesh idx for its close
// (distributed::MeshDevice::close); proc.meshClose closes the rest and its
// chips, then forgetMesh forgets the pointer (a new MeshDevice may reuse
// it).
func (p *core) releaseMesh(idx uint32, e *events.Event) {
	for i := range p.bufs.slots.len() {
		b := p.bufs.slots.at(uint32(i))
		if b.live && b.mesh == idx {
			p.releaseBuffer(uint32(i), slotReleased, e)
			p.stats.ReleasedByClose++
		}
	}
}

func (p *core) forgetMesh(ptr uint64, idx uint32) {
	delete(p.meshIdx, ptr)
	p.meshes[idx] = nil
}

// siteMissingOf is why e, an alloc, has no complete site: its own
// SiteMissing, or stack_lost for a replayed line written before
// site_missing existed.
func siteMissingOf(e *events.Event) events.SiteMissing {
	if e.SiteMissing == events.SiteComplete && e.Stack == events.StackLost {
		return events.MissingStackLost
	}
	return e.SiteMissing
}

// sitesMissingByName is sitesMissing by reason name, nil when empty.
func (p *core) sitesMissingByName() map[string]uint64 {
	var m map[string]uint64
	for r, n := range p.sitesMissing {
		if n == 0 {
			continue
		}
		if m == nil {
			m = map[string]uint64{}
		}
		m[events.SiteMissing(r).String()] = n
	}
	return m
}
