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

// bmLayout is a library's bank manager layout, or why there is none.
type bmLayout struct {
	l   *ttmetal.BankManagerLayout
	err error
}

// ReadBankManager reads the bank manager at ptr in process pid, with the
// layout of the TT-Metal library pid maps (from its DWARF, read once).
func (b *bpfBackend) ReadBankManager(pid uint32, ptr uint64) (*ttmetal.MemBankManager, error) {
	path, err := b.libraryOf(int(pid))
	if err != nil {
		return nil, err
	}
	bl, ok := b.bmLayouts[path]
	if !ok {
		bl = &bmLayout{}
		lib, err := ttmetal.OpenLibrary(path)
		if err != nil {
			bl.err = err
		} else {
			bl.l, bl.err = ttmetal.BankManagerLayoutFromDWARF(lib, b.cfg.Analysis.Debug)
			lib.Close()
		}
		if b.bmLayouts == nil {
			b.bmLayouts = map[string]*bmLayout{}
		}
		b.bmLayouts[path] = bl
	}
	if bl.err != nil {
		return nil, fmt.Errorf("no layout of BankManager: %w", bl.err)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	return ttmetal.ReadBankManager(mem, ptr, bl.l)
}

// rootLayout is a library's root of its open chips: g_instances' address
// and slots (or why there is none), and the walk's layout, read from DWARF
// only once a process has a MetalContext.
type rootLayout struct {
	addr, slots uint64
	symErr      error
	l           *ttmetal.RootLayout
	err         error
	read        bool // l, err set
}

// ReadDevices walks pid's root of its open chips, with the layout of the
// TT-Metal library pid maps (from its symbols and DWARF, read once) and
// that library's load bias in pid. A process with no MetalContext yet has
// no open chip: no DWARF is needed to say so.
func (b *bpfBackend) ReadDevices(pid uint32) ([]ttmetal.MemDevice, error) {
	path, err := b.libraryOf(int(pid))
	if err != nil {
		return nil, err
	}
	rl, ok := b.rootLayouts[path]
	if !ok {
		rl = &rootLayout{}
		lib, err := ttmetal.OpenLibrary(path)
		if err != nil {
			rl.symErr = err
		} else {
			rl.addr, rl.slots, rl.symErr = ttmetal.RootSymbol(lib)
			lib.Close()
		}
		if b.rootLayouts == nil {
			b.rootLayouts = map[string]*rootLayout{}
		}
		b.rootLayouts[path] = rl
	}
	if rl.symErr != nil {
		return nil, rl.symErr
	}
	bias, err := loadBias(int(pid), path)
	if err != nil {
		return nil, err
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	if found, err := ttmetal.AnyContext(mem, rl.addr+bias, rl.slots); err != nil || !found {
		return nil, err
	}
	if !rl.read {
		rl.read = true
		lib, err := ttmetal.OpenLibrary(path)
		if err != nil {
			rl.err = err
		} else {
			rl.l, rl.err = ttmetal.RootLayoutFromDWARF(lib, b.cfg.Analysis.Debug)
			lib.Close()
		}
	}
	if rl.err != nil {
		return nil, rl.err
	}
	return ttmetal.ReadDevices(mem, rl.l.Contexts+bias, rl.l)
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

// libraryOf is the path of a probed library that pid maps.
func (b *bpfBackend) libraryOf(pid int) (string, error) {
	objs, _, err := probes.MappedObjects(pid)
	if err != nil {
		return "", err
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
	return "", fmt.Errorf("pid %d maps none of the %d probed libraries", pid, len(b.attached))
}
