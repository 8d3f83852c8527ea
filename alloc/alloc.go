// Package alloc models one TT-Metal bank manager: the allocator of one
// buffer type (DRAM, L1, L1_SMALL, TRACE) of one chip's (or one mesh's)
// allocator, as upstream's BankManager over a FreeListOpt builds it
// (tt_metal/impl/allocator/bank_manager.cpp,
// algorithms/free_list_opt.cpp; the facts are in docs/ttmetal.md,
// "The allocator").
//
// All banks of a type move in lockstep: they share one free list, and an
// allocation reserves the same span at the same address in every bank (or
// in every bank of its shard cores). So every number here is per bank, as
// Allocator::get_statistics returns them, and a Manager holds one free
// list whatever the number of banks.
//
// A Manager is a pure, deterministic model: it places a request where
// upstream's free list would (Allocate), or records a placement it was
// told of (Place), frees, clears, and gives the four statistics and the
// cause of a failed allocation. It never panics on any input: sizes and
// addresses from a traced process are hostile. It is not safe for
// concurrent use.
package alloc

import (
	"errors"
	"fmt"
	"math/bits"
)

// Limits on a Config, far above any real chip, so that every sum and
// product below stays far from uint64 wrap-around.
const (
	MaxBanks     = 1 << 20
	MaxBankSize  = 1 << 44 // 16 TiB per bank
	MaxAlignment = 1 << 20
	// MaxRequest bounds a request's size (1 TiB, as the ledger's maxSize).
	MaxRequest = 1 << 40
)

// Config is what one BankManager is made of: its constructor's arguments
// (BankManager(type, bank offsets | bank map, size_bytes,
// [interleaved_address_limit,] alignment_bytes, alloc_offset, ...)) and
// the alignment its free list was given.
type Config struct {
	// Banks: the number of banks (bank offsets, or entries of the bank
	// map): DRAM channels for DRAM and TRACE, worker cores for L1 and
	// L1_SMALL. An interleaved buffer spreads its pages over all of them.
	Banks uint32
	// BankSize: allocatable bytes per bank, the free list's size
	// (size_bytes): get_statistics' total_allocatable_size_bytes.
	BankSize uint64
	// Offset: the address of the free list's first byte (alloc_offset):
	// addresses are Offset + a position in the list.
	Offset uint64
	// Alignment: the bank manager's alignment_bytes, to which a page is
	// rounded up when pages are spread over the banks.
	Alignment uint64
	// BlockAlign: the free list's min_allocation_size and alignment (a
	// span is rounded up to it, and is at least it). Upstream passes the
	// HAL's DRAM alignment to every bank manager's free list, L1 included.
	BlockAlign uint64
	// AddressLimit: interleaved_address_limit; an interleaved allocation
	// placed below it fails after taking its block (upstream throws after
	// the free list split). 0: none.
	AddressLimit uint64
}

// Validate says what is wrong with c, if anything.
func (c Config) Validate() error {
	switch {
	case c.Banks == 0 || c.Banks > MaxBanks:
		return fmt.Errorf("%d banks (want 1..%d)", c.Banks, MaxBanks)
	case c.BankSize == 0 || c.BankSize > MaxBankSize:
		return fmt.Errorf("bank size %d (want 1..%d)", c.BankSize, uint64(MaxBankSize))
	case c.Offset > MaxBankSize:
		return fmt.Errorf("offset %#x above %#x", c.Offset, uint64(MaxBankSize))
	case c.Alignment == 0 || c.Alignment > MaxAlignment:
		return fmt.Errorf("alignment %d (want 1..%d)", c.Alignment, MaxAlignment)
	case c.BlockAlign == 0 || c.BlockAlign > MaxAlignment:
		return fmt.Errorf("block alignment %d (want 1..%d)", c.BlockAlign, MaxAlignment)
	case c.AddressLimit > 2*MaxBankSize:
		return fmt.Errorf("address limit %#x above %#x", c.AddressLimit, uint64(2*MaxBankSize))
	}
	return nil
}

// Statistics are the four numbers of Allocator::get_statistics(type),
// every one per bank.
type Statistics struct {
	TotalAllocatable uint64 `json:"total_allocatable_size_bytes"`
	TotalAllocated   uint64 `json:"total_allocated_bytes"`
	TotalFree        uint64 `json:"total_free_bytes"`
	LargestFreeBlock uint64 `json:"largest_free_block_bytes"`
}

// Cause is why an allocation failed.
type Cause uint8

const (
	// CauseNone: the allocation did not fail.
	CauseNone Cause = iota
	// Exhausted: the free bytes per bank are fewer than a bank needs.
	Exhausted
	// Fragmented: enough bytes are free per bank, but no free block is
	// large enough.
	Fragmented
	// LargerThanBank: a bank needs more than the bank's size.
	LargerThanBank
	// BelowAddressLimit: an interleaved allocation landed below the bank
	// manager's interleaved address limit; upstream throws after taking
	// the block, which stays taken. Not reachable in builds whose limit
	// is the free list's base (2025-2026 L1 and L1_SMALL).
	BelowAddressLimit
)

