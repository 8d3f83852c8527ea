package devices

import (
	"sort"

	"github.com/tttrace/tttrace/events"
)

// L1 headroom and circular-buffer / L1 clashes.
//
// TT-Metal lays a program's CBs out bottom-up from the base of L1 and
// allocates L1 buffers top-down; after the CBs are laid out (and tracked)
// it checks, per chip, that the CB region ends at or below the lowest
// occupied L1 address and otherwise throws "Statically allocated circular
// buffers in program N clash with L1 buffers on core range [...]".
//
// "Lowest L1 buffer" is, per chip, the lowest address of any live L1
// buffer charged on it: interleaved L1 buffers take the same address in
// every bank, so tttrace, which does not see per-core bank placement,
// takes the lowest address over all of them. Only BufferType L1 counts:
// L1_SMALL (and TRACE) live in regions of their own, managed by their own
// bank managers, which TT-Metal's check does not consult. A mesh buffer is
// an L1 buffer on every chip of its mesh. Globally allocated CBs are L1
// buffers already and do not extend the CB region.
//
// A chip's CB region end is the highest end (address + per-core size) of
// the locally allocated CBs of every program holding CBs on it; the
// headroom is lowest L1 address - highest CB end, defined while the chip
// has both. Both sides are kept incrementally: live L1 buffers in an
// indexed min-heap per chip (single-chip buffers) and per mesh (mesh
// buffers), the CB end as a running maximum recomputed only when the group
// holding it goes. Nothing is allocated per event in a steady state.

// l1Rules is the L1 rule family of one process: the CB groups of its
// programs (cb.go), each chip's headroom and the clash checks.
type l1Rules struct {
	*core
	av         *allocView          // its per-core buffers (percore.go)
	progs      map[uint64]*progCBs // ProgramImpl* -> its CB groups
	spareProgs []*progCBs          // released, for reuse
	nchecks    int                 // threads with a clash check waiting
	clashes    []Notice            // the first l1_clash notices (certain)
	possible   []Notice            // the first possible ones
	// Scratch of resident.go, reused: a dispatch allocates nothing.
	spans     []coreSpan
	resident  []coreBytes
	peakChips []*chipState
	chipList  []int32
}

// maxClashBuffers caps the L1 buffers named in one l1_clash.
const maxClashBuffers = 32

// l1Touch notes that the L1 or CB side of a target's chips changed.
func (p *l1Rules) l1Touch(mesh uint32, chip int32) {
	if mesh == 0 {
		p.touchL1(p.chip(chip))
		return
	}
	if m := p.meshes[mesh]; m != nil {
		for _, id := range m.chips {
			p.touchL1(p.chip(id))
		}
	}
}

// cbEndsOf is the CB-end bookkeeping of a target.
func (p *l1Rules) cbEndsOf(mesh uint32, chip int32) *cbEnds {
	if mesh == 0 {
		return &p.chip(chip).cbEnd
	}
	if m := p.meshes[mesh]; m != nil {
		return &m.cbEnd
	}
	return nil
}

// groupEnd raises a target's CB end to end (a CB was laid out).
func (p *l1Rules) groupEnd(mesh uint32, chip int32, end uint64) {
	if ce := p.cbEndsOf(mesh, chip); ce != nil && end > ce.end {
		ce.end = end
	}
	p.l1Touch(mesh, chip)
}

// groupGone notes that a group with this end left its target.
func (p *l1Rules) groupGone(mesh uint32, chip int32, end uint64) {
	if ce := p.cbEndsOf(mesh, chip); ce != nil && end != 0 && end >= ce.end {
		ce.stale = true
	}
	p.l1Touch(mesh, chip)
}

// targetEnd is the highest CB end of a target, recomputed if stale.
func (p *l1Rules) targetEnd(mesh uint32, chip int32, ce *cbEnds) uint64 {
	if ce.stale {
		ce.end, ce.stale = 0, false
		if len(p.progs) == 0 {
			return 0
		}
		for _, pc := range p.progs {
			for i := range pc.groups {
				if g := &pc.groups[i]; g.mesh == mesh && (mesh != 0 || g.chip == chip) && g.end > ce.end {
					ce.end = g.end
				}
			}
		}
	}
	return ce.end
}

