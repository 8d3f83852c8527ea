package ttmetal

// A bank manager read from the traced process's memory (docs/ttmetal.md
// §9, "Reading a bank manager from memory"): when tttrace attaches after a
// chip's allocator was made, a BankManager* found from the process's root
// of its open chips at attach (allocroot.go), or else that of the first
// BankManager::allocate_buffer call it sees on each type, leads to the
// manager's members, its allocator 0 (a FreeListOpt) and that free list's
// blocks. Member offsets come from DWARF only (BankManager,
// allocator::Algorithm, allocator::FreeListOpt, in namespace tt::tt_metal
// or tt::tt_metal::v0); a build without them is refused with what is
// missing. Container layouts are the libstdc++ / boost ABI facts of
// docs/ttmetal.md §9. Process memory is hostile: every read is bounded,
// the block chain is walked at most once per slot and must tile the bank;
// a walk over one process's allocators (MemWalk) reads through a budget
// (procfs.Mem, AllocBudget) and reads a list several managers share once.

import (
	"debug/dwarf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/tttrace/tttrace/alloc"
	"github.com/tttrace/tttrace/elfx"
	"github.com/tttrace/tttrace/procfs"
)

// BankManagerLayout are the member offsets a bank manager is read with.
type BankManagerLayout struct {
	// BankManager
	BufferType, BankMap, AddressLimit, Alignment, Allocators int64
	// allocator::Algorithm (FreeListOpt's base, at offset 0 of it)
	MaxSize, Offset, MinAlloc, FreeAlign, Shrink int64
	// allocator::FreeListOpt's SoA vectors
	BlockAddress, BlockSize, BlockPrev, BlockNext, BlockAllocated, MetaAllocated int64
}

// Limits on what is read from a process.
const (
	// MaxMemBlocks bounds a free list's slots (a chip's list holds one
	// block per live buffer and hole: far fewer).
	MaxMemBlocks = 1 << 20
	// maxAllocators bounds a bank manager's allocators (1, or 1 + the L1
	// banks in HYBRID mode).
	maxAllocators = 4096
)

// AllocBudget bounds what reading one process's allocators from its
// memory may take, across all its chips and all its life in tttrace: the
// bytes and reads of its memory (charged by procfs.Mem) and the blocks of
// the free lists handed to the ledger (a list counted once per chip it is
// read for). Each field is what is left.
type AllocBudget struct {
	Mem    procfs.MemBudget
	Blocks int64
}

// The default AllocBudget, sized so that reading a process's allocators
// takes a few tens of milliseconds at most (it is read on the records'
// goroutine while the process runs on) and a few tens of MB, while an
// honest process fits many times over (its lists hold one block per live
// buffer and per hole: a few thousand per chip; reading a chip's four
// managers takes about 120 reads).
const (
	AllocBudgetBytes  = 8 << 20
	AllocBudgetReads  = 8192
	AllocBudgetBlocks = 1 << 18
)

// DefaultAllocBudget is a full budget for one process.
func DefaultAllocBudget() AllocBudget {
	return AllocBudget{Mem: procfs.MemBudget{Bytes: AllocBudgetBytes, Reads: AllocBudgetReads}, Blocks: AllocBudgetBlocks}
}

// AllocatorLayouts are what reading a process's allocators from its memory
// needs from one library, each with why it is missing: the bank manager's
// layout (ReadBankManager) and the root of the open chips (ReadDevices).
type AllocatorLayouts struct {
	BankManager    *BankManagerLayout
	BankManagerErr error
	Root           *RootLayout
	RootErr        error
}

// AllocatorLayoutsFromDWARF reads both layouts from lib's symbols and
// DWARF (or its separate debug file under dbg). The DWARF, the slow part,
// is found, opened and read once for both. A malformed file is refused,
// never a panic: the session runs this on a goroutine of its own.
func AllocatorLayoutsFromDWARF(lib *Library, dbg elfx.Debug) (ls AllocatorLayouts) {
	var perr error
	defer func() {
		if perr != nil {
			ls = AllocatorLayouts{BankManagerErr: perr, RootErr: perr}
		}
	}()
	defer elfx.Recover(&perr, lib.Path)
	var addr, slots uint64
	addr, slots, ls.RootErr = RootSymbol(lib)
	d, err := openDWARF(lib, dbg)
	if err != nil {
		ls.BankManagerErr = err
		if ls.RootErr == nil {
			ls.RootErr = err
		}
		return ls
	}
	ls.BankManager, ls.BankManagerErr = bankManagerLayout(d)
	if ls.RootErr == nil {
		ls.Root, ls.RootErr = rootLayout(d)
		if ls.Root != nil {
			ls.Root.Contexts, ls.Root.Slots = addr, slots
		}
	}
	return ls
}

