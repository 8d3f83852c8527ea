package session

import (
	"debug/elf"
	"errors"
	"fmt"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/ttmetal"
)

// MemReader is a Backend that can read a traced process's allocators from
// its memory (a chip whose allocator was made before tttrace attached;
// devices/allocmem.go).
type MemReader interface {
	// AllocMem opens pid's memory to read its allocators, every read
	// charged to b (ttmetal.AllocBudget).
	AllocMem(pid uint32, b *ttmetal.AllocBudget) (AllocMem, error)
}

// AllocMem is one process's memory opened to read its allocators.
type AllocMem interface {
	// ReadDevices finds the process's open chips and their bank managers
	// from its own root of its devices (ttmetal.ReadDevices).
	ReadDevices() ([]ttmetal.MemDevice, error)
	// ReadBankManager reads the bank manager at ptr; a free list several
	// managers share is read from the process once (ttmetal.MemWalk).
	ReadBankManager(ptr uint64) (*ttmetal.MemBankManager, error)
	Close() error
}

// memBudget is what reading one process's allocators may still take
// (ttmetal.AllocBudget: the bytes and reads of its memory, the blocks of
// the lists the ledger holds), over all its chips and its whole life in
// tttrace. Once a read goes over it, over says why, and nothing more is
// read from that process: its allocators read from memory are refused
// with that one reason.
type memBudget struct {
	b    ttmetal.AllocBudget
	set  bool
	over string
}

// budget is the process's budget, full at its first use.
func (m *memBudget) budget() *ttmetal.AllocBudget {
	if !m.set {
		m.b, m.set = ttmetal.DefaultAllocBudget(), true
	}
	return &m.b
}

// overBudget says why reading pid's allocators went over its budget (err
// wraps procfs.ErrMemBudget), in words for people, and marks it so.
func (s *session) overBudget(pid uint32, st *procState, err error) string {
	if st.mem.over == "" {
		st.mem.over = fmt.Sprintf("reading the process's allocators from its memory would take more than tttrace allows one process "+
			"(%d MiB in %d reads of its memory, %d blocks of free lists, across its chips): not read (%v)",
			ttmetal.AllocBudgetBytes>>20, ttmetal.AllocBudgetReads, ttmetal.AllocBudgetBlocks, err)
		fmt.Fprintf(s.log, "tttrace: pid %d: %s\n", pid, st.mem.over)
	}
	return st.mem.over
}

// openAllocMem opens pid's memory to read its allocators within its
// budget, or says why not.
func (s *session) openAllocMem(pid uint32) (AllocMem, *procState, error) {
	r, ok := s.be.(MemReader)
	if !ok {
		return nil, nil, errors.New("this backend reads no process memory")
	}
	st := s.procs[pid]
	if st == nil {
		return nil, nil, fmt.Errorf("pid %d is not traced", pid)
	}
	if st.mem.over != "" {
		return nil, st, errors.New(st.mem.over)
	}
	am, err := r.AllocMem(pid, st.mem.budget())
	return am, st, err
}

// readAllocators reads the bank managers the ledger asks for, at once:
// the process goes on changing them (the ledger folds in the records
// around the read by their times).
func (s *session) readAllocators() {
	for _, w := range s.ledger.TakeMemWants() {
		am, st, err := s.openAllocMem(w.Pid)
		if err != nil {
			s.ledger.InstallMem(w, nil, err)
			continue
		}
		from := monotonicNow()
		m, err := am.ReadBankManager(w.Manager)
		to := monotonicNow()
		am.Close()
		if errors.Is(err, procfs.ErrMemBudget) {
			err = errors.New(s.overBudget(w.Pid, st, err))
		}
		s.installMem(w, m, err, from, to)
	}
}

// installMem hands the ledger bank manager m read between from and to (or
// why it could not be read).
func (s *session) installMem(w devices.MemWant, m *ttmetal.MemBankManager, err error, from, to uint64) {
	if err != nil {
		fmt.Fprintf(s.log, "tttrace: pid %d chip %d %s: allocator not read from memory: %v\n", w.Pid, w.Chip, w.Type, err)
		s.ledger.InstallMem(w, nil, err)
		return
	}
	s.ledger.InstallMem(w, &devices.MemManager{BufferType: m.BufferType, Banks: m.Banks, Alignment: m.Alignment, AddressLimit: m.AddressLimit,
		BankSize: m.BankSize, Offset: m.Offset, BlockAlign: m.BlockAlign, Blocks: m.Blocks, FromNs: from, ToNs: to}, nil)
}

