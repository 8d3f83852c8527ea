package devices

import (
	"cmp"
	"slices"

	"github.com/tttrace/tttrace/events"
)

// Circular buffers resident per core (docs/ttmetal.md §12).
//
// A program holding CBs occupies no core's L1 until it is dispatched:
// ProgramImpl::generate_dispatch_commands runs at every enqueue, cache
// hit or miss, and the dispatcher then writes the program's CB configs
// into each core of its CBs' core ranges. So a core holds the CBs of the
// program last dispatched there, and nothing else: the union of their
// [address, address+size). TT-NN's program cache keeps hundreds of
// programs with CBs laid out from the same L1 base; the sum over them
// (cb_registered_bytes) says nothing about any core, what the busiest
// core holds (cb_bytes) does. While a trace is captured on a chip, a
// dispatch there writes nothing yet: the capture keeps each core's peak
// (trace.go), made resident at each replay. A chip's close empties it.
//
// A group's CBs (cbRec) come from its cb_alloc records with their core
// ranges; a program laid out before tttrace attached, or whose records
// carry no ranges (a layout without CoreRangeSet), makes nothing resident:
// its dispatches are counted (dispatches_unknown).

// programCores lists, per core, the bytes program prog's CBs hold there
// on chip id (its group on mesh, else on the chip), in p.resident; false
// when they are unknown.
func (p *l1Rules) programCores(prog uint64, mesh uint32, id int32) ([]coreBytes, bool) {
	pc := p.progs[prog]
	if pc == nil {
		return nil, false
	}
	var g *cbGroup
	for i := range pc.groups {
		x := &pc.groups[i]
		if mesh != 0 && x.mesh == mesh || x.mesh == 0 && x.chip == id {
			g = x
			if x.mesh == mesh {
				break
			}
		}
	}
	if g == nil || g.coresUnknown {
		return nil, false
	}
	spans := p.spans[:0]
	for i := range g.cbs {
		cb := &g.cbs[i]
		for _, r := range cb.ranges[:cb.n] {
			if r.X1 < r.X0 || r.Y1 < r.Y0 {
				return nil, false
			}
			if area := (int(r.X1) - int(r.X0) + 1) * (int(r.Y1) - int(r.Y0) + 1); len(spans)+area > maxDispatchSpans {
				return nil, false
			}
			for x := int(r.X0); x <= int(r.X1); x++ {
				for y := int(r.Y0); y <= int(r.Y1); y++ {
					spans = append(spans, coreSpan{coreXY{uint16(x), uint16(y)}, cb.addr, cb.end})
				}
			}
		}
	}
	slices.SortFunc(spans, func(a, b coreSpan) int {
		if c := cmp.Compare(a.xy.x, b.xy.x); c != 0 {
			return c
		}
		if c := cmp.Compare(a.xy.y, b.xy.y); c != 0 {
			return c
		}
		return cmp.Compare(a.addr, b.addr)
	})
	out := p.resident[:0]
	for i := 0; i < len(spans); {
		xy := spans[i].xy
		var bytes, lo, hi uint64
		lo, hi = spans[i].addr, spans[i].end
		for i++; i < len(spans) && spans[i].xy == xy; i++ {
			if s := spans[i]; s.addr <= hi {
				hi = max(hi, s.end)
			} else {
				bytes += hi - lo
				lo, hi = s.addr, s.end
			}
		}
		bytes += hi - lo
		out = append(out, coreBytes{xy, bytes, g.op})
	}
	p.spans, p.resident = spans, out
	return out, true
}

// programChips lists the chips program prog holds CB groups on (not a
// mesh's), in p.chipList.
func (p *l1Rules) programChips(prog uint64) []int32 {
	out := p.chipList[:0]
	if pc := p.progs[prog]; pc != nil {
		for i := range pc.groups {
			if g := &pc.groups[i]; g.mesh == 0 && !slices.Contains(out, g.chip) {
				out = append(out, g.chip)
			}
		}
	}
	p.chipList = out
	return out
}

// setResident makes the cores of c hold what cores says (program prog's
// CBs).
func (p *l1Rules) setResident(c *chipState, prog uint64, cores []coreBytes, e *events.Event) {
	for _, cb := range cores {
		c.cores.set(cb.xy, coreCBs{prog: prog, bytes: cb.bytes, op: cb.op})
	}
	p.settle(c, e)
}

// applyPeak makes each core of a trace's per-core CB peak hold it (a
// replay).
func (p *l1Rules) applyPeak(peak map[chipCore]coreCBs, e *events.Event) {
	touched := p.peakChips[:0]
	for k, r := range peak {
		c := p.chip(k.chip)
		c.cores.set(k.xy, r)
		if !slices.Contains(touched, c) {
			touched = append(touched, c)
		}
	}
	for _, c := range touched {
		p.settle(c, e)
	}
	clear(touched)
	p.peakChips = touched[:0]
}

// clearResidency empties chip c's cores (it closes: its buffers are
// released, l1Clear follows, so L1 per core is 0 before closedChip checks
// the chip holds nothing).
func (p *l1Rules) clearResidency(c *chipState, e *events.Event) {
	c.cores = chipCores{}
	p.settle(c, e)
	p.setTo(c, CounterL1Core, 0, e)
}

// settle sets c's resident counters from its cores.
func (p *l1Rules) settle(c *chipState, e *events.Event) {
	c.cores.settle()
	p.touchL1(c) // L1 per core (l1core.go)
	p.setTo(c, CounterCB, c.cores.max, e)
	p.setTo(c, CounterCBResidentTotal, c.cores.total, e)
}
