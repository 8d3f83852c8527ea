package devices

import (
	"fmt"
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

// l1Heap is a min-heap (by address, then seq) of slot indices of live L1
// buffers; bufEntry.hpos is each one's position.
type l1Heap struct{ h []uint32 }

func l1Less(s *slotStore, a, b uint32) bool {
	x, y := s.at(a), s.at(b)
	return x.addr < y.addr || x.addr == y.addr && x.seq < y.seq
}

func (h *l1Heap) swap(s *slotStore, i, j int) {
	h.h[i], h.h[j] = h.h[j], h.h[i]
	s.at(h.h[i]).hpos = uint32(i)
	s.at(h.h[j]).hpos = uint32(j)
}

func (h *l1Heap) up(s *slotStore, i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !l1Less(s, h.h[i], h.h[parent]) {
			return
		}
		h.swap(s, i, parent)
		i = parent
	}
}

func (h *l1Heap) down(s *slotStore, i int) {
	n := len(h.h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && l1Less(s, h.h[r], h.h[l]) {
			m = r
		}
		if !l1Less(s, h.h[m], h.h[i]) {
			return
		}
		h.swap(s, i, m)
		i = m
	}
}

func (h *l1Heap) push(s *slotStore, idx uint32) {
	s.at(idx).hpos = uint32(len(h.h))
	h.h = append(h.h, idx)
	h.up(s, len(h.h)-1)
}

// remove takes slot idx, which must be in h, out of it.
func (h *l1Heap) remove(s *slotStore, idx uint32) {
	i := int(s.at(idx).hpos)
	last := len(h.h) - 1
	if i > last || h.h[i] != idx {
		return // not in this heap: the tests' Check reports it
	}
	if i != last {
		h.swap(s, i, last)
	}
	h.h = h.h[:last]
	if i != last {
		h.down(s, i)
		h.up(s, i)
	}
}

// top is the slot of the lowest live L1 buffer.
func (h *l1Heap) top() (uint32, bool) {
	if len(h.h) == 0 {
		return 0, false
	}
	return h.h[0], true
}

// cbEnds is the running maximum CB region end of a CB target (a chip or a
// mesh). stale: the group that held the maximum went; recompute.
type cbEnds struct {
	end   uint64
	stale bool
}

// headroomState is one chip's headroom bookkeeping.
type headroomState struct {
	dirty   bool // in proc.l1dirty
	has     bool // the chip has both a live L1 buffer and CBs
	cur     int64
	low     uint64 // lowest L1 address, with has
	end     uint64 // highest CB end, with has
	minHas  bool
	min     int64
	minTs   uint64
	minLow  uint64
	minEnd  uint64
	warned  bool // an l1_headroom notice went out and headroom has not recovered since
	clashes uint64
}

// hooks are the Ledger's settings its processes need while applying.
type hooks struct {
	notify   func(*Notice) // Options.Notices (nil: none)
	warn     uint64        // Options.L1Warn; 0: no l1_headroom notices
	maxChips int           // Options.MaxChips; 0: DefaultMaxChips
	// wantMem asks for a bank manager to be read from memory (nil: never).
	wantMem func(MemWant)
	// layoutBad counts the anomalies of every process that only a wrong
	// layout (or a bad read) makes (LayoutAnomalies).
	layoutBad uint64
}

// maxClashBuffers caps the L1 buffers named in one l1_clash.
const maxClashBuffers = 32

// L1Buffer names a live L1 buffer by what the ledger knows of it.
type L1Buffer struct {
	Buffer     string `json:"buffer"` // Buffer*, hex
	Address    uint64 `json:"address"`
	Size       uint64 `json:"size"`
	Mesh       bool   `json:"mesh"` // the backing buffer of a mesh buffer
	MeshDevice string `json:"mesh_device,omitempty"`
	Tid        uint32 `json:"tid"` // allocating thread
	Seq        uint64 `json:"seq"` // of the alloc event
	TsNs       uint64 `json:"ts_ns"`
	// Site is where it was allocated (the process's sites); absent when
	// unknown (stacks off, or the stack was lost).
	Site uint32 `json:"site,omitempty"`
}

