package devices

import "sort"

// wholeLeaks builds p's leak lists and groups as Leaks (the way the ledger
// did before its summaries left the lists in the ledger): an independent
// reference for the streamed lists (checkStreamed).
func (p *proc) wholeLeaks() (leaks, unplaced []Leak, groups []LeakGroup) {
	ps := ProcessSummary{Leaks: []Leak{}, UnplacedLeaks: []Leak{}, LeakGroups: []LeakGroup{}}
	n := 0
	ps.Leaks = make([]Leak, 0, n)
	for i := range p.bufs.slots.len() {
		b := p.bufs.slots.at(uint32(i))
		if !b.live {
			continue
		}
		lk := p.leakOf(uint32(i), b.chip)
		if b.mesh == 0 {
			ps.Leaks = append(ps.Leaks, lk)
			continue
		}
		m := p.meshes[b.mesh]
		if m == nil {
			continue // cannot happen: a mesh close releases its buffers
		}
		if len(m.chips) == 0 {
			lk.Device = 0
			ps.UnplacedLeaks = append(ps.UnplacedLeaks, lk)
			continue
		}
		for _, id := range m.chips {
			lk.Device = id
			ps.Leaks = append(ps.Leaks, lk)
		}
	}
	sortLeaks(ps.Leaks)
	sortLeaks(ps.UnplacedLeaks)
	for _, lk := range ps.Leaks {
		n := len(ps.LeakGroups)
		if n == 0 || ps.LeakGroups[n-1].Device != lk.Device || ps.LeakGroups[n-1].Type != lk.Type {
			ps.LeakGroups = append(ps.LeakGroups, LeakGroup{Device: lk.Device, Type: lk.Type})
			n++
		}
		ps.LeakGroups[n-1].Count++
		ps.LeakGroups[n-1].Bytes += lk.Size
	}
	return ps.Leaks, ps.UnplacedLeaks, ps.LeakGroups
}

// sortLeaks orders by device, type, address, then the remaining fields so
// the order is total (deterministic).
func sortLeaks(ls []Leak) {
	sort.Slice(ls, func(i, j int) bool {
		a, b := &ls[i], &ls[j]
		switch {
		case a.Device != b.Device:
			return a.Device < b.Device
		case a.btype != b.btype:
			return a.btype < b.btype
		case a.Address != b.Address:
			return a.Address < b.Address
		case a.Seq != b.Seq:
			return a.Seq < b.Seq
		case a.Buffer != b.Buffer:
			return a.Buffer < b.Buffer
		}
		return a.Size < b.Size
	})
}
