package ttmetal

import (
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/alloc"
	"github.com/tttrace/tttrace/procfs"
)

// fakeMem is a process's memory: regions at addresses; reads outside fail.
type fakeMem map[uint64][]byte

func (m fakeMem) ReadAt(p []byte, off int64) (int, error) {
	for base, b := range m {
		if uint64(off) >= base && uint64(off)+uint64(len(p)) <= base+uint64(len(b)) {
			return copy(p, b[uint64(off)-base:]), nil
		}
	}
	return 0, errors.New("EIO")
}

var testBMLayout = BankManagerLayout{BufferType: 0, BankMap: 8, AddressLimit: 64, Alignment: 72, Allocators: 80,
	MaxSize: 8, Offset: 16, MinAlloc: 24, FreeAlign: 32, Shrink: 40,
	BlockAddress: 64, BlockSize: 88, BlockPrev: 112, BlockNext: 136, BlockAllocated: 160, MetaAllocated: 184}

type testSlot struct {
	addr, size uint64
	prev, next int64
	alloc      bool
	meta       bool
}

// bmMemory lays out a bank manager (at 0x1000) of 12 banks whose allocator 0
// (at 0x2000) holds slots.
func bmMemory(slots []testSlot, bankSize uint64) fakeMem {
	le := binary.LittleEndian
	bm := make([]byte, 128)
	le.PutUint32(bm[0:], 0)       // DRAM
	le.PutUint64(bm[8+24:], 12)   // banks
	le.PutUint32(bm[72:], 32)     // alignment
	le.PutUint64(bm[80:], 0x1800) // allocators_ data
	le.PutUint32(bm[88:], 1)
	vecs := make([]byte, 8)
	le.PutUint64(vecs, 0x2000)
	fl := make([]byte, 256)
	le.PutUint64(fl[8:], bankSize)
	le.PutUint64(fl[16:], 0x20)
	le.PutUint64(fl[24:], 32)
	le.PutUint64(fl[32:], 32)
	mem := fakeMem{0x1000: bm, 0x1800: vecs, 0x2000: fl}
	n := uint64(len(slots))
	arrays := []struct {
		off  int
		elem uint64
		get  func(s testSlot) uint64
	}{
		{64, 8, func(s testSlot) uint64 { return s.addr }},
		{88, 8, func(s testSlot) uint64 { return s.size }},
		{112, 8, func(s testSlot) uint64 { return uint64(s.prev) }},
		{136, 8, func(s testSlot) uint64 { return uint64(s.next) }},
		{160, 1, func(s testSlot) uint64 { return b2u(s.alloc) }},
		{184, 1, func(s testSlot) uint64 { return b2u(s.meta) }},
	}
	// Arrays apart by at least 64 KiB, and by more than the longest.
	stride := max(uint64(0x10000), (n*8+0xffff)&^0xffff)
	for i, a := range arrays {
		base := 0x10000 + stride*uint64(i)
		buf := make([]byte, n*a.elem)
		for j, s := range slots {
			if a.elem == 8 {
				le.PutUint64(buf[uint64(j)*8:], a.get(s))
			} else {
				buf[j] = byte(a.get(s))
			}
		}
		mem[base] = buf
		le.PutUint64(fl[a.off:], base)
		le.PutUint64(fl[a.off+8:], base+n*a.elem)
	}
	return mem
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func TestReadBankManager(t *testing.T) {
	// Blocks in slot order 2, 0, 1 in address order; slot 3 stale.
	good := []testSlot{
		{addr: 0x100, size: 0x200, prev: 2, next: 1, alloc: true, meta: true},
		{addr: 0x300, size: 0xd00, prev: 0, next: -1, meta: true},
		{addr: 0, size: 0x100, prev: -1, next: 0, meta: true},
		{addr: 0, size: 0x5000, prev: -1, next: -1, alloc: false, meta: false},
	}
	m, err := ReadBankManager(bmMemory(good, 0x1000), 0x1000, &testBMLayout)
	if err != nil {
		t.Fatal(err)
	}
	if m.Banks != 12 || m.BankSize != 0x1000 || m.Offset != 0x20 || m.BlockAlign != 32 || m.Alignment != 32 || len(m.Blocks) != 3 {
		t.Fatalf("read %+v", m)
	}
	want := []alloc.Block{{Addr: 0, Size: 0x100}, {Addr: 0x100, Size: 0x200, Allocated: true}, {Addr: 0x300, Size: 0xd00}}
	for i, b := range m.Blocks {
		if b != want[i] {
			t.Errorf("block %d = %+v, want %+v", i, b, want[i])
		}
	}
	bad := map[string]struct {
		mutate func([]testSlot) []testSlot
		want   string
	}{
		"loop":       {func(s []testSlot) []testSlot { s[1].next = 0; return s }, "does not follow"},
		"self loop":  {func(s []testSlot) []testSlot { s[0].next = 0; return s }, "does not follow"},
		"gap":        {func(s []testSlot) []testSlot { s[1].addr = 0x310; return s }, "does not follow"},
		"short":      {func(s []testSlot) []testSlot { s[1].size = 0x100; return s }, "cover"},
		"past bank":  {func(s []testSlot) []testSlot { s[1].size = 0x10000; return s }, "does not follow"},
		"two heads":  {func(s []testSlot) []testSlot { s[3].meta = true; return s }, "two first blocks"},
		"no head":    {func(s []testSlot) []testSlot { s[2].prev = 1; return s }, "no first block"},
		"next range": {func(s []testSlot) []testSlot { s[0].next = 99; return s }, "chain broken"},
		"stale next": {func(s []testSlot) []testSlot { s[0].next = 3; return s }, "chain broken"},
	}
	for name, c := range bad {
		slots := c.mutate(append([]testSlot(nil), good...))
		if _, err := ReadBankManager(bmMemory(slots, 0x1000), 0x1000, &testBMLayout); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", name, err, c.want)
		}
	}
	// Vectors of different lengths, a huge vector, unreadable memory.
	mem := bmMemory(good, 0x1000)
	binary.LittleEndian.PutUint64(mem[0x2000][64+8:], 0x10000+8*2)
	if _, err := ReadBankManager(mem, 0x1000, &testBMLayout); err == nil || !strings.Contains(err.Error(), "differ in length") {
		t.Errorf("lengths: %v", err)
	}
	mem = bmMemory(good, 0x1000)
	binary.LittleEndian.PutUint64(mem[0x2000][64+8:], 0x10000+8*(MaxMemBlocks+1))
	if _, err := ReadBankManager(mem, 0x1000, &testBMLayout); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("huge: %v", err)
	}
	if _, err := ReadBankManager(bmMemory(good, 0x1000), 0x9000, &testBMLayout); err == nil {
		t.Error("unreadable manager read")
	}
	mem = bmMemory(good, 0x1000)
	binary.LittleEndian.PutUint64(mem[0x2000][40:], 64) // shrunk
	if _, err := ReadBankManager(mem, 0x1000, &testBMLayout); err == nil || !strings.Contains(err.Error(), "shrunk") {
		t.Errorf("shrunk: %v", err)
	}
}