// readRoot finds, at attach, the chips pid opened before tttrace attached
// and reads their bank managers, so a chip that allocates nothing after
// the attach has its allocator's state too (docs/ttmetal.md §9, "Finding
// the allocators at attach"). Its probes are attached already: every later
// change has a record, folded in by time around each read. Where the root
// cannot be walked, every chip without a view says why.
//
// What a process can make this cost is bounded: the chips past
// --max-chips are not read at all, everything read is charged to the
// process's budget (memBudget), and a free list several chips share is
// read once. Nothing is installed until every manager is read: a process
// over its budget has no allocator read from memory, and one reason.
func (s *session) readRoot(pid uint32) {
	if _, ok := s.be.(MemReader); !ok {
		return
	}
	am, st, err := s.openAllocMem(pid)
	if err != nil {
		if st != nil && st.mem.over != "" {
			s.ledger.SetRootWhy(pid, st.mem.over)
			return
		}
		fmt.Fprintf(s.log, "tttrace: pid %d: its open chips' allocators not read at attach: %v\n", pid, err)
		s.ledger.SetRootWhy(pid, err.Error())
		return
	}
	defer am.Close()
	devs, err := am.ReadDevices()
	if err != nil {
		if errors.Is(err, procfs.ErrMemBudget) {
			s.ledger.SetRootWhy(pid, s.overBudget(pid, st, err))
			return
		}
		fmt.Fprintf(s.log, "tttrace: pid %d: its open chips' allocators not read at attach: %v\n", pid, err)
		s.ledger.SetRootWhy(pid, err.Error())
		return
	}
	chips := make([]int32, len(devs))
	for i, d := range devs {
		chips[i] = d.Chip
	}
	admit := s.ledger.MemChips(pid, chips)
	type found struct {
		chip     int32
		ptr      uint64
		m        *ttmetal.MemBankManager
		from, to uint64
	}
	var got []found
	failed, firstErr, past := 0, "", 0
	for i, d := range devs {
		if !admit[i] {
			past++
			continue
		}
		for _, ptr := range d.Managers {
			from := monotonicNow()
			m, err := am.ReadBankManager(ptr)
			to := monotonicNow()
			if errors.Is(err, procfs.ErrMemBudget) {
				s.ledger.SetRootWhy(pid, s.overBudget(pid, st, err))
				return
			}
			if err != nil {
				// One line for the first (a missing layout fails them all alike).
				if failed++; failed == 1 {
					firstErr = fmt.Sprintf("bank manager %#x: %v", ptr, err)
					fmt.Fprintf(s.log, "tttrace: pid %d chip %d: bank manager %#x not read from memory: %v\n", pid, d.Chip, ptr, err)
				}
				continue
			}
			if m.BufferType < 0 || m.BufferType >= int32(events.NumBufferTypes) {
				fmt.Fprintf(s.log, "tttrace: pid %d chip %d: bank manager %#x holds buffer type %d\n", pid, d.Chip, ptr, m.BufferType)
				continue
			}
			got = append(got, found{chip: d.Chip, ptr: ptr, m: m, from: from, to: to})
		}
	}
	for _, f := range got {
		if w, ok := s.ledger.FoundMem(pid, f.chip, events.BufferType(f.m.BufferType), f.ptr); ok {
			s.installMem(w, f.m, nil, f.from, f.to)
		}
	}
	if past > 0 {
		fmt.Fprintf(s.log, "tttrace: pid %d: %d open chip(s) past --max-chips: their allocators not read\n", pid, past)
	}
	if failed > 1 {
		fmt.Fprintf(s.log, "tttrace: pid %d: %d more bank managers not read from memory\n", pid, failed-1)
	}
	if failed > 0 {
		s.ledger.SetRootWhy(pid, firstErr)
	}
}

// probedLib is a probed library, for reading its processes' allocators:
// g_instances' link-time address and slots (or why none), from the symbols
// read at attach, and both allocator layouts, read from its DWARF once per
// library on a goroutine started at attach (track): a library's
// DWARF takes long to read, and the records' loop waits for it only when
// a process's allocators are first read, if it is not read by then.
type probedLib struct {
	path        string
	addr, slots uint64
	symErr      error
	ready       chan struct{} // closed once layouts is set
	layouts     ttmetal.AllocatorLayouts
}

// allocatorLayouts reads a library's allocator layouts (a variable for
// the tests, which count the reads).
var allocatorLayouts = ttmetal.AllocatorLayoutsFromDWARF

// track records lib, just probed at path, and starts reading its
// allocator layouts in the background; the goroutine owns lib and closes
// it. It reports false, and leaves lib to the caller, for a file tracked
// already. The reads take turns (b.parse): one library's DWARF in memory
// at a time.
func (b *bpfBackend) track(k procfs.FileKey, path string, lib *ttmetal.Library) bool {
	if _, ok := b.attached[k]; ok {
		return false
	}
	p := &probedLib{path: path, ready: make(chan struct{})}
	p.addr, p.slots, p.symErr = ttmetal.RootSymbol(lib)
	if b.attached == nil {
		b.attached = map[procfs.FileKey]*probedLib{}
		b.parse = make(chan struct{}, 1)
	}
	b.attached[k] = p
	dbg, parse := b.cfg.Analysis.Debug, b.parse
	go func() {
		defer lib.Close()
		parse <- struct{}{}
		p.layouts = allocatorLayouts(lib, dbg)
		<-parse
		close(p.ready)
	}()
	return true
}

