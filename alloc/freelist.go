package alloc

import "sort"

// freeList is FreeListOpt's block list as a sorted slice: blocks cover
// [0, size) without gaps, in address order; no two free blocks touch
// (a freed block merges with free neighbours, as upstream's does).
//
// Upstream keeps free blocks in size classes, each sorted by address, and
// with SearchPolicy::FIRST (what BankManager asks for) takes, over the
// classes that can hold the span, the block of the lowest address
// (bottom-up) or the highest (top-down): a block of a smaller class is
// smaller than the span. So the choice is the extreme-address free block
// that fits, which is what allocate scans for here.
type freeList struct {
	blocks    []block
	allocated uint64 // sum of the allocated blocks' sizes
	used      int    // allocated blocks
	// largest free block, valid while !dirty
	big   uint64
	dirty bool
}

type block struct {
	addr, size uint64
	used       bool
}

func (f *freeList) init(size uint64) {
	f.blocks = append(f.blocks[:0], block{addr: 0, size: size})
	f.allocated, f.used = 0, 0
	f.big, f.dirty = size, false
}

func (f *freeList) largest() uint64 {
	if f.dirty {
		f.big = 0
		for _, b := range f.blocks {
			if !b.used && b.size > f.big {
				f.big = b.size
			}
		}
		f.dirty = false
	}
	return f.big
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
	f.dirty = f.dirty || b.size == f.big
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
	f.blocks = splice(f.blocks, i, 1, parts[:n])
	f.allocated += span
	f.used++
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
	f.blocks = splice(f.blocks, start, end-start, []block{merged})
	if !f.dirty && merged.size > f.big {
		f.big = merged.size
	}
	return span, true
}

// splice replaces s[i:i+n] with r.
func splice(s []block, i, n int, r []block) []block {
	switch d := len(r) - n; {
	case d > 0:
		s = append(s, make([]block, d)...)
		copy(s[i+len(r):], s[i+n:len(s)-d])
	case d < 0:
		copy(s[i+len(r):], s[i+n:])
		s = s[:len(s)+d]
	}
	copy(s[i:], r)
	return s
}
