package devices

import (
	"sort"

	"github.com/tttrace/tttrace/events"
)

// CB / L1 clashes per core range (docs/ttmetal.md §12).
//
// Upstream keeps one CB allocator per unique core range of a program's CBs
// (ProgramImpl::add_circular_buffer_) and, laying the CBs out in order,
// marks each CB on the allocator of each of its ranges and on every
// allocator whose range intersects one of them, unless that allocator is
// of another range and already ends above the CB's address
// (allocate_circular_buffers). validate_circular_buffer_region then checks
// each allocator's own region end against the lowest occupied L1 address:
// in LOCKSTEP mode the lockstep allocator's at bank 0, the same on every
// core; in HYBRID mode, per core of the range, the lowest of the lockstep
// allocator and that core's bank's per-core allocator.
//
// tttrace replays the marking from a group's cb_alloc records (their
// addresses are the ones upstream computed) to get each range's end, and
// checks it against the chip's lowest lockstep L1 buffer (a clash there
// is certain: that buffer is on every core) and against the per-core
// buffers' blocks it knows (a clash there is possible: their banks' cores
// are not known). Ranges of globally allocated CBs, which upstream gives
// allocators too, are not seen: such an allocator's end is that of a local
// CB marked on it, whose own range's allocator ends at least as high.

// maxRangeAllocs bounds the unique core ranges of one group replayed
// (hostile records: each CB's ranges are walked against all of them).
const maxRangeAllocs = 64

// rangeEnd is one CB allocator of a group: its core range and region end.
type rangeEnd struct {
	r   events.CoreRange
	end uint64
}

func rangesIntersect(a, b events.CoreRange) bool {
	return a.X0 <= b.X1 && b.X0 <= a.X1 && a.Y0 <= b.Y1 && b.Y0 <= a.Y1
}

// groupRanges is g's CB allocators with their region ends (cached until
// its CBs change); false when a CB of g has no known ranges or g has more
// than maxRangeAllocs of them.
func groupRanges(g *cbGroup) ([]rangeEnd, bool) {
	if g.rangesFresh {
		return g.ranges, g.rangesOK
	}
	g.rangesFresh, g.rangesOK = true, false
	out := g.ranges[:0]
	defer func() { g.ranges = out }()
	if g.coresUnknown {
		return nil, false
	}
	for i := range g.cbs {
		cb := &g.cbs[i]
		for _, r := range cb.ranges[:cb.n] {
			found := false
			for j := range out {
				if out[j].r == r {
					found = true
					break
				}
			}
			if !found {
				if len(out) == maxRangeAllocs {
					return nil, false
				}
				out = append(out, rangeEnd{r: r})
			}
		}
	}
	for i := range g.cbs {
		cb := &g.cbs[i]
		for _, r := range cb.ranges[:cb.n] {
			for j := range out {
				a := &out[j]
				if !rangesIntersect(a.r, r) || a.r != r && cb.addr < a.end {
					continue
				}
				a.end = max(a.end, cb.end)
			}
		}
	}
	g.rangesOK = true
	return out, true
}

// perCoreLow is chip c's lowest per-core block at a known address (a
// live per-core buffer's address on one of its banks), recomputed when
// its per-core buffers changed; unknown: some per-core buffer has cores
// whose addresses tttrace does not know (its lists are not known).
func (p *l1Rules) perCoreLow(c *chipState) (low uint64, has, unknown bool) {
	lc := &c.l1c
	if !lc.pcStale {
		return lc.pcLow, lc.pcHas, lc.pcUnknown
	}
	lc.pcStale, lc.pcLow, lc.pcHas, lc.pcUnknown = false, 0, false, false
	if len(lc.perCore) > 0 || lc.pcLive > 0 {
		p.perCoreBlocks(c, func(_ uint32, _ *bufEntry, _ *pcCore, addr uint64) {
			if !lc.pcHas || addr < lc.pcLow {
				lc.pcLow, lc.pcHas = addr, true
			}
		}, func() { lc.pcUnknown = true })
	}
	return lc.pcLow, lc.pcHas, lc.pcUnknown
}

// perCoreBlocks calls f for each block of a live per-core buffer of chip c
// at a known address: every core's when its lists placed it, else its
// first core's (Buffer::address()); unknown is called for each buffer
// with cores at unknown addresses.
func (p *l1Rules) perCoreBlocks(c *chipState, f func(idx uint32, b *bufEntry, k *pcCore, addr uint64), unknown func()) {
	if p.av == nil {
		return
	}
	s := &p.bufs.slots
	for idx, pb := range p.av.pcBufs {
		b := s.at(idx)
		if b.chip != c.id || !b.live || len(pb.cores) == 0 {
			continue
		}
		if pb.placed {
			for i := range pb.cores {
				f(idx, b, &pb.cores[i], pb.cores[i].addr)
			}
			continue
		}
		f(idx, b, &pb.cores[0], b.addr)
		if len(pb.cores) > 1 {
			unknown()
		}
	}
}

// clashRanges fills n's core ranges: those of group g whose end passes the
// lockstep lowest (low, hasLow) or a known per-core block (pcLow, hasPC).
func clashRanges(n *Notice, g *cbGroup, low uint64, hasLow bool, pcLow uint64, hasPC, pcUnknown bool) {
	ranges, ok := groupRanges(g)
	if !ok {
		return
	}
	exact := hasLow && !pcUnknown && (!hasPC || pcLow >= low)
	for _, a := range ranges {
		var kind string
		switch {
		case a.end == 0:
			continue
		case hasLow && low < a.end:
			kind = ClashCertain
		case hasPC && pcLow < a.end:
			kind = ClashPossible
		default:
			continue
		}
		n.CoreRangesCount++
		if len(n.CoreRanges) == maxClashBuffers {
			continue
		}
		cr := ClashRange{Range: [4]uint16{a.r.X0, a.r.Y0, a.r.X1, a.r.Y1}, CBRegionEnd: a.end, Clash: kind}
		if exact {
			h := int64(low) - int64(a.end)
			cr.Headroom = &h
		}
		n.CoreRanges = append(n.CoreRanges, cr)
	}
}

// clashPerCore fills n's per-core blocks below end on chip c.
func (p *l1Rules) clashPerCore(n *Notice, c *chipState, end uint64) {
	var blocks []L1Buffer
	p.perCoreBlocks(c, func(idx uint32, b *bufEntry, k *pcCore, addr uint64) {
		if addr >= end {
			return
		}
		lb := p.l1Buffer(idx)
		bank := k.bank
		lb.Address, lb.PerCore, lb.Bank = addr, true, &bank
		if k.spanKnown {
			lb.Span = k.span
		}
		blocks = append(blocks, lb)
	}, func() {})
	sort.Slice(blocks, func(i, j int) bool {
		if blocks[i].Address != blocks[j].Address {
			return blocks[i].Address < blocks[j].Address
		}
		if blocks[i].Seq != blocks[j].Seq {
			return blocks[i].Seq < blocks[j].Seq
		}
		return *blocks[i].Bank < *blocks[j].Bank
	})
	n.PerCoreBlocksCount = len(blocks)
	n.PerCoreBlocks = blocks[:min(len(blocks), maxClashBuffers)]
}
