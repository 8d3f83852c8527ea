package alloc

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// naiveList is the free list as it was first written: a sorted slice
// edited by copying its tail, and the largest free block found by
// scanning every block. It is the truth the freeList is held to, block
// for block.
type naiveList struct {
	blocks []block
}

func (n *naiveList) init(size uint64) { n.blocks = []block{{addr: 0, size: size}} }

func (n *naiveList) load(bs []Block) {
	n.blocks = n.blocks[:0]
	for _, b := range bs {
		n.blocks = append(n.blocks, block{addr: b.Addr, size: b.Size, used: b.Allocated})
	}
}

func (n *naiveList) largest() uint64 {
	var big uint64
	for _, b := range n.blocks {
		if !b.used && b.size > big {
			big = b.size
		}
	}
	return big
}

func (n *naiveList) allocated() (sum uint64, used int) {
	for _, b := range n.blocks {
		if b.used {
			sum += b.size
			used++
		}
	}
	return sum, used
}

// stats: Manager.Stats of a manager of cfg holding this list.
func (n *naiveList) stats(cfg Config) Statistics {
	sum, _ := n.allocated()
	st := Statistics{TotalAllocatable: cfg.BankSize, TotalAllocated: sum, TotalFree: cfg.BankSize - sum, LargestFreeBlock: n.largest()}
	if sum == 0 {
		st.TotalFree, st.LargestFreeBlock = cfg.BankSize, cfg.BankSize
	}
	return st
}

func (n *naiveList) find(pos uint64) int {
	for i, b := range n.blocks {
		if pos >= b.addr && pos-b.addr < b.size {
			return i
		}
	}
	return -1
}

func (n *naiveList) allocate(span uint64, bottomUp bool) (uint64, bool) {
	i := -1
	for j := range n.blocks {
		k := j
		if !bottomUp {
			k = len(n.blocks) - 1 - j
		}
		if b := n.blocks[k]; !b.used && b.size >= span {
			i = k
			break
		}
	}
	if i < 0 {
		return 0, false
	}
	off := uint64(0)
	if !bottomUp {
		off = n.blocks[i].size - span
	}
	return n.take(i, off, span), true
}

func (n *naiveList) take(i int, off, span uint64) uint64 {
	b := n.blocks[i]
	var parts []block
	if off > 0 {
		parts = append(parts, block{addr: b.addr, size: off})
	}
	parts = append(parts, block{addr: b.addr + off, size: span, used: true})
	if rest := b.size - off - span; rest > 0 {
		parts = append(parts, block{addr: b.addr + off + span, size: rest})
	}
	n.blocks = slices.Replace(n.blocks, i, i+1, parts...)
	return b.addr + off
}

func (n *naiveList) place(pos, span uint64) bool {
	i := n.find(pos)
	if i < 0 || n.blocks[i].used || pos+span > n.blocks[i].addr+n.blocks[i].size {
		return false
	}
	n.take(i, pos-n.blocks[i].addr, span)
	return true
}

func (n *naiveList) free(pos uint64) (uint64, bool) {
	i := n.find(pos)
	if i < 0 || !n.blocks[i].used || n.blocks[i].addr != pos {
		return 0, false
	}
	span := n.blocks[i].size
	start, end := i, i+1
	merged := block{addr: pos, size: span}
	if i > 0 && !n.blocks[i-1].used {
		start--
		merged.addr = n.blocks[i-1].addr
		merged.size += n.blocks[i-1].size
	}
	if i+1 < len(n.blocks) && !n.blocks[i+1].used {
		end++
		merged.size += n.blocks[i+1].size
	}
	n.blocks = slices.Replace(n.blocks, start, end, merged)
	return span, true
}