// chipL1 returns chip c's lowest live L1 buffer (slot) and highest CB end,
// over its own buffers and groups and those of the meshes it is in.
func (p *l1Rules) chipL1(c *chipState) (low uint32, hasLow bool, end uint64) {
	s := &p.bufs.slots
	low, hasLow = c.l1.top()
	end = p.targetEnd(0, c.id, &c.cbEnd)
	for i, m := range p.meshes {
		if m == nil || (len(m.l1.h) == 0 && m.cbEnd.end == 0 && !m.cbEnd.stale) || !m.has(c.id) {
			continue
		}
		if t, ok := m.l1.top(); ok && (!hasLow || l1Less(s, t, low)) {
			low, hasLow = t, true
		}
		if e := p.targetEnd(uint32(i), 0, &m.cbEnd); e > end {
			end = e
		}
	}
	return low, hasLow, end
}

// headrooms recomputes the headroom of every chip the event changed,
// keeps its minimum and tells of a drop under the warning threshold.
func (p *l1Rules) headrooms(h *settings, e *events.Event) {
	noCBs := len(p.progs) == 0 // then no chip has a headroom: skip the lookups
	for _, c := range p.l1dirty {
		c.hr.dirty = false
		p.l1Settle(c, e)
		hr := &c.hr
		var low uint32
		var hasLow bool
		var end uint64
		if !noCBs {
			low, hasLow, end = p.chipL1(c)
		}
		if !hasLow || end == 0 {
			hr.has, hr.cur, hr.low, hr.end = false, 0, 0, 0
			hr.warned = false
			continue
		}
		lowAddr := p.bufs.slots.at(low).addr
		cur := int64(lowAddr) - int64(end)
		hr.has, hr.cur, hr.low, hr.end = true, cur, lowAddr, end
		if !hr.minHas || cur < hr.min {
			hr.minHas, hr.min, hr.minTs, hr.minLow, hr.minEnd = true, cur, e.TsNs, lowAddr, end
		}
		switch {
		case h.warn == 0 || cur >= int64(h.warn):
			hr.warned = false
		case !hr.warned:
			hr.warned = true
			p.stats.L1HeadroomWarnings++
			if h.notify != nil {
				n := Notice{Type: NoticeL1Headroom, Seq: e.Seq, TsNs: e.TsNs, Pid: p.pid, Tid: e.Tid, Chip: c.id,
					CBRegionEnd: end, LowestL1Address: lowAddr, Headroom: cur, WarnBytes: h.warn}
				n.Lowest = p.l1Buffer(low)
				h.notify(&n)
			}
		}
	}
	p.l1dirty = p.l1dirty[:0]
}

// l1Buffer describes the live buffer in slot idx.
func (p *l1Rules) l1Buffer(idx uint32) L1Buffer {
	b := p.bufs.slots.at(idx)
	lb := L1Buffer{Buffer: hex(b.key), Address: b.addr, Size: b.size, Tid: b.tid, Seq: b.seq, TsNs: b.ts, Site: b.site}
	if b.mesh != 0 {
		lb.Mesh = true
		if m := p.meshes[b.mesh]; m != nil {
			lb.MeshDevice = hex(m.ptr)
		}
	}
	return lb
}

// A clash check waits on its thread until the program's CB layout on that
// target is complete: TT-Metal validates the CB region after it tracked
// every CB, so the check runs at the next event of the thread that is not
// one more CB of the same group (or at the process's end, or Flush).

// pendCheck makes the group (prog, mesh, chip) of thread t wait for its
// check, running a check that waited for another group first.
func (p *l1Rules) pendCheck(t *thread, prog uint64, mesh uint32, chip int32, e *events.Event) {
	if t.checkPending {
		if t.checkProg == prog && t.checkMesh == mesh && t.checkChip == chip {
			t.checkSeq, t.checkTs = e.Seq, e.TsNs
			return
		}
		p.runCheck(t)
	}
	t.checkPending = true
	t.checkProg, t.checkMesh, t.checkChip = prog, mesh, chip
	t.checkTid, t.checkSeq, t.checkTs = e.Tid, e.Seq, e.TsNs
	p.nchecks++
}

