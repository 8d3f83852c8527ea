package alloc

import (
	"testing"
)

func mustNew(t *testing.T, c Config) *Manager {
	t.Helper()
	m, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSizePerBank(t *testing.T) {
	for _, tc := range []struct {
		name        string
		size, page  uint64
		banks       uint32
		align, want uint64
	}{
		// 25344 pages of 4 KiB over 12 DRAM banks: 2112 pages each. The
		// numbers of a real Out of Memory message (103809024 B DRAM buffer
		// across 12 banks, each bank needs to store 8650752 B).
		{"dram 12 banks", 103809024, 4096, 12, 32, 8650752},
		// 10 pages over 4 banks: 3 pages each, every page rounded 1000 -> 1024.
		{"uneven pages", 10000, 1000, 4, 32, 3 * 1024},
		// Fewer pages than banks: every bank still takes one page.
		{"one page", 2048, 2048, 64, 16, 2048},
		// A partial page is dropped (size is a multiple of the page upstream).
		{"partial page", 5000, 2048, 1, 32, 2 * 2048},
		{"zero page", 4096, 0, 8, 32, 0},
		{"zero size", 0, 1024, 8, 32, 0},
		{"page below size", 100, 200, 8, 32, 0},
		// A sharded buffer over 8 cores: 32 pages, 4 per core.
		{"sharded", 32 * 2048, 2048, 8, 16, 4 * 2048},
		{"saturates", 1 << 63, 1, 1, 1 << 20, ^uint64(0)},
	} {
		if got := SizePerBank(tc.size, tc.page, tc.banks, tc.align); got != tc.want {
			t.Errorf("%s: SizePerBank(%d, %d, %d, %d) = %d, want %d", tc.name, tc.size, tc.page, tc.banks, tc.align, got, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{Banks: 12, BankSize: 1 << 30, Offset: 0x40, Alignment: 32, BlockAlign: 32}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Config{
		{Banks: 0, BankSize: 1, Alignment: 1, BlockAlign: 1},
		{Banks: MaxBanks + 1, BankSize: 1, Alignment: 1, BlockAlign: 1},
		{Banks: 1, BankSize: 0, Alignment: 1, BlockAlign: 1},
		{Banks: 1, BankSize: MaxBankSize + 1, Alignment: 1, BlockAlign: 1},
		{Banks: 1, BankSize: 1, Alignment: 0, BlockAlign: 1},
		{Banks: 1, BankSize: 1, Alignment: 1, BlockAlign: 0},
		{Banks: 1, BankSize: 1, Alignment: 1, BlockAlign: MaxAlignment + 1},
		{Banks: 1, BankSize: 1, Offset: MaxBankSize + 1, Alignment: 1, BlockAlign: 1},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}

// TestLockstep walks one bank manager through a stream whose every state
// is worked out by hand: 4 banks of 4096 bytes at 0x1000, pages rounded to
// 32 and spans to 64.
func TestLockstep(t *testing.T) {
	m := mustNew(t, Config{Banks: 4, BankSize: 4096, Offset: 0x1000, Alignment: 32, BlockAlign: 64})
	st := func(alloc, free, largest uint64) Statistics {
		return Statistics{TotalAllocatable: 4096, TotalAllocated: alloc, TotalFree: free, LargestFreeBlock: largest}
	}
	check := func(step string, want Statistics) {
		t.Helper()
		if got := m.Stats(); got != want {
			t.Fatalf("%s: stats %+v, want %+v", step, got, want)
		}
	}
	check("empty", st(0, 4096, 4096))

	// 8 pages of 1000 B over 4 banks: 2 pages of 1024 = 2048 per bank.
	a, f := m.Allocate(Request{Size: 8000, PageSize: 1000, BottomUp: true})
	if f != nil || a != 0x1000 {
		t.Fatalf("first bottom-up: %#x %+v", a, f)
	}
	check("a", st(2048, 2048, 2048))

	// 1 page of 10 B: size per bank 32, span one block of 64; top-down
	// takes the top of the free block.
	b, f := m.Allocate(Request{Size: 10, PageSize: 10})
	if f != nil || b != 0x1000+4096-64 {
		t.Fatalf("top-down: %#x %+v", b, f)
	}
	check("b", st(2112, 1984, 1984))

	// Bottom-up again: right after a.
	c, f := m.Allocate(Request{Size: 4 * 512, PageSize: 512, BottomUp: true})
	if f != nil || c != 0x1000+2048 {
		t.Fatalf("second bottom-up: %#x %+v", c, f)
	}
	check("c", st(2112+512, 1984-512, 1472))

	// Free a: a 2048 hole below c, 1472 free above c.
	if span, ok := m.Free(a); !ok || span != 2048 {
		t.Fatalf("free a: %d %v", span, ok)
	}
	check("free a", st(576, 3520, 2048))

	// 2560 per bank: 3520 free, but the largest block is 2048.
	if _, f := m.Allocate(Request{Size: 4 * 2560, PageSize: 2560, BottomUp: true}); f == nil || f.Cause != Fragmented ||
		f.Need != (Need{Banks: 4, SizePerBank: 2560, Span: 2560}) || f.Stats != st(576, 3520, 2048) || f.BankSize != 4096 {
		t.Fatalf("fragmented: %+v", f)
	}
	// 3584 per bank: more than free.
	if _, f := m.Allocate(Request{Size: 4 * 3584, PageSize: 3584}); f == nil || f.Cause != Exhausted {
		t.Fatalf("exhausted: %+v", f)
	}
	// 8192 per bank: more than the bank.
	if _, f := m.Allocate(Request{Size: 4 * 8192, PageSize: 8192}); f == nil || f.Cause != LargerThanBank || f.Need.SizePerBank != 8192 {
		t.Fatalf("larger than bank: %+v", f)
	}
	// A sharded buffer over 2 cores: 2 pages of 1024 each = 2048: top-down
	// takes the highest fitting block: the 2048 hole (the block above c
	// holds 1472).
	d, f := m.Allocate(Request{Size: 4 * 1024, PageSize: 1024, Shards: 2})
	if f != nil || d != 0x1000 {
		t.Fatalf("sharded: %#x %+v", d, f)
	}
	check("d", st(2624, 1472, 1472))
	// The failures changed nothing; freeing c merges the two free blocks
	// around it into 1984 (1472 + 512).
	m.Free(c)
	check("free c", st(2112, 1984, 1984))
	if _, ok := m.Free(c); ok {
		t.Fatal("second free of c succeeded")
	}
	if _, ok := m.Free(c + 64); ok {
		t.Fatal("free inside a free block succeeded")
	}
	m.Free(b)
	m.Free(d)
	check("all freed", st(0, 4096, 4096))
	if n := blockCount(m); n != 1 {
		t.Fatalf("%d blocks after every free, want 1", n)
	}
}

func blockCount(m *Manager) int {
	n := 0
	m.Blocks(func(uint64, uint64, bool) bool { n++; return true })
	return n
}

// TestOOMMessage checks the classification against the numbers of a real
// upstream message: "Out of Memory: Not enough space to allocate
// 103809024 B DRAM buffer across 12 banks, where each bank needs to store
// 8650752 B, but bank size is 1071821792 B (allocated: 1045427008 B, free:
// 26394784 B, largest free block: 6894496 B)".
func TestOOMMessage(t *testing.T) {
	const bank = 1071821792
	m := mustNew(t, Config{Banks: 12, BankSize: bank, Alignment: 32, BlockAlign: 32})
	// Build that state: allocated blocks, with free holes of 6894496 (the
	// largest) and the rest of the free bytes in holes of 6 MB.
	free := uint64(26394784)
	holes := []uint64{6894496}
	for rest := free - 6894496; rest > 0; {
		h := min(rest, 6000000)
		holes = append(holes, h)
		rest -= h
	}
	pos := uint64(0)
	var gaps []uint64
	for _, h := range holes {
		if err := m.Place(pos, 1024); err != nil { // a separator
			t.Fatal(err)
		}
		pos += 1024
		gaps = append(gaps, pos)
		if err := m.Place(pos, h); err != nil {
			t.Fatal(err)
		}
		pos += h
	}
	if err := m.Place(pos, bank-pos); err != nil {
		t.Fatal(err)
	}
	for _, g := range gaps {
		if _, ok := m.Free(g); !ok {
			t.Fatal("free of a hole failed")
		}
	}
	want := Statistics{TotalAllocatable: bank, TotalAllocated: 1045427008, TotalFree: 26394784, LargestFreeBlock: 6894496}
	if got := m.Stats(); got != want {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
	_, f := m.Allocate(Request{Size: 103809024, PageSize: 4096, BottomUp: true})
	if f == nil || f.Cause != Fragmented || f.Need.SizePerBank != 8650752 || f.Need.Banks != 12 || f.Stats != want {
		t.Fatalf("failure %+v", f)
	}
}

func TestPlace(t *testing.T) {
	m := mustNew(t, Config{Banks: 1, BankSize: 1024, Offset: 100, Alignment: 1, BlockAlign: 1})
	for _, tc := range []struct {
		addr, span uint64
		err        error
	}{
		{99, 10, ErrOutside},
		{100, 0, ErrOutside},
		{1120, 10, ErrOutside},
		{1100, 25, ErrOutside},
		{^uint64(0), 2, ErrOutside},
		{200, 100, nil},
		{250, 10, ErrOccupied},
		{150, 60, ErrOccupied},
		{150, 50, nil},
		{1100, 24, nil},
	} {
		if err := m.Place(tc.addr, tc.span); err != tc.err {
			t.Errorf("Place(%d, %d) = %v, want %v", tc.addr, tc.span, err, tc.err)
		}
	}
	want := Statistics{TotalAllocatable: 1024, TotalAllocated: 174, TotalFree: 850, LargestFreeBlock: 800}
	if got := m.Stats(); got != want {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
	m.Clear()
	if got := m.Stats(); got != (Statistics{1024, 0, 1024, 1024}) || m.Live() != 0 || blockCount(m) != 1 {
		t.Fatalf("after clear: %+v", got)
	}
}

// TestAddressLimit: upstream takes the block before it checks the limit,
// and the block stays taken.
func TestAddressLimit(t *testing.T) {
	m := mustNew(t, Config{Banks: 2, BankSize: 1024, Offset: 0, Alignment: 32, BlockAlign: 32, AddressLimit: 512})
	a, f := m.Allocate(Request{Size: 2 * 256, PageSize: 256})
	if f != nil || a != 768 {
		t.Fatalf("%#x %+v", a, f)
	}
	_, f = m.Allocate(Request{Size: 2 * 512, PageSize: 512})
	if f == nil || f.Cause != BelowAddressLimit || f.Address != 256 || f.Stats.TotalAllocated != 256 {
		t.Fatalf("%+v", f)
	}
	if got := m.Stats().TotalAllocated; got != 768 {
		t.Fatalf("allocated %d after the failure, want 768 (the block stays taken)", got)
	}
	// A sharded buffer is not held to the limit.
	if a, f := m.Allocate(Request{Size: 256, PageSize: 256, Shards: 1}); f != nil || a != 0 {
		t.Fatalf("sharded: %#x %+v", a, f)
	}
}

func TestCauseNames(t *testing.T) {
	for c := Exhausted; c <= BelowAddressLimit; c++ {
		if p, ok := ParseCause(c.String()); !ok || p != c {
			t.Errorf("%d: %q parses to %d %v", c, c.String(), p, ok)
		}
	}
	if _, ok := ParseCause(""); ok {
		t.Error(`"" parsed`)
	}
}

func TestFromBlocks(t *testing.T) {
	cfg := Config{Banks: 2, BankSize: 0x1000, Offset: 0x40, Alignment: 32, BlockAlign: 32}
	m, err := FromBlocks(cfg, []Block{{0, 0x100, true}, {0x100, 0x300, false}, {0x400, 0x100, true}, {0x500, 0xb00, false}})
	if err != nil {
		t.Fatal(err)
	}
	if st := m.Stats(); st != (Statistics{0x1000, 0x200, 0xe00, 0xb00}) {
		t.Fatalf("%+v", st)
	}
	if size, ok := m.AllocatedAt(0x440); !ok || size != 0x100 || !m.Holds(0x40, 0x100) || m.Holds(0x140, 0x300) {
		t.Fatal("blocks not where read")
	}
	// The list goes on as upstream's: a free merges, an allocation is first fit.
	if _, ok := m.Free(0x440); !ok {
		t.Fatal("free")
	}
	if a, f := m.Allocate(Request{Size: 0x400, PageSize: 0x200, BottomUp: true}); f != nil || a != 0x140 {
		t.Fatalf("allocate at %#x, %+v", a, f)
	}
	for name, bs := range map[string][]Block{
		"gap":   {{0, 0x100, true}, {0x200, 0xe00, false}},
		"short": {{0, 0x100, true}},
		"past":  {{0, 0x2000, false}},
		"empty": {{0, 0, false}, {0, 0x1000, false}},
	} {
		if _, err := FromBlocks(cfg, bs); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