var causeNames = [...]string{"", "exhausted", "fragmented", "larger_than_bank", "below_address_limit"}

// String is the cause's name in the NDJSON contract.
func (c Cause) String() string {
	if int(c) < len(causeNames) {
		return causeNames[c]
	}
	return fmt.Sprintf("cause(%d)", uint8(c))
}

// ParseCause is the inverse of String, for the failed causes.
func ParseCause(s string) (Cause, bool) {
	for i := 1; i < len(causeNames); i++ {
		if causeNames[i] == s {
			return Cause(i), true
		}
	}
	return CauseNone, false
}

// Request is one BankManager::allocate_buffer call: the buffer's (aligned)
// size and page size, its shard count and direction.
type Request struct {
	Size     uint64
	PageSize uint64
	// Shards: num_shards, the cores of a sharded buffer (its pages are
	// spread over them, not over every bank); 0: interleaved.
	Shards   uint32
	BottomUp bool
}

// Need is what a request asks of every bank.
type Need struct {
	// Banks: the banks the pages are spread over (Shards, or every bank).
	Banks uint32
	// SizePerBank: upstream's size_per_bank (the number its Out of Memory
	// message gives): ceil(pages / banks) pages, each rounded up to the
	// bank manager's alignment.
	SizePerBank uint64
	// Span: what the free list reserves in each bank: SizePerBank rounded
	// up to the free list's alignment, at least that alignment.
	Span uint64
}

// Failure is a failed allocation: the cause and the state the allocator
// was in when it refused (the numbers upstream's message gives).
type Failure struct {
	Cause Cause
	Need  Need
	// BankSize: the bank's allocatable size.
	BankSize uint64
	// Stats: the statistics at the moment of the failure, before it (for
	// BelowAddressLimit, the block it took is not in them).
	Stats Statistics
	// Address: for BelowAddressLimit, where the span landed (and stays).
	Address uint64
}

// SizePerBank is upstream's detail::calculate_bank_size_spread: size is
// cut into pages of pageSize, the pages are spread evenly over banks
// (ceil), and each page takes pageSize rounded up to alignment. A zero
// page size gives 0. Results that would pass 2^64 saturate.
func SizePerBank(size, pageSize uint64, banks uint32, alignment uint64) uint64 {
	if pageSize == 0 || banks == 0 {
		return 0
	}
	pages := size / pageSize
	if pages == 0 {
		return 0
	}
	perBank := 1 + (pages-1)/uint64(banks)
	hi, lo := bits.Mul64(perBank, roundUp(pageSize, alignment))
	if hi != 0 {
		return ^uint64(0)
	}
	return lo
}

// roundUp rounds v up to a multiple of a (a > 0), saturating.
func roundUp(v, a uint64) uint64 {
	if a <= 1 {
		return v
	}
	r := v % a
	if r == 0 {
		return v
	}
	if v > ^uint64(0)-(a-r) {
		return ^uint64(0) - (^uint64(0) % a)
	}
	return v + (a - r)
}

// Manager is one bank manager's free list. The zero value is not usable;
// call New.
type Manager struct {
	cfg Config
	fl  freeList
}

// New returns an empty manager of cfg.
func New(cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg}
	m.fl.init(cfg.BankSize)
	return m, nil
}

// Config returns what the manager was made of.
func (m *Manager) Config() Config { return m.cfg }

// Need returns what r asks of each bank.
func (m *Manager) Need(r Request) Need {
	banks := m.cfg.Banks
	if r.Shards != 0 {
		banks = r.Shards
	}
	size := r.Size
	if size > MaxRequest {
		size = MaxRequest
	}
	spb := SizePerBank(size, r.PageSize, banks, m.cfg.Alignment)
	return Need{Banks: banks, SizePerBank: spb, Span: m.Span(spb)}
}

// Span is what the free list reserves for a per-bank size: rounded up to
// the block alignment, at least one block.
func (m *Manager) Span(sizePerBank uint64) uint64 {
	return roundUp(max(sizePerBank, m.cfg.BlockAlign), m.cfg.BlockAlign)
}

// Stats returns the statistics now, as get_statistics would.
func (m *Manager) Stats() Statistics {
	st := Statistics{
		TotalAllocatable: m.cfg.BankSize,
		TotalAllocated:   m.fl.allocated,
		TotalFree:        m.cfg.BankSize - m.fl.allocated,
		LargestFreeBlock: m.fl.largest(),
	}
	if st.TotalAllocated == 0 {
		// Upstream reports the whole list then, whatever its blocks.
		st.TotalFree, st.LargestFreeBlock = m.cfg.BankSize, m.cfg.BankSize
	}
	return st
}

// Classify says why a span per bank cannot be placed given the current
// state, assuming it cannot: larger than a bank, more than the free
// bytes, or else no free block large enough.
func (m *Manager) Classify(span uint64) Cause { return m.Stats().Classify(span) }