func TestBareTypeName(t *testing.T) {
	for in, want := range map[string]string{
		"class std::vector<long unsigned int, std::allocator<long unsigned int> >": "vector<long unsigned int, std::allocator<long unsigned int> >",
		"boost::container::small_vector<int, 8>":                                   "SmallVector<int, 8>",
		"class SmallVector<std::unique_ptr<tt::X> >":                               "SmallVector<std::unique_ptr<tt::X> >",
	} {
		if got := bareTypeName(in); got != want {
			t.Errorf("bareTypeName(%q) = %q, want %q", in, got, want)
		}
	}
}

// countMem counts the reads and bytes served from mem.
type countMem struct {
	mem          io.ReaderAt
	reads, bytes int
}

func (c *countMem) ReadAt(p []byte, off int64) (int, error) {
	c.reads++
	c.bytes += len(p)
	return c.mem.ReadAt(p, off)
}

// A walk reads a list two managers share once, hands its blocks out per
// manager within its bound, and refuses a read past its memory's budget
// before allocating what a crafted length asks for.
func TestMemWalkBudget(t *testing.T) {
	slots := []testSlot{
		{addr: 0, size: 0x100, prev: -1, next: 1, alloc: true, meta: true},
		{addr: 0x100, size: 0xf00, prev: 0, next: -1, meta: true},
	}
	mem := bmMemory(slots, 0x1000)
	mem[0x3000] = append([]byte(nil), mem[0x1000]...) // a second manager, its list the same
	cm := &countMem{mem: mem}
	budget := procfs.MemBudget{Bytes: 1 << 20, Reads: 1000}
	blocks := int64(3)
	w := NewMemWalk(procfs.NewMem(cm, &budget), &blocks)
	a, err := w.ReadBankManager(0x1000, &testBMLayout)
	if err != nil || len(a.Blocks) != 2 || blocks != 1 {
		t.Fatalf("first: %+v %v, %d blocks left", a, err, blocks)
	}
	first := cm.bytes
	if _, err := w.ReadBankManager(0x3000, &testBMLayout); !errors.Is(err, procfs.ErrMemBudget) {
		t.Errorf("second, 2 blocks with 1 left: %v", err)
	}
	if again := cm.bytes - first; again > 64 {
		t.Errorf("the shared list read again: %d more bytes (the first read %d)", again, first)
	}
	if int64(cm.bytes) != 1<<20-budget.Bytes || int64(cm.reads) != 1000-budget.Reads {
		t.Errorf("%d bytes in %d reads served, budget charged %d in %d", cm.bytes, cm.reads, 1<<20-budget.Bytes, 1000-budget.Reads)
	}

	// A block vector that says it holds MaxMemBlocks slots (8 MiB), with
	// 1 MiB to read: refused, and not allocated whole.
	mem = bmMemory(slots, 0x1000)
	le := binary.LittleEndian
	le.PutUint64(mem[0x2000][64+8:], 0x10000+8*MaxMemBlocks)
	budget = procfs.MemBudget{Bytes: 1 << 20, Reads: 1000}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = NewMemWalk(procfs.NewMem(mem, &budget), nil).ReadBankManager(0x1000, &testBMLayout)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, procfs.ErrMemBudget) {
		t.Errorf("8 MiB with 1 MiB left: %v", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 2<<20 {
		t.Errorf("%d bytes allocated for a read refused", n)
	}
}
