package devices

import "hash/maphash"

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