// openDWARF reads lib's DWARF (or that of its separate debug file under
// dbg), or says why it cannot. The file is closed on return: the DWARF's
// sections are read into memory.
func openDWARF(lib *Library, dbg elfx.Debug) (*dwarf.Data, error) {
	df := findDebugInfo(lib, dbg)
	if df.path == "" {
		return nil, fmt.Errorf("no DWARF for %s (looked at: %s)", lib.Path, strings.Join(df.checked, "; "))
	}
	ef, err := elfx.Open(df.path, elfx.Limits{})
	if err != nil {
		return nil, err
	}
	defer ef.Close()
	d, err := elfx.DWARF(ef.File, ef.Limits())
	if err != nil {
		return nil, fmt.Errorf("read DWARF of %s: %w", df.path, err)
	}
	return d, nil
}

// bmClass is one class of the scan: its namespace below tt::tt_metal
// ("" or "allocator") and the members wanted, each with the start of its
// type's name that the reader relies on ("" for any scalar).
type bmClass struct {
	ns, name string
	members  []bmMember
	// all, when set, is given every member of the class (after members
	// are checked), with the DWARF it was read from.
	all   func(d *dwarf.Data, m dwarfMember)
	found bool
}

type bmMember struct {
	name, typePrefix string
	size             int64 // wanted size of the type; 0: any
	dst              *int64
	// typeName, when set, receives the member's type name.
	typeName *string
}

func bankManagerClasses(l *BankManagerLayout) []*bmClass {
	return []*bmClass{
		{ns: "", name: "BankManager", members: []bmMember{
			{name: "buffer_type_", dst: &l.BufferType},
			{name: "bank_id_to_bank_offset_", typePrefix: "unordered_map<", size: 56, dst: &l.BankMap},
			{name: "interleaved_address_limit_", size: 8, dst: &l.AddressLimit},
			{name: "alignment_bytes_", size: 4, dst: &l.Alignment},
			{name: "allocators_", typePrefix: "SmallVector<", dst: &l.Allocators},
		}},
		{ns: "allocator", name: "Algorithm", members: []bmMember{
			{name: "max_size_bytes_", size: 8, dst: &l.MaxSize},
			{name: "offset_bytes_", size: 8, dst: &l.Offset},
			{name: "min_allocation_size_", size: 8, dst: &l.MinAlloc},
			{name: "alignment_", size: 8, dst: &l.FreeAlign},
			{name: "shrink_size_", size: 8, dst: &l.Shrink},
		}},
		{ns: "allocator", name: "FreeListOpt", members: []bmMember{
			{name: "block_address_", typePrefix: "vector<", size: 24, dst: &l.BlockAddress},
			{name: "block_size_", typePrefix: "vector<", size: 24, dst: &l.BlockSize},
			{name: "block_prev_block_", typePrefix: "vector<", size: 24, dst: &l.BlockPrev},
			{name: "block_next_block_", typePrefix: "vector<", size: 24, dst: &l.BlockNext},
			{name: "block_is_allocated_", typePrefix: "vector<", size: 24, dst: &l.BlockAllocated},
			{name: "meta_block_is_allocated_", typePrefix: "vector<", size: 24, dst: &l.MetaAllocated},
		}},
	}
}

// bankManagerLayout walks the compile units for the three definitions.
func bankManagerLayout(d *dwarf.Data) (*BankManagerLayout, error) {
	l := &BankManagerLayout{}
	if err := scanClasses(d, bankManagerClasses(l)); err != nil {
		return nil, err
	}
	return l, nil
}

