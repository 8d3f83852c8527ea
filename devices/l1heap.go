package devices

// The L1 side's bookkeeping per chip and per mesh, kept by the core as it
// charges buffers and read by the L1 rules (l1.go): live L1 buffers in an
// indexed min-heap, the CB region's running end, the headroom state.

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
