package devices

import (
	"github.com/tttrace/tttrace/events"
)

// meshState is one distributed::MeshDevice. Its chips are not in any event
// that names it: they are learned from the per-chip views created right
// after a mesh allocation. Everything the mesh holds (its buffers and the CB
// groups aimed at it) is charged on exactly its current chip set, and tot
// is the sum of it, so a chip joining or leaving moves tot at once.
type meshState struct {
	ptr   uint64  // MeshDevice*
	chips []int32 // in the order learned
	tot   [NumCounters]uint64
	l1    l1Heap                // live L1 mesh buffers
	cbEnd cbEnds                // of the CB groups aimed at the mesh
	sites map[siteKey]*meshSite // per-site accounting, when on
	// alloc: the mesh's own allocator, once a mesh buffer was allocated
	// through one of its bank managers (allocator.go).
	alloc *chipAlloc
}

// mesh returns the index of the live mesh at ptr, creating it.
func (p *proc) mesh(ptr uint64) uint32 {
	if idx, ok := p.meshIdx[ptr]; ok {
		return idx
	}
	idx := uint32(len(p.meshes))
	p.meshes = append(p.meshes, &meshState{ptr: ptr})
	p.meshIdx[ptr] = idx
	return idx
}

func (m *meshState) has(chip int32) bool {
	for _, c := range m.chips {
		if c == chip {
			return true
		}
	}
	return false
}

// joinMesh adds chip to m's chip set and charges it with all m holds.
func (p *proc) joinMesh(m *meshState, idx uint32, chip int32, e *events.Event) {
	if m.has(chip) {
		return
	}
	ts := e.TsNs
	m.chips = append(m.chips, chip)
	p.stats.MeshChipsLearned++
	c := p.chip(chip)
	c.closed = false
	p.l1TouchChip(c)
	for k, s := range m.sites {
		p.siteCharge(c, k, s.bytes, s.objs)
	}
	for i, v := range m.tot {
		if v != 0 {
			p.add(c, Counter(i), v, ts)
		}
	}
}

// leaveMesh removes chip from m's chip set and uncharges what m holds there.
func (p *proc) leaveMesh(m *meshState, chip int32, e *events.Event) {
	for i, id := range m.chips {
		if id != chip {
			continue
		}
		m.chips = append(m.chips[:i], m.chips[i+1:]...)
		c := p.chip(chip)
		p.l1TouchChip(c)
		for k, s := range m.sites {
			p.siteUncharge(c, k, s.bytes, s.objs)
		}
		for j, v := range m.tot {
			p.sub(c, Counter(j), v, e)
		}
		return
	}
}

// closeChip releases everything charged on chip id (Device::close drops
// the chip's allocator wholesale; buffers destroyed later emit nothing).
// Single-chip buffers and CB groups of the chip are deleted; meshes lose
// the chip, so their buffers stay charged on their other chips and later
// mesh allocations do not charge the closed chip unless a view teaches it
// again.
func (p *proc) closeChip(id int32, e *events.Event) {
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
	p.releaseCBGroups(cbMatch{chip: id}, e)
	p.closeAlloc(c)
	p.l1TouchChip(c)
	if c.cur != (Totals{}) {
		p.anomaly(anAccounting, e, "chip %d not empty after its close: %v", id, c.cur)
		c.cur = Totals{}
		c.siteClear()
		p.changed(c)
	}
	c.closed = true
	p.traceClosed(id)
}

// meshClose handles distributed::MeshDevice::close: the mesh's buffers and
// CB groups go, its chips are closed, its own allocator (bank managers)
// is dropped, and the pointer is forgotten (a new MeshDevice may reuse
// it).
func (p *proc) meshClose(e *events.Event) {
	p.stats.MeshCloses++
	idx, ok := p.meshIdx[e.Device]
	if !ok {
		return
	}
	m := p.meshes[idx]
	for i := range p.bufs.slots.len() {
		b := p.bufs.slots.at(uint32(i))
		if b.live && b.mesh == idx {
			p.releaseBuffer(uint32(i), slotReleased, e)
			p.stats.ReleasedByClose++
		}
	}
	p.releaseCBGroups(cbMatch{mesh: idx}, e)
	chips := append([]int32(nil), m.chips...)
	for _, id := range chips {
		p.closeChip(id, e)
	}
	if m.alloc != nil {
		p.dropGroup(m.alloc) // its allocator goes with it
	}
	delete(p.meshIdx, e.Device)
	p.meshes[idx] = nil
}