// scanClasses walks the compile units for the definitions of classes,
// setting their members' offsets; it says what is missing or not of the
// expected type.
func scanClasses(d *dwarf.Data, classes []*bmClass) error {
	var problems []string
	r := d.Reader()
	remaining := len(classes)
	var walk func(path []string) error
	walk = func(path []string) error {
		for remaining > 0 {
			e, err := r.Next()
			if err != nil {
				return err
			}
			if e == nil || e.Tag == 0 {
				return nil
			}
			name, _ := e.Val(dwarf.AttrName).(string)
			if e.Tag == dwarf.TagNamespace && e.Children && bmNamespaceStep(path, name) {
				if err := walk(append(path, name)); err != nil {
					return err
				}
				continue
			}
			decl, _ := e.Val(dwarf.AttrDeclaration).(bool)
			var c *bmClass
			if (e.Tag == dwarf.TagClassType || e.Tag == dwarf.TagStructType) && !decl && e.Children {
				ns, ok := bmNamespace(path)
				for _, k := range classes {
					if ok && !k.found && k.ns == ns && k.name == name {
						c = k
					}
				}
			}
			if c == nil {
				if e.Children {
					r.SkipChildren()
				}
				continue
			}
			members, err := readMembers(r)
			if err != nil {
				return err
			}
			c.found = true
			remaining--
			byName := map[string]dwarfMember{}
			for _, m := range members {
				byName[m.name] = m
			}
			for _, w := range c.members {
				m, ok := byName[w.name]
				if !ok {
					problems = append(problems, c.name+"::"+w.name+" missing")
					continue
				}
				tn, size := dwarfTypeName(d, m.typ)
				if w.typePrefix != "" && !strings.HasPrefix(bareTypeName(tn), w.typePrefix) {
					problems = append(problems, fmt.Sprintf("%s::%s is a %q, not a %s...>", c.name, w.name, tn, w.typePrefix))
					continue
				}
				if w.size != 0 && size != w.size {
					problems = append(problems, fmt.Sprintf("%s::%s is %d bytes, want %d", c.name, w.name, size, w.size))
					continue
				}
				*w.dst = m.off
				if w.typeName != nil {
					*w.typeName = tn
				}
			}
			if c.all != nil {
				for _, m := range members {
					c.all(d, m)
				}
			}
		}
		return nil
	}
	if err := eachUnit(r, func() bool { return remaining > 0 }, func() error { return walk(nil) }); err != nil {
		return err
	}
	for _, c := range classes {
		if !c.found {
			where := "tt::tt_metal::" + c.name
			if c.ns != "" {
				where = "tt::tt_metal::" + c.ns + "::" + c.name
			}
			problems = append(problems, "no definition of "+where)
		}
	}
	if len(problems) > 0 {
		return errors.New("DWARF: " + strings.Join(problems, "; "))
	}
	return nil
}

// bareTypeName drops the namespaces before a template's name
// ("std::vector<...>" -> "vector<...>", "ttsl::SmallVector<" ->
// "SmallVector<"), and takes boost's small_vector for SmallVector.
func bareTypeName(n string) string {
	for _, kw := range []string{"class ", "struct "} {
		n = strings.TrimPrefix(n, kw)
	}
	head, _, _ := strings.Cut(n, "<")
	if i := strings.LastIndex(head, "::"); i >= 0 {
		n = n[i+2:]
	}
	if strings.HasPrefix(n, "small_vector<") {
		n = "SmallVector<" + n[len("small_vector<"):]
	}
	return n
}

// bmNamespaceStep: namespace name inside path leads to tt::tt_metal,
// tt::tt_metal::v0 or their allocator namespace.
func bmNamespaceStep(path []string, name string) bool {
	if ttNamespaceStep(path, name) {
		return true
	}
	return ttPath(path) && name == "allocator"
}

// bmNamespace: the namespace below tt::tt_metal(::v0) path is in.
func bmNamespace(path []string) (string, bool) {
	if ttPath(path) {
		return "", true
	}
	if len(path) >= 3 && path[len(path)-1] == "allocator" && ttPath(path[:len(path)-1]) {
		return "allocator", true
	}
	return "", false
}

// MemBankManager is a bank manager as read from a process.
type MemBankManager struct {
	BufferType   int32
	Banks        uint32
	Alignment    uint64 // alignment_bytes_
	AddressLimit uint64 // interleaved_address_limit_
	Allocators   uint32 // its free lists (more than 1: sub-devices or HYBRID)
	// Allocator 0's free list.
	BankSize, Offset, BlockAlign uint64
	// Blocks: in address order, tiling [0, BankSize), each address
	// relative to the list's base, as the ledger's model takes them
	// (alloc.FromBlocks).
	Blocks []alloc.Block
}

// ReadBankManager reads the bank manager at ptr from mem (a process's
// memory, read at virtual addresses) with layout l. Every value is
// checked; an error says what did not check out. Its free list is bounded
// by MaxMemBlocks slots only: a walk over a process's allocators reads
// them through a MemWalk.
func ReadBankManager(mem io.ReaderAt, ptr uint64, l *BankManagerLayout) (*MemBankManager, error) {
	return NewMemWalk(mem, nil).ReadBankManager(ptr, l)
}