// Classify is Manager.Classify in the state st, as Stats gave it.
func (st Statistics) Classify(span uint64) Cause {
	switch {
	case span > st.TotalAllocatable:
		return LargerThanBank
	case span > st.TotalFree:
		return Exhausted
	}
	return Fragmented
}

// Allocate places r where upstream's allocator would: the free block of
// the lowest address (bottom-up) or the highest (top-down) that holds the
// span, at its bottom or its top. It returns the address (Offset
// included) or the failure.
func (m *Manager) Allocate(r Request) (uint64, *Failure) {
	need := m.Need(r)
	fail := func(c Cause) *Failure {
		return &Failure{Cause: c, Need: need, BankSize: m.cfg.BankSize, Stats: m.Stats()}
	}
	if need.Span > m.cfg.BankSize {
		return 0, fail(LargerThanBank)
	}
	st := m.Stats()
	pos, ok := m.fl.allocate(need.Span, r.BottomUp)
	if !ok {
		return 0, fail(m.Classify(need.Span))
	}
	addr := pos + m.cfg.Offset
	if r.Shards == 0 && m.cfg.AddressLimit != 0 && addr < m.cfg.AddressLimit {
		return 0, &Failure{Cause: BelowAddressLimit, Need: need, BankSize: m.cfg.BankSize, Stats: st, Address: addr}
	}
	return addr, nil
}

// Errors of Place and Free.
var (
	ErrOutside  = errors.New("outside the bank")
	ErrOccupied = errors.New("overlaps an allocated block")
	ErrNotFound = errors.New("no allocated block starts there")
)

// Place records a span placed at addr (Offset included): what the
// allocator did, learnt from the traced process. It fails, changing
// nothing, when the span does not lie in one free block (the model does
// not know what the process's allocator holds).
func (m *Manager) Place(addr, span uint64) error {
	if span == 0 || addr < m.cfg.Offset || addr-m.cfg.Offset > m.cfg.BankSize || span > m.cfg.BankSize-(addr-m.cfg.Offset) {
		return ErrOutside
	}
	if !m.fl.place(addr-m.cfg.Offset, span) {
		return ErrOccupied
	}
	return nil
}

// Free releases the block allocated at addr and returns its span. An
// address at which no block was allocated changes nothing (as upstream).
func (m *Manager) Free(addr uint64) (uint64, bool) {
	if addr < m.cfg.Offset || addr-m.cfg.Offset >= m.cfg.BankSize {
		return 0, false
	}
	span, ok := m.fl.free(addr - m.cfg.Offset)
	if !ok {
		return 0, false
	}
	return span, true
}

// Clear frees everything (BankManager::clear, Device::close).
func (m *Manager) Clear() { m.fl.init(m.cfg.BankSize) }

// Live returns the number of allocated blocks.
func (m *Manager) Live() int { return m.fl.used }

// Blocks calls f for every block in address order (addresses with
// Offset), until f returns false.
func (m *Manager) Blocks(f func(addr, size uint64, allocated bool) bool) {
	for _, b := range m.fl.blocks {
		if !f(b.addr+m.cfg.Offset, b.size, b.used) {
			return
		}
	}
}

// Block is one block of a free list, its address relative to the list's
// base (Offset not included).
type Block struct {
	Addr, Size uint64
	Allocated  bool
}

// FromBlocks returns a manager of cfg whose list holds blocks, in address
// order (a bank manager read from a traced process). They must tile
// [0, BankSize) exactly; nothing else is assumed of them.
func FromBlocks(cfg Config, blocks []Block) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg}
	var pos uint64
	m.fl.blocks = make([]block, 0, len(blocks))
	for i, b := range blocks {
		if b.Addr != pos || b.Size == 0 || b.Size > cfg.BankSize-pos {
			return nil, fmt.Errorf("block %d [%#x +%d] does not follow at %#x", i, b.Addr, b.Size, pos)
		}
		m.fl.blocks = append(m.fl.blocks, block{addr: b.Addr, size: b.Size, used: b.Allocated})
		pos += b.Size
	}
	if pos != cfg.BankSize {
		return nil, fmt.Errorf("blocks cover %d of %d bytes", pos, cfg.BankSize)
	}
	m.fl.reindex()
	return m, nil
}

// Holds reports whether an allocated block of span bytes starts at addr
// (Offset included).
func (m *Manager) Holds(addr, span uint64) bool {
	if addr < m.cfg.Offset {
		return false
	}
	i := m.fl.find(addr - m.cfg.Offset)
	return i >= 0 && m.fl.blocks[i].used && m.fl.blocks[i].addr == addr-m.cfg.Offset && m.fl.blocks[i].size == span
}

// AllocatedAt returns the size of the allocated block starting at addr
// (Offset included).
func (m *Manager) AllocatedAt(addr uint64) (uint64, bool) {
	if addr < m.cfg.Offset {
		return 0, false
	}
	i := m.fl.find(addr - m.cfg.Offset)
	if i < 0 || !m.fl.blocks[i].used || m.fl.blocks[i].addr != addr-m.cfg.Offset {
		return 0, false
	}
	return m.fl.blocks[i].size, true
}
