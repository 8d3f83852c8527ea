package devices

import "github.com/tttrace/tttrace/events"

// The rules of the TT-NN ops (issue #31): each record made in an op adds
// to its row (opstate.go).

// opEnter counts a call of an op (e: the thread's op state right after
// its entry): a top-level op's call, or a device op's launch inside the
// op live (a launch's further frames are no new launch).
func (p *core) opEnter(e *events.Event) {
	switch e.Entered {
	case events.OpEnteredOp:
		f := events.OpFields{Op: e.Op}
		if r, _ := p.ops.row(&f); r != nil {
			r.Calls++
		}
	case events.OpEnteredLaunch:
		if r, _ := p.ops.row(&e.OpFields); r != nil {
			r.Calls++
		}
	}
}

// opAlloc adds buffer idx, just recorded for e, to its op's row, and
// notes its row for its leak and its site's accounting. Every recorded
// alloc passes here, so a slot reused by a buffer made in no op forgets
// its former row. It returns the row, for opPeak once the buffer is
// charged.
func (p *core) opAlloc(idx uint32, e *events.Event) *OpRow {
	r, n := p.ops.row(&e.OpFields)
	p.ops.setBuf(idx, n)
	p.ops.last = e.OpFields
	if r == nil {
		return nil
	}
	r.Allocs++
	r.Bytes = SatAdd(r.Bytes, e.Size)
	return r
}

// opPeak notes the process's DRAM and L1 bytes right after an allocation
// of row r (nil: made in no op).
func (p *core) opPeak(r *OpRow) {
	if r == nil {
		return
	}
	var dram, l1 uint64
	for _, c := range p.chips {
		dram = SatAdd(dram, c.cur[CounterDRAM])
		l1 = SatAdd(l1, c.cur[CounterL1])
	}
	r.PeakDRAM = max(r.PeakDRAM, dram)
	r.PeakL1 = max(r.PeakL1, l1)
}

// opCB adds a local CB laid out in an op (its per-core size) and returns
// its row + 1 (0: none).
func (p *core) opCB(e *events.Event) uint16 {
	if e.Global {
		return 0
	}
	r, n := p.ops.row(&e.OpFields)
	if r != nil {
		r.CBBytes = SatAdd(r.CBBytes, e.Size)
	}
	return n
}

// opFailed counts a failed allocation in the op of its request and names
// the op.
func (p *core) opFailed(req *events.Event) *OpRef {
	if r, _ := p.ops.row(&req.OpFields); r != nil {
		r.AllocFailures++
	}
	return refOf(&req.OpFields)
}

// opRows is the summary's ops: the rows in the order first seen, with
// the buffers still live counted as leaked in their rows, per chip as the
// summary's leaks.
func (p *core) opRows() []OpRow {
	if len(p.ops.rows) == 0 {
		return nil
	}
	rows := append([]OpRow{}, p.ops.rows...)
	for i := range p.bufs.slots.len() {
		b := p.bufs.slots.at(uint32(i))
		if !b.live {
			continue
		}
		if r := p.ops.bufOf(uint32(i)); r != 0 {
			// Per chip, as the leaks: a mesh buffer once on each chip of
			// its mesh (once while its chips are unknown).
			n := uint64(1)
			if m := p.meshes[b.mesh]; b.mesh != 0 && m != nil && len(m.chips) > 0 {
				n = uint64(len(m.chips))
			}
			rows[r-1].LeakedBuffers += n
			rows[r-1].LeakedBytes = SatAdd(rows[r-1].LeakedBytes, SatMul(b.size, n))
		}
	}
	return rows
}