// allocLayouts are p's allocator layouts, waiting for their read if it
// is still going on.
func (p *probedLib) allocLayouts() *ttmetal.AllocatorLayouts {
	<-p.ready
	return &p.layouts
}

// AllocMem opens pid's memory to read its allocators with the layouts of
// the TT-Metal library pid maps (from its DWARF, read once), within b.
func (b *bpfBackend) AllocMem(pid uint32, budget *ttmetal.AllocBudget) (AllocMem, error) {
	p, err := b.libraryOf(int(pid))
	if err != nil {
		return nil, err
	}
	mem, err := procfs.OpenMem(int(pid), &budget.Mem)
	if err != nil {
		return nil, err
	}
	return &procAllocMem{mem: mem, walk: ttmetal.NewMemWalk(mem, &budget.Blocks), lib: p,
		bias: func() (uint64, error) { return loadBias(int(pid), p.path) }}, nil
}

// procAllocMem is a process's memory opened to read its allocators with
// its library's layouts.
type procAllocMem struct {
	mem  *procfs.Mem
	walk *ttmetal.MemWalk
	lib  *probedLib
	// bias is what the process added to the library's link-time addresses.
	bias func() (uint64, error)
}

// ReadBankManager reads the bank manager at ptr, with the layout of the
// library's DWARF.
func (a *procAllocMem) ReadBankManager(ptr uint64) (*ttmetal.MemBankManager, error) {
	ls := a.lib.allocLayouts()
	if ls.BankManagerErr != nil {
		return nil, fmt.Errorf("no layout of BankManager: %w", ls.BankManagerErr)
	}
	return a.walk.ReadBankManager(ptr, ls.BankManager)
}

// ReadDevices walks the process's root of its open chips, with the layout
// of the library (from its symbols and DWARF, read once) and its load bias
// in the process. A process with no MetalContext yet has no open chip: no
// DWARF is needed to say so, and none is waited for.
func (a *procAllocMem) ReadDevices() ([]ttmetal.MemDevice, error) {
	p := a.lib
	if p.symErr != nil {
		return nil, p.symErr
	}
	bias, err := a.bias()
	if err != nil {
		return nil, err
	}
	if found, err := ttmetal.AnyContext(a.mem, p.addr+bias, p.slots); err != nil || !found {
		return nil, err
	}
	ls := p.allocLayouts()
	if ls.RootErr != nil {
		return nil, ls.RootErr
	}
	return ttmetal.ReadDevices(a.mem, ls.Root.Contexts+bias, ls.Root)
}

func (a *procAllocMem) Close() error { return a.mem.Close() }

// loadBias is what pid added to the link-time addresses of the library at
// path: the start of its mapping of the file's first loadable segment,
// less that segment's page-aligned address.
func loadBias(pid int, path string) (uint64, error) {
	want, err := procfs.KeyOf(path)
	if err != nil {
		return 0, err
	}
	lib, err := ttmetal.OpenLibrary(path)
	if err != nil {
		return 0, err
	}
	defer lib.Close()
	var first *elf.Prog
	for _, p := range lib.ELF().Progs {
		if p.Type == elf.PT_LOAD {
			first = p
			break
		}
	}
	if first == nil {
		return 0, fmt.Errorf("%s has no loadable segment", path)
	}
	const page = 4096
	maps, err := procfs.Maps(pid)
	if err != nil {
		return 0, err
	}
	keys := map[string]procfs.FileKey{}
	for _, m := range maps {
		if !m.File() || m.Deleted() || m.Offset != first.Off&^(page-1) {
			continue
		}
		k, ok := keys[m.Path]
		if !ok {
			k, _ = procfs.KeyOf(procfs.Path(pid, m.Path))
			keys[m.Path] = k
		}
		if k == want && m.Start >= first.Vaddr&^(page-1) {
			return m.Start - first.Vaddr&^(page-1), nil
		}
	}
	return 0, fmt.Errorf("pid %d maps no loadable segment of %s", pid, path)
}

// libraryOf is a probed library that pid maps.
func (b *bpfBackend) libraryOf(pid int) (*probedLib, error) {
	objs, _, err := procfs.MappedObjects(pid)
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		k, err := procfs.KeyOf(o)
		if err != nil {
			continue
		}
		if p, ok := b.attached[k]; ok {
			return p, nil
		}
	}
	return nil, fmt.Errorf("pid %d maps none of the %d probed libraries", pid, len(b.attached))
}