// rerunCheck: TT-Metal validates a program's CB region each time it is
// compiled for a run (allocate_circular_buffers, then
// validate_circular_buffer_region), also when its CBs are already laid out
// and allocate_circular_buffers tracks none. So a layout of a program that
// holds CBs on the target waits for its check as a new one does: if CBs
// follow, they replace the group and the check uses them; if none follow,
// the check runs against the group already held.
func (p *l1Rules) rerunCheck(t *thread, e *events.Event) {
	pc := p.progs[e.Object]
	if pc == nil {
		return
	}
	mesh, chip, ok := p.cbTarget(e, false)
	if !ok {
		return
	}
	for i := range pc.groups {
		if g := &pc.groups[i]; g.mesh == mesh && g.chip == chip && g.end != 0 {
			p.pendCheck(t, e.Object, mesh, chip, e)
			return
		}
	}
}

func (p *l1Rules) flushChecks() {
	if p.nchecks == 0 {
		return
	}
	for _, t := range p.threads {
		if t.checkPending {
			p.runCheck(t)
		}
	}
}

// runCheck runs the clash check thread t waits for: on each chip of the
// group's target, the group's CB end against the lowest live L1 buffer.
func (p *l1Rules) runCheck(t *thread) {
	t.checkPending = false
	p.nchecks--
	pc := p.progs[t.checkProg]
	if pc == nil {
		return
	}
	var g *cbGroup
	for i := range pc.groups {
		if pc.groups[i].mesh == t.checkMesh && pc.groups[i].chip == t.checkChip {
			g = &pc.groups[i]
		}
	}
	if g == nil || g.end == 0 {
		return
	}
	if t.checkMesh == 0 {
		p.checkChip(t, g, t.checkChip)
		return
	}
	if m := p.meshes[t.checkMesh]; m != nil {
		for _, id := range m.chips {
			p.checkChip(t, g, id)
		}
	}
}

// checkChip checks group g's CB region on chip: against the chip's lowest
// lockstep L1 buffer (a certain clash) and its per-core buffers' known
// blocks (a possible one), per core range as upstream (l1range.go).
func (p *l1Rules) checkChip(t *thread, g *cbGroup, chip int32) {
	end := g.end
	c := p.chip(chip)
	low, ok, _ := p.chipL1(c)
	s := &p.bufs.slots
	var lowAddr uint64
	if ok {
		lowAddr = s.at(low).addr
	}
	pcLow, hasPC, pcUnknown := p.perCoreLow(c)
	certain := ok && lowAddr < end
	if !certain && (!hasPC || pcLow >= end) {
		return
	}
	list := &p.clashes
	if certain {
		p.stats.L1Clashes++
		c.hr.clashes++
	} else {
		p.stats.L1ClashesPossible++
		list = &p.possible
	}
	if p.set.notify == nil && len(*list) >= MaxAnomalies {
		return
	}
	n := Notice{Type: NoticeL1Clash, Seq: t.checkSeq, TsNs: t.checkTs, Pid: p.pid, Tid: t.checkTid, Chip: chip,
		Program: hex(t.checkProg), CBRegionEnd: end, Clash: ClashCertain}
	clashRanges(&n, g, lowAddr, ok, pcLow, hasPC, pcUnknown)
	if hasPC && pcLow < end {
		p.clashPerCore(&n, c, end)
	}
	if certain {
		n.LowestL1Address, n.Headroom = lowAddr, int64(lowAddr)-int64(end)
		n.Lowest = p.l1Buffer(low)
	} else {
		if len(n.PerCoreBlocks) == 0 {
			return // cannot be: pcLow is one of them
		}
		n.Clash = ClashPossible
		n.Lowest = n.PerCoreBlocks[0]
		n.LowestL1Address, n.Headroom = n.Lowest.Address, int64(n.Lowest.Address)-int64(end)
	}
	var way []uint32
	collect := func(h *l1Heap) {
		for _, idx := range h.h {
			if s.at(idx).addr < end {
				way = append(way, idx)
			}
		}
	}
	collect(&c.l1)
	for _, m := range p.meshes {
		if m != nil && m.has(chip) {
			collect(&m.l1)
		}
	}
	sort.Slice(way, func(i, j int) bool { return l1Less(s, way[i], way[j]) })
	n.L1BuffersCount = len(way)
	for i, idx := range way {
		n.L1BuffersBytes += s.at(idx).size
		if i < maxClashBuffers {
			n.L1Buffers = append(n.L1Buffers, p.l1Buffer(idx))
		}
	}
	if len(*list) < MaxAnomalies {
		*list = append(*list, n)
	}
	if p.set.notify != nil {
		p.set.notify(&n)
	}
}

