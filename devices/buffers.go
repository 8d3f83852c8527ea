package devices

import "hash/maphash"

// Buffers are kept in a slot table: index maps a live Buffer* to a slot
// number (liveIndex), ended maps the Buffer* of a buffer that ended to
// how it ended, slots holds the entries by value and are reused from a
// free list. About 80 bytes of slot plus ~6 bytes of index per live buffer
// (and 4 bytes of L1 heap per live L1 buffer); ~35 bytes per ended key.

const (
	// slotFreed: a free was seen for the key, so a second free is a double free.
	slotFreed uint32 = ^uint32(0)
	// slotReleased: the buffer was released by a device or mesh close, or
	// marked deallocated (mark_as_deallocated); a later free is not an error.
	slotReleased uint32 = ^uint32(0) - 1
	// maxSlots bounds the slot numbers below the tombstones.
	maxSlots = int(slotReleased) - 1
)

// bufEntry is one live buffer (or a free slot when !live). Fields by size,
// widest first, so the struct has no padding: 80 bytes (a million live
// buffers hold 80 MB of slots, docs/bench.md rows 5).
type bufEntry struct {
	key  uint64 // Buffer*
	addr uint64
	size uint64
	page uint64
	seq  uint64 // of the alloc event
	ts   uint64 // of the alloc event
	// span: what the allocator reserves per bank (its request); 0:
	// unknown.
	span  uint64
	mesh  uint32 // index in proc.meshes; 0: a single-chip buffer
	chip  int32  // the chip of a single-chip buffer
	tid   uint32 // allocating thread
	hpos  uint32 // position in its L1 heap (L1 buffers)
	site  uint32 // where it was allocated (the process's stack table); 0: unknown
	btype uint8  // events.BufferType, valid
	live  bool
	// perCore: a per-core (HYBRID) allocation, in no lockstep list.
	perCore bool
	// marked: Buffer::mark_as_deallocated was called. The allocator keeps
	// the memory until the chip closes, so the buffer stays charged, but its
	// key no longer leads here: the Buffer object is gone and a new one may
	// take its address.
	marked bool
}

// slotStore holds the slots in chunks of chunkLen that never move: growing
// the table adds a chunk instead of copying every slot into a larger array
// (old and new arrays, ~2.25x the table, would be live at once), and a
// slot's address stays valid while others are added.
type slotStore struct {
	chunks [][]bufEntry
	n      int
}

// chunkLen slots (80 KiB) per chunk; the first chunk grows by appending up
// to it, so a process with few buffers holds little.
const chunkLen = 1024

func (s *slotStore) len() int { return s.n }

func (s *slotStore) at(i uint32) *bufEntry {
	return &s.chunks[i/chunkLen][i%chunkLen]
}

// add appends a zero slot and returns its number.
func (s *slotStore) add() uint32 {
	last := len(s.chunks) - 1
	if last < 0 || len(s.chunks[last]) == chunkLen {
		var c []bufEntry
		if last >= 0 {
			c = make([]bufEntry, 0, chunkLen)
		}
		s.chunks = append(s.chunks, c)
		last++
	}
	s.chunks[last] = append(s.chunks[last], bufEntry{})
	s.n++
	return uint32(s.n - 1)
}

type bufTable struct {
	// index: the live buffers' keys; ended: the keys whose buffer ended
	// (slotFreed or slotReleased) and that no live buffer took since.
	index liveIndex
	ended map[uint64]uint32
	slots slotStore
	// freeHead: 1 + the number of the last slot freed, 0 when none is
	// free. The free slots are a list threaded through themselves (a free
	// slot's hpos is 1 + the next one's number), used last-in first-out:
	// no memory beside the slots (a slice of them was 4 MB, and its
	// growth's copies, when a million buffers were freed).
	freeHead uint32
	live     int
	// miss: the live slots whose buffer's site is missing or incomplete,
	// and why (events.SiteMissing); kept beside the slots, which have no
	// byte to spare, and rare.
	miss map[uint32]uint8
}

// setMiss says why the site of the buffer in slot idx is missing.
func (t *bufTable) setMiss(idx uint32, why uint8) {
	if t.miss == nil {
		t.miss = map[uint32]uint8{}
	}
	t.miss[idx] = why
}

func newBufTable() bufTable {
	return bufTable{ended: make(map[uint64]uint32)}
}

// lookup returns the slot of a live buffer.
func (t *bufTable) lookup(key uint64) (uint32, bool) {
	return t.index.get(key, &t.slots)
}

// state returns key's slot if its buffer is live, else how it ended
// (slotFreed, slotReleased); known is false for a key never seen.
func (t *bufTable) state(key uint64) (idx uint32, known bool) {
	if idx, ok := t.index.get(key, &t.slots); ok {
		return idx, true
	}
	idx, known = t.ended[key]
	return idx, known
}