// checkList compares m's list with the naive one and checks what the
// freeList keeps beside its blocks: the counts, and bySize (a heap, an
// entry for every free block, no more entries than bySizeFull gave for
// the list at its largest since it was made: full).
func checkList(m *Manager, n *naiveList, full int) error {
	f := &m.fl
	if f.head < 0 || f.head+len(f.blocks) > len(f.buf) || len(f.blocks) == 0 || &f.blocks[0] != &f.buf[f.head] {
		return fmt.Errorf("blocks (%d) not at %d in their buffer (%d)", len(f.blocks), f.head, len(f.buf))
	}
	if !slices.Equal(f.blocks, n.blocks) {
		return fmt.Errorf("blocks\n%v\nnaive\n%v", f.blocks, n.blocks)
	}
	sum, used := n.allocated()
	nfree := len(n.blocks) - used
	if f.allocated != sum || f.used != used || f.nfree != nfree {
		return fmt.Errorf("allocated %d used %d free %d, naive %d %d %d", f.allocated, f.used, f.nfree, sum, used, nfree)
	}
	h := f.bySize
	for j := 1; j < len(h); j++ {
		if h[(j-1)/2].size < h[j].size {
			return fmt.Errorf("bySize not a heap at %d: %v", j, h)
		}
	}
	if len(h) > full {
		return fmt.Errorf("bySize holds %d entries for %d free blocks of %d (bySizeFull at most %d)", len(h), nfree, len(n.blocks), full)
	}
	entries := slices.Clone(h)
	slices.SortFunc(entries, func(a, b freeEntry) int { return cmp.Compare(a.addr, b.addr) })
	k := 0
	for _, b := range n.blocks {
		if b.used {
			continue
		}
		for k < len(entries) && entries[k].addr < b.addr {
			k++
		}
		found := false
		for j := k; j < len(entries) && entries[j].addr == b.addr; j++ {
			found = found || entries[j].size == b.size
		}
		if !found {
			return fmt.Errorf("free block [%#x +%d] not in bySize %v", b.addr, b.size, h)
		}
	}
	return nil
}

// listConfigs: lists that hold hundreds to thousands of blocks.
var listConfigs = []Config{
	{Banks: 12, BankSize: 4096 * 32, Offset: 0x40, Alignment: 32, BlockAlign: 32},
	{Banks: 1, BankSize: 3000, Offset: 0, Alignment: 1, BlockAlign: 1},
	{Banks: 64, BankSize: 1 << 20, Offset: 0x18000, Alignment: 16, BlockAlign: 16, AddressLimit: 0x18000 + 1<<16},
	{Banks: 2, BankSize: 64, Offset: 7, Alignment: 1, BlockAlign: 1},
}