// Circular buffers. CB events carry no program: track_allocate_cb runs
// inside ProgramImpl::allocate_circular_buffers and track_deallocate_cb
// inside ProgramImpl::deallocate_circular_buffers, on the same thread, so
// the program is the one whose layout or teardown entry that thread saw
// last. CBs are held in groups keyed by (program, target), a target being a
// chip or (legacy builds) a MeshDevice. A group remembers its sizes, so a CB
// free, which carries none, releases exactly what was charged.

// cbGroup is the CBs of one program on one target.
type cbGroup struct {
	mesh   uint32 // target mesh index; 0: the target is chip
	chip   int32
	layout uint64 // layout id (Seq of the allocate_circular_buffers entry) the CBs come from
	bytes  uint64 // sum of per-core sizes
	end    uint64 // CB region end: highest address + size of its CBs
	count  uint32
	// cbs: its CBs with their core ranges, for residency (resident.go);
	// coresUnknown: some CB of it has no known ranges.
	cbs          []cbRec
	coresUnknown bool
	// op: the op row + 1 its layout's first CB was made in (0: none), for
	// the cores holding its CBs (L1 per core's peak).
	op uint16
	// ranges: its CB allocators per unique core range with their ends
	// (l1range.go), valid while rangesFresh; rangesOK: known.
	ranges                []rangeEnd
	rangesFresh, rangesOK bool
}

// progCBs is a program's groups, one per target (a handful: one per chip).
// Released ones are kept in proc.spareProgs and reused with their groups'
// capacity: a program's life allocates nothing in a steady state.
type progCBs struct {
	groups []cbGroup
}

// cbMatch selects CB groups: every group (all), those of one target, or
// those on one chip or of one mesh. A value, not a closure: matching
// allocates nothing.
type cbMatch struct {
	all  bool
	mesh uint32 // with !all: groups of this mesh (0: of chip)
	chip int32
}

func (m cbMatch) matches(g *cbGroup) bool {
	return m.all || g.mesh == m.mesh && (m.mesh != 0 || g.chip == m.chip)
}

func (p *l1Rules) cbTarget(e *events.Event, create bool) (mesh uint32, chip int32, ok bool) {
	switch e.DeviceKind {
	case events.DeviceChip:
		return 0, e.Chip, true
	case events.DeviceMesh:
		if create {
			return p.mesh(e.Device), 0, true
		}
		idx, found := p.meshIdx[e.Device]
		return idx, 0, found
	}
	return 0, 0, false
}

// chargeCB adds v to cb_bytes of the target's chips (add) or takes it away.
func (p *l1Rules) chargeCB(mesh uint32, chip int32, v uint64, add bool, e *events.Event) {
	if mesh == 0 {
		c := p.chip(chip)
		if add {
			p.add(c, CounterCBRegistered, v, e.TsNs)
		} else {
			p.sub(c, CounterCBRegistered, v, e)
		}
		return
	}
	m := p.meshes[mesh]
	if m == nil {
		return
	}
	if add {
		m.tot[CounterCBRegistered] += v
	} else {
		m.tot[CounterCBRegistered] -= v
	}
	for _, id := range m.chips {
		c := p.chip(id)
		if add {
			p.add(c, CounterCBRegistered, v, e.TsNs)
		} else {
			p.sub(c, CounterCBRegistered, v, e)
		}
	}
}

