package devices

import "github.com/tttrace/tttrace/events"

// The L1 side's bookkeeping per chip and per mesh, kept by the core as it
// charges buffers and read by the L1 rules (l1.go): live L1 buffers in an
// indexed min-heap, the CB region's running end, the headroom state, and
// each core's resident circular buffers.

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

// coreXY names a worker core of a chip by its logical coordinates (a CB's
// CoreRangeSet gives them).
type coreXY struct{ x, y uint16 }

// coreCBs is what one core holds resident: the CB bytes (the union of
// their [address, address+size)) of the program last dispatched there.
type coreCBs struct {
	prog  uint64 // ProgramImpl*
	bytes uint64
	op    uint16 // the op row + 1 its CBs were laid out in (cbGroup.op)
}

// chipCores is a chip's per-core CB residency (resident.go): what the
// dispatcher last wrote into each core's L1, and its busiest core.
type chipCores struct {
	cores   map[coreXY]coreCBs
	busiest coreXY
	max     uint64 // the busiest core's bytes
	total   uint64 // summed over cores
}

// set makes core xy hold r, keeping total (max is recomputed by settle).
func (cc *chipCores) set(xy coreXY, r coreCBs) {
	if cc.cores == nil {
		cc.cores = map[coreXY]coreCBs{}
	}
	cc.total -= cc.cores[xy].bytes
	cc.total += r.bytes
	cc.cores[xy] = r
}

// settle finds the busiest core again (the lowest x, then y, among ties).
func (cc *chipCores) settle() {
	cc.max, cc.busiest = 0, coreXY{}
	for xy, r := range cc.cores {
		if r.bytes > cc.max || r.bytes == cc.max && r.bytes != 0 && (xy.x < cc.busiest.x || xy.x == cc.busiest.x && xy.y < cc.busiest.y) {
			cc.max, cc.busiest = r.bytes, xy
		}
	}
}

// chipCore names one core of one chip (a trace's per-core CB peak).
type chipCore struct {
	chip int32
	xy   coreXY
}

// cbRec is one locally allocated CB of a group: its bytes and core ranges.
type cbRec struct {
	addr, end uint64
	n         uint8
	ranges    [events.CoreRangeMax]events.CoreRange
}

// Bounds on what CB residency may hold or walk for one group or dispatch
// (a CoreRangeSet is read from the traced process: hostile).
const (
	// maxGroupCBs: the CBs one program keeps on one target.
	maxGroupCBs = 1024
	// maxDispatchSpans: (core, CB) pairs walked for one dispatch on one
	// chip; a chip has ~150 worker cores and a core 32-64 CB indices.
	maxDispatchSpans = 1 << 16
)

// coreSpan is one CB's range on one core, coreBytes a core's union.
type coreSpan struct {
	xy        coreXY
	addr, end uint64
}

type coreBytes struct {
	xy    coreXY
	bytes uint64
	op    uint16 // its program's (cbGroup.op)
}

// appendCB adds CB e (locally allocated, on a group's target) to a
// group's cbs, for residency; false when its core ranges are unknown
// (the group's residency is then unknown).
func appendCB(cbs []cbRec, e *events.Event) ([]cbRec, bool) {
	if !e.RangesKnown || e.RangesTruncated || len(cbs) >= maxGroupCBs {
		return cbs, false
	}
	r := cbRec{addr: e.Address, end: e.Address + e.Size, n: uint8(min(int(e.NumRanges), events.CoreRangeMax))}
	if r.end < r.addr {
		return cbs, false
	}
	r.ranges = e.CoreRanges
	return append(cbs, r), true
}