// runList drives a Manager and a naiveList with the same Place /
// Allocate / Free / Clear / FromBlocks stream taken from next, comparing
// every result, the statistics and the lists after every step.
func runList(t *testing.T, cfg Config, steps int, next func() uint64) {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var n naiveList
	n.init(cfg.BankSize)
	units := cfg.BankSize / cfg.BlockAlign
	// span: mostly small, so that lists grow long; at times large.
	span := func() uint64 {
		switch next() % 64 {
		case 0:
			return 1 + next()%cfg.BankSize
		case 1, 2:
			return cfg.BlockAlign * (1 + next()%(1+units/16))
		}
		return cfg.BlockAlign * (1 + next()%4)
	}
	// pressure, 2 to 15: the weight of Place and Allocate against Free;
	// it changes now and then, so that lists fill, fragment and empty.
	pressure := uint64(10)
	full := 0
	for step := range steps {
		if next()%1024 == 0 {
			pressure = 2 + next()%14
		}
		wPlace, wAlloc, wFree := 6*pressure, 10*pressure, 12*(16-pressure)
		what := ""
		switch op := next() % (wPlace + wAlloc + wFree + 3); {
		case op < wPlace: // Place inside a free block, or anywhere
			what = "place"
			var pos, s uint64
			if b := n.blocks[next()%uint64(len(n.blocks))]; !b.used && next()%8 != 0 {
				pos = b.addr + next()%b.size
				s = 1 + next()%(b.addr+b.size-pos)
				if next()%4 == 0 {
					pos, s = b.addr, b.size // the whole block
				}
			} else {
				pos, s = next()%(cfg.BankSize+2), span()
			}
			err := m.Place(cfg.Offset+pos, s)
			switch {
			case s == 0 || pos > cfg.BankSize || s > cfg.BankSize-pos:
				if err != ErrOutside {
					t.Fatalf("step %d: Place(%#x, %d) = %v, want ErrOutside", step, pos, s, err)
				}
			case n.place(pos, s):
				if err != nil {
					t.Fatalf("step %d: Place(%#x, %d) = %v, naive placed it", step, pos, s, err)
				}
			case err != ErrOccupied:
				t.Fatalf("step %d: Place(%#x, %d) = %v, want ErrOccupied", step, pos, s, err)
			}
		case op < wPlace+wAlloc: // Allocate
			what = "allocate"
			r := Request{PageSize: 1 + next()%(4*cfg.BlockAlign), BottomUp: next()%2 == 0}
			if next()%4 == 0 {
				r.Shards = 1 + uint32(next()%uint64(cfg.Banks))
			}
			r.Size = r.PageSize * (span() / cfg.BlockAlign * uint64(cfg.Banks) / 2)
			need := m.Need(r)
			before := n.stats(cfg)
			addr, f := m.Allocate(r)
			var pos uint64
			ok := need.Span <= cfg.BankSize
			if ok {
				pos, ok = n.allocate(need.Span, r.BottomUp)
			}
			switch {
			case !ok && f == nil:
				t.Fatalf("step %d: %+v placed at %#x, naive fails", step, r, addr)
			case !ok && (f.Stats != before || f.Cause != before.Classify(need.Span)):
				t.Fatalf("step %d: %+v fails with %+v, naive's stats %+v", step, r, f, before)
			case ok && f == nil && addr != cfg.Offset+pos:
				t.Fatalf("step %d: %+v at %#x, naive at %#x", step, r, addr, cfg.Offset+pos)
			case ok && f != nil && (f.Cause != BelowAddressLimit || f.Address != cfg.Offset+pos || f.Stats != before):
				t.Fatalf("step %d: %+v fails with %+v, naive placed at %#x (stats %+v)", step, r, f, cfg.Offset+pos, before)
			}
		case op < wPlace+wAlloc+wFree: // Free an allocated block, or anything
			what = "free"
			pos := next() % (cfg.BankSize + 2)
			if b := n.blocks[next()%uint64(len(n.blocks))]; next()%8 != 0 {
				pos = b.addr
			}
			got, gok := m.Free(cfg.Offset + pos)
			want, wok := n.free(pos)
			if got != want || gok != wok {
				t.Fatalf("step %d: Free(%#x) = %d %v, naive %d %v", step, pos, got, gok, want, wok)
			}
		case op < wPlace+wAlloc+wFree+1:
			what = "clear"
			if next()%8 == 0 {
				m.Clear()
				n.init(cfg.BankSize)
				full = 0
			}
		case next()%8 != 0:
			what = "nothing"
		default:
			what = "from blocks"
			var bs []Block
			if next()%2 == 0 { // the list as it is
				m.Blocks(func(addr, size uint64, allocated bool) bool {
					bs = append(bs, Block{Addr: addr - cfg.Offset, Size: size, Allocated: allocated})
					return true
				})
			} else { // any tiling, free blocks touching or not
				for pos := uint64(0); pos < cfg.BankSize; {
					s := min(span(), cfg.BankSize-pos)
					bs = append(bs, Block{Addr: pos, Size: s, Allocated: next()%3 != 0})
					pos += s
				}
			}
			if m, err = FromBlocks(cfg, bs); err != nil {
				t.Fatalf("step %d: FromBlocks: %v", step, err)
			}
			n.load(bs)
			full = 0
		}
		if got, want := m.Stats(), n.stats(cfg); got != want {
			t.Fatalf("step %d (%s): stats %+v, naive %+v", step, what, got, want)
		}
		full = max(full, m.fl.bySizeFull())
		if err := checkList(m, &n, full); err != nil {
			t.Fatalf("step %d (%s): %v", step, what, err)
		}
	}
}

