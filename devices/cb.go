package devices

import (
	"github.com/tttrace/tttrace/events"
)

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
	count  uint32
}

// progCBs is a program's groups, one per target (a handful: one per chip).
type progCBs struct {
	groups []cbGroup
}

func (p *proc) cbTarget(e *events.Event, create bool) (mesh uint32, chip int32, ok bool) {
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
func (p *proc) chargeCB(mesh uint32, chip int32, v uint64, add bool, e *events.Event) {
	if mesh == 0 {
		c := p.chip(chip)
		if add {
			p.add(c, cCB, v, e.TsNs)
		} else {
			p.sub(c, cCB, v, e)
		}
		return
	}
	m := p.meshes[mesh]
	if m == nil {
		return
	}
	if add {
		m.tot[cCB] += v
	} else {
		m.tot[cCB] -= v
	}
	for _, id := range m.chips {
		c := p.chip(id)
		if add {
			p.add(c, cCB, v, e.TsNs)
		} else {
			p.sub(c, cCB, v, e)
		}
	}
}

func (p *proc) cbAlloc(e *events.Event) {
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
	pc := p.progs[prog]
	if pc == nil {
		pc = &progCBs{}
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
		pc.groups = append(pc.groups, cbGroup{mesh: mesh, chip: chip, layout: layout})
		g = &pc.groups[len(pc.groups)-1]
	} else if g.layout != layout {
		// The program is laid out again from scratch: its old CBs on this
		// target are replaced, not added to.
		p.chargeCB(mesh, chip, g.bytes, false, e)
		p.stats.CBRelayouts++
		g.layout, g.bytes, g.count = layout, 0, 0
	}
	g.bytes += e.Size
	g.count++
	p.chargeCB(mesh, chip, e.Size, true, e)
}

func (p *proc) cbFree(e *events.Event) {
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
	released := p.releaseGroupsOf(prog, func(g *cbGroup) bool { return g.mesh == mesh && g.chip == chip }, e)
	if !released {
		p.stats.CBFreesUnknown++ // laid out before attach, or already released
	}
}

func (p *proc) programDestroy(e *events.Event) {
	p.stats.ProgramDestroys++
	p.releaseGroupsOf(e.Object, func(*cbGroup) bool { return true }, e)
}

// releaseGroupsOf releases the groups of prog that match and reports
// whether there were any.
func (p *proc) releaseGroupsOf(prog uint64, match func(*cbGroup) bool, e *events.Event) bool {
	pc := p.progs[prog]
	if pc == nil {
		return false
	}
	found := false
	kept := pc.groups[:0]
	for i := range pc.groups {
		g := pc.groups[i]
		if !match(&g) {
			kept = append(kept, g)
			continue
		}
		found = true
		p.chargeCB(g.mesh, g.chip, g.bytes, false, e)
		p.stats.CBGroupsReleased++
	}
	pc.groups = kept
	if len(kept) == 0 {
		delete(p.progs, prog)
	}
	return found
}

// releaseCBGroups releases the matching groups of every program.
func (p *proc) releaseCBGroups(match func(*cbGroup) bool, e *events.Event) {
	for prog := range p.progs {
		p.releaseGroupsOf(prog, match, e)
	}
}
