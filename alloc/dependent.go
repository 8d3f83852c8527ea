package alloc

// Dependent free lists (per-core "HYBRID" L1, docs/ttmetal.md §9): a bank
// manager in HYBRID mode keeps, beside its lockstep list (allocator id 0),
// one list per bank (id bank + 1), each dependent on the lockstep one: a
// per-core allocation takes room its own list has free and the lockstep
// list has not allocated, and lockstep allocations keep out of every
// per-core list's blocks. The rule placed here (first fit by address in
// the list's free blocks cut by the other list's allocated blocks) is the
// replica's; the ledger checks each prediction it can against the address
// the traced process reports and stops trusting the lists when one differs.

// Room is the state of a dependent list seen through the list it depends
// on: what one bank can still give.
type Room struct {
	// Stats: TotalAllocated counts the blocks of both lists (what the bank
	// holds), TotalFree the rest, LargestFreeBlock the largest room that
	// neither list holds. Classify gives the cause of a span refused.
	Stats Statistics
}

// rooms calls f for every stretch [start, end) (positions, Offset not
// added) free in m and not allocated in other (a list of the same
// offset: positions of one bank), in address order, until f returns
// false. other may be nil. It costs one pass over both lists.
func (m *Manager) rooms(other *Manager, f func(start, end uint64) bool) {
	var ob []block
	if other != nil {
		ob = other.fl.blocks
	}
	j := 0
	for _, b := range m.fl.blocks {
		if b.used {
			continue
		}
		start, end := b.addr, b.addr+b.size
		for j < len(ob) && ob[j].addr+ob[j].size <= start {
			j++
		}
		for k := j; k < len(ob) && start < end; k++ {
			o := ob[k]
			if !o.used {
				continue
			}
			os, oe := o.addr, o.addr+o.size
			if os >= end {
				break
			}
			if os > start && !f(start, os) {
				return
			}
			start = max(start, oe)
		}
		if start < end && !f(start, end) {
			return
		}
	}
}

// RoomFor returns the state of m seen through other (see Room); false
// when the two lists do not share their offset (not one bank's lists).
func (m *Manager) RoomFor(other *Manager) (Room, bool) {
	var r Room
	if other != nil && other.cfg.Offset != m.cfg.Offset {
		return r, false
	}
	r.Stats.TotalAllocatable = m.cfg.BankSize
	m.rooms(other, func(s, e uint64) bool {
		r.Stats.TotalFree += e - s
		r.Stats.LargestFreeBlock = max(r.Stats.LargestFreeBlock, e-s)
		return true
	})
	r.Stats.TotalAllocated = m.cfg.BankSize - r.Stats.TotalFree
	return r, true
}

// PlaceAvoiding says where m would place span bytes (a Span, as Need
// gives it) avoiding other's allocated blocks: the lowest room that holds
// it (bottom-up, at the room's start) or the highest (top-down, at its
// end minus span, rounded down to the block alignment). It changes
// nothing; false when no room holds it.
func (m *Manager) PlaceAvoiding(span uint64, bottomUp bool, other *Manager) (uint64, bool) {
	if other != nil && other.cfg.Offset != m.cfg.Offset {
		return 0, false
	}
	a := max(m.cfg.BlockAlign, 1)
	var at uint64
	found := false
	m.rooms(other, func(s, e uint64) bool {
		if bottomUp {
			p := roundUp(s, a)
			if p < e && e-p >= span {
				at, found = p, true
				return false
			}
			return true
		}
		if e-s >= span {
			p := (e - span) / a * a
			if p >= s {
				at, found = p, true // keep looking: the highest wins
			}
		}
		return true
	})
	if !found {
		return 0, false
	}
	return at + m.cfg.Offset, true
}