// Headroom is one chip's L1 headroom now (HasHeadroom false: the chip has
// no live L1 buffer or no CBs, so nothing can clash).
type Headroom struct {
	Device          int32
	HasHeadroom     bool
	Headroom        int64
	LowestL1Address uint64
	CBRegionEnd     uint64
}

// MinHeadroom is the lowest headroom a chip had, and when it first had it.
type MinHeadroom struct {
	Value           int64  `json:"value"`
	TsNs            uint64 `json:"ts_ns"`
	LowestL1Address uint64 `json:"lowest_l1_address"`
	CBRegionEnd     uint64 `json:"cb_region_end"`
}

// l1Touch notes that the L1 or CB side of a target's chips changed.
func (p *proc) l1Touch(mesh uint32, chip int32) {
	if mesh == 0 {
		p.l1TouchChip(p.chip(chip))
		return
	}
	if m := p.meshes[mesh]; m != nil {
		for _, id := range m.chips {
			p.l1TouchChip(p.chip(id))
		}
	}
}

func (p *proc) l1TouchChip(c *chipState) {
	if !c.hr.dirty {
		c.hr.dirty = true
		p.l1dirty = append(p.l1dirty, c)
	}
}

// cbEndsOf is the CB-end bookkeeping of a target.
func (p *proc) cbEndsOf(mesh uint32, chip int32) *cbEnds {
	if mesh == 0 {
		return &p.chip(chip).cbEnd
	}
	if m := p.meshes[mesh]; m != nil {
		return &m.cbEnd
	}
	return nil
}

// groupEnd raises a target's CB end to end (a CB was laid out).
func (p *proc) groupEnd(mesh uint32, chip int32, end uint64) {
	if ce := p.cbEndsOf(mesh, chip); ce != nil && end > ce.end {
		ce.end = end
	}
	p.l1Touch(mesh, chip)
}

// groupGone notes that a group with this end left its target.
func (p *proc) groupGone(mesh uint32, chip int32, end uint64) {
	if ce := p.cbEndsOf(mesh, chip); ce != nil && end != 0 && end >= ce.end {
		ce.stale = true
	}
	p.l1Touch(mesh, chip)
}

// targetEnd is the highest CB end of a target, recomputed if stale.
func (p *proc) targetEnd(mesh uint32, chip int32, ce *cbEnds) uint64 {
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
func (p *proc) chipL1(c *chipState) (low uint32, hasLow bool, end uint64) {
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
func (p *proc) headrooms(h *hooks, e *events.Event) {
	noCBs := len(p.progs) == 0 // then no chip has a headroom: skip the lookups
	for _, c := range p.l1dirty {
		c.hr.dirty = false
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
func (p *proc) l1Buffer(idx uint32) L1Buffer {
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
func (p *proc) pendCheck(t *thread, prog uint64, mesh uint32, chip int32, e *events.Event) {
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
func (p *proc) rerunCheck(t *thread, e *events.Event) {
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

func (p *proc) flushChecks() {
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
func (p *proc) runCheck(t *thread) {
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
		p.checkChip(t, g.end, t.checkChip)
		return
	}
	if m := p.meshes[t.checkMesh]; m != nil {
		for _, id := range m.chips {
			p.checkChip(t, g.end, id)
		}
	}
}

func (p *proc) checkChip(t *thread, end uint64, chip int32) {
	c := p.chip(chip)
	low, ok, _ := p.chipL1(c)
	s := &p.bufs.slots
	if !ok || s.at(low).addr >= end {
		return
	}
	p.stats.L1Clashes++
	c.hr.clashes++
	if p.hooks.notify == nil && len(p.clashes) >= MaxAnomalies {
		return
	}
	n := Notice{Type: NoticeL1Clash, Seq: t.checkSeq, TsNs: t.checkTs, Pid: p.pid, Tid: t.checkTid, Chip: chip,
		Program: hex(t.checkProg), CBRegionEnd: end, LowestL1Address: s.at(low).addr, Headroom: int64(s.at(low).addr) - int64(end)}
	n.Lowest = p.l1Buffer(low)
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
	if len(p.clashes) < MaxAnomalies {
		p.clashes = append(p.clashes, n)
	}
	if p.hooks.notify != nil {
		p.hooks.notify(&n)
	}
}

func hex(v uint64) string { return fmt.Sprintf("%#x", v) }
