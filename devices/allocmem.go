package devices

// Allocators read from the traced process's memory ("source": "memory"):
// a chip whose bank managers were made before tttrace attached. At the
// attach, the session finds the open chips' managers from the process's
// root of its devices (ttmetal.ReadDevices) and registers each with
// FoundMem; otherwise the first BankManager::allocate_buffer request on a
// manager tttrace did not see made, once its alloc names the chip and
// type, makes a MemWant. Either way the session reads that manager from
// the process (ttmetal.ReadBankManager) and hands the result to
// InstallMem, with the monotonic times [From, To] between which it read.
//
// The read races with the process, which goes on. Every allocator change
// has a record whose time brackets it: an allocation changes the free list
// before its alloc record (track_allocate), a free after its free record
// (track_deallocate). So records are folded into a list read from memory
// by their time: an alloc before From-memGuard is in it already; a free
// before From-memGuard is too (the allocator frees right after the
// record); anything later is applied, and within memGuard of the read it
// is applied only if the list does not show it done already. What does
// not check out makes the type's numbers unknown, with why.

import (
	"fmt"

	"github.com/tttrace/tttrace/alloc"
	"github.com/tttrace/tttrace/events"
)

// memGuard is how far around a read a record is not known to be in it or
// not: far more than the few instructions between a record and the
// allocator's change, far less than the pause of a process between two
// allocations that matters.
const memGuard = 2_000_000 // ns

// MemWant asks for a bank manager to be read from a process's memory.
type MemWant struct {
	Pid     uint32
	Chip    int32
	Type    events.BufferType
	Manager uint64 // BankManager*
}

// MemManager is a bank manager read from memory (ttmetal.MemBankManager
// with the read's times).
type MemManager struct {
	BufferType   int32
	Banks        uint32
	Alignment    uint64
	AddressLimit uint64
	BankSize     uint64
	Offset       uint64
	BlockAlign   uint64
	Blocks       []alloc.Block
	// FromNs, ToNs: CLOCK_MONOTONIC when the read began and ended.
	FromNs, ToNs uint64
}

// memState is what a type's view read from memory keeps.
type memState struct {
	from, to uint64 // 0 while the read is pending
}

// TakeMemWants returns the bank managers to read, and forgets them.
func (l *Ledger) TakeMemWants() []MemWant {
	w := l.memWants
	l.memWants = nil
	return w
}

// wantMem: a request on bank manager ptr, unknown so far, was followed by
// an alloc on chip, type t: the chip's allocator was made before tttrace
// attached; ask for it to be read from memory.
func (p *proc) wantMem(ptr uint64, chip int32, t events.BufferType) {
	if !allocatable(t) || p.hooks.wantMem == nil {
		return
	}
	c := p.chip(chip)
	ca := c.allocator()
	if old := ca.types[t]; old != nil {
		return // known (made under tttrace, or already asked for)
	}
	if p.managers == nil {
		p.managers = make(map[uint64]mgrRef)
	}
	p.managers[ptr] = mgrRef{chip: chip, typ: t}
	ca.types[t] = &typeAlloc{ptr: ptr, mem: &memState{}, why: "being read from the process's memory"}
	p.allocTouch(c, t)
	p.hooks.wantMem(MemWant{Pid: p.pid, Chip: chip, Type: t, Manager: ptr})
}

// FoundMem registers bank manager ptr as chip's type-t manager, found from
// the process's own root of its open chips at attach (before any request
// named it), and returns what to read into it with InstallMem. false: the
// chip's type is known already, or the process may not have one more chip.
func (l *Ledger) FoundMem(pid uint32, chip int32, t events.BufferType, ptr uint64) (MemWant, bool) {
	p := l.proc(pid)
	if !allocatable(t) || ptr == 0 {
		return MemWant{}, false
	}
	if p.chips[chip] == nil {
		limit := p.hooks.maxChips
		if limit <= 0 {
			limit = DefaultMaxChips
		}
		if len(p.chips) >= limit {
			return MemWant{}, false
		}
	}
	c := p.chip(chip)
	ca := c.allocator()
	if ca.types[t] != nil {
		return MemWant{}, false
	}
	if p.managers == nil {
		p.managers = make(map[uint64]mgrRef)
	}
	p.managers[ptr] = mgrRef{chip: chip, typ: t}
	ca.types[t] = &typeAlloc{ptr: ptr, mem: &memState{}, why: "being read from the process's memory"}
	p.allocTouch(c, t)
	return MemWant{Pid: pid, Chip: chip, Type: t, Manager: ptr}, true
}

