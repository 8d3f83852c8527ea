package alloc

import "sort"

// freeList is FreeListOpt's block list as a sorted slice: blocks cover
// [0, size) without gaps, in address order; no two free blocks touch
// (a freed block merges with free neighbours, as upstream's does). The
// slice has room on both sides in its buffer, and an edit moves the
// blocks on its shorter side (splice).
//
// Upstream keeps free blocks in size classes, each sorted by address, and
// with SearchPolicy::FIRST (what BankManager asks for) takes, over the
// classes that can hold the span, the block of the lowest address
// (bottom-up) or the highest (top-down): a block of a smaller class is
// smaller than the span. So the choice is the extreme-address free block
// that fits, which is what allocate scans for here.
//
// The largest free block comes from bySize, a max-heap of free blocks by
// size with lazy deletion: every free block of the list has an entry,
// pushed when the block is made (split off or merged); an entry whose
// block was since taken or merged stays until it comes to the top, and is
// dropped then (largest), or until the heap, about to grow past
// bySizeFull entries, is made again from the free blocks. So each change
// to the list costs O(log n) amortized, and largest O(log n) (the top's
// block is looked up).
type freeList struct {
	blocks    []block // buf[head : head+len(blocks)]
	buf       []block
	head      int
	allocated uint64 // sum of the allocated blocks' sizes
	used      int    // allocated blocks
	nfree     int    // free blocks
	bySize    []freeEntry
}

// freeEntry is a free block in bySize: live while the list holds a free
// block of that address and size.
type freeEntry struct{ size, addr uint64 }

// bySizeSlack: entries bySize may hold beyond twice the free blocks
// before it is made again.
const bySizeSlack = 64

// bySizeFull is the number of entries at which bySize is made again from
// the free blocks: at least twice the free blocks (+ bySizeSlack), so
// that at least half the entries are dropped, and at least a quarter of
// all blocks, so that the scan of the blocks costs at most 8 times the
// entries it drops.
func (f *freeList) bySizeFull() int {
	return max(2*f.nfree+bySizeSlack, len(f.blocks)/4)
}

type block struct {
	addr, size uint64
	used       bool
}

func (f *freeList) init(size uint64) {
	if len(f.buf) == 0 {
		f.buf = make([]block, 8)
	}
	f.head = len(f.buf) / 2
	f.buf[f.head] = block{addr: 0, size: size}
	f.blocks = f.buf[f.head : f.head+1]
	f.allocated, f.used, f.nfree = 0, 0, 1
	f.bySize = append(f.bySize[:0], freeEntry{size: size, addr: 0})
}

// reindex sets the buffer, the counts and bySize from the blocks alone
// (a slice of their own).
func (f *freeList) reindex() {
	f.buf, f.head = f.blocks[:cap(f.blocks)], 0
	f.allocated, f.used, f.nfree = 0, 0, 0
	for _, b := range f.blocks {
		if b.used {
			f.allocated += b.size
			f.used++
		} else {
			f.nfree++
		}
	}
	f.remake()
}

// remake makes bySize again: one entry for every free block.
func (f *freeList) remake() {
	f.bySize = f.bySize[:0]
	for _, b := range f.blocks {
		if !b.used {
			f.bySize = append(f.bySize, freeEntry{size: b.size, addr: b.addr})
		}
	}
	for j := len(f.bySize)/2 - 1; j >= 0; j-- {
		f.down(j)
	}
}

// largest returns the size of the largest free block, 0 if none.
func (f *freeList) largest() uint64 {
	for len(f.bySize) > 0 {
		if top := f.bySize[0]; f.live(top) {
			return top.size
		}
		f.pop()
	}
	return 0
}

// live reports whether e's block is free in the list.
func (f *freeList) live(e freeEntry) bool {
	i := f.find(e.addr)
	return i >= 0 && !f.blocks[i].used && f.blocks[i].addr == e.addr && f.blocks[i].size == e.size
}

// made enters a free block just made in the list (f.nfree counts it).
func (f *freeList) made(addr, size uint64) {
	if len(f.bySize) >= f.bySizeFull() {
		f.remake() // the block is in
		return
	}
	f.bySize = append(f.bySize, freeEntry{size: size, addr: addr})
	h := f.bySize
	for j := len(h) - 1; j > 0; {
		p := (j - 1) / 2
		if h[p].size >= h[j].size {
			break
		}
		h[p], h[j] = h[j], h[p]
		j = p
	}
}

// pop drops the top of bySize.
func (f *freeList) pop() {
	last := len(f.bySize) - 1
	f.bySize[0] = f.bySize[last]
	f.bySize = f.bySize[:last]
	f.down(0)
}

// down moves entry j of bySize down to its place.
func (f *freeList) down(j int) {
	h := f.bySize
	for {
		c := 2*j + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1].size > h[c].size {
			c++
		}
		if h[j].size >= h[c].size {
			return
		}
		h[j], h[c] = h[c], h[j]
		j = c
	}
}