// cbAlloc handles a CB's cb_alloc record; op is the row + 1 of the op it
// was made in (opCB).
func (p *l1Rules) cbAlloc(e *events.Event, op uint16) {
	p.stats.CBAllocs++
	var prog, layout uint64
	if t := p.threads[e.Tid]; t != nil && t.hasLayout {
		prog, layout = t.layoutProg, t.layoutID
	} else {
		p.anomaly(anCBWithoutProgram, e, "CB at %#x (%d bytes) outside any allocate_circular_buffers; counted under program 0", e.Address, e.Size)
	}
	if e.Global {
		p.stats.GlobalCBs++ // backed by an L1 buffer, already counted
		return
	}
	if e.Size > maxSize {
		p.anomaly(anImplausibleSize, e, "CB at %#x: size %d", e.Address, e.Size)
		return
	}
	mesh, chip, ok := p.cbTarget(e, true)
	if !ok {
		p.anomaly(anUnknownDevice, e, "CB at %#x on a %s device %#x (vptr %#x)", e.Address, e.DeviceKind, e.Device, e.DeviceVptr)
		return
	}
	if !p.hold(e, "CB at", e.Address) {
		return
	}
	pc := p.progs[prog]
	if pc == nil {
		if n := len(p.spareProgs); n > 0 {
			pc = p.spareProgs[n-1]
			p.spareProgs = p.spareProgs[:n-1]
		} else {
			pc = &progCBs{}
		}
		p.progs[prog] = pc
	}
	var g *cbGroup
	for i := range pc.groups {
		if pc.groups[i].mesh == mesh && pc.groups[i].chip == chip {
			g = &pc.groups[i]
			break
		}
	}
	if g == nil {
		// A group slot released before keeps its CB list's room.
		var cbs []cbRec
		if n := len(pc.groups); n < cap(pc.groups) {
			cbs = pc.groups[:n+1][n].cbs[:0]
		}
		pc.groups = append(pc.groups, cbGroup{mesh: mesh, chip: chip, layout: layout, cbs: cbs})
		g = &pc.groups[len(pc.groups)-1]
	} else if g.layout != layout {
		// The program is laid out again from scratch: its old CBs on this
		// target are replaced, not added to.
		p.chargeCB(mesh, chip, g.bytes, false, e)
		p.held -= g.bytes
		p.groupGone(mesh, chip, g.end)
		p.stats.CBRelayouts++
		g.layout, g.bytes, g.count, g.end = layout, 0, 0, 0
		g.cbs, g.coresUnknown = g.cbs[:0], false
	}
	if g.count == 0 {
		g.op = op
	}
	var known bool
	if g.cbs, known = appendCB(g.cbs, e); !known {
		g.coresUnknown = true
	}
	g.rangesFresh = false
	g.bytes += e.Size
	g.count++
	if end := e.Address + e.Size; end > g.end && end >= e.Address {
		g.end = end
	}
	p.chargeCB(mesh, chip, e.Size, true, e)
	p.groupEnd(mesh, chip, g.end)
	p.pendCheck(p.thread(e.Tid), prog, mesh, chip, e)
}

func (p *l1Rules) cbFree(e *events.Event) {
	p.stats.CBFrees++
	t := p.threads[e.Tid]
	if t == nil || !t.hasTeardown {
		p.anomaly(anCBFreeWithoutProgram, e, "CB free outside any deallocate_circular_buffers")
		return
	}
	mesh, chip, ok := p.cbTarget(e, false)
	if !ok {
		if e.DeviceKind != events.DeviceMesh {
			p.anomaly(anUnknownDevice, e, "CB free on a %s device %#x (vptr %#x)", e.DeviceKind, e.Device, e.DeviceVptr)
		} else {
			p.stats.CBFreesUnknown++
		}
		return
	}
	prog := t.teardownProg
	released := p.releaseGroupsOf(prog, cbMatch{mesh: mesh, chip: chip}, e)
	if !released {
		p.stats.CBFreesUnknown++ // laid out before attach, or already released
	}
}

func (p *l1Rules) programDestroy(e *events.Event) {
	p.stats.ProgramDestroys++
	p.releaseGroupsOf(e.Object, cbMatch{all: true}, e)
}

// releaseGroupsOf releases the groups of prog that match and reports
// whether there were any.
func (p *l1Rules) releaseGroupsOf(prog uint64, match cbMatch, e *events.Event) bool {
	pc := p.progs[prog]
	if pc == nil {
		return false
	}
	found := false
	n := 0 // groups kept, moved to the front by swapping: each keeps its own cbs
	for i := range pc.groups {
		g := &pc.groups[i]
		if !match.matches(g) {
			pc.groups[n], pc.groups[i] = pc.groups[i], pc.groups[n]
			n++
			continue
		}
		found = true
		p.chargeCB(g.mesh, g.chip, g.bytes, false, e)
		p.held -= g.bytes
		p.groupGone(g.mesh, g.chip, g.end)
		p.stats.CBGroupsReleased++
	}
	pc.groups = pc.groups[:n]
	if n == 0 {
		delete(p.progs, prog)
		p.spareProgs = append(p.spareProgs, pc)
	}
	return found
}

// releaseCBGroups releases the matching groups of every program.
func (p *l1Rules) releaseCBGroups(match cbMatch, e *events.Event) {
	for prog := range p.progs {
		p.releaseGroupsOf(prog, match, e)
	}
}