// MemChips says, for each of chips (found open in pid's memory at attach,
// in order), whether its allocators may be read: a chip the process has
// already, or a new one while it may have one more (--max-chips). Those
// past the bound are not read at all: reading costs what the process
// makes it cost.
func (l *Ledger) MemChips(pid uint32, chips []int32) []bool {
	p := l.proc(pid)
	limit := p.hooks.maxChips
	if limit <= 0 {
		limit = DefaultMaxChips
	}
	room := limit - len(p.chips)
	admit := make([]bool, len(chips))
	added := map[int32]bool{}
	for i, c := range chips {
		switch {
		case p.chips[c] != nil || added[c]:
			admit[i] = true
		case room > 0:
			admit[i], added[c] = true, true
			room--
		}
	}
	return admit
}

// SetRootWhy records why pid's open chips could not be found from its
// root at attach (said by every chip without an allocator view).
func (l *Ledger) SetRootWhy(pid uint32, why string) { l.proc(pid).rootWhy = why }

// InstallMem gives the ledger what reading w's bank manager found (or
// why it could not be read).
func (l *Ledger) InstallMem(w MemWant, m *MemManager, err error) {
	p := l.procs[w.Pid]
	if p == nil {
		return
	}
	ta := p.typeAlloc(w.Chip, w.Type)
	if ta == nil || ta.ptr != w.Manager || ta.mem == nil || ta.mem.to != 0 || ta.m != nil {
		return // the chip's allocator changed since
	}
	c := p.chip(w.Chip)
	p.allocTouch(c, w.Type)
	if err == nil && m.BufferType != int32(w.Type) {
		err = fmt.Errorf("bank manager %#x holds buffer type %d, its buffer was %s", w.Manager, m.BufferType, w.Type)
	}
	var mgr *alloc.Manager
	cfg := alloc.Config{}
	if err == nil {
		cfg = alloc.Config{Banks: m.Banks, BankSize: m.BankSize, Offset: m.Offset, Alignment: m.Alignment,
			BlockAlign: m.BlockAlign, AddressLimit: m.AddressLimit}
		mgr, err = alloc.FromBlocks(cfg, m.Blocks)
	}
	if err != nil {
		ta.why = "the chip's allocator was made before tttrace attached; reading it from the process's memory: " + err.Error()
		ta.mem.to = 1
		return
	}
	ta.why, ta.cfg, ta.m = "", cfg, mgr
	ta.mem.from, ta.mem.to = m.FromNs, m.ToNs
	if ref, ok := p.managers[w.Manager]; ok {
		ref.cfg = cfg
		p.managers[w.Manager] = ref
	}
	if w.Type == events.DRAM || c.alloc.blockAlign == 0 {
		c.alloc.blockAlign = m.BlockAlign
	}
	// Buffers counted before the read (their allocs came before it): the
	// list holds them; their spans are its blocks.
	for i := range p.bufs.slots.len() {
		b := p.bufs.slots.at(uint32(i))
		if !b.live || b.mesh != 0 || b.chip != w.Chip || events.BufferType(b.btype) != w.Type || b.perCore {
			continue
		}
		size, ok := mgr.AllocatedAt(b.addr)
		if !ok {
			ta.lose(fmt.Sprintf("buffer %#x (seq %d) at %#x is not allocated in the list read from memory", b.key, b.seq, b.addr))
			return
		}
		b.span = size
	}
}

// memPlace applies an alloc at ts to a list read from memory; it reports
// whether to place it as for a probed list.
func (ta *typeAlloc) memPlace(ts, addr, span uint64) bool {
	if ta.mem == nil {
		return true
	}
	switch {
	case ts+memGuard < ta.mem.from:
		return false // in the list read
	case ts <= ta.mem.to+memGuard:
		return !ta.m.Holds(addr, span)
	}
	return true
}

// memFree applies a free at ts to a list read from memory; it reports
// whether to free it as for a probed list (false: done here).
func (ta *typeAlloc) memFree(ts, addr uint64) bool {
	if ta.mem == nil {
		return true
	}
	switch {
	case ts+memGuard < ta.mem.from:
		return false
	case ts <= ta.mem.to+memGuard:
		ta.m.Free(addr) // if the list read still holds it
		return false
	}
	return true
}

// unknownFreeMem: a buffer tttrace never saw allocated (allocated before
// it attached) was freed on a chip whose list was read from memory.
func (p *proc) unknownFreeMem(e *events.Event) {
	if e.DeviceKind != events.DeviceChip || !allocatable(e.BufferType) {
		return
	}
	ta := p.typeAlloc(e.Chip, e.BufferType)
	if !ta.exact() || ta.mem == nil {
		return
	}
	p.allocTouch(p.chip(e.Chip), e.BufferType)
	if ta.memFree(e.TsNs, e.Address) {
		if _, ok := ta.m.Free(e.Address); !ok {
			ta.lose(fmt.Sprintf("buffer %#x (seq %d), allocated before tttrace attached: nothing allocated at %#x to free", e.Object, e.Seq, e.Address))
		}
	}
}
