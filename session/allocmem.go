package session

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"

	allocmodel "github.com/tttrace/tttrace/alloc"
	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/probes"
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/ttmetal"
)

// MemReader is a Backend that can read a TT-Metal bank manager from a
// traced process's memory (a chip whose allocator was made before tttrace
// attached; devices/allocmem.go).
type MemReader interface {
	ReadBankManager(pid uint32, ptr uint64) (*ttmetal.MemBankManager, error)
}

// RootReader is a Backend that can find a traced process's open chips
// and their bank managers from the process's own root of its devices
// (ttmetal.ReadDevices).
type RootReader interface {
	ReadDevices(pid uint32) ([]ttmetal.MemDevice, error)
}

// readAllocators reads the bank managers the ledger asks for, at once:
// the process goes on changing them (the ledger folds in the records
// around the read by their times).
func (s *session) readAllocators() {
	for _, w := range s.ledger.TakeMemWants() {
		r, ok := s.be.(MemReader)
		if !ok {
			s.ledger.InstallMem(w, nil, errors.New("this backend reads no process memory"))
			continue
		}
		from := monotonicNow()
		m, err := r.ReadBankManager(w.Pid, w.Manager)
		s.installMem(w, m, err, from, monotonicNow())
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
	mm := &devices.MemManager{BufferType: m.BufferType, Banks: m.Banks, Alignment: m.Alignment, AddressLimit: m.AddressLimit,
		BankSize: m.BankSize, Offset: m.Offset, BlockAlign: m.BlockAlign, FromNs: from, ToNs: to}
	mm.Blocks = make([]allocmodel.Block, len(m.Blocks))
	for i, b := range m.Blocks {
		mm.Blocks[i] = allocmodel.Block{Addr: b.Addr, Size: b.Size, Allocated: b.Allocated}
	}
	s.ledger.InstallMem(w, mm, nil)
}

// readRoot finds, at attach, the chips pid opened before tttrace attached
// and reads their bank managers, so a chip that allocates nothing after
// the attach has its allocator's state too (docs/ttmetal.md §9, "Finding
// the allocators at attach"). Its probes are attached already: every later
// change has a record, folded in by time around each read. Where the root
// cannot be walked, every chip without a view says why.
func (s *session) readRoot(pid uint32) {
	rr, ok := s.be.(RootReader)
	mr, ok2 := s.be.(MemReader)
	if !ok || !ok2 {
		return
	}
	devs, err := rr.ReadDevices(pid)
	if err != nil {
		fmt.Fprintf(s.log, "tttrace: pid %d: its open chips' allocators not read at attach: %v\n", pid, err)
		s.ledger.SetRootWhy(pid, err.Error())
		return
	}
	failed, firstErr := 0, ""
	for _, d := range devs {
		for _, ptr := range d.Managers {
			from := monotonicNow()
			m, err := mr.ReadBankManager(pid, ptr)
			to := monotonicNow()
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
			if w, ok := s.ledger.FoundMem(pid, d.Chip, events.BufferType(m.BufferType), ptr); ok {
				s.installMem(w, m, nil, from, to)
			}
		}
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
func (b *bpfBackend) track(k probes.FileKey, path string, lib *ttmetal.Library) bool {
	if _, ok := b.attached[k]; ok {
		return false
	}
	p := &probedLib{path: path, ready: make(chan struct{})}
	p.addr, p.slots, p.symErr = ttmetal.RootSymbol(lib)
	if b.attached == nil {
		b.attached = map[probes.FileKey]*probedLib{}
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

// ReadBankManager reads the bank manager at ptr in process pid, with the
// layout of the TT-Metal library pid maps (from its DWARF, read once).
func (b *bpfBackend) ReadBankManager(pid uint32, ptr uint64) (*ttmetal.MemBankManager, error) {
	p, err := b.libraryOf(int(pid))
	if err != nil {
		return nil, err
	}
	ls := p.allocLayouts()
	if ls.BankManagerErr != nil {
		return nil, fmt.Errorf("no layout of BankManager: %w", ls.BankManagerErr)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	return ttmetal.ReadBankManager(mem, ptr, ls.BankManager)
}

// ReadDevices walks pid's root of its open chips, with the layout of the
// TT-Metal library pid maps (from its symbols and DWARF, read once) and
// that library's load bias in pid. A process with no MetalContext yet has
// no open chip: no DWARF is needed to say so, and none is waited for.
func (b *bpfBackend) ReadDevices(pid uint32) ([]ttmetal.MemDevice, error) {
	p, err := b.libraryOf(int(pid))
	if err != nil {
		return nil, err
	}
	if p.symErr != nil {
		return nil, p.symErr
	}
	bias, err := loadBias(int(pid), p.path)
	if err != nil {
		return nil, err
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	if found, err := ttmetal.AnyContext(mem, p.addr+bias, p.slots); err != nil || !found {
		return nil, err
	}
	ls := p.allocLayouts()
	if ls.RootErr != nil {
		return nil, ls.RootErr
	}
	return ttmetal.ReadDevices(mem, ls.Root.Contexts+bias, ls.Root)
}

// loadBias is what pid added to the link-time addresses of the library at
// path: the start of its mapping of the file's first loadable segment,
// less that segment's page-aligned address.
func loadBias(pid int, path string) (uint64, error) {
	want, err := probes.KeyOf(path)
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
	keys := map[string]probes.FileKey{}
	for _, m := range maps {
		if !m.File() || m.Deleted() || m.Offset != first.Off&^(page-1) {
			continue
		}
		k, ok := keys[m.Path]
		if !ok {
			k, _ = probes.KeyOf(procfs.Path(pid, m.Path))
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
	objs, _, err := probes.MappedObjects(pid)
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		k, err := probes.KeyOf(o)
		if err != nil {
			continue
		}
		if p, ok := b.attached[k]; ok {
			return p, nil
		}
	}
	return nil, fmt.Errorf("pid %d maps none of the %d probed libraries", pid, len(b.attached))
}