// TestFreeList: long random streams, the freeList against the naive list
// after every step.
func TestFreeList(t *testing.T) {
	steps := 20_000
	if testing.Short() {
		steps = 2_000
	}
	for i, cfg := range listConfigs {
		for seed := range uint64(4) {
			rng := rand.New(rand.NewPCG(seed, 100+uint64(i)))
			runList(t, cfg, steps, rng.Uint64)
		}
	}
}

func FuzzFreeList(f *testing.F) {
	f.Add(uint8(0), []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add(uint8(1), []byte("place, allocate, free, clear, read a list"))
	f.Add(uint8(3), []byte("\x00\x00\x10\x00\xff\xff\x00\x01\x02\x00\x00\x00\x3f\x00\x3e\x00"))
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		cfg := listConfigs[int(which)%len(listConfigs)]
		next := func() uint64 {
			if len(data) < 2 {
				return 0
			}
			v := binary.LittleEndian.Uint16(data)
			data = data[2:]
			return uint64(v)
		}
		runList(t, cfg, len(data)/4, next)
	})
}

// TestFreeListChurn: one block placed and freed again and again, with
// Stats between, gives the same free block back each time; bySize does
// not keep every copy of its entry.
func TestFreeListChurn(t *testing.T) {
	cfg := Config{Banks: 1, BankSize: 1 << 20, Alignment: 32, BlockAlign: 32}
	m := mustNew(t, cfg)
	var n naiveList
	n.init(cfg.BankSize)
	for i := range 100 {
		if err := m.Place(uint64(i)*64, 32); err != nil || !n.place(uint64(i)*64, 32) {
			t.Fatal(err)
		}
	}
	for i := range 10_000 {
		pos := uint64(i%3) * 64 * 50 // the bottom, the middle, the top block
		if i%3 == 2 {
			pos = 100 * 64
		}
		if err := m.Place(pos+32, 32); err != nil || !n.place(pos+32, 32) {
			t.Fatalf("%d: place %#x: %v", i, pos+32, err)
		}
		m.Stats()
		if _, ok := m.Free(pos + 32); !ok {
			t.Fatalf("%d: free %#x", i, pos+32)
		}
		n.free(pos + 32)
		if got, want := m.Stats(), n.stats(cfg); got != want {
			t.Fatalf("%d: stats %+v, naive %+v", i, got, want)
		}
		if err := checkList(m, &n, m.fl.bySizeFull()); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
	}
}

// TestFreeListEnds: streams that edit the list at one end or the other
// (top-down allocations at its bottom; oldest-first frees at its bottom
// while bottom-up allocations go on at its top), which move its blocks
// in their buffer or to a new one, against the naive list.
func TestFreeListEnds(t *testing.T) {
	cfg := Config{Banks: 1, BankSize: 1 << 20, Alignment: 32, BlockAlign: 32}
	m := mustNew(t, cfg)
	var n naiveList
	n.init(cfg.BankSize)
	check := func(what string, i int) {
		t.Helper()
		if got, want := m.Stats(), n.stats(cfg); got != want {
			t.Fatalf("%s %d: stats %+v, naive %+v", what, i, got, want)
		}
		if err := checkList(m, &n, m.fl.bySizeFull()); err != nil {
			t.Fatalf("%s %d: %v", what, i, err)
		}
	}
	r := Request{Size: 64, PageSize: 64}
	for i := range 3000 { // top-down, 3000 blocks
		if _, f := m.Allocate(r); f != nil {
			t.Fatal(f)
		}
		n.allocate(64, false)
		check("top-down", i)
	}
	for i := range 2500 { // the oldest top-down ones freed
		pos := cfg.BankSize - 64*uint64(i+1)
		if _, ok := m.Free(pos); !ok {
			t.Fatalf("free %#x", pos)
		}
		n.free(pos)
		check("free", i)
	}
	r.BottomUp = true
	for i := range 6000 { // bottom-up, with the oldest freed
		a, f := m.Allocate(r)
		if f != nil {
			t.Fatal(f)
		}
		n.allocate(64, true)
		if i >= 1000 {
			m.Free(a - 1000*64)
			n.free(a - 1000*64)
		}
		check("fifo", i)
	}
}