// allocate takes span at the bottom of the lowest fitting free block, or
// at the top of the highest one; ok is false when none fits.
func (f *freeList) allocate(span uint64, bottomUp bool) (uint64, bool) {
	i := -1
	if bottomUp {
		for j := range f.blocks {
			if b := &f.blocks[j]; !b.used && b.size >= span {
				i = j
				break
			}
		}
	} else {
		for j := len(f.blocks) - 1; j >= 0; j-- {
			if b := &f.blocks[j]; !b.used && b.size >= span {
				i = j
				break
			}
		}
	}
	if i < 0 {
		return 0, false
	}
	off := uint64(0)
	if !bottomUp {
		off = f.blocks[i].size - span
	}
	return f.take(i, off, span), true
}

// take marks [off, off+span) of free block i allocated, splitting off the
// free rest before and after it, and returns the allocated address.
func (f *freeList) take(i int, off, span uint64) uint64 {
	b := f.blocks[i]
	var parts [3]block
	n := 0
	if off > 0 {
		parts[n] = block{addr: b.addr, size: off}
		n++
	}
	parts[n] = block{addr: b.addr + off, size: span, used: true}
	n++
	if rest := b.size - off - span; rest > 0 {
		parts[n] = block{addr: b.addr + off + span, size: rest}
		n++
	}
	f.splice(i, 1, parts[:n])
	f.allocated += span
	f.used++
	f.nfree += n - 2
	for _, p := range parts[:n] {
		if !p.used {
			f.made(p.addr, p.size)
		}
	}
	return b.addr + off
}

// place takes [pos, pos+span) if it lies in one free block.
func (f *freeList) place(pos, span uint64) bool {
	i := f.find(pos)
	if i < 0 {
		return false
	}
	b := f.blocks[i]
	if b.used || pos+span > b.addr+b.size {
		return false
	}
	f.take(i, pos-b.addr, span)
	return true
}

// find returns the index of the block holding pos, or -1.
func (f *freeList) find(pos uint64) int {
	i := sort.Search(len(f.blocks), func(j int) bool { return f.blocks[j].addr > pos }) - 1
	if i < 0 || pos >= f.blocks[i].addr+f.blocks[i].size {
		return -1
	}
	return i
}

// free releases the allocated block starting at pos, merging it with free
// neighbours.
func (f *freeList) free(pos uint64) (uint64, bool) {
	i := f.find(pos)
	if i < 0 || !f.blocks[i].used || f.blocks[i].addr != pos {
		return 0, false
	}
	span := f.blocks[i].size
	f.allocated -= span
	f.used--
	start, end := i, i+1
	merged := block{addr: pos, size: span}
	if i > 0 && !f.blocks[i-1].used {
		start--
		merged.addr = f.blocks[i-1].addr
		merged.size += f.blocks[i-1].size
	}
	if i+1 < len(f.blocks) && !f.blocks[i+1].used {
		end++
		merged.size += f.blocks[i+1].size
	}
	f.splice(start, end-start, []block{merged})
	f.nfree += 2 - (end - start)
	f.made(merged.addr, merged.size)
	return span, true
}

// splice replaces blocks[i:i+n] with r, moving the blocks before i or
// those after i+n, whichever are fewer: an edit near either end of the
// list moves few blocks. Top-down allocations split the free block at the
// bottom of the list, bottom-up ones the free block at its top, and
// oldest-first frees merge at its bottom.
func (f *freeList) splice(i, n int, r []block) {
	l, d := len(f.blocks), len(r)-n
	front := i < l-i-n
	if d > 0 && (front && f.head < d || !front && f.head+l+d > len(f.buf)) {
		f.recenter(l+d, front)
	}
	switch {
	case d != 0 && front:
		copy(f.buf[f.head-d:], f.buf[f.head:f.head+i])
		f.head -= d
	case d != 0:
		copy(f.buf[f.head+i+len(r):], f.buf[f.head+i+n:f.head+l])
	}
	f.blocks = f.buf[f.head : f.head+l+d]
	copy(f.blocks[i:], r)
}

// recenter moves the blocks in their buffer, or to a new one if it has
// less than room for nl blocks and a quarter as many again (+ 16), and
// leaves three quarters of the room on the side that needs it (the front
// or the back): each side then has room for about nl/16 blocks or more,
// so the blocks are moved at most once per nl/32 edits, and a list that
// grows at one end keeps about as much room as an appended slice would.
func (f *freeList) recenter(nl int, front bool) {
	buf := f.buf
	if len(buf)-nl < nl/4+16 {
		buf = make([]block, nl+nl/4+16)
	}
	l := len(f.blocks)
	head := (len(buf) - l) / 4
	if front {
		head = len(buf) - l - head
	}
	copy(buf[head:], f.blocks)
	f.buf, f.head = buf, head
	f.blocks = buf[head : head+l]
}
