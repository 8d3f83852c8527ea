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
	end    uint64 // CB region end: highest address + size of its CBs
	count  uint32
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
			p.add(c, CounterCB, v, e.TsNs)
		} else {
			p.sub(c, CounterCB, v, e)
		}
		return
	}
	m := p.meshes[mesh]
	if m == nil {
		return
	}
	if add {
		m.tot[CounterCB] += v
	} else {
		m.tot[CounterCB] -= v
	}
	for _, id := range m.chips {
		c := p.chip(id)
		if add {
			p.add(c, CounterCB, v, e.TsNs)
		} else {
			p.sub(c, CounterCB, v, e)
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
		pc.groups = append(pc.groups, cbGroup{mesh: mesh, chip: chip, layout: layout})
		g = &pc.groups[len(pc.groups)-1]
	} else if g.layout != layout {
		// The program is laid out again from scratch: its old CBs on this
		// target are replaced, not added to.
		p.chargeCB(mesh, chip, g.bytes, false, e)
		p.held -= g.bytes
		p.groupGone(mesh, chip, g.end)
		p.stats.CBRelayouts++
		g.layout, g.bytes, g.count, g.end = layout, 0, 0, 0
	}
	g.bytes += e.Size
	g.count++
	if end := e.Address + e.Size; end > g.end && end >= e.Address {
		g.end = end
	}
	p.chargeCB(mesh, chip, e.Size, true, e)
	p.groupEnd(mesh, chip, g.end)
	p.pendCheck(p.thread(e.Tid), prog, mesh, chip, e)
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
	released := p.releaseGroupsOf(prog, cbMatch{mesh: mesh, chip: chip}, e)
	if !released {
		p.stats.CBFreesUnknown++ // laid out before attach, or already released
	}
}

func (p *proc) programDestroy(e *events.Event) {
	p.stats.ProgramDestroys++
	p.releaseGroupsOf(e.Object, cbMatch{all: true}, e)
}

// releaseGroupsOf releases the groups of prog that match and reports
// whether there were any.
func (p *proc) releaseGroupsOf(prog uint64, match cbMatch, e *events.Event) bool {
	pc := p.progs[prog]
	if pc == nil {
		return false
	}
	found := false
	kept := pc.groups[:0]
	for i := range pc.groups {
		g := pc.groups[i]
		if !match.matches(&g) {
			kept = append(kept, g)
			continue
		}
		found = true
		p.chargeCB(g.mesh, g.chip, g.bytes, false, e)
		p.held -= g.bytes
		p.groupGone(g.mesh, g.chip, g.end)
		p.stats.CBGroupsReleased++
	}
	pc.groups = kept
	if len(kept) == 0 {
		delete(p.progs, prog)
		p.spareProgs = append(p.spareProgs, pc)
	}
	return found
}

// releaseCBGroups releases the matching groups of every program.
func (p *proc) releaseCBGroups(match cbMatch, e *events.Event) {
	for prog := range p.progs {
		p.releaseGroupsOf(prog, match, e)
	}
}