// MemWalk reads one process's bank managers from mem, which bounds the
// bytes and reads (a procfs.Mem), under a bound of its own on the blocks
// it hands out. Each manager read hands its list's blocks out once more
// (the ledger models one list per chip and type), but a free list several
// managers point to (all of a process's chips may share one) is read from
// the process once per walk.
type MemWalk struct {
	mem io.ReaderAt
	// blocks left to hand out; nil: no bound but MaxMemBlocks per list.
	blocks *int64
	lists  map[uint64]*memList // by the free list's address
}

// memList is a free list read in a walk, or why it could not be.
type memList struct {
	bankSize, offset, blockAlign uint64
	blocks                       []alloc.Block
	err                          error
}

// NewMemWalk reads from mem, handing out at most *blocks blocks in all
// (nil: no such bound); *blocks is what is left after each read.
func NewMemWalk(mem io.ReaderAt, blocks *int64) *MemWalk {
	return &MemWalk{mem: mem, blocks: blocks}
}

// ReadBankManager reads the bank manager at ptr with layout l. Every
// value is checked; an error says what did not check out. Over the blocks
// bound, the error wraps procfs.ErrMemBudget, as does a read over mem's
// budget.
func (w *MemWalk) ReadBankManager(ptr uint64, l *BankManagerLayout) (*MemBankManager, error) {
	rd := memReader{mem: w.mem}
	m := &MemBankManager{}
	bt := rd.u32(ptr + uint64(l.BufferType))
	m.BufferType = int32(bt)
	// libstdc++ _Hashtable: the element count at 24.
	banks := rd.u64(ptr + uint64(l.BankMap) + 24)
	m.Alignment = uint64(rd.u32(ptr + uint64(l.Alignment)))
	m.AddressLimit = rd.u64(ptr + uint64(l.AddressLimit))
	// ttsl::SmallVector (llvm::SmallVector in 2026, boost's small_vector
	// before): the data pointer at 0, the element count at 8 (a uint32_t
	// for llvm's of 8-byte elements, the low half of boost's size_t).
	data := rd.u64(ptr + uint64(l.Allocators))
	n := uint64(rd.u32(ptr + uint64(l.Allocators) + 8))
	if rd.err != nil {
		return nil, fmt.Errorf("BankManager at %#x: %w", ptr, rd.err)
	}
	switch {
	case banks == 0 || banks > 1<<20:
		return nil, fmt.Errorf("BankManager at %#x: %d banks", ptr, banks)
	case n == 0 || n > maxAllocators:
		return nil, fmt.Errorf("BankManager at %#x: %d allocators", ptr, n)
	case m.Alignment == 0 || m.Alignment > 1<<20:
		return nil, fmt.Errorf("BankManager at %#x: alignment %d", ptr, m.Alignment)
	}
	m.Banks, m.Allocators = uint32(banks), uint32(n)
	fl := rd.u64(data) // unique_ptr<Algorithm>: one pointer
	if rd.err != nil || fl == 0 {
		return nil, fmt.Errorf("BankManager at %#x: allocator 0 unreadable or null (%v)", ptr, rd.err)
	}
	list := w.lists[fl]
	if list == nil {
		list = w.readList(fl, l)
		if w.lists == nil {
			w.lists = map[uint64]*memList{}
		}
		w.lists[fl] = list
	}
	if list.err != nil {
		return nil, list.err
	}
	if w.blocks != nil {
		if int64(len(list.blocks)) > *w.blocks {
			return nil, fmt.Errorf("%w: free list at %#x holds %d blocks, %d left to hold", procfs.ErrMemBudget, fl, len(list.blocks), *w.blocks)
		}
		*w.blocks -= int64(len(list.blocks))
	}
	m.BankSize, m.Offset, m.BlockAlign, m.Blocks = list.bankSize, list.offset, list.blockAlign, list.blocks
	return m, nil
}

