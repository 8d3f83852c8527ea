package devices

import (
	"errors"
	"fmt"
)

// checkLimit: no total may reach it. Sizes are bounded by maxSize, so only
// a wrapped subtraction could.
const checkLimit = 1 << 62

// Check recomputes every total from the live entries (buffers, mesh chip
// sets, CB groups) and reports any disagreement with the running totals,
// a total near uint64 wrap, a peak below its current value, or an
// internal accounting anomaly. It is O(live entries) and allocates: for
// tests and debugging, not the hot path.
func (l *Ledger) Check() error {
	var errs []error
	for _, pid := range l.Processes() {
		if err := l.procs[pid].check(); err != nil {
			errs = append(errs, fmt.Errorf("pid %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}

func (p *proc) check() error {
	var errs []error
	bad := func(format string, args ...any) {
		if len(errs) < 20 {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	want := make(map[int32]*[nCounter]uint64)
	at := func(id int32) *[nCounter]uint64 {
		w := want[id]
		if w == nil {
			w = new([nCounter]uint64)
			want[id] = w
		}
		return w
	}
	meshTot := make([][nCounter]uint64, len(p.meshes))

	live, free := 0, 0
	for i := range p.bufs.slots {
		b := &p.bufs.slots[i]
		if !b.live {
			free++
			continue
		}
		live++
		if idx, ok := p.bufs.index[b.key]; b.marked {
			if ok && idx == uint32(i) {
				bad("slot %d (buffer %#x): marked but still indexed", i, b.key)
			}
		} else if !ok || idx != uint32(i) {
			bad("slot %d (buffer %#x) not indexed (index says %d, %v)", i, b.key, idx, ok)
		}
		if int(b.btype) >= cCB || b.size == 0 || b.size > maxSize {
			bad("slot %d: type %d size %d", i, b.btype, b.size)
			continue
		}
		if b.mesh == 0 {
			w := at(b.chip)
			w[b.btype] += b.size
			w[cLive]++
			continue
		}
		if int(b.mesh) >= len(p.meshes) || p.meshes[b.mesh] == nil {
			bad("buffer %#x: mesh %d is gone", b.key, b.mesh)
			continue
		}
		meshTot[b.mesh][b.btype] += b.size
		meshTot[b.mesh][cLive]++
	}
	if live != p.bufs.live || free != len(p.bufs.free) {
		bad("%d live and %d free slots, table says %d live and %d free", live, free, p.bufs.live, len(p.bufs.free))
	}
	for key, idx := range p.bufs.index {
		if idx >= slotReleased {
			continue
		}
		if int(idx) >= len(p.bufs.slots) || !p.bufs.slots[idx].live || p.bufs.slots[idx].key != key {
			bad("index %#x -> slot %d, which does not hold it", key, idx)
		}
	}

	for prog, pc := range p.progs {
		if len(pc.groups) == 0 {
			bad("program %#x kept with no CB group", prog)
		}
		for i, g := range pc.groups {
			for _, h := range pc.groups[:i] {
				if h.mesh == g.mesh && h.chip == g.chip {
					bad("program %#x: two CB groups for one target", prog)
				}
			}
			if g.mesh == 0 {
				at(g.chip)[cCB] += g.bytes
				continue
			}
			if int(g.mesh) >= len(p.meshes) || p.meshes[g.mesh] == nil {
				bad("program %#x: CB group of a gone mesh %d", prog, g.mesh)
				continue
			}
			meshTot[g.mesh][cCB] += g.bytes
		}
	}

	for i, m := range p.meshes {
		if m == nil {
			continue
		}
		if i == 0 {
			bad("mesh index 0 is in use")
			continue
		}
		if m.tot != meshTot[i] {
			bad("mesh %#x: totals %v, recomputed %v", m.ptr, m.tot, meshTot[i])
		}
		if idx, ok := p.meshIdx[m.ptr]; !ok || idx != uint32(i) {
			bad("mesh %#x not indexed", m.ptr)
		}
		for j, id := range m.chips {
			for _, other := range m.chips[:j] {
				if other == id {
					bad("mesh %#x lists chip %d twice", m.ptr, id)
				}
			}
			if p.chips[id] == nil {
				bad("mesh %#x: chip %d not touched", m.ptr, id)
			}
			w := at(id)
			for k, v := range meshTot[i] {
				w[k] += v
			}
		}
	}

	for id, w := range want {
		if p.chips[id] == nil && *w != ([nCounter]uint64{}) {
			bad("chip %d holds %v but is not touched", id, *w)
		}
	}
	for id, c := range p.chips {
		var w [nCounter]uint64
		if x := want[id]; x != nil {
			w = *x
		}
		if c.cur != w {
			bad("chip %d: totals %v, recomputed %v", id, c.cur, w)
		}
		for k := range c.cur {
			if c.cur[k] >= checkLimit || c.peak[k] >= checkLimit {
				bad("chip %d %s: %d (peak %d) near wrap-around", id, counterNames[k], c.cur[k], c.peak[k])
			}
			if c.peak[k] < c.cur[k] {
				bad("chip %d %s: peak %d below current %d", id, counterNames[k], c.peak[k], c.cur[k])
			}
		}
		if c.closed && c.cur != ([nCounter]uint64{}) {
			bad("chip %d closed but holds %v", id, c.cur)
		}
	}
	if n := p.anomalies.counts[anAccounting]; n != 0 {
		bad("%d internal accounting errors", n)
	}
	if p.unknownFreeBytes >= checkLimit {
		bad("unknown_free_bytes %d near wrap-around", p.unknownFreeBytes)
	}
	return errors.Join(errs...)
}