// insert takes a slot for key, which must not be live. The caller fills it.
func (t *bufTable) insert(key uint64) (uint32, bool) {
	var idx uint32
	if t.freeHead != 0 {
		idx = t.freeHead - 1
		b := t.slots.at(idx)
		t.freeHead, b.hpos = b.hpos, 0
	} else {
		if t.slots.len() >= maxSlots {
			return 0, false
		}
		idx = t.slots.add()
	}
	t.slots.at(idx).key = key
	t.index.put(key, idx, &t.slots)
	delete(t.ended, key)
	t.live++
	return idx, true
}

// detach unlinks the live slot idx from its key (a marked buffer), leaving
// the tombstone state for the key.
func (t *bufTable) detach(idx uint32, state uint32) {
	b := t.slots.at(idx)
	t.index.del(b.key, &t.slots)
	b.marked = true
	t.ended[b.key] = state
}

// remove frees slot idx and leaves the tombstone state for its key (unless
// the slot was detached from it).
func (t *bufTable) remove(idx uint32, state uint32) {
	b := t.slots.at(idx)
	if !b.marked {
		t.index.del(b.key, &t.slots)
		t.ended[b.key] = state
	}
	*b = bufEntry{hpos: t.freeHead}
	delete(t.miss, idx)
	t.freeHead = idx + 1
	t.live--
}

// liveIndex maps the key (Buffer*) of each live buffer to its slot, in 4
// bytes per bucket: a bucket holds 1 + the slot's number, and the key is
// read from the slot itself. A Go map[uint64]uint32 takes ~35 MB for a
// million keys; this takes 8 MB (docs/bench.md rows 5). Open addressing
// with linear probing and backward-shift deletion (no tombstones), at most
// 3/4 full. The hash is seeded per table: the keys come from the traced
// process, which must not be able to make every key collide.
type liveIndex struct {
	buckets []uint32 // 1 + slot; 0: empty. len: 0 or a power of two
	n       int
	shift   uint // 64 - log2(len(buckets))
	seed    maphash.Seed
}

const liveIndexMin = 16

func (x *liveIndex) home(key uint64) int {
	return int(maphash.Comparable(x.seed, key) >> x.shift)
}

// get returns the slot of key.
func (x *liveIndex) get(key uint64, s *slotStore) (uint32, bool) {
	if x.n == 0 {
		return 0, false
	}
	mask := len(x.buckets) - 1
	for i := x.home(key); ; i = (i + 1) & mask {
		r := x.buckets[i]
		if r == 0 {
			return 0, false
		}
		if s.at(r-1).key == key {
			return r - 1, true
		}
	}
}

// put adds key at slot idx; key must not be in the index, and the slot
// must hold it already.
func (x *liveIndex) put(key uint64, idx uint32, s *slotStore) {
	if len(x.buckets) == 0 {
		x.seed = maphash.MakeSeed()
		x.resize(liveIndexMin, s)
	} else if (x.n+1)*4 > len(x.buckets)*3 {
		x.resize(2*len(x.buckets), s)
	}
	x.place(key, idx)
	x.n++
}

func (x *liveIndex) place(key uint64, idx uint32) {
	mask := len(x.buckets) - 1
	i := x.home(key)
	for x.buckets[i] != 0 {
		i = (i + 1) & mask
	}
	x.buckets[i] = idx + 1
}

func (x *liveIndex) resize(n int, s *slotStore) {
	old := x.buckets
	x.buckets = make([]uint32, n)
	x.shift = 64
	for m := n; m > 1; m >>= 1 {
		x.shift--
	}
	for _, r := range old {
		if r != 0 {
			x.place(s.at(r-1).key, r-1)
		}
	}
}

// del removes key (nothing if it is not in the index).
func (x *liveIndex) del(key uint64, s *slotStore) {
	if x.n == 0 {
		return
	}
	mask := len(x.buckets) - 1
	i := x.home(key)
	for {
		r := x.buckets[i]
		if r == 0 {
			return
		}
		if s.at(r-1).key == key {
			break
		}
		i = (i + 1) & mask
	}
	// Backward shift: move up each later entry of the run that may sit in
	// the hole (its home is not in (hole, its place]).
	for j := (i + 1) & mask; x.buckets[j] != 0; j = (j + 1) & mask {
		h := x.home(s.at(x.buckets[j] - 1).key)
		if (j-h)&mask >= (j-i)&mask {
			x.buckets[i] = x.buckets[j]
			i = j
		}
	}
	x.buckets[i] = 0
	x.n--
}