// readList reads the free list at fl: its size, offset, alignment and
// blocks, walked over its slots.
func (w *MemWalk) readList(fl uint64, l *BankManagerLayout) *memList {
	rd := memReader{mem: w.mem}
	m := &memList{}
	fail := func(format string, args ...any) *memList {
		return &memList{err: fmt.Errorf(format, args...)}
	}
	m.bankSize = rd.u64(fl + uint64(l.MaxSize))
	m.offset = rd.u64(fl + uint64(l.Offset))
	m.blockAlign = rd.u64(fl + uint64(l.MinAlloc))
	align := rd.u64(fl + uint64(l.FreeAlign))
	shrink := rd.u64(fl + uint64(l.Shrink))
	if rd.err != nil {
		return fail("free list at %#x: %w", fl, rd.err)
	}
	switch {
	case m.bankSize == 0 || m.bankSize > 1<<44:
		return fail("free list at %#x: size %d", fl, m.bankSize)
	case m.blockAlign == 0 || m.blockAlign > 1<<20 || align != m.blockAlign:
		return fail("free list at %#x: min allocation %d, alignment %d (tttrace models them equal)", fl, m.blockAlign, align)
	case shrink != 0:
		return fail("free list at %#x is shrunk by %d bytes (not modelled)", fl, shrink)
	}
	vec := func(off int64, elem uint64) ([]byte, uint64) {
		begin := rd.u64(fl + uint64(off))
		end := rd.u64(fl + uint64(off) + 8)
		if rd.err != nil {
			return nil, 0
		}
		if end < begin || (end-begin)%elem != 0 || (end-begin)/elem > MaxMemBlocks {
			rd.err = fmt.Errorf("vector at %#x: [%#x, %#x) is no array of %d-byte elements under the limit", fl+uint64(off), begin, end, elem)
			return nil, 0
		}
		return rd.bytes(begin, end-begin), (end - begin) / elem
	}
	addrs, na := vec(l.BlockAddress, 8)
	sizes, ns := vec(l.BlockSize, 8)
	prevs, np := vec(l.BlockPrev, 8)
	nexts, nn := vec(l.BlockNext, 8)
	allocated, nal := vec(l.BlockAllocated, 1)
	meta, nm := vec(l.MetaAllocated, 1)
	if rd.err != nil {
		return fail("free list at %#x: %w", fl, rd.err)
	}
	if ns != na || np != na || nn != na || nal != na || nm != na {
		return fail("free list at %#x: its block vectors differ in length (%d %d %d %d %d %d)", fl, na, ns, np, nn, nal, nm)
	}
	at := func(b []byte, i uint64) uint64 { return binary.LittleEndian.Uint64(b[i*8:]) }
	// The chain starts at the live slot with no previous block.
	head := int64(-1)
	for i := range na {
		if meta[i] != 0 && int64(at(prevs, i)) == -1 {
			if head >= 0 {
				return fail("free list at %#x: two first blocks (%d, %d)", fl, head, i)
			}
			head = int64(i)
		}
	}
	if head < 0 {
		return fail("free list at %#x: no first block among %d slots", fl, na)
	}
	var pos uint64
	prev := int64(-1)
	for i, steps := head, uint64(0); i != -1; steps++ {
		if i < 0 || uint64(i) >= na || steps >= na || meta[i] == 0 {
			return fail("free list at %#x: chain broken at slot %d", fl, i)
		}
		if w.blocks != nil && int64(len(m.blocks)) >= *w.blocks {
			return fail("%w: free list at %#x holds more than the %d blocks left to hold", procfs.ErrMemBudget, fl, *w.blocks)
		}
		u := uint64(i)
		a, s := at(addrs, u), at(sizes, u)
		if a != pos || s == 0 || s > m.bankSize-pos || int64(at(prevs, u)) != prev {
			return fail("free list at %#x: block %d [%#x +%d] does not follow at %#x", fl, i, a, s, pos)
		}
		m.blocks = append(m.blocks, alloc.Block{Addr: a, Size: s, Allocated: allocated[u] != 0})
		pos += s
		prev, i = i, int64(at(nexts, u))
	}
	if pos != m.bankSize {
		return fail("free list at %#x: blocks cover %d of %d bytes", fl, pos, m.bankSize)
	}
	return m
}

// memReader reads little-endian values, keeping the first error.
type memReader struct {
	mem io.ReaderAt
	err error
}

func (r *memReader) bytes(addr, n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if addr > 1<<56 || n > 1<<56 {
		r.err = fmt.Errorf("address %#x +%d out of range", addr, n)
		return nil
	}
	// In pieces, so that what is held grows only with what was read: a
	// bounded reader (procfs.Mem) refuses a read past its budget before
	// a crafted length is allocated whole.
	b := make([]byte, 0, min(n, memChunk))
	for uint64(len(b)) < n {
		c := min(n-uint64(len(b)), memChunk)
		at := len(b)
		b = append(b, make([]byte, c)...)
		if _, err := r.mem.ReadAt(b[at:], int64(addr)+int64(at)); err != nil {
			r.err = fmt.Errorf("read %d bytes at %#x: %w", n, addr, err)
			return nil
		}
	}
	return b
}

// memChunk is the most read from a process's memory at once.
const memChunk = 1 << 20

func (r *memReader) u64(addr uint64) uint64 {
	if b := r.bytes(addr, 8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *memReader) u32(addr uint64) uint32 {
	if b := r.bytes(addr, 4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}
